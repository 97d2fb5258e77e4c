import Foundation

/// State guarded by a lock.
///
/// Not `Synchronization.Mutex`: on Linux it locks with a futex that ThreadSanitizer does
/// not see, so TSan reports every guarded access as a race. `NSLock` is a pthread mutex,
/// which TSan understands, at about the same cost.
/// `@unchecked Sendable`: `state` is only touched inside `withLock`, under `lock`.
final class Locked<State>: @unchecked Sendable {
    private let lock = NSLock()
    private var state: State

    init(_ state: State) {
        self.state = state
    }

    @inline(__always)
    func withLock<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
