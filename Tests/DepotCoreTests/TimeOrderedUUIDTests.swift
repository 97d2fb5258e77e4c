import Foundation
import PropertyBased
import Testing

import DepotCore
import DepotTesting

/// `UUID.timeOrdered()`: RFC 9562's version 7, in the order the process made them.
@Suite("time-ordered UUIDs")
struct TimeOrderedUUIDTests {
    @Test("version 7, RFC 4122's variant, and the milliseconds of when it was made")
    func layout() {
        // A clock of its own: the shared one runs ahead of the wall clock while another test
        // makes thousands of UUIDs in one millisecond (each full counter borrows the next).
        let before = UInt64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let id = UUID.timeOrdered(clock: TimeOrderedClock())
        let after = UInt64((Date().timeIntervalSince1970 * 1000).rounded(.up))
        let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
        #expect(bytes[6] >> 4 == 7)
        #expect(bytes[8] >> 6 == 0b10)
        let milliseconds = bytes[0..<6].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        // A UUID made in a millisecond the clock already passed borrows the next one.
        #expect(milliseconds >= before)
        #expect(milliseconds <= after + 1)
        // Its text is the usual lowercase-agnostic form, version digit included.
        #expect(Array(id.uuidString)[14] == "7")
    }

    @Test("UUIDs made one after another sort in that order, and differ")
    func order() {
        let ids = (0..<20_000).map { _ in UUID.timeOrdered() }
        for (a, b) in zip(ids, ids.dropFirst()) {
            #expect(Value.uuid(a) < Value.uuid(b), "\(a) was made before \(b)")
        }
        #expect(Set(ids).count == ids.count)
    }

    @Test("the clock's millisecond and counter only go up: on a repeated millisecond, a clock stepping back, a full counter")
    func clockOnlyGoesUp() async {
        await propertyCheck(count: 200, input: Gen.int(in: -3...3).array(of: 1...400), Gen.uint64()) { steps, seed in
            let clock = TimeOrderedClock()
            var random = SplitMix64(seed: seed)
            var now: UInt64 = 1_764_000_000_000
            var last: (milliseconds: UInt64, counter: UInt16)?
            for step in steps {
                // Mostly the same millisecond, sometimes on, sometimes back.
                now = step >= 0 ? now + UInt64(step / 2) : now - UInt64(-step)
                let next = clock.next(now: now, random: &random)
                #expect(next.counter <= 0xFFF)
                if let last {
                    #expect(next.milliseconds > last.milliseconds || (next.milliseconds == last.milliseconds && next.counter > last.counter))
                }
                if next.milliseconds > (last?.milliseconds ?? 0) {
                    // A millisecond starts its counter low enough for 2,048 more.
                    #expect(next.counter < 2048)
                }
                last = next
            }
        }
    }

    @Test("a full counter moves on to the next millisecond")
    func counterOverflow() {
        let clock = TimeOrderedClock()
        var random = SplitMix64(seed: 7)
        let now: UInt64 = 1_764_000_000_000
        var seen: [(UInt64, UInt16)] = []
        for _ in 0..<4200 { seen.append(clock.next(now: now, random: &random)) }
        #expect(seen.first?.0 == now)
        #expect(seen.contains { $0.0 == now + 1 })
        #expect(seen.allSatisfy { $0.0 == now || $0.0 == now + 1 || $0.0 == now + 2 })
    }

    @Test("records keyed by time-ordered UUIDs read back in the order they were made")
    func keyOrder() async throws {
        let store = MemoryStore()
        let toys = Controller<Toy, Toy>(store: store)
        let made = (0..<300).map { Toy(id: .timeOrdered(), name: "toy \($0)") }
        try await toys.save(made.shuffled())
        #expect(try await toys.fetchAll(Request<Toy>().sorted(by: \.id)) == made)
        await store.close()
    }
}

@Record
private struct Toy: Hashable, Sendable {
    var id: UUID
    var name: String
}
