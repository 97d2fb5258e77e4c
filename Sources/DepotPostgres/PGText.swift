/// Depot strings in PostgreSQL `text`, which cannot hold U+0000: NUL is stored as the two
/// bytes 01 01 and U+0001 as 01 02, every other byte as itself. The code is prefix-free and
/// keeps the byte order (01 01 < 01 02 < 02 and above, and a shorter string still sorts
/// first), so `COLLATE "C"` comparisons, sorting, equality and prefixes on the stored text
/// are Depot's on the original strings. Strings without those two control characters (all
/// but a few) are stored as they are, readable with `psql`.
enum PGText {
    @inline(__always)
    static func encode(_ s: String) -> [UInt8] {
        var bytes = Array(s.utf8)
        guard bytes.contains(where: { $0 <= 1 }) else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 4)
        for byte in bytes {
            switch byte {
            case 0: out.append(1); out.append(1)
            case 1: out.append(1); out.append(2)
            default: out.append(byte)
            }
        }
        bytes = out
        return bytes
    }

    /// The string `bytes` encode; nil when they hold a 01 byte not followed by 01 or 02,
    /// which ``encode(_:)`` never writes (another program's text with a raw U+0001).
    static func decode(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard bytes.contains(1) else { return String(decoding: bytes, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let byte = bytes[i]
            if byte == 1 {
                guard i + 1 < bytes.count, bytes[i + 1] == 1 || bytes[i + 1] == 2 else { return nil }
                out.append(bytes[i + 1] == 1 ? 0 : 1)
                i += 2
            } else {
                out.append(byte)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
