import NIOConcurrencyHelpers
import Synchronization

/// One committed change to one record.
public struct Change: Sendable, Hashable {
    /// What happened to the record.
    public enum Kind: String, Sendable, Hashable {
        /// A record was inserted, updated or deleted.
        case insert, update, delete
    }

    /// The entity's name.
    public let entity: String
    /// The record's primary key.
    public let key: Value
    /// Whether it was inserted, updated or deleted.
    public let kind: Kind

    /// A change of `kind` to the record with key `key` in `entity`.
    public init(entity: String, key: Value, kind: Kind) {
        self.entity = entity
        self.key = key
        self.kind = kind
    }
}

/// The net changes of one committed write transaction, one entry per record touched.
public struct CommittedChanges: Sendable, Hashable {
    /// A number that increases with every delivered batch (commits that nobody observed
    /// are not numbered).
    public let sequence: UInt64
    /// The records the commit inserted, updated or deleted. Empty when ``isComplete`` is
    /// `false`.
    public let changes: [Change]
    /// The entities this commit touched.
    public let entities: Set<String>
    /// Whether ``changes`` lists every record the commit changed. It is `false` for a write
    /// that began before anyone observed the feed and committed after someone did: the
    /// store did not record its records, only which entities it touched, so a subscriber
    /// must re-read those entities (a live query does exactly that).
    public let isComplete: Bool

    /// A batch with the commit number `sequence`, listing every change (``isComplete``).
    public init(sequence: UInt64, changes: [Change]) {
        self.sequence = sequence
        self.changes = changes
        self.entities = Set(changes.map(\.entity))
        self.isComplete = true
    }

    /// A commit whose records were not recorded: only the entities it touched are known.
    public init(sequence: UInt64, touching entities: Set<String>) {
        self.sequence = sequence
        self.changes = []
        self.entities = entities
        self.isComplete = false
    }
}

/// Collects the changes of one write transaction and nets them per record
/// (insert then delete is nothing; delete then insert is an update).
///
/// A backend takes one from ``ChangeFeed/makeRecorder()`` when a write transaction begins,
/// records every row it writes, and hands it to `ChangeFeed.publish(_:)` after the
/// commit. When nobody observes the feed at the start, the recorder only notes which
/// entities were touched (a store nobody observes pays almost nothing for the feed); if
/// someone subscribes while the write runs, the commit still reaches them, as an
/// incomplete ``CommittedChanges`` naming those entities.
public struct ChangeRecorder: Sendable {
    /// Whether records are recorded one by one (someone observed the feed when the write
    /// began); otherwise only the touched entities are.
    public let isDetailed: Bool
    private var order: [ChangeKey] = []
    private var net: [ChangeKey: (existedBefore: Bool, existsAfter: Bool)] = [:]
    private var touched: [String] = []

    private struct ChangeKey: Hashable, Sendable {
        let entity: String
        let key: Value
    }

    /// An empty recorder.
    ///
    /// - Parameter detailed: Whether to record each record, or only the touched entities.
    public init(detailed: Bool = true) {
        self.isDetailed = detailed
    }

    /// Records that the row with `key` existed (`existedBefore`) and exists after the write.
    @inline(__always)
    public mutating func record(entity: String, key: Value, existedBefore: Bool, existsAfter: Bool) {
        guard isDetailed else { return recordTouched(entity: entity) }
        let k = ChangeKey(entity: entity, key: key)
        if let previous = net[k] {
            net[k] = (previous.existedBefore, existsAfter)
        } else {
            net[k] = (existedBefore, existsAfter)
            order.append(k)
        }
    }

    /// Records that rows of `entity` changed, without saying which: for a backend that
    /// changed rows it did not list (a bulk delete while nobody observed the feed).
    @inline(__always)
    public mutating func recordTouched(entity: String) {
        // Most transactions touch one entity many times: compare with the last one first
        // (the same string storage compares in constant time).
        if touched.last == entity || touched.contains(entity) { return }
        touched.append(entity)
    }

    /// Whether the transaction changed nothing the recorder saw.
    public var isEmpty: Bool { order.isEmpty && touched.isEmpty }

    /// The net changes, in the order records were first touched (empty unless detailed).
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

    /// The entities touched without their keys (a backend that tells other processes of a
    /// write sends these when it has no keys).
    public var touchedEntities: Set<String> { Set(touched) }
}

