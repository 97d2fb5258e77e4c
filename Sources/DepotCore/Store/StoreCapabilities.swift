// The store runtime's fast paths, as capabilities the awaited calls look up once
// (StoreAccess). Not public: applications see Store, backend authors StorageEngine; every
// store Depot ships is an EngineStore, which has them all. RecordingStore (DepotTesting)
// forwards the lookup by key.

/// A capability: a store that reads one row by key faster than a read transaction
/// around ``ReadTransaction/fetchRow(_:key:_:)`` would (SQLite runs the one statement in
/// autocommit mode, which is already a consistent snapshot).
///
/// ``Store/readRow(_:key:decode:completion:)`` uses it when the store has it.
@usableFromInline
package protocol RowReadingStore: Store {
    /// Reads the record with primary key `key` as a read of its own, calls `visit` with it
    /// when there is one, then calls `completion` with whether there was.
    ///
    /// Not generic: the caller keeps what `visit` decoded, so an awaited lookup makes the
    /// backend instantiate no generic type (a `Result` of the caller's type, its closures)
    /// at run time on every call.
    func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void)

    /// Reads the record `read` names as a read of its own, calls `read.visit` with it when
    /// there is one, then `read.finish` once with whether there was.
    ///
    /// What an awaited lookup calls: one object carries the whole call, and its submitter
    /// keeps the store alive until `finish`, so a store need not retain itself, nor the
    /// closures their captures, for the read. A retain of the store is an atomic on a cache
    /// line that every reader thread writes. The default forwards to
    /// ``submitRowRead(_:key:visit:completion:)``.
    func submitRowRead(_ read: any RowRead)
}

extension RowReadingStore {
    @usableFromInline
    package func submitRowRead(_ read: any RowRead) {
        submitRowRead(read.entity, key: read.key, visit: { try read.visit($0) }, completion: { read.finish($0) })
    }
}

/// One lookup by key, handed to `RowReadingStore.submitRowRead(_:)` as one object.
@usableFromInline
package protocol RowRead: AnyObject, Sendable {
    /// The entity to read.
    var entity: EntityHandle { get }
    /// The primary key of the record.
    var key: Value { get }
    /// Called with the record, when there is one, inside the read.
    func visit(_ columns: any ColumnReader) throws
    /// Called once, after the read: whether the record exists, or why the read failed.
    func finish(_ result: Result<Bool, any Error>)
}

/// A capability: a store that runs reads handed to it without their result type (the
/// caller keeps what `body` computed), so that nothing it runs per read is generic over
/// that type (``StoreAccess`` specializes the rest in the caller), and that knows which
/// reads are one statement.
///
/// A read of one statement may run faster than a read transaction around it (PostgreSQL
/// runs the statement in autocommit mode, which is its own snapshot, with no `BEGIN` and
/// no `ROLLBACK`). A controller's reads that are one statement (`fetchAll`, `fetchFirst`,
/// `count`, a page) say so. `body` may still run more than one statement (a request that
/// reads related records); the store then runs it again in a read transaction, so `body`
/// must have no effect outside what it returns.
@usableFromInline
package protocol UntypedReadingStore: Store {
    /// Runs `body` as a read of its own when `singleStatement` (see above), else in a read
    /// transaction, then calls `completion` with whether it returned or what it threw.
    func submitUntypedRead(
        singleStatement: Bool, _ body: @escaping @Sendable (any ReadTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void)
}

extension UntypedReadingStore {
    /// ``submitUntypedRead(singleStatement:_:completion:)`` for a caller's result type,
    /// kept in a box beside the read: what a completion-handler read
    /// (``Store/submitRead(_:completion:)``) runs through.
    package func submitRead<T: Sendable>(
        singleStatement: Bool, _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        let call = AwaitedCall<any ReadTransaction, T>(body)
        submitUntypedRead(singleStatement: singleStatement, { try call.run($0) }) { result in
            completion(result.flatMap { call.result(of: "read") })
        }
    }

    /// Runs `body`, which reads with one statement, as a read of its own, then calls
    /// `completion` with what it returned or threw.
    package func submitSingleStatementRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitRead(singleStatement: true, body, completion: completion)
    }
}

