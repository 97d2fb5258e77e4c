public import Foundation

/// A stored record as a backend holds it, read one attribute at a time in the attribute's
/// own type: the live SQLite statement, the bytes of an LMDB value, the memory store's row.
///
/// Records decode from a column reader directly, so a fetch builds no intermediate array of
/// ``Value``s per record. A backend implements this protocol over its native form; an
/// application meets it only through ``RecordReader``.
///
/// A reader is valid only during the call it is passed to: the backend moves it to the next
/// record (or finishes its statement) afterwards. Positions are the entity's attribute
/// positions, in declaration order; the backend decodes each by the attribute's declared
/// type.
///
/// Every typed read throws ``DepotError/Code/conversionFailed`` when the stored value is
/// `nil` (ask ``isNull(_:)`` first for an optional attribute), and
/// ``DepotError/Code/storeCorrupted`` when the stored bytes are not a value of the declared
/// type. A position outside the entity throws ``DepotError/Code/conversionFailed``.
public protocol ColumnReader: AnyObject {
    /// The number of attributes.
    var columnCount: Int { get }
    /// Whether the value at `index` is `nil` (also `true` for a position that does not exist).
    func isNull(_ index: Int) -> Bool
    /// The integer at `index`.
    func int64(_ index: Int) throws(DepotError) -> Int64
    /// The double at `index`.
    func double(_ index: Int) throws(DepotError) -> Double
    /// The Boolean at `index`.
    func bool(_ index: Int) throws(DepotError) -> Bool
    /// The string at `index`.
    func string(_ index: Int) throws(DepotError) -> String
    /// The bytes at `index`.
    func data(_ index: Int) throws(DepotError) -> Data
    /// The date at `index`.
    func date(_ index: Int) throws(DepotError) -> Date
    /// The UUID at `index`.
    func uuid(_ index: Int) throws(DepotError) -> UUID
    /// The value at `index` in backend-neutral form (`null` included).
    func value(_ index: Int) throws(DepotError) -> Value
}

extension ColumnReader {
    /// The value at `index` read through the typed accessor of `type` (`null` when nil is
    /// stored): every backend's reader answers ``value(_:)`` with this once it knows the
    /// attribute's type, so the type switch is written once.
    @inlinable
    public func value(_ index: Int, as type: AttributeType) throws(DepotError) -> Value {
        if isNull(index) { return .null }
        switch type {
        case .int64: return .int(try int64(index))
        case .bool: return .bool(try bool(index))
        case .double: return .double(try double(index))
        case .date: return .date(try date(index))
        case .string: return .string(try string(index))
        case .data: return .data(try data(index))
        case .uuid: return .uuid(try uuid(index))
        }
    }

    /// The whole record in backend-neutral form, for the places that keep rows (change
    /// sets, observation diffs, the memory store).
    public func row() throws(DepotError) -> Row {
        var row = Row(capacity: columnCount)
        for index in 0..<columnCount { row.append(try value(index)) }
        return row
    }
}

/// The error every reader throws for a typed read of a `nil` value.
public func storedNil(_ type: Any.Type, at index: Int) -> DepotError {
    DepotError(.conversionFailed, "The stored value at attribute position \(index) is nil, which \(type) cannot hold: make the property optional, or give the attribute a default value.")
}

/// The error every reader throws for a position outside the entity.
public func columnOutOfRange(_ index: Int, count: Int) -> DepotError {
    DepotError(.conversionFailed, "The record has \(count) attributes; position \(index) does not exist. Read attributes by key path, or let @Record generate the mapping.")
}

/// A ``ColumnReader`` over a ``Row``: the memory store's stored form, and the form of a row
/// the core keeps (change sets, observations, tests).
public final class RowColumns: ColumnReader {
    /// The row being read; replace it to read the next record with the same reader.
    /// (Unchecked for exclusivity: a class's `var` is otherwise checked at run time on every
    /// read, once per attribute of every record.)
    @exclusivity(unchecked) public var row: Row

    /// A reader over `row`.
    public init(_ row: Row = Row()) { self.row = row }

    /// The number of values in the row.
    public var columnCount: Int { row.count }

    @inline(__always)
    func at(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < row.count else { throw columnOutOfRange(index, count: row.count) }
        return row[value: index]
    }

