import DepotCore
import Foundation

/// A query compiled to SQL with its parameters. Every value is a bound parameter; the
/// text holds only quoted identifiers, operators and parameter markers.
struct PGCompiledQuery {
    var sql: String
    var params: [PGParam]
}

/// Compiles a ``Filter`` and a `Query`'s order, limit and offset into PostgreSQL with the
/// semantics of `Filter.evaluate`:
/// - SQL's three-valued logic is Depot's: a comparison with NULL is unknown;
/// - strings are `COLLATE "C"` (UTF-8 byte order) in Depot's NUL-safe form (``PGText``);
/// - doubles are `double precision`, whose order is Depot's total order: NaN equals NaN and
///   sorts after +infinity;
/// - NULL sorts first ascending and last descending, as `Value.compare` puts nil first;
/// - `hasPrefix` is a range or `starts_with`, `contains` a byte search (`strpos`): no LIKE,
///   so no case folding and no wildcards.
struct PGQueryCompiler {
    let table: RegisteredEntity
    var params: [PGParam] = []

    init(table: RegisteredEntity) {
        self.table = table
    }

    func column(_ index: Int) throws(DepotError) -> String {
        guard table.entity.attributes.indices.contains(index) else {
            throw DepotError(.invalidPredicate, "The query names attribute position \(index), but \(table.entity.name) has \(table.entity.attributes.count) attributes; build queries from the entity that registered it.")
        }
        return quoted(table.entity.attributes[index].name)
    }

    private mutating func parameter(_ param: PGParam) -> String {
        params.append(param)
        return "$\(params.count)"
    }

    /// A value compared with a column, typed as the column: a date is a double, a value of
    /// another type than the column's is cast by the server (and refused when it cannot be).
    private mutating func value(_ value: Value, for index: Int) -> String {
        parameter(.value(value))
    }

    private mutating func list(_ values: [Value], for index: Int) -> String {
        values.map { value($0, for: index) }.joined(separator: ", ")
    }

    mutating func condition(_ filter: Filter) throws(DepotError) -> String {
        switch filter {
        case .constant(let b):
            return b.map { $0 ? "TRUE" : "FALSE" } ?? "NULL::boolean"
        case .compare(let index, let op, let operand):
            let c = try column(index)
            if operand.isNull { return "NULL::boolean" }
            let sqlOperator: String
            switch op {
            case .equal: sqlOperator = "="
            case .notEqual: sqlOperator = "<>"
            case .less: sqlOperator = "<"
            case .lessOrEqual: sqlOperator = "<="
            case .greater: sqlOperator = ">"
            case .greaterOrEqual: sqlOperator = ">="
            }
            return "\(c) \(sqlOperator) \(value(operand, for: index))"
        case .oneOf(let index, let values, let includesNil):
            let c = try column(index)
            if values.isEmpty {
                return includesNil ? "\(c) IS NULL" : "(\(c) IS NULL AND NULL::boolean)"
            }
            let inList = "\(c) IN (\(list(values, for: index)))"
            return includesNil ? "(\(inList) OR \(c) IS NULL)" : inList
        case .notOneOf(let index, let values):
            let c = try column(index)
            if values.isEmpty { return "(\(c) IS NOT NULL OR NULL::boolean)" }
            return "\(c) NOT IN (\(list(values, for: index)))"
        case .isNil(let index):
            return "\(try column(index)) IS NULL"
        case .isNotNil(let index):
            return "\(try column(index)) IS NOT NULL"
        case .hasPrefix(let index, let prefix):
            let c = try column(index)
            let encoded = PGText.encode(prefix)
            let lower = parameter(PGParam(oid: PGParam.textOid, bytes: encoded))
            // The smallest text above every text with this prefix, when it is valid UTF-8
            // (an index range); otherwise starts_with, byte-wise under "C".
            var upper = encoded
            while let last = upper.last, last == 0xFF { upper.removeLast() }
            guard let last = upper.popLast() else { return "\(c) >= \(lower)" }
            upper.append(last + 1)
            if String(validating: upper, as: UTF8.self) != nil {
                return "(\(c) >= \(lower) AND \(c) < \(parameter(PGParam(oid: PGParam.textOid, bytes: upper))))"
            }
            return "starts_with(\(c), \(lower))"
        case .contains(let index, let needle):
            let c = try column(index)
            if needle.isEmpty { return "(\(c) IS NOT NULL OR NULL::boolean)" }
            let encoded = PGText.encode(needle)
            if let first = encoded.first, first > 2 {
                return "strpos(\(c), \(parameter(PGParam(oid: PGParam.textOid, bytes: encoded)))) > 0"
            }
            // A needle that begins with 01 or 02 could match the second byte of an escape
            // pair (see PGText): match whole code units from the start instead.
            // \u and exactly four digits: PostgreSQL's \x takes every hex digit that follows.
            var pattern = "^(?:[^\\u0001]|\\u0001[\\u0001\\u0002])*?"
            for scalar in String(decoding: encoded, as: UTF8.self).unicodeScalars {
                if scalar.value < 0x20 {
                    pattern += String(format: "\\u%04x", scalar.value)
                } else if scalar.isASCII && !(CharacterSet.alphanumerics.contains(scalar)) {
                    pattern += "\\" + String(scalar)
                } else {
                    pattern.unicodeScalars.append(scalar)
                }
            }
            return "\(c) ~ \(parameter(.text(pattern)))"
        case .and(let parts):
            if parts.isEmpty { return "TRUE" }
            var out: [String] = []
            for part in parts { out.append(try condition(part)) }
            return "(" + out.joined(separator: " AND ") + ")"
        case .or(let parts):
            if parts.isEmpty { return "FALSE" }
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
            keys.append("\(try column(key.attributeIndex)) \(key.ascending ? "ASC NULLS FIRST" : "DESC NULLS LAST")")
        }
        return keys.isEmpty ? "" : " ORDER BY " + keys.joined(separator: ", ")
    }

