import Foundation

/// One page of a ``ResultSet`` and the cursor of the page after it.
///
/// ```swift
/// let set = pets.results.filter(\.species == "cat").sorted(by: \.name)
/// let first = try await set.page(size: 20)
/// // hand first.next?.description to the client; when it comes back:
/// let second = try await set.page(size: 20, after: try PageCursor(token))
/// ```
public struct Page<Object: Sendable>: Sendable {
    /// The page's records, in the set's order.
    public let items: [Object]
    /// Where the next page starts, or `nil` when this page is the last.
    public let next: PageCursor?

    /// A page of `items`, followed by the page `next` starts.
    public init(items: [Object], next: PageCursor?) {
        self.items = items
        self.next = next
    }
}

extension Page: Equatable where Object: Equatable {}

/// An opaque position in a result set's order, for keyset (cursor) pagination.
///
/// A cursor holds the last record's sort-key values (its primary key among them) and how
/// many records came before it, so the next page starts strictly after that record: records
/// saved or deleted meanwhile neither repeat nor skip one, and reading page 1,000 costs what
/// page 1 costs, unlike an offset. Its `description` is a URL-safe token (base64url, no
/// padding) to hand to a client; `init(_:)` reads it back and refuses anything that is not a
/// token Depot wrote with a ``DepotError/Code/invalidPredicate`` error. A cursor is bound to
/// the entity and sort order it was made for: using it with another order is refused, not
/// silently misread. Tokens are not signed: a client can craft one, which at worst starts the
/// page somewhere else in the same set, so filters that guard access belong in the request.
public struct PageCursor: Sendable, Hashable, CustomStringConvertible, Codable {
    /// A fingerprint of the entity and its sort keys, so a cursor is only used for the order
    /// it describes.
    let order: UInt64
    /// How many records pages before this cursor delivered (for a set's ``Request/limit``).
    let delivered: Int
    /// One value per sort key, primary key included. Package-visible for the backends'
    /// tests, which compile a cursor page's statement.
    package let values: [Value]

    /// Tokens longer than this are refused before decoding: no legitimate cursor is near it
    /// (sort values are attribute values, and strings in sort keys are usually short).
    public static let maximumTokenLength = 16_384

    private static let version: UInt8 = 1

    init(order: UInt64, delivered: Int, values: [Value]) {
        self.order = order
        self.delivered = delivered
        self.values = values
    }

    /// Reads a token made by ``description``.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` when the token is too long, not
    ///   base64url, of another version, truncated or has bytes left over.
    public init(_ token: some StringProtocol) throws(DepotError) {
        guard token.utf8.count <= Self.maximumTokenLength else {
            throw DepotError(.invalidPredicate, "The page cursor is \(token.utf8.count) bytes long; a cursor is at most \(Self.maximumTokenLength). Pass the `next` cursor of the previous page unchanged.")
        }
        guard let bytes = Base64URL.decoded(token) else {
            throw Self.malformed("it is not base64url text")
        }
        var reader = ByteReader(bytes: bytes)
        guard let version = reader.byte(), version == Self.version else {
            throw Self.malformed("it was not written by this version of Depot")
        }
        guard let order = reader.uint64(), let delivered = reader.uint64(), delivered <= UInt64(Int.max),
              let count = reader.uint64(), count <= UInt64(bytes.count)
        else { throw Self.malformed("it is truncated") }
        var values: [Value] = []
        values.reserveCapacity(Int(count))
        for _ in 0..<Int(count) {
            guard let value = reader.value() else { throw Self.malformed("a value in it is truncated or of an unknown kind") }
            values.append(value)
        }
        guard reader.isAtEnd else { throw Self.malformed("it has bytes after its last value") }
        self.init(order: order, delivered: Int(delivered), values: values)
    }

    /// The token: URL-safe base64 without padding.
    public var description: String {
        var bytes: [UInt8] = [Self.version]
        Self.append(order, to: &bytes)
        Self.append(UInt64(delivered), to: &bytes)
        Self.appendLength(values.count, to: &bytes)
        for value in values { Self.append(value, to: &bytes) }
        return Base64URL.encoded(bytes)
    }

