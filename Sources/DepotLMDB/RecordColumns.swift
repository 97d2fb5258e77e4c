import DepotCore
import Foundation

/// A `ColumnReader` over a stored record's bytes, read in place inside the transaction
/// (LMDB hands out pointers into its memory map): no `Value` and no copy of the record.
///
/// ``load(_:)`` checks the whole record once — version, every tag against its attribute's
/// type, every length — and notes where each attribute starts; the typed reads then decode
/// one attribute each. A fetch that hands each record straight to a record's initializer
/// checks it as it is read instead (``begin(_:)``, then ``finish()`` after the body): an
/// initializer reads the attributes in order, and a typed read of the next attribute
/// checks and decodes it in one step, knowing its type, where checking the whole record
/// first walked it twice and chose each attribute's decoding by a jump on its tag and
/// type. Any other read parses up to the attribute it needs first. The bytes are valid
/// until the transaction moves on or writes, which is exactly the reader's lifetime.
///
/// The typed reads are inlined always: a record's initializer reaches them through the
/// protocol's witnesses, which then hold the read itself instead of calling it.
final class RecordColumns: ColumnReader {
    let types: [AttributeType]
    /// Whether the reader is handed to a caller right now (so cannot be re-pointed).
    @exclusivity(unchecked) var isLent = false
    /// Where each attribute's tag is, for the loaded record. A pointer, not an array, and
    /// the buffer below is unchecked for exclusivity: a class's `var`s are checked at run
    /// time on every access, which cost more than the decoding itself on a fetch of all
    /// records.
    private let offsets: UnsafeMutablePointer<Int>
    /// What `load` decoded while checking each attribute, so the typed reads do not decode
    /// it again: an integer's zigzag value, or a string's or data's length (its bytes
    /// start after the length, at `payloads`).
    private let decoded: UnsafeMutablePointer<UInt64>
    private let payloads: UnsafeMutablePointer<Int>
    @exclusivity(unchecked) private var buffer = UnsafeRawBufferPointer(start: nil, count: 0)
    /// Attributes `0..<parsed` of the record have been checked and their places noted;
    /// attribute `parsed` starts at `cursor`.
    @exclusivity(unchecked) private var parsed = 0
    @exclusivity(unchecked) private var cursor = 0
    /// The entity and store a fetch names when a read finds the record damaged: names,
    /// not the error, which is only built when thrown, so a fetch that finds no damage
    /// formats no message.
    @exclusivity(unchecked) var damageContext: (entity: String, store: String)?

    /// What a read of a damaged record throws.
    @inline(never)
    func damage() -> DepotError {
        guard let damageContext else {
            return DepotError(.storeCorrupted, "A stored record cannot be decoded; the store's file is damaged or was written by something else. Restore it from a backup.")
        }
        return LMDBTransaction.corrupted(
            "A record cannot be decoded as \(damageContext.entity)", entity: damageContext.entity, store: damageContext.store)
    }

    /// `types.count`, and the types as a buffer: `load` walks them for every record, and a
    /// plain buffer walk is cheaper than the array's.
    private let count: Int
    private let typeBuffer: UnsafeMutablePointer<AttributeType>

    /// The registered entity whose records this reader reads, when a transaction keeps it
    /// for its lookups by key: checked before reuse, without retaining the entity.
    let owner: ObjectIdentifier?

    init(types: [AttributeType], owner: ObjectIdentifier? = nil) {
        self.types = types
        self.owner = owner
        self.count = types.count
        self.typeBuffer = .allocate(capacity: max(1, types.count))
        self.typeBuffer.initialize(from: types, count: types.count)
        let capacity = max(1, types.count)
        self.offsets = .allocate(capacity: capacity)
        self.offsets.initialize(repeating: 0, count: capacity)
        self.decoded = .allocate(capacity: capacity)
        self.decoded.initialize(repeating: 0, count: capacity)
        self.payloads = .allocate(capacity: capacity)
        self.payloads.initialize(repeating: 0, count: capacity)
    }

