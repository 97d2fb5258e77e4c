import CLMDB
import DepotCore

// The union plan: a filter with an `OR` read as the records of its alternatives, each
// alternative by its own key ranges, when that costs less than the plan without it.
extension LMDBTransaction {
    /// Filters that spread into more alternatives than this are not split: each alternative
    /// is planned and measured on its own, and the alternatives of a filter grow as the
    /// product of its `OR`s.
    static let maximumUnionAlternatives = 32

    /// Whether the filter has an `OR` among its top-level conjuncts (nested `AND`s
    /// flattened), other than a cursor page's keyset condition, which an ordered plan reads
    /// from the cursor on rather than as alternatives.
    static func hasAlternatives(_ query: Query) -> Bool {
        func splits(_ filter: Filter) -> Bool {
            switch filter {
            case .or: CompositePlanner.keysetValues(filter, sort: query.sort) == nil
            case .and(let parts): parts.contains(where: splits)
            default: false
            }
        }
        return splits(query.filter)
    }

    /// The filter as alternatives, each a list of conditions that all hold (an `OR` of
    /// `AND`s): a record matches the filter only if it matches one alternative. `IN` stays
    /// one condition (the planner reads it as points), and so does anything under `NOT`.
    /// No alternative means nothing matches; `nil` when there are more than
    /// ``maximumUnionAlternatives``.
    static func alternatives(of filter: Filter) -> [[Filter]]? {
        switch filter {
        case .constant(true):
            return [[]]
        case .constant:
            // False or unknown: never true, so no alternative.
            return []
        case .or(let parts):
            var out: [[Filter]] = []
            for part in parts {
                guard let more = alternatives(of: part) else { return nil }
                out += more
                if out.count > maximumUnionAlternatives { return nil }
            }
            return out
        case .and(let parts):
            var out: [[Filter]] = [[]]
            for part in parts {
                guard let more = alternatives(of: part) else { return nil }
                var product: [[Filter]] = []
                for left in out {
                    for right in more { product.append(left + right) }
                }
                if product.count > maximumUnionAlternatives { return nil }
                out = product
            }
            return out
        default:
            return [[filter]]
        }
    }

    /// The union of the alternatives of `query`'s filter, or `nil` when `rival` (the plan
    /// the planner makes without it) stays.
    ///
    /// Each alternative is planned on its own, as a query of its conditions alone, by the
    /// one-source planner (the primary key, a single-attribute index or a composite index,
    /// whichever it would choose); an alternative whose plan reads a whole database (no
    /// condition of it becomes a range) leaves the rival in place. The union reads the
    /// alternatives' ranges, keeps each primary key once, and reads those records in
    /// primary key order; the whole filter is checked on every record (the plan is never
    /// exact), and the rows are sorted afterwards unless the sort starts with the primary
    /// key.
    ///
    /// Cost, in the units of ``choose(_:_:_:needsOrder:)``: the union's is the entries of
    /// all its alternatives' ranges times ``indexLookupCost`` (each is a lookup in the main
    /// database). The rival's is its rows (its ranges' entries, or its database's entry
    /// count from `mdb_stat`) times ``rowCost(_:needsOrder:)``; when it gives the order and
    /// the query has a limit, it stops early, so it is estimated to read
    /// `offset + limit` times its rows over the union's entries (matches spread evenly, at
    /// most as many as the union's entries). A rival that stops after `offset + limit`
    /// rows it knows to match is kept unmeasured. The union wins only when it costs less.
    /// Each count stops once the union cannot win, so weighing it reads no more than the
    /// union would.
    func unionPlan(_ query: Query, _ handles: RegisteredEntity, needsOrder: Bool, describing: Bool, rival: Plan) throws -> Plan? {
        if window(rival, query, needsOrder: needsOrder) != nil { return nil }
        guard let alternatives = Self.alternatives(of: query.filter), !alternatives.isEmpty else { return nil }
        let perRow = Self.indexLookupCost
        let rivalPerRow = rowCost(rival, needsOrder: needsOrder)
        let end = needsOrder && rival.ordered ? query.end : nil
        // A rival reading a whole database is measured by mdb_stat, without a walk.
        let knownRivalRows: Int? = try rival.ranges == nil ? measure(rival, handles, cap: .max) : rival.entries
        // The union's entries past which it cannot win: a scan's cost (every record, one
        // step each), and the rival's when it is known.
        var cap = try entries(handles.main) / perRow + 1
        if let rivalRows = knownRivalRows {
            let rivalCost = Self.product(rivalRows, rivalPerRow)
            if let end {
                // U·perRow < end·R·rivalPerRow / U  ⇔  U² < end·R·rivalPerRow / perRow.
                let square = Double(end) * Double(rivalCost) / Double(perRow)
                cap = min(cap, square >= Double(Int.max) ? Int.max : Int(square.squareRoot()) + 1)
            } else {
                cap = min(cap, rivalCost / perRow + 1)
            }
        }

        let entity = handles.entity
        var plans: [Plan] = []
        var rows = 0
        for atoms in alternatives {
            let filter = atoms.count == 1 ? atoms[0] : Filter.and(atoms)
            var plan = try planAfresh(Query(unlimited: query, filter: filter), handles, needsOrder: false, describing: describing).plan
            // An alternative no range answers: the union would read every record too.
            guard plan.ranges != nil else { return nil }
            let n = try plan.entries ?? measure(plan, handles, cap: cap - rows)
            rows = Self.sum(rows, n)
            if rows >= cap { return nil }
            if describing, plan.rangeText.isEmpty {
                plan.rangeText = Self.rangeLines(plan, conjuncts: CompositePlanner.conjuncts(of: filter), entity)
            }
            plans.append(plan)
        }

        let unionCost = rows * perRow
        let rivalRows: Int
        if let knownRivalRows {
            rivalRows = knownRivalRows
        } else {
            // The rows past which the rival costs at least as much as the union.
            let need = unionCost / rivalPerRow + 1
            let stretched = end.map { Self.product(need, max(rows, 1)) / max($0, 1) + 1 } ?? 0
            rivalRows = try measure(rival, handles, cap: max(need, stretched))
        }
        var rivalReads = rivalRows
        if let end, rows > 0 {
            rivalReads = min(rivalRows, Self.product(end, rivalRows) / rows)
        }
        guard unionCost < Self.product(rivalReads, rivalPerRow) else { return nil }

        let pk = entity.primaryKeyIndex
        let inKeyOrder = needsOrder && query.sort.first?.attributeIndex == pk
        var plan = Plan(
            source: .union(plans), ranges: nil, exact: false, ordered: inKeyOrder,
            descending: inKeyOrder && query.sort.first?.ascending == false)
        plan.entries = rows
        return plan
    }

