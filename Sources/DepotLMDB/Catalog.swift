package import CLMDB
package import DepotCore
import Foundation

/// The metadata database: the store's format and, per entity, the registered description.
///
/// Keys are readable with `mdb_dump`: `format` holds the layout version as text;
/// `entity:<Name>` holds a JSON ``StoredEntity``.
package enum Catalog {
    static let metaName = "depot_meta"
    package static let formatKey = Array("format".utf8)
    /// Version of the layout: key encodings, database names, metadata.
    static let formatVersion = 1

    package static func entityKey(_ name: String) -> [UInt8] { Array("entity:\(name)".utf8) }

    static func indexName(entity: String, attribute: String) -> String { "\(entity).idx.\(attribute)" }

    /// The database of a composite index. `cix` rather than `idx`: an attribute may be named
    /// like an index (`ix_1_a`), and its database must not be the index's.
    static func compositeName(entity: String, index: IndexDescription) -> String { "\(entity).cix.\(index.name)" }

    /// Whether an attribute has an index database: indexed or unique, and not the primary
    /// key (the entity's own database is its index).
    static func needsIndex(_ position: Int, in entity: EntityDescription) -> Bool {
        let attribute = entity.attributes[position]
        return position != entity.primaryKeyIndex && (attribute.isIndexed || attribute.isUnique)
    }
}

/// What the metadata database holds for one entity.
package struct StoredEntity: Codable {
    /// Incremented by every schema change; every stored row is rewritten to the current one.
    package var schemaVersion: Int
    /// The version of ``RecordFormat`` the rows are written in.
    var recordFormat: Int
    package var entity: EntityDescription

    package init(schemaVersion: Int, recordFormat: Int, entity: EntityDescription) {
        self.schemaVersion = schemaVersion
        self.recordFormat = recordFormat
        self.entity = entity
    }

    /// Decodes and checks the stored schema of entity `name` (bytes from the file: anything
    /// may be there).
    ///
    /// - Throws: `DepotError.Code.storeCorrupted` for bytes that are not a valid schema of
    ///   `name`, or a record format this version does not read.
    package static func parse(_ bytes: UnsafeRawBufferPointer, name: String, store: String) throws(DepotError) -> StoredEntity {
        func corrupted(_ what: String) -> DepotError {
            DepotError(.storeCorrupted, "\(what) in the \(name) database of the LMDB store at \(store); the file is damaged or was written by something else. Restore it from a backup.")
        }
        guard let stored = try? JSONDecoder().decode(StoredEntity.self, from: Data(bytes)), stored.entity.name == name else {
            throw corrupted("The stored schema cannot be read")
        }
        // JSON that decodes can still describe an impossible entity (a primary key index
        // outside the attributes, duplicate names) or a version that cannot be incremented:
        // refuse it here rather than trap on it later.
        do {
            try stored.entity.validate()
        } catch {
            throw corrupted("The stored schema is invalid (\(error.message))")
        }
        guard stored.schemaVersion >= 1, stored.schemaVersion < Int.max else {
            throw corrupted("The stored schema version \(stored.schemaVersion) is invalid")
        }
        guard stored.recordFormat == Int(RecordFormat.version) else {
            throw DepotError(.storeCorrupted, "The \(name) records in the LMDB store at \(store) use record format \(stored.recordFormat), which this version of Depot does not read (it reads format \(RecordFormat.version)).")
        }
        return stored
    }
}

extension LMDBTransaction {
    package func openDatabase(_ name: String, flags: Int32) throws(DepotError) -> MDB_dbi? {
        var dbi: MDB_dbi = 0
        let rc = mdb_dbi_open(txn, name, UInt32(flags), &dbi)
        if rc == MDB_NOTFOUND { return nil }
        if rc == MDB_DBS_FULL {
            throw DepotError(.invalidConfiguration, "The LMDB store at \(storeName) cannot open database \(name): every one of its named databases is in use. Open the store with a larger maxDatabases (one per entity, one per index, one for metadata).", nativeCode: rc)
        }
        if rc != 0 { throw fail(rc, "Opening the database \(name) in \(storeName)") }
        return dbi
    }

    func requireDatabase(_ name: String, flags: Int32, entity: String) throws(DepotError) -> MDB_dbi {
        guard let dbi = try openDatabase(name, flags: flags) else {
            throw corrupted("The database \(name) is missing", entity: entity)
        }
        return dbi
    }

    func clear(_ dbi: MDB_dbi, name: String) throws(DepotError) {
        let rc = mdb_drop(txn, dbi, 0)
        if rc != 0 { throw fail(rc, "Emptying the database \(name) in \(storeName)") }
    }

