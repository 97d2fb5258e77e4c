import Foundation
import HashTreeCollections

/// A transaction over a ``MemoryEngine`` snapshot. Writes change working copies of the
/// tables that the engine swaps in on commit; reads see the working copy of a table once it
/// has been written, so a transaction sees its own writes and nobody else's.
public final class MemoryTransaction: EngineReadTransaction, EngineWriteTransaction {
    /// A table this transaction has written: a copy of the committed table (persistent
    /// B+ trees, so the copy is O(1) and a write copies only the nodes on its path) changed in
    /// place. Writers are serialized, so the committed table is still `base`'s at commit,
    /// and committing is replacing it with this copy.
    ///
    /// The fields skip the runtime's exclusivity checks, which cost a tenth of a bulk save:
    /// only this transaction, on one thread, touches a working copy, and no access to a
    /// field overlaps another to the same field.
    ///
    /// Rows whose keys come in ascending order above every other key (a bulk save of new
    /// records, identifiers handed out in order) are put in new leaves as they come and hung
    /// on the tree together (``RowTree/appendLeaves(_:)``), without a descent per row. Anything that looks at the table's rows (``table``) appends them first.
    final class Working {
        @exclusivity(unchecked) private var stored: MemoryEngine.RegisteredEntity
        /// Leaves of rows above every key, built as they come, not yet in the tree.
        @exclusivity(unchecked) private var pendingLeaves: [RowTree.Node] = []
        /// The largest key of the table and the pending rows, when `largestKnown`.
        @exclusivity(unchecked) private var largestKey: Value?
        @exclusivity(unchecked) private var largestKnown = false

        /// The table, pending rows included.
        var table: MemoryEngine.RegisteredEntity {
            get {
                flush()
                return stored
            }
            _modify {
                flush()
                yield &stored
            }
        }

        /// The unique maps, which pending rows have already updated.
        var unique: [Int: TreeDictionary<Value, Value>] {
            get { stored.unique }
            _modify { yield &stored.unique }
        }

        /// The secondary indexes, with every queued entry in them.
        var indexes: [MemoryIndex] {
            get {
                flushIndexEntries()
                return stored.indexes
            }
            _modify {
                flushIndexEntries()
                yield &stored.indexes
            }
        }

        var entityName: String { stored.entity.name }

        /// Whether `key` is above every key of the table, pending rows included.
        func isAboveEveryKey(_ key: Value) -> Bool {
            if !largestKnown {
                largestKey = pendingLeaves.last?.keys.last ?? stored.rows.lastKey
                largestKnown = true
            }
            guard let largestKey else { return true }
            return RowTree.compare(key, largestKey) > 0
        }

        /// Queues a new row whose key ``isAboveEveryKey(_:)``.
        func appendAboveEveryKey(_ row: Row, key: Value) {
            if let leaf = pendingLeaves.last, leaf.keys.count < RowTree.capacity {
                if leaf.keys.count == 1 {
                    // A second row: a bulk save, which fills the leaf, so room for all of
                    // it at once. A save of one row keeps its small leaf, which joins the
                    // tree's last leaf at the commit.
                    leaf.keys.reserveCapacity(RowTree.capacity)
                    leaf.rows.reserveCapacity(RowTree.capacity)
                }
                leaf.keys.append(key)
                leaf.rows.append(row)
            } else {
                pendingLeaves.append(RowTree.Node(leafKeys: [key], rows: [row]))
            }
            largestKey = key
        }

        /// The largest key may have gone (a removal).
        func forgetLargestKey() { largestKnown = false }

        private func flush() {
            flushIndexEntries()
            guard !pendingLeaves.isEmpty else { return }
            stored.rows.appendLeaves(pendingLeaves)
            pendingLeaves.removeAll()
        }

        /// New rows whose index entries are not in the trees yet. A bulk save queues its
        /// rows, one list for every index, and at the flush each index encodes and sorts
        /// the entries of all of them together and puts them in its tree in order
        /// (``MemoryIndex/insertNew(_:)``: whole leaves when they all sort after the tree's
        /// last entry), rather than descending the tree for every row in random order.
        /// The queue is a buffer of its own, not an array, so that at the flush the last
        /// index takes the queue's references to the rows as its entries' (one retain per
        /// row per index, none released).
        @exclusivity(unchecked) private var pendingIndexRows: UnsafeMutableBufferPointer<Row> = .init(start: nil, count: 0)
        @exclusivity(unchecked) private var pendingIndexCount = 0

