import DepotCore
import DepotLMDB
import DepotTesting
import Foundation
import Testing

/// A fresh directory under the system's temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() {
        path = (NSTemporaryDirectory() as NSString).appendingPathComponent("depot-lmdb-\(UUID().uuidString)")
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// The shared conformance suite against LMDBStore, each check in a fresh directory.
@Suite("LMDBStore conformance")
struct LMDBConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(directory: directory.path)
        try await check.runAndClose(store)
    }
}
