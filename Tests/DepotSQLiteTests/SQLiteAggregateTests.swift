import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

import DepotSQLite

/// SQLite computes aggregates in SQL (the conformance suite checks the answers).
@Suite("SQLite aggregates")
struct SQLiteAggregateTests {
    @Test func groupedAggregatesRunAsOneGroupByStatement() async throws {
        try await withTemporaryDirectory { directory in
            let statements = SQLiteGroupCommitTests.Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let store = try SQLiteStore(path: directory.appendingPathComponent("aggregate.sqlite").path, log: StoreLog(logger: logger))
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.fixtures)
            let before = statements.all.count
            let groups = try await cats.aggregate([.count, .sum(\.weight), .maximum(\.name)], groupedBy: [\.age], Request(\.age > 1))
            #expect(try groups.map { try $0.key(\.age) } == [3, 7, 12, 15])
            #expect(try groups.map { try $0[.count, as: Int.self] } == [2, 3, 2, 1])
            // The read's snapshot pin aside, one statement.
            let selects = statements.all[before...].filter { $0.hasPrefix("SELECT") && !$0.contains("sqlite_master") }
            #expect(selects.count == 1, "\(selects)")
            #expect(selects.first?.contains("GROUP BY") == true && selects.first?.contains("depot_accumulate") == true, "\(selects)")
            await store.close()
        }
    }
}
