import DepotCore
import DepotPostgres
import DepotTesting
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Testing

/// Every PostgreSQL call waits for the server. On Linux, dispatch's global concurrent queue
/// and Swift's tasks share one set of worker threads (one per core), and libdispatch adds a
/// thread for a blocked one only about a second later; so calls that wait there hold back
/// every task queued behind them. The store's connections run on threads of their own.
@Suite("PostgresStore threads", .enabled(if: TestServer.available))
struct PostgresThreadingTests {
    @Test("transactions waiting on the server hold back no task queued after them")
    func waitingTransactionsLeaveTasksRunning() async throws {
        let readers = 8
        let store = try TestServer.makeStore(readers: readers)
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.save(Account(id: 1, balance: 10, owner: "a"))
        let entity = try await accounts.registeredEntity()
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let failures = NIOLockedValueBox<[String]>([])
        // Every reader connection and the writer, each inside a transaction it keeps open
        // (bounded only so that a broken store cannot hang the run), submitted from here
        // before the task below is created: on shared threads that task would queue behind
        // them until libdispatch had added a thread for each (seven seconds on 2 cores).
        for _ in 0..<readers {
            finished.enter()
            store.submitRead({ transaction -> Int in
                let count = try transaction.count(Query(all: entity))
                started.signal()
                _ = release.wait(timeout: .now() + 300)
                return count
            }) { result in
                if case .failure(let error) = result { failures.withLockedValue { $0.append("read: \(error)") } }
                finished.leave()
            }
        }
        finished.enter()
        store.submitWrite({ transaction -> Void in
            _ = try transaction.count(Query(all: entity))
            started.signal()
            _ = release.wait(timeout: .now() + 300)
        }) { result in
            if case .failure(let error) = result { failures.withLockedValue { $0.append("write: \(error)") } }
            finished.leave()
        }
        let probe = DispatchSemaphore(value: 0)
        Task.detached { probe.signal() }
        // A bound, not a speed: the task runs at once or, on shared threads, after seconds.
        let probeRan = await signalled(probe, within: 3)
        var allStarted = true
        for _ in 0...readers where !(await signalled(started, within: 300)) { allStarted = false }
        for _ in 0...readers { release.signal() }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in finished.notify(queue: .global()) { c.resume() } }
        #expect(probeRan, "a task created while every connection waited ran within 3 s")
        #expect(allStarted, "every connection's transaction started")
        #expect(failures.withLockedValue { $0 } == [])
        await store.close()
    }
}
