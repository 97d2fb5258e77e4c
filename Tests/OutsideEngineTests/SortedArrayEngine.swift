public import DepotCore
import Synchronization

/// A storage engine that keeps each entity's rows in an array sorted by primary key.
///
/// Written outside Depot, against its public engine contract only, to show what a backend
/// author writes: the rows and the transactions over them. Depot's store runtime
/// (``EngineStore``) does the rest — admission and closing, the writer's lane and group
/// commit, the pool of read slots, references, the change feed, logging and telemetry.
///
/// ```swift
/// let store = EngineStore(engine: SortedArrayEngine())
/// let cats = Controller<Cat, CatRecord>(store: store)
/// ```
///
/// Snapshots are copies of the committed tables: arrays copy on write, so a read costs a
/// lock and a reference count, and a write copies the tables it changes. Lookups by key are
/// binary searches; everything else scans. Nothing is persisted.
public final class SortedArrayEngine: StorageEngine {
    public typealias Reading = SortedArrayTransaction
    public typealias Writing = SortedArrayTransaction

    /// One of the read slots the runtime pools: it bounds how many reads run at once, as a
    /// database engine's connections would.
    public final class ReadSlot: Sendable {
        let number: Int
        init(number: Int) { self.number = number }
    }

    /// The committed tables, replaced whole by each commit.
    let committed = Mutex(EntityRegistry<Table>())

    public let readConnections: [ReadSlot]
    public var backendName: String { "sorted-array" }
    public var location: String { "sorted-array:" }
    public var storeDescription: String { "sorted-array store" }
    public var isReadOnly: Bool { false }
    /// Reads and writes wait for a lock, so they run on the store's threads; queued writes
    /// share one transaction, each in a save point.
    public var traits: EngineTraits { EngineTraits(readsBlock: true, writesBlock: true, groupsWrites: true) }

    /// - Parameter readers: How many reads run at once.
    public init(readers: Int = 4) {
        readConnections = (0..<max(1, readers)).map(ReadSlot.init(number:))
    }

    // MARK: Schema

    public func entities() throws -> [EntityHandle] {
        committed.withLock { $0.all.map(\.handle) }
    }

    public func register(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        try committed.withLock { registry throws -> [EntityHandle] in
            var working = registry
            var handles: [EntityHandle] = []
            for entity in entities {
                guard let existing = working[entity.name]?.entry else {
                    handles.append(working.set(entity, Table(entity: entity)))
                    continue
                }
                if existing.entity == entity {
                    handles.append(working.set(entity, existing))
                    continue
                }
                // An additive change: every row gains the new attributes' values; keys, so
                // the order, stay.
                let migration = try SchemaMigration.plan(from: existing.entity, to: entity)
                for attribute in migration.defaultedReferences where !existing.rows.isEmpty {
                    let target = working[attribute.reference?.entity ?? ""]?.entry
                    if let value = attribute.defaultValue, target?.position(of: value).found != true {
                        throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name)
                    }
                }
                var table = Table(entity: entity)
                table.rows = existing.rows.map(migration.migrate)
                // A new unique index must hold for the rows already there.
                for index in migration.addedCompositeIndexes where index.isUnique {
                    let positions = index.components.compactMap { entity.index(of: $0.attribute) }
                    var seen = Set<[Value]>()
                    for row in table.rows {
                        let values = positions.map { row[value: $0] }
                        if values.contains(where: \.isNull) { continue }
                        if !seen.insert(values).inserted {
                            throw DepotError(.schemaMismatch, "The stored \(entity.name) records share values of the new unique index (\(index.summary)).")
                        }
                    }
                }
                handles.append(working.set(entity, table))
            }
            registry = working
            return handles
        }
    }

    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row,
        ledger: EntityHandle
    ) throws -> EntityHandle? {
        try committed.withLock { registry throws -> EntityHandle? in
            var tables = registry
            let ledgerKey = ledgerRow[value: ledger.entity.primaryKeyIndex]
            // Applied meanwhile by another migrator: nothing to do.
            if tables[ledger.name]?.entry.position(of: ledgerKey).found == true { return nil }
            guard let old = tables[name]?.entry else { throw DepotError.notRegistered(name) }
            let links = tables.relationships.incoming.values.flatMap { $0 }
            try SchemaRewrite.check(renaming: old.entity, to: entity, registered: { tables[$0]?.entity }, relationships: links)
            var table = Table(entity: entity)
            for row in old.rows {
                let new = try transform(row)
                try table.insert(new)
            }
            for (position, attribute) in entity.attributes.enumerated() {
                guard let target = attribute.reference?.entity else { continue }
                let targets = target == entity.name ? table : tables[target]?.entry
                for row in table.rows where !row[value: position].isNull {
                    if targets?.position(of: row[value: position]).found != true {
                        throw SchemaRewrite.missingTarget(entity, key: row[value: entity.primaryKeyIndex], attribute: position, value: row[value: position])
                    }
                }
            }
            if entity.name != name { tables.remove(named: name) }
            let handle = tables.set(entity, table)
            guard var ledgerTable = tables[ledger.name]?.entry else { throw DepotError.notRegistered(ledger.name) }
            try ledgerTable.insert(ledgerRow)
            tables.set(ledgerTable.entity, ledgerTable)
            registry = tables
            return handle
        }
    }

    // MARK: Transactions

    public func beginRead(on connection: ReadSlot?, singleStatement: Bool) throws -> SortedArrayTransaction {
        SortedArrayTransaction(engine: self, tables: committed.withLock { $0 }, writable: false, recordingKeys: false)
    }

    public func beginWrite(recordingKeys: Bool) throws -> SortedArrayTransaction {
        SortedArrayTransaction(engine: self, tables: committed.withLock { $0 }, writable: true, recordingKeys: recordingKeys)
    }

    public func close() {
        committed.withLock { $0 = EntityRegistry() }
    }
}

