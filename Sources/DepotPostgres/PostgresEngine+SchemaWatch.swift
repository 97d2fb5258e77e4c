import DepotCore
import Foundation

// Following schema changes made by other processes on the same schema.
//
// A process whose registry still holds an entity's old description would send rows in the
// old layout (refused by PostgreSQL with its own words, or cast silently) and decode new
// rows as old ones. Every schema change Depot makes (registration, a migration step's
// rewrite) raises the version in `depot_meta` (key `schema`) in its own transaction; every
// transaction reads it in the round trip of its first statement (a probe pipelined after
// BEGIN; single-statement reads carry it in autocommit), so checking costs no round trip.
// When the version moved past the one the registry was verified at, the registry takes the
// stored descriptions (an entity another process migrated gets a new generation, and
// handles of its old layout are refused with `schemaMismatch`) and the work runs again.
extension PostgresEngine {
    /// How often one operation follows schema changes before it gives up with the
    /// `schemaMismatch` it met (counted in its runs: see `PostgresEngine.prepareRetry`).
    static let schemaReloads = 8

    /// The check every connection of the store runs on the probe's answer.
    func checkSchemaVersion(_ connection: PGConnection, _ version: String?) throws(DepotError) {
        guard version != state.withLockedValue({ $0.verifiedVersion }) else { return }
        connection.schemaReloadNeeded = true
        throw DepotError(.schemaMismatch, "The schema \(options.schema) was changed by another process; the operation runs again with the new schema.")
    }

    /// The schema version recorded in `depot_meta`, read on the writer (in its current
    /// transaction when it has one).
    func readSchemaVersion() throws(DepotError) -> String? {
        let result = try writer.query(PGConnection.schemaProbe, [], "Reading the schema version")
        return result.rowCount > 0 ? result.text(0, 0) : nil
    }

    /// Raises the schema version inside the writer's locked transaction, after taking in
    /// other processes' changes the registry has not seen (the new version must not hide
    /// them); returns the new version.
    func raiseSchemaVersion(into current: inout EntityRegistry<RegisteredEntity>) throws(DepotError) -> String {
        if try readSchemaVersion() != state.withLockedValue({ $0.verifiedVersion }) {
            try reloadDescriptions(into: &current)
        }
        let result = try writer.query(
            "INSERT INTO depot_meta (key, value) VALUES ('schema', '1') ON CONFLICT (key) DO UPDATE SET value = (depot_meta.value::bigint + 1)::text RETURNING value",
            [], "Recording the schema change")
        guard result.rowCount > 0 else { throw DepotError(.storeCorrupted, "depot_meta in schema \(options.schema) did not return the new schema version.") }
        return result.text(0, 0)
    }

    /// Updates `current` from depot_entities, read on the writer: every registered entity
    /// whose stored description differs takes the stored one; one no longer stored is
    /// removed.
    func reloadDescriptions(into current: inout EntityRegistry<RegisteredEntity>) throws(DepotError) {
        let rows = try writer.query("SELECT name, description FROM depot_entities", [], "Reading the stored entities")
        var stored: [String: EntityDescription] = [:]
        for row in 0..<rows.rowCount {
            let name = rows.text(row, 0)
            stored[name] = try Self.decodeDescription(rows, row, 1, name: name)
        }
        for (handle, _) in current.all {
            let name = handle.name
            guard let description = stored[name] else {
                current.remove(named: name)
                continue
            }
            guard description != handle.entity else { continue }
            current.set(description, RegisteredEntity(entity: description))
            log.logger.info("PostgreSQL registry reloaded: another process changed the schema", metadata: ["depot.entity": .string(name)])
        }
    }

    /// Reloads the registry and the verified version in a transaction of the writer's own.
    /// Runs on the writer's lane.
    func reloadSchemaNow() throws(DepotError) {
        healthy(writer)
        try writer.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "Reloading the schema")
        do throws(DepotError) {
            let version = try readSchemaVersion()
            var current = tables
            try reloadDescriptions(into: &current)
            try writer.execute("COMMIT", "Reloading the schema")
            let updated = current
            state.withLockedValue { s in
                s.tables = updated
                s.verifiedVersion = version
            }
        } catch {
            if writer.isInTransaction { try? writer.execute("ROLLBACK") }
            throw error
        }
    }
}