    /// Whether the value at `index` is null (or past the row's end).
    public func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < row.count else { return true }
        return row[value: index].isNull
    }
    /// The integer at `index`; another type is `conversionFailed`.
    public func int64(_ index: Int) throws(DepotError) -> Int64 { try Int64(value: at(index)) }
    /// The double at `index`; another type is `conversionFailed`.
    public func double(_ index: Int) throws(DepotError) -> Double { try Double(value: at(index)) }
    /// The Boolean at `index`; another type is `conversionFailed`.
    public func bool(_ index: Int) throws(DepotError) -> Bool { try Bool(value: at(index)) }
    /// The string at `index`; another type is `conversionFailed`.
    public func string(_ index: Int) throws(DepotError) -> String { try String(value: at(index)) }
    /// The bytes at `index`; another type is `conversionFailed`.
    public func data(_ index: Int) throws(DepotError) -> Data { try Data(value: at(index)) }
    /// The date at `index`; another type is `conversionFailed`.
    public func date(_ index: Int) throws(DepotError) -> Date { try Date(value: at(index)) }
    /// The UUID at `index`; another type is `conversionFailed`.
    public func uuid(_ index: Int) throws(DepotError) -> UUID { try UUID(value: at(index)) }
    /// The value at `index`, whatever its type.
    public func value(_ index: Int) throws(DepotError) -> Value { try at(index) }
}

/// What a record's `init(row:)` reads: the stored record, by key path.
///
/// ```swift
/// init(row: RecordReader<CatRecord>) throws {
///     id = try row[\.id]
///     name = try row[\.name]
///     age = try row[\.age]
/// }
/// ```
///
/// A key path that the entity does not declare, or whose type stores as another attribute
/// type than the declared one, throws ``DepotError/Code/conversionFailed`` naming it, so a
/// wrong mapping fails loudly instead of swapping values. ``Record(name:indexes:)`` generates reads
/// by position (``decode(_:as:)``), which it keeps in step with the entity it generates.
public struct RecordReader<Record: ManagedRecord> {
    /// The backend's reader.
    public let columns: any ColumnReader

    /// A reader of the record `columns` holds.
    @inlinable
    public init(_ columns: any ColumnReader) { self.columns = columns }

    /// The value of the attribute that `keyPath` maps to.
    public subscript<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> V {
        get throws(DepotError) {
            let entity = Record.entity
            guard let position = entity.indexByKeyPath.position(of: keyPath) else {
                throw DepotError(.conversionFailed, "\(Record.self).init(row:) reads \(keyPath), which is not one of the attributes of entity \(entity.name); declare an Attribute for it or read another key path.")
            }
            guard entity.reads(V.self, at: position) else { throw mismatch(position, as: V.self, entity: entity.description, what: "\(keyPath)") }
            return try V.read(from: columns, at: position)
        }
    }

    /// The value of the attribute stored under `name`.
    public subscript<V: AttributeValue>(_ name: String) -> V {
        get throws(DepotError) {
            let entity = Record.entity.description
            guard let position = entity.index(of: name) else {
                throw DepotError(.conversionFailed, "\(Record.self).init(row:) reads the attribute \"\(name)\", which entity \(entity.name) does not declare.")
            }
            return try read(position, as: V.self, entity: entity, what: "\"\(name)\"")
        }
    }

    /// `what` names the read in an error only: it is an autoclosure because describing a
    /// key path walks its components and allocates, which every read would pay otherwise.
    func read<V: AttributeValue>(_ position: Int, as type: V.Type, entity: EntityDescription, what: @autoclosure () -> String) throws(DepotError) -> V {
        let attribute = entity.attributes[position]
        guard attribute.type == V.attributeType, attribute.isOptional == V.isOptional || !attribute.isOptional else {
            throw mismatch(position, as: V.self, entity: entity, what: what())
        }
        return try V.read(from: columns, at: position)
    }

    /// The error of a read whose type is not the attribute's.
    @inline(never)
    func mismatch<V: AttributeValue>(_ position: Int, as type: V.Type, entity: EntityDescription, what: String) -> DepotError {
        let attribute = entity.attributes[position]
        return DepotError(.conversionFailed, "\(Record.self).init(row:) reads \(what) as \(V.self), but entity \(entity.name) declares \(attribute.name) as \(attribute.isOptional ? "optional " : "")\(attribute.type.rawValue); read it with the declared type.")
    }

    /// The value at an attribute position, in declaration order: what ``Record(name:indexes:)``
    /// generates. By hand, read by key path instead, so the mapping cannot drift from the
    /// entity.
    @inlinable
    public func decode<V: AttributeValue>(_ position: Int, as type: V.Type = V.self) throws(DepotError) -> V {
        try V.read(from: columns, at: position)
    }
}
