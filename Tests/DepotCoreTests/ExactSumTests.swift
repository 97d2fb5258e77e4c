import DepotCore
import PropertyBased
import Testing

/// Depot's exactly rounded sum of doubles against Shewchuk's algorithm (exact partials,
/// rounded once, as in Python's `math.fsum`) on values scaled down so that no partial sum
/// can leave the double range, and against itself in every order, split and serialized.
@Suite("Exact sums of doubles")
struct ExactSumTests {
    static func sum(_ values: some Sequence<Double>) -> Double {
        var sum = ExactSum()
        for value in values { sum.add(value) }
        return sum.value
    }

    /// Shewchuk's exact partials, rounded half to even once: correct while no partial sum
    /// overflows (the reference scales its inputs down by 2^-128 first, and the result
    /// back up, which is exact for values of exponent ≥ -894 and rounds to infinity as
    /// the exact sum does).
    static func reference(_ values: [Double]) -> Double {
        var partials: [Double] = []
        for value in values {
            var x = value * 0x1p-128
            var kept = 0
            for index in partials.indices {
                var y = partials[index]
                if abs(x) < abs(y) { swap(&x, &y) }
                let high = x + y
                let low = y - (high - x)
                if low != 0 {
                    partials[kept] = low
                    kept += 1
                }
                x = high
            }
            partials.removeSubrange(kept...)
            partials.append(x)
        }
        guard var n = partials.indices.last else { return 0 }
        var high = partials[n]
        var low = 0.0
        while n > 0 {
            let x = high
            n -= 1
            let y = partials[n]
            high = x + y
            low = y - (high - x)
            if low != 0 { break }
        }
        if n > 0 && ((low < 0 && partials[n - 1] < 0) || (low > 0 && partials[n - 1] > 0)) {
            let y = low * 2
            let x = high + y
            if y == x - high { high = x }
        }
        // Scaling back: exact unless it overflows, and an overflow here is the exact sum's.
        return high * 0x1p64 * 0x1p64
    }

    /// A double from random bits, its exponent within 40 of `exponent` (clamped to a
    /// double's), so that values overlap and cancel.
    static func double(_ bits: UInt64, near exponent: Int) -> Double {
        let offset = Int(bits >> 52 & 0x3F) - 32
        let chosen = min(max(exponent + offset, -1022), 1023)
        let significand = 1 + Double(bits & ((1 << 52) - 1)) * 0x1p-52
        let value = Double(sign: bits >> 63 == 1 ? .minus : .plus, exponent: chosen, significand: significand)
        return value
    }

    @Test("known sums: decimals, cancellation past the largest double, overflow, ties to even, subnormals")
    func knownSums() {
        #expect(Self.sum([0.1, 0.2, 0.3]) == 0.6)
        #expect(Self.sum([1e16, 1.0, -1e16]) == 1.0)
        let big = 0x1p1023
        // Every order of these gives 2^1023, though some pass 2^1024 on the way.
        let crossing = [big, -0x1p1022, -0x1p1022, big]
        for a in 0..<4 {
            for b in 0..<4 where b != a {
                for c in 0..<4 where c != a && c != b {
                    let d = 6 - a - b - c
                    #expect(Self.sum([crossing[a], crossing[b], crossing[c], crossing[d]]) == big)
                }
            }
        }
        let largest = Double.greatestFiniteMagnitude
        #expect(Self.sum([largest, largest, -largest]) == largest)
        #expect(Self.sum([largest, largest]) == .infinity)
        #expect(Self.sum([-largest, -largest]) == -.infinity)
        // Half an ulp above the largest double rounds to even: up, to infinity; less stays.
        #expect(Self.sum([largest, 0x1p970]) == .infinity)
        #expect(Self.sum([largest, 0x1p969]) == largest)
        #expect(Self.sum([largest, 0x1p970, -0x1p-1074]) == largest)
        // Ties to even at 1.
        #expect(Self.sum([1, 0x1p-53]) == 1)
        let one = 1.0
        #expect(Self.sum([one, 0x1p-53, 0x1p-1074]) == one.nextUp)
        #expect(Self.sum([one.nextUp, 0x1p-53]) == one.nextUp.nextUp)
        // Subnormals add exactly, and cross into the normal range.
        let tiny = Double.leastNonzeroMagnitude
        #expect(Self.sum(Array(repeating: tiny, count: 1000)) == 1000 * tiny)
        #expect(Self.sum([Double.leastNormalMagnitude, -tiny]) == Double.leastNormalMagnitude.nextDown)
        #expect(Self.sum([Double.leastNormalMagnitude.nextDown, tiny]) == Double.leastNormalMagnitude)
        #expect(Self.sum([-tiny, -tiny]).bitPattern == (-2 * tiny).bitPattern)
    }

