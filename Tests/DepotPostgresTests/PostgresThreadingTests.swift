import DepotCore
import DepotPostgres
import DepotTesting
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Testing

/// Every PostgreSQL call waits for the server. On Linux, dispatch's global concurrent queue
/// and Swift's tasks share one set of worker threads (one per core), and libdispatch adds a
/// thread for a blocked one only about a second later; so calls that waited there would
/// hold back every task queued behind them. The store's connections run on threads of their
/// own, which libdispatch starts at once.
@Suite("PostgresStore threads", .enabled(if: TestServer.available))
struct PostgresThreadingTests {
    /// Checked where the transactions run, not by timing a task on the shared threads: with
    /// every suite running at once on 2 cores, a task created here once waited over 3 s
    /// behind other suites' work, whatever the store did. Each transaction notes when it
    /// started, on its own thread: on threads of their own all nine start within
    /// milliseconds of being submitted; on the shared threads the ninth would wait for
    /// libdispatch to add seven (about seven seconds on 2 cores).
    @Test("transactions waiting on the server each have a thread at once, none of the threads Swift's tasks share")
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
        // When each transaction started, and the name of the thread it ran on.
        let starts = NIOLockedValueBox<[(at: DispatchTime, thread: String)]>([])
        @Sendable func noteStart() {
            let thread = currentThreadName()
            starts.withLockedValue { $0.append((DispatchTime.now(), thread)) }
            started.signal()
        }
        let submitted = DispatchTime.now()
        // Every reader connection and the writer, each inside a transaction it keeps open
        // (bounded only so that a broken store cannot hang the run).
        for _ in 0..<readers {
            finished.enter()
            store.submitRead({ transaction -> Int in
                noteStart()
                let count = try transaction.count(Query(all: entity))
                _ = release.wait(timeout: .now() + 300)
                return count
            }) { result in
                if case .failure(let error) = result { failures.withLockedValue { $0.append("read: \(error)") } }
                finished.leave()
            }
        }
        finished.enter()
        store.submitWrite({ transaction -> Void in
            noteStart()
            _ = try transaction.count(Query(all: entity))
            _ = release.wait(timeout: .now() + 300)
        }) { result in
            if case .failure(let error) = result { failures.withLockedValue { $0.append("write: \(error)") } }
            finished.leave()
        }
        var allStarted = true
        for _ in 0...readers where !(await signalled(started, within: 300)) { allStarted = false }
        for _ in 0...readers { release.signal() }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in finished.notify(queue: .global()) { c.resume() } }
        #expect(allStarted, "every connection's transaction started")
        #expect(failures.withLockedValue { $0 } == [])
        let noted = starts.withLockedValue { $0 }
        #expect(noted.count == readers + 1)
        #if os(Linux)
        // libdispatch on Linux names a worker thread after its root queue, keeping the
        // name's last 15 bytes (the kernel's limit): Swift's tasks run on the root queues without
        // overcommit ("com.apple.root.default-qos" reads "oot.default-qos"); a serial
        // queue of its own runs on an overcommit one ("...-qos.overcommit").
        let taskThread = await Task.detached { currentThreadName() }.value
        #expect(taskThread.hasSuffix("-qos"), "a task's thread is named after its root queue: \(taskThread)")
        let shared = noted.filter { $0.thread.hasSuffix("-qos") }
        #expect(shared.isEmpty, "transactions ran on the threads Swift's tasks run on: \(shared.map(\.thread))")
        #endif
        // A bound far above threads of their own (milliseconds) and far below shared threads
        // (a second per added thread): what the machine's load adds here is the operating
        // system's scheduling of a started thread, not a queue of other suites' tasks. Not
        // under Thread Sanitizer, where starting nine connections' threads on a loaded
        // machine can take seconds of its own; the thread names above guard the defect there.
        if !TestScale.underThreadSanitizer, let last = noted.map(\.at.uptimeNanoseconds).max() {
            let seconds = Double(last - min(last, submitted.uptimeNanoseconds)) / 1e9
            #expect(seconds < 3, "the last of nine transactions started \(seconds) s after they were submitted")
        }
        await store.close()
    }
}

#if os(Linux)
/// The calling thread's name as the kernel keeps it (at most 15 bytes, the end of a
/// longer name), read from procfs: Glibc's `pthread_getname_np` does not import here.
private func currentThreadName() -> String {
    let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
    return name.trimmingCharacters(in: .whitespacesAndNewlines)
}
#endif
