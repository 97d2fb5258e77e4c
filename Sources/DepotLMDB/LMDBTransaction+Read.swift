import CLMDB
public import DepotCore
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
        let lookup: Bool
        switch plan.source {
        case .union(let alternatives): return try visitUnion(alternatives, handles, descending: plan.descending, body)
        case .primary: (dbi, dupSort, lookup) = (handles.main, false, false)
        case .index(let index): (dbi, dupSort, lookup) = (index.dbi, true, true)
        case .composite(let index): (dbi, dupSort, lookup) = (index.dbi, false, true)
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
                    if lookup {
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
        case .union(let alternatives):
            let keys = try unionKeys(alternatives, handles).count
            return stopAt.map { min($0, keys) } ?? keys
        case .primary: (dbi, dupSort) = (handles.main, false)
        case .index(let index): (dbi, dupSort) = (index.dbi, true)
        case .composite(let index): (dbi, dupSort) = (index.dbi, false)
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

    /// Plans `query`, then checks a range on a secondary index that only filters (the rows
    /// are sorted afterwards): each of its entries costs a lookup in the main database, so
    /// when the range holds a large share of the records, reading the main database in
    /// order is cheaper. The range is measured by distinct keys, counting each key's
    /// duplicates, and only up to that share.
    ///
    /// When composite indexes fit the query too, the plan of least estimated cost wins (see
    /// ``choose(_:_:_:needsOrder:)``).
    ///
    /// `describing`: whether a composite plan carries its ranges as conditions, for `explain`.
    ///
    /// A limited query on an entity with composite indexes first looks for its shape in the
    /// entity's plan cache (see ``ReusablePlan``): a hit encodes the new values into the
    /// remembered plan and re-checks its cost against the data in this transaction, and
    /// falls back to planning afresh when the check fails.
    ///
    /// A filter with an `OR` among its conjuncts is then weighed as a union of its
    /// alternatives (see ``unionPlan(_:_:needsOrder:describing:rival:)``); any other filter
    /// never reaches that planner.
    package func plan(_ query: Query, _ handles: RegisteredEntity, needsOrder: Bool, describing: Bool = false) throws -> Plan {
        let plan = try oneSourcePlan(query, handles, needsOrder: needsOrder, describing: describing)
        guard Self.hasAlternatives(query) else { return plan }
        return try unionPlan(query, handles, needsOrder: needsOrder, describing: describing, rival: plan) ?? plan
    }

    /// The plan reading one source: the primary key, one index or one composite index.
    func oneSourcePlan(_ query: Query, _ handles: RegisteredEntity, needsOrder: Bool, describing: Bool) throws -> Plan {
        guard !describing, query.limit != nil, !handles.composites.isEmpty else {
            return try planAfresh(query, handles, needsOrder: needsOrder, describing: describing).plan
        }
        let shape = PlanShape(query, needsOrder: needsOrder)
        if let reusable = handles.reusablePlan(for: shape), let plan = try reuse(reusable, query, handles) {
            return plan
        }
        let (plan, candidates, chosen) = try planAfresh(query, handles, needsOrder: needsOrder, describing: false)
        if let chosen, let reusable = ReusablePlan(
            chosen: chosen, of: candidates, query, handles, needsOrder: needsOrder, transaction: self)
        {
            handles.remember(reusable, for: shape)
        }
        return plan
    }

    /// Plans `query` from scratch: the plan, the candidates it was chosen from (in the order
    /// ``choose(_:_:_:needsOrder:)`` was given them) and the chosen one's place among them;
    /// no candidates when no composite index fits.
    package func planAfresh(
        _ query: Query, _ handles: RegisteredEntity, needsOrder: Bool, describing: Bool
    ) throws -> (plan: Plan, candidates: [Plan], chosen: Int?) {
        let single = try singleAttributePlan(query, handles, needsOrder: needsOrder)
        let composites = CompositePlanner.candidates(
            query, handles: handles, maxKeySize: maxKeySize, needsOrder: needsOrder, describing: describing)
        if composites.isEmpty { return (single, [], nil) }
        // Most conditions expressed first: among plans of equal cost, the narrower one.
        let ordered = composites.enumerated().sorted { (a: (offset: Int, element: Plan), b: (offset: Int, element: Plan)) -> Bool in
            let (x, y) = (a.element.consumed, b.element.consumed)
            return x != y ? x > y : a.offset < b.offset
        }.map { $0.element }
        let candidates = ordered + [single]
        let chosen = try choose(candidates, query, handles, needsOrder: needsOrder)
        return (chosen.plan, candidates, chosen.index)
    }

    func singleAttributePlan(_ query: Query, _ handles: RegisteredEntity, needsOrder: Bool) throws -> Plan {
        let plan = QueryPlanner.plan(query, handles: handles, maxKeySize: maxKeySize, needsOrder: needsOrder)
        guard case .index(let index) = plan.source, !plan.ordered, let ranges = plan.ranges else { return plan }
        let total = try entries(handles.main)
        let share = total / Self.indexLookupCost
        guard share > 0, try countIndexEntries(index, ranges, reaching: share) >= share else { return plan }
        return QueryPlanner.fullScan(query, handles: handles, needsOrder: needsOrder)
    }

    /// The cost of one row read through `plan`: a step in the main database, or a lookup in
    /// it through an index entry (a count of an exact plan reads no record).
    func rowCost(_ plan: Plan, needsOrder: Bool) -> Int {
        if case .primary = plan.source { return 1 }
        return !needsOrder && plan.exact ? 1 : Self.indexLookupCost
    }

    /// The most rows `plan` reads before the query is answered, whatever its ranges hold:
    /// `offset + limit` when it is exact and in order (or counts), else none.
    func window(_ plan: Plan, _ query: Query, needsOrder: Bool) -> Int? {
        plan.exact && (plan.ordered || !needsOrder) ? query.end : nil
    }

    /// The plan of least estimated cost, in rows read times ``rowCost(_:needsOrder:)``.
    ///
    /// The rows a plan reads are its ranges' entries (their size measured by a cursor walk,
    /// one step per entry, or per distinct key of a single-attribute index, or `mdb_stat`
    /// for a whole database), capped by ``window(_:_:needsOrder:)``. A plan with a window
    /// is costed by the window alone, unmeasured (so a list page pays no walk before its
    /// read), and each plan is measured only up to the cost of the best one so far, and of
    /// reading every record, so estimating costs at most what the chosen plan reads. A
    /// plan measured whole keeps its count in ``Plan/entries`` (a count then uses it).
    /// Unindexed conditions are assumed to keep every row: an estimate never counts on a
    /// filter it cannot measure. Ties go to the earlier candidate.
    /// `index`: the chosen plan's place in `candidates`, `nil` when there were none.
    func choose(_ candidates: [Plan], _ query: Query, _ handles: RegisteredEntity, needsOrder: Bool) throws -> (plan: Plan, rows: Int?, index: Int?) {
        var best: (plan: Plan, rows: Int?, cost: Int, index: Int)?
        let total = try entries(handles.main)
        let windowed = candidates.indices.filter { window(candidates[$0], query, needsOrder: needsOrder) != nil }
        let others = candidates.indices.filter { window(candidates[$0], query, needsOrder: needsOrder) == nil }
        for index in windowed + others {
            let plan = candidates[index]
            let perRow = rowCost(plan, needsOrder: needsOrder)
            let rows: Int?
            let cost: Int
            var complete = false
            if let window = window(plan, query, needsOrder: needsOrder) {
                rows = nil
                cost = window.multipliedReportingOverflow(by: perRow).overflow ? Int.max : window * perRow
            } else {
                let cap = min(best?.cost ?? Int.max, total) / perRow + 1
                let measured = try measure(plan, handles, cap: cap)
                rows = measured
                complete = measured < cap
                cost = measured.multipliedReportingOverflow(by: perRow).overflow ? Int.max : measured * perRow
            }
            if best.map({ cost < $0.cost }) ?? true {
                var chosen = plan
                if complete { chosen.entries = rows }
                best = (chosen, rows, cost, index)
            }
        }
        guard let best else { return (try singleAttributePlan(query, handles, needsOrder: needsOrder), nil, nil) }
        return (best.plan, best.rows, best.index)
    }

    /// The entries in the ranges of `plan`, counted up to `cap`.
    func measure(_ plan: Plan, _ handles: RegisteredEntity, cap: Int) throws -> Int {
        guard let ranges = plan.ranges else {
            switch plan.source {
            case .union(let alternatives):
                var n = 0
                for alternative in alternatives where n < cap {
                    let (sum, overflow) = n.addingReportingOverflow(try measure(alternative, handles, cap: cap - n))
                    n = overflow ? .max : sum
                }
                return n
            case .primary: return try entries(handles.main)
            case .index(let index): return try entries(index.dbi)
            case .composite(let index): return try entries(index.dbi)
            }
        }
        if case .index(let index) = plan.source { return try countIndexEntries(index, ranges, reaching: cap) }
        var counted = plan
        counted.ranges = ranges
        return try countEntries(counted, handles, stopAt: cap)
    }

    /// How many records in main-database order cost as much as one lookup through an index
    /// entry (a random B-tree descent against a sequential step).
    static let indexLookupCost = 4

    /// The entries of `ranges` in a DUPSORT index, counted up to `cap`: one step per
    /// distinct key (its duplicates counted by `mdb_cursor_count`), so an index with few
    /// distinct values is measured in a few steps.
    package func countIndexEntries(_ index: IndexHandle, _ ranges: [KeyRange], reaching cap: Int) throws -> Int {
        var n = 0
        try withCursor(index.dbi) { cursor in
            for range in ranges {
                var key = MDB_val()
                var data = MDB_val()
                var rc: Int32
                if let lower = range.lower {
                    rc = lower.withUnsafeBytes { raw in
                        key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
                        return mdb_cursor_get(cursor, &key, &data, MDB_SET_RANGE)
                    }
                    if rc == 0 && !range.lowerInclusive && Self.compare(key, lower) == 0 {
                        rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT_NODUP)
                    }
                } else {
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
                }
                while rc == 0 {
                    if let upper = range.upper {
                        let c = Self.compare(key, upper)
                        if c > 0 || (c == 0 && !range.upperInclusive) { break }
                    }
                    var duplicates = 0
                    rc = mdb_cursor_count(cursor, &duplicates)
                    if rc != 0 { break }
                    n += duplicates
                    if n >= cap { return }
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT_NODUP)
                }
                if rc != 0 && rc != MDB_NOTFOUND { throw fail(rc, "Measuring an index range in \(storeName)") }
            }
        }
        return n
    }

    // MARK: ReadTransaction

    /// The largest page whose room is reserved up front when the rows come from index
    /// ranges (whose row count is not known without reading them); a larger limit grows
    /// the result as rows come, so that a generous limit allocates nothing it does not use.
    static let reservedPage = 4096

    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        let handles = try handles(for: query.handle)
        if case .constant(let b) = query.filter, b != true { return }
        if query.limit == 0 { return }
        let plan = try plan(query, handles, needsOrder: true)
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
        } else if let limit = query.limit, limit <= Self.reservedPage {
            // A page of an index range: at most `limit` rows, without counting the range.
            reserve(limit)
        }
        let columns = RecordColumns(types: handles.types)
        let limit = query.limit ?? Int.max
        let offset = query.offset
        let entityName = handles.entity.name
        columns.damageContext = (entityName, storeName)
        var skipped = 0
        var emitted = 0
        try visitValues(plan, handles) { value in
            if skipped < offset {
                skipped += 1
                return true
            }
            // Checked as the body reads it, and the rest after: the body's reads come in
            // attribute order, and each checks and decodes its attribute in one step.
            guard columns.begin(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else { throw columns.damage() }
            try body(columns)
            guard columns.finish() else { throw columns.damage() }
            emitted += 1
            return emitted < limit
        }
    }

    /// The first few records of a plan in another order. Each candidate is read in place:
    /// the attributes the filter needs first, and only a match is ranked; once the page is
    /// full, a candidate is compared with the page's last row in place (integers and
    /// strings without making a value), so most candidates of a large scan are dropped
    /// without decoding anything. Only the winners are read whole, at the end.
    func fetchTopN(
        _ query: Query, _ plan: Plan, _ handles: RegisteredEntity, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void
    ) throws {
        let columns = RecordColumns(types: handles.types)
        let keyIndex = handles.entity.primaryKeyIndex
        let filter = query.filter
        let sort = query.sort
        let needsFilter = !plan.exact
        // Most filters are judged on the stored bytes; the others on the values they read.
        let inPlace = needsFilter && RecordColumns.evaluatesInPlace(filter)
        let filterIndices = needsFilter && !inPlace ? Array(filter.attributeIndices) : []
        let rankIndices = Array(Set(sort.map(\.attributeIndex) + [keyIndex]).subtracting(filterIndices))
        let entityName = handles.entity.name
        var page = Query.Page(query)
        // The page's last row, which a record must precede to enter: it changes only when
        // a record enters, so it is read then rather than for every record.
        var threshold: Row?
        var sparse = Row(Array(repeating: Value.null, count: handles.types.count))
        try visitValues(plan, handles) { value in
            guard columns.load(UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)) else {
                throw corrupted("A record cannot be decoded as \(entityName)", entity: entityName)
            }
            if inPlace {
                if try columns.evaluate(filter) != true { return true }
            } else if needsFilter {
                for index in filterIndices { sparse[value: index] = try columns.value(index) }
                if !filter.matches(sparse) { return true }
            }
            if let threshold, try !columns.precedes(threshold, by: sort) { return true }
            for index in rankIndices { sparse[value: index] = try columns.value(index) }
            page.add(sparse)
            threshold = page.threshold
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
        let plan = try plan(query, handles, needsOrder: true)
        let filter = query.filter
        if plan.ordered {
            let limit = query.limit ?? Int.max
            let offset = query.offset
            let exact = plan.exact
            if exact && plan.ranges == nil {
                let total = try entries(handles.main)
                reserve(min(max(0, total - offset), limit))
            } else if exact, limit <= Self.reservedPage {
                reserve(limit)
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

    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        try withHandles(for: entity) { handles in
            guard key.type == handles.primaryKeyType else { return false }
            keyBuffer.removeAll(keepingCapacity: true)
            KeyEncoding.appendPrimaryKey(key, to: &keyBuffer)
            guard keyBuffer.count <= maxKeySize else { return false }
            guard let value = try get(handles.main, keyBuffer, context: "Reading a \(entity.name) record in \(storeName)") else {
                return false
            }
            // One reader serves every lookup of an entity in this transaction (lookups by
            // key come in bursts); a lookup made while it is lent out gets its own.
            let columns: RecordColumns
            if let cached = keyColumns, cached.owner == ObjectIdentifier(handles), !cached.isLent {
                columns = cached
            } else {
                columns = RecordColumns(types: handles.types, owner: ObjectIdentifier(handles))
                if keyColumns?.isLent != true { keyColumns = columns }
            }
            try load(value, into: columns, handles)
            columns.isLent = true
            defer { columns.isLent = false }
            try body(columns)
            return true
        }
    }

    public func count(_ query: Query) throws -> Int {
        let handles = try handles(for: query.handle)
        if case .constant(let b) = query.filter, b != true { return 0 }
        let window = query.end
        let matched: Int
        if query.filter == .constant(true) {
            matched = try entries(handles.main)
        } else {
            let plan = try plan(query, handles, needsOrder: false)
            if plan.exact, let entries = plan.entries {
                // Measured whole while planning.
                matched = window.map { min(entries, $0) } ?? entries
            } else if plan.exact {
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
