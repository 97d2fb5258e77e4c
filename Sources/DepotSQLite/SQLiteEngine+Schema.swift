import CSQLite
public import DepotCore
import DepotSQL
import Foundation
import NIOConcurrencyHelpers

// Registration: creating tables and indexes, additive migrations, the stored descriptions.
extension SQLiteEngine {
    // MARK: Registration

    /// Creates or migrates the tables of `entities`, and records their descriptions in
    /// `depot_entities`, in one transaction on the writer.
    public func register(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        try registerNow(entities)
    }

    func registerNow(_ entities: [EntityDescription]) throws(DepotError) -> [EntityHandle] {
        for entity in entities { try entity.validate() }
        var current = tables
        try Relationships.validate(entities, registered: { current[$0]?.entity })
        if entities.allSatisfy({ current[$0.name]?.entity.serves($0) ?? false }) {
            return entities.compactMap { current.handle(named: $0.name) }
        }
        if options.readOnly { throw DepotError.readOnly(storeDescription) }
        let serial = state.withLockedValue { s in
            defer { s.nextSerial += entities.count }
            return s.nextSerial
        }
        // Off while the schema changes (it cannot change inside a transaction): SQLite
        // refuses to add a REFERENCES column with a default other than NULL while it is on.
        // A defaulted reference is checked below instead.
        try writer.execute("PRAGMA foreign_keys = OFF")
        let cookie: Int64
        do throws(DepotError) {
            cookie = try registerInTransaction(entities, current: &current, serial: serial)
        } catch {
            try? writer.execute("PRAGMA foreign_keys = ON")
            throw error
        }
        // Not `try?`: a writer left without foreign keys would stop SQLite's own check.
        try writer.execute("PRAGMA foreign_keys = ON")
        state.withLockedValue { s in
            s.tables.registry = current
            s.verifiedCookie = cookie
        }
        return entities.compactMap { current.handle(named: $0.name) }
    }

    /// Returns the schema cookie after the changes, which the registry is then verified at.
    private func registerInTransaction(
        _ entities: [EntityDescription], current: inout EntityRegistry<RegisteredEntity>, serial: Int
    ) throws(DepotError) -> Int64 {
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        do throws(DepotError) {
            // Changes other processes made since the registry was verified first: the
            // cookie read after this transaction's own changes must not hide them.
            if try writer.schemaCookie() != state.withLockedValue({ $0.verifiedCookie }) {
                try reloadDescriptions(on: writer, into: &current)
            }
            for (offset, declared) in entities.enumerated() {
                // Another process may have registered or migrated the entity since this
                // store read depot_entities at open; under the write lock the file is the
                // truth, so refresh the entry from it before deciding.
                if !(current[declared.name]?.entity.serves(declared) ?? false), let stored = try storedDescription(of: declared.name) {
                    current.set(stored, RegisteredEntity(entity: stored, serial: serial + offset))
                }
                var entity = declared
                if let existing = current[entity.name]?.entry {
                    // Indexes the declaration leaves out stay until a migration step drops them.
                    entity = declared.keepingIndexes(of: existing.entity)
                    if existing.entity == entity { continue }
                    let migration = try SchemaMigration.plan(from: existing.entity, to: entity)
                    try migrate(migration, registered: { name in entities.first { $0.name == name } ?? current[name]?.entity })
                    try checkDefaultedReferences(migration, registered: { current[$0]?.entity })
                    log.schemaMigrated(migration)
                } else {
                    try create(entity, registered: { name in entities.first { $0.name == name } ?? current[name]?.entity })
                    log.schemaCreated(entity)
                }
                try storeDescription(entity)
                current.set(entity, RegisteredEntity(entity: entity, serial: serial + offset))
            }
            let cookie = try writer.schemaCookie()
            try writer.run(key: Keys.commit, "COMMIT")
            return cookie
        } catch {
            rollback(writer)
            throw error
        }
    }

