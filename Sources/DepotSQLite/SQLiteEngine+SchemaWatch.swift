import CSQLite
import DepotCore
import DepotSQL
import Foundation

// Following schema changes made by other processes (or other stores on the same file).
//
// SQLite re-prepares a statement whose table changed and runs it against the new layout;
// a process whose registry still holds the old description would then write rows in the
// old layout into the new table, or decode new rows as old ones. The file's schema cookie
// changes with every schema change, so the registry is verified against it: the writer
// reads it when each write transaction begins, an explicit read transaction when it
// begins, and a reader connection after the first step of a statement SQLite prepared or
// re-prepared (a statement prepared before the change is always re-prepared at its next
// run, and one prepared after it is new), so single-statement reads pay nothing while the
// schema stands still. When the cookie moved, the registry takes the stored descriptions:
// an entity another process migrated gets a new generation, and handles of its old layout
// are refused with `schemaMismatch` (a read asks the store runtime to run it again first,
// with the reloaded registry: `EngineRetry`).
extension SQLiteEngine {
    /// Verifies the registry against the file's schema cookie in the writer's current
    /// transaction, reloading the stored descriptions when the cookie moved. Runs on the
    /// writer's lane.
    func verifySchemaOnWriter() throws(DepotError) {
        let cookie = try writer.schemaCookie()
        guard cookie != state.withLockedValue({ $0.verifiedCookie }) else { return }
        var current = tables
        try reloadDescriptions(on: writer, into: &current)
        state.withLockedValue { s in
            s.tables.registry = current
            s.verifiedCookie = cookie
        }
    }

    /// Updates `current` from depot_entities, read in `connection`'s current transaction:
    /// every registered entity whose stored description differs takes the stored one (a
    /// new generation, so handles of the old layout are refused); one no longer stored is
    /// removed.
    func reloadDescriptions(on connection: Connection, into current: inout EntityRegistry<RegisteredEntity>) throws(DepotError) {
        let statement = try connection.prepare("SELECT name, description FROM depot_entities", cached: false)
        var stored: [String: EntityDescription] = [:]
        while try connection.step(statement, "Reading depot_entities") {
            guard case .string(let name) = try connection.column(0, of: statement, as: .string) else { continue }
            stored[name] = try Self.decodeDescription(try connection.column(1, of: statement, as: .string), of: name, file: path)
        }
        for (handle, _) in current.all {
            let name = handle.name
            guard let description = stored[name] else {
                current.remove(named: name)
                log.logger.info("SQLite registry reloaded: another process removed the entity", metadata: ["depot.entity": .string(name)])
                continue
            }
            guard description != handle.entity else { continue }
            let serial = state.withLockedValue { s in
                defer { s.nextSerial += 1 }
                return s.nextSerial
            }
            current.set(description, RegisteredEntity(entity: description, serial: serial))
            log.logger.info("SQLite registry reloaded: another process changed the schema", metadata: ["depot.entity": .string(name)])
        }
    }

    /// The watch a reader connection runs after the first step of a statement SQLite
    /// prepared or re-prepared: when the file's schema moved past the verified one, the
    /// read stops, and its transaction asks for the registry to be reloaded (on the writer's
    /// lane) and for the read to run again.
    func watchSchema(_ connection: Connection) throws(DepotError) {
        let cookie = try connection.schemaCookie()
        guard cookie != state.withLockedValue({ $0.verifiedCookie }) else { return }
        connection.schemaMoved = true
        throw DepotError(.schemaMismatch, "The schema of \(path) was changed by another process while this read ran; the read runs again with the new schema.")
    }

    /// A stored description, decoded and validated; `storeCorrupted` when it cannot be.
    static func decodeDescription(_ value: Value, of name: String, file: String) throws(DepotError) -> EntityDescription {
        try StoredDescription.decode(value, of: name, in: file)
    }
}
