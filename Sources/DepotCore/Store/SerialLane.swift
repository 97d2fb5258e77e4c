import Dispatch
import NIOConcurrencyHelpers

/// What runs a group of writes in one transaction: the store.
package protocol WriteGroupRunner: AnyObject, Sendable {
    func runWrites(_ group: [any GroupedWrite])
}

/// One caller's write transaction, queued on a ``SerialLane`` that may run it in one
/// database transaction with the writes queued right behind it (group commit).
package protocol GroupedWrite: AnyObject, Sendable {
    /// The store the write belongs to (it holds the store, as every job on the lane does).
    var runner: any WriteGroupRunner { get }
    /// Runs the caller's closure and keeps its result; rethrows what the closure threw.
    func perform(_ transaction: any WriteTransaction) throws
    /// Hands the caller its kept result, or `failure` instead (a failed commit, a
    /// rollback of the whole group).
    func complete(failure: (any Error)?)
}

/// The closure and completion of one ``Store/submitUntypedWrite(_:completion:)`` call.
///
/// Not generic: a backend queues it without instantiating a type at run time per write
/// (``Store/submitWrite(_:completion:)`` keeps a typed result beside it, see
/// `submitWriteThroughUntyped`).
package final class PendingWrite: GroupedWrite, @unchecked Sendable {
    // @unchecked: `outcome` is written and read only by the lane's job running this write,
    // one job at a time.
    private let body: @Sendable (any WriteTransaction) throws -> Void
    private let completion: @Sendable (Result<Void, any Error>) -> Void
    private var outcome: Result<Void, any Error>?
    package let runner: any WriteGroupRunner
    /// The gate that admitted this write when it was submitted, left when it completes.
    private let gate: StoreGate?

    package init(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void,
        runner: any WriteGroupRunner,
        admittedBy gate: StoreGate? = nil
    ) {
        self.body = body
        self.completion = completion
        self.runner = runner
        self.gate = gate
    }

    package func perform(_ transaction: any WriteTransaction) throws {
        do {
            try body(transaction)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
            throw error
        }
    }

    package func complete(failure: (any Error)?) {
        gate?.leave()
        if let failure {
            completion(.failure(failure))
        } else {
            completion(outcome ?? .failure(DepotError(.storeCorrupted, "A write was completed without having run.")))
        }
    }
}

