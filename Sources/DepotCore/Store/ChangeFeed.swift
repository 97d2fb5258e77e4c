import NIOConcurrencyHelpers
import Synchronization

/// One committed change to one record.
public struct Change: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case insert, update, delete
    }

    public let entity: String
    public let key: Value
    public let kind: Kind

    public init(entity: String, key: Value, kind: Kind) {
        self.entity = entity
        self.key = key
        self.kind = kind
    }
}

/// The net changes of one committed write transaction, one entry per record touched.
public struct CommittedChanges: Sendable, Hashable {
    /// A number that increases with every commit of the store.
    public let sequence: UInt64
    public let changes: [Change]

    public init(sequence: UInt64, changes: [Change]) {
        self.sequence = sequence
        self.changes = changes
    }

    /// The entities this commit touched.
    public var entities: Set<String> { Set(changes.map(\.entity)) }
}

/// Collects the changes of one write transaction and nets them per record
/// (insert then delete is nothing; delete then insert is an update).
///
/// Backends record only while ``ChangeFeed/isObserved``, so a store nobody observes pays
/// nothing for the feed.
public struct ChangeRecorder: Sendable {
    private var order: [ChangeKey] = []
    private var net: [ChangeKey: (existedBefore: Bool, existsAfter: Bool)] = [:]

    private struct ChangeKey: Hashable, Sendable {
        let entity: String
        let key: Value
    }

    public init() {}

    /// Records that the row with `key` existed (`existedBefore`) and exists after the write.
    public mutating func record(entity: String, key: Value, existedBefore: Bool, existsAfter: Bool) {
        let k = ChangeKey(entity: entity, key: key)
        if let previous = net[k] {
            net[k] = (previous.existedBefore, existsAfter)
        } else {
            net[k] = (existedBefore, existsAfter)
            order.append(k)
        }
    }

    public var isEmpty: Bool { order.isEmpty }

    /// The net changes, in the order records were first touched.
    public func changes() -> [Change] {
        order.compactMap { k in
            guard let state = net[k] else { return nil }
            switch (state.existedBefore, state.existsAfter) {
            case (false, true): return Change(entity: k.entity, key: k.key, kind: .insert)
            case (true, true): return Change(entity: k.entity, key: k.key, kind: .update)
            case (true, false): return Change(entity: k.entity, key: k.key, kind: .delete)
            case (false, false): return nil
            }
        }
    }
}

/// The committed-write feed of a store. Observers are called on the store's writer, in
/// commit order, right after each commit; they must return quickly (hand work to a task
/// or queue).
public final class ChangeFeed: Sendable {
    private struct Subscriber: Sendable {
        let entities: Set<String>?
        let handler: @Sendable (CommittedChanges) -> Void
    }

    private let subscribers = NIOLockedValueBox<(next: Int, all: [Int: Subscriber])>((0, [:]))
    private let observed = Atomic<Int>(0)
    private let sequence = Atomic<UInt64>(0)

    public init() {}

    /// Whether anyone is listening; backends skip recording changes when not.
    public var isObserved: Bool { observed.load(ordering: .acquiring) > 0 }

    /// Calls `handler` after every commit that touches one of `entities` (every commit
    /// when `nil`), until the returned subscription is cancelled or released.
    public func observe(
        entities: Set<String>? = nil, _ handler: @escaping @Sendable (CommittedChanges) -> Void
    ) -> ChangeSubscription {
        let id = subscribers.withLockedValue { state in
            let id = state.next
            state.next += 1
            state.all[id] = Subscriber(entities: entities, handler: handler)
            return id
        }
        observed.add(1, ordering: .releasing)
        return ChangeSubscription { [weak self] in self?.remove(id) }
    }

    /// The feed as an async sequence (buffering every commit until it is consumed).
    public func stream(entities: Set<String>? = nil) -> AsyncStream<CommittedChanges> {
        AsyncStream { continuation in
            let subscription = observe(entities: entities) { continuation.yield($0) }
            continuation.onTermination = { _ in subscription.cancel() }
        }
    }

    private func remove(_ id: Int) {
        let removed = subscribers.withLockedValue { $0.all.removeValue(forKey: id) != nil }
        if removed { observed.subtract(1, ordering: .releasing) }
    }

    /// Delivers one commit's changes. Backends call this on their writer right after a
    /// commit, so commits are delivered in order.
    public func publish(_ changes: [Change]) {
        guard !changes.isEmpty else { return }
        let number = sequence.add(1, ordering: .relaxed).newValue
        let batch = CommittedChanges(sequence: number, changes: changes)
        let targets = subscribers.withLockedValue { Array($0.all.values) }
        if targets.isEmpty { return }
        let touched = batch.entities
        for target in targets where target.entities.map({ !$0.isDisjoint(with: touched) }) ?? true {
            target.handler(batch)
        }
    }
}

/// Keeps a change-feed observation alive; cancelling or releasing it stops delivery.
public final class ChangeSubscription: Sendable {
    private let onCancel: NIOLockedValueBox<(@Sendable () -> Void)?>

    init(_ onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = NIOLockedValueBox(onCancel)
    }

    /// Stops delivery. Calling it again does nothing.
    public func cancel() {
        let action = onCancel.withLockedValue { value -> (@Sendable () -> Void)? in
            let action = value
            value = nil
            return action
        }
        action?()
    }

    deinit { cancel() }
}
