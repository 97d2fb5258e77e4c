public import Foundation

/// A backend-neutral attribute value: the currency between records and stores.
///
/// Equality, hashing and ordering follow the rules every backend shares, which are not
/// Swift's `String` rules:
/// - strings compare by their UTF-8 bytes (so `"é"` precomposed and decomposed differ,
///   and `"Z" < "a"`), the way SQLite's default `BINARY` collation compares them;
/// - doubles use a total order in which all NaNs are equal to each other and greater than
///   `+infinity`, and `-0.0 == 0.0`;
/// - data and UUIDs compare by their bytes, dates by their time;
/// - `null` sorts before every other value.
///
/// Values of different types are never equal; the schema makes sure a comparison only
/// ever sees one type per attribute.
public enum Value: Sendable {
    /// No value (a nil attribute).
    case null
    /// An integer.
    case int(Int64)
    /// A double.
    case double(Double)
    /// A Boolean.
    case bool(Bool)
    /// UTF-8 text.
    case string(String)
    /// Bytes.
    case data(Data)
    /// A point in time.
    case date(Date)
    /// A UUID.
    case uuid(UUID)

    /// The attribute type this value belongs to, or `nil` for ``null``.
    public var type: AttributeType? {
        switch self {
        case .null: nil
        case .int: .int64
        case .double: .double
        case .bool: .bool
        case .string: .string
        case .data: .data
        case .date: .date
        case .uuid: .uuid
        }
    }

    /// Whether the value is ``null``.
    @inlinable public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// A short rendering for error messages (strings quoted and truncated).
    public var debugLiteral: String {
        switch self {
        case .null: return "nil"
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .bool(let v): return String(v)
        case .string(let s):
            let cut = s.count > 64 ? String(s.prefix(64)) + "…" : s
            return "\"\(cut)\""
        case .data(let d): return "<\(d.count) bytes>"
        case .date(let d): return d.formatted(.iso8601)
        case .uuid(let u): return u.uuidString
        }
    }
}

// MARK: - Ordering shared by every backend

extension Value {
    /// Three-way comparison in Depot's total order (see the type's documentation).
    ///
    /// Returns a negative number, zero or a positive number. Values of different
    /// non-null types are ordered by type so the order stays total.
    public static func compare(_ lhs: Value, _ rhs: Value) -> Int {
        switch (lhs, rhs) {
        case (.int(let a), .int(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.string(let a), .string(let b)): return compareUTF8(a, b)
        case (.double(let a), .double(let b)): return compareDoubles(a, b)
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case (.bool(let a), .bool(let b)): return a == b ? 0 : (a ? 1 : -1)
        case (.date(let a), .date(let b)):
            return compareDoubles(a.timeIntervalSinceReferenceDate, b.timeIntervalSinceReferenceDate)
        case (.data(let a), .data(let b)): return compareBytes(a, b)
        case (.uuid(let a), .uuid(let b)): return compareUUIDs(a, b)
        default:
            return (lhs.typeRank < rhs.typeRank) ? -1 : 1
        }
    }

    private var typeRank: Int {
        switch self {
        case .null: 0
        case .int: 1
        case .double: 2
        case .bool: 3
        case .string: 4
        case .data: 5
        case .date: 6
        case .uuid: 7
        }
    }

    @inlinable
    static func compareDoubles(_ a: Double, _ b: Double) -> Int {
        if a < b { return -1 }
        if a > b { return 1 }
        if a == b { return 0 }
        // At least one NaN: NaN is the greatest value and equal to itself.
        switch (a.isNaN, b.isNaN) {
        case (true, true): return 0
        case (true, false): return 1
        default: return -1
        }
    }

    /// Compares two strings by their UTF-8 bytes, like `memcmp` with length tie-break.
    public static func compareUTF8(_ a: String, _ b: String) -> Int {
        var a = a
        var b = b
        return a.withUTF8 { pa in
            b.withUTF8 { pb in
                compareBuffers(UnsafeRawBufferPointer(pa), UnsafeRawBufferPointer(pb))
            }
        }
    }

    static func compareBytes(_ a: Data, _ b: Data) -> Int {
        a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in compareBuffers(pa, pb) } }
    }

    static func compareUUIDs(_ a: UUID, _ b: UUID) -> Int {
        withUnsafeBytes(of: a.uuid) { pa in
            withUnsafeBytes(of: b.uuid) { pb in compareBuffers(pa, pb) }
        }
    }

    /// Compares two byte strings like `memcmp`, the shorter first on a common prefix: the
    /// order of strings (by UTF-8 bytes) and data. For backends comparing stored bytes in
    /// place.
    public static func compareBuffers(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let common = Swift.min(a.count, b.count)
        if common > 0, let ba = a.baseAddress, let bb = b.baseAddress {
            let r = memcmp(ba, bb, common)
            if r != 0 { return r < 0 ? -1 : 1 }
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}

extension Value: Hashable {
    /// Equality by Depot's rules (see ``Value``): strings by bytes, NaNs equal, `-0.0 == 0.0`.
    public static func == (lhs: Value, rhs: Value) -> Bool {
        switch (lhs, rhs) {
        case (.int(let a), .int(let b)): return a == b
        case (.string(let a), .string(let b)):
            // Byte equality, not Unicode canonical equivalence: the backends store bytes.
            return a.utf8.count == b.utf8.count && compareUTF8(a, b) == 0
        case (.null, .null): return true
        case (.double(let a), .double(let b)): return compareDoubles(a, b) == 0
        case (.bool(let a), .bool(let b)): return a == b
        case (.date(let a), .date(let b)):
            return compareDoubles(a.timeIntervalSinceReferenceDate, b.timeIntervalSinceReferenceDate) == 0
        case (.data(let a), .data(let b)): return a == b
        case (.uuid(let a), .uuid(let b)): return a == b
        default: return false
        }
    }

    /// Hashes consistently with ``==(_:_:)``.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .int(let v): hasher.combine(v)
        case .double(let v): hasher.combine(v.isNaN ? Double.nan : (v == 0 ? 0 : v))
        case .bool(let v): hasher.combine(v)
        case .string(let s):
            var s = s
            s.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        case .data(let d): hasher.combine(d)
        case .date(let d):
            let t = d.timeIntervalSinceReferenceDate
            hasher.combine(t.isNaN ? Double.nan : (t == 0 ? 0 : t))
        case .uuid(let u): hasher.combine(u)
        }
    }
}

extension Value: Comparable {
    /// Depot's total order (``compare(_:_:)``).
    public static func < (lhs: Value, rhs: Value) -> Bool { compare(lhs, rhs) < 0 }
}

extension Value: CustomStringConvertible {
    /// The value as a literal, for messages: ``debugLiteral``.
    public var description: String { debugLiteral }
}

extension Value: ExpressibleByNilLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByStringLiteral
{
    /// ``null``.
    public init(nilLiteral: ()) { self = .null }
    /// ``int(_:)``.
    public init(integerLiteral value: Int64) { self = .int(value) }
    /// ``double(_:)``.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// ``bool(_:)``.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// ``string(_:)``.
    public init(stringLiteral value: String) { self = .string(value) }
}
