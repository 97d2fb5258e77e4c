import CSQLite
import DepotCore
import Foundation
import NIOConcurrencyHelpers

// The reader connections: each on its own thread, handed out to reads in arrival order.
extension SQLiteStore {
    /// A reader connection and the thread that uses it.
    final class Reader: Sendable {
        let connection: Connection
        let worker: Worker

        init(connection: Connection, worker: Worker) {
            self.connection = connection
            self.worker = worker
        }
    }

    struct Pool: Sendable {
        /// Idle readers, most recently used last: it is handed out first, while its worker
        /// is still spinning.
        var idle: [Reader]
        var waiting: [@Sendable (Reader) -> Void] = []
        var waitingStart = 0
    }

    /// Runs `job` on an idle reader's thread now, or on the next reader handed back.
    /// Nothing blocks a thread while waiting.
    func checkOutReader(_ job: @escaping @Sendable (Reader) -> Void) {
        let reader = pool.withLockedValue { p -> Reader? in
            if let reader = p.idle.popLast() { return reader }
            p.waiting.append(job)
            return nil
        }
        if let reader { reader.worker.submit { job(reader) } }
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
        // Still on this reader's thread: run the waiting job next, in order.
        if let next { reader.worker.submit { next(reader) } }
    }
}
