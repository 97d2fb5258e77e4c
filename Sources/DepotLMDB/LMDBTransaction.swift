import CLMDB
import DepotCore
import Foundation

/// An index database of one attribute: `MDB_DUPSORT`, index key → primary keys.
struct IndexHandle: Sendable, Equatable {
    let position: Int
    let dbi: MDB_dbi
    let isUnique: Bool
}

/// The open databases of one registered entity.
struct EntityHandles: Sendable {
    let entity: EntityDescription
    let main: MDB_dbi
    let indexes: [IndexHandle]
    let schemaVersion: Int
    /// The attribute types in order, so decoding a record does not copy descriptions.
    let types: [AttributeType]
    /// The exact bytes of the entity's stored schema (`entity:<Name>` in `depot_meta`) these
    /// handles were made from. Another process that migrates the entity changes them; every
    /// transaction compares them before using the handles (see
    /// ``LMDBTransaction/handles(for:)``).
    var stamp: [UInt8] = []

    init(entity: EntityDescription, main: MDB_dbi, indexes: [IndexHandle], schemaVersion: Int) {
        self.entity = entity
        self.main = main
        self.indexes = indexes
        self.schemaVersion = schemaVersion
        self.types = entity.attributes.map(\.type)
    }

    @inline(__always)
    func index(at position: Int) -> IndexHandle? {
        for index in indexes where index.position == position { return index }
        return nil
    }
}

/// A read or write transaction over one `MDB_txn`.
///
/// Only valid inside the closure it was passed to: the store ends the LMDB transaction
/// when the closure returns and sets ``isFinished``, after which every call throws
/// ``DepotError/Code/closed`` instead of touching the freed handle.
final class LMDBTransaction: WriteTransaction {
    let txn: OpaquePointer
    /// The reader ``fetchRow(_:key:_:)`` reuses.
    private var keyColumns: RecordColumns?
    let catalog: [String: EntityHandles]
    let writable: Bool
    let maxKeySize: Int
    let metaDBI: MDB_dbi
    let storeName: String
    var recorder: ChangeRecorder
    var isFinished = false
    /// Set when LMDB reported `MDB_MAP_FULL`; the store then grows the map and reruns the
    /// whole transaction, whatever the closure did with the error.
    var mapFull = false
    /// Set when an entity's stored schema is no longer the one the store's catalog was
    /// made from (another process migrated it); the store then reloads its catalog and
    /// reruns the whole transaction, whatever the closure did with the error.
    var catalogChanged = false

    // Used only by the one thread that runs the transaction, and never across a call that
    // could re-enter: no dynamic exclusivity checks on the hot path.
    @exclusivity(unchecked) private var lastHandles: EntityHandles?
    @exclusivity(unchecked) private var lastAttributes: [AttributeDescription] = []
    @exclusivity(unchecked) private var keyBuffer: [UInt8] = []
    @exclusivity(unchecked) private var valueBuffer: [UInt8] = []
    @exclusivity(unchecked) private var indexKeys: [[UInt8]] = []
    @exclusivity(unchecked) private var oldIndexKey: [UInt8] = []
    @exclusivity(unchecked) private var oldRow = Row()

    init(
        txn: OpaquePointer, catalog: [String: EntityHandles], writable: Bool, maxKeySize: Int, metaDBI: MDB_dbi,
        storeName: String, recording: Bool
    ) {
        self.txn = txn
        self.catalog = catalog
        self.writable = writable
        self.maxKeySize = maxKeySize
        self.metaDBI = metaDBI
        self.storeName = storeName
        // Not recording still notes the touched entities (see ChangeRecorder).
        self.recorder = ChangeRecorder(detailed: recording)
    }

    // MARK: Plumbing

    func fail(_ rc: Int32, _ context: @autoclosure () -> String) -> DepotError {
        if rc == MDB_MAP_FULL { mapFull = true }
        return DepotError.lmdb(rc, context: context())
    }