    deinit {
        typeBuffer.deinitialize(count: count)
        typeBuffer.deallocate()
        offsets.deallocate()
        decoded.deallocate()
        payloads.deallocate()
    }

    var columnCount: Int { types.count }

    /// Points the reader at a stored record and checks all of it.
    ///
    /// - Returns: `false` when the bytes are not a record of these types in this format.
    func load(_ bytes: UnsafeRawBufferPointer) -> Bool {
        begin(bytes) && finish()
    }

    /// Points the reader at a stored record, checking only its version: the reads check
    /// what they read, and ``finish()`` the rest.
    @inline(__always)
    func begin(_ bytes: UnsafeRawBufferPointer) -> Bool {
        buffer = bytes
        parsed = 0
        cursor = 1
        return bytes.count >= 1 && bytes[0] == RecordFormat.version
    }

    /// Checks the attributes no read has reached, and that nothing follows the last one.
    ///
    /// - Returns: `false` when the record is damaged.
    @inline(__always)
    func finish() -> Bool {
        parsed == count ? cursor == buffer.count : parse(through: count - 1)
    }

    /// Checks attributes `parsed...index` and notes where each starts; once the last is
    /// reached, also that nothing follows it.
    ///
    /// - Returns: `false` when the record is damaged (`parsed` stays at the damaged
    ///   attribute, so every later read of it fails too).
    @inline(never)
    private func parse(through index: Int) -> Bool {
        let bytes = buffer
        let count = bytes.count
        var p = cursor
        var i = parsed
        while i <= index && i < self.count {
            let type = typeBuffer[i]
            guard p < count else { return false }
            let start = p
            let tag = bytes[p]
            p += 1
            switch (tag, type) {
            case (RecordFormat.Tag.null, _), (RecordFormat.Tag.boolFalse, .bool), (RecordFormat.Tag.boolTrue, .bool):
                break
            case (RecordFormat.Tag.int, .int64):
                guard let z = Self.varint(bytes, &p) else { return false }
                decoded[i] = z
            case (RecordFormat.Tag.double, .double), (RecordFormat.Tag.date, .date):
                guard count - p >= 8 else { return false }
                p += 8
            case (RecordFormat.Tag.string, .string), (RecordFormat.Tag.data, .data):
                guard let length = Self.varint(bytes, &p), length <= UInt64(count - p) else { return false }
                decoded[i] = length
                payloads[i] = p
                p += Int(length)
            case (RecordFormat.Tag.uuid, .uuid):
                guard count - p >= 16 else { return false }
                p += 16
            default:
                return false
            }
            offsets[i] = start
            i += 1
            parsed = i
            cursor = p
        }
        return parsed < self.count || cursor == count
    }

    /// Attribute `index`'s place is known, parsing up to it if no read has reached it.
    @inline(__always)
    private func reach(_ index: Int) throws(DepotError) {
        if index >= parsed, !parse(through: index) { throw damage() }
    }

    /// The next attribute's value when it is an integer of an `int64` attribute: checked
    /// and decoded in one step. `nil` sends the read the general way (a null, another
    /// attribute, damage).
    @inline(__always)
    private func nextInteger(_ index: Int) -> UInt64? {
        guard index == parsed, index < count, typeBuffer[index] == .int64 else { return nil }
        let start = cursor
        guard start < buffer.count, buffer[start] == RecordFormat.Tag.int else { return nil }
        var p = start + 1
        guard let z = Self.varint(buffer, &p) else { return nil }
        offsets[index] = start
        decoded[index] = z
        parsed = index + 1
        cursor = p
        return z
    }

    /// The next attribute's payload when it is a string (or data) of that type: its
    /// length checked, its place noted. `nil` sends the read the general way.
    @inline(__always)
    private func nextBytes(_ index: Int, tag: UInt8, type: AttributeType) -> UnsafeRawBufferPointer? {
        guard index == parsed, index < count, typeBuffer[index] == type else { return nil }
        let start = cursor
        guard start < buffer.count, buffer[start] == tag else { return nil }
        var p = start + 1
        guard let length = Self.varint(buffer, &p), length <= UInt64(buffer.count - p) else { return nil }
        offsets[index] = start
        decoded[index] = length
        payloads[index] = p
        parsed = index + 1
        cursor = p + Int(length)
        return UnsafeRawBufferPointer(rebasing: buffer[p..<cursor])
    }

