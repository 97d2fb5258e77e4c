import DepotCore
import Foundation

// Following schema changes made by other processes on the same schema.
//
// A process whose registry still holds an entity's old description would send rows in the
// old layout (refused by PostgreSQL with its own words, or cast silently) and decode new
// rows as old ones. Every schema change Depot makes (registration, a migration step's
// rewrite) raises the version in `depot_meta` (key `schema`) in its own transaction, and
// says so on the store's notification channel when it commits. A write reads the version
// in the round trip of its first statement (a probe pipelined after BEGIN; an autocommit
// write compares it inside its own statement), so checking costs no round trip. When the
// version moved past the one the registry was verified at, the registry takes the stored
// descriptions (an entity another process migrated gets a new generation, and handles of
// its old layout are refused with `schemaMismatch`) and the work runs again.
//
// A read on the primary sends the probe only when the listener may have missed or has
// heard a change: until it listens, after it reconnects, after each schema notification,
// until a probe sent after it passes (``schemaNotices``, ``schemaNoticesChecked``). A
// read between another process's commit and its notification reaching this store finds
// the old layout in PostgreSQL's answer when the change touched what it reads — a column
// of another type (the result's column types are checked against the registry's), a
// column or table gone (SQLSTATE 42703, 42P01) — and then runs again with the probe, so
// it is refused as one after the notification would be. A change that leaves every
// column it reads as it was (an attribute added, an index) lets it answer in the old
// layout, as it would have answered a moment earlier. Reads on a standby always probe:
// the notification comes from the primary, before the standby has replayed the change.
extension PostgresEngine {
    /// The SQLSTATEs of a statement written for another layout of its table: an undefined
    /// table, column or operator (a column of another type), a datatype mismatch, a cached
    /// plan whose result changed.
    static let schemaShapedStates: Set<String> = ["42P01", "42703", "42883", "42804", "0A000"]

    /// Whether a read on `connection` must carry the schema probe; when it must, notes on
    /// the connection what the probe will vouch for.
    func readNeedsProbe(_ connection: PGConnection, after retry: EngineRetry?) -> Bool {
        let notices = schemaNotices.load(ordering: .acquiring)
        if retry == .schemaChanged || connection.onStandby || !listening.load(ordering: .acquiring)
            || notices != schemaNoticesChecked.load(ordering: .acquiring)
        {
            connection.probeNotices = notices
            return true
        }
        return false
    }

    /// Something the listener heard (or did not hear) may mean the schema moved: the next
    /// reads probe.
    func noteSchemaNotice() {
        schemaNotices.wrappingAdd(1, ordering: .releasing)
    }

    /// A probe sent when ``schemaNotices`` was `notices` found the registry current.
    private func noteSchemaChecked(_ notices: UInt64) {
        var current = schemaNoticesChecked.load(ordering: .relaxed)
        while current < notices {
            let (exchanged, original) = schemaNoticesChecked.compareExchange(
                expected: current, desired: notices, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
    }

    /// How often one operation follows schema changes before it gives up with the
    /// `schemaMismatch` it met (counted in its runs: see `PostgresEngine.prepareRetry`).
    static let schemaReloads = 8

    /// The check every connection of the store runs on the probe's answer.
    func checkSchemaVersion(_ connection: PGConnection, _ version: String?) throws(DepotError) {
        guard version != state.withLockedValue({ $0.verifiedVersion }) else {
            noteSchemaChecked(connection.probeNotices)
            return
        }
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
        let version = result.text(0, 0)
        // Heard by the other processes' listeners when, and only when, the change commits.
        try writer.query(
            Self.notifySQL, [.text(channel), .text(Self.schemaPayload(instance: instance, version: version))],
            "Telling other processes of the schema change")
        return version
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
