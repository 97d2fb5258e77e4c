import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import InMemoryLogging
import Logging
import Testing

/// The server's notices go to the store's logger, not to the process's standard error
/// (libpq's default).
@Suite("PostgresStore notices", .enabled(if: TestServer.available))
struct PostgresNoticeTests {
    @Test("a notice the server sends during a migration is logged at debug")
    func noticesAreLogged() async throws {
        guard let url = TestServer.url else {
            Issue.record("DEPOT_TEST_POSTGRES_URL is needed")
            return
        }
        // The schema step's rewrite drops its staging table if a failed run left one: the
        // server answers that `DROP TABLE IF EXISTS` with a NOTICE (SQLSTATE 00000).
        let check = try #require(ConformanceSuite.checks.first { $0.name.hasPrefix("schema steps retype") })
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "depot.test") { _ in handler }
        logger.logLevel = .debug
        let schema = "n_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try PostgresStore(url: url, options: .init(schema: schema), log: StoreLog(logger: logger))
        try await check.runAndClose(store)
        let notices = handler.entries.filter { "\($0.message)".hasPrefix("PostgreSQL notice:") }
        #expect(notices.contains { "\($0.message)".contains("depot_rewrite") && $0.level == .debug }, "\(handler.entries.map { "\($0.level) \($0.message)" })")
        #expect(notices.allSatisfy { $0.metadata["postgres.sqlstate"] == .string("00000") })
    }
}