/// One entity's description and rows, sorted by primary key.
struct Table: Sendable {
    var entity: EntityDescription
    var rows: [Row] = []

    init(entity: EntityDescription) { self.entity = entity }

    /// Where `key`'s row is, or would go: a binary search.
    func position(of key: Value) -> (index: Int, found: Bool) {
        let keyIndex = entity.primaryKeyIndex
        var low = 0
        var high = rows.count
        while low < high {
            let middle = low + (high - low) / 2
            let candidate = rows[middle][value: keyIndex]
            if candidate == key { return (middle, true) }
            if candidate < key { low = middle + 1 } else { high = middle }
        }
        return (low, false)
    }

    /// Refuses `row` when another row holds one of its unique values, or all of its values
    /// in a unique index (a row with nil in one of them conflicts with none).
    func checkUnique(_ row: Row, key: Value) throws(DepotError) {
        for (position, attribute) in entity.attributes.enumerated() where attribute.isUnique {
            let value = row[value: position]
            if value.isNull { continue }
            if rows.contains(where: { $0[value: position] == value && $0[value: entity.primaryKeyIndex] != key }) {
                throw DepotError.duplicateUnique(entity: entity.name, attribute: attribute.name, value: value)
            }
        }
        for index in entity.indexes where index.isUnique {
            let positions = index.components.compactMap { entity.index(of: $0.attribute) }
            if positions.contains(where: { row[value: $0].isNull }) { continue }
            if rows.contains(where: { other in
                other[value: entity.primaryKeyIndex] != key && positions.allSatisfy { other[value: $0] == row[value: $0] }
            }) {
                throw DepotError.duplicateUnique(entity: entity, index: index, row: row)
            }
        }
    }

    /// Inserts a new row; returns its key.
    @discardableResult
    mutating func insert(_ row: Row) throws(DepotError) -> Value {
        let key = try entity.check(row)
        let (index, found) = position(of: key)
        if found { throw DepotError.duplicateKey(entity: entity.name, key: key) }
        try checkUnique(row, key: key)
        rows.insert(row, at: index)
        return key
    }
}

/// A read or write transaction of ``SortedArrayEngine``: its own copy of the tables, which a
/// commit makes the committed ones.
public final class SortedArrayTransaction: EngineReadTransaction, EngineWriteTransaction {
    let engine: SortedArrayEngine
    var tables: EntityRegistry<Table>
    let writable: Bool
    var ended = false
    var recorder: ChangeRecorder
    /// The tables as each open save point found them.
    var savepoints: [EntityRegistry<Table>] = []

    init(engine: SortedArrayEngine, tables: EntityRegistry<Table>, writable: Bool, recordingKeys: Bool) {
        self.engine = engine
        self.tables = tables
        self.writable = writable
        self.recorder = ChangeRecorder(detailed: recordingKeys)
    }

