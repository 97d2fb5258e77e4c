public import Logging
#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The logger of the call a store's transaction runs for, carried from the calling task to
/// the store's thread.
///
/// A call captures its logger on the calling task (``ofCallingTask``, or the one a
/// controller is bound to), because a store runs the transaction on its own threads, where
/// the task's task-locals, swift-log's `Logger.current` among them, are not visible. The
/// transaction's closure adopts it first thing on the store's thread (``adopt(_:)``), and
/// ``StoreLog/transaction(_:_:)`` logs that transaction's lines (its duration, slowness,
/// failure) to it. A slot per thread carries it from the closure to the lines written after
/// the closure returned; every transaction begins with an empty slot and gives back the one
/// it found, so nested transactions (the writes of a group commit) keep theirs apart.
@usableFromInline
enum CallLogger {
    /// The logger the calling task bound with swift-log's `withLogger` (a Hummingbird
    /// request handler binds its request's logger), or `nil` when it bound none.
    ///
    /// Unbound, `Logger.current` is swift-log's process-wide default, which it labels with
    /// the empty string, the documented sign that no `withLogger` scope is active: Depot
    /// then logs to the store's own logger, as it does for a call made without a task.
    @inlinable
    static var ofCallingTask: Logger? {
        let current = Logger.current
        return current.label.isEmpty ? nil : current
    }

    /// Makes `logger` the logger of the transaction running on this thread; does nothing
    /// outside one, or for `nil`.
    @inlinable
    static func adopt(_ logger: Logger?) {
        guard let logger else { return }
        adoptNow(logger)
    }

    @usableFromInline
    static func adoptNow(_ logger: Logger) {
        guard let slot = existingSlot, slot.depth > 0 else { return }
        slot.logger = logger
    }

    /// One thread's slot: the logger the running transaction adopted, and how many
    /// transactions are running on the thread (nested ones included).
    @usableFromInline
    final class Slot {
        var logger: Logger?
        var depth = 0
    }

    /// One transaction's use of the slot, from ``begin()`` to ``end()``.
    @usableFromInline
    struct Scope {
        let slot: Slot?
        let outer: Logger?

        /// Begins a transaction's scope on this thread: an empty slot, the outer
        /// transaction's logger kept to give back.
        @usableFromInline
        static func begin() -> Scope {
            guard let slot = CallLogger.slot else { return Scope(slot: nil, outer: nil) }
            let outer = slot.logger
            slot.logger = nil
            slot.depth += 1
            return Scope(slot: slot, outer: outer)
        }

        /// The logger the transaction's closure adopted, if any.
        @usableFromInline
        var adopted: Logger? { slot?.logger }

        @usableFromInline
        func end() {
            guard let slot else { return }
            slot.logger = outer
            slot.depth -= 1
        }
    }

    /// The key of the per-thread slot; `nil` when the system has no key left to give, and
    /// then every call logs to its store's logger.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        #if canImport(Glibc)
            let rc = pthread_key_create(&key) { pointer in
                if let pointer { Unmanaged<Slot>.fromOpaque(pointer).release() }
            }
        #else
            let rc = pthread_key_create(&key) { pointer in Unmanaged<Slot>.fromOpaque(pointer).release() }
        #endif
        return rc == 0 ? key : nil
    }()

    /// This thread's slot, made on first use.
    static var slot: Slot? {
        if let slot = existingSlot { return slot }
        guard let key else { return nil }
        let slot = Slot()
        guard pthread_setspecific(key, Unmanaged.passRetained(slot).toOpaque()) == 0 else {
            Unmanaged.passUnretained(slot).release()
            return nil
        }
        return slot
    }

    /// This thread's slot when it has one.
    static var existingSlot: Slot? {
        guard let key, let raw = pthread_getspecific(key) else { return nil }
        return Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue()
    }
}