        deinit {
            // A transaction rolled back (or abandoned) with rows still queued.
            if pendingIndexCount > 0 { _ = pendingIndexRows.extracting(0..<pendingIndexCount).deinitialize() }
            pendingIndexRows.deallocate()
        }

        /// Queues the index entries of a new row (no unique index: those check the trees).
        func queueIndexEntries(of row: Row) {
            if pendingIndexCount == pendingIndexRows.count {
                let larger = UnsafeMutableBufferPointer<Row>.allocate(capacity: max(64, pendingIndexRows.count * 2))
                if pendingIndexCount > 0, let from = pendingIndexRows.baseAddress, let to = larger.baseAddress {
                    to.moveInitialize(from: from, count: pendingIndexCount)
                }
                pendingIndexRows.deallocate()
                pendingIndexRows = larger
            }
            pendingIndexRows.initializeElement(at: pendingIndexCount, to: row)
            pendingIndexCount += 1
        }

        /// Puts the queued index entries in their trees.
        func flushIndexEntries() {
            guard pendingIndexCount > 0, let from = pendingIndexRows.baseAddress else { return }
            let count = pendingIndexCount
            let indexCount = stored.indexes.count
            for i in 0..<indexCount {
                let rows = UnsafeMutableBufferPointer<Row>.allocate(capacity: count)
                if i == indexCount - 1 {
                    rows.baseAddress?.moveInitialize(from: from, count: count)
                    pendingIndexCount = 0
                } else {
                    rows.baseAddress?.initialize(from: from, count: count)
                }
                stored.indexes[i].insertNew(moving: rows)
            }
            if pendingIndexCount > 0 {
                // No index to take them (not reached: rows are queued only when there are indexes).
                _ = pendingIndexRows.extracting(0..<pendingIndexCount).deinitialize()
                pendingIndexCount = 0
            }
        }

        /// The entity's slot in the store's registry.
        let slot: Int
        /// The handle last checked against the registry for this table, so that a run of
        /// writes through one handle checks it once.
        let handle: EntityHandle
        /// Whether the entity has unique attributes to keep maps for.
        let hasUnique: Bool
        /// Whether the entity has secondary indexes to keep.
        let hasIndexes: Bool
        /// Whether one of them is unique.
        let hasUniqueIndexes: Bool
        /// Every key written, in write order (with repeats), for the change feed; kept only
        /// when the feed was observed as the transaction began (``recordsKeys``).
        @exclusivity(unchecked) var written: [Value] = []
        /// Whether anything was written to the table.
        @exclusivity(unchecked) var wasWritten = false

        init(_ table: MemoryEngine.RegisteredEntity, handle: EntityHandle) {
            self.stored = table
            self.slot = handle.slot
            self.handle = handle
            self.hasUnique = !table.unique.isEmpty
            self.hasIndexes = !table.indexes.isEmpty
            self.hasUniqueIndexes = table.indexes.contains(where: \.isUnique)
        }
    }

    let engine: MemoryEngine
    let base: MemoryEngine.Snapshot
    let writable: Bool
    /// Whether written keys are kept for the change feed: only when someone observed it as
    /// the transaction began (otherwise the feed is told only which entities changed, and a
    /// bulk save does not keep a list of every key it wrote).
    let recordsKeys: Bool
    /// Written tables, in the order they were first written.
    private(set) var working: [Working] = []
    private var lastWorking: Working?
    var isFinished = false

    init(engine: MemoryEngine, base: MemoryEngine.Snapshot, writable: Bool, recordsKeys: Bool = false) {
        self.engine = engine
        self.base = base
        self.writable = writable
        self.recordsKeys = recordsKeys
    }

    private func check() throws(DepotError) {
        if isFinished {
            throw DepotError.transactionEnded
        }
    }

    /// The table as this transaction sees it (its own writes included).
    private func table(_ entity: EntityHandle) throws(DepotError) -> MemoryEngine.RegisteredEntity {
        try check()
        if let last = lastWorking, last.handle == entity { return last.table }
        let committed = try base.tables.resolve(entity)
        for w in working where w.slot == entity.slot { return w.table }
        return committed
    }

