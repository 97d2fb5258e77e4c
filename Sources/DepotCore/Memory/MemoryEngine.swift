import HashTreeCollections
import NIOConcurrencyHelpers

/// The in-memory backend: the reference implementation of Depot's semantics, and the
/// store to use in tests.
///
/// Readers work on a copy-on-write snapshot taken when their transaction starts, so they
/// never wait for the writer and never see its uncommitted changes. Writers are
/// serialized in submission order: a write runs right on the calling thread when no other
/// write is running or queued (it only touches memory, so it never blocks), else it queues
/// behind them and its caller is resumed when it has run. A writer changes working copies of
/// the tables it touches (persistent B+ trees ordered by primary key, so a copy costs O(1)
/// and a write copies only the nodes on its path) and swaps them in only when its closure
/// returns, so a throw leaves nothing behind.
///
/// Indexed attributes and declared ``IndexDescription``s are ordered secondary indexes in
/// the same persistent trees, kept by the writer and shared by snapshots: a read whose
/// filter fixes an index's leading attributes and whose sort follows the rest reads that
/// index range in order and stops at its limit, as on the other backends (see
/// ``Controller/explain(_:analyze:)``).
///
/// ```swift
/// let store = MemoryStore()
/// let cats = Controller<Cat, CatRecord>(store: store)
/// ```
///
/// Nothing is persisted: the data lives as long as the store. The store is Depot's store
/// runtime (``EngineStore``) on a ``MemoryEngine``.
public typealias MemoryStore = EngineStore<MemoryEngine>

extension EngineStore where Engine == MemoryEngine {
    /// Creates an empty store.
    ///
    /// - Parameters:
    ///   - log: Where the store logs (nothing by default).
    ///   - readOnly: Refuse every write, registration and rewrite (false by default). A
    ///     read-only memory store stays empty: it is what `memory:?readOnly=true` opens, so
    ///     that reading code behaves alike on every backend.
    public convenience init(log: StoreLog = .disabled, readOnly: Bool = false) {
        self.init(engine: MemoryEngine(readOnly: readOnly, log: log), log: log)
    }
}

/// The engine of ``MemoryStore``: tables of rows in persistent B+ trees, in one committed
/// snapshot that each transaction starts from.
public final class MemoryEngine: StorageEngine {
    /// Reads are transactions over the committed snapshot.
    public typealias Reading = MemoryTransaction
    /// Writes are transactions over working copies of the snapshot's tables.
    public typealias Writing = MemoryTransaction

    /// A registered entity (every backend calls its per-entity state by this name): its
    /// description and its rows.
    struct RegisteredEntity: Sendable {
        var entity: EntityDescription
        /// The rows in primary key order, in a persistent B+ tree: a commit while readers
        /// hold a snapshot copies only the nodes on the changed paths, not the whole table.
        var rows = RowTree()
        /// For each unique attribute position: value → primary key.
        var unique: [Int: TreeDictionary<Value, Value>] = [:]
        /// The ordered secondary indexes: one per indexed attribute, then the declared ones.
        var indexes: [MemoryIndex]

        init(entity: EntityDescription) {
            self.entity = entity
            self.indexes = MemoryIndex.all(for: entity)
            for (i, a) in entity.attributes.enumerated() where a.isUnique { unique[i] = [:] }
        }

        /// Adds a row to a table being built (a migration, a rewrite), refusing one that
        /// repeats a key, a unique value or a unique index's values.
        mutating func build(_ row: Row, key: Value) throws(DepotError) {
            if rows[key] != nil { throw DepotError.duplicateKey(entity: entity.name, key: key) }
            for position in unique.keys where !row[value: position].isNull {
                if unique[position]?[row[value: position]] != nil {
                    throw DepotError.duplicateUnique(entity: entity.name, attribute: entity.attributes[position].name, value: row[value: position])
                }
                unique[position]?[row[value: position]] = key
            }
            for i in indexes.indices {
                if indexes[i].conflict(with: row, key: key) != nil { throw indexes[i].duplicate(row, entity: entity) }
                indexes[i].insert(row)
            }
            rows.updateValue(row, forKey: key)
        }
    }

    struct Snapshot: Sendable {
        var tables = EntityRegistry<RegisteredEntity>()
    }

    struct State: Sendable {
        var snapshot = Snapshot()
    }

    let state = NIOLockedValueBox(State())

    /// Whether the engine refuses every write, registration and rewrite.
    public let isReadOnly: Bool
    /// The backend's name in logs and reports: "memory".
    public var backendName: String { "memory" }
    /// Where the store is, for logs: `memory:`.
    public var location: String { "memory:" }
    /// How errors name the store: "memory store".
    public var storeDescription: String { "memory store" }
    /// Reads and writes touch only memory and never wait for a writer: they run on the
    /// calling task. A memory commit has no sync to share, so writes run one transaction
    /// each, and one write's failure never touches another's.
    public var traits: EngineTraits { EngineTraits(readsBlock: false, writesBlock: false, groupsWrites: false) }

    /// Where the engine logs schema changes.
    let log: StoreLog

    /// Creates an engine with no entities.
    ///
    /// - Parameters:
    ///   - readOnly: Refuse every write, registration and rewrite.
    ///   - log: Where the engine logs schema changes.
    public init(readOnly: Bool = false, log: StoreLog = .disabled) {
        self.isReadOnly = readOnly
        self.log = log
    }

    /// The registered entities (a memory store holds no others).
    public func entities() throws -> [EntityHandle] {
        state.withLockedValue { $0.snapshot.tables.all.map(\.handle) }
    }