    /// The next attribute's eight bytes when it is a value of `type` stored with `tag` (a
    /// double, a date). `nil` sends the read the general way.
    @inline(__always)
    private func nextFixed64(_ index: Int, tag: UInt8, type: AttributeType) -> UInt64? {
        guard index == parsed, index < count, typeBuffer[index] == type else { return nil }
        let start = cursor
        guard start < buffer.count, buffer[start] == tag, buffer.count - (start + 1) >= 8 else { return nil }
        offsets[index] = start
        parsed = index + 1
        cursor = start + 9
        return fixed64(at: start + 1)
    }

    @inline(__always)
    static func varint(_ bytes: UnsafeRawBufferPointer, _ p: inout Int) -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while p < bytes.count, shift < 64 {
            let byte = bytes[p]
            p += 1
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
        }
        return nil
    }

    /// The position just after the tag of attribute `index`, after checking that it exists
    /// and is not null. Parsing checked the payload, so reads past it stay in bounds.
    @inline(__always)
    private func payload<T>(_ index: Int, _ type: T.Type) throws(DepotError) -> (tag: UInt8, at: Int) {
        guard index >= 0 && index < count else { throw columnOutOfRange(index, count: count) }
        try reach(index)
        let offset = offsets[index]
        let tag = buffer[offset]
        if tag == RecordFormat.Tag.null { throw storedNil(T.self, at: index) }
        return (tag, offset + 1)
    }

    func isNull(_ index: Int) -> Bool {
        guard index >= 0 && index < types.count else { return true }
        // A damaged record answers "not nil", so that the read that follows throws.
        if index >= parsed, !parse(through: index) { return false }
        return buffer[offsets[index]] == RecordFormat.Tag.null
    }

    @inline(__always)
    func int64(_ index: Int) throws(DepotError) -> Int64 {
        let z: UInt64
        if let next = nextInteger(index) {
            z = next
        } else {
            _ = try payload(index, Int64.self)
            z = decoded[index]
        }
        return Int64(bitPattern: (z >> 1) ^ (0 &- (z & 1)))
    }

    @inline(__always)
    func bool(_ index: Int) throws(DepotError) -> Bool {
        try payload(index, Bool.self).tag == RecordFormat.Tag.boolTrue
    }

    @inline(__always)
    private func fixed64(at p: Int) -> UInt64 {
        UInt64(littleEndian: buffer.loadUnaligned(fromByteOffset: p, as: UInt64.self))
    }

    @inline(__always)
    func double(_ index: Int) throws(DepotError) -> Double {
        if let bits = nextFixed64(index, tag: RecordFormat.Tag.double, type: .double) { return Double(bitPattern: bits) }
        return Double(bitPattern: fixed64(at: try payload(index, Double.self).at))
    }

    @inline(__always)
    func date(_ index: Int) throws(DepotError) -> Date {
        Date(timeIntervalSinceReferenceDate: Double(bitPattern: fixed64(at: try payload(index, Date.self).at)))
    }

    /// The bytes of string or data attribute `index`, as `load` found them.
    @inline(__always)
    private func bytes(of index: Int) -> UnsafeRawBufferPointer {
        let start = payloads[index]
        return UnsafeRawBufferPointer(rebasing: buffer[start..<(start + Int(decoded[index]))])
    }

    @inline(__always)
    func string(_ index: Int) throws(DepotError) -> String {
        if let bytes = nextBytes(index, tag: RecordFormat.Tag.string, type: .string) { return String(decoding: bytes, as: UTF8.self) }
        _ = try payload(index, String.self)
        return String(decoding: bytes(of: index), as: UTF8.self)
    }

    func data(_ index: Int) throws(DepotError) -> Data {
        _ = try payload(index, Data.self)
        return Data(bytes(of: index))
    }

    func uuid(_ index: Int) throws(DepotError) -> UUID {
        let p = try payload(index, UUID.self).at
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[p..<(p + 16)])) }
        return UUID(uuid: uuid)
    }

    /// Compares attribute `index` of the loaded record with `other` in `Value`'s order,
    /// reading integers and strings in place (no `String` is made).
    func compare(_ index: Int, with other: Value) throws(DepotError) -> Int {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        try reach(index)
        let offset = offsets[index]
        if buffer[offset] == RecordFormat.Tag.null { return other.isNull ? 0 : -1 }
        switch (types[index], other) {
        case (_, .null):
            return 1
        case (.int64, .int(let b)):
            let a = try int64(index)
            return a < b ? -1 : (a == b ? 0 : 1)
        case (.string, .string(let b)):
            let stored = bytes(of: index)
            var b = b
            return b.withUTF8 { Value.compareBuffers(stored, UnsafeRawBufferPointer($0)) }
        default:
            return Value.compare(try value(index), other)
        }
    }

    /// Whether ``evaluate(_:)`` can judge `filter` in place: comparisons with a value,
    /// nil tests and the logic joining them. Other conditions (`IN`, prefixes, substrings)
    /// read values; a comparison with nil is left to `Filter.evaluate`'s own rule.
    static func evaluatesInPlace(_ filter: Filter) -> Bool {
        switch filter {
        case .constant, .isNil, .isNotNil: true
        case .compare(_, _, let value): !value.isNull
        case .and(let parts), .or(let parts): parts.allSatisfy(evaluatesInPlace)
        case .not(let inner): evaluatesInPlace(inner)
        default: false
        }
    }

    /// `filter` on the loaded record, as `Filter.evaluate` answers it on the record's row
    /// (true, false, or unknown for a comparison with a nil attribute), read from the
    /// stored bytes without making a `Value` of each attribute: a scan that ranks records
    /// judges every record by its filter. Only for a filter ``evaluatesInPlace(_:)``.
    func evaluate(_ filter: Filter) throws(DepotError) -> Bool? {
        switch filter {
        case .constant(let b):
            return b
        case .compare(let index, let op, let value):
            if isNull(index) { return nil }
            let c = try compare(index, with: value)
            switch op {
            case .equal: return c == 0
            case .notEqual: return c != 0
            case .less: return c < 0
            case .lessOrEqual: return c <= 0
            case .greater: return c > 0
            case .greaterOrEqual: return c >= 0
            }
        case .isNil(let index):
            return isNull(index)
        case .isNotNil(let index):
            return !isNull(index)
        case .and(let parts):
            var result: Bool? = true
            for part in parts {
                switch try evaluate(part) {
                case .some(false): return false
                case .none: result = nil
                case .some(true): break
                }
            }
            return result
        case .or(let parts):
            var result: Bool? = false
            for part in parts {
                switch try evaluate(part) {
                case .some(true): return true
                case .none: result = nil
                case .some(false): break
                }
            }
            return result
        case .not(let inner):
            return try evaluate(inner).map { !$0 }
        default:
            throw DepotError(.backend, "A filter that reads values was judged in place; this is a bug in Depot's LMDB store.")
        }
    }

    /// Whether the loaded record comes before `row` in the order of `sort` (which ends
    /// with the primary key, so no two records tie), compared in place.
    func precedes(_ row: Row, by sort: [ResolvedSortKey]) throws(DepotError) -> Bool {
        for key in sort {
            let c = try compare(key.attributeIndex, with: row[value: key.attributeIndex])
            if c != 0 { return key.ascending ? c < 0 : c > 0 }
        }
        return false
    }

    func value(_ index: Int) throws(DepotError) -> Value {
        guard index >= 0 && index < types.count else { throw columnOutOfRange(index, count: types.count) }
        return try value(index, as: types[index])
    }
}
