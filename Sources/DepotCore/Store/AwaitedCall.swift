public import Synchronization

/// One awaited call into a backend: the caller's closure, its result and the continuation
/// to resume, in one object, so the closures a backend is handed capture one reference and
/// allocate no context of their own. A second completion is ignored.
///
/// The continuation is unsafe in release builds, to spare each call a checked one's guard
/// object, and checked in debug builds, where it reports a leaked continuation and keeps
/// Thread Sanitizer from flagging an ordering it cannot see.
///
/// `@unchecked Sendable`: `continuation` is set before the operation is submitted, and the
/// backend writes `value` before completing, which the caller reads only after resuming.
@usableFromInline
final class AwaitedCall<Input, T>: AwaitedOperation, @unchecked Sendable {

    @usableFromInline let body: @Sendable (Input) throws -> T
    @usableFromInline var value: T?
    @usableFromInline var continuation: AwaitedContinuation?

    @inlinable
    init(_ body: @escaping @Sendable (Input) throws -> T) {
        self.body = body
    }

    @inlinable
    func run(_ input: Input) throws {
        value = try body(input)
    }

    /// The value `run` kept, or an error naming the broken contract when a backend
    /// completed successfully without running the closure.
    @inlinable
    func result(of operation: String) -> Result<T, any Error> {
        if let value { return .success(value) }
        return .failure(DepotError(.storeCorrupted, "The store completed a \(operation) without running it; the backend breaks the Store contract."))
    }
}

/// An awaited lookup by key: the `RowRead` that `StoreAccess` hands a backend, resumed by
/// ``finish(_:)``.
@usableFromInline
final class AwaitedRowRead<T>: RowRead, AwaitedOperation, @unchecked Sendable {
    @usableFromInline let entity: EntityHandle
    @usableFromInline let key: Value
    @usableFromInline let decode: @Sendable (any ColumnReader) throws -> T
    // The decoded value, written by the backend's thread inside the read and read by the
    // awaiting task after it resumes (the continuation orders the two). In a buffer, not
    // an optional: `visit` and `deinit` run unspecialized (the backend calls them through
    // the protocol), and assigning or destroying a `T?` there looked up the metadata of
    // `Optional<T>` in the runtime's cache on every read.
    @usableFromInline let slot: UnsafeMutablePointer<T>
    /// Whether `slot` holds a value. Set with release ordering after the value is written,
    /// read with acquire ordering: the continuation already orders the backend's thread
    /// before the resumed task, but this makes the hand-off explicit, and visible to
    /// Thread Sanitizer, whichever way the backend resumes the task.
    @usableFromInline let decoded = Atomic<Bool>(false)
    @usableFromInline @exclusivity(unchecked) var continuation: AwaitedContinuation?

    @inlinable
    init(entity: EntityHandle, key: Value, decode: @escaping @Sendable (any ColumnReader) throws -> T) {
        self.entity = entity
        self.key = key
        self.decode = decode
        self.slot = .allocate(capacity: 1)
    }

    deinit {
        if decoded.load(ordering: .acquiring) { slot.deinitialize(count: 1) }
        slot.deallocate()
    }

    /// The decoded value; `nil` when the backend found no record.
    @inlinable
    var value: T? { decoded.load(ordering: .acquiring) ? slot.pointee : nil }

    @inlinable
    func visit(_ columns: any ColumnReader) throws {
        let value = try decode(columns)
        if decoded.load(ordering: .relaxed) {
            slot.pointee = value
        } else {
            slot.initialize(to: value)
        }
        decoded.store(true, ordering: .releasing)
    }

    /// Resumes the suspended caller, once. Not through `AwaitedOperation.resume(with:)`:
    /// the backend calls this through `RowRead`, so it runs unspecialized, and there the
    /// generic `resume` switched over a `Result<S, any Error>` whose metadata it looked up
    /// in the runtime's cache on every read.
    @inlinable
    func finish(_ result: Result<Bool, any Error>) {
        guard let continuation else { return }
        self.continuation = nil
        switch result {
        case .success: continuation.resume()
        case .failure(let error): continuation.resume(throwing: error)
        }
    }
}

#if DEBUG
@usableFromInline typealias AwaitedContinuation = CheckedContinuation<Void, any Error>
#else
@usableFromInline typealias AwaitedContinuation = UnsafeContinuation<Void, any Error>
#endif

/// An object an awaited call suspends on until a backend completes it (``AwaitedCall``,
/// ``AwaitedRowRead``): what the call carries travels with it, and the continuation is
/// resumed at most once.
@usableFromInline
protocol AwaitedOperation: AnyObject {
    var continuation: AwaitedContinuation? { get set }
}

extension AwaitedOperation {
    /// Hands this call to a backend through `submit` and suspends until the backend
    /// completes it.
    @inlinable @inline(__always)
    func suspend(_ submit: (Self) -> Void) async throws {
        #if DEBUG
        try await withCheckedThrowingContinuation { continuation in
            self.continuation = continuation
            submit(self)
        }
        #else
        try await withUnsafeThrowingContinuation { continuation in
            self.continuation = continuation
            submit(self)
        }
        #endif
    }

    /// Resumes the suspended caller, once: a second completion is ignored.
    @inlinable
    func resume<S>(with result: Result<S, any Error>) {
        guard let continuation else { return }
        self.continuation = nil
        switch result {
        case .success: continuation.resume()
        case .failure(let error): continuation.resume(throwing: error)
        }
    }
}
