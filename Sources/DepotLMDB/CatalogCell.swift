import DepotCore
import NIOConcurrencyHelpers

/// The registry a transaction resolves handles in, shared among the transactions that
/// began while it was current (see ``SharedRegistry``).
typealias CatalogSnapshot = SharedRegistry<RegisteredEntity>

/// The store's registry of entities behind one lock, with the snapshot transactions take.
///
/// Changes go through ``mutate(_:)``, which drops the shared snapshot; the next transaction
/// makes a new one. Between changes (almost always) every transaction shares one.
final class CatalogCell: Sendable {
    private struct State: Sendable {
        var registry = EntityRegistry<RegisteredEntity>()
        var snapshot: CatalogSnapshot?

        mutating func current() -> CatalogSnapshot {
            if let snapshot { return snapshot }
            let made = CatalogSnapshot(registry)
            snapshot = made
            return made
        }
    }

    private let state = NIOLockedValueBox(State())

    /// A copy of the registry as it is now.
    var registry: EntityRegistry<RegisteredEntity> { state.withLockedValue { $0.registry } }

    /// The shared snapshot of the registry as it is now.
    var snapshot: CatalogSnapshot { state.withLockedValue { $0.current() } }

    /// Runs `body` with the current snapshot while no change can be published: for
    /// beginning an LMDB transaction whose database snapshot must match it (changes publish
    /// with their commit, under the same lock).
    func withSnapshot<T>(_ body: (CatalogSnapshot) throws -> T) rethrows -> T {
        try state.withLockedValue { try body($0.current()) }
    }

    /// Changes the registry; transactions that begin afterwards see the change.
    func mutate<T>(_ body: (inout EntityRegistry<RegisteredEntity>) throws -> T) rethrows -> T {
        try state.withLockedValue { state in
            state.snapshot = nil
            return try body(&state.registry)
        }
    }
}
