/// A JSON value as the importer sees it: numbers keep their text, so a string attribute
/// gets the number exactly as written and an integer attribute is never rounded through a
/// double.
package indirect enum JSONNode: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONNode])
    /// Members in document order (a repeated key keeps its last value when read).
    case object([(key: String, value: JSONNode)])

    package static func == (a: JSONNode, b: JSONNode) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// What the value is, for error messages.
    var kind: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// The value as it could appear in a message: short, escaped.
    var excerpt: String {
        var text: String
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n): text = n
        case .string(let s): text = JSONWriter.quoted(s)
        case .array, .object: text = JSONWriter.canonical(self)
        }
        if text.count > 60 { text = String(text.prefix(57)) + "..." }
        return text
    }
}

/// Why the scanner stopped.
package enum JSONScanError: Error {
    /// The input ended inside a value; more bytes may complete it.
    case needsMoreInput
    /// The input is not JSON: the message and the byte offset.
    case malformed(String, offset: Int)
}

/// Reads JSON from a byte buffer, one value at a time, without a tree for the whole
/// document: the importer reads the top-level array's elements one by one, so a large file
/// is read in bounded memory.
package struct JSONScanner {
    var bytes: [UInt8]
    var position = 0
    /// Nesting limit: the scanner recurses per level, on threads with small stacks.
    static let maximumDepth = 256

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Drops the bytes before `position`, so a streamed buffer does not grow without bound.
    mutating func discardConsumed() {
        if position > 0 {
            bytes.removeFirst(position)
            position = 0
        }
    }

    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x0A, 0x0D, 0x09: position += 1
            default: return
            }
        }
    }

    /// The next significant byte, without consuming it.
    mutating func peek() throws(JSONScanError) -> UInt8 {
        skipWhitespace()
        guard position < bytes.count else { throw .needsMoreInput }
        return bytes[position]
    }

    mutating func expect(_ byte: UInt8, _ what: String) throws(JSONScanError) {
        guard try peek() == byte else { throw .malformed("expected \(what)", offset: position) }
        position += 1
    }

    package mutating func value(depth: Int = 0) throws(JSONScanError) -> JSONNode {
        guard depth < Self.maximumDepth else {
            throw .malformed("values nest deeper than \(Self.maximumDepth) levels", offset: position)
        }
        switch try peek() {
        case UInt8(ascii: "{"):
            position += 1
            var members: [(key: String, value: JSONNode)] = []
            if try peek() == UInt8(ascii: "}") {
                position += 1
                return .object(members)
            }
            while true {
                guard try peek() == UInt8(ascii: "\"") else { throw .malformed("expected a member name in quotes", offset: position) }
                let key = try string()
                try expect(UInt8(ascii: ":"), "':' after a member name")
                members.append((key, try value(depth: depth + 1)))
                let next = try peek()
                position += 1
                if next == UInt8(ascii: "}") { return .object(members) }
                guard next == UInt8(ascii: ",") else { throw .malformed("expected ',' or '}' in an object", offset: position - 1) }
            }
        case UInt8(ascii: "["):
            position += 1
            var elements: [JSONNode] = []
            if try peek() == UInt8(ascii: "]") {
                position += 1
                return .array(elements)
            }
            while true {
                elements.append(try value(depth: depth + 1))
                let next = try peek()
                position += 1
                if next == UInt8(ascii: "]") { return .array(elements) }
                guard next == UInt8(ascii: ",") else { throw .malformed("expected ',' or ']' in an array", offset: position - 1) }
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try number())
        default:
            let byte = bytes[position]
            throw .malformed(byte < 0x80 ? "unexpected character '\(Unicode.Scalar(byte))'" : "unexpected byte \(Self.hex(byte))", offset: position)
        }
    }

    private mutating func literal(_ word: String) throws(JSONScanError) {
        let expected = Array(word.utf8)
        let count = expected.count
        guard position + count <= bytes.count else {
            // A prefix of the word at the end of the buffer may be completed by more input.
            if Array(bytes[position...]) == Array(expected.prefix(bytes.count - position)) { throw .needsMoreInput }
            throw .malformed("unexpected characters", offset: position)
        }
        guard (0..<count).allSatisfy({ bytes[position + $0] == expected[$0] }) else {
            throw .malformed("unexpected characters", offset: position)
        }
        position += count
    }

    private mutating func number() throws(JSONScanError) -> String {
        let start = position
        func digits() -> Int {
            let from = position
            while position < bytes.count, bytes[position] >= 0x30, bytes[position] <= 0x39 { position += 1 }
            return position - from
        }
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        let integer = digits()
        guard integer > 0 else {
            if position >= bytes.count { throw .needsMoreInput }
            throw .malformed("a number needs digits", offset: position)
        }
        if integer > 1 && bytes[position - integer] == 0x30 {
            throw .malformed("a number may not start with 0", offset: start)
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard digits() > 0 else {
                if position >= bytes.count { throw .needsMoreInput }
                throw .malformed("a fraction needs digits", offset: position)
            }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard digits() > 0 else {
                if position >= bytes.count { throw .needsMoreInput }
                throw .malformed("an exponent needs digits", offset: position)
            }
        }
        // A number at the very end of the buffer may continue in the next chunk.
        if position >= bytes.count { throw .needsMoreInput }
        return String(decoding: bytes[start..<position], as: UTF8.self)
    }

    private mutating func string() throws(JSONScanError) -> String {
        position += 1  // the opening quote
        let start = position
        // The common case: no escapes, one copy. Every byte of a string is checked to be
        // UTF-8 here, so `String(decoding:)` never has anything to repair.
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let text = String(decoding: bytes[start..<position], as: UTF8.self)
                position += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw .malformed("a control character inside a string", offset: position) }
            if byte < 0x80 {
                position += 1
            } else {
                position += try utf8Sequence(at: position)
            }
        }
        var scalars: [UInt8] = Array(bytes[start..<position])
        while position < bytes.count {
            let byte = bytes[position]
            if byte >= 0x80 {
                let length = try utf8Sequence(at: position)
                scalars.append(contentsOf: bytes[position..<position + length])
                position += length
                continue
            }
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: scalars, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard position < bytes.count else { throw .needsMoreInput }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append(0x22)
                case UInt8(ascii: "\\"): scalars.append(0x5C)
                case UInt8(ascii: "/"): scalars.append(0x2F)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if code >= 0xD800 && code < 0xDC00 {
                        // A high surrogate must be followed by a low one.
                        guard position + 1 < bytes.count else { throw .needsMoreInput }
                        guard bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                            throw .malformed("a lone UTF-16 surrogate in a string", offset: position)
                        }
                        position += 2
                        let low = try hex4()
                        guard low >= 0xDC00 && low < 0xE000 else { throw .malformed("a lone UTF-16 surrogate in a string", offset: position) }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if code >= 0xDC00 && code < 0xE000 {
                        throw .malformed("a lone UTF-16 surrogate in a string", offset: position)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw .malformed("an invalid \\u escape", offset: position) }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw .malformed("an invalid escape in a string", offset: position - 1)
                }
            default:
                if byte < 0x20 { throw .malformed("a control character inside a string", offset: position - 1) }
                scalars.append(byte)
            }
        }
        throw .needsMoreInput
    }

    /// The length of the well-formed UTF-8 sequence that starts at `start` with a byte of
    /// 0x80 or more (RFC 3629, the Unicode standard's table 3-7): no overlong form, no
    /// encoded surrogate, nothing above U+10FFFF. A valid prefix cut by the end of the buffer
    /// needs more input (the next chunk may complete it); anything else is malformed, at
    /// the first byte that cannot belong to a sequence.
    private func utf8Sequence(at start: Int) throws(JSONScanError) -> Int {
        let lead = bytes[start]
        let length: Int
        // The range the second byte must fall in; the later ones are always 80...BF.
        let second: ClosedRange<UInt8>
        switch lead {
        case 0xC2...0xDF: (length, second) = (2, 0x80...0xBF)
        case 0xE0: (length, second) = (3, 0xA0...0xBF)
        case 0xE1...0xEC, 0xEE...0xEF: (length, second) = (3, 0x80...0xBF)
        case 0xED: (length, second) = (3, 0x80...0x9F)
        case 0xF0: (length, second) = (4, 0x90...0xBF)
        case 0xF1...0xF3: (length, second) = (4, 0x80...0xBF)
        case 0xF4: (length, second) = (4, 0x80...0x8F)
        default:
            throw .malformed("invalid UTF-8 in a string (the byte \(Self.hex(lead)) cannot start a character)", offset: start)
        }
        for i in 1..<length {
            guard start + i < bytes.count else { throw .needsMoreInput }
            let byte = bytes[start + i]
            guard (i == 1 ? second : 0x80...0xBF).contains(byte) else {
                throw .malformed(
                    "invalid UTF-8 in a string (the byte \(Self.hex(byte)) cannot follow \((start..<start + i).map { Self.hex(bytes[$0]) }.joined(separator: " ")))",
                    offset: start + i)
            }
        }
        return length
    }

    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xF)])
    }

    private mutating func hex4() throws(JSONScanError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw .needsMoreInput }
        var code: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case 0x30...0x39: digit = UInt32(byte - 0x30)
            case 0x41...0x46: digit = UInt32(byte - 0x41 + 10)
            case 0x61...0x66: digit = UInt32(byte - 0x61 + 10)
            default: throw .malformed("an invalid \\u escape", offset: position)
            }
            code = code << 4 | digit
            position += 1
        }
        return code
    }
}

/// Writes JSON text.
enum JSONWriter {
    static func quoted(_ string: String) -> String {
        var out = "\""
        out.reserveCapacity(string.utf8.count + 2)
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
        return out
    }

    /// The canonical text of a nested value, as Depot stores JSON attributes: keys sorted
    /// (by UTF-8 bytes), no insignificant whitespace, numbers as written.
    static func canonical(_ node: JSONNode) -> String {
        switch node {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n): return n
        case .string(let s): return quoted(s)
        case .array(let elements): return "[" + elements.map(canonical).joined(separator: ",") + "]"
        case .object(let members):
            var last: [String: JSONNode] = [:]
            for member in members { last[member.key] = member.value }
            let keys = last.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
            return "{" + keys.map { quoted($0) + ":" + canonical(last[$0] ?? .null) }.joined(separator: ",") + "}"
        }
    }
}
