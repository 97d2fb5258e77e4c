import Dispatch
import DepotTesting

/// The hand-off Depot's backends make for every call: the engine's blocking work runs on
/// a dispatch queue while the calling task is suspended, and the task resumes when it is
/// done. W6's baseline for the raw engines runs them behind the same hand-off (reads on a
/// concurrent queue, writes on a serial one), so that the comparison shows what Depot adds
/// beyond the hop; W6t keeps the plain-threads figure, the floor, beside it.
struct HandOff: Sendable {
    let queue: DispatchQueue

    static func concurrent(_ label: String) -> HandOff {
        HandOff(queue: DispatchQueue(label: label, attributes: .concurrent))
    }

    static func serial(_ label: String) -> HandOff {
        HandOff(queue: DispatchQueue(label: label))
    }

    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}

/// A raw subject's engine state handed to the queues of a `HandOff`.
///
/// `@unchecked Sendable`: during W6 each reader's connection (or transaction) is used by
/// one task at a time, and the subject's own connection only by the serial writer queue;
/// each hop's continuation orders one use after the previous.
final class Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// W6's shape, the same for every subject that runs it through async calls: one task saves
/// `writes`, one awaited call each, while `readers` tasks each look up their share of
/// `lookups`, one awaited call each, timed per call.
func asyncMix<Reader: Sendable>(
    readers: Int, lookups: [Int64], writes: [Cat],
    save: @escaping @Sendable (Cat) async throws -> Void,
    openReader: @escaping @Sendable () async throws -> Reader,
    closeReader: @escaping @Sendable (Reader) -> Void = { _ in },
    lookUp: @escaping @Sendable (Reader, Int64) async throws -> Cat
) async throws -> (latencies: [UInt64], checksum: Int64) {
    let share = lookups.count / readers
    return try await withThrowingTaskGroup(of: ([UInt64], Int64).self) { group in
        group.addTask {
            for cat in writes { try await save(cat) }
            return ([], 0)
        }
        for reader in 0..<readers {
            let mine = Array(lookups[(reader * share)..<((reader + 1) * share)])
            group.addTask {
                let connection = try await openReader()
                defer { closeReader(connection) }
                var latencies: [UInt64] = []
                latencies.reserveCapacity(mine.count)
                var sum: Int64 = 0
                for id in mine {
                    let start = DispatchTime.now().uptimeNanoseconds
                    let cat = try await lookUp(connection, id)
                    latencies.append(DispatchTime.now().uptimeNanoseconds - start)
                    sum &+= checksum(cat)
                }
                return (latencies, sum)
            }
        }
        var latencies: [UInt64] = []
        var sum: Int64 = 0
        for try await (part, partSum) in group {
            latencies += part
            sum &+= partSum
        }
        return (latencies, sum)
    }
}
