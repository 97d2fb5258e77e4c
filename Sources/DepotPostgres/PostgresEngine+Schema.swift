public import DepotCore
import DepotSQL
import Foundation
import NIOConcurrencyHelpers

// Registration: tables, indexes and additive migrations in one transaction under the
// schema's advisory lock, so two servers starting with the same new schema apply it once;
// schema rewrites for migration steps.
extension PostgresEngine {
    /// Creates or migrates the tables of `entities` on the writer, in one transaction under
    /// the schema's advisory lock.
    public func register(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        healthy(writer)
        return try registerNow(entities)
    }

    func registerNow(_ entities: [EntityDescription]) throws(DepotError) -> [EntityHandle] {
        for entity in entities {
            try entity.validate()
            try PGDDL.checkNames(entity)
        }
        var current = tables
        try Relationships.validate(entities, registered: { current[$0]?.entity })
        if entities.allSatisfy({ current[$0.name]?.entity.serves($0) ?? false }) {
            return entities.compactMap { current.handle(named: $0.name) }
        }
        if options.readOnly { throw DepotError.readOnly(storeDescription) }
        var version: String?
        try lockedTransaction("Registering entities") { () throws(DepotError) in
            // Changes other processes made since the registry was verified first: the
            // version raised below must not hide them.
            version = try readSchemaVersion()
            if version != state.withLockedValue({ $0.verifiedVersion }) {
                try reloadDescriptions(into: &current)
            }
            var changed = false
            var created: [EntityDescription] = []
            for declared in entities {
                var entity = declared
                // Another process may have registered or migrated the entity: under the
                // lock the database is the truth.
                if let stored = try storedDescription(of: entity.name) {
                    if current[entity.name]?.entity != stored {
                        current.set(stored, RegisteredEntity(entity: stored))
                    }
                    // Indexes the declaration leaves out stay until a migration step drops them.
                    entity = declared.keepingIndexes(of: stored)
                    if stored == entity { continue }
                    let migration = try SchemaMigration.plan(from: stored, to: entity)
                    // Before the foreign key exists, which would refuse the default with
                    // PostgreSQL's words rather than Depot's.
                    try checkDefaultedReferences(migration, registered: { current[$0]?.entity })
                    try migrate(migration, registered: { name in entities.first { $0.name == name } ?? current[name]?.entity })
                    changed = true
                    log.schemaMigrated(migration)
                } else {
                    try create(entity)
                    changed = true
                    created.append(entity)
                    log.schemaCreated(entity)
                }
                try storeDescription(entity)
                current.set(entity, RegisteredEntity(entity: entity))
            }
            for entity in created {
                for statement in PGDDL.addForeignKeys(entity, registered: { name in entities.first { $0.name == name } ?? current[name]?.entity }) {
                    try writer.execute(statement, "Adding the references of \(entity.name)")
                }
            }
            if changed { version = try raiseSchemaVersion(into: &current) }
        }
        let verified = version
        state.withLockedValue { s in
            s.tables = current
            s.verifiedVersion = verified
        }
        return entities.compactMap { current.handle(named: $0.name) }
    }

    /// Runs `body` in a transaction holding the schema's advisory lock.
    func lockedTransaction<T>(_ what: String, _ body: () throws -> T) throws -> T {
        // Read committed, as before the writer's sessions defaulted to serializable: DDL
        // and the advisory lock serialize schema changes already.
        try writer.execute("BEGIN ISOLATION LEVEL READ COMMITTED", what)
        do {
            try writer.query("SELECT pg_advisory_xact_lock($1)", [.int(Self.lockKey(options.schema))], prepare: true, "Locking the schema \(options.schema)")
            let result = try body()
            try writer.execute("COMMIT", what)
            // Standbys serve no read before they replayed the change.
            noteSchemaChange()
            return result
        } catch {
            if writer.isInTransaction { try? writer.execute("ROLLBACK") }
            throw error
        }
    }

    func lockedTransaction(_ what: String, _ body: () throws(DepotError) -> Void) throws(DepotError) {
        do {
            try lockedTransaction(what) { () throws -> Void in try body() }
        } catch let error as DepotError {
            throw error
        } catch {
            throw DepotError(.backend, "\(what): \(error)")
        }
    }

