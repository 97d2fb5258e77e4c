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
public struct Observation<Object, Managed>: AsyncSequence, Sendable
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    public typealias Element = ObservedResult<Object>
    public typealias Failure = any Error

    public let controller: Controller<Object, Managed>
    public let request: Request<Managed>

    public func makeAsyncIterator() -> Iterator {
        Iterator(controller: controller, request: request)
    }

    public struct Iterator: AsyncIteratorProtocol {
        let controller: Controller<Object, Managed>
        let request: Request<Managed>
        var signals: AsyncStream<Signal>.Iterator?
        var subscription: ChangeSubscription?
        var previous: [(key: Value, row: Row)] = []
        var started = false

        init(controller: Controller<Object, Managed>, request: Request<Managed>) {
            self.controller = controller
            self.request = request
        }

        enum Signal: Sendable { case changed, closed }

        public mutating func next() async throws -> ObservedResult<Object>? {
            if !started {
                started = true
                _ = try await controller.registeredEntity()
                // Subscribe before the first read, so no commit falls between them. Keeping
                // only the newest signal coalesces bursts; a signal after the last commit is
                // always kept, so the final state is always delivered.
                let (stream, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .bufferingNewest(1))
                subscription = controller.store.changes.observe(
                    entities: [Managed.entity.name],
                    onFinish: {
                        continuation.yield(.closed)
                        continuation.finish()
                    }
                ) { _ in
                    continuation.yield(.changed)
                }
                signals = stream.makeAsyncIterator()
                let current = try await fetch()
                previous = current.map { ($0.key, $0.row) }
                let changes = ChangeSet(inserted: Array(current.indices))
                return ObservedResult(objects: current.map(\.object), changes: changes, isInitial: true)
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
                let current = try await fetch()
                let changes = ChangeSet.diff(
                    from: previous, to: current.map { ($0.key, $0.row) }, key: { $0.key }, same: { $0.row == $1.row })
                previous = current.map { ($0.key, $0.row) }
                if changes.isEmpty { continue }
                return ObservedResult(objects: current.map(\.object), changes: changes, isInitial: false)
            }
        }

        private func fetch() async throws -> [(key: Value, row: Row, object: Object)] {
            let query = try request.resolved(for: try await controller.registeredEntity())
            let keyIndex = Managed.entity.description.primaryKeyIndex
            return try await controller.read { context in
                var result: [(key: Value, row: Row, object: Object)] = []
                try context.readTransaction.fetch(query, reserve: { result.reserveCapacity($0) }) { columns in
                    let row = try columns.row()
                    result.append((row[value: keyIndex], row, try Conversion<Object, Managed>.object(from: columns)))
                }
                return result
            }
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
    /// whatever the queue. An error ends the observation after it is delivered; closing the
    /// store delivers ``DepotError/Code/closed``.
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
                    target.async { handler(.success(update)) }
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
