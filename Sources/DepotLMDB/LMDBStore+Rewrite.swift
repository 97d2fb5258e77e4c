import CLMDB
public import DepotCore

extension LMDBEngine {
    /// Reads the entity's records, empties its databases, writes the new stored schema (one
    /// version up, so other processes reload it) and the transformed records with their
    /// indexes, and records the step, in one write transaction.
    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
    ) throws -> EntityHandle? {
        let snapshot = catalog.snapshot
        guard let oldHandle = snapshot.registry.handle(named: name) else { throw DepotError.notRegistered(name) }
        let links = snapshot.registry.relationships.incoming.values.flatMap { $0 }
        try SchemaRewrite.check(renaming: oldHandle.entity, to: entity, registered: { snapshot.registry[$0]?.entity }, relationships: links)
        let (outcome, _) = try runWrite(catalog: snapshot, recording: false, publish: { $0.map { [entity.name: $0] } ?? [:] }) { transaction -> RegisteredEntity? in
            // Another process running the same migration may have applied this step since
            // the ledger was read: then it is done, and runs nowhere twice.
            if try transaction.fetchRow(ledger, key: ledgerRow[value: ledger.entity.primaryKeyIndex], { _ in }) { return nil }
            var rows: [Row] = []
            try transaction.fetchRows(Query(all: oldHandle), reserve: { rows.reserveCapacity($0) }) { rows.append($0) }
            let transformed = try rows.map(transform)
            let old = try transaction.handles(for: oldHandle)
            try transaction.clear(old.main, name: name)
            for index in old.indexes {
                try transaction.clear(index.dbi, name: Catalog.indexName(entity: name, attribute: old.entity.attributes[index.position].name))
            }
            for index in old.composites {
                try transaction.clear(index.dbi, name: Catalog.compositeName(entity: name, index: index.description))
            }
            let version = (try transaction.readStoredEntity(name)?.schemaVersion ?? 0) + 1
            if name != entity.name {
                _ = try transaction.del(transaction.metaDBI, Catalog.entityKey(name), nil, context: "Forgetting the schema of \(name)")
            }
            let dupSort = Int32(MDB_DUPSORT)
            let main = try transaction.requireDatabase(entity.name, flags: Int32(MDB_CREATE), entity: entity.name)
            if name != entity.name { try transaction.clear(main, name: entity.name) }
            var indexes: [IndexHandle] = []
            for (i, attribute) in entity.attributes.enumerated() where Catalog.needsIndex(i, in: entity) {
                let indexName = Catalog.indexName(entity: entity.name, attribute: attribute.name)
                let dbi = try transaction.requireDatabase(indexName, flags: Int32(MDB_CREATE) | dupSort, entity: entity.name)
                try transaction.clear(dbi, name: indexName)
                indexes.append(IndexHandle(position: i, dbi: dbi, isUnique: attribute.isUnique))
            }
            // Filled by the inserts below, which refuse a duplicate of a unique one.
            let composites = try entity.indexes.map { index throws(DepotError) in
                try transaction.openComposite(index, of: entity, create: true)
            }
            try transaction.writeStoredEntity(StoredEntity(schemaVersion: version, recordFormat: Int(RecordFormat.version), entity: entity))
            let registered = RegisteredEntity(entity: entity, main: main, indexes: indexes, composites: composites, schemaVersion: version)
                .stamped(try transaction.storedStamp(entity.name))
            for row in transformed { _ = try transaction.write(row, registered, mode: .insert) }
            for (position, attribute) in entity.attributes.enumerated() {
                guard let target = attribute.reference?.entity else { continue }
                let targetMain: MDB_dbi
                if target == entity.name {
                    targetMain = main
                } else if let handle = snapshot.registry.handle(named: target) {
                    targetMain = try transaction.handles(for: handle).main
                } else {
                    throw DepotError.notRegistered(target)
                }
                for row in transformed where !row[value: position].isNull {
                    var key: [UInt8] = []
                    KeyEncoding.appendPrimaryKey(row[value: position], to: &key)
                    if try transaction.get(targetMain, key, context: "Checking \(entity.name).\(attribute.name)") == nil {
                        throw SchemaRewrite.missingTarget(entity, key: row[value: entity.primaryKeyIndex], attribute: position, value: row[value: position])
                    }
                }
            }
            _ = try transaction.write(ledgerRow, try transaction.handles(for: ledger), mode: .insert)
            return registered
        }
        guard outcome != nil else { return nil }
        if name != entity.name { catalog.mutate { $0.remove(named: name) } }
        guard let handle = catalog.registry.handle(named: entity.name) else { throw DepotError.notRegistered(entity.name) }
        return handle
    }
}
