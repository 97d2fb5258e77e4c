import CSQLite
import DepotCore
import Foundation

/// A `ColumnReader` over the current row of a stepped statement: each read takes the
/// column's value from the live statement once, with no `Value` built in between.
///
/// Columns are in the entity's attribute order (the SELECTs list them so), and each is read
/// by its declared type after its storage class is checked: SQLite keeps whatever another
/// program writes (text in an INTEGER column, an integer in a BLOB one) and would convert it
/// on reading (`'twelve'` to 0), so a value of the wrong class is a `conversionFailed` that
/// names the entity, the key and the attribute, never a silent conversion. The NaN blob of
/// a REAL column (see `nanBlob`) is the one BLOB a REAL column holds.
///
/// The typed reads are inlined always: a record's initializer reaches them through the
/// protocol's witnesses, which then hold the read itself instead of calling it.
final class StatementColumns: ColumnReader {
    let statement: OpaquePointer
    private let types: [AttributeType]
    /// Whether each column may hold NULL. A non-optional attribute's column is `NOT NULL`
    /// (Depot creates it so, and a migration cannot make an optional attribute required), so
    /// SQLite itself guarantees a value there.
    private let nullable: [Bool]
    private let entity: String
    /// The attributes' names, for the messages; empty for columns that are not an entity's.
    private let names: [String]
    /// The primary key's column, whose value names the record in a message (-1: none).
    private let keyColumn: Int

    init(_ statement: Statement, table: RegisteredEntity) {
        self.statement = statement.handle
        self.types = table.types
        self.nullable = table.nullable
        self.entity = table.entity.name
        self.names = table.entity.attributes.map(\.name)
        self.keyColumn = table.entity.primaryKeyIndex
    }

    /// Columns of the given types, any of which may be NULL: a statement whose columns
    /// are not the entity's attributes (an aggregate's keys and results).
    init(_ statement: Statement, types: [AttributeType], entity: String) {
        self.statement = statement.handle
        self.types = types
        self.nullable = types.map { _ in true }
        self.entity = entity
        self.names = []
        self.keyColumn = -1
    }

    var columnCount: Int { types.count }

    /// The value of the column at `index`, after checking that it exists, is not NULL and
    /// holds a value of SQLite's storage class `expected`.
    ///
    /// The value is read once with `sqlite3_column_value` and then through the
    /// `sqlite3_value_*` functions: every `sqlite3_column_*` call enters and leaves the
    /// connection's mutex and checks for an allocation failure, which checking the class
    /// and then reading the value would pay twice per attribute, more than the engine's
    /// own work per row. The value is the statement's current result (the connection is
    /// used by one thread at a time, `SQLITE_OPEN_NOMUTEX`) and is read before the next
    /// step, as the `sqlite3_value` documentation allows.
    @inline(__always)
    private func column<T>(_ index: Int, _ type: T.Type, _ expected: Int32) throws(DepotError) -> OpaquePointer {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        guard let value = sqlite3_column_value(statement, Int32(truncatingIfNeeded: index)) else {
            throw DepotError(.backend, "SQLite gave no value for \(place(index)); this is a bug in Depot's SQLite store.")
        }
        let stored = sqlite3_value_type(value)
        if stored != expected {
            if stored == SQLITE_NULL && nullable[index] { throw storedNil(T.self, at: index) }
            throw wrongClass(index, stored: stored)
        }
        return value
    }

    /// The error for a value of another storage class than its attribute's type takes.
    @inline(never)
    private func wrongClass(_ index: Int, stored: Int32) -> DepotError {
        let column = Int32(truncatingIfNeeded: index)
        let found: String
        switch stored {
        case SQLITE_INTEGER: found = "the integer \(sqlite3_column_int64(statement, column))"
        case SQLITE_FLOAT: found = "the real number \(sqlite3_column_double(statement, column))"
        case SQLITE_TEXT: found = "the text \(Value.string(textValue(column).prefix(64).description).debugLiteral)"
        case SQLITE_BLOB: found = "a blob of \(sqlite3_column_bytes(statement, column)) bytes"
        default: found = "NULL"
        }
        return DepotError(
            .conversionFailed,
            "\(place(index)) holds \(found), which its \(types[index].rawValue) attribute cannot hold; another program wrote it. Correct the stored value, or change the attribute's type with a migration step.")
    }

