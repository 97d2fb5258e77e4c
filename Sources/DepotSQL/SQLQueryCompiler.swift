package import DepotCore

/// Quotes an SQL identifier. Entity and attribute names are validated to letters, digits
/// and `_` before they get here; quoting anyway means a name can never become syntax (and
/// keeps PostgreSQL from folding it to lower case).
package func quoted(_ identifier: String) -> String {
    // Every query compiles its columns' names through here: Foundation's string search
    // only when there is a quote to double, which validated names never have.
    guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
    return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// What differs between the SQL that SQLite and PostgreSQL are given for Depot's
/// requests: parameter markers and values, literals, NULL ordering, and the two string
/// searches whose byte-exact forms each engine spells its own way. Everything else — the
/// filter's structure and its three-valued logic, ordering, paging — is
/// ``SQLQueryCompiler``'s, written once.
package protocol SQLDialect {
    /// A bound parameter's value as the engine's binding code takes it.
    associatedtype Parameter

    /// The marker of the parameter at `position` (from 1).
    static func placeholder(_ position: Int) -> String
    /// The literals of true, false and unknown (a boolean NULL).
    static var trueLiteral: String { get }
    static var falseLiteral: String { get }
    static var unknownLiteral: String { get }
    /// A value compared with a column.
    static func parameter(_ value: Value) -> Parameter
    /// A LIMIT or OFFSET.
    static func count(_ value: Int64) -> Parameter
    /// The LIMIT that means no limit (with an OFFSET).
    static var noLimit: Parameter { get }
    /// An ORDER BY key that sorts nil first ascending and last descending, as
    /// `Value.compare` does. `nullable`: whether the column can hold nil; the key of a
    /// column that cannot may leave nil's place to the engine, which lets it read an
    /// index in the engine's default order (a primary key's, a unique constraint's).
    static func orderKey(_ column: String, ascending: Bool, nullable: Bool) -> String
    /// `column` starts with `prefix`, byte for byte (no LIKE: no case folding, no wildcards).
    static func hasPrefix(_ column: String, _ prefix: String, _ parameters: inout SQLParameters<Self>) -> String
    /// `column` contains `needle` (not empty), byte for byte.
    static func contains(_ column: String, _ needle: String, _ parameters: inout SQLParameters<Self>) -> String
}

/// The parameters of a statement being compiled, in marker order.
package struct SQLParameters<Dialect: SQLDialect> {
    package var values: [Dialect.Parameter] = []

    package init() {}

    /// Adds a parameter; returns its marker.
    package mutating func add(_ parameter: Dialect.Parameter) -> String {
        values.append(parameter)
        return Dialect.placeholder(values.count)
    }
}

/// Compiles a resolved ``Filter`` and a `Query`'s order, limit and offset into SQL with the
/// semantics of `Filter.evaluate`, for either SQL engine:
/// - SQL's three-valued logic is Depot's: a comparison with NULL is unknown, and AND, OR
///   and NOT treat unknown the way `evaluate` does; an empty `IN` list, which SQL makes
///   false for NULL, is written out so that it is unknown;
/// - every value is a bound parameter; the text holds only quoted identifiers, operators
///   and parameter markers.
/// Each engine's column types and collation give Depot's order (see the dialects).
package struct SQLQueryCompiler<Dialect: SQLDialect> {
    package let entity: EntityDescription
    package var parameters = SQLParameters<Dialect>()

    package init(entity: EntityDescription) {
        self.entity = entity
    }

    package func column(_ index: Int) throws(DepotError) -> String {
        guard entity.attributes.indices.contains(index) else {
            throw DepotError(.invalidPredicate, "The query names attribute position \(index), but \(entity.name) has \(entity.attributes.count) attributes; build queries from the entity that registered it.")
        }
        return quoted(entity.attributes[index].name)
    }

    private mutating func list(_ values: [Value]) -> String {
        values.map { parameters.add(Dialect.parameter($0)) }.joined(separator: ", ")
    }

    package mutating func condition(_ filter: Filter) throws(DepotError) -> String {
        let unknown = Dialect.unknownLiteral
        switch filter {
        case .constant(let b):
            return b.map { $0 ? Dialect.trueLiteral : Dialect.falseLiteral } ?? unknown
        case .compare(let index, let op, let value):
            let c = try column(index)
            if value.isNull { return unknown }
            let sqlOperator: String
            switch op {
            case .equal: sqlOperator = "="
            case .notEqual: sqlOperator = "<>"
            case .less: sqlOperator = "<"
            case .lessOrEqual: sqlOperator = "<="
            case .greater: sqlOperator = ">"
            case .greaterOrEqual: sqlOperator = ">="
            }
            return "\(c) \(sqlOperator) \(parameters.add(Dialect.parameter(value)))"
        case .oneOf(let index, let values, let includesNil):
            let c = try column(index)
            if values.isEmpty {
                // SQL makes `NULL IN ()` false; Depot makes it unknown (or true with nil).
                return includesNil ? "\(c) IS NULL" : "(\(c) IS NULL AND \(unknown))"
            }
            let inList = "\(c) IN (\(list(values)))"
            return includesNil ? "(\(inList) OR \(c) IS NULL)" : inList
        case .notOneOf(let index, let values):
            let c = try column(index)
            if values.isEmpty { return "(\(c) IS NOT NULL OR \(unknown))" }
            return "\(c) NOT IN (\(list(values)))"
        case .isNil(let index):
            return "\(try column(index)) IS NULL"
        case .isNotNil(let index):
            return "\(try column(index)) IS NOT NULL"
        case .hasPrefix(let index, let prefix):
            return Dialect.hasPrefix(try column(index), prefix, &parameters)
        case .contains(let index, let needle):
            let c = try column(index)
            if needle.isEmpty { return "(\(c) IS NOT NULL OR \(unknown))" }
            return Dialect.contains(c, needle, &parameters)
        case .and(let parts):
            if parts.isEmpty { return Dialect.trueLiteral }
            var out: [String] = []
            for part in parts { out.append(try condition(part)) }
            return "(" + out.joined(separator: " AND ") + ")"
        case .or(let parts):
            if parts.isEmpty { return Dialect.falseLiteral }
            var out: [String] = []
            for part in parts { out.append(try condition(part)) }
            return "(" + out.joined(separator: " OR ") + ")"
        case .not(let inner):
            return "(NOT \(try condition(inner)))"
        }
    }

    package mutating func whereClause(_ filter: Filter) throws(DepotError) -> String {
        if filter == .constant(true) { return "" }
        return " WHERE " + (try condition(filter))
    }

    /// The ORDER BY clause of `sort`, without the keys after one whose values are all
    /// distinct (the primary key, or a unique attribute that cannot be nil): the order is
    /// total there, and the redundant tie-break would keep the engine from reading the
    /// unique constraint's index in order (PostgreSQL sorted again on top of it).
    package func orderBy(_ sort: [ResolvedSortKey]) throws(DepotError) -> String {
        var keys: [String] = []
        for key in sort {
            let column = try column(key.attributeIndex)
            let attribute = entity.attributes[key.attributeIndex]
            keys.append(Dialect.orderKey(column, ascending: key.ascending, nullable: attribute.isOptional))
            if key.attributeIndex == entity.primaryKeyIndex || (attribute.isUnique && !attribute.isOptional) { break }
        }
        return keys.isEmpty ? "" : " ORDER BY " + keys.joined(separator: ", ")
    }

    package mutating func limitClause(_ query: Query) -> String {
        guard query.limit != nil || query.offset > 0 else { return "" }
        let limit = parameters.add(query.limit.map { Dialect.count(Int64($0)) } ?? Dialect.noLimit)
        let offset = parameters.add(Dialect.count(Int64(query.offset)))
        return " LIMIT \(limit) OFFSET \(offset)"
    }
}

/// A table of a registered entity as the statement builders need it: each SQL backend's
/// registered entity conforms.
package protocol SQLTable {
    var entity: EntityDescription { get }
    /// The quoted (and, where the engine has schemas, qualified) table name.
    var name: String { get }
    /// The quoted primary key column.
    var keyColumn: String { get }
    /// Every column, quoted, in the declared attribute order (the row order).
    var columnList: String { get }
}

/// A statement compiled for one engine with its parameters, in marker order.
package struct SQLStatement<Dialect: SQLDialect> {
    package var sql: String
    package var parameters: [Dialect.Parameter]

    package init(sql: String, parameters: [Dialect.Parameter]) {
        self.sql = sql
        self.parameters = parameters
    }
}

// The statements both engines run alike.
extension SQLQueryCompiler {
    package init(table: some SQLTable) {
        self.init(entity: table.entity)
    }

    private func statement(_ sql: String) -> SQLStatement<Dialect> {
        SQLStatement(sql: sql, parameters: parameters.values)
    }

    /// The query's rows: `columns` (every column by default) in the query's order and page.
    package static func select(_ query: Query, table: some SQLTable, columns: String? = nil) throws(DepotError) -> SQLStatement<Dialect> {
        var compiler = Self(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        return compiler.statement("SELECT \(columns ?? table.columnList) FROM \(table.name)\(whereSQL)\(order)\(limit)")
    }

    /// How many rows the query's page holds.
    package static func count(_ query: Query, table: some SQLTable) throws(DepotError) -> SQLStatement<Dialect> {
        var compiler = Self(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        if query.limit == nil && query.offset == 0 {
            return compiler.statement("SELECT count(*) FROM \(table.name)\(whereSQL)")
        }
        let limit = compiler.limitClause(query)
        return compiler.statement("SELECT count(*) FROM (SELECT 1 FROM \(table.name)\(whereSQL)\(limit)) AS page")
    }

    /// The rows an aggregate reads, for its FROM clause: the table filtered, or, with an
    /// offset or a limit, the query's page chosen in a subquery first.
    package mutating func rowSource(_ rows: Query, table: some SQLTable) throws(DepotError) -> String {
        let whereSQL = try whereClause(rows.filter)
        guard rows.limit != nil || rows.offset > 0 else { return "\(table.name)\(whereSQL)" }
        let order = try orderBy(rows.sort)
        let limit = limitClause(rows)
        return "(SELECT \(table.columnList) FROM \(table.name)\(whereSQL)\(order)\(limit)) AS page"
    }

    /// A DELETE honouring the query's order, offset and limit; with `returningKeys` it
    /// yields the primary key of every deleted row (for the change feed).
    package static func delete(_ query: Query, table: some SQLTable, returningKeys: Bool) throws(DepotError) -> SQLStatement<Dialect> {
        var compiler = Self(table: table)
        let whereSQL = try compiler.whereClause(query.filter)
        let returning = returningKeys ? " RETURNING \(table.keyColumn)" : ""
        if query.limit == nil && query.offset == 0 {
            return compiler.statement("DELETE FROM \(table.name)\(whereSQL)\(returning)")
        }
        let order = try compiler.orderBy(query.sort)
        let limit = compiler.limitClause(query)
        let chosen = "SELECT \(table.keyColumn) FROM \(table.name)\(whereSQL)\(order)\(limit)"
        return compiler.statement("DELETE FROM \(table.name) WHERE \(table.keyColumn) IN (\(chosen))\(returning)")
    }
}

// A select's SQL depends on its request's shape (which attributes, operators, list
// lengths, sort keys, whether it is paged), not on its values: a backend can keep the SQL
// per shape and skip building the same text again for every call.

/// A parameter of a shaped select before a dialect binds it: a value compared with a
/// column, a LIMIT or OFFSET, or the LIMIT that means no limit.
package enum SQLShapeParameter: Sendable {
    case value(Value)
    case count(Int64)
    case noLimit
}

/// The shape of a request's SELECT (see ``SQLQueryCompiler``), and its parameters in the
/// order ``SQLQueryCompiler/select(_:table:columns:)`` binds them.
///
/// Not generic over the dialect: it runs on every read of a shaped statement, and the
/// inlinable generic version it replaces was still called unspecialized from a backend's
/// release build, looking up its arrays' metadata at run time on each call. The backend
/// turns ``SQLShapeParameter`` into its own bindings.
package enum SQLSelectShape {
    /// The shape of `query`'s SELECT and its parameters, from one walk that mirrors the
    /// compiler's; `nil` when a condition's parameters are derived by the dialect (prefix
    /// and substring tests), whose queries always compile. Two queries with equal shapes
    /// compile to the same SQL for the same table and columns.
    package static func of(_ query: Query) -> (shape: [Int], parameters: [SQLShapeParameter])? {
        // Room for a list page's shape (a filter or two, a sort, a page) without growing.
        var shape: [Int] = []
        shape.reserveCapacity(24)
        var parameters: [SQLShapeParameter] = []
        parameters.reserveCapacity(4)
        guard walk(query.filter, into: &shape, &parameters) else { return nil }
        shape.append(-1)
        for key in query.sort {
            shape.append(key.attributeIndex)
            shape.append(key.ascending ? 1 : 0)
        }
        if query.limit != nil || query.offset > 0 {
            shape.append(-2)
            parameters.append(query.limit.map { .count(Int64($0)) } ?? .noLimit)
            parameters.append(.count(Int64(query.offset)))
        }
        return (shape, parameters)
    }

    private static func walk(_ filter: Filter, into shape: inout [Int], _ parameters: inout [SQLShapeParameter]) -> Bool {
        switch filter {
        case .constant(let b):
            shape.append(0)
            shape.append(b.map { $0 ? 1 : 0 } ?? 2)
        case .compare(let index, let op, let value):
            shape.append(1)
            shape.append(index)
            switch op {
            case .equal: shape.append(0)
            case .notEqual: shape.append(1)
            case .less: shape.append(2)
            case .lessOrEqual: shape.append(3)
            case .greater: shape.append(4)
            case .greaterOrEqual: shape.append(5)
            }
            if value.isNull {
                shape.append(0)
            } else {
                shape.append(1)
                parameters.append(.value(value))
            }
        case .oneOf(let index, let values, let includesNil):
            shape.append(2)
            shape.append(index)
            shape.append(values.count)
            shape.append(includesNil ? 1 : 0)
            for value in values { parameters.append(.value(value)) }
        case .notOneOf(let index, let values):
            shape.append(3)
            shape.append(index)
            shape.append(values.count)
            for value in values { parameters.append(.value(value)) }
        case .isNil(let index):
            shape.append(4)
            shape.append(index)
        case .isNotNil(let index):
            shape.append(5)
            shape.append(index)
        case .hasPrefix, .contains:
            return false
        case .and(let parts), .or(let parts):
            if case .and = filter { shape.append(6) } else { shape.append(7) }
            shape.append(parts.count)
            for part in parts {
                guard walk(part, into: &shape, &parameters) else { return false }
            }
        case .not(let inner):
            shape.append(8)
            return walk(inner, into: &shape, &parameters)
        }
        return true
    }
}
