// What Depot's own tests look at inside an LMDB store: package members, so the tests need
// no `@testable import`.
extension LMDBStore {
    /// How many catalog changes were published: two per registration or rewrite (begun,
    /// then done), so an even count means none is half-published.
    package var catalogVersion: UInt64 { catalog.version }
}
