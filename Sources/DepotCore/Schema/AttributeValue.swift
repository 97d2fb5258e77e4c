public import Foundation

/// The storage types an attribute can have. Every backend stores each of them natively.
public enum AttributeType: String, Sendable, Hashable, Codable, CaseIterable {
    /// A 64-bit signed integer; `Int`, `Int32` and `Int16` map onto it.
    case int64
    /// A 64-bit floating-point number, ordered totally (NaN after +infinity).
    case double
    /// A Boolean.
    case bool
    /// UTF-8 text, compared by bytes.
    case string
    /// Raw bytes.
    case data
    /// A point in time, stored as seconds since 2001-01-01 (`Date`'s own representation),
    /// so every date round-trips exactly.
    case date
    /// A UUID, stored as its 16 bytes.
    case uuid
}

/// A Swift type that can be the type of an attribute.
///
/// Depot provides conformances for `Int64`, `Int`, `Int32`, `Int16`, `Double`, `Bool`,
/// `String`, `Data`, `Date`, `UUID`, and `Optional` of each. An application can conform
/// its own types (a `RawRepresentable` enum, a tagged identifier) by mapping them onto
/// one of those; a `RawRepresentable` enum needs only the conformance.
public protocol AttributeValue: Sendable {
    /// The storage type.
    static var attributeType: AttributeType { get }
    /// Whether `nil` is a possible value (true only for `Optional`).
    static var isOptional: Bool { get }
    /// The value in backend-neutral form.
    var value: Value { get }
    /// Reads the value back.
    ///
    /// - Throws: ``DepotError`` with code ``DepotError/Code/conversionFailed`` when the
    ///   stored value does not fit (a `null` for a non-optional, an `Int64` out of range
    ///   for `Int16`).
    init(value: Value) throws(DepotError)
    /// Reads the value at attribute position `index` straight from a backend's stored
    /// record.
    ///
    /// The default reads the neutral ``Value`` and calls ``init(value:)``; Depot's own
    /// types read their native form (no ``Value`` in between), and so does any
    /// `RawRepresentable` enum.
    static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Self
    /// The value as it is written to a store.
    ///
    /// The default is ``value``. A type whose stored form can fail to build (a `Codable`
    /// value whose encoding throws) reports that here, and the write fails with
    /// ``DepotError/Code/conversionFailed`` with nothing written.
    func storedValue() throws(DepotError) -> Value
    /// Whether the value is stored as JSON text (``JSONAttribute``), which only equality
    /// predicates can use.
    static var isJSON: Bool { get }
}

extension AttributeValue {
    /// Not optional: only `Optional` is.
    public static var isOptional: Bool { false }
    /// Not JSON: only ``JSONAttribute`` types are.
    public static var isJSON: Bool { false }

    /// Reads the neutral ``Value`` and converts it with ``init(value:)``.
    @inlinable
    public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Self {
        try Self(value: columns.value(index))
    }

    /// The value as ``value`` gives it.
    @inlinable
    public func storedValue() throws(DepotError) -> Value { value }
}

@usableFromInline
func mismatch(_ value: Value, _ type: Any.Type) -> DepotError {
    DepotError(.conversionFailed, "Cannot read \(value.debugLiteral) as \(type): the stored value has another type or is out of range. Check the attribute's declared type against the property's, and the stored data.")
}

/// `Int64` is an attribute value, stored as ``AttributeType/int64``.
extension Int64: AttributeValue {
    /// Stored as ``AttributeType/int64``.
    public static var attributeType: AttributeType { .int64 }
    /// The value as ``Value/int(_:)``.
    @inlinable public var value: Value { .int(self) }
    /// Reads a ``Value/int(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .int(let v) = value else { throw mismatch(value, Int64.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Int64 {
        try columns.int64(index)
    }
}

/// `Int` is an attribute value, stored as ``AttributeType/int64``.
extension Int: AttributeValue {
    /// Stored as ``AttributeType/int64``.
    public static var attributeType: AttributeType { .int64 }
    /// The value as ``Value/int(_:)``.
    @inlinable public var value: Value { .int(Int64(self)) }
    /// Reads an ``Value/int(_:)`` back; fails when it is another case or out of range for `Int`.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .int(let v) = value, let i = Int(exactly: v) else { throw mismatch(value, Int.self) }
        self = i
    }
    /// Reads the stored integer natively; fails when it is out of range for `Int`.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Int {
        let v = try columns.int64(index)
        guard let i = Int(exactly: v) else { throw mismatch(.int(v), Int.self) }
        return i
    }
}