    func create(_ entity: EntityDescription, registered: (String) -> EntityDescription?) throws(DepotError) {
        // SQLite names are case-insensitive: refuse to adopt a table Depot did not create.
        let statement = try writer.prepare("SELECT name FROM sqlite_master WHERE name = ?1 COLLATE NOCASE", cached: false)
        try writer.bind(.string(entity.name), at: 1, in: statement)
        if try writer.step(statement, "Looking up table \(entity.name)") {
            let existing = try writer.column(0, of: statement, as: .string)
            throw DepotError(.invalidSchema, "The database already has a table or index named \(existing.debugLiteral) that Depot did not create for entity \(entity.name) (SQLite compares names without case). Rename the entity.")
        }
        try writer.execute(DDL.createTable(entity, registered: registered))
        for attribute in entity.attributes where DDL.wantsIndex(attribute, in: entity) {
            try Self.ensureIndex(attribute, in: entity, on: writer)
        }
        for index in entity.indexes {
            try writer.execute(DDL.createIndex(index, in: entity))
        }
    }

    /// Builds a declared index over the table's existing records, saying in the log when
    /// the build starts and ends. A unique index that existing records already break is
    /// refused with `schemaMismatch` (the registration's transaction then changes nothing).
    static func buildIndex(_ index: IndexDescription, in entity: EntityDescription, on connection: Connection, log: StoreLog) throws(DepotError) {
        log.indexBuildStarted(index, of: entity.name)
        do {
            try connection.execute(DDL.createIndex(index, in: entity))
        } catch let error where index.isUnique && error.code == .duplicateKey {
            throw DepotError(.schemaMismatch, "The unique index (\(index.summary)) cannot be added to \(entity.name): existing records already share its values (\(error.message)). Change those records first, or declare the index without unique.", nativeCode: error.nativeCode)
        }
        var records = 0
        if let count = try connection.scalarText("SELECT count(*) FROM \(quoted(entity.name))"), let number = Int(count) { records = number }
        log.indexBuilt(index, of: entity.name, records: records)
    }

    /// The indexes Depot made for `attribute` on the entity's table, by the current name or
    /// the one earlier versions gave them. Looked up by table as well as name: a legacy
    /// name can belong to another entity's table (`a_b` + `c` and `a` + `b_c`).
    static func existingIndexes(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) -> [String] {
        let statement = try connection.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 COLLATE NOCASE AND name IN (?2, ?3)", cached: false)
        try connection.bind(.string(entity.name), at: 1, in: statement)
        try connection.bind(.string(DDL.indexName(entity: entity.name, attribute: attribute.name)), at: 2, in: statement)
        try connection.bind(.string(DDL.legacyIndexName(entity: entity.name, attribute: attribute.name)), at: 3, in: statement)
        var names: [String] = []
        while try connection.step(statement, "Looking up the index of \(entity.name).\(attribute.name)") {
            if case .string(let name) = try connection.column(0, of: statement, as: .string) { names.append(name) }
        }
        return names
    }

    /// Creates the index of `attribute` unless its table already has it (under either name).
    static func ensureIndex(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) {
        if try existingIndexes(attribute, in: entity, on: connection).isEmpty {
            try connection.execute(DDL.createIndex(attribute, in: entity))
        }
    }

    /// Drops the index of `attribute`, whichever name it has.
    static func dropIndex(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) {
        for name in try existingIndexes(attribute, in: entity, on: connection) {
            try connection.execute("DROP INDEX \(quoted(name))")
        }
    }

    func migrate(_ migration: SchemaMigration, registered: (String) -> EntityDescription?) throws(DepotError) {
        let entity = migration.declared
        for attribute in migration.addedAttributes {
            let (sql, needsFill) = DDL.addColumn(attribute, to: entity, registered: registered)
            try writer.execute(sql)
            if needsFill {
                let fill = try writer.prepare("UPDATE \(quoted(entity.name)) SET \(quoted(attribute.name)) = ?1", cached: false)
                try writer.bind(SchemaMigration.fillValue(for: attribute), at: 1, in: fill)
                while try writer.step(fill, "Filling \(entity.name).\(attribute.name) with its default") {}
            }
        }
        for attribute in migration.droppedIndexes {
            try Self.dropIndex(attribute, in: entity, on: writer)
        }
        for attribute in migration.addedIndexes where DDL.wantsIndex(attribute, in: entity) {
            try Self.ensureIndex(attribute, in: entity, on: writer)
        }
        // Dropped first: an index that only became unique (or stopped being) keeps its name.
        for index in migration.droppedCompositeIndexes {
            try writer.execute(DDL.dropIndex(index, in: migration.stored))
        }
        for index in migration.addedCompositeIndexes {
            try Self.buildIndex(index, in: entity, on: writer, log: log)
        }
    }

