import CSQLite
public import DepotCore
public import Foundation

/// A `ColumnReader` over the current row of a stepped statement: each read is one
/// `sqlite3_column_*` call on the live statement, with no `Value` built in between.
///
/// Columns are in the entity's attribute order (the SELECTs list them so), and each is read
/// by its declared type: SQLite's own storage class decides only `NULL`, and the NaN blob
/// of a REAL column (see `nanBlob`).
final class StatementColumns: ColumnReader {
    let statement: OpaquePointer
    private let types: [AttributeType]
    /// Whether each column may hold NULL. A non-optional attribute's column is `NOT NULL`
    /// (Depot creates it so, and a migration cannot make an optional attribute required), so
    /// SQLite itself guarantees a value there and the check costs a call per value for
    /// nothing.
    private let nullable: [Bool]
    private let entity: String

    init(_ statement: Statement, table: RegisteredEntity) {
        self.statement = statement.handle
        self.types = table.types
        self.nullable = table.nullable
        self.entity = table.entity.name
    }

    /// Columns of the given types, any of which may be NULL: a statement whose columns
    /// are not the entity's attributes (an aggregate's keys and results).
    init(_ statement: Statement, types: [AttributeType], entity: String) {
        self.statement = statement.handle
        self.types = types
        self.nullable = types.map { _ in true }
        self.entity = entity
    }

    var columnCount: Int { types.count }

    /// The column at `index`, after checking that it exists and is not NULL.
    @inline(__always)
    private func column<T>(_ index: Int, _ type: T.Type) throws(DepotError) -> Int32 {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        let column = Int32(truncatingIfNeeded: index)
        if nullable[index] && sqlite3_column_type(statement, column) == SQLITE_NULL { throw storedNil(T.self, at: index) }
        return column
    }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < types.count else { return true }
        return sqlite3_column_type(statement, Int32(truncatingIfNeeded: index)) == SQLITE_NULL
    }

    func int64(_ index: Int) throws(DepotError) -> Int64 {
        sqlite3_column_int64(statement, try column(index, Int64.self))
    }

    func bool(_ index: Int) throws(DepotError) -> Bool {
        sqlite3_column_int64(statement, try column(index, Bool.self)) != 0
    }

    /// A REAL column's value; NaN is stored as a BLOB (see `nanBlob`), which SQLite reads
    /// as 0.0, so only a 0.0 needs its storage class checked.
    @inline(__always)
    private func real(_ column: Int32) -> Double {
        let value = sqlite3_column_double(statement, column)
        if value == 0 && sqlite3_column_type(statement, column) == SQLITE_BLOB { return .nan }
        return value
    }

    func double(_ index: Int) throws(DepotError) -> Double {
        real(try column(index, Double.self))
    }

    func date(_ index: Int) throws(DepotError) -> Date {
        Date(timeIntervalSinceReferenceDate: real(try column(index, Date.self)))
    }

    func string(_ index: Int) throws(DepotError) -> String {
        let column = try column(index, String.self)
        // column_text before column_bytes: the byte count is of the text form.
        guard let text = sqlite3_column_text(statement, column) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    func data(_ index: Int) throws(DepotError) -> Data {
        let column = try column(index, Data.self)
        guard let blob = sqlite3_column_blob(statement, column) else { return Data() }
        return Data(bytes: blob, count: Int(sqlite3_column_bytes(statement, column)))
    }

    func uuid(_ index: Int) throws(DepotError) -> UUID {
        let column = try column(index, UUID.self)
        let count = Int(sqlite3_column_bytes(statement, column))
        guard count == 16, let blob = sqlite3_column_blob(statement, column) else {
            throw DepotError(.storeCorrupted, "A UUID column of \(entity) holds \(count) bytes instead of 16; the database was changed outside Depot.")
        }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(start: blob, count: 16)) }
        return UUID(uuid: uuid)
    }

    func value(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        if isNull(index) { return .null }
        switch types[index] {
        case .int64: return .int(try int64(index))
        case .bool: return .bool(try bool(index))
        case .double: return .double(try double(index))
        case .date: return .date(try date(index))
        case .string: return .string(try string(index))
        case .data: return .data(try data(index))
        case .uuid: return .uuid(try uuid(index))
        }
    }
}
