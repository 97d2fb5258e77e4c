package import DepotCore

/// The statements by primary key that both SQL engines build for an entity's table, once,
/// in a dialect's parameter markers.
///
/// Parameters are numbered by attribute position, so every writing statement binds a row
/// with the same loop; a read or delete by key binds the key alone, as parameter 1. Column
/// lists follow the declared attribute order, which is the row order, whatever order
/// `ALTER TABLE` left the physical columns in.
package struct SQLKeyStatements<Dialect: SQLDialect>: Sendable {
    /// The quoted table name.
    package let name: String
    /// The quoted primary key column.
    package let keyColumn: String
    /// Every column, quoted, in attribute order.
    package let columnList: String
    /// Every attribute's parameter marker, in attribute order.
    package let parameters: String
    /// The key attribute's parameter marker in a row's parameters.
    package let keyParameter: String
    /// `column = marker` for every attribute but the key; the key's own when it is the
    /// only attribute, so the statement stays valid.
    package let assignments: [String]

    package let selectByKey: String
    package let insert: String
    /// The insert, doing nothing when the key is taken.
    package let insertUnlessKeyExists: String
    package let update: String
    package let deleteByKey: String
    package let countAll: String

    package init(_ entity: EntityDescription) {
        let key = entity.primaryKeyIndex
        name = quoted(entity.name)
        keyColumn = quoted(entity.primaryKey.name)
        let columns = entity.attributes.map { quoted($0.name) }
        columnList = columns.joined(separator: ", ")
        parameters = columns.indices.map { Dialect.placeholder($0 + 1) }.joined(separator: ", ")
        keyParameter = Dialect.placeholder(key + 1)
        let others = columns.indices.filter { $0 != key }.map { "\(columns[$0]) = \(Dialect.placeholder($0 + 1))" }
        assignments = others.isEmpty ? ["\(keyColumn) = \(keyParameter)"] : others
        selectByKey = "SELECT \(columnList) FROM \(name) WHERE \(keyColumn) = \(Dialect.placeholder(1))"
        insert = "INSERT INTO \(name) (\(columnList)) VALUES (\(parameters))"
        insertUnlessKeyExists = insert + " ON CONFLICT (\(keyColumn)) DO NOTHING"
        update = "UPDATE \(name) SET \(assignments.joined(separator: ", ")) WHERE \(keyColumn) = \(keyParameter)"
        deleteByKey = "DELETE FROM \(name) WHERE \(keyColumn) = \(Dialect.placeholder(1))"
        countAll = "SELECT count(*) FROM \(name)"
    }
}

/// A registered entity that holds its key statements: it is the ``SQLTable`` the query
/// compiler reads, and its statements by key are reachable by their names.
package protocol SQLKeyTable: SQLTable {
    associatedtype Dialect: SQLDialect
    var statements: SQLKeyStatements<Dialect> { get }
}

extension SQLKeyTable {
    package var name: String { statements.name }
    package var keyColumn: String { statements.keyColumn }
    package var columnList: String { statements.columnList }
    package var selectByKey: String { statements.selectByKey }
    package var insert: String { statements.insert }
    package var insertUnlessKeyExists: String { statements.insertUnlessKeyExists }
    package var update: String { statements.update }
    package var deleteByKey: String { statements.deleteByKey }
    package var countAll: String { statements.countAll }
}