    /// Decodes the cursor from its token, a string; fails as ``init(_:)`` does.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        try self.init(try container.decode(String.self))
    }

    /// Encodes the cursor as its token, ``description``.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    // MARK: Binding to a query

    /// A stable (cross-process, cross-version) fingerprint of `query`'s entity and order:
    /// FNV-1a over the entity name and each sort key's attribute name, type and direction.
    static func fingerprint(of query: Query) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ text: String) {
            for byte in text.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01b3
            }
            hash ^= 0xff
            hash = hash &* 0x0000_0100_0000_01b3
        }
        mix(query.entity.name)
        for key in query.sort {
            let attribute = query.entity.attributes[key.attributeIndex]
            mix(attribute.name)
            mix(attribute.type.rawValue)
            mix(key.ascending ? "asc" : "desc")
        }
        return hash
    }

    /// A cursor after `row` (the last record of a page) in `query`'s order.
    init(after row: Row, in query: Query, delivered: Int) {
        self.init(order: Self.fingerprint(of: query), delivered: delivered, values: query.sort.map { row[value: $0.attributeIndex] })
    }

    /// Checks that the cursor was made for `query`'s entity and order and that each value
    /// fits its sort key's attribute, so a crafted token cannot reach a backend as a
    /// comparison of mismatched types.
    package func validate(for query: Query) throws(DepotError) {
        guard order == Self.fingerprint(of: query), values.count == query.sort.count else {
            throw DepotError(.invalidPredicate, "The page cursor was made for another entity or sort order than this request's (\(query.entity.name) sorted by \(query.sort.map { query.entity.attributes[$0.attributeIndex].name }.joined(separator: ", "))). Start again from the first page.")
        }
        for (key, value) in zip(query.sort, values) {
            let attribute = query.entity.attributes[key.attributeIndex]
            if value.isNull {
                guard attribute.isOptional else { throw Self.malformed("it has nil for \(query.entity.name).\(attribute.name), which is not optional") }
            } else if value.type != attribute.type {
                throw Self.malformed("its value for \(query.entity.name).\(attribute.name) is not a \(attribute.type.rawValue)")
            }
        }
    }

    private static func malformed(_ reason: String) -> DepotError {
        DepotError(.invalidPredicate, "The page cursor is not valid: \(reason). Pass the `next` cursor of the previous page unchanged.")
    }

    // MARK: Bytes

    private static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    private static func appendLength(_ count: Int, to bytes: inout [UInt8]) {
        append(UInt64(count), to: &bytes)
    }

    private static func append(_ value: Value, to bytes: inout [UInt8]) {
        switch value {
        case .null: bytes.append(0)
        case .int(let v):
            bytes.append(1)
            append(UInt64(bitPattern: v), to: &bytes)
        case .double(let v):
            bytes.append(2)
            append(v.bitPattern, to: &bytes)
        case .bool(let v):
            bytes.append(3)
            bytes.append(v ? 1 : 0)
        case .string(let v):
            bytes.append(4)
            appendLength(v.utf8.count, to: &bytes)
            bytes.append(contentsOf: v.utf8)
        case .data(let v):
            bytes.append(5)
            appendLength(v.count, to: &bytes)
            bytes.append(contentsOf: v)
        case .date(let v):
            bytes.append(6)
            append(v.timeIntervalSinceReferenceDate.bitPattern, to: &bytes)
        case .uuid(let v):
            bytes.append(7)
            withUnsafeBytes(of: v.uuid) { bytes.append(contentsOf: $0) }
        }
    }

    /// Reads a token's bytes; every read checks what is left, so a truncated or crafted token
    /// ends in `nil`, never an out-of-range index.
    private struct ByteReader {
        let bytes: [UInt8]
        var position = 0

        var isAtEnd: Bool { position == bytes.count }

        mutating func byte() -> UInt8? {
            guard position < bytes.count else { return nil }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, bytes.count - position >= count else { return nil }
            defer { position += count }
            return bytes[position..<(position + count)]
        }

        mutating func uint64() -> UInt64? {
            guard let slice = take(8) else { return nil }
            return slice.reduce(0) { $0 << 8 | UInt64($1) }
        }

        mutating func value() -> Value? {
            switch byte() {
            case 0: return .null
            case 1: return uint64().map { .int(Int64(bitPattern: $0)) }
            case 2: return uint64().map { .double(Double(bitPattern: $0)) }
            case 3:
                switch byte() {
                case 0: return .bool(false)
                case 1: return .bool(true)
                default: return nil
                }
            case 4:
                guard let length = uint64(), length <= UInt64(bytes.count), let slice = take(Int(length)),
                      let text = String(validating: slice, as: UTF8.self)
                else { return nil }
                return .string(text)
            case 5:
                guard let length = uint64(), length <= UInt64(bytes.count), let slice = take(Int(length)) else { return nil }
                return .data(Data(slice))
            case 6: return uint64().map { .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: $0))) }
            case 7:
                guard let s = take(16) else { return nil }
                let b = Array(s)
                return .uuid(UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])))
            default: return nil
            }
        }
    }
}