    func create(_ entity: EntityDescription) throws(DepotError) {
        let existing = try writer.query(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relname = $1",
            [.text(entity.name)], "Looking up table \(entity.name)")
        if existing.rowCount > 0 {
            throw DepotError(.invalidSchema, "The schema \(options.schema) already has a table or index named \(entity.name) that Depot did not create. Rename the entity, or use another schema.")
        }
        for statement in PGDDL.createTable(entity) {
            try writer.execute(statement, "Creating the table of \(entity.name)")
        }
        for index in entity.indexes {
            try writer.execute(PGDDL.createIndex(index, in: entity), "Creating the index (\(index.summary)) of \(entity.name)")
        }
    }

    /// Builds a declared index over the table's existing records, saying in the log when
    /// the build starts and ends. A unique index that existing records already break is
    /// refused with `schemaMismatch` (the registration's transaction then changes nothing).
    func buildIndex(_ index: IndexDescription, in entity: EntityDescription) throws(DepotError) {
        log.indexBuildStarted(index, of: entity.name)
        do {
            try writer.execute(PGDDL.createIndex(index, in: entity), "Building the index (\(index.summary)) of \(entity.name)")
        } catch let error where index.isUnique && error.code == .duplicateKey {
            throw DepotError(.schemaMismatch, "The unique index (\(index.summary)) cannot be added to \(entity.name): existing records already share its values (\(error.message)). Change those records first, or declare the index without unique.")
        }
        let count = try writer.query("SELECT count(*) FROM \(quoted(entity.name))", [], "Counting the records of \(entity.name)")
        log.indexBuilt(index, of: entity.name, records: count.rowCount > 0 ? Int(count.int64(0, 0)) : 0)
    }

    func migrate(_ migration: SchemaMigration, registered: (String) -> EntityDescription?) throws(DepotError) {
        let entity = migration.declared
        let table = quoted(entity.name)
        for attribute in migration.addedAttributes {
            let column = quoted(attribute.name)
            // Added without constraints, filled with a bound value (DDL takes no parameters,
            // and a literal would not be exact for every type), then constrained.
            try writer.execute("ALTER TABLE \(table) ADD COLUMN \(column) \(PGDDL.columnType(attribute.type))", "Adding \(entity.name).\(attribute.name)")
            let fill = SchemaMigration.fillValue(for: attribute)
            if !fill.isNull {
                var param = PGParam.value(fill)
                param.oid = PostgresTransaction.oid(attribute.type)
                try writer.query("UPDATE \(table) SET \(column) = $1", [param], "Filling \(entity.name).\(attribute.name) with its default")
            }
            if !attribute.isOptional {
                try writer.execute("ALTER TABLE \(table) ALTER COLUMN \(column) SET NOT NULL", "Adding \(entity.name).\(attribute.name)")
            }
            if attribute.isUnique {
                try writer.execute("ALTER TABLE \(table) ADD CONSTRAINT \(quoted(PGDDL.uniqueName(entity: entity.name, attribute: attribute.name))) UNIQUE (\(column))")
            }
            for statement in PGDDL.addForeignKey(attribute, of: entity.name, registered: registered) + PGDDL.referenceComment(attribute, in: entity) {
                try writer.execute(statement, "Adding the reference \(entity.name).\(attribute.name)")
            }
        }
        for attribute in migration.droppedIndexes {
            try writer.execute(PGDDL.dropIndex(attribute, in: entity), "Dropping the index of \(entity.name).\(attribute.name)")
        }
        for attribute in migration.addedIndexes where PGDDL.wantsIndex(attribute, in: entity) {
            try writer.execute(PGDDL.createIndex(attribute, in: entity), "Indexing \(entity.name).\(attribute.name)")
        }
        // Dropped first: an index that only became unique (or stopped being) keeps its name.
        for index in migration.droppedCompositeIndexes {
            try writer.execute(PGDDL.dropIndex(index, in: migration.stored), "Dropping the index (\(index.summary)) of \(entity.name)")
        }
        for index in migration.addedCompositeIndexes {
            try buildIndex(index, in: entity)
        }
    }

