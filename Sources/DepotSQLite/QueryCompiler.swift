import DepotCore
import DepotSQL

/// SQLite's SQL for Depot's requests (``SQLQueryCompiler`` writes the rest):
/// - strings compare with SQLite's BINARY collation, which is `memcmp` over the UTF-8
///   bytes with the length as tie-break, the same as `Value.compare`;
/// - doubles are REAL with NaN stored as a BLOB, which SQLite orders after every number;
/// - NULL sorts first ascending and last descending by itself;
/// - `hasPrefix` is a byte range, `contains` a byte search with `instr` over BLOBs, so NUL
///   bytes are ordinary bytes.
enum SQLiteDialect: SQLDialect {
    typealias Parameter = Binding

    static func placeholder(_ position: Int) -> String { "?\(position)" }
    static let trueLiteral = "1"
    static let falseLiteral = "0"
    static let unknownLiteral = "NULL"
    static func parameter(_ value: Value) -> Binding { .value(value) }
    static func count(_ value: Int64) -> Binding { .integer(value) }
    /// A negative LIMIT is "no limit" in SQLite.
    static let noLimit = Binding.integer(-1)

    /// SQLite sorts nil (NULL) first ascending and last descending already.
    static func orderKey(_ column: String, ascending: Bool, nullable: Bool) -> String {
        "\(column) \(ascending ? "ASC" : "DESC")"
    }

    static func hasPrefix(_ column: String, _ prefix: String, _ parameters: inout SQLParameters<Self>) -> String {
        var upper = Array(prefix.utf8)
        // The smallest byte string above every string with this prefix: drop trailing
        // 0xFF bytes (never in UTF-8, but cheap to be exact) and increment the last.
        while let last = upper.last, last == 0xFF { upper.removeLast() }
        let lower = parameters.add(.value(.string(prefix)))
        guard let last = upper.popLast() else { return "\(column) >= \(lower)" }
        upper.append(last + 1)
        return "(\(column) >= \(lower) AND \(column) < \(parameters.add(.textBytes(upper))))"
    }

    static func contains(_ column: String, _ needle: String, _ parameters: inout SQLParameters<Self>) -> String {
        "instr(CAST(\(column) AS BLOB), \(parameters.add(.blobBytes(Array(needle.utf8))))) > 0"
    }
}

typealias QueryCompiler = SQLQueryCompiler<SQLiteDialect>

extension SQLiteDialect {
    /// The shape of `query`'s SELECT (see `SQLSelectShape`) and its parameters as SQLite
    /// binds them; `nil` when the query's parameters are derived by the dialect.
    static func selectShape(_ query: Query) -> (shape: [Int], parameters: [Binding])? {
        guard let (shape, shaped) = SQLSelectShape.of(query) else { return nil }
        return (shape, shaped.map(binding))
    }

    /// The binding of a shaped select's parameter, as the compiler binds it.
    static func binding(_ shaped: SQLShapeParameter) -> Binding {
        switch shaped {
        case .value(let value): parameter(value)
        case .count(let value): count(value)
        case .noLimit: noLimit
        }
    }
}
typealias CompiledQuery = SQLStatement<SQLiteDialect>

extension RegisteredEntity: SQLKeyTable {}

extension SQLQueryCompiler where Dialect == SQLiteDialect {
    /// One SELECT computing an aggregate query: `GROUP BY` over the query's rows (a
    /// subquery when its order, offset and limit choose a page), groups ordered by their
    /// keys. Sums and averages go through `depot_accumulate`, which hands Depot's own
    /// state back (see AggregateFunction.swift); counts, minimums and maximums are SQLite's,
    /// whose order on Depot's columns is Depot's (BINARY text, the NaN blob after every REAL).
    static func aggregate(_ query: AggregateQuery, table: RegisteredEntity) throws(DepotError) -> CompiledQuery {
        var compiler = QueryCompiler(table: table)
        let source = try compiler.rowSource(query.rows, table: table)
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
        return CompiledQuery(sql: sql, parameters: compiler.parameters.values)
    }
}
