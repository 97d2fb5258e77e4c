import DepotCore
import DepotTesting
import Testing

/// Depot's whole conformance suite on a store that runs on ``SortedArrayEngine``, an engine
/// written against Depot's public API only (plain imports, nothing `package`; the same
/// file compiles in `Examples/SortedArrayEngine`, a package of its own, where nothing else
/// is in reach).
@Suite("OutsideEngine conformance")
struct OutsideEngineConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        try await check.runAndClose(EngineStore(engine: SortedArrayEngine()))
    }
}
