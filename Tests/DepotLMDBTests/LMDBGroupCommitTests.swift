import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

import DepotLMDB

/// Writes queued behind a running write share one transaction and one commit, each in a
/// nested transaction (the conformance suite checks that each still commits or rolls back
/// alone).
@Suite("LMDB group commit")
struct LMDBGroupCommitTests {
    /// Counts the commits the store logs at `trace`.
    final class Commits: LogHandler, @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            guard "\(event.message)" == "Write transaction committed" else { return }
            lock.lock()
            count += 1
            lock.unlock()
        }
        var total: Int {
            lock.lock()
            defer { lock.unlock() }
            return count
        }
    }

    @Test("queued writes share one commit; a group that fills the map grows it and runs again, keeping each write's outcome")
    func queuedWritesShareOneCommitAndSurviveGrowth() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let commits = Commits()
        var logger = Logger(label: "test.depot") { _ in commits }
        logger.logLevel = .trace
        let store = try LMDBStore(directory: directory.path, options: .init(mapSize: 64 << 10), log: StoreLog(logger: logger))
        let entity = try await store.register(CatRecord.entity.description)
        let initialMap = store.environment.mapSize
        let release = DispatchSemaphore(value: 0)
        let running = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let outcomes = NIOLockedValueBox<[Int: Bool]>([:])
        func submit(_ index: Int, _ body: @escaping @Sendable (Context<Cat, CatRecord>) throws -> Void) {
            done.enter()
            store.submitWrite({ try body(Context<Cat, CatRecord>($0, entity: entity)) }) { result in
                outcomes.withLockedValue { $0[index] = (try? result.get()) != nil }
                done.leave()
            }
        }
        submit(-1) { context in
            running.signal()
            // Bounded only so that a broken store cannot hang the run: the group this test
            // is about forms only if the first write waits until every other one is queued.
            _ = release.wait(timeout: .now() + 300)
            try context.save(Cat(id: 0, name: "first", weight: 1, age: 1))
        }
        try #require(await signalled(running, within: 300), "the first write started")
        let before = commits.total
        // Twenty writes of 200 cats each: far more than a 64 KiB map holds, so the group
        // fills the map, grows it and runs again from its first write.
        for index in 0..<20 {
            submit(index) { context in
                try context.save(Cat.workload(count: 200, seed: UInt64(index + 1)).map {
                    Cat(id: Int64(1_000 * (index + 1)) + $0.id % 1_000, name: $0.name, weight: $0.weight, age: $0.age)
                })
                if index == 7 { throw CancellationError() }
            }
        }
        release.signal()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            done.notify(queue: .global()) { c.resume() }
        }
        let outcome = outcomes.withLockedValue { $0 }
        #expect(outcome[-1] == true)
        for index in 0..<20 { #expect(outcome[index] == (index != 7), "write \(index)") }
        #expect(store.environment.mapSize > initialMap, "the map grew")
        // The first write's commit and one per group of queued writes (20 fit one group).
        #expect(commits.total - before == 2, "\(commits.total - before) commits")
        let ids = try await Controller<Cat, CatRecord>(store: store).fetchAll().map(\.id)
        var expected: Set<Int64> = [0]
        for index in 0..<20 where index != 7 {
            for cat in Cat.workload(count: 200, seed: UInt64(index + 1)) { expected.insert(Int64(1_000 * (index + 1)) + cat.id % 1_000) }
        }
        #expect(ids == expected.sorted())
        await store.close()
    }

    @Test func anIdleWriterRunsAWriteFromTheStoreExecutorOnItsThread() async throws {
        try await withStore { store, _ in
            let entity = try await store.register(CatRecord.entity.description)
            // The registration's write resumed this task from the lane's thread, which marks
            // the lane idle only after that: under Thread Sanitizer, with every suite at
            // once, this task once got here first and its write went to the lane.
            #expect(try await waitUntilIdle(store.writerLane), "the writer's lane became idle")
            let here = try await withTaskExecutorPreference(store.executor) {
                try await store.write { transaction in
                    try Context<Cat, CatRecord>(transaction, entity: entity).save(Cat(id: 1, name: "here", weight: 1, age: 1))
                    return StoreExecutor.isCurrent
                }
            }
            #expect(here, "the write ran on the executor's thread, not the writer's lane")
            #expect(try await waitUntilIdle(store.writerLane), "the writer's lane became idle")
            let elsewhere = try await store.write { _ in StoreExecutor.isCurrent }
            #expect(!elsewhere, "without the preference the write runs on the lane")
            #expect(try await Controller<Cat, CatRecord>(store: store).count() == 1)
        }
    }
}