    func handles(for entity: EntityDescription) throws(DepotError) -> EntityHandles {
        if isFinished {
            throw DepotError(.closed, "This transaction has ended; use the context only inside its closure.")
        }
        // Most transactions touch one entity many times: skip the dictionary lookup.
        // A record type's descriptions share one attribute array, so comparing buffers
        // proves the description is the one already checked.
        if let last = lastHandles, last.entity.name == entity.name, entity.attributes.sharesStorage(with: lastAttributes) {
            return last
        }
        guard let handles = catalog[entity.name] else {
            throw DepotError(.invalidSchema, "The entity \(entity.name) is not registered with this store; register it (a Controller does so on first use) before reading or writing it.")
        }
        // Several processes may share the directory: one may have migrated the entity since
        // this process loaded its catalog. Writing with stale handles would store rows in the
        // old layout and skip new indexes, so the stored schema is compared, once per
        // entity per transaction (one lookup in the small metadata database).
        guard let stored = try get(metaDBI, Catalog.entityKey(entity.name), context: "Reading the schema of \(entity.name)"),
            Self.compare(stored, handles.stamp) == 0
        else {
            catalogChanged = true
            throw DepotError(.schemaMismatch, "The schema of \(entity.name) in the LMDB store at \(storeName) was changed by another process; the transaction runs again with the new schema.")
        }
        // The registered layout, attribute for attribute (one check for every backend).
        try handles.entity.checkSameShape(as: entity)
        lastHandles = handles
        lastAttributes = entity.attributes
        return handles
    }

    func corrupted(_ what: String, entity: String) -> DepotError {
        DepotError(.storeCorrupted, "\(what) in the \(entity) database of the LMDB store at \(storeName); the file is damaged or was written by something else. Restore it from a backup.")
    }

    @inline(__always)
    func decode(_ value: MDB_val, _ handles: EntityHandles, into row: inout Row) throws(DepotError) {
        let buffer = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
        guard RecordFormat.decode(buffer, types: handles.types, into: &row) else {
            throw corrupted("A record cannot be decoded as \(handles.entity.name)", entity: handles.entity.name)
        }
    }

    /// `memcmp` order with the shorter key first on a common prefix: LMDB's default order.
    @inline(__always)
    static func compare(_ value: MDB_val, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { b in
            let common = min(value.mv_size, b.count)
            if common > 0, let base = value.mv_data, let other = b.baseAddress {
                let r = memcmp(base, other, common)
                if r != 0 { return r < 0 ? -1 : 1 }
            }
            return value.mv_size == b.count ? 0 : (value.mv_size < b.count ? -1 : 1)
        }
    }

    @inline(__always)
    static func withVal<R>(_ bytes: [UInt8], _ body: (inout MDB_val) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { raw in
            var v = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return try body(&v)
        }
    }

    /// Reads `key` in `dbi`; the returned value points into the map and is valid until the
    /// next write of this transaction.
    func get(_ dbi: MDB_dbi, _ key: [UInt8], context: @autoclosure () -> String) throws(DepotError) -> MDB_val? {
        var data = MDB_val()
        let rc = Self.withVal(key) { k in mdb_get(txn, dbi, &k, &data) }
        if rc == 0 { return data }
        if rc == MDB_NOTFOUND { return nil }
        throw fail(rc, context())
    }