    /// The attribute at `index` and the record it belongs to, as a message names them.
    private func place(_ index: Int) -> String {
        let attribute = index < names.count ? "\(entity).\(names[index])" : "column \(index + 1) of \(entity)"
        guard keyColumn >= 0, keyColumn < types.count, keyColumn != index else { return attribute }
        let key = Int32(truncatingIfNeeded: keyColumn)
        switch sqlite3_column_type(statement, key) {
        case SQLITE_INTEGER: return "\(attribute) of the record with key \(sqlite3_column_int64(statement, key))"
        case SQLITE_TEXT: return "\(attribute) of the record with key \(Value.string(textValue(key)).debugLiteral)"
        default: return attribute
        }
    }

    /// A TEXT value's characters, invalid UTF-8 repaired: for messages only.
    private func textValue(_ column: Int32) -> String {
        guard let text = sqlite3_column_text(statement, column) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column))), as: UTF8.self)
    }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < types.count else { return true }
        return sqlite3_column_type(statement, Int32(truncatingIfNeeded: index)) == SQLITE_NULL
    }

    @inline(__always)
    func int64(_ index: Int) throws(DepotError) -> Int64 {
        sqlite3_value_int64(try column(index, Int64.self, SQLITE_INTEGER))
    }

    @inline(__always)
    func bool(_ index: Int) throws(DepotError) -> Bool {
        switch sqlite3_value_int64(try column(index, Bool.self, SQLITE_INTEGER)) {
        case 0: return false
        case 1: return true
        default: throw wrongClass(index, stored: SQLITE_INTEGER)
        }
    }

    /// A REAL column's value; NaN is stored as a BLOB of its bits (see `nanBlob`), the only
    /// BLOB a REAL column holds.
    @inline(__always)
    private func real<T>(_ index: Int, _ type: T.Type) throws(DepotError) -> Double {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        guard let value = sqlite3_column_value(statement, Int32(truncatingIfNeeded: index)) else {
            throw DepotError(.backend, "SQLite gave no value for \(place(index)); this is a bug in Depot's SQLite store.")
        }
        let stored = sqlite3_value_type(value)
        if stored == SQLITE_FLOAT { return sqlite3_value_double(value) }
        if stored == SQLITE_BLOB, sqlite3_value_bytes(value) == Int32(nanBlob.count),
            let blob = sqlite3_value_blob(value),
            UnsafeRawBufferPointer(start: blob, count: nanBlob.count).elementsEqual(nanBlob)
        {
            return .nan
        }
        if stored == SQLITE_NULL && nullable[index] { throw storedNil(T.self, at: index) }
        throw wrongClass(index, stored: stored)
    }

    @inline(__always)
    func double(_ index: Int) throws(DepotError) -> Double {
        try real(index, Double.self)
    }

    @inline(__always)
    func date(_ index: Int) throws(DepotError) -> Date {
        Date(timeIntervalSinceReferenceDate: try real(index, Date.self))
    }

    @inline(__always)
    func string(_ index: Int) throws(DepotError) -> String {
        let value = try column(index, String.self, SQLITE_TEXT)
        // value_text before value_bytes: the byte count is of the text form.
        guard let text = sqlite3_value_text(value) else { return "" }
        let count = Int(sqlite3_value_bytes(value))
        // SQLite ends every text with a NUL, so the C string initialiser validates the
        // bytes in one pass (it is not generic, unlike `String(validating:as:)`, which runs
        // unspecialized here). Text holding a NUL of its own ends early there: the counts
        // differ, and the whole text is validated below.
        if let string = text.withMemoryRebound(to: CChar.self, capacity: count + 1, { String(validatingCString: $0) }),
            string.utf8.count == count
        {
            return string
        }
        let bytes = UnsafeBufferPointer(start: text, count: count)
        guard let string = String(validating: bytes, as: UTF8.self) else {
            throw DepotError(.conversionFailed, "\(place(index)) holds text that is not valid UTF-8, which a string attribute cannot hold exactly; another program wrote it. Correct the stored value.")
        }
        return string
    }

    func data(_ index: Int) throws(DepotError) -> Data {
        let value = try column(index, Data.self, SQLITE_BLOB)
        guard let blob = sqlite3_value_blob(value) else { return Data() }
        return Data(bytes: blob, count: Int(sqlite3_value_bytes(value)))
    }

    func uuid(_ index: Int) throws(DepotError) -> UUID {
        let value = try column(index, UUID.self, SQLITE_BLOB)
        let count = Int(sqlite3_value_bytes(value))
        guard count == 16, let blob = sqlite3_value_blob(value) else { throw wrongClass(index, stored: SQLITE_BLOB) }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(start: blob, count: 16)) }
        return UUID(uuid: uuid)
    }

    func value(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        return try value(index, as: types[index])
    }
}
