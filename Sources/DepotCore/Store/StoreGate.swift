import NIOConcurrencyHelpers
import Synchronization

/// Admits work to a store until the store closes, and lets closing wait for the work it
/// admitted: the close-and-drain logic every backend needs, in one place.
///
/// A backend calls ``enter()`` when work is submitted, before anything is queued (a closed
/// store throws ``DepotError/Code/closed`` there) and ``leave()`` when the work is done;
/// ``close(releasing:)`` refuses new work at once, waits for the last admitted work to leave,
/// then releases the store's resources once and returns, on every call, only after that.
/// Work submitted before ``close(releasing:)`` is thus admitted and runs, on every backend
/// (the conformance suite checks it).
///
/// ```swift
/// func submitRead<T>(...) {
///     do { try gate.enter() } catch { return completion(.failure(error)) }
///     queue.async { completion(Result { try self.readNow(body) }); self.gate.leave() }
/// }
/// ```
public final class StoreGate: Sendable {
    /// The admitted units of work, with `closedFlag` set once closing began. One atomic
    /// add to enter and one to leave: every read and write of every backend passes here
    /// twice, and under concurrent readers a lock's two atomics (and its sleeps when
    /// contended) were measurable.
    private let admitted = Atomic<Int>(0)
    private static let closedFlag = 1 << 62
    /// Who waits for the admitted work to drain. Taken only while closing. A pthread lock:
    /// `Synchronization.Mutex` waits inside the standard library when contended, where
    /// Thread Sanitizer cannot see the ordering it gives.
    private let drained = NIOLockedValueBox<[CheckedContinuation<Void, Never>]>([])
    /// Later ``close(releasing:)`` calls, waiting for the first to have released.
    private let released = NIOLockedValueBox<Release>(.releasing([]))
    private let closedError: DepotError

    private enum Release {
        case releasing([CheckedContinuation<Void, Never>])
        case released
    }

    /// An open gate with no work admitted.
    ///
    /// - Parameter store: How the store is named in the error for work after closing,
    ///   e.g. "SQLite store at /var/lib/app/app.sqlite".
    public init(store: String) {
        closedError = DepotError.closed(store)
    }

    /// Admits one unit of work.
    ///
    /// - Throws: ``DepotError/Code/closed`` once ``close(releasing:)`` has been called.
    @inline(__always)
    public func enter() throws(DepotError) {
        let now = admitted.wrappingAdd(1, ordering: .acquiring).newValue
        if now & Self.closedFlag != 0 {
            // Closing began: not admitted after all.
            leave()
            throw closedError
        }
    }

    /// Admits one more unit of work on behalf of work already admitted: a job that
    /// ``enter()``ed when it was submitted and now runs its transaction.
    ///
    /// Unlike ``enter()`` it succeeds while the store is closing, as long as admitted work
    /// remains: work submitted before ``close(releasing:)`` runs to its end (as closing
    /// promises) instead of being refused when it reaches the front of a queue. It throws only once
    /// the gate is closed and drained, when the store may have released its resources, so
    /// a path that reaches it without an admission can never use them after that.
    ///
    /// - Throws: ``DepotError/Code/closed`` once the store is closed and nothing admitted
    ///   remains.
    @inline(__always)
    public func enterWithin() throws(DepotError) {
        var current = admitted.load(ordering: .relaxed)
        while true {
            if current == Self.closedFlag { throw closedError }
            let (exchanged, original) = admitted.compareExchange(
                expected: current, desired: current &+ 1, ordering: .acquiring)
            if exchanged { return }
            current = original
        }
    }

    /// Marks one admitted unit of work as done.
    @inline(__always)
    public func leave() {
        let now = admitted.wrappingSubtract(1, ordering: .releasing).newValue
        // The last unit of a closing store: wake whoever waits in close(). A close() that
        // has not queued itself yet finds the count at zero under the same lock.
        if now == Self.closedFlag { resumeDrained() }
    }

    private func resumeDrained() {
        let waiters = drained.withLockedValue { waiting in
            defer { waiting = [] }
            return waiting
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Whether ``close(releasing:)`` has been called.
    public var isClosed: Bool { admitted.load(ordering: .acquiring) & Self.closedFlag != 0 }

    /// Refuses new work, waits for admitted work to finish, then runs `release` once:
    /// whichever call closed the gate runs it, and every call, first or later, returns only
    /// after it has run. A caller that finds its `close()` returned may therefore rely on
    /// the store's resources being released, even when another caller began closing.
    ///
    /// - Parameter release: What closing does once the admitted work has ended: end the
    ///   change feed, release files and connections. Runs on the first caller's task.
    public func close(releasing release: () async -> Void = {}) async {
        let before = admitted.bitwiseOr(Self.closedFlag, ordering: .acquiringAndReleasing).oldValue
        let first = before & Self.closedFlag == 0
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = drained.withLockedValue { waiting -> Bool in
                // Under the lock that leave() takes when the count reaches zero: either it
                // is zero now, or that leave() will find this continuation.
                if admitted.load(ordering: .acquiring) == Self.closedFlag { return true }
                waiting.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
        if first {
            await release()
            let waiters = released.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                defer { state = .released }
                if case .releasing(let waiting) = state { return waiting }
                return []
            }
            for waiter in waiters { waiter.resume() }
        } else {
            // A later caller: the first may still be releasing, and returning now would let
            // this caller reuse files or connections the store still holds.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = released.withLockedValue { state -> Bool in
                    guard case .releasing(var waiting) = state else { return true }
                    waiting.append(continuation)
                    state = .releasing(waiting)
                    return false
                }
                if done { continuation.resume() }
            }
        }
    }
}
