/// An exactly rounded sum of doubles: every finite value is added without rounding into a
/// fixed-point integer wide enough for any double, and the total is rounded once, half to
/// even, when ``value`` reads it. So the result depends neither on the order of the values
/// nor on how a backend split them between accumulators, even where partial sums pass the
/// largest double: 2^1023 + 2^1023 - 2^1023 is 2^1023 in every order, on every backend.
///
/// NaN anywhere makes the sum NaN; infinities add up as IEEE does (+inf and -inf give NaN);
/// an exact sum beyond the double range rounds to an infinity, as IEEE rounds it; a sum of
/// zero is -0.0 only when every value was -0.0 (IEEE's rule for sums that cancel).
public struct ExactSum: Sendable, Hashable {
    /// The accumulator: the finite values' exact sum is this two's complement integer,
    /// lowest word first, times 2^-1074 (the smallest subnormal). Empty until a nonzero
    /// value arrives. 36 words: a double's bits reach bit 2,098 and a backend's significand
    /// sum (``add(_:timesTwoToThe:)``) bit 2,173; the 130 bits above are headroom, so no
    /// count of values a store can hold reaches the sign bit.
    private var words: [UInt64] = []
    /// The sum of the non-finite values (NaN and infinities), if there were any.
    private var special: Double?
    /// What the finite values were, for the sign of a zero sum.
    private var zeros: Zeros = .none

    static let wordCount = 36
    /// The lowest power of two the accumulator holds: the smallest subnormal's.
    static let lowestExponent = -1074
    /// What ``add(_:timesTwoToThe:)`` takes stays below 2^1100: bit 2,173 of the accumulator.
    static let highestExponent = 1100

    private enum Zeros: UInt8, Comparable {
        /// No finite value yet.
        case none
        /// Only -0.0.
        case negative
        /// Some finite value that is not -0.0.
        case other

        static func < (a: Zeros, b: Zeros) -> Bool { a.rawValue < b.rawValue }
    }

    /// An empty sum: zero.
    public init() {}

    /// Adds `value` exactly; infinities and NaN are kept apart and decide the result as
    /// IEEE addition would.
    public mutating func add(_ value: Double) {
        guard value.isFinite else {
            special = (special ?? 0) + value
            return
        }
        let bits = value.bitPattern
        let biased = Int((bits >> 52) & 0x7FF)
        let fraction = bits & ((1 << 52) - 1)
        if biased == 0 && fraction == 0 {
            zeros = max(zeros, value.sign == .minus ? .negative : .other)
            return
        }
        zeros = .other
        // A normal double is (2^52 + fraction) × 2^(biased - 1075), a subnormal fraction ×
        // 2^-1074: in units of 2^-1074 the significand starts at bit `biased - 1` (bit 0
        // for both subnormals and the smallest normals).
        let significand = biased == 0 ? fraction : fraction | (1 << 52)
        addMagnitude(low: significand, high: 0, at: max(biased - 1, 0), negative: value.sign == .minus)
    }

    /// Adds `significand` × 2^`exponent` exactly: for a backend that sums the significands
    /// of doubles with equal exponents itself (PostgreSQL's `numeric`).
    ///
    /// - Throws: ``DepotError/Code/invalidValue`` when 2^`exponent` is below the smallest
    ///   subnormal or the product reaches 2^1100 (a sum of 2^128 doubles of the largest
    ///   magnitude stays below it); nothing is added then.
    public mutating func add(_ significand: Int128, timesTwoToThe exponent: Int) throws(DepotError) {
        guard significand != 0 else { return }
        let magnitude = significand.magnitude
        let width = UInt128.bitWidth - magnitude.leadingZeroBitCount
        guard exponent >= Self.lowestExponent, exponent <= Self.highestExponent - width else {
            throw DepotError(.invalidValue, "\(significand) × 2^\(exponent) is outside what an exact sum of doubles holds (multiples of 2^-1074 below 2^\(Self.highestExponent)).")
        }
        zeros = .other
        addMagnitude(
            low: UInt64(truncatingIfNeeded: magnitude), high: UInt64(truncatingIfNeeded: magnitude >> 64),
            at: exponent - Self.lowestExponent, negative: significand < 0)
    }

