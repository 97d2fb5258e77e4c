import DepotCore
import DepotSQL
import Foundation

/// PostgreSQL's SQL for Depot's requests (``SQLQueryCompiler`` writes the rest):
/// - strings are `COLLATE "C"` (UTF-8 byte order) in Depot's NUL-safe form (``PGText``);
/// - doubles are `double precision`, whose order is Depot's total order: NaN equals NaN and
///   sorts after +infinity;
/// - NULL sorts first ascending and last descending, as `Value.compare` puts nil first;
/// - `hasPrefix` is a range or `starts_with`, `contains` a byte search (`strpos`).
/// A value compared with a column is typed as the column by the server: a date is a
/// double, and a value of another type than the column's is cast (or refused).
enum PostgresDialect: SQLDialect {
    typealias Parameter = PGParam

    static func placeholder(_ position: Int) -> String { "$\(position)" }
    static let trueLiteral = "TRUE"
    static let falseLiteral = "FALSE"
    static let unknownLiteral = "NULL::boolean"
    static func parameter(_ value: Value) -> PGParam { .value(value) }
    static func count(_ value: Int64) -> PGParam { .int(value) }
    /// LIMIT NULL is no limit.
    static let noLimit = PGParam(oid: PGParam.int8Oid, bytes: nil)

    /// PostgreSQL sorts NULL last ascending and first descending unless told otherwise,
    /// and an index serves an ORDER BY only when their nulls orders agree (it does not
    /// reason from NOT NULL). A column without nil is ordered in the default order, which
    /// its primary key, unique constraint or index has (see ``PGDDL/indexColumn(_:descending:nullable:)``);
    /// a nullable one says where nil goes.
    static func orderKey(_ column: String, ascending: Bool, nullable: Bool) -> String {
        PGDDL.indexColumn(column, descending: !ascending, nullable: nullable)
    }

    static func hasPrefix(_ c: String, _ prefix: String, _ parameters: inout SQLParameters<Self>) -> String {
        let encoded = PGText.encode(prefix)
        let lower = parameters.add(PGParam(oid: PGParam.textOid, bytes: encoded))
        // The smallest text above every text with this prefix, when it is valid UTF-8
        // (an index range); otherwise starts_with, byte-wise under "C".
        var upper = encoded
        while let last = upper.last, last == 0xFF { upper.removeLast() }
        guard let last = upper.popLast() else { return "\(c) >= \(lower)" }
        upper.append(last + 1)
        if String(validating: upper, as: UTF8.self) != nil {
            return "(\(c) >= \(lower) AND \(c) < \(parameters.add(PGParam(oid: PGParam.textOid, bytes: upper))))"
        }
        return "starts_with(\(c), \(lower))"
    }

    static func contains(_ c: String, _ needle: String, _ parameters: inout SQLParameters<Self>) -> String {
        let encoded = PGText.encode(needle)
        if let first = encoded.first, first > 2 {
            return "strpos(\(c), \(parameters.add(PGParam(oid: PGParam.textOid, bytes: encoded)))) > 0"
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
        return "\(c) ~ \(parameters.add(.text(pattern)))"
    }
}

typealias PGQueryCompiler = SQLQueryCompiler<PostgresDialect>
typealias PGCompiledQuery = SQLStatement<PostgresDialect>

extension RegisteredEntity: SQLKeyTable {}

extension SQLQueryCompiler where Dialect == PostgresDialect {
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
        let source = try compiler.rowSource(query.rows, table: table)
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
        return DoubleSumQuery(attribute: attribute, query: PGCompiledQuery(sql: sql, parameters: compiler.parameters.values), types: types)
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
        let source = try compiler.rowSource(query.rows, table: table)
        var sql = "SELECT \(selected.joined(separator: ", ")) FROM \(source)"
        if !query.groupBy.isEmpty {
            sql += " GROUP BY " + selected.prefix(query.groupBy.count).joined(separator: ", ")
        }
        return CompiledAggregate(query: PGCompiledQuery(sql: sql, parameters: compiler.parameters.values), functions: layout, types: types, doubleSums: doubleSums)
    }
}