    /// Refuses a new reference whose default names no record while the entity has records.
    func checkDefaultedReferences(_ migration: SchemaMigration, registered: (String) -> EntityDescription?) throws(DepotError) {
        let entity = migration.declared
        for attribute in migration.defaultedReferences {
            guard let reference = attribute.reference, let value = attribute.defaultValue else { continue }
            guard try writer.query("SELECT 1 FROM \(quoted(entity.name)) LIMIT 1", [], "Checking \(entity.name)").rowCount > 0 else { return }
            guard let target = registered(reference.entity),
                try writer.query(
                    "SELECT 1 FROM \(quoted(target.name)) WHERE \(quoted(target.primaryKey.name)) = $1", [.value(value)],
                    "Checking the default of \(entity.name).\(attribute.name)"
                ).rowCount > 0
            else {
                throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name)
            }
        }
    }

    func storedDescription(of name: String) throws(DepotError) -> EntityDescription? {
        let result = try writer.query("SELECT description FROM depot_entities WHERE name = $1", [.text(name)], "Reading the description of \(name)")
        guard result.rowCount > 0 else { return nil }
        return try Self.decodeDescription(result, 0, 0, name: name)
    }

    func storeDescription(_ entity: EntityDescription) throws(DepotError) {
        let json = try StoredDescription.encode(entity)
        try writer.query(
            "INSERT INTO depot_entities (name, description) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description",
            [.text(entity.name), .text(json)], "Storing the description of \(entity.name)")
    }
}