extension ResultSet {
    /// At most `size` records of the set, starting after `cursor` (at the set's beginning,
    /// honouring its offset, when `cursor` is `nil`), and the cursor of the next page.
    ///
    /// Each page is one read snapshot. The set's ``Request/limit`` counts across pages (the
    /// cursor remembers how many came before); its offset applies to the first page only.
    /// `next` is `nil` exactly when no record follows the page.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` when `size` is less than 1, or when
    ///   `cursor` was made for another entity or sort order, or holds values that do not fit
    ///   the sort keys' attributes.
    public func page(size: Int, after cursor: PageCursor? = nil) async throws -> Page<Object> {
        guard size >= 1 else {
            throw DepotError(.invalidPredicate, "A page size must be at least 1, not \(size).")
        }
        let base = try request.resolved(for: try await controller.registeredEntity())
        var predicate = request.predicate
        var delivered = 0
        if let cursor {
            try cursor.validate(for: base)
            delivered = cursor.delivered
            predicate = predicate.and(Iterator.after(cursor.values, in: base))
        }
        var want = size
        var reachesLimit = false
        if let limit = request.limit {
            // `delivered` is at most Int.max and not negative, so this cannot overflow.
            let remaining = limit - delivered
            if remaining <= 0 { return Page(items: [], next: nil) }
            if remaining <= want {
                want = remaining
                reachesLimit = true
            }
        }
        // One record more than the page tells whether another page follows, so the last
        // page's `next` is nil instead of leading to an empty page. A page that reaches the
        // set's limit is the last one whatever follows it.
        let fetchLimit = want == Int.max || reachesLimit ? want : want + 1
        let query = try Query(
            entity: base.handle, predicate: predicate,
            sortKeys: base.sort.map { SortKey(base.entity.attributes[$0.attributeIndex].name, ascending: $0.ascending) },
            limit: fetchLimit, offset: cursor == nil ? request.offset : 0, extraDepth: 1)
        let pageSize = want
        let (items, last, more) = try await controller.readOneStatement { context -> ([Object], Row?, Bool) in
            var objects: [Object] = []
            var last: Row?
            var more = false
            try context.readTransaction.fetch(query, reserve: { objects.reserveCapacity(Swift.min($0, pageSize)) }) { columns in
                guard objects.count < pageSize else {
                    more = true
                    return
                }
                objects.append(try Conversion<Object, Managed>.object(from: columns))
                if objects.count == pageSize { last = try columns.row() }
            }
            return (objects, last, more)
        }
        guard more, let last else { return Page(items: items, next: nil) }
        let (total, overflow) = delivered.addingReportingOverflow(items.count)
        return Page(items: items, next: PageCursor(after: last, in: base, delivered: overflow ? Int.max : total))
    }
}
