import CLMDB
public import DepotCore

// `explain`: the planner's decision in Depot's backend-neutral form.
extension LMDBTransaction {
    /// The most entries `explain` counts to estimate a range, so that explaining a query
    /// over a huge range does not read all of it.
    static let explainEstimateCap = 1 << 20

    /// How `query` runs: the plan `plan(_:_:needsOrder:)` chooses, its ranges as the
    /// filter's conditions they express, and its estimated rows (the entries of its ranges,
    /// counted up to `explainEstimateCap`, or `offset + limit` when the plan stops there).
    /// With `analyze`, the records the query reads are counted by reading them.
    public func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        let handles = try handles(for: query.handle)
        let entity = handles.entity
        if case .constant(let b) = query.filter, b != true {
            return QueryPlan(
                entity: entity.name, access: .primaryKey, ranges: [], sortsAfterwards: false, filtersAfterwards: false,
                estimatedRows: 0, actualRows: analyze ? 0 : nil, backendDetail: "The filter matches nothing; nothing is read.")
        }
        let plan = try plan(query, handles, needsOrder: true, describing: true)
        var estimate = try measure(plan, handles, cap: Self.explainEstimateCap)
        if let window = window(plan, query, needsOrder: true) { estimate = min(estimate, window) }

        let access: QueryPlan.Access
        var ranges: [String] = []
        var detail: String
        let conjuncts = CompositePlanner.conjuncts(of: query.filter)
        /// The conditions on one attribute a single-attribute plan's ranges come from: one
        /// line per value of an `in` read as points, else one line.
        func lines(on position: Int) -> [String] {
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
        switch plan.source {
        case .primary:
            let pk = entity.primaryKeyIndex
            if plan.ranges == nil {
                access = .scan
                detail = "every record of the \(entity.name) database"
            } else {
                access = .primaryKey
                ranges = lines(on: pk)
                detail = "\(plan.ranges?.count ?? 0) key ranges of the \(entity.name) database"
            }
        case .index(let index):
            let name = entity.attributes[index.position].name
            access = .index([IndexDescription.Component(name)])
            ranges = lines(on: index.position)
            detail = (plan.ranges.map { "\($0.count) ranges" } ?? "every entry") + " of \(Catalog.indexName(entity: entity.name, attribute: name))"
        case .composite(let index):
            access = .index(index.description.components)
            ranges = plan.rangeText
            detail = (plan.ranges.map { "\($0.count) ranges" } ?? "every entry")
                + " of \(Catalog.compositeName(entity: entity.name, index: index.description))"
        }
        if plan.ordered { detail += plan.descending ? ", read backwards" : ", read forwards" }
        return QueryPlan(
            entity: entity.name, access: access, ranges: ranges, sortsAfterwards: !plan.ordered, filtersAfterwards: !plan.exact,
            estimatedRows: estimate, actualRows: analyze ? try rowsRead(query, plan, handles) : nil, backendDetail: detail)
    }

    /// The records a fetch of `query` reads through `plan`: every candidate, or in order
    /// until `offset + limit` match (as ``fetch(_:reserve:_:)`` reads them).
    func rowsRead(_ query: Query, _ plan: Plan, _ handles: RegisteredEntity) throws -> Int {
        if query.limit == 0 { return 0 }
        let filter = query.filter
        let end = plan.ordered ? query.end : nil
        var read = 0
        var matched = 0
        try visit(plan, handles) { row in
            read += 1
            if plan.exact || filter.matches(row) { matched += 1 }
            return end.map { matched < $0 } ?? true
        }
        return read
    }
}
