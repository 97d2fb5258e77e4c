import CSQLite
import DepotCore
import Foundation
import NIOConcurrencyHelpers

// The reader connections, handed out to reads in arrival order and used on the store's
// concurrent read queue.
extension SQLiteStore {
    /// A reader connection. Only the read that checked it out uses it, on whichever thread
    /// of the read queue runs that read (the pool's lock orders one user after the next).
    final class Reader: Sendable {
        let connection: Connection

        init(connection: Connection) {
            self.connection = connection
        }
    }

    struct Pool: Sendable {
        /// Idle readers, most recently used last: it is handed out first, with its page cache
        /// warmest.
        var idle: [Reader]
        var waiting: [@Sendable (Reader) -> Void] = []
        var waitingStart = 0
    }

    /// Runs `job` with an idle reader now (on the calling thread when it is a
    /// `StoreExecutor`'s, else on the read queue), or with the next reader handed back.
    /// Nothing blocks a thread while waiting.
    ///
    /// Reads run on a concurrent dispatch queue (not Swift's cooperative pool), at most one
    /// per reader connection. A dedicated thread per reader was measured first: resuming
    /// the awaiting task from a thread outside dispatch's pool meant waking a pool thread
    /// for every call (W4' 18-21 µs per call, W6 p99 0.7 ms); from a thread of the pool,
    /// the resumed task usually runs on the thread that just finished (8-10 µs, W6 p99
    /// 0.1-0.3 ms on the same machine).
    func checkOutReader(_ job: @escaping @Sendable (Reader) -> Void) {
        let telemetry = log.telemetry
        let reader = pool.withLockedValue { p -> Reader? in
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
        // On a thread of the store executor (a task preferring it) blocking is allowed:
        // read right here, and the awaiting task goes on without a hop.
        if StoreExecutor.isCurrent {
            job(reader)
        } else {
            readQueue.async { job(reader) }
        }
    }

    func checkIn(_ reader: Reader) {
        let next = pool.withLockedValue { p -> (@Sendable (Reader) -> Void)? in
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
        // The waiting job gets the reader next, in arrival order.
        if let next { readQueue.async { next(reader) } }
    }
}
