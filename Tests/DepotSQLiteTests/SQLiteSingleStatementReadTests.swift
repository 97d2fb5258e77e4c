import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

import DepotSQLite

/// A controller's read of one statement (a page, a count) runs that statement alone: in the
/// transaction its reader kept from the read before when nothing committed since (see
/// `KeptSnapshots`), otherwise in a new one. A read submitted as one statement that goes on
/// to a second runs again in a transaction of its own, so that both see one snapshot.
@Suite("SQLite reads of one statement")
struct SQLiteSingleStatementReadTests {
    @Test func aPageRunsAloneAndASecondStatementRunsInATransaction() async throws {
        try await withTemporaryDirectory { directory in
            let statements = SQLiteGroupCommitTests.Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let store = try SQLiteStore(path: directory.appendingPathComponent("single.sqlite").path, log: StoreLog(logger: logger))
            // However slowly the test runs, idle readers keep their transactions.
            store.pauseSnapshotSweeps(true)
            let cats = Controller<Cat, CatRecord>(store: store)
            let reference = Controller<Cat, CatRecord>(store: MemoryStore())
            let all = Cat.workload(count: 60)
            try await cats.save(all)
            try await reference.save(all)

            let request = Request<CatRecord>(\.age > 4).sorted(by: \.name).limit(7)
            // The first read after the save begins a transaction, and keeps it.
            var before = statements.all.count
            #expect(try await cats.fetchAll(request) == reference.fetchAll(request))
            var ran = Array(statements.all[before...])
            #expect(ran.filter { $0.hasPrefix("BEGIN") }.count == 1, "\(ran)")

            // With no commit since, the reads that follow run their statement only.
            before = statements.all.count
            #expect(try await cats.fetchAll(request) == reference.fetchAll(request))
            #expect(try await cats.count(request) == reference.count(request))
            ran = Array(statements.all[before...])
            #expect(ran.filter { $0.hasPrefix("SELECT") }.count == 2, "\(ran)")
            #expect(!ran.contains { $0.hasPrefix("BEGIN") || $0.hasPrefix("ROLLBACK") }, "\(ran)")

            // The same from a task preferring the store's executor, on the calling thread.
            before = statements.all.count
            let page = try await withTaskExecutorPreference(store.executor) { try await cats.fetchAll(request) }
            #expect(try await page == reference.fetchAll(request))
            ran = Array(statements.all[before...])
            #expect(ran.filter { $0.hasPrefix("SELECT") }.count == 1, "\(ran)")
            #expect(!ran.contains { $0.hasPrefix("BEGIN") || $0.hasPrefix("ROLLBACK") }, "\(ran)")

            // After a commit, the next read ends the old transaction and begins a new one.
            try await cats.save(Cat(id: 1_000, name: "Zed", weight: 4, age: 9))
            before = statements.all.count
            #expect(try await cats.fetchAll(Request(\.name == "Zed")).map(\.id) == [1_000])
            ran = Array(statements.all[before...])
            #expect(ran.filter { $0.hasPrefix("ROLLBACK") }.count == 1 && ran.filter { $0.hasPrefix("BEGIN") }.count == 1, "\(ran)")
            try await reference.save(Cat(id: 1_000, name: "Zed", weight: 4, age: 9))

            let entity = try await cats.registeredEntity()
            before = statements.all.count
            let (count, rows) = try await withCheckedThrowingContinuation { continuation in
                store.submitSingleStatementRead({ transaction -> (Int, Int) in
                    let count = try transaction.count(Query(all: entity))
                    var rows = 0
                    try transaction.fetch(Query(all: entity), reserve: { _ in }) { _ in rows += 1 }
                    return (count, rows)
                }) { continuation.resume(with: $0) }
            }
            #expect(count == all.count + 1 && rows == all.count + 1)
            ran = Array(statements.all[before...])
            #expect(ran.contains { $0.hasPrefix("BEGIN") }, "\(ran)")
            await store.close()
        }
    }
}
