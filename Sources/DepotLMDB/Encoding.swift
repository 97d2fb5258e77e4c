package import DepotCore
import Foundation

/// Order-preserving key encodings: for two values `a` and `b` of one attribute type,
/// `memcmp` order of their encodings (shorter first on a common prefix, which is LMDB's
/// default key order) equals `Value.compare(a, b)`. Equal values have equal encodings,
/// so `-0.0` and `0.0`, and every NaN, share one encoding.
package enum KeyEncoding {
    /// Marker of a null index key; sorts before every value's marker so nulls come first.
    static let nullMarker: UInt8 = 0x00
    /// Marker before a non-null index key.
    static let valueMarker: UInt8 = 0x01

    /// The bytes of a non-null value in Depot's order (nothing for null).
    @inline(__always)
    static func appendOrdered(_ value: Value, to out: inout [UInt8]) {
        switch value {
        case .null:
            break
        case .int(let v):
            appendBigEndian(UInt64(bitPattern: v) ^ (1 << 63), to: &out)
        case .double(let d):
            appendBigEndian(orderedBits(d), to: &out)
        case .bool(let b):
            out.append(b ? 1 : 0)
        case .string(let s):
            var s = s
            s.withUTF8 { out.append(contentsOf: $0) }
        case .data(let d):
            d.withUnsafeBytes { out.append(contentsOf: $0) }
        case .date(let d):
            appendBigEndian(orderedBits(d.timeIntervalSinceReferenceDate), to: &out)
        case .uuid(let u):
            withUnsafeBytes(of: u.uuid) { out.append(contentsOf: $0) }
        }
    }

    /// The key of a row in its entity's database. Strings and data get a constant prefix
    /// byte because LMDB refuses empty keys and `""` is a valid primary key; the prefix
    /// keeps the order.
    @inline(__always)
    static func appendPrimaryKey(_ value: Value, to out: inout [UInt8]) {
        switch value {
        case .string, .data: out.append(0x00)
        default: break
        }
        appendOrdered(value, to: &out)
    }

    /// The key of a value in an index database: a null marker, or a value marker and the
    /// value's ordered bytes. The marker keeps nulls first and makes every key non-empty.
    @inline(__always)
    static func appendIndexKey(_ value: Value, to out: inout [UInt8]) {
        if value.isNull {
            out.append(nullMarker)
        } else {
            out.append(valueMarker)
            appendOrdered(value, to: &out)
        }
    }

    /// One component of a composite index key. Unlike ``appendIndexKey(_:to:)`` the bytes
    /// must be self-delimiting, because more components and the primary key follow: strings
    /// and data have every 0x00 byte written as 0x00 0xFF and end with 0x00 0x00, which keeps
    /// their order (a shorter value's terminator sorts before any byte of a longer one).
    /// Other values have a fixed width. A descending component has every byte inverted, so
    /// its order is reversed: nulls, first ascending, come last descending, as a descending
    /// sort puts them.
    @inline(__always)
    static func appendTupleComponent(_ value: Value, descending: Bool, to out: inout [UInt8]) {
        let start = out.count
        if value.isNull {
            out.append(nullMarker)
        } else {
            out.append(valueMarker)
            switch value {
            case .string(var s):
                s.withUTF8 { appendEscaped($0, to: &out) }
            case .data(let d):
                d.withUnsafeBytes { appendEscaped($0, to: &out) }
            default:
                appendOrdered(value, to: &out)
            }
        }
        if descending { invert(&out, from: start) }
    }

    /// The bytes of a string prefix as they begin the component of every string that starts
    /// with it (the marker and the escaped bytes, without the terminator).
    static func tuplePrefix(_ prefix: String, descending: Bool) -> [UInt8] {
        var out: [UInt8] = [valueMarker]
        var s = prefix
        s.withUTF8 { bytes in
            for byte in bytes {
                out.append(byte)
                if byte == 0 { out.append(0xFF) }
            }
        }
        if descending { invert(&out, from: 0) }
        return out
    }

    @inline(__always)
    static func appendEscaped(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        for byte in bytes {
            out.append(byte)
            if byte == 0 { out.append(0xFF) }
        }
        out.append(0)
        out.append(0)
    }

    @inline(__always)
    static func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        appendEscaped(UnsafeRawBufferPointer(bytes), to: &out)
    }

    @inline(__always)
    static func invert(_ out: inout [UInt8], from start: Int) {
        for i in start..<out.count { out[i] = ~out[i] }
    }

    package static func primaryKey(_ value: Value) -> [UInt8] {
        var out: [UInt8] = []
        appendPrimaryKey(value, to: &out)
        return out
    }

    package static func indexKey(_ value: Value) -> [UInt8] {
        var out: [UInt8] = []
        appendIndexKey(value, to: &out)
        return out
    }

    /// Maps a double onto an unsigned integer whose order is Depot's double order: negative
    /// numbers have every bit flipped, others only the sign bit; NaN becomes one pattern
    /// above +infinity.
    @inline(__always)
    static func orderedBits(_ d: Double) -> UInt64 {
        if d.isNaN { return 0xFFF8_0000_0000_0000 }
        let bits = (d == 0 ? 0.0 : d).bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    @inline(__always)
    static func appendBigEndian(_ v: UInt64, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) }
    }

    /// The smallest byte string greater than every string starting with `prefix`, or `nil`
    /// when there is none (the prefix is all 0xFF).
    static func successor(ofPrefix prefix: [UInt8]) -> [UInt8]? {
        var out = prefix
        while let last = out.last {
            if last < 0xFF {
                out[out.count - 1] = last + 1
                return out
            }
            out.removeLast()
        }
        return nil
    }
}