    mutating func limitClause(_ query: Query) -> String {
        guard query.limit != nil || query.offset > 0 else { return "" }
        // LIMIT NULL is no limit.
        let limit = parameter(query.limit.map { .int(Int64($0)) } ?? PGParam(oid: PGParam.int8Oid, bytes: nil))
        let offset = parameter(.int(Int64(query.offset)))
        return " LIMIT \(limit) OFFSET \(offset)"
    }

    // MARK: Whole statements

    static func select(_ query: Query, table: RegisteredEntity, columns: String? = nil) throws(DepotError) -> PGCompiledQuery {
        var compiler = PGQueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        return PGCompiledQuery(sql: "SELECT \(columns ?? table.columnList) FROM \(table.name)\(whereSQL)\(order)\(limit)", params: compiler.params)
    }

    static func count(_ query: Query, table: RegisteredEntity) throws(DepotError) -> PGCompiledQuery {
        var compiler = PGQueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        if query.limit == nil && query.offset == 0 {
            return PGCompiledQuery(sql: "SELECT count(*) FROM \(table.name)\(whereSQL)", params: compiler.params)
        }
        let limit = compiler.limitClause(query)
        return PGCompiledQuery(sql: "SELECT count(*) FROM (SELECT 1 FROM \(table.name)\(whereSQL)\(limit)) AS page", params: compiler.params)
    }

    /// What one aggregate function reads from a row of ``aggregate(_:table:)``'s result.
    enum AggregateColumn {
        /// A count: one `bigint`.
        case count
        /// An integer sum or average: the count of values (`bigint`), then their exact sum
        /// as text (`numeric`: beyond 64 bits, never wrapped; NULL without values).
        case integerSum
        /// A minimum or maximum: one column of the attribute's own type.
        case extreme
        /// A double sum or average: the count of values (`bigint`) here; the sum itself
        /// from the attribute's ``DoubleSumQuery``.
        case doubleSum(attribute: Int)
    }

