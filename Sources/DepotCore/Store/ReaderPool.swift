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
package final class ReaderPool<Reader: Sendable>: Sendable {
    private struct State: Sendable {
        /// Idle readers, most recently used last: it is handed out first, with its caches
        /// warmest.
        var idle: [Reader]
        /// Jobs waiting for a reader, oldest at `waitingStart`: a head index rather than
        /// `removeFirst()`, so that handing one out does not shift the others.
        var waiting: [@Sendable (Reader) -> Void] = []
        var waitingStart = 0
    }

    private let state: NIOLockedValueBox<State>
    private let telemetry: StoreTelemetry?
    private let queue: @Sendable (Reader) -> DispatchQueue

    /// - Parameters:
    ///   - readers: Every reader of the store, all idle.
    ///   - telemetry: Where the time a read waits for a reader goes, when metrics are on.
    ///   - queue: The queue a job runs on with a given reader, when it does not run on the
    ///     calling thread.
    package init(_ readers: [Reader], telemetry: StoreTelemetry?, queue: @escaping @Sendable (Reader) -> DispatchQueue) {
        self.state = NIOLockedValueBox(State(idle: readers))
        self.telemetry = telemetry
        self.queue = queue
    }

    /// An idle reader, now, or `nil` when every reader is busy. The caller checks it in.
    ///
    /// For the paths that want one block on the read queue around all they capture, or
    /// that fall back to another road when no reader is free.
    package func takeIdle() -> Reader? {
        state.withLockedValue { $0.idle.popLast() }
    }

    /// Runs `job` with an idle reader now (on the calling thread when it is a
    /// ``StoreExecutor``'s, else on the reader's queue), or with the next reader checked in.
    package func checkOut(_ job: @escaping @Sendable (Reader) -> Void) {
        let telemetry = self.telemetry
        let reader = state.withLockedValue { p -> Reader? in
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
    package func run(_ job: @escaping @Sendable (Reader) -> Void, with reader: Reader) {
        if StoreExecutor.isCurrent {
            job(reader)
        } else {
            queue(reader).async { job(reader) }
        }
    }

    /// Hands `reader` to the oldest waiting job, on the reader's queue, or makes it idle.
    package func checkIn(_ reader: Reader) {
        let next = state.withLockedValue { p -> (@Sendable (Reader) -> Void)? in
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
        if let next { queue(reader).async { next(reader) } }
    }
}
