import DepotCore

/// A query compiled to SQL text with its parameters. Every value is a bound parameter;
/// the text holds only quoted identifiers, operators and parameter markers.
struct CompiledQuery {
    var sql: String
    var bindings: [Binding]
}

/// Compiles a resolved ``Filter`` and a `Query`'s order, limit and offset into SQL with
/// the semantics of `Filter.evaluate`:
/// - SQL's three-valued logic is Depot's: a comparison with NULL is unknown, and AND, OR
///   and NOT treat unknown the way `evaluate` does;
/// - strings compare with SQLite's BINARY collation, which is `memcmp` over the UTF-8
///   bytes with the length as tie-break, the same as `Value.compare`;
/// - doubles are REAL with NaN stored as a BLOB, which SQLite orders after every number;
/// - `hasPrefix` is a byte range, `contains` a byte search with `instr` over BLOBs: no
///   LIKE, so no case folding, no wildcards, and NUL bytes are ordinary bytes.
struct QueryCompiler {
    let table: RegisteredEntity
    var bindings: [Binding] = []

    init(table: RegisteredEntity) {
        self.table = table
    }

    func column(_ index: Int) throws(DepotError) -> String {
        guard table.entity.attributes.indices.contains(index) else {
            throw DepotError(.invalidPredicate, "The query names attribute position \(index), but \(table.entity.name) has \(table.entity.attributes.count) attributes; build queries from the entity that registered it.")
        }
        return quoted(table.entity.attributes[index].name)
    }

    private mutating func parameter(_ binding: Binding) -> String {
        bindings.append(binding)
        return "?\(bindings.count)"
    }

    private mutating func list(_ values: [Value]) -> String {
        values.map { parameter(.value($0)) }.joined(separator: ", ")
    }

    mutating func condition(_ filter: Filter) throws(DepotError) -> String {
        switch filter {
        case .constant(let b):
            return b.map { $0 ? "1" : "0" } ?? "NULL"
        case .compare(let index, let op, let value):
            let c = try column(index)
            if value.isNull { return "NULL" }
            let sqlOperator: String
            switch op {
            case .equal: sqlOperator = "="
            case .notEqual: sqlOperator = "<>"
            case .less: sqlOperator = "<"
            case .lessOrEqual: sqlOperator = "<="
            case .greater: sqlOperator = ">"
            case .greaterOrEqual: sqlOperator = ">="
            }
            return "\(c) \(sqlOperator) \(parameter(.value(value)))"
        case .oneOf(let index, let values, let includesNil):
            let c = try column(index)
            if values.isEmpty {
                // SQLite makes `NULL IN ()` false; Depot makes it unknown (or true with nil).
                return includesNil ? "\(c) IS NULL" : "(\(c) IS NULL AND NULL)"
            }
            let inList = "\(c) IN (\(list(values)))"
            return includesNil ? "(\(inList) OR \(c) IS NULL)" : inList
        case .notOneOf(let index, let values):
            let c = try column(index)
            if values.isEmpty { return "(\(c) IS NOT NULL OR NULL)" }
            return "\(c) NOT IN (\(list(values)))"
        case .isNil(let index):
            return "\(try column(index)) IS NULL"
        case .isNotNil(let index):
            return "\(try column(index)) IS NOT NULL"
        case .hasPrefix(let index, let prefix):
            let c = try column(index)
            var upper = Array(prefix.utf8)
            // The smallest byte string above every string with this prefix: drop trailing
            // 0xFF bytes (never in UTF-8, but cheap to be exact) and increment the last.
            while let last = upper.last, last == 0xFF { upper.removeLast() }
            let lower = parameter(.value(.string(prefix)))
            guard let last = upper.popLast() else { return "\(c) >= \(lower)" }
            upper.append(last + 1)
            return "(\(c) >= \(lower) AND \(c) < \(parameter(.textBytes(upper))))"
        case .contains(let index, let needle):
            let c = try column(index)
            if needle.isEmpty { return "(\(c) IS NOT NULL OR NULL)" }
            return "instr(CAST(\(c) AS BLOB), \(parameter(.blobBytes(Array(needle.utf8))))) > 0"
        case .and(let parts):
            if parts.isEmpty { return "1" }
            var out: [String] = []
            for part in parts { out.append(try condition(part)) }
            return "(" + out.joined(separator: " AND ") + ")"
        case .or(let parts):
            if parts.isEmpty { return "0" }
            var out: [String] = []
            for part in parts { out.append(try condition(part)) }
            return "(" + out.joined(separator: " OR ") + ")"
        case .not(let inner):
            return "(NOT \(try condition(inner)))"
        }
    }

