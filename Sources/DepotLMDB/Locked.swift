import Foundation

/// A value behind a pthread mutex (`NSLock`).
///
/// Used instead of `Synchronization.Mutex` because on Linux `Mutex` locks with raw futex
/// calls that Thread Sanitizer cannot see, so every correctly locked access is reported as
/// a race; TSan understands pthread mutexes. `@unchecked Sendable`: `value` is only
/// touched while `lock` is held.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