    /// Creates the tables of new entities, and migrates the rows of changed ones when
    /// ``SchemaMigration/plan(from:to:)`` allows it.
    public func register(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        return try state.withLockedValue { s in
            var handles: [EntityHandle] = []
            for entity in entities {
                guard let existing = s.snapshot.tables[entity.name]?.entry else {
                    handles.append(s.snapshot.tables.set(entity, RegisteredEntity(entity: entity)))
                    log.schemaCreated(entity)
                    continue
                }
                if existing.entity == entity {
                    handles.append(s.snapshot.tables.set(entity, existing))
                    continue
                }
                let migration = try SchemaMigration.plan(from: existing.entity, to: entity)
                if !existing.rows.isEmpty {
                    for attribute in migration.defaultedReferences {
                        let target = s.snapshot.tables[attribute.reference?.entity ?? ""]?.entry.rows
                        if let value = attribute.defaultValue, target?[value] == nil {
                            throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name)
                        }
                    }
                }
                log.schemaMigrated(migration)
                for index in migration.addedCompositeIndexes { log.indexBuildStarted(index, of: entity.name) }
                var table = RegisteredEntity(entity: entity)
                let keyIndex = entity.primaryKeyIndex
                var problem: DepotError?
                existing.rows.forEach { row in
                    let migrated = migration.migrate(row)
                    do throws(DepotError) {
                        try table.build(migrated, key: migrated[value: keyIndex])
                        return true
                    } catch {
                        problem = error
                        return false
                    }
                }
                if let problem {
                    // Only a new unique index can refuse rows the store already held.
                    throw DepotError(.schemaMismatch, "The stored records of \(entity.name) do not fit a new unique index: \(problem.message) Remove the duplicates first, or declare the index without unique.")
                }
                for index in migration.addedCompositeIndexes { log.indexBuilt(index, of: entity.name, records: table.rows.count) }
                handles.append(s.snapshot.tables.set(entity, table))
            }
            return handles
        }
    }

    /// A read over the snapshot committed when it begins.
    public func beginRead(on connection: Never?, singleStatement: Bool) throws -> MemoryTransaction {
        MemoryTransaction(engine: self, base: state.withLockedValue { $0.snapshot }, writable: false)
    }

    /// A write over working copies of the committed snapshot, swapped in when it commits.
    public func beginWrite(recordingKeys: Bool) throws -> MemoryTransaction {
        MemoryTransaction(engine: self, base: state.withLockedValue { $0.snapshot }, writable: true, recordsKeys: recordingKeys)
    }

    /// Swaps a write's working copies in, and returns what it changed.
    func commit(_ transaction: MemoryTransaction) -> ChangeRecorder {
        var recorder = ChangeRecorder(detailed: transaction.recordsKeys)
        for working in transaction.working where working.wasWritten {
            let name = working.table.entity.name
            guard recorder.isDetailed else {
                recorder.recordTouched(entity: name)
                continue
            }
            let before = transaction.base.tables[slot: working.slot]?.entry.rows
            for key in working.written {
                recorder.record(entity: name, key: key, existedBefore: before?[key] != nil, existsAfter: working.table.rows[key] != nil)
            }
        }
        state.withLockedValue { s in
            // Writers are serialized, so the committed tables are still the ones the
            // transaction started from: its working copies replace them.
            for working in transaction.working {
                s.snapshot.tables.modify(slot: working.slot) { $0 = working.table }
            }
        }
        return recorder
    }

    /// Checks the trees' order, the unique indexes and each row's shape against its entity.
    public func checkIntegrity() throws -> [String] {
        do {
            try checkInvariants()
            return []
        } catch {
            return [error.message]
        }
    }

    /// Drops every table.
    public func close() {
        state.withLockedValue { $0.snapshot = Snapshot() }
    }

    /// Rewrites every row of `name` into a new table of `entity`, swapped in only when all
    /// of them succeeded.
    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
    ) throws -> EntityHandle? {
        try state.withLockedValue { s -> EntityHandle? in
            // A copy: the snapshot changes only once everything below has succeeded.
            var tables = s.snapshot.tables
            // The step applied meanwhile (the rule every backend keeps; see
            // SchemaRewritingStore): nothing to rewrite.
            if let ledgerRows = tables[ledger.name]?.entry.rows, ledgerRows[ledgerRow[value: ledger.entity.primaryKeyIndex]] != nil {
                return nil
            }
            guard let old = tables[name]?.entry else { throw DepotError.notRegistered(name) }
            let links = tables.relationships.incoming.values.flatMap { $0 }
            try SchemaRewrite.check(renaming: old.entity, to: entity, registered: { tables[$0]?.entity }, relationships: links)
            var rows: [Row] = []
            old.rows.forEach { rows.append($0); return true }
            var table = RegisteredEntity(entity: entity)
            for row in rows {
                let new = try transform(row)
                try table.build(new, key: try entity.check(new))
            }
            for (position, attribute) in entity.attributes.enumerated() {
                guard let target = attribute.reference?.entity else { continue }
                let targetRows = target == entity.name ? table.rows : tables[target]?.entry.rows
                var problem: DepotError?
                table.rows.forEach { row in
                    let value = row[value: position]
                    if !value.isNull && targetRows?[value] == nil {
                        problem = SchemaRewrite.missingTarget(entity, key: row[value: entity.primaryKeyIndex], attribute: position, value: value)
                        return false
                    }
                    return true
                }
                if let problem { throw problem }
            }
            if entity.name != name { tables.remove(named: name) }
            let handle = tables.set(entity, table)
            guard var ledgerTable = tables[ledger.name]?.entry else { throw DepotError.notRegistered(ledger.name) }
            try ledgerTable.build(ledgerRow, key: try ledgerTable.entity.check(ledgerRow))
            tables.set(ledgerTable.entity, ledgerTable)
            s.snapshot.tables = tables
            return handle
        }
    }
}