    /// The description of every entity stored in the metadata database.
    func storedEntityDescriptions() throws -> [EntityDescription] {
        let prefix = Array("entity:".utf8)
        var names: [String] = []
        try withCursor(metaDBI) { cursor in
            var key = MDB_val()
            var value = MDB_val()
            var rc = Self.withVal(prefix) { k in
                key = k
                return mdb_cursor_get(cursor, &key, &value, MDB_SET_RANGE)
            }
            while rc == 0 {
                let bytes = UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)
                guard bytes.starts(with: prefix) else { break }
                names.append(String(decoding: bytes.dropFirst(prefix.count), as: UTF8.self))
                rc = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if rc != 0 && rc != MDB_NOTFOUND { throw fail(rc, "Listing the stored entities of \(storeName)") }
        }
        return try names.compactMap { name throws(DepotError) in try readStoredEntity(name)?.entity }
    }

    package func readStoredEntity(_ name: String) throws(DepotError) -> StoredEntity? {
        guard let value = try get(metaDBI, Catalog.entityKey(name), context: "Reading the schema of \(name)") else {
            return nil
        }
        return try StoredEntity.parse(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size), name: name, store: storeName)
    }

    /// The exact stored bytes of `name`'s schema, empty when there is none.
    package func storedStamp(_ name: String) throws(DepotError) -> [UInt8] {
        guard let value = try get(metaDBI, Catalog.entityKey(name), context: "Reading the schema of \(name)") else { return [] }
        return Array(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size))
    }

    /// `register(_:current:)`, with the handles stamped with the stored schema they
    /// belong to.
    func registerStamped(_ entity: EntityDescription, current: RegisteredEntity?) throws -> RegisteredEntity {
        try register(entity, current: current).stamped(try storedStamp(entity.name))
    }

    func writeStoredEntity(_ stored: StoredEntity) throws(DepotError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let json = try? encoder.encode(stored) else {
            throw DepotError(.invalidSchema, "The schema of \(stored.entity.name) cannot be encoded for storage.")
        }
        try put(metaDBI, Catalog.entityKey(stored.entity.name), Array(json), context: "Writing the schema of \(stored.entity.name)")
    }

    /// Creates, opens or migrates the databases of `entity`.
    ///
    /// - Throws: `DepotError.Code.schemaMismatch` for a change `SchemaMigration`
    ///   refuses; `DepotError.Code.invalidValue` when an existing value is too long for a
    ///   new index.
    package func register(_ declared: EntityDescription, current: RegisteredEntity?) throws -> RegisteredEntity {
        if let current, current.entity.serves(declared) { return current }
        let dupSort = Int32(MDB_DUPSORT)
        var entity = declared
        guard let stored = try readStoredEntity(entity.name) else {
            guard let main = try openDatabase(entity.name, flags: Int32(MDB_CREATE)) else {
                throw corrupted("The database cannot be created", entity: entity.name)
            }
            if try entries(main) > 0 {
                throw corrupted("Records exist without a stored schema", entity: entity.name)
            }
            var indexes: [IndexHandle] = []
            for (i, attribute) in entity.attributes.enumerated() where Catalog.needsIndex(i, in: entity) {
                let name = Catalog.indexName(entity: entity.name, attribute: attribute.name)
                let dbi = try requireDatabase(name, flags: Int32(MDB_CREATE) | dupSort, entity: entity.name)
                // A database left by an index dropped earlier may still hold entries.
                try clear(dbi, name: name)
                indexes.append(IndexHandle(position: i, dbi: dbi, isUnique: attribute.isUnique))
            }
            var composites: [CompositeHandle] = []
            for index in entity.indexes {
                // Emptied too: a database left by an index dropped earlier may hold entries.
                composites.append(try openComposite(index, of: entity, create: true))
            }
            try writeStoredEntity(StoredEntity(schemaVersion: 1, recordFormat: Int(RecordFormat.version), entity: entity))
            return RegisteredEntity(entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: 1)
        }

        // Indexes the declaration leaves out stay until a migration step drops them.
        entity = declared.keepingIndexes(of: stored.entity)
        let main = try requireDatabase(entity.name, flags: 0, entity: entity.name)
        if stored.entity == entity {
            var indexes: [IndexHandle] = []
            for (i, attribute) in entity.attributes.enumerated() where Catalog.needsIndex(i, in: entity) {
                let name = Catalog.indexName(entity: entity.name, attribute: attribute.name)
                let dbi = try requireDatabase(name, flags: dupSort, entity: entity.name)
                indexes.append(IndexHandle(position: i, dbi: dbi, isUnique: attribute.isUnique))
            }
            var composites: [CompositeHandle] = []
            var missing: [CompositeHandle] = []
            for index in entity.indexes {
                // A description stored by a version that kept composite indexes in the
                // schema without databases (before LMDB built them): built now.
                if writable, try openDatabase(Catalog.compositeName(entity: entity.name, index: index), flags: 0) == nil {
                    let handle = try openComposite(index, of: entity, create: true)
                    missing.append(handle)
                    composites.append(handle)
                } else {
                    composites.append(try openComposite(index, of: entity, create: false))
                }
            }
            if !missing.isEmpty {
                let handles = RegisteredEntity(entity: entity, main: main, indexes: indexes, schemaVersion: stored.schemaVersion)
                for index in missing { storeLog?.indexBuildStarted(index.description, of: entity.name) }
                let records = try rewriteRows(
                    from: handles, to: handles, migration: try SchemaMigration.plan(from: entity, to: entity), rewrite: false,
                    building: [], buildingComposites: missing)
                for index in missing { storeLog?.indexBuilt(index.description, of: entity.name, records: records) }
            }
            return RegisteredEntity(
                entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: stored.schemaVersion)
        }

        let migration = try SchemaMigration.plan(from: stored.entity, to: entity)
        if !migration.defaultedReferences.isEmpty, try entries(main) > 0 {
            for attribute in migration.defaultedReferences {
                guard let value = attribute.defaultValue, let targetName = attribute.reference?.entity else { continue }
                var key: [UInt8] = []
                KeyEncoding.appendPrimaryKey(value, to: &key)
                let exists = try openDatabase(targetName, flags: 0).map { dbi throws(DepotError) in
                    try get(dbi, key, context: "Looking up the default of \(entity.name).\(attribute.name)") != nil
                } ?? false
                if !exists { throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name) }
            }
        }
        let storedIndexed = Set(
            stored.entity.attributes.indices.filter { Catalog.needsIndex($0, in: stored.entity) }
                .map { stored.entity.attributes[$0].name })
        var indexes: [IndexHandle] = []
        var built: [IndexHandle] = []
        for (i, attribute) in entity.attributes.enumerated() where Catalog.needsIndex(i, in: entity) {
            let name = Catalog.indexName(entity: entity.name, attribute: attribute.name)
            let index: IndexHandle
            if storedIndexed.contains(attribute.name) {
                index = IndexHandle(position: i, dbi: try requireDatabase(name, flags: dupSort, entity: entity.name), isUnique: attribute.isUnique)
            } else {
                let dbi = try requireDatabase(name, flags: Int32(MDB_CREATE) | dupSort, entity: entity.name)
                try clear(dbi, name: name)
                index = IndexHandle(position: i, dbi: dbi, isUnique: attribute.isUnique)
                built.append(index)
            }
            indexes.append(index)
        }
        for name in storedIndexed {
            guard let i = entity.index(of: name), Catalog.needsIndex(i, in: entity) else {
                // Emptied rather than deleted: deleting would close the handle under readers
                // that still use the previous schema's snapshot.
                let indexName = Catalog.indexName(entity: entity.name, attribute: name)
                if let dbi = try openDatabase(indexName, flags: dupSort) { try clear(dbi, name: indexName) }
                continue
            }
        }
        // Composite indexes: dropped ones emptied (not deleted, as above), added ones built
        // from the records in this transaction, so a refused build leaves nothing behind.
        // An index that only changed whether it is unique keeps its name: it is rebuilt.
        let declaredNames = Set(entity.indexes.map(\.name))
        for index in migration.droppedCompositeIndexes where !declaredNames.contains(index.name) {
            let name = Catalog.compositeName(entity: entity.name, index: index)
            if let dbi = try openDatabase(name, flags: 0) { try clear(dbi, name: name) }
        }
        var composites: [CompositeHandle] = []
        var builtComposites: [CompositeHandle] = []
        for index in entity.indexes {
            let isNew = migration.addedCompositeIndexes.contains(index)
            let handle = try openComposite(index, of: entity, create: isNew)
            if isNew { builtComposites.append(handle) }
            composites.append(handle)
        }
        let rewrite = stored.entity.attributes.count != entity.attributes.count
            || migration.sourceIndex.enumerated().contains { $0.element != $0.offset }
        if rewrite || !built.isEmpty || !builtComposites.isEmpty {
            let storedHandles = RegisteredEntity(entity: stored.entity, main: main, indexes: [], schemaVersion: stored.schemaVersion)
            let newHandles = RegisteredEntity(
                entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: stored.schemaVersion + 1)
            for index in builtComposites { storeLog?.indexBuildStarted(index.description, of: entity.name) }
            let records = try rewriteRows(
                from: storedHandles, to: newHandles, migration: migration, rewrite: rewrite, building: built,
                buildingComposites: builtComposites)
            for index in builtComposites { storeLog?.indexBuilt(index.description, of: entity.name, records: records) }
        }
        try writeStoredEntity(StoredEntity(schemaVersion: stored.schemaVersion + 1, recordFormat: Int(RecordFormat.version), entity: entity))
        return RegisteredEntity(
            entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: stored.schemaVersion + 1)
    }

    /// Opens the database of the composite `index` of `entity`; with `create`, creates it
    /// when missing and empties it (a database left by an index dropped earlier may still
    /// hold entries).
    func openComposite(_ index: IndexDescription, of entity: EntityDescription, create: Bool) throws(DepotError) -> CompositeHandle {
        let name = Catalog.compositeName(entity: entity.name, index: index)
        let dbi = try requireDatabase(name, flags: create ? Int32(MDB_CREATE) : 0, entity: entity.name)
        if create { try clear(dbi, name: name) }
        guard let handle = CompositeHandle(index, of: entity, dbi: dbi) else {
            throw corrupted("The index (\(index.summary)) names an attribute the entity does not have", entity: entity.name)
        }
        return handle
    }

    /// Rewrites every row into the declared attribute order and fills new indexes; returns
    /// the number of records.
    ///
    /// - Throws: `DepotError.Code.schemaMismatch` when two records share the values of a
    ///   new unique composite index; `DepotError.Code.invalidValue` when a value is too
    ///   long for a new index.
    @discardableResult
    private func rewriteRows(
        from stored: RegisteredEntity, to declared: RegisteredEntity, migration: SchemaMigration, rewrite: Bool,
        building: [IndexHandle], buildingComposites: [CompositeHandle]
    ) throws -> Int {
        var records = 0
        let entity = declared.entity
        let context = "Migrating \(entity.name) in \(storeName)"
        var row = Row()
        var key: [UInt8] = []
        var value: [UInt8] = []
        var indexKey: [UInt8] = []
        try withCursor(declared.main) { cursor in
            var k = MDB_val()
            var v = MDB_val()
            var rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST)
            while rc == 0 {
                try decode(v, stored, into: &row)
                let migrated = rewrite ? migration.migrate(row) : row
                // Copied out of the map: rewriting the record may move it within its page.
                key = Array(UnsafeRawBufferPointer(start: k.mv_data, count: k.mv_size))
                for index in building {
                    indexKey.removeAll(keepingCapacity: true)
                    KeyEncoding.appendIndexKey(migrated[value: index.position], to: &indexKey)
                    if indexKey.count > maxKeySize {
                        let name = entity.attributes[index.position].name
                        throw DepotError(.invalidValue, "Cannot index \(entity.name).\(name): the stored value \(migrated[value: index.position].debugLiteral) takes \(indexKey.count) bytes as an index key, over LMDB's key limit of \(maxKeySize) bytes. Nothing was changed.")
                    }
                    try put(index.dbi, indexKey, key, context: context)
                }
                for index in buildingComposites {
                    indexKey.removeAll(keepingCapacity: true)
                    index.appendComponents(of: migrated, to: &indexKey)
                    let prefixLength = indexKey.count
                    indexKey.append(contentsOf: key)
                    if indexKey.count > maxKeySize {
                        throw DepotError(.invalidValue, "Cannot build the index (\(index.description.summary)) of \(entity.name): the record with key \(migrated[value: entity.primaryKeyIndex].debugLiteral) has values \(Self.describeTuple(index, migrated)) that take \(indexKey.count) bytes as an index key, over LMDB's key limit of \(maxKeySize) bytes. Nothing was changed.")
                    }
                    if index.isUnique, index.positions.allSatisfy({ !migrated[value: $0].isNull }),
                        try otherOwner(index, prefix: Array(indexKey[..<prefixLength]), own: key) != nil
                    {
                        throw DepotError(.schemaMismatch, "Cannot add the unique index (\(index.description.summary)) to \(entity.name): more than one record has \(Self.describeTuple(index, migrated)). Make the values unique first, or declare the index without unique; nothing was changed.")
                    }
                    try put(index.dbi, indexKey, key, context: context)
                }
                records += 1
                if rewrite {
                    RecordFormat.encode(migrated, into: &value)
                    let rc = Self.withVal(key) { kv in Self.withVal(value) { vv in mdb_cursor_put(cursor, &kv, &vv, UInt32(MDB_CURRENT)) } }
                    if rc != 0 { throw fail(rc, context) }
                }
                rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)
            }
            if rc != MDB_NOTFOUND { throw fail(rc, context) }
        }
        return records
    }
}
