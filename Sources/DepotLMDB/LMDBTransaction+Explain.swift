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
        var estimate: Int
        if case .union = plan.source, let entries = plan.entries {
            // Counted whole while weighing the union against the plan without it.
            estimate = entries
        } else {
            estimate = try measure(plan, handles, cap: Self.explainEstimateCap)
        }
        if let window = window(plan, query, needsOrder: true) { estimate = min(estimate, window) }

        let access: QueryPlan.Access
        var ranges: [String] = []
        var detail: String
        let conjuncts = CompositePlanner.conjuncts(of: query.filter)
        switch plan.source {
        case .union(let alternatives):
            let lists = alternatives.map { Self.components(of: $0, entity) }
            let databases = Set(alternatives.map { Self.database(of: $0, handles) })
            if databases.count == 1, case .primary = alternatives[0].source {
                // Several key ranges of one database, as the memory store and PostgreSQL
                // describe an `OR` on one index.
                access = .primaryKey
            } else if databases.count == 1 {
                access = .index(lists[0])
            } else {
                access = .union(lists)
            }
            ranges = alternatives.flatMap(\.rangeText)
            detail = "the records of \(alternatives.count) alternatives, each read once by primary key: "
                + alternatives.map { Self.detail(of: $0, entity) }.joined(separator: "; ")
        case .primary where plan.ranges == nil:
            access = .scan
            detail = Self.detail(of: plan, entity)
        case .primary:
            access = .primaryKey
            ranges = Self.rangeLines(plan, conjuncts: conjuncts, entity)
            detail = Self.detail(of: plan, entity)
        case .index, .composite:
            access = .index(Self.components(of: plan, entity))
            ranges = Self.rangeLines(plan, conjuncts: conjuncts, entity)
            detail = Self.detail(of: plan, entity)
        }
        if plan.ordered { detail += plan.descending ? ", read backwards" : ", read forwards" }
        return QueryPlan(
            entity: entity.name, access: access, ranges: ranges, sortsAfterwards: !plan.ordered, filtersAfterwards: !plan.exact,
            estimatedRows: estimate, actualRows: analyze ? try rowsRead(query, plan, handles) : nil, backendDetail: detail)
    }

    /// The attributes of the database a one-source plan reads: the primary key's, or its
    /// index's.
    static func components(of plan: Plan, _ entity: EntityDescription) -> [IndexDescription.Component] {
        switch plan.source {
        case .primary: [IndexDescription.Component(entity.attributes[entity.primaryKeyIndex].name)]
        case .index(let index): [IndexDescription.Component(entity.attributes[index.position].name)]
        case .composite(let index): index.description.components
        case .union(let alternatives): alternatives.flatMap { components(of: $0, entity) }
        }
    }

    /// The database a plan reads (a union: its first alternative's).
    static func database(of plan: Plan, _ handles: RegisteredEntity) -> MDB_dbi {
        switch plan.source {
        case .primary: handles.main
        case .index(let index): index.dbi
        case .composite(let index): index.dbi
        case .union(let alternatives): alternatives.first.map { database(of: $0, handles) } ?? handles.main
        }
    }

    /// What a one-source plan reads, in LMDB's terms.
    static func detail(of plan: Plan, _ entity: EntityDescription) -> String {
        switch plan.source {
        case .primary:
            plan.ranges.map { "\($0.count) key ranges of the \(entity.name) database" } ?? "every record of the \(entity.name) database"
        case .index(let index):
            (plan.ranges.map { "\($0.count) ranges" } ?? "every entry")
                + " of \(Catalog.indexName(entity: entity.name, attribute: entity.attributes[index.position].name))"
        case .composite(let index):
            (plan.ranges.map { "\($0.count) ranges" } ?? "every entry")
                + " of \(Catalog.compositeName(entity: entity.name, index: index.description))"
        case .union(let alternatives):
            alternatives.map { detail(of: $0, entity) }.joined(separator: "; ")
        }
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