/// A capability: a store whose reads never block (no I/O, no lock held by a writer), so
/// they may run on the calling task, even one of Swift's cooperative pool, without a hop
/// to the store's threads. The memory store is one.
///
/// ``Store/read(_:)`` uses it when the store has it.
@usableFromInline
package protocol InlineReadingStore: Store {
    /// Whether this store's reads never block (a store may have the capability only for
    /// some engines).
    var readsInline: Bool { get }

    /// Runs `body` in a read transaction on the calling thread.
    func readInline<T>(_ body: (any ReadTransaction) throws -> T) throws -> T
}

extension InlineReadingStore {
    @usableFromInline
    package var readsInline: Bool { true }
}

/// A capability: a store whose writes never block (no I/O), so an awaited write may run
/// on the calling task, even one of Swift's cooperative pool, when no other write is
/// running or queued. The memory store is one.
///
/// A controller's async writes use it when the store has it. ``Store/submitWrite(_:completion:)``
/// and ``Store/submitUntypedWrite(_:completion:)`` keep the caller's thread free of the
/// write: they run it there only on a thread where blocking is allowed (a task preferring
/// ``StoreExecutor``, with SQLite and LMDB), so a caller may submit a write and then do
/// what the write waits for.
@usableFromInline
package protocol InlineWritingStore: Store {
    /// Whether this store's writes never block (a store may have the capability only for
    /// some engines).
    var writesInline: Bool { get }

    /// ``Store/submitUntypedWrite(_:completion:)``, except that when the store's writer is
    /// idle the write runs (and `completion` is called) on the calling thread before this
    /// returns. For a caller that only waits for `completion` (an awaited call); writes
    /// still run one at a time, in submission order.
    func submitUntypedWriteRunningHereIfIdle(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    )
}

/// A capability: a store that can run a read transaction right on the calling thread when
/// that thread may block, a ``StoreExecutor`` thread (``StoreExecutor/isCurrent``): the
/// awaited reads of a task preferring `store.executor` then cost no hop, no continuation and
/// no generic result wrapping.
///
/// ``Store/read(_:)`` and ``Store/readRow(_:key:decode:)`` use it when the store has it and
/// the caller is on such a thread.
@usableFromInline
package protocol ExecutorReadingStore: Store {
    /// Runs `body` in a read transaction on the calling thread, which the caller has
    /// checked is a ``StoreExecutor`` thread. Returns `false`, without running `body`, when
    /// the read would have to wait (every connection busy); the caller then submits it as
    /// usual.
    ///
    /// - Parameters:
    ///   - singleStatement: `body` runs one statement, which may be its own snapshot
    ///     (SQLite's autocommit lookup).
    ///   - body: The read, given the transaction.
    func readOnCallingThread(singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void) throws -> Bool
}

/// A capability: an ``ExecutorReadingStore`` that runs a read of one statement (a
/// controller's `fetchAll`, `fetchFirst`, `count`, a page) on the calling thread as a read
/// of its own, without a transaction around it (SQLite: in autocommit mode), as an
/// ``UntypedReadingStore`` runs those it is submitted as one statement. `body` may still
/// run more than one statement; the store then runs it again in a read transaction, so
/// `body` must have no effect outside what it returns.
@usableFromInline
package protocol SingleStatementExecutorReadingStore: ExecutorReadingStore {
    /// Runs `body` on the calling thread, a ``StoreExecutor`` thread; returns `false`,
    /// without running it, when the read would have to wait for a connection.
    func readOneStatementOnCallingThread(_ body: (any ReadTransaction) throws -> Void) throws -> Bool
}

extension InlineWritingStore {
    @usableFromInline
    package var writesInline: Bool { true }
}
