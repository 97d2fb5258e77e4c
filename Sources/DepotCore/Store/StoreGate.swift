import NIOConcurrencyHelpers

/// Admits work to a store until the store closes, and lets closing wait for the work it
/// admitted: the close-and-drain logic every backend needs, in one place.
///
/// A backend calls ``enter()`` before it accepts a transaction (a closed store throws
/// ``DepotError/Code/closed`` there, before anything is queued) and ``leave()`` when the
/// transaction is done; ``close()`` refuses new work at once and returns when the last
/// admitted transaction has left.
///
/// ```swift
/// func submitRead<T>(...) {
///     do { try gate.enter() } catch { return completion(.failure(error)) }
///     queue.async { completion(Result { try self.readNow(body) }); self.gate.leave() }
/// }
/// ```
public final class StoreGate: Sendable {
    private struct State: Sendable {
        var closed = false
        var running = 0
        var drained: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())
    private let closedError: DepotError

    /// - Parameter store: How the store is named in the error for work after closing,
    ///   e.g. "SQLite store at /var/lib/app/app.sqlite".
    public init(store: String) {
        closedError = DepotError.closed(store)
    }

    /// Admits one unit of work.
    ///
    /// - Throws: ``DepotError/Code/closed`` once ``close()`` has been called.
    @inline(__always)
    public func enter() throws(DepotError) {
        let admitted = state.withLockedValue { s -> Bool in
            if s.closed { return false }
            s.running += 1
            return true
        }
        if !admitted { throw closedError }
    }

    /// Marks one admitted unit of work as done.
    @inline(__always)
    public func leave() {
        let waiters = state.withLockedValue { s -> [CheckedContinuation<Void, Never>] in
            s.running -= 1
            guard s.running == 0, s.closed, !s.drained.isEmpty else { return [] }
            defer { s.drained = [] }
            return s.drained
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Whether ``close()`` has been called.
    public var isClosed: Bool { state.withLockedValue { $0.closed } }

    /// Refuses new work and waits for admitted work to finish.
    ///
    /// - Returns: `true` for the call that closed the gate, `false` for later calls (which
    ///   wait too), so a backend releases its resources once.
    @discardableResult
    public func close() async -> Bool {
        let first = state.withLockedValue { s -> Bool in
            defer { s.closed = true }
            return !s.closed
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLockedValue { s -> Bool in
                if s.running == 0 { return true }
                s.drained.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
        return first
    }
}