    /// Refuses a new reference whose default names no record while the entity has records.
    func checkDefaultedReferences(_ migration: SchemaMigration, registered: (String) -> EntityDescription?) throws(DepotError) {
        let entity = migration.declared
        func exists(_ sql: String, _ value: Value?) throws(DepotError) -> Bool {
            let statement = try writer.prepare("SELECT EXISTS (\(sql))", cached: false)
            if let value { try writer.bind(value, at: 1, in: statement) }
            guard try writer.step(statement, "Checking the defaults of new references in \(entity.name)") else { return false }
            return try writer.column(0, of: statement, as: .int64) == .int(1)
        }
        for attribute in migration.defaultedReferences {
            guard let reference = attribute.reference, let value = attribute.defaultValue else { continue }
            guard try exists("SELECT 1 FROM \(quoted(entity.name))", nil) else { return }
            guard let target = registered(reference.entity),
                try exists("SELECT 1 FROM \(quoted(target.name)) WHERE \(quoted(target.primaryKey.name)) = ?1", value)
            else {
                throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name)
            }
        }
    }

    /// The description of `name` stored in depot_entities, read inside the current
    /// transaction.
    func storedDescription(of name: String) throws(DepotError) -> EntityDescription? {
        let statement = try writer.prepare("SELECT description FROM depot_entities WHERE name = ?1", cached: false)
        try writer.bind(.string(name), at: 1, in: statement)
        guard try writer.step(statement, "Reading the description of \(name)") else { return nil }
        return try StoredDescription.decode(writer.column(0, of: statement, as: .string), of: name, in: path)
    }

    func storeDescription(_ entity: EntityDescription) throws(DepotError) {
        let json = try StoredDescription.encode(entity)
        let statement = try writer.prepare("INSERT OR REPLACE INTO depot_entities (name, description) VALUES (?1, ?2)", cached: false)
        try writer.bind(.string(entity.name), at: 1, in: statement)
        try writer.bind(.string(json), at: 2, in: statement)
        while try writer.step(statement, "Storing the description of \(entity.name)") {}
    }
}

