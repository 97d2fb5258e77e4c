package import DepotCore

// What Depot's own tests look at inside an LMDB store: package members, so the tests need
// no `@testable import`.
extension EngineStore where Engine == LMDBEngine {
    /// How many catalog changes were published: two per registration or rewrite (begun,
    /// then done), so an even count means none is half-published.
    package var catalogVersion: UInt64 { engine.catalog.version }

    /// The store's LMDB environment.
    package var environment: Environment { engine.environment }
}

extension EngineStore where Engine == LMDBEngine {
    /// The map size `size` opens with: rounded up to whole pages.
    package static func roundedMapSize(_ size: Int) -> Int { LMDBEngine.roundedMapSize(size) }
}