/// `Int32` is an attribute value, stored as ``AttributeType/int64``, read back only when it fits.
extension Int32: AttributeValue {
    /// Stored as ``AttributeType/int64``.
    public static var attributeType: AttributeType { .int64 }
    /// The value as ``Value/int(_:)``.
    @inlinable public var value: Value { .int(Int64(self)) }
    /// Reads an ``Value/int(_:)`` back; fails when it is another case or out of range for `Int32`.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .int(let v) = value, let i = Int32(exactly: v) else { throw mismatch(value, Int32.self) }
        self = i
    }
    /// Reads the stored integer natively; fails when it is out of range for `Int32`.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Int32 {
        let v = try columns.int64(index)
        guard let i = Int32(exactly: v) else { throw mismatch(.int(v), Int32.self) }
        return i
    }
}

/// `Int16` is an attribute value, stored as ``AttributeType/int64``, read back only when it fits.
extension Int16: AttributeValue {
    /// Stored as ``AttributeType/int64``.
    public static var attributeType: AttributeType { .int64 }
    /// The value as ``Value/int(_:)``.
    @inlinable public var value: Value { .int(Int64(self)) }
    /// Reads an ``Value/int(_:)`` back; fails when it is another case or out of range for `Int16`.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .int(let v) = value, let i = Int16(exactly: v) else { throw mismatch(value, Int16.self) }
        self = i
    }
    /// Reads the stored integer natively; fails when it is out of range for `Int16`.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Int16 {
        let v = try columns.int64(index)
        guard let i = Int16(exactly: v) else { throw mismatch(.int(v), Int16.self) }
        return i
    }
}

/// `Double` is an attribute value, stored as ``AttributeType/double``.
extension Double: AttributeValue {
    /// Stored as ``AttributeType/double``.
    public static var attributeType: AttributeType { .double }
    /// The value as ``Value/double(_:)``.
    @inlinable public var value: Value { .double(self) }
    /// Reads a ``Value/double(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .double(let v) = value else { throw mismatch(value, Double.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Double {
        try columns.double(index)
    }
}

/// `Bool` is an attribute value, stored as ``AttributeType/bool``.
extension Bool: AttributeValue {
    /// Stored as ``AttributeType/bool``.
    public static var attributeType: AttributeType { .bool }
    /// The value as ``Value/bool(_:)``.
    @inlinable public var value: Value { .bool(self) }
    /// Reads a ``Value/bool(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .bool(let v) = value else { throw mismatch(value, Bool.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Bool {
        try columns.bool(index)
    }
}

/// `String` is an attribute value, stored as ``AttributeType/string``.
extension String: AttributeValue {
    /// Stored as ``AttributeType/string``.
    public static var attributeType: AttributeType { .string }
    /// The value as ``Value/string(_:)``.
    @inlinable public var value: Value { .string(self) }
    /// Reads a ``Value/string(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .string(let v) = value else { throw mismatch(value, String.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> String {
        try columns.string(index)
    }
}

/// `Data` is an attribute value, stored as ``AttributeType/data``.
extension Data: AttributeValue {
    /// Stored as ``AttributeType/data``.
    public static var attributeType: AttributeType { .data }
    /// The value as ``Value/data(_:)``.
    @inlinable public var value: Value { .data(self) }
    /// Reads a ``Value/data(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .data(let v) = value else { throw mismatch(value, Data.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Data {
        try columns.data(index)
    }
}

/// `Date` is an attribute value, stored as ``AttributeType/date``.
extension Date: AttributeValue {
    /// Stored as ``AttributeType/date``.
    public static var attributeType: AttributeType { .date }
    /// The value as ``Value/date(_:)``.
    @inlinable public var value: Value { .date(self) }
    /// Reads a ``Value/date(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .date(let v) = value else { throw mismatch(value, Date.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Date {
        try columns.date(index)
    }
}

