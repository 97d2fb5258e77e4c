import Dispatch
import NIOConcurrencyHelpers

/// One delivery of an observed request: the whole current result and how it changed since
/// the previous delivery.
public struct ObservedResult<Object: Sendable>: Sendable {
    /// The records matching the request, in its order.
    public let objects: [Object]
    /// The change from the previous delivery. The first delivery lists every record as
    /// inserted.
    public let changes: ChangeSet
    /// Whether this is the first delivery.
    public let isInitial: Bool
}

/// A live query: the current result of a request, then a new result with its change set
/// after every committed write that changes it.
///
/// ```swift
/// for try await update in cats.observe(Request(\.age > 10).sorted(by: \.name)) {
///     try await socket.send(update.changes)   // push a diff to a client
/// }
/// ```
///
/// Writes from any controller or context on the same store are seen; a rolled-back
/// transaction produces nothing; a burst of commits may be coalesced into one delivery,
/// but the final state is always delivered. Only commits that touch the observed entity
/// cause work. Cancelling the consuming task ends the sequence and the observation.
///
/// Closing the store ends every observation of it: the sequence throws a ``DepotError``
/// with code ``DepotError/Code/closed`` (so a loop over it ends during a graceful shutdown
/// and can tell why), and a callback observation receives that error as its last call.
/// Every commit that follows an observation's first read reaches it, including a write
/// that was already running when the observation began.
///
/// A re-read that fails with ``DepotError/Code/io`` or ``DepotError/Code/busy`` (a
/// database server restarting, a lost connection) does not end the observation: it reads
/// again after a pause (50 ms, growing to 2 s) until a read succeeds, and delivers what
/// changed meanwhile. Any other error ends it.
public struct Observation<Object, Managed>: AsyncSequence, Sendable
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// Each delivery: the whole result and how it changed.
    public typealias Element = ObservedResult<Object>
    /// Observation throws a `DepotError` that ends it, or the task's cancellation.
    public typealias Failure = any Error

    /// The controller whose records are observed.
    public let controller: Controller<Object, Managed>
    /// Which records, in which order.
    public let request: Request<Managed>

    /// Starts the observation: the first element is the current result.
    public func makeAsyncIterator() -> Iterator {
        let controller = self.controller
        let request = self.request
        return Iterator(
            core: LiveQuery(store: controller.store, entities: [Managed.entity.name], register: { _ = try await controller.registeredEntity() }) {
                let query = try request.resolved(for: try await controller.registeredEntity())
                let keyIndex = Managed.entity.description.primaryKeyIndex
                return try await controller.read { context in
                    var result: [LiveQuery<Object, Row>.Item] = []
                    try context.readTransaction.fetch(query, reserve: { result.reserveCapacity($0) }) { columns in
                        let row = try columns.row()
                        result.append(.init(key: row[value: keyIndex], fingerprint: row, element: try Conversion<Object, Managed>.object(from: columns)))
                    }
                    return result
                }
            })
    }

    /// Delivers the results one after another.
    public struct Iterator: AsyncIteratorProtocol {
        var core: LiveQuery<Object, Row>

        /// The next result: the current one first, then one after each commit that changes it.
        public mutating func next() async throws -> ObservedResult<Object>? {
            try await core.next()
        }
    }
}

/// What every live query shares: subscribe to the feed before the first read, coalesce
/// bursts, re-read after each signal, and deliver the result with its change set when it
/// changed. `Fingerprint` is what decides whether a record changed (its row, or its row and
/// its related records' rows).
struct LiveQuery<Element: Sendable, Fingerprint: Equatable & Sendable> {
    struct Item: Sendable {
        let key: Value
        let fingerprint: Fingerprint
        let element: Element
    }

    let store: any Store
    let entities: Set<String>
    let register: @Sendable () async throws -> Void
    let fetch: @Sendable () async throws -> [Item]
    var signals: AsyncStream<Signal>.Iterator?
    var subscription: ChangeSubscription?
    var previous: [(key: Value, fingerprint: Fingerprint)] = []
    var started = false

    init(
        store: any Store, entities: Set<String>, register: @escaping @Sendable () async throws -> Void,
        fetch: @escaping @Sendable () async throws -> [Item]
    ) {
        self.store = store
        self.entities = entities
        self.register = register
        self.fetch = fetch
    }

    enum Signal: Sendable { case changed, closed }

