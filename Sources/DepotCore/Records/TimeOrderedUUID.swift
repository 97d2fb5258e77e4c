public import Foundation
import Synchronization

extension UUID {
    /// A new UUID that sorts after every one this process made before: version 7 of
    /// RFC 9562, the milliseconds since 1970 in its first six bytes.
    ///
    /// Use it for the primary keys a server makes. Every backend keeps records in key order,
    /// in a B-tree (SQLite, LMDB, PostgreSQL's indexes) or a sorted tree (memory), and
    /// `UUID()`'s random keys land all over it: a commit of a few new records rewrites a
    /// page for each, and an index on the key (a reference to the record) does the same.
    /// Time-ordered keys land together at the end, so new records share their pages, and
    /// reading recent records reads few of them. The keys stay unique without coordination
    /// between processes (62 random bits end each one, after a counter that starts at
    /// random), as `UUID()`'s do.
    ///
    /// ```swift
    /// let pet = Pet(id: .timeOrdered(), ownerID: owner.id, name: input.name)
    /// ```
    ///
    /// Within one millisecond, UUIDs made by this process count up from a random start in
    /// the 12 bits after the version. When the clock steps back they go on counting in the
    /// last millisecond, and a full counter (more than about 2,000 in one millisecond)
    /// borrows the next one, so the order holds. A key shows when its record was created, to
    /// the millisecond: use `UUID()` for keys that must not.
    public static func timeOrdered() -> UUID {
        timeOrdered(clock: .shared)
    }

    /// ``timeOrdered()`` counting on `clock`: tests give a clock of their own, which other
    /// tests making UUIDs at the same time cannot move ahead of the wall clock.
    package static func timeOrdered(clock: TimeOrderedClock) -> UUID {
        var random = SystemRandomNumberGenerator()
        let (milliseconds, counter) = clock.next(now: TimeOrderedClock.now(), random: &random)
        let tail = random.next() as UInt64
        let bytes: uuid_t = (
            UInt8(truncatingIfNeeded: milliseconds >> 40), UInt8(truncatingIfNeeded: milliseconds >> 32),
            UInt8(truncatingIfNeeded: milliseconds >> 24), UInt8(truncatingIfNeeded: milliseconds >> 16),
            UInt8(truncatingIfNeeded: milliseconds >> 8), UInt8(truncatingIfNeeded: milliseconds),
            // Version 7 in the high nibble, then the counter's 12 bits.
            UInt8(truncatingIfNeeded: 0x70 | (counter >> 8)), UInt8(truncatingIfNeeded: counter),
            // The RFC 4122 variant (binary 10), then 62 random bits.
            UInt8(truncatingIfNeeded: 0x80 | ((tail >> 56) & 0x3F)), UInt8(truncatingIfNeeded: tail >> 48),
            UInt8(truncatingIfNeeded: tail >> 40), UInt8(truncatingIfNeeded: tail >> 32),
            UInt8(truncatingIfNeeded: tail >> 24), UInt8(truncatingIfNeeded: tail >> 16),
            UInt8(truncatingIfNeeded: tail >> 8), UInt8(truncatingIfNeeded: tail)
        )
        return UUID(uuid: bytes)
    }
}

/// The last time-ordered UUID's millisecond and counter in this process.
package final class TimeOrderedClock: Sendable {
    package static let shared = TimeOrderedClock()

    private struct State {
        var milliseconds: UInt64 = 0
        var counter: UInt16 = 0
    }
    private let state = Mutex(State())

    package init() {}

    /// The milliseconds since 1970 now, never negative.
    package static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        guard spec.tv_sec >= 0 else { return 0 }
        return UInt64(spec.tv_sec) &* 1000 &+ UInt64(spec.tv_nsec / 1_000_000)
    }

    /// The millisecond and 12-bit counter of the next UUID: above the last one's, so that
    /// UUIDs sort in the order they were made. A new millisecond starts the counter at a
    /// random value below 2,048, leaving at least 2,048 steps before it would overflow; a
    /// clock that stepped back counts on in the last millisecond, and an overflow moves on
    /// to the millisecond after it.
    package func next(now: UInt64, random: inout some RandomNumberGenerator) -> (milliseconds: UInt64, counter: UInt16) {
        // 48 bits of milliseconds last until the year 10889.
        let now = now & 0xFFFF_FFFF_FFFF
        let start = UInt16.random(in: 0..<2048, using: &random)
        return state.withLock { state in
            if now > state.milliseconds {
                state.milliseconds = now
                state.counter = start
            } else if state.counter < 0xFFF {
                state.counter += 1
            } else {
                state.milliseconds = (state.milliseconds + 1) & 0xFFFF_FFFF_FFFF
                state.counter = start
            }
            return (state.milliseconds, state.counter)
        }
    }
}