/// `UUID` is an attribute value, stored as ``AttributeType/uuid``.
extension UUID: AttributeValue {
    /// Stored as ``AttributeType/uuid``.
    public static var attributeType: AttributeType { .uuid }
    /// The value as ``Value/uuid(_:)``.
    @inlinable public var value: Value { .uuid(self) }
    /// Reads a ``Value/uuid(_:)`` back; fails for any other case.
    @inlinable public init(value: Value) throws(DepotError) {
        guard case .uuid(let v) = value else { throw mismatch(value, UUID.self) }
        self = v
    }
    /// Reads the stored value natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> UUID {
        try columns.uuid(index)
    }
}

/// An optional attribute: nil is stored as nil, anything else as the wrapped type stores it.
extension Optional: AttributeValue where Wrapped: AttributeValue {
    /// The wrapped type's storage type.
    public static var attributeType: AttributeType { Wrapped.attributeType }
    /// Optional: `nil` is stored as ``Value/null``.
    public static var isOptional: Bool { true }
    /// Whether the wrapped type is stored as JSON.
    public static var isJSON: Bool { Wrapped.isJSON }
    /// ``Value/null`` for `nil`, else the wrapped value.
    @inlinable public var value: Value {
        switch self {
        case .none: .null
        case .some(let w): w.value
        }
    }
    /// `nil` for ``Value/null``, else the wrapped value read back.
    @inlinable public init(value: Value) throws(DepotError) {
        if case .null = value {
            self = .none
        } else {
            self = .some(try Wrapped(value: value))
        }
    }
    /// `nil` for a null column, else the wrapped value read natively.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Self {
        columns.isNull(index) ? .none : .some(try Wrapped.read(from: columns, at: index))
    }
    /// ``Value/null`` for `nil`, else the wrapped value's stored form.
    @inlinable public func storedValue() throws(DepotError) -> Value {
        switch self {
        case .none: .null
        case .some(let w): try w.storedValue()
        }
    }
}

/// An enum with a `String` or integer raw value stores its raw value: declare the
/// conformance and nothing else.
///
/// ```swift
/// enum Mood: String, AttributeValue { case calm, playful, grumpy }
/// ```
///
/// Predicates and sorts compare the stored raw values, so `\.mood < .playful` and
/// `sorted(by: \.mood)` follow the raw values' order (bytes for strings, numbers for
/// integers), not the order of the cases.
extension AttributeValue where Self: RawRepresentable, RawValue: AttributeValue {
    /// The raw value's storage type.
    public static var attributeType: AttributeType { RawValue.attributeType }
    /// The raw value.
    @inlinable public var value: Value { rawValue.value }

    /// Reads the raw value back.
    ///
    /// - Throws: ``DepotError/Code/conversionFailed`` when the stored value does not fit
    ///   the raw value type, or is not the raw value of any case (a case was removed or
    ///   renamed, or another program wrote the value).
    @inlinable public init(value: Value) throws(DepotError) {
        let raw = try RawValue(value: value)
        guard let known = Self(rawValue: raw) else { throw unknownRawValue(value, Self.self) }
        self = known
    }

    /// Reads the raw value natively and finds its case; fails as ``init(value:)`` does.
    @inlinable public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Self {
        let raw = try RawValue.read(from: columns, at: index)
        guard let known = Self(rawValue: raw) else { throw unknownRawValue(raw.value, Self.self) }
        return known
    }
}

@usableFromInline
func unknownRawValue(_ value: Value, _ type: Any.Type) -> DepotError {
    DepotError(.conversionFailed, "The stored value \(value.debugLiteral) is not the raw value of any case of \(type). A case was removed or renamed, or another program wrote it: add the case back, or rewrite the stored values.")
}

/// A type that can be a primary key: a non-optional integer, string, UUID, data or date.
///
/// `Double` and `Bool` are not key types: NaN and a two-valued key make poor identities.
public protocol PrimaryKeyValue: AttributeValue, Hashable {}

extension Int64: PrimaryKeyValue {}
extension Int: PrimaryKeyValue {}
extension Int32: PrimaryKeyValue {}
extension Int16: PrimaryKeyValue {}
extension String: PrimaryKeyValue {}
extension UUID: PrimaryKeyValue {}
extension Data: PrimaryKeyValue {}
extension Date: PrimaryKeyValue {}
