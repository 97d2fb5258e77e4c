import CLMDB
import DepotCore
import Foundation

// Reads: query plans run over cursors, records read in place.
extension LMDBTransaction {
    /// Visits the candidate rows of `plan`, decoded into one reused row. `body` returns
    /// `false` to stop.
    func visit(_ plan: Plan, _ handles: RegisteredEntity, _ body: (Row) throws -> Bool) throws {
        var row = Row(capacity: handles.entity.attributes.count)
        try visitValues(plan, handles) { value in
            try decode(value, handles, into: &row)
            return try body(row)
        }
    }

    /// Visits the stored values of the candidate records of `plan`, in place in the map.
    /// `body` returns `false` to stop.
    func visitValues(_ plan: Plan, _ handles: RegisteredEntity, _ body: (MDB_val) throws -> Bool) throws {
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
    func load(_ value: MDB_val, into columns: RecordColumns, _ handles: RegisteredEntity) throws(DepotError) {
        guard columns.load(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else {
            throw corrupted("A record cannot be decoded as \(handles.entity.name)", entity: handles.entity.name)
        }
    }

    /// Counts the entries of an exact plan without decoding a record.
    func countEntries(_ plan: Plan, _ handles: RegisteredEntity, stopAt: Int?) throws -> Int {
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
        let handles = try handles(for: query.handle)
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
    func fetchTopN(
        _ query: Query, _ plan: Plan, _ handles: RegisteredEntity, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void
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
        let handles = try handles(for: query.handle)
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

    func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let handles = try handles(for: entity)
        guard key.type == handles.entity.primaryKey.type else { return false }
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
        let handles = try handles(for: query.handle)
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
}
