/// A store held as `any Store` (as a ``Controller`` holds it) with its capabilities looked
/// up once, for the awaited calls made through it.
///
/// A protocol extension method called on an existential runs generic over the opened
/// type, unspecialized, and looks up the generic metadata of every `Result`, continuation
/// and closure it makes on every call; these calls take the store as a value instead, so
/// the caller's code is specialized for the result type. And a cast to a capability costs
/// a conformance lookup per call, so a controller makes them once.
///
/// A class: the capabilities are the store again, seven references a controller would
/// otherwise retain and release on every copy (a call on a controller held in a class's
/// property copies it).
@usableFromInline
final class StoreAccess: Sendable {
    @usableFromInline let store: any Store
    @usableFromInline let inline: (any InlineReadingStore)?
    @usableFromInline let onCallingThread: (any ExecutorReadingStore)?
    @usableFromInline let oneStatementOnCallingThread: (any SingleStatementExecutorReadingStore)?
    @usableFromInline let rows: (any RowReadingStore)?
    @usableFromInline let inlineWrites: (any InlineWritingStore)?
    @usableFromInline let untypedReads: (any UntypedReadingStore)?

    @usableFromInline
    init(_ store: any Store) {
        self.store = store
        inline = (store as? any InlineReadingStore).flatMap { $0.readsInline ? $0 : nil }
        onCallingThread = store as? any ExecutorReadingStore
        oneStatementOnCallingThread = store as? any SingleStatementExecutorReadingStore
        rows = store as? any RowReadingStore
        inlineWrites = (store as? any InlineWritingStore).flatMap { $0.writesInline ? $0 : nil }
        untypedReads = store as? any UntypedReadingStore
    }

    @inlinable @inline(__always)
    nonisolated(nonsending) func readRow<T: Sendable>(
        _ entity: EntityHandle, key: Value, call: @autoclosure () -> DatabaseCall,
        decode: @escaping @Sendable (any ColumnReader) throws -> T
    ) async throws -> T? {
        if let telemetry = store.telemetry, let tracer = telemetry.activeTracer {
            return try await telemetry.span(call(), on: tracer, rows: { $0 == nil ? 0 : 1 }) {
                try await readRowUntraced(entity, key: key, decode: decode)
            }
        }
        return try await readRowUntraced(entity, key: key, decode: decode)
    }

    @inlinable @inline(__always)
    nonisolated(nonsending) func readRowUntraced<T: Sendable>(
        _ entity: EntityHandle, key: Value, decode: @escaping @Sendable (any ColumnReader) throws -> T
    ) async throws -> T? {
        if let inline {
            var result: T?
            try inline.readInline { transaction -> Void in
                _ = try transaction.fetchRow(entity, key: key) { result = try decode($0) }
            }
            return result
        }
        if let onCallingThread, StoreExecutor.isCurrent {
            var result: T?
            let ran = try onCallingThread.readOnCallingThread(singleStatement: true) { transaction in
                _ = try transaction.fetchRow(entity, key: key) { result = try decode($0) }
            }
            if ran { return result }
        }
        if rows != nil {
            // One object carries the handle, key, decoder, decoded value and continuation;
            // this task keeps the store (in `self`) until the read finishes.
            let read = AwaitedRowRead(entity: entity, key: key, decode: decode)
            try await read.suspend { read in rows?.submitRowRead(read) }
            return read.value
        }
        // One object carries the decoder, the decoded value and the continuation, so the
        // closures handed to the backend capture one reference each and allocate no
        // context of their own.
        let call = AwaitedCall<any ColumnReader, T>(decode)
        try await call.suspend { call in
            store.readRow(entity, key: key, visit: { try call.run($0) }, completion: { call.resume(with: $0) })
        }
        return call.value
    }

    /// A read transaction for the caller's result type: the road every controller read
    /// takes (``readRow(_:key:call:decode:)`` is its lookup by key). On the calling task when
    /// the store's reads never block; on the calling thread with an idle connection when that
    /// is a ``StoreExecutor`` thread; otherwise on the store's threads.
    @inlinable
    nonisolated(nonsending) func read<T: Sendable>(
        _ call: @autoclosure () -> DatabaseCall, rows: (T) -> Int? = { _ in nil }, singleStatement: Bool = false,
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T
    ) async throws -> T {
        if let telemetry = store.telemetry, let tracer = telemetry.activeTracer {
            return try await telemetry.span(call(), on: tracer, rows: rows) { try await readUntraced(singleStatement: singleStatement, body) }
        }
        return try await readUntraced(singleStatement: singleStatement, body)
    }

    /// `singleStatement`: `body` reads with one statement and has no effect outside what it
    /// returns, so an ``UntypedReadingStore`` may run it as a read of its own.
    @inlinable
    nonisolated(nonsending) func readUntraced<T: Sendable>(singleStatement: Bool = false, _ body: @escaping @Sendable (any ReadTransaction) throws -> T) async throws -> T {
        if let inline { return try inline.readInline(body) }
        if let onCallingThread, StoreExecutor.isCurrent {
            var result: T?
            let ran: Bool
            if singleStatement, let oneStatementOnCallingThread {
                ran = try oneStatementOnCallingThread.readOneStatementOnCallingThread { result = try body($0) }
            } else {
                ran = try onCallingThread.readOnCallingThread(singleStatement: false) { result = try body($0) }
            }
            if ran, let result { return result }
        }
        if let untypedReads {
            // One object carries the closure, its result and the continuation; the store
            // runs the read without knowing its result type.
            let call = AwaitedCall<any ReadTransaction, T>(body)
            try await call.suspend { call in
                untypedReads.submitUntypedRead(singleStatement: singleStatement, { try call.run($0) }, completion: { call.resume(with: $0) })
            }
            return try call.result(of: "read").get()
        }
        return try await withCheckedThrowingContinuation { continuation in
            store.submitRead(body) { continuation.resume(with: $0) }
        }
    }

    /// ``Store/write(_:)`` specialized for the caller's result type, through the store's
    /// ``Store/submitUntypedWrite(_:completion:)``: no generic type is instantiated at run
    /// time per call, by the caller or by the backend.
    @inlinable
    nonisolated(nonsending) func write<T: Sendable>(
        _ call: @autoclosure () -> DatabaseCall, _ body: @escaping @Sendable (any WriteTransaction) throws -> T
    ) async throws -> T {
        if let telemetry = store.telemetry, let tracer = telemetry.activeTracer {
            return try await telemetry.span(call(), on: tracer) { try await writeUntraced(body) }
        }
        return try await writeUntraced(body)
    }

    @inlinable
    nonisolated(nonsending) func writeUntraced<T: Sendable>(_ body: @escaping @Sendable (any WriteTransaction) throws -> T) async throws -> T {
        let call = AwaitedCall<any WriteTransaction, T>(body)
        if let inlineWrites {
            try await call.suspend { call in
                inlineWrites.submitUntypedWriteRunningHereIfIdle({ try call.run($0) }, completion: { call.resume(with: $0) })
            }
        } else {
            try await call.suspend { call in
                store.submitUntypedWrite({ try call.run($0) }, completion: { call.resume(with: $0) })
            }
        }
        return try call.result(of: "write").get()
    }
}