    @Test("zeros, NaN and infinities as IEEE adds them")
    func specialValues() {
        #expect(Self.sum([]).bitPattern == 0.0.bitPattern)
        #expect(Self.sum([-0.0]).bitPattern == (-0.0).bitPattern)
        #expect(Self.sum([-0.0, -0.0]).bitPattern == (-0.0).bitPattern)
        #expect(Self.sum([-0.0, 0.0]).bitPattern == 0.0.bitPattern)
        #expect(Self.sum([1, -1]).bitPattern == 0.0.bitPattern)
        #expect(Self.sum([-1, 1, -0.0]).bitPattern == 0.0.bitPattern)
        #expect(Self.sum([.infinity, 1]) == .infinity)
        #expect(Self.sum([.infinity, -.greatestFiniteMagnitude, -.greatestFiniteMagnitude]) == .infinity)
        #expect(Self.sum([.infinity, -.infinity]).isNaN)
        #expect(Self.sum([1, .nan, 2]).isNaN)
    }

    @Test("random sums equal the reference, in any order, split in two and merged, and serialized")
    func randomSums() async {
        await propertyCheck(count: 300, input: Gen.uint64().array(of: 1...300), Gen.int(in: -1000...1023), Gen.int(in: 0...300)) { bits, exponent, cut in
            let values = bits.map { Self.double($0, near: exponent) }
            var whole = ExactSum()
            for value in values { whole.add(value) }
            // The reference's scaling is exact for values of exponent ≥ -894 (32 below).
            if exponent >= -862 {
                #expect(whole.value.bitPattern == Self.reference(values).bitPattern, "\(values)")
            }
            #expect(Self.sum(values.reversed()).bitPattern == whole.value.bitPattern)
            #expect(Self.sum(values.sorted()).bitPattern == whole.value.bitPattern)
            var first = ExactSum(), second = ExactSum()
            let split = min(cut, values.count)
            for value in values[..<split] { first.add(value) }
            for value in values[split...] { second.add(value) }
            first.add(second)
            #expect(first == whole)
            #expect(first.value.bitPattern == whole.value.bitPattern)
            let read = try? ExactSum(serialized: whole.serialized)
            #expect(read == whole)
            #expect(read?.value.bitPattern == whole.value.bitPattern)
        }
    }

    @Test("significand sums times powers of two add what their doubles add")
    func significandSums() throws {
        var parts = ExactSum(), doubles = ExactSum()
        for (significand, exponent) in [(Int128(3), -1074), (Int128(-(1 << 52) - 1), 0), (Int128(1) << 100, 900), (Int128(-5), 971)] {
            try parts.add(significand, timesTwoToThe: exponent)
            // Each is exact as a double or as two doubles.
            let high = Double(sign: significand < 0 ? .minus : .plus, exponent: exponent, significand: Double(significand.magnitude))
            doubles.add(high)
        }
        #expect(parts == doubles)
        #expect(parts.value == doubles.value)
        var overflowing = ExactSum()
        try overflowing.add(Int128.max, timesTwoToThe: 971)
        try overflowing.add(Int128.min, timesTwoToThe: 971)
        #expect(overflowing.value == -0x1p971)
        #expect(throws: DepotError.self) { try overflowing.add(1, timesTwoToThe: -1075) }
        #expect(throws: DepotError.self) { try overflowing.add(Int128.max, timesTwoToThe: 1000) }
        #expect(overflowing.value == -0x1p971, "a refused part adds nothing")
    }

    @Test("serialized state that is not a sum's is refused, not trusted")
    func corruptSerializedState() {
        #expect(throws: DepotError.self) { try ExactSum(serialized: [0, 0]) }
        #expect(throws: DepotError.self) { try ExactSum(serialized: [8, 0, 0]) }
        #expect(throws: DepotError.self) { try ExactSum(serialized: [6, 0, 0]) }
        #expect(throws: DepotError.self) { try ExactSum(serialized: [0, 0, 37]) }
        #expect(throws: DepotError.self) { try ExactSum(serialized: [0, 0, 35, 1, 2]) }
        #expect(throws: DepotError.self) { try ExactSum(serialized: [0, 0] + Array(repeating: 1, count: 37)) }
        #expect(throws: DepotError.self, "a finite special value") { try ExactSum(serialized: [1, (1.0).bitPattern, 0]) }
        #expect(throws: DepotError.self, "a special value without its flag") { try ExactSum(serialized: [0, 7, 0]) }
        #expect(throws: DepotError.self, "a nonzero total with no nonzero value") { try ExactSum(serialized: [0, 0, 0, 5]) }
        #expect((try? ExactSum(serialized: [0, 0, 0]))?.value == 0)
        #expect((try? ExactSum(serialized: [1, Double.nan.bitPattern, 0]))?.value.isNaN == true)
        var negative = ExactSum()
        negative.add(-1)
        negative.add(-0x1p-1000)
        #expect((try? ExactSum(serialized: negative.serialized))?.value == -1 - 0x1p-1000)
    }
}