extension PostgresEngine {
    /// Builds the new table beside the old one, copies the transformed rows into it, drops
    /// the old table and renames the new one, restores the foreign keys of the entities
    /// that refer to it, rebuilds the indexes and the stored description and records the
    /// step: one transaction under the schema's advisory lock, so a failure anywhere (a
    /// conversion that throws, a duplicate, a dangling reference at commit) changes nothing.
    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row,
        ledger: EntityHandle
    ) throws -> EntityHandle? {
        try PGDDL.checkNames(entity)
        healthy(writer)
        return try rewriteNow(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
    }

    private func rewriteNow(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
    ) throws -> EntityHandle? {
        var current = tables
        guard let oldHandle = current.handle(named: name) else { throw DepotError.notRegistered(name) }
        let links = current.relationships.incoming.values.flatMap { $0 }
        try SchemaRewrite.check(renaming: oldHandle.entity, to: entity, registered: { current[$0]?.entity }, relationships: links)
        var version: String?
        let applied = try lockedTransaction("Rewriting \(name)") { () throws -> Bool in
            // Under the schema's lock, the database is the truth. Another process running
            // the same migration may have applied this step since the ledger was read: then
            // it is done, and runs nowhere twice.
            let ledgerCheck = PostgresTransaction(connection: writer, tables: current, writable: true)
            let recorded = try ledgerCheck.fetchRow(ledger, key: ledgerRow[value: ledger.entity.primaryKeyIndex]) { _ in }
            ledgerCheck.isFinished = true
            if recorded { return true }
            // Another process may have changed the entity otherwise: rows read with this
            // process's description of it would be misread.
            if try storedDescription(of: name) != oldHandle.entity {
                throw DepotError(.schemaMismatch, "Another process changed the schema of \(name) in schema \(options.schema) since this migration read it; nothing was changed. Run the migration again.")
            }
            var rows: [Row] = []
            let reading = PostgresTransaction(connection: writer, tables: current, writable: true)
            try reading.fetch(Query(all: oldHandle), reserve: { rows.reserveCapacity($0) }) { rows.append(try $0.row()) }
            reading.isFinished = true
            var staging = entity
            staging.name = "depot_rewrite"
            try writer.execute("DROP TABLE IF EXISTS depot_rewrite")
            for statement in PGDDL.createTable(staging) where !statement.hasPrefix("CREATE INDEX") && !statement.hasPrefix("COMMENT") {
                try writer.execute(statement, "Creating the new table of \(name)")
            }
            var local = current
            let stagingHandle = local.set(staging, RegisteredEntity(entity: staging))
            let writing = PostgresTransaction(connection: writer, tables: local, writable: true)
            for row in rows { try writing.insert(try transform(row), into: stagingHandle) }
            writing.isFinished = true
            // Every other table's foreign key to the old table (whichever process made it),
            // kept as PostgreSQL prints it, dropped, and made again on the new table. No
            // CASCADE: a view or anything else of the user's on the table fails the step
            // instead of vanishing.
            let incomingKeys = try writer.query(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' AND confrelid = to_regclass($1) AND conrelid <> confrelid",
                [.text(quoted(name))], "Reading the references to \(name)")
            var recreate: [String] = []
            for row in 0..<incomingKeys.rowCount {
                let table = incomingKeys.text(row, 0)
                let constraint = quoted(incomingKeys.text(row, 1))
                let definition = incomingKeys.text(row, 2)
                try writer.execute("ALTER TABLE \(table) DROP CONSTRAINT \(constraint)", "Dropping a reference to \(name)")
                recreate.append("ALTER TABLE \(table) ADD CONSTRAINT \(constraint) \(definition)")
            }
            try writer.execute("DROP TABLE \(quoted(name))", "Dropping the old table of \(name)")
            try writer.execute("ALTER TABLE depot_rewrite RENAME TO \(quoted(entity.name))")
            // The constraints keep the staging table's names: give them the entity's, which
            // the error messages are matched against.
            try writer.execute("ALTER TABLE \(quoted(entity.name)) RENAME CONSTRAINT \(quoted(PGDDL.primaryKeyName(entity: staging.name))) TO \(quoted(PGDDL.primaryKeyName(entity: entity.name)))")
            for attribute in entity.attributes where attribute.isUnique && attribute.name != entity.primaryKey.name {
                try writer.execute("ALTER TABLE \(quoted(entity.name)) RENAME CONSTRAINT \(quoted(PGDDL.uniqueName(entity: staging.name, attribute: attribute.name))) TO \(quoted(PGDDL.uniqueName(entity: entity.name, attribute: attribute.name)))")
            }
            for statement in recreate { try writer.execute(statement, "Restoring a reference to \(entity.name)") }
            // The rewritten entity's own references (a self-reference names its new name).
            for statement in PGDDL.addForeignKeys(entity, registered: { $0 == entity.name ? entity : current[$0]?.entity }) {
                try writer.execute(statement, "Adding the references of \(entity.name)")
            }
            for attribute in entity.attributes {
                for statement in PGDDL.referenceComment(attribute, in: entity) { try writer.execute(statement) }
                if PGDDL.wantsIndex(attribute, in: entity) {
                    try writer.execute(PGDDL.dropIndex(attribute, in: entity))
                    try writer.execute(PGDDL.createIndex(attribute, in: entity))
                }
            }
            // The old table's indexes went with it; the declared ones are built over the
            // rewritten rows.
            for index in entity.indexes {
                try buildIndex(index, in: entity)
            }
            if name != entity.name {
                try writer.query("DELETE FROM depot_entities WHERE name = $1", [.text(name)], "Forgetting the description of \(name)")
            }
            try storeDescription(entity)
            let recording = PostgresTransaction(connection: writer, tables: current, writable: true)
            try recording.insert(ledgerRow, into: ledger)
            recording.isFinished = true
            // The deferred foreign keys are checked now, inside the step, so a dangling
            // reference fails it with Depot's code rather than at COMMIT.
            try writer.execute("SET CONSTRAINTS ALL IMMEDIATE", "Checking the references of the rewritten \(entity.name)")
            version = try raiseSchemaVersion(into: &current)
            return false
        }
        if applied { return nil }
        if name != entity.name { current.remove(named: name) }
        let handle = current.set(entity, RegisteredEntity(entity: entity))
        let verified = version
        state.withLockedValue { s in
            s.tables = current
            s.verifiedVersion = verified
        }
        // Observers in this process hear it from the runtime; other processes from here.
        try? notifyTouched([name, entity.name, ledger.name])
        return handle
    }

    /// Tells other processes that entities changed as a whole.
    func notifyTouched(_ entities: [String]) throws(DepotError) {
        var recorder = ChangeRecorder(detailed: false)
        for entity in entities { recorder.recordTouched(entity: entity) }
        try notify(recorder)
    }
}
