import CLibPQ
import DepotCore
import Foundation

/// A `ColumnReader` over one row of a binary-format result: each read decodes the
/// column's bytes by its declared type, with no `Value` built in between.
///
/// Another program may have written the table: changed a column's type (`ALTER TABLE`),
/// stored a NULL where the attribute is not optional, or text Depot's string encoding
/// cannot have made. Each column's type as the server reports it (`PQftype`) is checked
/// against the one Depot keeps the attribute in before any of its bytes are read, so such
/// a value is a `DepotError.Code.conversionFailed` naming the entity, the record's key and
/// the attribute, never bytes of one type read as another.
final class PGColumns: ColumnReader {
    let result: PGResult
    var row = 0
    private let types: [AttributeType]
    private let entity: String
    /// The columns' names, for messages (the attributes', or the aggregate's columns').
    private let names: [String]
    /// The key's column, to name the record in messages; nil when the result has none.
    private let keyIndex: Int?
    /// Whether every column has the type Depot keeps its attribute in (checked once per
    /// result, so a read of a well-formed table costs one test).
    let typesMatch: Bool

    /// - Parameters:
    ///   - names: The columns' names for messages; the positions when nil.
    ///   - keyIndex: The key's column, to name the record in messages.
    init(_ result: PGResult, types: [AttributeType], entity: String, names: [String]? = nil, keyIndex: Int? = nil) {
        self.result = result
        self.types = types
        self.entity = entity
        self.names = names ?? types.indices.map { "column \($0 + 1)" }
        self.keyIndex = keyIndex
        var match = result.columnCount == types.count
        if match {
            for (index, type) in types.enumerated() where PQftype(result.handle, Int32(truncatingIfNeeded: index)) != Self.oid(type) {
                match = false
                break
            }
        }
        typesMatch = match
    }

    /// Over rows of `table`'s entity, every attribute in order.
    convenience init(_ result: PGResult, table: RegisteredEntity) {
        self.init(result, types: table.types, entity: table.entity.name, names: table.entity.attributes.map(\.name), keyIndex: table.keyIndex)
    }

    /// The PostgreSQL type Depot keeps each attribute type in (``PGDDL/columnType(_:)``):
    /// the one its parameters are bound as.
    static func oid(_ type: AttributeType) -> Oid { PostgresTransaction.oid(type) }

    /// A type's name for messages.
    static func typeName(_ oid: Oid) -> String {
        switch oid {
        case 16: "boolean"
        case 17: "bytea"
        case 18: "\"char\""
        case 19: "name"
        case 20: "bigint"
        case 21: "smallint"
        case 23: "integer"
        case 25: "text"
        case 114: "json"
        case 700: "real"
        case 701: "double precision"
        case 1042: "character"
        case 1043: "character varying"
        case 1082: "date"
        case 1114: "timestamp"
        case 1184: "timestamp with time zone"
        case 1700: "numeric"
        case 2950: "uuid"
        case 3802: "jsonb"
        default: "the type with OID \(oid)"
        }
    }

    /// "the Cat with primary key 2": the record, for messages.
    private func record() -> String {
        guard let keyIndex, keyIndex < types.count, keyIndex < result.columnCount, typeMatches(keyIndex), !result.isNull(row, keyIndex) else {
            return "a stored \(entity)"
        }
        let key = (try? value(keyIndex))?.debugLiteral ?? "?"
        return "the stored \(entity) with primary key \(key)"
    }

    private func typeMatches(_ index: Int) -> Bool {
        PQftype(result.handle, Int32(truncatingIfNeeded: index)) == Self.oid(types[index])
    }

    /// The error for a column whose type is not the attribute's.
    private func wrongType(_ index: Int) -> DepotError {
        if result.columnCount != types.count {
            return DepotError(.conversionFailed, "PostgreSQL returned \(result.columnCount) columns for \(entity), which has \(types.count) attributes; the table was changed outside Depot.")
        }
        let actual = PQftype(result.handle, Int32(truncatingIfNeeded: index))
        return DepotError(
            .conversionFailed,
            "Cannot read \(names[index]) of \(record()): its column has PostgreSQL type \(Self.typeName(actual)), but Depot keeps a \(types[index].rawValue) attribute in \(Self.typeName(Self.oid(types[index]))); the table was changed outside Depot.")
    }

    @inline(__always)
    private func bytes<T>(_ index: Int, _ type: T.Type, count: Int? = nil) throws(DepotError) -> UnsafeRawBufferPointer {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        if !typesMatch && (index >= result.columnCount || !typeMatches(index)) { throw wrongType(index) }
        if result.isNull(row, index) {
            throw DepotError(.conversionFailed, "\(names[index]) of \(record()) is NULL, which \(T.self) cannot hold: another program wrote it, or the attribute was optional before; make the property optional or store a value.")
        }
        let bytes = result.bytes(row, index)
        if let count, bytes.count != count {
            throw DepotError(.storeCorrupted, "\(names[index]) of \(record()) holds \(bytes.count) bytes where a \(types[index].rawValue) has \(count); the table was changed outside Depot.")
        }
        return bytes
    }

    var columnCount: Int { types.count }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < types.count else { return true }
        return result.isNull(row, index)
    }

    func int64(_ index: Int) throws(DepotError) -> Int64 {
        Int64(bigEndian: try bytes(index, Int64.self, count: 8).loadUnaligned(as: Int64.self))
    }

    func bool(_ index: Int) throws(DepotError) -> Bool {
        try bytes(index, Bool.self, count: 1)[0] != 0
    }

    func double(_ index: Int) throws(DepotError) -> Double {
        Double(bitPattern: UInt64(bigEndian: try bytes(index, Double.self, count: 8).loadUnaligned(as: UInt64.self)))
    }

    func date(_ index: Int) throws(DepotError) -> Date {
        let seconds = Double(bitPattern: UInt64(bigEndian: try bytes(index, Date.self, count: 8).loadUnaligned(as: UInt64.self)))
        return Date(timeIntervalSinceReferenceDate: seconds)
    }

    func string(_ index: Int) throws(DepotError) -> String {
        guard let string = PGText.decode(try bytes(index, String.self)) else {
            throw DepotError(.conversionFailed, "\(names[index]) of \(record()) holds text with a U+0001 that Depot's string encoding cannot have made (Depot writes U+0000 as 01 01 and U+0001 as 01 02); another program wrote it.")
        }
        return string
    }

    func data(_ index: Int) throws(DepotError) -> Data {
        let raw = try bytes(index, Data.self)
        guard let base = raw.baseAddress, raw.count > 0 else { return Data() }
        return Data(bytes: base, count: raw.count)
    }

    func uuid(_ index: Int) throws(DepotError) -> UUID {
        let raw = try bytes(index, UUID.self, count: 16)
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: raw) }
        return UUID(uuid: uuid)
    }

    func value(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        // NULL first, as ``isNull(_:)`` answers whatever the column's type.
        if result.isNull(row, index) { return .null }
        if !typesMatch && (index >= result.columnCount || !typeMatches(index)) { throw wrongType(index) }
        return try value(index, as: types[index])
    }
}
