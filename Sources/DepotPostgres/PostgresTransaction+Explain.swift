public import DepotCore
import Foundation

extension PostgresTransaction {
    /// PostgreSQL's `EXPLAIN (FORMAT JSON)` of the SELECT Depot runs for `query`, in Depot's
    /// form: the index scanned (its columns from `pg_get_indexdef`), its `Index Cond`,
    /// whether a Sort node orders the rows, whether a Filter checks them, and the planner's
    /// row estimate; with `analyze`, `EXPLAIN ANALYZE` runs the query and the plan says how
    /// many rows the scans returned.
    public func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        if isFinished { throw DepotError.transactionEnded }
        // An explanation may run more than one statement: in a transaction.
        try single.requireTransaction()
        let table = try tables.resolve(query.handle)
        let compiled = try PGQueryCompiler.select(query, table: table)
        let options = analyze ? "ANALYZE, FORMAT JSON" : "FORMAT JSON"
        let result = try connection.query("EXPLAIN (\(options)) " + compiled.sql, compiled.parameters, "Explaining a query of \(table.entity.name)")
        guard result.rowCount > 0 else {
            throw DepotError(.backend, "PostgreSQL returned no plan for a query of \(table.entity.name).")
        }
        let text = result.text(0, 0)
        guard let document = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]],
            let root = document.first?["Plan"] as? [String: Any]
        else {
            throw DepotError(.backend, "PostgreSQL's plan of a query of \(table.entity.name) is not the JSON Depot expects: \(text.prefix(200))")
        }
        var plan = QueryPlan(
            entity: table.entity.name, access: .scan, sortsAfterwards: false, filtersAfterwards: false, backendDetail: text)
        var indexes: [[IndexDescription.Component]] = []
        var names: [String] = []
        var scanned = false
        var pending = [root]
        while let node = pending.popLast() {
            pending.append(contentsOf: node["Plans"] as? [[String: Any]] ?? [])
            let type = node["Node Type"] as? String ?? ""
            if type == "Sort" || type == "Incremental Sort" { plan.sortsAfterwards = true }
            if node["Filter"] != nil || node["Recheck Cond"] != nil { plan.filtersAfterwards = true }
            guard type.hasSuffix("Scan") else { continue }
            if let name = node["Index Name"] as? String {
                indexes.append(try indexComponents(name))
                names.append(name)
                if let condition = node["Index Cond"] as? String { plan.ranges.append(condition) }
            }
            if type == "Seq Scan" { scanned = true }
            // A bitmap heap scan's rows come from its index scans below it. The server's
            // numbers are added without trapping on any it may send.
            if type != "Bitmap Heap Scan" || plan.estimatedRows == nil {
                if let rows = node["Plan Rows"] as? Int { plan.estimatedRows = Self.sum(plan.estimatedRows ?? 0, rows) }
                if analyze, let rows = node["Actual Rows"] as? Int {
                    let (read, overflow) = rows.multipliedReportingOverflow(by: node["Actual Loops"] as? Int ?? 1)
                    plan.actualRows = Self.sum(plan.actualRows ?? 0, overflow ? .max : read)
                }
            }
        }
        if !scanned {
            // Several ranges of one index (a BitmapOr over it) are one index's ranges.
            if Set(names).count == 1 { indexes = [indexes[0]] }
            if Set(names).count == 1, names[0] == PGDDL.primaryKeyName(entity: table.entity.name) {
                plan.access = .primaryKey
            } else if indexes.count == 1 {
                plan.access = .index(indexes[0])
            } else if indexes.count > 1 {
                plan.access = .union(indexes)
            }
        }
        return plan
    }

    /// `a + b`, or `Int.max` past it.
    static func sum(_ a: Int, _ b: Int) -> Int {
        let (total, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : total
    }

    /// The key columns of index `name`, in order, with their directions, from its
    /// definition (`CREATE INDEX … USING btree (species, name DESC, id)`).
    func indexComponents(_ name: String) throws(DepotError) -> [IndexDescription.Component] {
        let result = try connection.query(
            "SELECT pg_get_indexdef(c.oid) FROM pg_class c WHERE c.relname = $1 AND c.relkind = 'i' AND pg_table_is_visible(c.oid)",
            [.value(.string(name))], "Reading the definition of index \(name)")
        guard result.rowCount > 0 else { return [] }
        let definition = result.text(0, 0)
        guard let open = definition.lastIndex(of: "("), let close = definition.lastIndex(of: ")"), open < close else { return [] }
        return definition[definition.index(after: open)..<close].split(separator: ",").map { part in
            let words = part.split(separator: " ")
            var column = String(words.first ?? "")
            if column.hasPrefix("\""), column.hasSuffix("\""), column.count >= 2 {
                column = String(column.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
            }
            return IndexDescription.Component(column, descending: words.contains("DESC"))
        }
    }
}
