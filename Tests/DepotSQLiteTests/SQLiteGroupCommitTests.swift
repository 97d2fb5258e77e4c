import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

import DepotSQLite

/// Writes queued behind a running write share one transaction and one commit (the
/// conformance suite checks that each still commits or rolls back alone).
@Suite("SQLite group commit")
struct SQLiteGroupCommitTests {
    /// Collects the SQL statements SQLite traces (the logger at `trace`).
    final class Statements: LogHandler, @unchecked Sendable {
        private let lock = NSLock()
        private var collected: [String] = []
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            guard case .string(let sql)? = event.metadata?["depot.sql"] else { return }
            lock.lock()
            collected.append(sql)
            lock.unlock()
        }
        var all: [String] {
            lock.lock()
            defer { lock.unlock() }
            return collected
        }
    }

    @Test func queuedWritesShareOneCommit() async throws {
        try await withTemporaryDirectory { directory in
            let statements = Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let store = try SQLiteStore(path: directory.appendingPathComponent("group.sqlite").path, log: StoreLog(logger: logger))
            let entity = try await store.register(CatRecord.entity.description)
            let release = DispatchSemaphore(value: 0)
            let running = DispatchSemaphore(value: 0)
            let done = DispatchGroup()
            let failures = NIOLockedValueBox(0)
            func submit(_ body: @escaping @Sendable (Context<Cat, CatRecord>) throws -> Void) {
                done.enter()
                store.submitWrite({ try body(Context<Cat, CatRecord>($0, entity: entity)) }) { result in
                    if case .failure = result { failures.withLockedValue { $0 += 1 } }
                    done.leave()
                }
            }
            submit { context in
                running.signal()
                // Bounded only so that a broken store cannot hang the run: the groups this
                // test counts form only if this write waits until every other one is queued.
                _ = release.wait(timeout: .now() + 300)
                try context.save(Cat(id: 0, name: "first", weight: 1, age: 1))
            }
            try #require(await signalled(running, within: 300), "the first write started")
            let before = statements.all.count
            for id in 1...40 { submit { try $0.save(Cat(id: Int64(id), name: "queued", weight: 1, age: 1)) } }
            release.signal()
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                done.notify(queue: .global()) { c.resume() }
            }
            #expect(failures.withLockedValue { $0 } == 0)
            let after = statements.all[before...]
            let commits = after.filter { $0 == "COMMIT" }.count
            let savepoints = after.filter { $0.hasPrefix("SAVEPOINT") }.count
            // The first write commits alone; the 40 queued behind it run in groups of at most
            // SerialLane.maximumGroup, each write in a savepoint, one commit per group.
            #expect(savepoints == 40)
            #expect(commits == 1 + (40 + SerialLane.maximumGroup - 1) / SerialLane.maximumGroup, "\(commits) commits")
            #expect(try await Controller<Cat, CatRecord>(store: store).count() == 41)
            await store.close()
        }
    }

    @Test func anIdleWriterRunsAWriteFromTheStoreExecutorOnItsThread() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(path: directory.appendingPathComponent("inline.sqlite").path)
            let entity = try await store.register(CatRecord.entity.description)
            // As in LMDB's test: the registration's write resumed this task before the lane
            // marked itself idle.
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
            await store.close()
        }
    }
}
