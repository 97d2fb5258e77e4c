import DepotCore
import NIOConcurrencyHelpers

/// The registry a transaction resolves handles in, shared among the transactions that
/// began while it was current (see ``SharedRegistry``).
typealias CatalogSnapshot = SharedRegistry<RegisteredEntity>

/// The store's registry of entities behind one lock, with the snapshot transactions take.
///
/// Changes go through ``mutate(_:)``; transactions that begin between two changes share one
/// snapshot (``SharingRegistry``).
final class CatalogCell: Sendable {
    private let state = NIOLockedValueBox(SharingRegistry<RegisteredEntity>())

    /// A copy of the registry as it is now.
    var registry: EntityRegistry<RegisteredEntity> { state.withLockedValue { $0.registry } }

    /// The shared snapshot of the registry as it is now.
    var snapshot: CatalogSnapshot { state.withLockedValue { $0.snapshot() } }

    /// Runs `body` with the current snapshot while no change can be published: for
    /// beginning an LMDB transaction whose database snapshot must match it (changes publish
    /// with their commit, under the same lock).
    func withSnapshot<T>(_ body: (CatalogSnapshot) throws -> T) rethrows -> T {
        try state.withLockedValue { try body($0.snapshot()) }
    }

    /// Changes the registry; transactions that begin afterwards see the change.
    func mutate<T>(_ body: (inout EntityRegistry<RegisteredEntity>) throws -> T) rethrows -> T {
        try state.withLockedValue { try body(&$0.registry) }
    }
}
