package import Dispatch
import NIOConcurrencyHelpers

/// A store's read connections (or whatever a read holds for its duration), handed out to
/// reads in arrival order; the one pool of every backend that reads on connections of its
/// own (SQLite and PostgreSQL).
///
/// A read checks a reader out, uses it on one thread at a time and checks it back in. When
/// every reader is busy the read's job waits in the pool — no thread is held while it
/// waits — and the next reader checked in runs it. Jobs run on the queue the pool's owner
/// names for each reader (a concurrent read queue, or a reader's own serial queue), or
/// right on the calling thread when that is a ``StoreExecutor`` thread, where blocking is
/// allowed and the awaiting task then goes on without a hop.
///
/// Reads run on dispatch queues, never on Swift's cooperative pool, since a read blocks its
/// thread. A dedicated thread per reader was tried first and not kept: a task resumed from
/// a thread outside dispatch's pool costs a wake-up of a pool thread on every call, where
/// from a thread of the pool it usually goes on on the thread that just finished.
///
/// The pool hands out reader numbers (`0..<count`), which its owner maps to its readers,
/// and is not generic over the reader's type: its owner, ``EngineStore``, is generic over
/// an engine no code of this module knows, so a generic pool ran unspecialized, and looked
/// up the runtime metadata of its state and closure types on every check-out and check-in.
package final class ReaderPool: Sendable {
    private struct State: Sendable {
        /// Idle readers, most recently used last: it is handed out first, with its caches
        /// warmest.
        var idle: [Int]
        /// Jobs waiting for a reader, oldest at `waitingStart`: a head index rather than
        /// `removeFirst()`, so that handing one out does not shift the others.
        var waiting: [@Sendable (Int) -> Void] = []
        var waitingStart = 0
    }

    private let state: NIOLockedValueBox<State>
    private let telemetry: StoreTelemetry?
    /// The queue each reader's jobs run on when they do not run on the calling thread.
    private let queues: [DispatchQueue]

    /// - Parameters:
    ///   - queues: The queue a job runs on with each reader, when it does not run on the
    ///     calling thread: one per reader, all idle at first.
    ///   - telemetry: Where the time a read waits for a reader goes, when metrics are on.
    package init(queues: [DispatchQueue], telemetry: StoreTelemetry?) {
        self.state = NIOLockedValueBox(State(idle: Array(queues.indices)))
        self.telemetry = telemetry
        self.queues = queues
    }

    /// An idle reader, now, or `nil` when every reader is busy. The caller checks it in.
    ///
    /// For the paths that want one block on the read queue around all they capture, or
    /// that fall back to another road when no reader is free.
    package func takeIdle() -> Int? {
        state.withLockedValue { $0.idle.popLast() }
    }

    /// Runs `job` with an idle reader now (on the calling thread when it is a
    /// ``StoreExecutor``'s, else on the reader's queue), or with the next reader checked in.
    package func checkOut(_ job: @escaping @Sendable (Int) -> Void) {
        let telemetry = self.telemetry
        let reader = state.withLockedValue { p -> Int? in
            if let reader = p.idle.popLast() { return reader }
            if let telemetry, telemetry.metrics {
                // Every reader is busy: how long this read waits for one.
                telemetry.poolWaitBegan()
                let since = DispatchTime.now().uptimeNanoseconds
                p.waiting.append { reader in
                    telemetry.poolWaited(nanoseconds: DispatchTime.now().uptimeNanoseconds &- since)
                    job(reader)
                }
            } else {
                p.waiting.append(job)
            }
            return nil
        }
        guard let reader else { return }
        run(job, with: reader)
    }

    /// Runs `job` with `reader`, which the caller has checked out: on the calling thread
    /// when it is a ``StoreExecutor``'s, else on the reader's queue.
    @inline(__always)
    package func run(_ job: @escaping @Sendable (Int) -> Void, with reader: Int) {
        if StoreExecutor.isCurrent {
            job(reader)
        } else {
            queues[reader].async { job(reader) }
        }
    }

    /// Hands `reader` to the oldest waiting job, on the reader's queue, or makes it idle.
    package func checkIn(_ reader: Int) {
        let next = state.withLockedValue { p -> (@Sendable (Int) -> Void)? in
            guard p.waitingStart < p.waiting.count else {
                p.idle.append(reader)
                return nil
            }
            let job = p.waiting[p.waitingStart]
            p.waitingStart += 1
            if p.waitingStart == p.waiting.count {
                p.waiting.removeAll(keepingCapacity: true)
                p.waitingStart = 0
            }
            return job
        }
        if let next { queues[reader].async { next(reader) } }
    }
}