    /// The result read again after a signal; nil when the observation was cancelled.
    ///
    /// A transient failure (a database server restarting, a lost connection, a lock held
    /// elsewhere: `io` or `busy`) costs a late delivery, not the observation: the read runs
    /// again after a pause (50 ms, doubling up to 2 s), on a connection the store makes
    /// afresh, until it succeeds, fails otherwise (a closed store's `closed` included), or
    /// the observation is cancelled.
    func refetch() async throws -> [Item]? {
        var failures = 0
        while true {
            do {
                return try await fetch()
            } catch let error as DepotError where error.code == .io || error.code == .busy {
                failures += 1
                try? await Task.sleep(for: .milliseconds(min(2_000, 50 << min(failures - 1, 6))))
                if Task.isCancelled { return nil }
            }
        }
    }

    mutating func next() async throws -> ObservedResult<Element>? {
        if !started {
            started = true
            try await register()
            // Subscribe before the first read, so no commit falls between them. Keeping
            // only the newest signal coalesces bursts; a signal after the last commit is
            // always kept, so the final state is always delivered.
            let (stream, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .bufferingNewest(1))
            subscription = store.changes.observe(
                entities: entities,
                onFinish: {
                    continuation.yield(.closed)
                    continuation.finish()
                }
            ) { _ in
                continuation.yield(.changed)
            }
            signals = stream.makeAsyncIterator()
            let current = try await fetch()
            previous = current.map { ($0.key, $0.fingerprint) }
            let changes = ChangeSet(inserted: Array(current.indices))
            return ObservedResult(objects: current.map(\.element), changes: changes, isInitial: true)
        }
        while true {
            let signal = await signals?.next()
            guard let signal, !Task.isCancelled else {
                subscription?.cancel()
                return nil
            }
            if signal == .closed {
                subscription?.cancel()
                signals = nil
                throw DepotError(.closed, "The store was closed, which ends its observations; open a new store and observe again to continue.")
            }
            guard let current = try await refetch() else {
                subscription?.cancel()
                return nil
            }
            let changes = ChangeSet.diff(
                from: previous, to: current.map { ($0.key, $0.fingerprint) }, key: { $0.key }, same: { $0.fingerprint == $1.fingerprint })
            previous = current.map { ($0.key, $0.fingerprint) }
            if changes.isEmpty { continue }
            return ObservedResult(objects: current.map(\.element), changes: changes, isInitial: false)
        }
    }
}

/// Keeps a callback observation running; cancelling or releasing it stops the observation.
public final class ObservationToken: Sendable {
    private let task: Task<Void, Never>

    init(task: Task<Void, Never>) { self.task = task }

    /// Stops the observation. Calling it again does nothing.
    public func cancel() { task.cancel() }

    deinit { task.cancel() }
}

extension Controller {
    /// Observes `request`: the current result first, then each change (see ``Observation``).
    public func observe(_ request: Request<Managed> = .all) -> Observation<Object, Managed> {
        Observation(controller: self, request: request)
    }

    /// Observes `request`, calling `handler` on `queue` (the controller's operating queue by
    /// default) with the current result and then with each change, until the returned token
    /// is cancelled or released. Updates are delivered one at a time, in commit order,
    /// whatever the queue. A handler slower than the commits is never queued a backlog:
    /// the next result is read only once the handler has returned, so the commits made
    /// meanwhile arrive as one delivery whose change set leads from the result the handler
    /// last saw to the current one (at most one delivery is pending, as with the
    /// `AsyncSequence` form). An error ends the observation after it is delivered; closing
    /// the store delivers ``DepotError/Code/closed``.
    public func observe(
        _ request: Request<Managed> = .all, on queue: OperatingQueue? = nil,
        handler: @escaping @Sendable (Result<ObservedResult<Object>, DepotError>) -> Void
    ) -> ObservationToken {
        // A serial queue targeting the operating queue: updates arrive one at a time, in
        // commit order, even on a concurrent queue such as `.background`.
        let target = DispatchQueue(label: "depot.observation", target: (queue ?? operatingQueue).queue)
        let observation = observe(request)
        let task = Task {
            do {
                for try await update in observation {
                    // Wait for the handler before reading on: the live query keeps only the
                    // newest commit signal meanwhile and diffs against the result delivered
                    // last, so deliveries coalesce instead of queueing on `target` (each one
                    // holding a whole result) when the handler is slower than the commits.
                    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                        target.async {
                            handler(.success(update))
                            done.resume()
                        }
                    }
                }
            } catch is CancellationError {
            } catch {
                let failure = DepotError.wrapping(error, code: .backend, context: "Observation failed")
                target.async { handler(.failure(failure)) }
            }
        }
        return ObservationToken(task: task)
    }
}
