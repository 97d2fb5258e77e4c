import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// The server the tests use: `make test` starts a throwaway one and passes its URL in
/// DEPOT_TEST_POSTGRES_URL. Without it the suite is skipped, unless
/// DEPOT_REQUIRE_POSTGRES=1 (as `make test` and CI set), which makes its absence a failure.
enum TestServer {
    static let url = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"]
    static let required = ProcessInfo.processInfo.environment["DEPOT_REQUIRE_POSTGRES"] == "1"
    static var available: Bool { url != nil || required }

    /// A store in a schema of its own, so every check starts empty.
    static func makeStore(schema: String = "t_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())", readers: Int = 2) throws -> PostgresStore {
        guard let url else {
            throw DepotError(.invalidConfiguration, "DEPOT_REQUIRE_POSTGRES=1 but DEPOT_TEST_POSTGRES_URL is not set: start a server with scripts/postgres-test-server.sh (make test does).")
        }
        return try PostgresStore(url: url, options: .init(schema: schema, readers: readers))
    }
}

/// One check at a time: each store holds a writer, its readers and a listener connection,
/// and a hundred checks at once would exceed the server's connection limit.
@Suite("PostgresStore conformance", .enabled(if: TestServer.available), .serialized)
struct PostgresConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        try await check.runAndClose(try TestServer.makeStore())
    }
}