    /// The working copy of a table, made on its first write.
    private func workingTable(_ entity: EntityHandle) throws(DepotError) -> Working {
        try check()
        // A handle equal to one already checked is valid: registration (the only thing
        // that changes the registry) runs outside write transactions.
        if let last = lastWorking, last.handle == entity { return last }
        // The registry checks the handle against the committed registration.
        let committed = try base.tables.resolve(entity)
        for w in working where w.slot == entity.slot {
            lastWorking = w
            return w
        }
        let fresh = Working(committed, handle: entity)
        working.append(fresh)
        lastWorking = fresh
        return fresh
    }

    /// The rows of a table, in key order.
    private func rows(of table: MemoryEngine.RegisteredEntity) -> [Row] {
        table.rows.rows
    }

    // MARK: Ending

    /// Ends the transaction; later calls through it fail.
    public func end() { isFinished = true }

    /// The references between the snapshot's entities.
    public var relationships: Relationships { base.tables.relationships }

    /// Swaps the working copies in as the committed snapshot, and returns what was written.
    public func commit() throws -> ChangeRecorder {
        try check()
        isFinished = true
        return engine.commit(self)
    }

    /// Drops the working copies.
    public func rollback() { isFinished = true }

    // MARK: ReadTransaction

    /// Visits the rows matching `query` in the snapshot (or the working copies), in its order.
    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        // The stored rows are the native form here: one reader walks them.
        let reader = RowBufferColumns()
        try fetchStored(query, reserve: reserve) { row in
            try reader.reading(row) { try body($0) }
        }
    }

    private func fetchStored(_ query: Query, reserve: (Int) -> Void, _ body: (Row) throws -> Void) throws {
        let table = try table(query.handle)
        if !table.indexes.isEmpty {
            let plan = MemoryPlan.plan(query, in: table)
            if case .index(let number, let ranges) = plan.access {
                _ = try read(query, plan: plan, index: table.indexes[number], ranges: ranges, reserve: reserve, body)
                return
            }
        }
        let inKeyOrder = query.sort.count == 1 && query.sort[0].attributeIndex == query.entity.primaryKeyIndex && query.sort[0].ascending
        if inKeyOrder {
            // The table is in key order: walk it, no sort, and a limit stops the walk early.
            if query.filter == .constant(true) {
                let start = min(query.offset, table.rows.count)
                let end = query.end.map { min(table.rows.count, $0) } ?? table.rows.count
                reserve(max(0, end - start))
                var remaining = end - start
                guard remaining > 0 else { return }
                try table.rows.forEach(from: start) { row in
                    try body(row)
                    remaining -= 1
                    return remaining > 0
                }
                return
            }
            var skipped = 0
            var delivered = 0
            try table.rows.forEach { row in
                guard query.filter.matches(row) else { return true }
                if let limit = query.limit, delivered >= limit { return false }
                if skipped < query.offset {
                    skipped += 1
                    return true
                }
                try body(row)
                delivered += 1
                return true
            }
            return
        }
        // Ranked from the tree as it is walked: no array of every row first.
        var page = Query.Page(query)
        table.rows.forEach { row in
            if query.filter.matches(row) { page.add(row) }
            return true
        }
        let result = page.rows()
        reserve(result.count)
        for row in result { try body(row) }
    }

    /// Reads the rows of an index plan: the entries of its ranges in index order, each
    /// entry's row checked against the filter unless the ranges say all it does; in
    /// order, offset and limit apply as they come and the read stops at the limit, else
    /// the rows are sorted afterwards. Returns the entries read.
    private func read(
        _ query: Query, plan: MemoryPlan, index: MemoryIndex, ranges: [(lower: [UInt8], upper: [UInt8]?)],
        reserve: (Int) -> Void, _ body: (Row) throws -> Void
    ) throws -> Int {
        var entriesRead = 0
        var skipped = 0
        var delivered = 0
        var page = plan.inOrder ? nil : Query.Page(query)
        if plan.inOrder, plan.exact {
            // A plan that skipped counting its entries reads at most a page of them.
            reserve(plan.estimatedRows.map { query.count(ofMatching: $0) } ?? query.limit ?? 0)
        }
        if query.limit == 0 { return 0 }
        rangeLoop: for range in ranges {
            var stopped = false
            let upper = range.upper.map { index.key($0) }
            try index.entries.forEachEntry(from: index.entries.rank(of: index.key(range.lower))) { entryKey, entry in
                if let upper, RowTree.compare(entryKey, upper) >= 0 { return false }
                entriesRead += 1
                let row = entry
                if !plan.exact && !query.filter.matches(row) { return true }
                if page != nil {
                    page?.add(row)
                    return true
                }
                if skipped < query.offset {
                    skipped += 1
                    return true
                }
                try body(row)
                delivered += 1
                if let limit = query.limit, delivered >= limit {
                    stopped = true
                    return false
                }
                return true
            }
            if stopped { break rangeLoop }
        }
        if var page {
            let rows = page.rows()
            reserve(rows.count)
            for row in rows { try body(row) }
        }
        return entriesRead
    }

    /// Calls `body` with the row with primary key `key`, if there is one; returns whether there is.
    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let table = try table(entity)
        guard let found = table.rows[key] else { return false }
        try body(RowColumns(found))
        return true
    }

    /// The number of rows matching `query`, honouring its offset and limit.
    public func count(_ query: Query) throws -> Int {
        let table = try table(query.handle)
        if !table.indexes.isEmpty, query.filter != .constant(true) {
            let plan = MemoryPlan.plan(query, in: table, for: .count)
            if case .index(let number, let ranges) = plan.access {
                // Ranges that say all the filter does are counted from the tree's counts.
                if plan.exact, let entries = plan.estimatedRows { return query.count(ofMatching: entries) }
                var matched = 0
                let index = table.indexes[number]
                for range in ranges {
                    let upper = range.upper.map { index.key($0) }
                    index.entries.forEachEntry(from: index.entries.rank(of: index.key(range.lower))) { entryKey, entry in
                        if let upper, RowTree.compare(entryKey, upper) >= 0 { return false }
                        if query.filter.matches(entry) { matched += 1 }
                        return true
                    }
                }
                return query.count(ofMatching: matched)
            }
        }
        var matched = 0
        if query.filter == .constant(true) {
            matched = table.rows.count
        } else {
            table.rows.forEach { row in
                if query.filter.matches(row) { matched += 1 }
                return true
            }
        }
        return query.count(ofMatching: matched)
    }

    /// The plan ``fetch(_:reserve:_:)`` follows for `query`; with `analyze`, runs it and
    /// counts the rows (or index entries) read.
    public func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        let table = try table(query.handle)
        let plan = MemoryPlan.plan(query, in: table, for: .explain)
        var result = QueryPlan(
            entity: query.entity.name, access: .scan, ranges: plan.rangeText, sortsAfterwards: !plan.inOrder,
            filtersAfterwards: !plan.exact, estimatedRows: plan.estimatedRows)
        switch plan.access {
        case .scan:
            result.ranges = []
            if analyze {
                var read = 0
                let inKeyOrder = plan.inOrder
                table.rows.forEach { row in
                    read += 1
                    if inKeyOrder, let end = query.end, read >= end, query.filter == .constant(true) { return false }
                    return true
                }
                result.actualRows = read
            }
        case .index(let number, let ranges):
            result.access = .index(table.indexes[number].components)
            if analyze {
                result.actualRows = try read(query, plan: plan, index: table.indexes[number], ranges: ranges, reserve: { _ in }) { _ in }
            }
        }
        return result
    }

    // MARK: WriteTransaction

    private func checkWritable() throws(DepotError) {
        if !writable {
            throw DepotError.writeInRead
        }
    }

    /// Checks that no other row holds one of `row`'s unique values. The working table's
    /// unique maps are kept exact, so the owner a map names holds the value.
    private func checkUnique(_ row: Row, key: Value, in w: Working, entity: EntityDescription) throws(DepotError) {
        for (position, owners) in w.unique {
            let value = row[value: position]
            if value.isNull { continue }
            if let owner = owners[value], owner != key {
                throw DepotError.duplicateUnique(entity: entity.name, attribute: entity.attributes[position].name, value: value)
            }
        }
    }

    /// Checks that no other row shares all of `row`'s components in a unique index.
    private func checkUniqueIndexes(_ row: Row, key: Value, in w: Working, entity: EntityDescription) throws(DepotError) {
        for index in w.indexes where index.isUnique {
            if index.conflict(with: row, key: key) != nil { throw index.duplicate(row, entity: entity) }
        }
    }

    /// Writes `row` (or deletes, for `nil`) under `key` in the working table; returns the
    /// row it replaced.
    @discardableResult
    private func put(_ row: Row?, key: Value, in w: Working) -> Row? {
        let old: Row?
        if let row {
            if w.isAboveEveryKey(key) {
                w.appendAboveEveryKey(row, key: key)
                old = nil
            } else {
                old = w.table.rows.updateValue(row, forKey: key)
            }
        } else {
            old = w.table.rows.removeValue(forKey: key)
            w.forgetLargestKey()
        }
        w.wasWritten = true
        if recordsKeys { w.written.append(key) }
        if w.hasIndexes {
            if old == nil, let row, !w.hasUniqueIndexes {
                w.queueIndexEntries(of: row)
            } else {
                for i in w.indexes.indices {
                    // An update that leaves an index's attributes alone keeps its entry's
                    // key; the entry takes the new row.
                    if let old, let row, w.indexes[i].positions.allSatisfy({ old[value: $0] == row[value: $0] }) {
                        w.indexes[i].insert(row)
                        continue
                    }
                    if let old { w.indexes[i].remove(old) }
                    if let row { w.indexes[i].insert(row) }
                }
            }
        }
        if w.hasUnique {
            for position in Array(w.unique.keys) {
                if let value = old?[value: position], !value.isNull, w.unique[position]?[value] == key {
                    w.unique[position]?[value] = nil
                }
                if let value = row?[value: position], !value.isNull {
                    w.unique[position]?[value] = key
                }
            }
        }
        return old
    }

    /// Adds `row`; fails when its primary key or a unique value is taken.
    public func insert(_ row: Row, into entity: EntityHandle) throws {
        try checkWritable()
        let w = try workingTable(entity)
        let key = try entity.check(row)
        if !w.isAboveEveryKey(key), w.table.rows[key] != nil { throw DepotError.duplicateKey(entity: entity.name, key: key) }
        if w.hasUnique { try checkUnique(row, key: key, in: w, entity: entity.entity) }
        if w.hasUniqueIndexes { try checkUniqueIndexes(row, key: key, in: w, entity: entity.entity) }
        put(row, key: key, in: w)
    }

    /// Adds `row`, or replaces the row with its primary key; returns whether it added it.
    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        try checkWritable()
        let w = try workingTable(entity)
        let key = try entity.check(row)
        if w.hasUnique { try checkUnique(row, key: key, in: w, entity: entity.entity) }
        if w.hasUniqueIndexes { try checkUniqueIndexes(row, key: key, in: w, entity: entity.entity) }
        return put(row, key: key, in: w) == nil
    }

    /// Replaces the row with `row`'s primary key; fails when there is none.
    public func update(_ row: Row, in entity: EntityHandle) throws {
        try checkWritable()
        let w = try workingTable(entity)
        let key = try entity.check(row)
        guard w.table.rows[key] != nil else { throw DepotError.notFound(entity: entity.name, key: key) }
        if w.hasUnique { try checkUnique(row, key: key, in: w, entity: entity.entity) }
        if w.hasUniqueIndexes { try checkUniqueIndexes(row, key: key, in: w, entity: entity.entity) }
        put(row, key: key, in: w)
    }

    /// Deletes the row with primary key `key`; returns whether it existed.
    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        try checkWritable()
        let w = try workingTable(entity)
        guard w.table.rows[key] != nil else { return false }
        put(nil, key: key, in: w)
        return true
    }

    /// Deletes the rows matching `query`; returns how many.
    public func delete(_ query: Query) throws -> Int {
        try checkWritable()
        let w = try workingTable(query.handle)
        let doomed = query.apply(to: rows(of: w.table))
        for row in doomed { put(nil, key: row[value: query.entity.primaryKeyIndex], in: w) }
        return doomed.count
    }
}