    /// Adds another sum's values: the same result as adding each of them here.
    public mutating func add(_ other: ExactSum) {
        if let value = other.special { special = (special ?? 0) + value }
        zeros = max(zeros, other.zeros)
        guard !other.words.isEmpty else { return }
        guard !words.isEmpty else {
            words = other.words
            return
        }
        words.withUnsafeMutableBufferPointer { mine in
            other.words.withUnsafeBufferPointer { theirs in
                var carry: UInt64 = 0
                for index in 0..<Self.wordCount {
                    let (partial, first) = mine[index].addingReportingOverflow(theirs[index])
                    let (sum, second) = partial.addingReportingOverflow(carry)
                    mine[index] = sum
                    carry = (first || second) ? 1 : 0
                }
                // A carry out of the top word is the two's complement wrap: dropped.
            }
        }
    }

    /// Adds or subtracts the (up to 128-bit) magnitude `high:low` shifted left by `bit`.
    private mutating func addMagnitude(low: UInt64, high: UInt64, at bit: Int, negative: Bool) {
        if words.isEmpty { words = Array(repeating: 0, count: Self.wordCount) }
        let shift = UInt64(bit % 64)
        let first = bit / 64
        // The shifted magnitude spans three words at most, all inside the accumulator: a
        // double's reach bit 2,097, a checked significand sum's bit 2,173.
        let parts: (UInt64, UInt64, UInt64) =
            shift == 0
            ? (low, high, 0)
            : (low << shift, (high << shift) | (low >> (64 - shift)), high >> (64 - shift))
        words.withUnsafeMutableBufferPointer { w in
            var index = first
            var carry = false
            func step(_ part: UInt64) {
                guard index < Self.wordCount else { return }
                if negative {
                    let (difference, borrowOut) = w[index].subtractingReportingOverflow(part)
                    let (result, borrowAgain) = difference.subtractingReportingOverflow(carry ? 1 : 0)
                    w[index] = result
                    carry = borrowOut || borrowAgain
                } else {
                    let (sum, carryOut) = w[index].addingReportingOverflow(part)
                    let (result, carryAgain) = sum.addingReportingOverflow(carry ? 1 : 0)
                    w[index] = result
                    carry = carryOut || carryAgain
                }
                index += 1
            }
            step(parts.0)
            step(parts.1)
            step(parts.2)
            while carry && index < Self.wordCount { step(0) }
        }
    }

    /// The exact sum, rounded once to the nearest double (ties to even).
    public var value: Double {
        if let special { return special }
        guard let top = words.last else { return zeros == .negative ? -0.0 : 0.0 }
        let negative = top >> 63 == 1
        var magnitude = words
        if negative {
            // Two's complement negation: invert, add one.
            var carry = true
            for index in magnitude.indices {
                magnitude[index] = ~magnitude[index]
                if carry {
                    (magnitude[index], carry) = magnitude[index].addingReportingOverflow(1)
                }
            }
        }
        guard let highWord = magnitude.lastIndex(where: { $0 != 0 }) else {
            return zeros == .negative ? -0.0 : 0.0
        }
        let highest = highWord * 64 + 63 - magnitude[highWord].leadingZeroBitCount
        func bits(from start: Int) -> UInt64 {
            // The 64 bits of the magnitude from bit `start` up (start ≥ 0).
            let index = start / 64, shift = UInt64(start % 64)
            let low = magnitude[index] >> shift
            guard shift != 0, index + 1 < magnitude.count else { return low }
            return low | (magnitude[index + 1] << (64 - shift))
        }
        let signBit: UInt64 = negative ? 1 << 63 : 0
        // Below 2^53 units every multiple of 2^-1074 is a double, and its bit pattern is
        // the multiple itself: a subnormal's fraction, or biased exponent 1 with the rest.
        guard highest >= 53 else { return Double(bitPattern: signBit | bits(from: 0)) }
        let start = highest - 52
        var significand = bits(from: start) & ((1 << 53) - 1)
        var biased = start + 1
        let halfway = bits(from: start - 1) & 1 == 1
        if halfway {
            // Round up past the halfway point, or at it when the kept bits are odd.
            let guardBit = start - 1
            let lowerWord = guardBit / 64
            var sticky = magnitude[lowerWord] & ((1 << UInt64(guardBit % 64)) - 1) != 0
            if !sticky { sticky = magnitude[..<lowerWord].contains { $0 != 0 } }
            if sticky || significand & 1 == 1 {
                significand += 1
                if significand == 1 << 53 {
                    significand >>= 1
                    biased += 1
                }
            }
        }
        guard biased < 0x7FF else { return negative ? -.infinity : .infinity }
        return Double(bitPattern: signBit | UInt64(biased) << 52 | (significand & ((1 << 52) - 1)))
    }

