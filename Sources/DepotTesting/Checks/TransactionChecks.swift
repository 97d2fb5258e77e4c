import DepotCore
import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// Operations, rollback, isolation and concurrency.
enum TransactionChecks {
    struct Abort: Error, Equatable {}

    static let all: [ConformanceCheck] = [
        ConformanceCheck("an operation sees its own writes and commits when it returns") { store in
            let cats = try await seededCats(store)
            let seen = try await cats.operation { context -> [Int] in
                try context.insert(Cat(id: 50, name: "Inside", weight: 1, age: 2))
                let afterInsert = try context.count()
                try context.update(Cat(id: 5, name: "Renamed", weight: 1, age: 3))
                let renamed = try context.fetchOne(id: 5)?.name == "Renamed" ? 1 : 0
                try context.delete(id: 2)
                let afterDelete = try context.count()
                let matching = try context.fetchAll(Request(\.age == 2)).count
                let exists = try context.exists(id: 2) ? 1 : 0
                return [afterInsert, renamed, afterDelete, matching, exists]
            }
            try expectEqual(seen, [11, 1, 10, 1, 0], "reads inside the operation")
            try await expectEqual(cats.count(), 10, "count after commit")
            try await expectEqual(cats.fetchOne(id: 50)?.name, "Inside", "inserted record committed")
            try await expectEqual(cats.fetchOne(id: 5)?.name, "Renamed", "update committed")
        },
        ConformanceCheck("an operation that throws rolls back everything and rethrows") { store in
            let cats = try await seededCats(store)
            do {
                try await cats.operation { context in
                    try context.insert(Cat(id: 60, name: "Doomed", weight: 1, age: 1))
                    try context.update(Cat(id: 1, name: "Changed", weight: 1, age: 1))
                    try context.delete(id: 2)
                    try context.deleteAll(where: \.age == 7)
                    throw Abort()
                }
                throw ConformanceFailure(message: "operation should have thrown", file: #fileID, line: #line)
            } catch is Abort {}
            try await expectEqual(cats.fetchAll(), fixtureCats.sorted { $0.id < $1.id }, "every record as before")
            do {
                try await cats.operation { context in
                    try context.insert(Cat(id: 61, name: "Doomed", weight: 1, age: 1))
                    try context.insert(Cat(id: 5, name: "Duplicate", weight: 1, age: 1))
                }
            } catch let error as DepotError where error.code == .duplicateKey {}
            try await expectEqual(cats.exists(id: 61), false, "a failed write rolls back the whole operation")
        },
        ConformanceCheck("a reader started before a write does not see it") { store in try await holdingAStoreThread {
            let cats = try await seededCats(store)
            let entity = try await cats.registeredEntity()
            let readerStarted = DispatchSemaphore(value: 0)
            let writerDone = DispatchSemaphore(value: 0)
            // The reader blocks inside its transaction (on the store's thread, not the
            // cooperative pool) until the writer has committed.
            async let counts: [Int] = withCheckedThrowingContinuation { continuation in
                store.submitRead({ transaction -> [Int] in
                    let before = try transaction.count(Query(all: entity))
                    readerStarted.signal()
                    _ = writerDone.wait(timeout: .now() + 10)
                    let after = try transaction.count(Query(all: entity))
                    var row = Row()
                    let sees = try transaction.fetchRow(entity, key: .int(70), into: &row) ? 1 : 0
                    return [before, after, sees]
                }) { continuation.resume(with: $0) }
            }
            guard await signalled(readerStarted, within: 60) else {
                writerDone.signal()
                throw ConformanceFailure(message: "the reader did not start within 60 s", file: #fileID, line: #line)
            }
            try await cats.insert(Cat(id: 70, name: "Late", weight: 1, age: 1))
            try await cats.delete(id: 1)
            writerDone.signal()
            try await expectEqual(counts, [10, 10, 0], "the reader's snapshot")
            try await expectEqual(cats.exists(id: 70), true, "a new reader sees the write")
        } },
        ConformanceCheck("hundreds of concurrent async calls") { store in
            let cats = Cats(store: store)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 1...200 {
                    group.addTask {
                        try await cats.save(Cat(id: Int64(i), name: "cat\(i)", weight: Double(i), age: i % 16))
                        _ = try await cats.fetchOne(id: Int64(i))
                        _ = try await cats.count(Request(\.age == i % 16))
                    }
                }
                try await group.waitForAll()
            }
            try await expectEqual(cats.count(), 200, "every save landed")
            let all = try await cats.fetchAll()
            try expectEqual(all.map(\.id), (1...200).map(Int64.init), "every cat once")
            try expect(all.allSatisfy { $0.name == "cat\($0.id)" }, "each cat intact")
            // Writes race reads: every read sees a consistent count.
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for i in 1...100 { try await cats.delete(id: Int64(i)) }
                }
                for _ in 0..<4 {
                    group.addTask {
                        for _ in 0..<25 {
                            let total = try await cats.read { context in
                                (try context.count(), try context.fetchAll().count)
                            }
                            try expectEqual(total.0, total.1, "count and fetch in one snapshot")
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await expectEqual(cats.count(), 100, "deletes landed")
        },
        ConformanceCheck("writes submitted in order commit in order") { store in
            let cats = Cats(store: store)
            try await cats.save(Cat(id: 1, name: "v0", weight: 1, age: 1))
            let done = DispatchGroup()
            for version in 1...50 {
                done.enter()
                cats.callbacks.save(Cat(id: 1, name: "v\(version)", weight: 1, age: 1)) { _ in done.leave() }
            }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                done.notify(queue: .global()) { c.resume() }
            }
            try await expectEqual(cats.fetchOne(id: 1)?.name, "v50", "the last write wins")
        },
        ConformanceCheck("a context used after its operation fails cleanly") { store in
            let cats = try await seededCats(store)
            final class Box: @unchecked Sendable { var context: Context<Cat, CatRecord>? }
            let box = Box()
            try await cats.operation { context in box.context = context }
            guard let stale = box.context else {
                throw ConformanceFailure(message: "no context", file: #fileID, line: #line)
            }
            do {
                _ = try stale.fetchAll()
                throw ConformanceFailure(message: "a stale context must not read", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expect(error.code == .closed, "stale context error \(error)")
            }
        },
        ConformanceCheck("a task preferring store.executor reads on its own thread, and reads, writes and errors behave as from any task") { store in
            let cats = try await seededCats(store)
            try await withTaskExecutorPreference(store.executor) {
                // The read's closure runs on the thread the task is on: one of the
                // executor's, where blocking is allowed, so there is no hop.
                let onExecutor = try await store.read { _ in StoreExecutor.isCurrent }
                try expect(onExecutor, "the read ran on a store executor thread")
                try await expectEqual(cats.fetchOne(id: 3)?.name, fixtureCats.first { $0.id == 3 }?.name, "fetchOne")
                try await expectEqual(cats.fetchOne(id: 999), nil, "fetchOne of a missing key")
                try await expectEqual(cats.count(), fixtureCats.count, "count")
                try await cats.save(Cat(id: 500, name: "From the executor", weight: 1, age: 1))
                try await expectEqual(cats.fetchOne(id: 500)?.name, "From the executor", "a write, then a read that sees it")
                do {
                    _ = try await store.read { _ -> Int in throw Abort() }
                    throw ConformanceFailure(message: "the read should have thrown", file: #fileID, line: #line)
                } catch is Abort {}
            }
            // Outside the preference, reads never run on the executor.
            let outside = try await store.read { _ in StoreExecutor.isCurrent }
            try expect(!outside, "a read from a task without the preference ran on the store executor")
        },
        ConformanceCheck("writes queued behind a running write each keep their own result, rollback and change set") { store in try await holdingAStoreThread {
            // Backends may run queued writes in one transaction (group commit); whether they
            // do or not, each write must commit or roll back alone, as if it ran by itself.
            let cats = try await seededCats(store)
            let entity = try await cats.registeredEntity()
            let collector = ChangeFeedChecks.Collector()
            let subscription = store.changes.observe(entities: ["Cat"]) { collector.add($0) }
            defer { subscription.cancel() }
            let queued = DispatchSemaphore(value: 0)
            let firstRunning = DispatchSemaphore(value: 0)
            let results = NIOLockedValueBox<[Int: Result<Int64, any Error>]>([:])
            let done = DispatchGroup()
            func submit(_ index: Int, _ body: @escaping @Sendable (Context<Cat, CatRecord>) throws -> Int64) {
                done.enter()
                store.submitWrite({ transaction in try body(Context<Cat, CatRecord>(transaction, entity: entity)) }) { result in
                    results.withLockedValue { $0[index] = result }
                    done.leave()
                }
            }
            // `submitWrite` must return before the write runs (this check submits, then does
            // what the write waits for): a write that finds it has not returned yet gives up
            // waiting, so a store that runs it on the caller's thread fails here at once
            // instead of waiting out the bound below.
            let returned = DispatchSemaphore(value: 0)
            let ranBeforeReturn = NIOLockedValueBox(false)
            // The first write holds the writer until the others are queued behind it.
            submit(-1) { context in
                if returned.wait(timeout: .now() + 30) == .timedOut {
                    ranBeforeReturn.withLockedValue { $0 = true }
                } else {
                    firstRunning.signal()
                    // Bounded only so that a broken store cannot hang the run (Thread
                    // Sanitizer slows submitting the others a lot).
                    _ = queued.wait(timeout: .now() + 300)
                }
                try context.insert(Cat(id: 200, name: "First", weight: 1, age: 1))
                return 200
            }
            returned.signal()
            if ranBeforeReturn.withLockedValue({ $0 }) {
                throw ConformanceFailure(message: "submitWrite ran the write on the caller's thread before returning", file: #fileID, line: #line)
            }
            guard await signalled(firstRunning, within: 300) else {
                queued.signal()
                throw ConformanceFailure(message: "the first write did not start within 300 s", file: #fileID, line: #line)
            }
            for index in 0..<20 {
                submit(index) { context in
                    let id = Int64(300 + index)
                    try context.insert(Cat(id: id, name: "Queued \(index)", weight: 1, age: 1))
                    if index % 4 == 3 {
                        // Writes, then throws: none of it may remain.
                        try context.delete(id: 1)
                        throw Abort()
                    }
                    if index == 5 {
                        // A refused statement after a successful one: the write fails whole.
                        try context.insert(Cat(id: 2, name: "Duplicate", weight: 1, age: 1))
                    }
                    return id
                }
            }
            queued.signal()
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                done.notify(queue: .global()) { c.resume() }
            }
            let outcome = results.withLockedValue { $0 }
            try expectEqual(try? outcome[-1]?.get(), 200, "the first write's result")
            var kept: [Int64] = [200]
            for index in 0..<20 {
                switch outcome[index] {
                case .success(let id)?:
                    try expect(index % 4 != 3 && index != 5, "write \(index) should have failed")
                    try expectEqual(id, Int64(300 + index), "write \(index)'s own result")
                    kept.append(id)
                case .failure(let error)?:
                    if index % 4 == 3 {
                        try expect(error is Abort, "write \(index) fails with its own error, got \(error)")
                    } else {
                        try expect(index == 5 && (error as? DepotError)?.code == .duplicateKey, "write \(index) failed: \(error)")
                    }
                case nil:
                    throw ConformanceFailure(message: "write \(index) never completed", file: #fileID, line: #line)
                }
            }
            let stored = try await cats.fetchAll().map(\.id)
            try expectEqual(stored, (fixtureCats.map(\.id) + kept).sorted(), "exactly the successful writes are kept")
            let batches = collector.all.map { $0.changes.map { "\($0.kind.rawValue) \($0.key)" } }
            try expectEqual(batches, kept.map { ["insert \($0)"] }, "one change set per successful write, in order")
        } },
        ConformanceCheck("a read transaction kept past its closure stays ended while later reads run") { store in
            // A backend may reuse its transaction objects from one read to the next; one that
            // a closure kept must not come back to life as another read's transaction.
            let cats = try await seededCats(store)
            let entity = try await cats.registeredEntity()
            final class Kept: @unchecked Sendable { var transactions: [any ReadTransaction] = [] }
            let kept = Kept()
            for round in 0..<3 {
                // Inside a later read: each kept transaction refuses, and this one works.
                let refusals = try await store.read { transaction -> [String] in
                    var refusals: [String] = []
                    for old in kept.transactions {
                        do {
                            _ = try old.count(Query(all: entity))
                            refusals.append("counted")
                        } catch let error as DepotError {
                            refusals.append(error.code == .closed ? "closed" : "\(error)")
                        }
                    }
                    _ = try transaction.count(Query(all: entity))
                    kept.transactions.append(transaction)
                    return refusals
                }
                try expectEqual(refusals, Array(repeating: "closed", count: round), "kept transactions used inside a later read")
                try await expectEqual(cats.fetchOne(id: 5)?.name, "Tom", "a lookup after a kept transaction")
            }
            for (index, transaction) in kept.transactions.enumerated() {
                try await expectError(.closed, "kept read transaction \(index)") {
                    var row = Row()
                    return try transaction.fetchRow(entity, key: .int(5), into: &row)
                }
            }
            try await expectEqual(cats.count(), fixtureCats.count, "reads after the kept transactions were used")
        },
    ]
}