    /// `a × b`, or `Int.max` past it.
    static func product(_ a: Int, _ b: Int) -> Int {
        let (p, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? .max : p
    }

    /// `a + b`, or `Int.max` past it.
    static func sum(_ a: Int, _ b: Int) -> Int {
        let (s, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : s
    }

    /// The primary keys of the records the alternatives read, each once, ascending.
    func unionKeys(_ alternatives: [Plan], _ handles: RegisteredEntity) throws -> [[UInt8]] {
        var seen = Set<[UInt8]>()
        for plan in alternatives {
            let dbi: MDB_dbi
            let dupSort: Bool
            let keyIsPrimary: Bool
            switch plan.source {
            case .union(let inner):
                seen.formUnion(try unionKeys(inner, handles))
                continue
            case .primary: (dbi, dupSort, keyIsPrimary) = (handles.main, false, true)
            case .index(let index): (dbi, dupSort, keyIsPrimary) = (index.dbi, true, false)
            case .composite(let index): (dbi, dupSort, keyIsPrimary) = (index.dbi, false, false)
            }
            try withCursor(dbi) { cursor in
                for range in plan.ranges ?? [.all] {
                    // An index entry's data is the record's primary key.
                    _ = try scan(cursor, dupSort: dupSort, range: range, descending: false) { key, data in
                        let primaryKey = keyIsPrimary ? key : data
                        seen.insert(Array(UnsafeRawBufferPointer(start: primaryKey.mv_data, count: primaryKey.mv_size)))
                        return true
                    }
                }
            }
        }
        return seen.sorted { $0.lexicographicallyPrecedes($1) }
    }

    /// Visits the stored values of the records the alternatives read, each once, in
    /// primary key order (`descending`: from the last). `body` returns `false` to stop.
    func visitUnion(
        _ alternatives: [Plan], _ handles: RegisteredEntity, descending: Bool, _ body: (MDB_val) throws -> Bool
    ) throws {
        let keys = try unionKeys(alternatives, handles)
        let entityName = handles.entity.name
        let ordered: [[UInt8]] = descending ? keys.reversed() : keys
        for key in ordered {
            guard let value = try get(handles.main, key, context: "Reading a \(entityName) record in \(storeName)") else {
                throw corrupted("An index entry points to a missing record", entity: entityName)
            }
            if try !body(value) { return }
        }
    }

    /// The conditions a primary key or single-attribute plan's ranges come from, in the
    /// notation of plans: one line per value of an `in` read as points, else one line; a
    /// composite plan's own ``Plan/rangeText``.
    static func rangeLines(_ plan: Plan, conjuncts: [Filter], _ entity: EntityDescription) -> [String] {
        let position: Int
        switch plan.source {
        case .primary: position = entity.primaryKeyIndex
        case .index(let index): position = index.position
        case .composite, .union: return plan.rangeText
        }
        guard entity.attributes.indices.contains(position) else { return [] }
        let name = entity.attributes[position].name
        var texts: [String] = []
        for conjunct in conjuncts {
            switch conjunct {
            case .oneOf(position, let values, let includesNil) where (plan.ranges?.count ?? 0) > 1:
                return values.map { "\(name) == \($0.debugLiteral)" } + (includesNil ? ["\(name) == nil"] : [])
            case .compare(position, let op, _) where op != .notEqual:
                texts.append(CompositePlanner.describe(conjunct, entity))
            case .oneOf(position, _, _), .isNil(position), .hasPrefix(position, _):
                texts.append(CompositePlanner.describe(conjunct, entity))
            default:
                continue
            }
        }
        return texts.isEmpty ? [] : [texts.joined(separator: " AND ")]
    }
}
