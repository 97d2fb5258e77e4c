import DepotCore
import Foundation

/// Reads fuzz bytes as a stream of choices. Past the end every read returns zero, so every
/// input is a complete program and short inputs mean small programs.
struct FuzzInput {
    private let bytes: UnsafeRawBufferPointer
    private var position = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var isAtEnd: Bool { position >= bytes.count }
    var remaining: Int { max(0, bytes.count - position) }

    mutating func byte() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    mutating func bool() -> Bool { byte() & 1 == 1 }

    mutating func choose(_ count: Int) -> Int { Int(byte()) % count }

    mutating func uint16() -> Int { Int(byte()) << 8 | Int(byte()) }

    mutating func uint64() -> UInt64 {
        var v: UInt64 = 0
        for _ in 0..<8 { v = v << 8 | UInt64(byte()) }
        return v
    }

    /// The numbers that break arithmetic, or any 64-bit number.
    mutating func int() -> Int {
        let interesting: [Int] = [
            0, 1, 2, 3, 10, -1, -2, Int.max, Int.min, Int.max - 1, Int.min + 1, Int.max / 2, Int.max / 2 + 1,
            Int(Int32.max), Int(Int32.min), Int(UInt32.max), 1 << 62, -(1 << 62),
        ]
        let pick = byte()
        if Int(pick) < interesting.count { return interesting[Int(pick)] }
        if pick < 128 { return Int(pick) - 64 }
        return Int(truncatingIfNeeded: uint64())
    }

    mutating func double() -> Double {
        let interesting: [Double] = [
            0, -0.0, 1, -1, .nan, -.nan, .infinity, -.infinity, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
            .leastNonzeroMagnitude, .ulpOfOne, 0.5, 9_007_199_254_740_993,
        ]
        let pick = byte()
        if Int(pick) < interesting.count { return interesting[Int(pick)] }
        return Double(bitPattern: uint64())
    }

    /// Up to `limit` bytes, possibly invalid UTF-8 (decoded with replacement, as Swift does).
    mutating func string(limit: Int = 24) -> String {
        let length = min(choose(limit + 1), remaining)
        var raw: [UInt8] = []
        for _ in 0..<length { raw.append(byte()) }
        return String(decoding: raw, as: UTF8.self)
    }

    mutating func data(limit: Int = 24) -> Data {
        let length = min(choose(limit + 1), remaining)
        var raw = Data()
        for _ in 0..<length { raw.append(byte()) }
        return raw
    }

    mutating func uuid() -> UUID {
        var u: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &u) { for i in 0..<16 { $0[i] = byte() } }
        return UUID(uuid: u)
    }

    mutating func type() -> AttributeType {
        let all: [AttributeType] = [.int64, .double, .bool, .string, .data, .date, .uuid]
        return all[choose(all.count)]
    }

    /// A value of `type` (nil sometimes when `optional`).
    mutating func value(of type: AttributeType, optional: Bool = true) -> Value {
        if optional, byte() < 24 { return .null }
        switch type {
        case .int64: return .int(Int64(truncatingIfNeeded: int()))
        case .double: return .double(double())
        case .bool: return .bool(bool())
        case .string: return .string(string())
        case .data: return .data(data())
        case .date: return .date(Date(timeIntervalSinceReferenceDate: double()))
        case .uuid: return .uuid(uuid())
        }
    }

    /// A value of any type, nil included.
    mutating func anyValue() -> Value {
        if byte() < 16 { return .null }
        return value(of: type(), optional: false)
    }
}

/// A property the code promises does not hold: stop as a crash, so libFuzzer keeps the input.
func violated(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError("property violated: \(message())", file: file, line: line)
}

/// Anything a target allows to be thrown: a `DepotError`. Everything else is a finding.
func expectDepotError(_ error: any Error, _ context: @autoclosure () -> String) {
    guard error is DepotError else { violated("\(context()) threw \(type(of: error)), not a DepotError: \(error)") }
}
