import Dispatch
import Synchronization
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

    /// Through an unsafe continuation in release builds, as Depot's awaited calls (see
    /// `AwaitedCall`): the hop the raw engines are measured behind is Depot's own.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        #if DEBUG
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
        #else
        try await withUnsafeThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
        #endif
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

/// Set by W6's writer when its last save has committed: the readers read until then.
final class WriterDone: Sendable {
    private let flag = Atomic<Bool>(false)
    var isSet: Bool { flag.load(ordering: .relaxed) }
    func set() { flag.store(true, ordering: .relaxed) }
}

/// One W6 reader's lookups: its whole share once (their checksum is the run's), then its
/// share again from the start, lookup by lookup, until the writer has finished, so that
/// every read is made while the writer writes and the readers' figures cover the whole
/// run. (A single pass ends long before the writer does, so it measured only the moments
/// after the pool's threads woke up, which vary from run to run.) Each later lookup must
/// return the cat it asked for.
struct ReaderLoop {
    let mine: [Int64]
    var latencies: [UInt64] = []
    var sum: Int64 = 0
    private var position = 0
    private var firstPass = true

    init(_ mine: [Int64]) {
        self.mine = mine
        latencies.reserveCapacity(mine.count * 4)
    }

    /// The next id to look up, or `nil` when the reader is done.
    mutating func next(_ writer: WriterDone) -> Int64? {
        if position == mine.count {
            position = 0
            firstPass = false
        }
        if !firstPass && writer.isSet || mine.isEmpty { return nil }
        defer { position += 1 }
        return mine[position]
    }

    mutating func record(_ cat: Cat, id: Int64, nanoseconds: UInt64) throws {
        latencies.append(nanoseconds)
        if firstPass {
            sum &+= checksum(cat)
        } else if cat.id != id {
            throw BenchError("W6: looking up cat \(id) returned cat \(cat.id)")
        }
    }

    /// Runs the loop with a blocking lookup (W6t's plain threads).
    static func run(_ mine: [Int64], until writer: WriterDone, _ lookUp: (Int64) throws -> Cat) throws -> ([UInt64], Int64) {
        var loop = ReaderLoop(mine)
        while let id = loop.next(writer) {
            let start = DispatchTime.now().uptimeNanoseconds
            let cat = try lookUp(id)
            try loop.record(cat, id: id, nanoseconds: DispatchTime.now().uptimeNanoseconds - start)
        }
        return (loop.latencies, loop.sum)
    }
}

/// W6t's writer on the calling task while the readers' threads (in `readers`) read: saves,
/// tells the readers, waits for them (also when a save failed), and rethrows.
func writeWhileThreadsRead(_ writer: WriterDone, _ readers: DispatchGroup, _ save: () async throws -> Void) async throws {
    let failure: (any Error)?
    do {
        try await save()
        failure = nil
    } catch {
        failure = error
    }
    writer.set()
    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in readers.notify(queue: .global()) { c.resume() } }
    if let failure { throw failure }
}

/// W6's shape, the same for every subject that runs it through async calls: one task saves
/// `writes`, one awaited call each, while `readers` tasks each look up their share of
/// `lookups`, one awaited call each, timed per call, and go on reading (see ``ReaderLoop``)
/// until the writer is done. With `executor`, every task prefers it (W6e).
func asyncMix<Reader: Sendable>(
    readers: Int, lookups: [Int64], writes: [Cat], executor: (any TaskExecutor)? = nil,
    save: @escaping @Sendable (Cat) async throws -> Void,
    openReader: @escaping @Sendable () async throws -> Reader,
    closeReader: @escaping @Sendable (Reader) -> Void = { _ in },
    lookUp: @escaping @Sendable (Reader, Int64) async throws -> Cat
) async throws -> (latencies: [UInt64], checksum: Int64) {
    let share = lookups.count / readers
    let writer = WriterDone()
    return try await withThrowingTaskGroup(of: ([UInt64], Int64).self) { group in
        group.addTask(executorPreference: executor) {
            defer { writer.set() }
            for cat in writes { try await save(cat) }
            return ([], 0)
        }
        for reader in 0..<readers {
            let mine = Array(lookups[(reader * share)..<((reader + 1) * share)])
            group.addTask(executorPreference: executor) {
                let connection = try await openReader()
                defer { closeReader(connection) }
                var loop = ReaderLoop(mine)
                var count = 0
                while let id = loop.next(writer) {
                    let start = DispatchTime.now().uptimeNanoseconds
                    let cat = try await lookUp(connection, id)
                    try loop.record(cat, id: id, nanoseconds: DispatchTime.now().uptimeNanoseconds - start)
                    // A lookup that never suspends (the memory store reads on the calling
                    // task) would keep the pool's threads from the writer's task, and the
                    // readers would wait for it forever: give way now and then, untimed.
                    count += 1
                    if count % 64 == 0 { await Task.yield() }
                }
                return (loop.latencies, loop.sum)
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