    mutating func whereClause(_ filter: Filter) throws(DepotError) -> String {
        if filter == .constant(true) { return "" }
        return " WHERE " + (try condition(filter))
    }

    func orderBy(_ sort: [ResolvedSortKey]) throws(DepotError) -> String {
        var keys: [String] = []
        for key in sort {
            keys.append("\(try column(key.attributeIndex)) \(key.ascending ? "ASC" : "DESC")")
        }
        return keys.isEmpty ? "" : " ORDER BY " + keys.joined(separator: ", ")
    }

    mutating func limitClause(_ query: Query) -> String {
        guard query.limit != nil || query.offset > 0 else { return "" }
        // A negative LIMIT is "no limit" in SQLite.
        let limit = parameter(.integer(Int64(query.limit ?? -1)))
        let offset = parameter(.integer(Int64(query.offset)))
        return " LIMIT \(limit) OFFSET \(offset)"
    }

    // MARK: Whole statements

    static func select(_ query: Query, table: RegisteredEntity) throws(DepotError) -> CompiledQuery {
        var compiler = QueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        return CompiledQuery(sql: "SELECT \(table.columnList) FROM \(table.name)\(whereSQL)\(order)\(limit)", bindings: compiler.bindings)
    }

    static func count(_ query: Query, table: RegisteredEntity) throws(DepotError) -> CompiledQuery {
        var compiler = QueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        if query.limit == nil && query.offset == 0 {
            return CompiledQuery(sql: "SELECT count(*) FROM \(table.name)\(whereSQL)", bindings: compiler.bindings)
        }
        let limit = compiler.limitClause(query)
        return CompiledQuery(sql: "SELECT count(*) FROM (SELECT 1 FROM \(table.name)\(whereSQL)\(limit))", bindings: compiler.bindings)
    }

    /// One SELECT computing an aggregate query: `GROUP BY` over the query's rows (a
    /// subquery when its order, offset and limit choose a page), groups ordered by their
    /// keys. Sums and averages go through `depot_accumulate`, which hands Depot's own
    /// state back (see AggregateFunction.swift); counts, minimums and maximums are SQLite's,
    /// whose order on Depot's columns is Depot's (BINARY text, the NaN blob after every REAL).
    static func aggregate(_ query: AggregateQuery, table: RegisteredEntity) throws(DepotError) -> CompiledQuery {
        var compiler = QueryCompiler(table: table)
        let rows = query.rows
        let whereSQL = try compiler.whereClause(rows.filter)
        let source: String
        if rows.limit == nil && rows.offset == 0 {
            source = "\(table.name)\(whereSQL)"
        } else {
            let order = try compiler.orderBy(rows.sort)
            let limit = compiler.limitClause(rows)
            source = "(SELECT \(table.columnList) FROM \(table.name)\(whereSQL)\(order)\(limit))"
        }
        var columns: [String] = []
        for index in query.groupBy { columns.append(try compiler.column(index)) }
        let keys = columns
        for function in query.functions {
            switch function {
            case .count: columns.append("count(*)")
            case .countValues(let i): columns.append("count(\(try compiler.column(i)))")
            case .sum(let i), .average(let i): columns.append("depot_accumulate(\(try compiler.column(i)))")
            case .minimum(let i): columns.append("min(\(try compiler.column(i)))")
            case .maximum(let i): columns.append("max(\(try compiler.column(i)))")
            }
        }
        var sql = "SELECT \(columns.joined(separator: ", ")) FROM \(source)"
        if !keys.isEmpty {
            let list = keys.joined(separator: ", ")
            sql += " GROUP BY \(list) ORDER BY \(list)"
        }
        return CompiledQuery(sql: sql, bindings: compiler.bindings)
    }

    /// A DELETE honouring the query's order, offset and limit; with `returningKeys` it
    /// yields the primary key of every deleted row (for the change feed).
    static func delete(_ query: Query, table: RegisteredEntity, returningKeys: Bool) throws(DepotError) -> CompiledQuery {
        var compiler = QueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let returning = returningKeys ? " RETURNING \(table.keyColumn)" : ""
        if query.limit == nil && query.offset == 0 {
            return CompiledQuery(sql: "DELETE FROM \(table.name)\(whereSQL)\(returning)", bindings: compiler.bindings)
        }
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        let chosen = "SELECT \(table.keyColumn) FROM \(table.name)\(whereSQL)\(order)\(limit)"
        return CompiledQuery(sql: "DELETE FROM \(table.name) WHERE \(table.keyColumn) IN (\(chosen))\(returning)", bindings: compiler.bindings)
    }
}
