import Foundation

/// A `Codable` value stored as JSON text: nested structs, and (without declaring anything)
/// arrays and dictionaries with `String` keys of storable `Codable` values.
///
/// ```swift
/// struct Address: Codable, Hashable, JSONAttribute {
///     var street: String
///     var city: String
/// }
///
/// @Record struct Owner {
///     var id: Int64
///     var address: Address
///     var tags: [String]
///     var scores: [String: Int]?
/// }
/// ```
///
/// The stored form is canonical JSON — keys sorted, no insignificant whitespace — in a
/// text attribute, so SQLite's JSON functions work on it (`json_extract(address, '$.city')`)
/// and two equal values have equal text. That makes `==`, `!=`, `in` and `notIn` work on
/// every backend. Ordering and text matching mean nothing for JSON text, so `<`, `>`,
/// `hasPrefix`, `contains` and sorting by a JSON attribute make the request fail with
/// ``DepotError/Code/invalidPredicate`` when it runs. Doubles that JSON cannot write (NaN, ±infinity) are
/// stored as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` and read back exactly.
///
/// A value whose encoding throws fails the write (and a predicate built from it fails the
/// request) with ``DepotError/Code/conversionFailed``; stored text that does not decode as
/// the type is a ``DepotError/Code/conversionFailed`` naming the type and the decoding error
/// when the record is read. Nothing is skipped silently.
public protocol JSONAttribute: Codable, AttributeValue {}

/// Encoders and decoders are created per call: they are cheap next to a write, and a shared
/// one would need a lock (they are classes with mutable state).
enum JSONForm {
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }

    static func text<T: Encodable>(_ value: T) throws(DepotError) -> String {
        do {
            return String(decoding: try encoder().encode(value), as: UTF8.self)
        } catch {
            throw DepotError(.conversionFailed, "Cannot encode a \(T.self) as JSON: \(error). Nothing was written.")
        }
    }

    static func value<T: Decodable>(_ type: T.Type, from text: String) throws(DepotError) -> T {
        do {
            return try decoder().decode(T.self, from: Data(text.utf8))
        } catch {
            let shown = text.utf8.count > 80 ? String(decoding: text.utf8.prefix(80), as: UTF8.self) + "…" : text
            throw DepotError(.conversionFailed, "The stored JSON \(shown) is not a \(T.self): \(error). Another program wrote it, or the type changed; migrate the stored values or make the type's decoding accept them.")
        }
    }
}

extension JSONAttribute {
    /// Stored as ``AttributeType/string``, the value's canonical JSON text.
    public static var attributeType: AttributeType { .string }
    /// JSON: only equality predicates can use the stored text.
    public static var isJSON: Bool { true }

    /// The canonical JSON text; a value whose encoding throws has none, and is `null`
    /// here. Depot itself uses `storedValue()`, which reports that failure instead.
    public var value: Value { (try? storedValue()) ?? .null }

    /// The canonical JSON text; fails with ``DepotError/Code/conversionFailed`` when the value's
    /// encoding throws.
    public func storedValue() throws(DepotError) -> Value { .string(try JSONForm.text(self)) }

    /// Decodes the value from stored JSON text.
    public init(value: Value) throws(DepotError) {
        guard case .string(let text) = value else { throw mismatch(value, Self.self) }
        self = try JSONForm.value(Self.self, from: text)
    }

    /// Decodes the value from the stored JSON text.
    public static func read(from columns: any ColumnReader, at index: Int) throws(DepotError) -> Self {
        try JSONForm.value(Self.self, from: columns.string(index))
    }
}

/// An array is a JSON array when its elements are storable and `Codable`: Depot's own
/// types, enums, ``JSONAttribute`` structs, and arrays and dictionaries of those. (The
/// condition cannot be plain `Codable & Sendable`: Swift does not let a conformance depend
/// on `Sendable`.)
extension Array: AttributeValue, JSONAttribute where Element: Codable & AttributeValue {}

/// A dictionary with `String` keys is a JSON object (keys sorted, so equal dictionaries
/// store equal text whatever their insertion order).
extension Dictionary: AttributeValue, JSONAttribute where Key == String, Value: Codable & AttributeValue {}