/// The committed-write feed of a store. Observers are called on the store's writer, in
/// commit order, right after each commit; they must return quickly (hand work to a task
/// or queue).
///
/// Closing the store finishes the feed: every subscription's `onFinish` runs once, async
/// streams end, and later subscriptions finish at once.
public final class ChangeFeed: Sendable {
    private struct Subscriber: Sendable {
        let entities: Set<String>?
        let handler: @Sendable (CommittedChanges) -> Void
        let onFinish: (@Sendable () -> Void)?
    }

    private struct State: Sendable {
        var next = 0
        var all: [Int: Subscriber] = [:]
        var finished = false
    }

    private let subscribers = NIOLockedValueBox(State())
    private let observed = Atomic<Int>(0)
    private let sequence = Atomic<UInt64>(0)

    /// An empty feed with no subscribers.
    public init() {}

    /// Whether anyone is listening; a write that begins unobserved records only the
    /// entities it touches (see ``makeRecorder()``).
    public var isObserved: Bool { observed.load(ordering: .acquiring) > 0 }

    /// Whether the store finished the feed (it was closed).
    public var isFinished: Bool { subscribers.withLockedValue { $0.finished } }

    /// A recorder for a write transaction that begins now: detailed when someone observes
    /// the feed, coarse otherwise. Pass it to `publish(_:)` after the commit.
    @inline(__always)
    public func makeRecorder() -> ChangeRecorder { ChangeRecorder(detailed: isObserved) }

    /// Calls `handler` after every commit that touches one of `entities` (every commit
    /// when `nil`), until the returned subscription is cancelled or released, or the feed
    /// finishes, when `onFinish` runs once instead (at once if the feed has finished).
    public func observe(
        entities: Set<String>? = nil, onFinish: (@Sendable () -> Void)? = nil,
        _ handler: @escaping @Sendable (CommittedChanges) -> Void
    ) -> ChangeSubscription {
        let id = subscribers.withLockedValue { state -> Int? in
            if state.finished { return nil }
            let id = state.next
            state.next += 1
            state.all[id] = Subscriber(entities: entities, handler: handler, onFinish: onFinish)
            return id
        }
        guard let id else {
            onFinish?()
            return ChangeSubscription {}
        }
        observed.add(1, ordering: .releasing)
        return ChangeSubscription { [weak self] in self?.remove(id) }
    }

    /// The feed as an async sequence (buffering every commit until it is consumed); it
    /// ends when the feed finishes.
    public func stream(entities: Set<String>? = nil) -> AsyncStream<CommittedChanges> {
        AsyncStream { continuation in
            let subscription = observe(entities: entities, onFinish: { continuation.finish() }) { continuation.yield($0) }
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
        deliver { CommittedChanges(sequence: $0, changes: changes) }
    }

    /// Tells observers that the entities named changed as a whole (a schema rewrite), so
    /// they read them again.
    public func publishTouched(_ entities: [String]) {
        var recorder = ChangeRecorder(detailed: false)
        for entity in entities { recorder.recordTouched(entity: entity) }
        publish(recorder)
    }

    /// Delivers what a write transaction recorded. Backends call this on their writer right
    /// after the commit (never after a rollback), so commits are delivered in order.
    public func publish(_ recorder: ChangeRecorder) {
        if recorder.isEmpty { return }
        if recorder.isDetailed {
            publish(recorder.changes())
        } else {
            // Nobody observed when the write began; whoever subscribed since has read a
            // snapshot that may predate this commit, so tell them what it touched.
            deliver { CommittedChanges(sequence: $0, touching: recorder.touchedEntities) }
        }
    }

    private func deliver(_ batch: (UInt64) -> CommittedChanges) {
        // Taking the lock (not only reading `isObserved`) orders this check after the
        // commit and against every subscription: a subscriber not seen here subscribed
        // after the commit, so its first read includes it.
        let targets = subscribers.withLockedValue { Array($0.all.values) }
        if targets.isEmpty { return }
        let batch = batch(sequence.add(1, ordering: .relaxed).newValue)
        let touched = batch.entities
        for target in targets where target.entities.map({ !$0.isDisjoint(with: touched) }) ?? true {
            target.handler(batch)
        }
    }

    /// Ends every subscription: each one's `onFinish` runs once; later subscriptions finish
    /// at once. Stores call this when they close, after their last commit.
    public func finish() {
        let finished = subscribers.withLockedValue { state -> [Subscriber] in
            if state.finished { return [] }
            state.finished = true
            let all = Array(state.all.values)
            state.all.removeAll()
            return all
        }
        if !finished.isEmpty { observed.subtract(finished.count, ordering: .releasing) }
        for subscriber in finished { subscriber.onFinish?() }
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
