/// Base64 with the URL and filename safe alphabet and no padding (RFC 4648, section 5): the
/// form of a ``PageCursor``'s token.
///
/// Written here rather than through Foundation, whose encoder knows only the standard
/// alphabet: turning its output into the URL-safe form took three passes through `NSString`
/// per token, and a server makes a token for every list page it answers.
package enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Each byte's six-bit value, or `invalid` for a byte outside the alphabet.
    private static let sextets: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
        return table
    }()

    private static let invalid: UInt8 = 0xFF

    /// `bytes` as text: four characters per three bytes, and two or three for a last group
    /// of one or two bytes.
    package static func encoded(_ bytes: [UInt8]) -> String {
        let rest = bytes.count % 3
        let length = bytes.count / 3 * 4 + (rest == 0 ? 0 : rest + 1)
        return alphabet.withUnsafeBufferPointer { alphabet in
            bytes.withUnsafeBufferPointer { bytes in
                String(unsafeUninitializedCapacity: length) { out in
                    var read = 0
                    var written = 0
                    func put(_ group: UInt32, _ characters: Int) {
                        for i in 0..<characters {
                            out[written] = alphabet[Int(truncatingIfNeeded: group >> UInt32(18 - 6 * i)) & 63]
                            written += 1
                        }
                    }
                    while bytes.count - read >= 3 {
                        put(UInt32(bytes[read]) << 16 | UInt32(bytes[read + 1]) << 8 | UInt32(bytes[read + 2]), 4)
                        read += 3
                    }
                    switch bytes.count - read {
                    case 1: put(UInt32(bytes[read]) << 16, 2)
                    case 2: put(UInt32(bytes[read]) << 16 | UInt32(bytes[read + 1]) << 8, 3)
                    default: break
                    }
                    return written
                }
            }
        }
    }

    /// The bytes `text` encodes, or `nil` when it is not canonical unpadded base64url: a
    /// character outside the alphabet (padding and the standard alphabet's `+` and `/`
    /// among them), a length that leaves a single character in the last group, or bits set
    /// in the last character beyond the last byte (so each byte string has one text).
    package static func decoded(_ text: some StringProtocol) -> [UInt8]? {
        if let bytes = text.utf8.withContiguousStorageIfAvailable({ decoded($0) }) { return bytes }
        var copy = String(text)
        return copy.withUTF8 { decoded($0) }
    }

    private static func decoded(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let tail = text.count % 4
        if tail == 1 { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.count / 4 * 3 + max(tail - 1, 0))
        return sextets.withUnsafeBufferPointer { sextets -> [UInt8]? in
            var group: UInt32 = 0
            var count = 0
            for character in text {
                let value = sextets[Int(character)]
                if value == invalid { return nil }
                group = group << 6 | UInt32(value)
                count += 1
                if count == 4 {
                    bytes.append(UInt8(truncatingIfNeeded: group >> 16))
                    bytes.append(UInt8(truncatingIfNeeded: group >> 8))
                    bytes.append(UInt8(truncatingIfNeeded: group))
                    group = 0
                    count = 0
                }
            }
            switch count {
            case 2:
                // 12 bits: one byte and four bits that must be zero.
                guard group & 0xF == 0 else { return nil }
                bytes.append(UInt8(truncatingIfNeeded: group >> 4))
            case 3:
                // 18 bits: two bytes and two bits that must be zero.
                guard group & 0x3 == 0 else { return nil }
                bytes.append(UInt8(truncatingIfNeeded: group >> 10))
                bytes.append(UInt8(truncatingIfNeeded: group >> 2))
            default:
                break
            }
            return bytes
        }
    }
}
