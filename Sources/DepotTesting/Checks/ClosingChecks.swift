import DepotCore
import Foundation
import NIOConcurrencyHelpers

/// Closing, the same on every backend: which work is admitted around ``Store/close()``, and
/// when observers' feeds end.
///
/// The contract the checks pin (with the check in ``ErrorChecks`` that work submitted
/// before `close()` runs to its end):
/// - work is admitted when it is submitted, not when it runs: once admitted it completes,
///   however long it waited in a queue;
/// - once `close()` has begun, new work is refused with ``DepotError/Code/closed`` at
///   once, without waiting for the admitted work to drain, and never silently dropped;
/// - `close()` returns after the admitted work has ended and after the change feed has
///   finished, every admitted commit delivered before the feed's end; a second `close()`
///   returns no sooner, nor before the store's resources are released, even when it was
///   called while another call was closing. Each backend finishes the feed before it
///   releases its files or connections, so an observer never outlives the store's resources.
enum ClosingChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("once close() has begun, new work is refused with closed at once, and admitted work still commits") { store in
            let cats = try await seededCats(store)
            let handle = try await cats.registeredEntity()
            let heard = NIOLockedValueBox<Set<Value>>([])
            let subscription = store.changes.observe(entities: ["Cat"]) { batch in
                heard.withLockedValue { keys in for change in batch.changes { keys.insert(change.key) } }
            }
            let started = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let held = answer(of: Void.self) { done in
                store.submitWrite({ transaction in
                    started.signal()
                    // Held until the check has seen close() begin: the admitted work that
                    // close() waits for. The wait is bounded so a failed check ends.
                    _ = release.wait(timeout: .now() + .seconds(120))
                    try transaction.insert(try row(500), into: handle)
                }, completion: done)
            }
            try expect(await signalled(started, within: 120), "the first write runs")
            // Queued behind the held write, and submitted before close(): admitted.
            let queued = answer(of: Void.self) { done in
                store.submitWrite({ try $0.insert(try row(501), into: handle) }, completion: done)
            }
            let closeReturned = NIOLockedValueBox(false)
            let closing = Task {
                await store.close()
                closeReturned.withLockedValue { $0 = true }
            }
            // close() has begun once the store refuses work: probe with reads until then.
            // Reads never wait for the held write, on any backend.
            var refusal: (any Error)?
            for _ in 0..<12_000 {
                let probe = answer(of: Int.self) { done in store.submitRead({ try $0.count(Query(all: handle)) }, completion: done) }
                if case .failure(let error) = try await probe.result("a read probing for close()") {
                    refusal = error
                    break
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            try expectEqual((refusal as? DepotError)?.code, .closed, "the first refused read (\(String(describing: refusal)))")
            try expect(!closeReturned.withLockedValue { $0 }, "close() waits for the write it admitted")

            // Refused now, while the admitted write still holds the writer: a refusal does
            // not wait for the store to drain.
            let late = [
                answer(of: Void.self) { done in store.submitWrite({ try $0.insert(try row(502), into: handle) }, completion: done) },
                answer(of: Void.self) { done in store.submitRead({ _ = try $0.count(Query(all: handle)) }, completion: done) },
            ]
            for (index, attempt) in late.enumerated() {
                let result = try await attempt.result("work submitted after close() began (\(index))")
                guard case .failure(let error) = result else {
                    throw ConformanceFailure(message: "work submitted after close() began ran (\(index))", file: #fileID, line: #line)
                }
                try expectEqual((error as? DepotError)?.code, .closed, "work submitted after close() began (\(index)): \(error)")
            }
            // Every road a controller takes is refused alike.
            try await expectError(.closed, "fetchAll after close() began") { try await cats.fetchAll() }
            try await expectError(.closed, "fetchOne after close() began") { try await cats.fetchOne(id: 1) }
            try await expectError(.closed, "count after close() began") { try await cats.count() }
            try await expectError(.closed, "save after close() began") { try await cats.save(Cat(id: 503, name: "late", weight: 1, age: 1)) }
            try expect(!closeReturned.withLockedValue { $0 }, "close() still waits for the write it admitted")

            release.signal()
            try await RobustnessChecks.within(120, "close() returns once the admitted work ended") { await closing.value }
            for (name, attempt) in [("the held write", held), ("the write queued behind it", queued)] {
                let result = try await attempt.result(name)
                if case .failure(let error) = result {
                    throw ConformanceFailure(message: "\(name), admitted before close(), failed: \(error)", file: #fileID, line: #line)
                }
            }
            let keys = heard.withLockedValue { $0 }
            try expect(keys.isSuperset(of: [.int(500), .int(501)]), "observers heard the admitted writes: \(keys.sorted())")
            try expect(!keys.contains(.int(502)) && !keys.contains(.int(503)), "the refused writes wrote nothing: \(keys.sorted())")
            subscription.cancel()
        },
        ConformanceCheck("observers' feeds end before close() returns, after every admitted commit, however many close() calls") { store in
            let cats = try await seededCats(store)
            let handle = try await cats.registeredEntity()
            // What an observer saw, in order: each committed key, then the end of its feed.
            let events = NIOLockedValueBox<[String]>([])
            let returnedBeforeFinish = NIOLockedValueBox<Int?>(nil)
            let returned = NIOLockedValueBox(0)
            let subscription = store.changes.observe(entities: ["Cat"], onFinish: {
                returnedBeforeFinish.withLockedValue { $0 = returned.withLockedValue { $0 } }
                events.withLockedValue { $0.append("end") }
            }) { batch in
                events.withLockedValue { events in for change in batch.changes { events.append("\(change.key)") } }
            }
            let stream = store.changes.stream(entities: ["Cat"])
            let count = 20
            let writes = (0..<count).map { n in
                answer(of: Void.self) { done in store.submitWrite({ try $0.insert(try row(600 + Int64(n)), into: handle) }, completion: done) }
            }
            // Two callers close at once; neither returns before the feed has ended.
            let closers = (0..<2).map { _ in
                Task { () -> Bool in
                    await store.close()
                    let ended = events.withLockedValue { $0.last == "end" }
                    returned.withLockedValue { $0 += 1 }
                    return ended
                }
            }
            for closer in closers {
                let ended = try await RobustnessChecks.within(120, "close() returns") { await closer.value }
                try expect(ended, "the observers' feed had ended when close() returned")
            }
            try expectEqual(returnedBeforeFinish.withLockedValue { $0 }, 0, "close() calls returned before the feed ended")
            for (n, write) in writes.enumerated() {
                if case .failure(let error) = try await write.result("write \(n)") {
                    throw ConformanceFailure(message: "write \(n), submitted before close(), failed: \(error)", file: #fileID, line: #line)
                }
            }
            let seen = events.withLockedValue { $0 }
            let written = (0..<count).map { "\(Value.int(600 + Int64($0)))" }
            try expectEqual(seen.last, "end", "the feed ends last")
            try expectEqual(seen.filter { $0 == "end" }.count, 1, "the feed ends once")
            try expect(Set(written).isSubset(of: Set(seen.dropLast())), "every commit delivered before the feed's end: \(seen)")
            // A stream opened before close() ends too, after the commits it was owed.
            let streamed = try await RobustnessChecks.within(60, "the change stream ends after close()") {
                var keys: Set<String> = []
                for await batch in stream { for change in batch.changes { keys.insert("\(change.key)") } }
                return keys
            }
            try expect(Set(written).isSubset(of: streamed), "the stream delivered every commit before ending")
            subscription.cancel()
        },
        ConformanceCheck("a close() called while another is closing returns only after the store is closed") { store in
            let cats = try await seededCats(store)
            // The closing call ends the feed before it releases the store's resources: an
            // observer whose onFinish waits holds it between the two, still releasing.
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let releasing = NIOLockedValueBox(true)
            let subscription = store.changes.observe(entities: ["Cat"], onFinish: {
                entered.signal()
                // Bounded, so a failed check ends.
                _ = release.wait(timeout: .now() + .seconds(120))
                releasing.withLockedValue { $0 = false }
            }) { _ in }
            // What each close() call found when it returned: whether the first was still
            // held before releasing.
            let returnedWhileReleasing = NIOLockedValueBox<[Bool]>([])
            // The first call blocks in onFinish: on a thread of its own, not Swift's pool.
            let first = Task(executorPreference: OwnThreadExecutor()) {
                await store.close()
                returnedWhileReleasing.withLockedValue { $0.append(releasing.withLockedValue { $0 }) }
            }
            try expect(await signalled(entered, within: 120), "close() ends the observers' feeds")
            let second = Task {
                await store.close()
                returnedWhileReleasing.withLockedValue { $0.append(releasing.withLockedValue { $0 }) }
            }
            // A second call that does not wait returns in this time; one that waits is
            // released below whatever the time, so the check cannot fail on a slow machine.
            for _ in 0..<200 where returnedWhileReleasing.withLockedValue({ $0.isEmpty }) {
                try await Task.sleep(for: .milliseconds(2))
            }
            release.signal()
            try await RobustnessChecks.within(120, "both close() calls return") {
                await first.value
                await second.value
            }
            let found = returnedWhileReleasing.withLockedValue { $0 }
            try expectEqual(found, [false, false], "close() calls that returned while the first was still closing (true)")
            try await expectError(.closed, "count after both close() calls returned") { try await cats.count() }
            subscription.cancel()
        },
    ]

    /// A cat's row with `id`, for writes submitted through ``Store`` directly.
    static func row(_ id: Int64) throws -> Row {
        var row = Row()
        try CatRecord(id: id, name: "Closing \(id)", weight: 1, age: 1).encode(into: &row)
        return row
    }

    /// The answer to work submitted with a completion handler, awaited off Swift's pool so
    /// that a store that never answers fails the check instead of hanging it.
    final class Answer<T: Sendable>: Sendable {
        private let value = NIOLockedValueBox<Result<T, any Error>?>(nil)
        private let answered = DispatchSemaphore(value: 0)

        func complete(_ result: Result<T, any Error>) {
            value.withLockedValue { $0 = result }
            answered.signal()
        }

        func result(_ what: String, file: String = #fileID, line: Int = #line) async throws -> Result<T, any Error> {
            if await signalled(answered, within: 120), let result = value.withLockedValue({ $0 }) {
                answered.signal()
                return result
            }
            throw ConformanceFailure(message: "\(what): no answer", file: file, line: line)
        }
    }

    static func answer<T: Sendable>(
        of: T.Type, _ submit: (@escaping @Sendable (Result<T, any Error>) -> Void) -> Void
    ) -> Answer<T> {
        let answer = Answer<T>()
        submit { answer.complete($0) }
        return answer
    }
}

/// Runs each job on a thread of its own: for a check whose task blocks a thread, which on
/// Swift's pool (one thread per core) would hold up the tasks the check waits for.
private final class OwnThreadExecutor: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        let thread = Thread { job.runSynchronously(on: executor) }
        thread.name = "depot.conformance.closing"
        thread.start()
    }
}