    /// The exact parts of the double sums of one attribute, per group: each finite value
    /// split on the server into its integer significand and binary exponent (from its
    /// IEEE bits, `float8send`), the significands summed per exponent as `numeric` (exact),
    /// and the NaNs and infinities counted. Depot adds the parts with its exactly rounded
    /// sum (``ExactSum``), so the answer is the one every backend gives, whatever order the
    /// server read the rows in. Result rows: the group keys, the exponent (`bigint`, NULL
    /// for the row of NaNs and infinities), the significands' sum (text), the counts of
    /// NaN, +infinity and -infinity, of finite values and of negative zeros.
    struct DoubleSumQuery {
        var attribute: Int
        var query: PGCompiledQuery
        var types: [AttributeType]
    }

    /// An aggregate computed by the server: its statement, the layout of each result row
    /// (the group keys, then each function's columns in order) and the type each column
    /// is decoded as.
    struct CompiledAggregate {
        var query: PGCompiledQuery
        var functions: [AggregateColumn]
        var types: [AttributeType]
        /// One per attribute whose doubles are summed or averaged.
        var doubleSums: [DoubleSumQuery] = []
    }

    /// The rows an aggregate reads: the table filtered, or, with an offset or a limit, the
    /// query's page chosen in a subquery first.
    mutating func aggregateSource(_ rows: Query) throws(DepotError) -> String {
        let whereSQL = try whereClause(rows.filter)
        guard rows.limit != nil || rows.offset > 0 else { return "\(table.name)\(whereSQL)" }
        let order = try orderBy(rows.sort)
        let limit = limitClause(rows)
        return "(SELECT * FROM \(table.name)\(whereSQL)\(order)\(limit)) AS page"
    }

    static func doubleSum(of attribute: Int, _ query: AggregateQuery, table: RegisteredEntity) throws(DepotError) -> DoubleSumQuery {
        var compiler = PGQueryCompiler(table: table)
        let c = try compiler.column(attribute)
        // The keys under aliases of their own: a query may group by one attribute twice,
        // which two columns of one name would make ambiguous. Aliases have a dot, which no
        // attribute name has, so they cannot shadow a column either.
        var selectKeys = ""
        var keys = ""
        var types: [AttributeType] = []
        for (n, index) in query.groupBy.enumerated() {
            selectKeys += "\(try compiler.column(index)) AS \"depot.k\(n)\", "
            keys += "\"depot.k\(n)\", "
            types.append(table.entity.attributes[index].type)
        }
        let source = try compiler.aggregateSource(query.rows)
        let x = "\"depot.x\"", b = "\"depot.b\"", e = "\"depot.e\"", m = "\"depot.m\""
        let exponent = "((\(b) >> 52) & 2047)"
        let fraction = "(\(b) & 4503599627370495)"
        // Exponent field 2047: NaN or an infinity (counted below); 0: zero or subnormal,
        // whose significand has no implicit bit and whose exponent is that of the smallest.
        let parts = """
            SELECT \(keys)\(x), \(b), \
            CASE WHEN \(exponent) = 2047 THEN NULL WHEN \(exponent) = 0 THEN -1074 ELSE \(exponent) - 1075 END::bigint AS \(e), \
            CASE WHEN \(exponent) = 2047 THEN NULL \
            ELSE (CASE WHEN \(b) < 0 THEN -1 ELSE 1 END) * (CASE WHEN \(exponent) = 0 THEN \(fraction) ELSE \(fraction) | 4503599627370496 END) END AS \(m) \
            FROM (SELECT \(selectKeys)\(c) AS \(x), ('x' || encode(float8send(\(c)), 'hex'))::bit(64)::bigint AS \(b) \
            FROM (SELECT * FROM \(source)) AS selected WHERE \(c) IS NOT NULL) AS bits
            """
        // The finite values and, among them, the negative zeros (bits 0x8000000000000000):
        // a sum of negative zeros alone is -0.0 in Depot's sum, and their significands
        // are all 0.
        let sql = """
            SELECT \(keys)\(e), sum(\(m))::text, \
            count(*) FILTER (WHERE \(x) = 'NaN'::float8), \
            count(*) FILTER (WHERE \(x) = 'Infinity'::float8), \
            count(*) FILTER (WHERE \(x) = '-Infinity'::float8), \
            count(\(e)), \
            count(*) FILTER (WHERE \(b) = -9223372036854775808) \
            FROM (\(parts)) AS parts GROUP BY \(keys)\(e)
            """
        types += [.int64, .string, .int64, .int64, .int64, .int64, .int64]
        return DoubleSumQuery(attribute: attribute, query: PGCompiledQuery(sql: sql, params: compiler.params), types: types)
    }

