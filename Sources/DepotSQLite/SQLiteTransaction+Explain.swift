import CSQLite
public import DepotCore

extension SQLiteTransaction {
    /// SQLite's `EXPLAIN QUERY PLAN` of the SELECT Depot runs for `query`, in Depot's form:
    /// the index SQLite searches (its columns read from `PRAGMA index_xinfo`, so any index
    /// on the table is named by what it holds), the constraint it searches with, whether a
    /// temporary B-tree sorts the rows. With `analyze` the SELECT runs; SQLite, built
    /// without scan status, does not count the rows it visits, so the plan's actual rows are
    /// those the statement returned.
    public func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        if isFinished { throw DepotError.transactionEnded }
        try single.countStatement()
        let table = try tables.resolve(query.handle)
        let compiled = try QueryCompiler.select(query, table: table)
        let statement = try connection.prepare("EXPLAIN QUERY PLAN " + compiled.sql, cached: false)
        for (i, binding) in compiled.parameters.enumerated() {
            try connection.bind(binding, at: Int32(i + 1), in: statement)
        }
        var details: [String] = []
        while try connection.step(statement, "Explaining a query of \(table.entity.name)") {
            if case .string(let detail) = try connection.column(3, of: statement, as: .string) { details.append(detail) }
        }
        var plan = QueryPlan(
            entity: table.entity.name, access: .scan, sortsAfterwards: details.contains { $0.contains("TEMP B-TREE") },
            filtersAfterwards: query.filter != .constant(true), backendDetail: details.joined(separator: "\n"))
        var searched: [[IndexDescription.Component]] = []
        for detail in details {
            guard detail.hasPrefix("SEARCH ") || detail.hasPrefix("SCAN ") else { continue }
            let constraint = Self.parenthesized(detail)
            if let range = detail.range(of: " USING COVERING INDEX ") ?? detail.range(of: " USING INDEX ") {
                let name = String(detail[range.upperBound...].prefix { $0 != " " })
                searched.append(try indexComponents(name))
            } else if detail.contains("PRIMARY KEY") && detail.hasPrefix("SEARCH ") {
                plan.access = .primaryKey
            }
            if let constraint { plan.ranges.append(constraint) }
        }
        if searched.count == 1 {
            plan.access = .index(searched[0])
        } else if searched.count > 1 {
            plan.access = .union(searched)
        }
        // Conditions on attributes the searched constraints do not name are checked per row.
        let named = Set(plan.ranges.joined(separator: " ").split { !($0.isLetter || $0.isNumber || $0 == "_") }.map(String.init))
        plan.filtersAfterwards = query.filter.attributeIndices.contains { !named.contains(table.entity.attributes[$0].name) }
        if analyze {
            var rows = 0
            try fetch(query, reserve: { _ in }) { _ in rows += 1 }
            plan.actualRows = rows
        }
        return plan
    }

    /// The text between the last parentheses of an `EXPLAIN QUERY PLAN` line: the
    /// constraint a SEARCH uses (`species=? AND name>?`).
    static func parenthesized(_ detail: String) -> String? {
        guard detail.hasSuffix(")"), let open = detail.lastIndex(of: "(") else { return nil }
        return String(detail[detail.index(after: open)..<detail.index(before: detail.endIndex)])
    }

    /// The key columns of index `name`, in order, with their directions.
    func indexComponents(_ name: String) throws(DepotError) -> [IndexDescription.Component] {
        let statement = try connection.prepare("SELECT name, \"desc\", key FROM pragma_index_xinfo(?1)", cached: false)
        try connection.bind(.string(name), at: 1, in: statement)
        var components: [IndexDescription.Component] = []
        while try connection.step(statement, "Reading the columns of index \(name)") {
            guard case .int(1) = try connection.column(2, of: statement, as: .int64),
                case .string(let column) = try connection.column(0, of: statement, as: .string)
            else { continue }
            let descending = try connection.column(1, of: statement, as: .int64) == .int(1)
            components.append(IndexDescription.Component(column, descending: descending))
        }
        return components
    }
}