/// Runs jobs one at a time, in submission order, on the threads of a dispatch queue: the
/// writer's lane in the SQLite, LMDB and memory stores (registration, writes, closing).
///
/// Each job is its own dispatch block, queued when the one before it has finished, so the
/// task a job resumes usually runs on the thread that just finished it. For awaited
/// single saves on SQLite this was faster than a dedicated thread that spins before
/// parking, and than a serial dispatch queue.
///
/// Writes queued one behind the other are handed to their store together (up to
/// ``maximumGroup``), which runs them in one transaction: concurrent single-row writes then
/// share one commit (and its sync) instead of paying one each.
package final class SerialLane: Sendable {
    package typealias Block = @Sendable () -> Void

    /// The most writes run in one group: enough to share a sync among many callers, few
    /// enough that the first caller of a group does not wait long for the last.
    package static let maximumGroup = 32

    private enum Job: Sendable {
        case block(Block)
        case write(any GroupedWrite)
    }

    private struct State: Sendable {
        var running = false
        var jobs: [Job] = []
        var head = 0
        var stopped = false
    }

    private let state = NIOLockedValueBox(State())
    private let queue: DispatchQueue

    /// - Parameter concurrent: Whether the lane's blocks may run on any of a concurrent
    ///   queue's threads (SQLite: the task a write resumes continues on the thread that
    ///   finished it) or on a serial queue's thread (LMDB, whose readers' tail latency
    ///   suffered under the concurrent form).
    package init(label: String, concurrent: Bool = true) {
        queue = concurrent ? DispatchQueue(label: label, attributes: .concurrent) : DispatchQueue(label: label)
    }

    /// Whether nothing runs and nothing is queued. The lane marks itself idle after a job's
    /// completion has run, so a task resumed by that completion can find it still busy for
    /// a moment (it then submits its write instead of running it here).
    package var isIdle: Bool {
        state.withLockedValue { !$0.running && $0.head >= $0.jobs.count }
    }

    /// Queues a job. Returns `false` (and drops the job) once the lane has stopped.
    @discardableResult
    package func submit(_ block: @escaping Block) -> Bool {
        enqueue(.block(block))
    }

    /// Queues a write, which may run in one transaction with the writes queued next to it.
    /// Returns `false` (and drops it) once the lane has stopped.
    @discardableResult
    package func submit(write: any GroupedWrite) -> Bool {
        enqueue(.write(write))
    }

    private func enqueue(_ job: Job) -> Bool {
        let startsNow = state.withLockedValue { s -> Bool? in
            if s.stopped { return nil }
            if s.running {
                s.jobs.append(job)
                return false
            }
            s.running = true
            return true
        }
        guard let startsNow else { return false }
        if startsNow {
            if case .write(let write) = job { run(job, writes: [write]) } else { run(job, writes: []) }
        }
        return true
    }

    /// Runs `body` on the lane, after the jobs already queued, and waits for it: for a
    /// thread that is not the cooperative pool's (a store's reader) needing the writer's
    /// exclusivity for a moment. Never call it from a job of the same lane.
    ///
    /// - Throws: What `body` threw, or `closed` once the lane has stopped.
    package func runAndWait<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let outcome = NIOLockedValueBox<Result<T, any Error>?>(nil)
        let accepted = submit {
            outcome.withLockedValue { $0 = Result { try body() } }
            done.signal()
        }
        guard accepted else { throw DepotError(.closed, "The store has been closed; open a new store to continue.") }
        done.wait()
        guard let result = outcome.withLockedValue({ $0 }) else {
            throw DepotError(.closed, "The store closed before running the job; open a new store to continue.")
        }
        return try result.get()
    }

    /// Runs the jobs already queued, then refuses new ones.
    package func stop() {
        submit { [state] in state.withLockedValue { $0.stopped = true } }
    }

    /// Runs `write` on the calling thread, at once, when the lane is idle (nothing running,
    /// nothing queued): for a caller on a thread that may block (``StoreExecutor``), or a
    /// write that never blocks (the memory store's awaited writes), which then waits for no
    /// hop to the lane's thread and back. Returns `false`, without running
    /// it, when the lane is busy or stopped; submit it then.
    package func runHereIfIdle(write: any GroupedWrite) -> Bool {
        let claimed = state.withLockedValue { s -> Bool in
            if s.stopped || s.running { return false }
            s.running = true
            return true
        }
        guard claimed else { return false }
        write.runner.runWrites([write])
        continueWithQueued()
        return true
    }

    /// Runs `job`; for a write, `writes` is its group (the write itself first).
    private func run(_ job: Job, writes: [any GroupedWrite]) {
        queue.async { [self] in
            switch job {
            case .block(let block): block()
            case .write(let write): write.runner.runWrites(writes)
            }
            continueWithQueued()
        }
    }

    /// After a job: starts the next one queued (with the writes right behind it), or marks
    /// the lane idle.
    private func continueWithQueued() {
        let next = state.withLockedValue { s -> (Job, [any GroupedWrite])? in
            guard s.head < s.jobs.count else {
                s.running = false
                return nil
            }
            let job = s.jobs[s.head]
            s.head += 1
            var group: [any GroupedWrite] = []
            if case .write(let first) = job {
                group.append(first)
                while s.head < s.jobs.count, group.count < Self.maximumGroup, case .write(let more) = s.jobs[s.head] {
                    group.append(more)
                    s.head += 1
                }
            }
            if s.head == s.jobs.count {
                s.jobs.removeAll(keepingCapacity: true)
                s.head = 0
            }
            return (job, group)
        }
        if let (next, group) = next { run(next, writes: group) }
    }
}

// Work a store hands to its writer's lane: admitted by the store's gate when submitted,
// leaving it when done, refused as `closed` when the store or the lane has stopped. The one
// form of what each backend wrote around every lane job (registration, schema rewrites,
// checks, a backend's own writes).
extension SerialLane {
    /// Runs `job` on the lane as work `gate` admits now, then calls `completion` with its
    /// result, after leaving the gate. Refused by the gate, `completion` gets the gate's
    /// error; by a stopped lane, `closed`.
    package func submit<T: Sendable>(
        admittedBy gate: StoreGate, closed: @autoclosure () -> DepotError,
        _ job: @escaping @Sendable () -> Result<T, any Error>,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try gate.enter() } catch { return completion(.failure(error)) }
        let accepted = submit {
            let result = job()
            gate.leave()
            completion(result)
        }
        if !accepted {
            gate.leave()
            completion(.failure(closed()))
        }
    }

    /// Runs `job` on the lane as work `gate` admits now, and returns what it returned: the
    /// awaited form of ``submit(admittedBy:closed:_:completion:)``.
    package func run<T: Sendable>(
        admittedBy gate: StoreGate, closed: @autoclosure () -> DepotError,
        _ job: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit(admittedBy: gate, closed: closed(), { Result { try job() } }) { continuation.resume(with: $0) }
        }
    }
}
