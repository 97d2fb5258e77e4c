import DepotCore
import DepotSQLite
import DepotTesting
import Foundation
import Testing

/// The shared conformance suite against a file-backed and an in-memory SQLite store, each
/// check on a fresh store.
@Suite("SQLiteStore conformance")
struct SQLiteConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func fileBacked(_ check: ConformanceCheck) async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(path: directory.appendingPathComponent("nested/store.sqlite").path, options: .init(createDirectories: true))
            try await check.runAndClose(store)
        }
    }

    @Test(arguments: ConformanceSuite.checks)
    func inMemory(_ check: ConformanceCheck) async throws {
        let store = try SQLiteStore.inMemory()
        try await check.runAndClose(store)
        #expect(!FileManager.default.fileExists(atPath: store.path), "the private database is removed on close")
    }
}