    private func table(_ handle: EntityHandle) throws(DepotError) -> Table {
        if ended { throw DepotError.transactionEnded }
        return try tables.resolve(handle)
    }

    /// Changes a table in this transaction's copy.
    private func modify<R>(_ handle: EntityHandle, _ body: (inout Table, inout ChangeRecorder) throws(DepotError) -> R) throws(DepotError) -> R {
        if ended { throw DepotError.transactionEnded }
        if !writable { throw DepotError.writeInRead }
        var table = try tables.resolve(handle)
        // Out of the registry while it changes, so the rows' storage is not shared and
        // changes in place.
        tables.modify(slot: handle.slot) { $0.rows = [] }
        defer { tables.modify(slot: handle.slot) { $0 = table } }
        return try body(&table, &recorder)
    }

    // MARK: Reads

    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        let selected = query.apply(to: try table(query.handle).rows)
        reserve(selected.count)
        let reader = RowColumns()
        for row in selected {
            reader.row = row
            try body(reader)
        }
    }

    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let table = try table(entity)
        let (index, found) = table.position(of: key)
        if found { try body(RowColumns(table.rows[index])) }
        return found
    }

    public func count(_ query: Query) throws -> Int {
        let rows = try table(query.handle).rows
        return query.count(ofMatching: rows.reduce(0) { $0 + (query.filter.matches($1) ? 1 : 0) })
    }

    // MARK: Writes

    public func insert(_ row: Row, into entity: EntityHandle) throws {
        try modify(entity) { (table, recorder) throws(DepotError) in
            let key = try table.insert(row)
            recorder.record(entity: table.entity.name, key: key, existedBefore: false, existsAfter: true)
        }
    }

    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        try modify(entity) { (table, recorder) throws(DepotError) -> Bool in
            let key = try table.entity.check(row)
            try table.checkUnique(row, key: key)
            let (index, found) = table.position(of: key)
            if found { table.rows[index] = row } else { table.rows.insert(row, at: index) }
            recorder.record(entity: table.entity.name, key: key, existedBefore: found, existsAfter: true)
            return !found
        }
    }

    public func update(_ row: Row, in entity: EntityHandle) throws {
        try modify(entity) { (table, recorder) throws(DepotError) in
            let key = try table.entity.check(row)
            let (index, found) = table.position(of: key)
            guard found else { throw DepotError.notFound(entity: table.entity.name, key: key) }
            try table.checkUnique(row, key: key)
            table.rows[index] = row
            recorder.record(entity: table.entity.name, key: key, existedBefore: true, existsAfter: true)
        }
    }

    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        try modify(entity) { (table, recorder) throws(DepotError) -> Bool in
            let (index, found) = table.position(of: key)
            guard found else { return false }
            table.rows.remove(at: index)
            recorder.record(entity: table.entity.name, key: key, existedBefore: true, existsAfter: false)
            return true
        }
    }

    public func delete(_ query: Query) throws -> Int {
        try modify(query.handle) { (table, recorder) throws(DepotError) -> Int in
            let doomed = query.apply(to: table.rows)
            for row in doomed {
                let key = row[value: table.entity.primaryKeyIndex]
                let (index, found) = table.position(of: key)
                guard found else { continue }
                table.rows.remove(at: index)
                recorder.record(entity: table.entity.name, key: key, existedBefore: true, existsAfter: false)
            }
            return doomed.count
        }
    }

    // MARK: Ending

    public var relationships: Relationships { tables.relationships }

    public func end() { ended = true }

    public func commit() throws -> ChangeRecorder {
        if ended { throw DepotError.transactionEnded }
        ended = true
        let tables = self.tables
        engine.committed.withLock { $0 = tables }
        return recorder
    }

    public func rollback() { ended = true }

    public func savepoint() throws {
        savepoints.append(tables)
        recorder = ChangeRecorder(detailed: recorder.isDetailed)
    }

    public func releaseSavepoint() throws -> ChangeRecorder {
        savepoints.removeLast()
        defer { recorder = ChangeRecorder(detailed: recorder.isDetailed) }
        return recorder
    }

    public func rollbackToSavepoint() throws {
        guard let saved = savepoints.popLast() else { throw DepotError(.backend, "No save point to roll back to.") }
        tables = saved
        recorder = ChangeRecorder(detailed: recorder.isDetailed)
    }
}