extension SQLiteEngine {
    /// Creates the new table beside the old one, copies the transformed rows into it, drops
    /// the old table and renames the new one, then rebuilds the indexes and the stored
    /// description and records the step, all in one transaction (foreign keys off meanwhile,
    /// as for any schema change; the new table's references are checked with
    /// `foreign_key_check` before the commit).
    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row,
        ledger: EntityHandle
    ) throws -> EntityHandle? {
        try rewriteNow(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
    }

    private func rewriteNow(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
    ) throws -> EntityHandle? {
        var current = tables
        guard let oldHandle = current.handle(named: name) else { throw DepotError.notRegistered(name) }
        let links = current.relationships.incoming.values.flatMap { $0 }
        try SchemaRewrite.check(renaming: oldHandle.entity, to: entity, registered: { current[$0]?.entity }, relationships: links)
        let serial = state.withLockedValue { s in
            defer { s.nextSerial += 2 }
            return s.nextSerial
        }
        try writer.execute("PRAGMA foreign_keys = OFF")
        let outcome: Int64?
        do {
            outcome = try rewriteInTransaction(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger, current: current, oldHandle: oldHandle, serial: serial)
        } catch {
            try? writer.execute("PRAGMA foreign_keys = ON")
            throw error
        }
        // Not `try?`: a writer left without foreign keys would stop SQLite's own check.
        try writer.execute("PRAGMA foreign_keys = ON")
        guard let cookie = outcome else { return nil }
        if name != entity.name { current.remove(named: name) }
        let handle = current.set(entity, RegisteredEntity(entity: entity, serial: serial + 1))
        state.withLockedValue { s in
            s.tables.registry = current
            s.verifiedCookie = cookie
        }
        return handle
    }

    private func rewriteInTransaction(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle,
        current: EntityRegistry<RegisteredEntity>, oldHandle: EntityHandle, serial: Int
    ) throws -> Int64? {
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        do {
            // Under the write lock, the file is the truth. Another process running the same
            // migration may have applied this step since the ledger was read: then it is
            // done, and runs nowhere twice.
            let ledgerCheck = SQLiteTransaction(connection: writer, tables: SharedRegistry(current), writable: true)
            let applied = try ledgerCheck.fetchRow(ledger, key: ledgerRow[value: ledger.entity.primaryKeyIndex]) { _ in }
            ledgerCheck.isFinished = true
            if applied {
                rollback(writer)
                return nil
            }
            // Another process may have changed the entity otherwise: rows read with this
            // process's description of it would be misread.
            if try writer.schemaCookie() != state.withLockedValue({ $0.verifiedCookie }) {
                var stored = current
                try reloadDescriptions(on: writer, into: &stored)
                if stored[name]?.entity != oldHandle.entity {
                    throw DepotError(.schemaMismatch, "Another process changed the schema of \(name) in \(path) since this migration read it; nothing was changed. Run the migration again.")
                }
            }
            var rows: [Row] = []
            let reading = SQLiteTransaction(connection: writer, tables: SharedRegistry(current), writable: true)
            try reading.fetch(Query(all: oldHandle), reserve: { rows.reserveCapacity($0) }) { rows.append(try $0.row()) }
            reading.isFinished = true
            // The new table under a name of Depot's own, with the new columns and constraints.
            var staging = entity
            staging.name = "depot_rewrite"
            try writer.execute("DROP TABLE IF EXISTS \(quoted(staging.name))")
            try writer.execute(DDL.createTable(staging, registered: { current[$0]?.entity }))
            var local = current
            let stagingHandle = local.set(staging, RegisteredEntity(entity: staging, serial: serial))
            let writing = SQLiteTransaction(connection: writer, tables: SharedRegistry(local), writable: true)
            for row in rows { try writing.insert(try transform(row), into: stagingHandle) }
            writing.isFinished = true
            try writer.execute("DROP TABLE \(quoted(name))")
            try writer.execute("ALTER TABLE \(quoted(staging.name)) RENAME TO \(quoted(entity.name))")
            for attribute in entity.attributes where DDL.wantsIndex(attribute, in: entity) {
                try Self.ensureIndex(attribute, in: entity, on: writer)
            }
            // The old table's indexes went with it; the declared ones are built over the
            // rewritten rows.
            for index in entity.indexes {
                try Self.buildIndex(index, in: entity, on: writer, log: log)
            }
            if name != entity.name {
                let forget = try writer.prepare("DELETE FROM depot_entities WHERE name = ?1", cached: false)
                try writer.bind(.string(name), at: 1, in: forget)
                while try writer.step(forget, "Forgetting the description of \(name)") {}
            }
            try storeDescription(entity)
            let check = try writer.prepare("SELECT rowid FROM pragma_foreign_key_check(?1)", cached: false)
            try writer.bind(.string(entity.name), at: 1, in: check)
            if try writer.step(check, "Checking the references of the rewritten \(entity.name)") {
                throw DepotError(.missingReference, "After the rewrite, a record of \(entity.name) would refer to a record that does not exist; nothing was changed.")
            }
            let recording = SQLiteTransaction(connection: writer, tables: SharedRegistry(current), writable: true)
            try recording.insert(ledgerRow, into: ledger)
            recording.isFinished = true
            let cookie = try writer.schemaCookie()
            try writer.run(key: Keys.commit, "COMMIT")
            return cookie
        } catch {
            rollback(writer)
            throw error
        }
    }
}