/// The record value format, version 1: a version byte, then for each attribute in
/// declaration order a type tag and its payload. Integers are zigzag varints, doubles and
/// dates their 8 bit-pattern bytes (little-endian), strings and data a varint length and
/// their bytes, UUIDs their 16 bytes; booleans and null are a tag alone.
///
/// Rows are rewritten when their entity's schema changes, so every stored row matches the
/// registered description; the decoder still checks each tag against the attribute type.
enum RecordFormat {
    static let version: UInt8 = 1

    enum Tag {
        static let null: UInt8 = 0
        static let int: UInt8 = 1
        static let double: UInt8 = 2
        static let boolFalse: UInt8 = 3
        static let boolTrue: UInt8 = 4
        static let string: UInt8 = 5
        static let data: UInt8 = 6
        static let date: UInt8 = 7
        static let uuid: UInt8 = 8
    }

    static func encode(_ row: Row, into out: inout [UInt8]) {
        out.removeAll(keepingCapacity: true)
        out.append(version)
        for i in 0..<row.count {
            switch row[value: i] {
            case .null:
                out.append(Tag.null)
            case .int(let v):
                out.append(Tag.int)
                appendVarint(UInt64(bitPattern: (v << 1) ^ (v >> 63)), to: &out)
            case .double(let d):
                out.append(Tag.double)
                appendLittleEndian(d.bitPattern, to: &out)
            case .bool(let b):
                out.append(b ? Tag.boolTrue : Tag.boolFalse)
            case .string(var s):
                out.append(Tag.string)
                s.withUTF8 { bytes in
                    appendVarint(UInt64(bytes.count), to: &out)
                    out.append(contentsOf: bytes)
                }
            case .data(let d):
                out.append(Tag.data)
                appendVarint(UInt64(d.count), to: &out)
                d.withUnsafeBytes { out.append(contentsOf: $0) }
            case .date(let d):
                out.append(Tag.date)
                appendLittleEndian(d.timeIntervalSinceReferenceDate.bitPattern, to: &out)
            case .uuid(let u):
                out.append(Tag.uuid)
                withUnsafeBytes(of: u.uuid) { out.append(contentsOf: $0) }
            }
        }
    }

    @inline(__always)
    static func appendVarint(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    @inline(__always)
    static func appendLittleEndian(_ v: UInt64, to out: inout [UInt8]) {
        withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) }
    }

    /// Decodes a stored record whose attributes have `types`, in order, straight from LMDB's
    /// memory into `row` (emptied first).
    ///
    /// - Returns: `false` when the bytes are not a record of these types in this format.
    static func decode(_ buffer: UnsafeRawBufferPointer, types: [AttributeType], into row: inout Row) -> Bool {
        row.removeAll()
        let count = buffer.count
        guard count >= 1, buffer[0] == version else { return false }
        var p = 1

        @inline(__always) func varint() -> UInt64? {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while p < count, shift < 64 {
                let byte = buffer[p]
                p += 1
                result |= UInt64(byte & 0x7F) << shift
                if byte < 0x80 { return result }
                shift += 7
            }
            return nil
        }
        @inline(__always) func fixed64() -> UInt64? {
            guard count - p >= 8 else { return nil }
            let v = buffer.loadUnaligned(fromByteOffset: p, as: UInt64.self)
            p += 8
            return UInt64(littleEndian: v)
        }
        @inline(__always) func bytes() -> UnsafeRawBufferPointer? {
            guard let length = varint(), length <= UInt64(count - p) else { return nil }
            let slice = UnsafeRawBufferPointer(rebasing: buffer[p..<(p + Int(length))])
            p += Int(length)
            return slice
        }

        for type in types {
            guard p < count else { return false }
            let tag = buffer[p]
            p += 1
            switch (tag, type) {
            case (Tag.null, _):
                row.append(.null)
            case (Tag.int, .int64):
                guard let z = varint() else { return false }
                row.append(.int(Int64(bitPattern: (z >> 1) ^ (0 &- (z & 1)))))
            case (Tag.double, .double):
                guard let bits = fixed64() else { return false }
                row.append(.double(Double(bitPattern: bits)))
            case (Tag.boolFalse, .bool):
                row.append(.bool(false))
            case (Tag.boolTrue, .bool):
                row.append(.bool(true))
            case (Tag.string, .string):
                guard let slice = bytes() else { return false }
                row.append(.string(String(decoding: slice, as: UTF8.self)))
            case (Tag.data, .data):
                guard let slice = bytes() else { return false }
                row.append(.data(Data(slice)))
            case (Tag.date, .date):
                guard let bits = fixed64() else { return false }
                row.append(.date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: bits))))
            case (Tag.uuid, .uuid):
                guard count - p >= 16 else { return false }
                var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
                withUnsafeMutableBytes(of: &uuid) { target in
                    target.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[p..<(p + 16)]))
                }
                p += 16
                row.append(.uuid(UUID(uuid: uuid)))
            default:
                return false
            }
        }
        return p == count
    }
}
