import DepotCore
import DepotTesting
import Testing

/// The shared conformance suite against the reference backend.
@Suite("MemoryStore conformance")
struct MemoryConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        let store = MemoryStore()
        try await check.run(on: store)
        await store.close()
    }
}