    /// `GROUP BY` on the server, with Depot's answers: counts and integer sums are exact
    /// (`numeric`), minimums and maximums follow the column order Depot's queries sort by
    /// (``PGQueryCompiler``), and `bool`, `uuid` and `bytea`, which have no `min`/`max`,
    /// take `bool_and`/`bool_or` or the extreme of one-element arrays (ordered by the
    /// element's own comparison: bytes). The rows are the query's, its order, offset and
    /// limit applied in a subquery first. Sums and averages of doubles count here and take
    /// their sums from a ``DoubleSumQuery`` each: PostgreSQL's `sum(double precision)` adds
    /// in whatever order it reads the rows, and Depot's double sums are exactly rounded.
    static func aggregate(_ query: AggregateQuery, table: RegisteredEntity) throws(DepotError) -> CompiledAggregate {
        var compiler = PGQueryCompiler(table: table)
        let entity = table.entity
        var selected: [String] = []
        var types: [AttributeType] = []
        var layout: [AggregateColumn] = []
        var doubleSums: [DoubleSumQuery] = []
        for index in query.groupBy {
            selected.append(try compiler.column(index))
            types.append(entity.attributes[index].type)
        }
        for function in query.functions {
            switch function {
            case .count:
                selected.append("count(*)")
                types.append(.int64)
                layout.append(.count)
            case .countValues(let index):
                selected.append("count(\(try compiler.column(index)))")
                types.append(.int64)
                layout.append(.count)
            case .sum(let index), .average(let index):
                let c = try compiler.column(index)
                selected.append("count(\(c))")
                if entity.attributes[index].type == .double {
                    types.append(.int64)
                    layout.append(.doubleSum(attribute: index))
                    if !doubleSums.contains(where: { $0.attribute == index }) {
                        doubleSums.append(try doubleSum(of: index, query, table: table))
                    }
                } else {
                    selected.append("sum(\(c))::text")
                    types += [.int64, .string]
                    layout.append(.integerSum)
                }
            case .minimum(let index), .maximum(let index):
                let c = try compiler.column(index)
                let type = entity.attributes[index].type
                let isMinimum = if case .minimum = function { true } else { false }
                switch type {
                case .bool:
                    selected.append(isMinimum ? "bool_and(\(c))" : "bool_or(\(c))")
                case .uuid, .data:
                    selected.append("(\(isMinimum ? "min" : "max")(ARRAY[\(c)]) FILTER (WHERE \(c) IS NOT NULL))[1]")
                case .int64, .double, .date, .string:
                    selected.append("\(isMinimum ? "min" : "max")(\(c))")
                }
                types.append(type)
                layout.append(.extreme)
            }
        }
        let source = try compiler.aggregateSource(query.rows)
        var sql = "SELECT \(selected.joined(separator: ", ")) FROM \(source)"
        if !query.groupBy.isEmpty {
            sql += " GROUP BY " + selected.prefix(query.groupBy.count).joined(separator: ", ")
        }
        return CompiledAggregate(query: PGCompiledQuery(sql: sql, params: compiler.params), functions: layout, types: types, doubleSums: doubleSums)
    }

    /// A DELETE honouring the query's order, offset and limit, returning every deleted
    /// row's key (for the change feed).
    static func delete(_ query: Query, table: RegisteredEntity) throws(DepotError) -> PGCompiledQuery {
        var compiler = PGQueryCompiler(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let returning = " RETURNING \(table.keyColumn)"
        if query.limit == nil && query.offset == 0 {
            return PGCompiledQuery(sql: "DELETE FROM \(table.name)\(whereSQL)\(returning)", params: compiler.params)
        }
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        let chosen = "SELECT \(table.keyColumn) FROM \(table.name)\(whereSQL)\(order)\(limit)"
        return PGCompiledQuery(sql: "DELETE FROM \(table.name) WHERE \(table.keyColumn) IN (\(chosen))\(returning)", params: compiler.params)
    }
}
