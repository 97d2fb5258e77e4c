import DepotCore
import NIOConcurrencyHelpers
import Synchronization

/// The registry a transaction resolves handles in, shared among the transactions that
/// began while it was current (see ``SharedRegistry``).
typealias CatalogSnapshot = SharedRegistry<RegisteredEntity>

/// The store's registry of entities behind one lock, with the snapshot transactions take.
///
/// Changes go through ``mutate(_:)``; transactions that begin between two changes share one
/// snapshot (``SharingRegistry``).
final class CatalogCell: Sendable {
    private let state = NIOLockedValueBox(SharingRegistry<RegisteredEntity>())
    /// Counts changes, twice each: odd while one is being made (with the commit that
    /// publishes it), even otherwise. A read that saw the same even value before and after
    /// beginning its LMDB transaction began it between two changes, so the snapshot it kept
    /// from that value belongs to it, and it needs no lock (see `LMDBStore.beginRead`).
    private let changes = Atomic<UInt64>(0)

    /// The current value of the change count (odd: a change is being made).
    var version: UInt64 { changes.load(ordering: .sequentiallyConsistent) }

    /// The shared snapshot and the (even) version it belongs to.
    var versionedSnapshot: (CatalogSnapshot, UInt64) {
        state.withLockedValue { ($0.snapshot(), changes.load(ordering: .sequentiallyConsistent)) }
    }

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
        try state.withLockedValue { state in
            // Sequentially consistent: the count must be odd before anything of the change
            // (LMDB's commit included) can be seen, and even only after all of it.
            changes.wrappingAdd(1, ordering: .sequentiallyConsistent)
            // The seqlock writer's fence: nothing of the change (LMDB's commit writes) is
            // ordered before the odd count by the increment alone.
            atomicMemoryFence(ordering: .sequentiallyConsistent)
            defer { changes.wrappingAdd(1, ordering: .sequentiallyConsistent) }
            return try body(&state.registry)
        }
    }
}