    func put(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8], flags: UInt32 = 0, context: @autoclosure () -> String) throws(DepotError) {
        let rc = Self.withVal(key) { k in Self.withVal(value) { v in mdb_put(txn, dbi, &k, &v, flags) } }
        if rc != 0 { throw fail(rc, context()) }
    }

    /// Deletes `key` (and, in a DUPSORT database, only the pair with `value`).
    @discardableResult
    func del(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8]?, context: @autoclosure () -> String) throws(DepotError) -> Bool {
        let rc: Int32
        if let value {
            rc = Self.withVal(key) { k in Self.withVal(value) { v in mdb_del(txn, dbi, &k, &v) } }
        } else {
            rc = Self.withVal(key) { k in mdb_del(txn, dbi, &k, nil) }
        }
        if rc == MDB_NOTFOUND { return false }
        if rc != 0 { throw fail(rc, context()) }
        return true
    }

    func entries(_ dbi: MDB_dbi) throws(DepotError) -> Int {
        var stat = MDB_stat()
        let rc = mdb_stat(txn, dbi, &stat)
        if rc != 0 { throw fail(rc, "Reading database statistics in \(storeName)") }
        // The count comes from the file: a damaged one must not make later arithmetic overflow.
        return max(0, stat.ms_entries)
    }

    func withCursor<R>(_ dbi: MDB_dbi, _ body: (OpaquePointer) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        let rc = mdb_cursor_open(txn, dbi, &cursor)
        guard rc == 0, let cursor else { throw fail(rc, "Opening a cursor in \(storeName)") }
        defer { mdb_cursor_close(cursor) }
        return try body(cursor)
    }

    /// Visits the entries of `range` (each duplicate of a DUPSORT key, in ascending order)
    /// forwards or backwards. Returns `false` when `body` stopped the scan.
    func scan(
        _ cursor: OpaquePointer, dupSort: Bool, range: KeyRange, descending: Bool,
        _ body: (MDB_val, MDB_val) throws -> Bool
    ) throws -> Bool {
        var key = MDB_val()
        var data = MDB_val()
        var rc: Int32
        func seek(_ bound: [UInt8]) -> Int32 {
            bound.withUnsafeBytes { raw in
                key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
                return mdb_cursor_get(cursor, &key, &data, MDB_SET_RANGE)
            }
        }
        if !descending {
            if let lower = range.lower {
                rc = seek(lower)
                if rc == 0 && !range.lowerInclusive && Self.compare(key, lower) == 0 {
                    rc = mdb_cursor_get(cursor, &key, &data, dupSort ? MDB_NEXT_NODUP : MDB_NEXT)
                }
            } else {
                rc = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
            }
            while rc == 0 {
                if let upper = range.upper {
                    let c = Self.compare(key, upper)
                    if c > 0 || (c == 0 && !range.upperInclusive) { return true }
                }
                if try !body(key, data) { return false }
                rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT)
            }
        } else {
            if let upper = range.upper {
                rc = seek(upper)
                if rc == MDB_NOTFOUND {
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_LAST)
                } else if rc == 0 {
                    let c = Self.compare(key, upper)
                    if c > 0 || (c == 0 && !range.upperInclusive) {
                        rc = mdb_cursor_get(cursor, &key, &data, dupSort ? MDB_PREV_NODUP : MDB_PREV)
                    }
                }
            } else {
                rc = mdb_cursor_get(cursor, &key, &data, MDB_LAST)
            }
            while rc == 0 {
                if let lower = range.lower {
                    let c = Self.compare(key, lower)
                    if c < 0 || (c == 0 && !range.lowerInclusive) { return true }
                }
                if dupSort {
                    // Keys descend, but a key's duplicates (primary keys) ascend: that is
                    // the primary-key tie-break of a descending sort.
                    // MDB_SET rather than MDB_FIRST_DUP: after MDB_LAST, LMDB 0.9 leaves the
                    // cursor flagged at its end, and MDB_NEXT_DUP would stop after one item.
                    let current = key
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_SET)
                    while rc == 0 {
                        if try !body(current, data) { return false }
                        rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT_DUP)
                    }
                    if rc != MDB_NOTFOUND { break }
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_PREV_NODUP)
                } else {
                    if try !body(key, data) { return false }
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_PREV)
                }
            }
        }
        if rc != MDB_NOTFOUND { throw fail(rc, "Scanning a database in \(storeName)") }
        return true
    }

    /// Visits the candidate rows of `plan`, decoded into one reused row. `body` returns
    /// `false` to stop.
    func visit(_ plan: Plan, _ handles: EntityHandles, _ body: (Row) throws -> Bool) throws {
        var row = Row(capacity: handles.entity.attributes.count)
        try visitValues(plan, handles) { value in
            try decode(value, handles, into: &row)
            return try body(row)
        }
    }

    /// Visits the stored values of the candidate records of `plan`, in place in the map.
    /// `body` returns `false` to stop.
    func visitValues(_ plan: Plan, _ handles: EntityHandles, _ body: (MDB_val) throws -> Bool) throws {
        let dbi: MDB_dbi
        let dupSort: Bool
        switch plan.source {
        case .primary: (dbi, dupSort) = (handles.main, false)
        case .index(let index): (dbi, dupSort) = (index.dbi, true)
        }
        let ranges = plan.ranges ?? [.all]
        // Plain values only in the per-record closure: capturing the handles or the plan
        // made every record pay for copying (retaining) their arrays.
        let main = handles.main
        let entityName = handles.entity.name
        let descending = plan.descending
        let txn = self.txn
        try withCursor(dbi) { cursor in
            for range in (descending ? ranges.reversed() : ranges) {
                let more = try scan(cursor, dupSort: dupSort, range: range, descending: descending) { _, data in
                    if dupSort {
                        var primaryKey = data
                        var value = MDB_val()
                        let rc = mdb_get(txn, main, &primaryKey, &value)
                        if rc == MDB_NOTFOUND {
                            throw corrupted("An index entry points to a missing record", entity: entityName)
                        }
                        if rc != 0 { throw fail(rc, "Reading a \(entityName) record in \(storeName)") }
                        return try body(value)
                    }
                    return try body(data)
                }
                if !more { return }
            }
        }
    }

    /// Points `columns` at a stored value, or reports it as damaged.
    @inline(__always)
    func load(_ value: MDB_val, into columns: RecordColumns, _ handles: EntityHandles) throws(DepotError) {
        guard columns.load(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else {
            throw corrupted("A record cannot be decoded as \(handles.entity.name)", entity: handles.entity.name)
        }
    }

    /// Counts the entries of an exact plan without decoding a record.
    func countEntries(_ plan: Plan, _ handles: EntityHandles, stopAt: Int?) throws -> Int {
        let dbi: MDB_dbi
        let dupSort: Bool
        switch plan.source {
        case .primary: (dbi, dupSort) = (handles.main, false)
        case .index(let index): (dbi, dupSort) = (index.dbi, true)
        }
        var n = 0
        try withCursor(dbi) { cursor in
            for range in plan.ranges ?? [.all] {
                let more = try scan(cursor, dupSort: dupSort, range: range, descending: false) { _, _ in
                    n += 1
                    return stopAt.map { n < $0 } ?? true
                }
                if !more { return }
            }
        }
        return n
    }

    // MARK: ReadTransaction

    func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        let handles = try handles(for: query.entity)
        if case .constant(let b) = query.filter, b != true { return }
        if query.limit == 0 { return }
        let plan = QueryPlanner.plan(query, handles: handles, maxKeySize: maxKeySize, needsOrder: true)
        if !plan.ordered, let end = query.end, end <= Query.largestTopNWindow {
            return try fetchTopN(query, plan, handles, reserve: reserve, body)
        }
        guard plan.ordered && plan.exact else {
            // A filter to evaluate or an order to build needs the neutral rows.
            let reader = RowColumns()
            return try fetchRows(query, reserve: reserve) { row in
                reader.row = row
                try body(reader)
            }
        }
        // The plan yields exactly the records asked for, in order: read each in place.
        if plan.ranges == nil {
            let total = try entries(handles.main)
            reserve(min(max(0, total - query.offset), query.limit ?? Int.max))
        }
        let columns = RecordColumns(types: handles.types)
        let limit = query.limit ?? Int.max
        let offset = query.offset
        let entityName = handles.entity.name
        var skipped = 0
        var emitted = 0
        try visitValues(plan, handles) { value in
            if skipped < offset {
                skipped += 1
                return true
            }
            guard columns.load(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else {
                throw corrupted("A record cannot be decoded as \(entityName)", entity: entityName)
            }
            try body(columns)
            emitted += 1
            return emitted < limit
        }
    }

    /// The first few records of a plan in another order: filters and ranks every candidate
    /// by the attributes the filter and the order read (and the key) alone, decoded in
    /// place into one reused row, then reads only the winners whole. Most candidates never
    /// become a full `Row`. (Scanning the main database instead of a wide index range was
    /// measured too: slower, even at a third of the records, because every record is then
    /// decoded.)
    private func fetchTopN(
        _ query: Query, _ plan: Plan, _ handles: EntityHandles, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void
    ) throws {
        let columns = RecordColumns(types: handles.types)
        let keyIndex = handles.entity.primaryKeyIndex
        let filter = query.filter
        let needsFilter = !plan.exact
        let ranked = Array(Set(query.sort.map(\.attributeIndex) + [keyIndex]).union(needsFilter ? filter.attributeIndices : []))
        let entityName = handles.entity.name
        var page = Query.Page(query)
        var sparse = Row(Array(repeating: Value.null, count: handles.types.count))
        try visitValues(plan, handles) { value in
            guard columns.load(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else {
                throw corrupted("A record cannot be decoded as \(entityName)", entity: entityName)
            }
            for index in ranked { sparse[value: index] = try columns.value(index) }
            if !needsFilter || filter.matches(sparse) { page.add(sparse) }
            return true
        }
        let winners = page.rows()
        reserve(winners.count)
        for winner in winners {
            keyBuffer.removeAll(keepingCapacity: true)
            KeyEncoding.appendPrimaryKey(winner[value: keyIndex], to: &keyBuffer)
            guard let value = try get(handles.main, keyBuffer, context: "Reading a \(entityName) record in \(storeName)") else {
                throw corrupted("A record ranked a moment ago is missing", entity: entityName)
            }
            try load(value, into: columns, handles)
            try body(columns)
        }
    }

    func fetchRows(_ query: Query, reserve: (Int) -> Void, _ body: (Row) throws -> Void) throws {
        let handles = try handles(for: query.entity)
        if case .constant(let b) = query.filter, b != true { return }
        if query.limit == 0 { return }
        let plan = QueryPlanner.plan(query, handles: handles, maxKeySize: maxKeySize, needsOrder: true)
        let filter = query.filter
        if plan.ordered {
            let limit = query.limit ?? Int.max
            let offset = query.offset
            let exact = plan.exact
            if exact && plan.ranges == nil {
                let total = try entries(handles.main)
                reserve(min(max(0, total - offset), limit))
            }
            var skipped = 0
            var emitted = 0
            try visit(plan, handles) { row in
                if !exact && !filter.matches(row) { return true }
                if skipped < offset {
                    skipped += 1
                    return true
                }
                try body(row)
                emitted += 1
                return emitted < limit
            }
            return
        }
        // Not in the order asked for: collect the page (top-N for a small offset + limit).
        var page = Query.Page(query)
        if plan.exact && plan.ranges == nil { page.reserveCapacity(try entries(handles.main)) }
        try visit(plan, handles) { row in
            if plan.exact || filter.matches(row) { page.add(row) }
            return true
        }
        let rows = page.rows()
        reserve(rows.count)
        for row in rows { try body(row) }
    }

    func fetchRow(_ entity: EntityDescription, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let handles = try handles(for: entity)
        guard key.type == entity.attributes[entity.primaryKeyIndex].type else { return false }
        keyBuffer.removeAll(keepingCapacity: true)
        KeyEncoding.appendPrimaryKey(key, to: &keyBuffer)
        guard keyBuffer.count <= maxKeySize else { return false }
        guard let value = try get(handles.main, keyBuffer, context: "Reading a \(entity.name) record in \(storeName)") else {
            return false
        }
        // One reader serves every lookup of an entity in this transaction (lookups by key
        // come in bursts); a lookup made while it is lent out gets its own.
        let columns: RecordColumns
        if let cached = keyColumns, cached.types.sharesStorage(with: handles.types), !cached.isLent {
            columns = cached
        } else {
            columns = RecordColumns(types: handles.types)
            if keyColumns?.isLent != true { keyColumns = columns }
        }
        try load(value, into: columns, handles)
        columns.isLent = true
        defer { columns.isLent = false }
        try body(columns)
        return true
    }

    func count(_ query: Query) throws -> Int {
        let handles = try handles(for: query.entity)
        if case .constant(let b) = query.filter, b != true { return 0 }
        let window = query.end
        let matched: Int
        if query.filter == .constant(true) {
            matched = try entries(handles.main)
        } else {
            let plan = QueryPlanner.plan(query, handles: handles, maxKeySize: maxKeySize, needsOrder: false)
            if plan.exact {
                matched = try countEntries(plan, handles, stopAt: window)
            } else {
                var n = 0
                let filter = query.filter
                try visit(plan, handles) { row in
                    if filter.matches(row) { n += 1 }
                    return window.map { n < $0 } ?? true
                }
                matched = n
            }
        }
        return query.count(ofMatching: matched)
    }

    // MARK: WriteTransaction

    private enum WriteMode { case insert, upsert, update }

    private func checkWritable() throws(DepotError) {
        if isFinished {
            throw DepotError(.closed, "This transaction has ended; use the context only inside its closure.")
        }
        if !writable {
            throw DepotError(.invalidConfiguration, "This is a read transaction; write inside a write operation.")
        }
    }

    /// Encodes the primary key into `keyBuffer` and every index key into `indexKeys`,
    /// refusing values over LMDB's key limit before anything is written.
    private func encodeKeys(_ row: Row, _ handles: EntityHandles) throws(DepotError) {
        let entity = handles.entity
        keyBuffer.removeAll(keepingCapacity: true)
        KeyEncoding.appendPrimaryKey(row[value: entity.primaryKeyIndex], to: &keyBuffer)
        if keyBuffer.count > maxKeySize {
            throw DepotError(.invalidValue, "The primary key \(entity.name).\(entity.primaryKey.name) = \(row[value: entity.primaryKeyIndex].debugLiteral) takes \(keyBuffer.count) bytes as an LMDB key, over LMDB's limit of \(maxKeySize) bytes. Use a shorter key; nothing was written.")
        }
        while indexKeys.count < handles.indexes.count { indexKeys.append([]) }
        for (n, index) in handles.indexes.enumerated() {
            indexKeys[n].removeAll(keepingCapacity: true)
            let value = row[value: index.position]
            KeyEncoding.appendIndexKey(value, to: &indexKeys[n])
            if indexKeys[n].count > maxKeySize {
                let name = entity.attributes[index.position].name
                throw DepotError(.invalidValue, "\(entity.name).\(name) is indexed, and its value \(value.debugLiteral) takes \(indexKeys[n].count) bytes as an index key, over LMDB's key limit of \(maxKeySize) bytes. Store a shorter value or remove the index; nothing was written.")
            }
        }
    }

    /// Built only when an error needs it, so a write allocates no text.
    private func writeContext(_ entity: EntityDescription) -> String {
        "Writing a \(entity.name) record in \(storeName)"
    }

    /// Writes one row; returns whether a row with its key existed.
    private func write(_ row: Row, _ handles: EntityHandles, mode: WriteMode) throws -> Bool {
        let entity = handles.entity
        _ = try entity.check(row)
        try encodeKeys(row, handles)
        let key = row[value: entity.primaryKeyIndex]
        // Every check runs before the first write, so a refused row leaves the transaction
        // as it was even when the caller catches the error and goes on.
        var existed = false
        if let old = try get(handles.main, keyBuffer, context: self.writeContext(entity)) {
            existed = true
            if !handles.indexes.isEmpty { try decode(old, handles, into: &oldRow) }
        }
        if mode == .insert && existed { throw DepotError.duplicateKey(entity: entity.name, key: key) }
        if mode == .update && !existed { throw DepotError.notFound(entity: entity.name, key: key) }
        for (n, index) in handles.indexes.enumerated() where index.isUnique {
            let value = row[value: index.position]
            if value.isNull { continue }
            if let owner = try get(index.dbi, indexKeys[n], context: self.writeContext(entity)), Self.compare(owner, keyBuffer) != 0 {
                throw DepotError.duplicateUnique(entity: entity.name, attribute: entity.attributes[index.position].name, value: value)
            }
        }
        RecordFormat.encode(row, into: &valueBuffer)
        try put(handles.main, keyBuffer, valueBuffer, context: self.writeContext(entity))
        for (n, index) in handles.indexes.enumerated() {
            if existed {
                oldIndexKey.removeAll(keepingCapacity: true)
                KeyEncoding.appendIndexKey(oldRow[value: index.position], to: &oldIndexKey)
                if oldIndexKey == indexKeys[n] { continue }
                try del(index.dbi, oldIndexKey, keyBuffer, context: self.writeContext(entity))
            }
            try put(index.dbi, indexKeys[n], keyBuffer, context: self.writeContext(entity))
        }
        recorder.record(entity: entity.name, key: key, existedBefore: existed, existsAfter: true)
        return existed
    }

    func insert(_ row: Row, into entity: EntityDescription) throws {
        try checkWritable()
        _ = try write(row, try handles(for: entity), mode: .insert)
    }

    func upsert(_ row: Row, into entity: EntityDescription) throws -> Bool {
        try checkWritable()
        return !(try write(row, try handles(for: entity), mode: .upsert))
    }

    func update(_ row: Row, in entity: EntityDescription) throws {
        try checkWritable()
        _ = try write(row, try handles(for: entity), mode: .update)
    }

    func delete(key: Value, from entity: EntityDescription) throws -> Bool {
        try checkWritable()
        let handles = try handles(for: entity)
        guard key.type == entity.attributes[entity.primaryKeyIndex].type else { return false }
        keyBuffer.removeAll(keepingCapacity: true)
        KeyEncoding.appendPrimaryKey(key, to: &keyBuffer)
        guard keyBuffer.count <= maxKeySize else { return false }
        guard let old = try get(handles.main, keyBuffer, context: self.writeContext(entity)) else { return false }
        if !handles.indexes.isEmpty {
            try decode(old, handles, into: &oldRow)
            for index in handles.indexes {
                oldIndexKey.removeAll(keepingCapacity: true)
                KeyEncoding.appendIndexKey(oldRow[value: index.position], to: &oldIndexKey)
                try del(index.dbi, oldIndexKey, keyBuffer, context: self.writeContext(entity))
            }
        }
        try del(handles.main, keyBuffer, nil, context: self.writeContext(entity))
        recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: false)
        return true
    }

    func delete(_ query: Query) throws -> Int {
        try checkWritable()
        let handles = try handles(for: query.entity)
        // Collect first: deleting under an open cursor would move it.
        var keys: [Value] = []
        try fetchRows(query, reserve: { keys.reserveCapacity($0) }) { row in
            keys.append(row[value: handles.entity.primaryKeyIndex])
        }
        var deleted = 0
        for key in keys where try delete(key: key, from: query.entity) { deleted += 1 }
        return deleted
    }
}
