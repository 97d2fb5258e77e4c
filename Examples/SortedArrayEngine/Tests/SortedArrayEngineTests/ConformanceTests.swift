import DepotCore
import DepotTesting
import SortedArrayEngine
import Testing

/// Depot's conformance suite, every check, on a store that runs on the sorted-array engine.
@Suite("SortedArrayEngine conformance")
struct SortedArrayConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        try await check.runAndClose(EngineStore(engine: SortedArrayEngine()))
    }
}