    // MARK: Serialized form

    /// The sum's state as 64-bit words, for a backend that keeps it outside Swift between
    /// steps (SQLite's aggregate function hands it back as a blob); ``init(serialized:)``
    /// reads it back. Three words and the accumulator's significant words: a few words for
    /// values of like magnitude.
    public var serialized: [UInt64] {
        let flags = UInt64(special == nil ? 0 : 1) | UInt64(zeros.rawValue) << 1
        var result: [UInt64] = [flags, special?.bitPattern ?? 0]
        guard let top = words.last else {
            result.append(0)
            return result
        }
        let fill: UInt64 = top >> 63 == 1 ? ~0 : 0
        guard let first = words.firstIndex(where: { $0 != 0 }) else {
            result.append(0)
            return result
        }
        // Words above `end` repeat the sign; keep one whose top bit shows it.
        var end = (words.lastIndex(where: { $0 != fill }) ?? first) + 1
        if end < Self.wordCount && (words[end - 1] >> 63) != (fill >> 63) { end += 1 }
        result.append(UInt64(first))
        result.append(contentsOf: words[first..<end])
        return result
    }

    /// Reads back ``serialized``.
    ///
    /// - Throws: ``DepotError/Code/storeCorrupted`` when the words are not a sum's state.
    public init(serialized: some Collection<UInt64>) throws(DepotError) {
        let state = Array(serialized)
        guard state.count >= 3, state[0] < 8, let zeros = Zeros(rawValue: UInt8(state[0] >> 1)),
            state[2] <= UInt64(Self.wordCount), state.count - 3 <= Self.wordCount - Int(state[2])
        else {
            throw DepotError(.storeCorrupted, "\(state.count) words are not the state of an exact sum of doubles.")
        }
        self.zeros = zeros
        if state[0] & 1 == 1 {
            special = Double(bitPattern: state[1])
        } else if state[1] != 0 {
            throw DepotError(.storeCorrupted, "The state of an exact sum of doubles has no special value but \(state[1]) in its place.")
        }
        if let special, special.isFinite {
            throw DepotError(.storeCorrupted, "The state of an exact sum of doubles holds \(special) as its NaN or infinity.")
        }
        let stored = state[3...]
        guard let last = stored.last else { return }
        if zeros != .other && stored.contains(where: { $0 != 0 }) {
            throw DepotError(.storeCorrupted, "The state of an exact sum of doubles has a nonzero total but no nonzero value.")
        }
        let first = Int(state[2])
        var words = Array(repeating: last >> 63 == 1 ? ~UInt64(0) : 0, count: Self.wordCount)
        for (offset, word) in stored.enumerated() { words[first + offset] = word }
        if first > 0 { for index in 0..<first { words[index] = 0 } }
        self.words = words
    }

    // MARK: Equality

    /// Equal when the sums are: the same exact finite total, the same non-finite part
    /// (by bits, so NaN equals itself) and the same sign for a zero.
    public static func == (a: ExactSum, b: ExactSum) -> Bool {
        a.special?.bitPattern == b.special?.bitPattern && a.zeros == b.zeros && a.totalWords == b.totalWords
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(special?.bitPattern)
        hasher.combine(zeros)
        hasher.combine(totalWords)
    }

    /// The accumulator with zero as no words, so a sum that returned to zero equals one
    /// that never left it.
    private var totalWords: [UInt64] {
        words.contains { $0 != 0 } ? words : []
    }
}
