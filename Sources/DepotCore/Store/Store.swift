/// Reads inside one consistent snapshot of a store.
///
/// A transaction is valid only inside the closure it was passed to, and only on the thread
/// that closure runs on: it is deliberately not `Sendable`.
public protocol ReadTransaction {
    /// Visits the records matching `query`, in the query's order.
    ///
    /// - Parameters:
    ///   - query: What to read: the entity, filter, order, limit and offset.
    ///   - reserve: Called at most once, before the first record, with the number of
    ///     records to expect when the backend knows it cheaply; lets callers reserve
    ///     capacity.
    ///   - body: Called with each record, as a reader over the backend's stored form. The
    ///     reader is valid only during the call (it moves to the next record afterwards);
    ///     read what you need, or copy it with ``ColumnReader/row()``.
    func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws

    /// Calls `body` with the record with primary key `key`, if it exists; returns whether
    /// it does.
    func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool

    /// The number of rows matching `query`, honouring its offset and limit, without
    /// decoding them.
    func count(_ query: Query) throws -> Int

    /// Counts, sums, averages, minimums and maximums over the rows `query` selects,
    /// optionally per group; see ``AggregateQuery`` for the exact semantics. The default
    /// reads the rows and computes in Swift (``AggregateQuery/evaluate(_:)``); a backend
    /// that aggregates natively must return the same rows and values.
    func aggregate(_ query: AggregateQuery) throws -> [AggregateRow]

    /// How this backend runs `query` (see ``QueryPlan``); with `analyze`, runs it and says
    /// how many records it read. The default refuses with ``DepotError/Code/backend``: a
    /// backend outside Depot explains its plans by implementing this.
    func explain(_ query: Query, analyze: Bool) throws -> QueryPlan
}

extension ReadTransaction {
    /// Refuses: this backend does not say how it runs a query.
    public func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        throw DepotError(.backend, "This backend does not explain how it runs a query of \(query.entity.name).")
    }
}

/// Reads and writes inside one write transaction. Reads see the transaction's own writes.
public protocol WriteTransaction: ReadTransaction {
    /// Inserts a new row.
    ///
    /// - Throws: ``DepotError/Code/duplicateKey`` when the primary key or a unique value
    ///   exists already.
    func insert(_ row: Row, into entity: EntityHandle) throws

    /// Inserts the row, or replaces the row with the same primary key in place.
    ///
    /// - Returns: `true` when the row was inserted, `false` when it replaced one.
    /// - Throws: ``DepotError/Code/duplicateKey`` when a unique value belongs to another row.
    @discardableResult
    func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool

    /// Replaces the row with the same primary key in place (never delete and re-insert).
    ///
    /// - Throws: ``DepotError/Code/notFound`` when there is no such row.
    func update(_ row: Row, in entity: EntityHandle) throws

    /// Deletes the row with primary key `key`; returns whether it existed.
    @discardableResult
    func delete(key: Value, from entity: EntityHandle) throws -> Bool

    /// Deletes every row matching `query` (honouring its order, offset and limit);
    /// returns how many were deleted.
    @discardableResult
    func delete(_ query: Query) throws -> Int
}

/// A storage backend: memory, SQLite, LMDB.
///
/// A store is a reference type shared by every controller that uses it. It runs
/// transactions on its own threads or queues, never on Swift's cooperative pool, and
/// serializes write transactions: one writer at a time, in submission order. Readers see
/// a consistent snapshot and never see an open writer's changes.
///
/// Applications use a store through this protocol. A new backend does not implement it: it
/// writes a ``StorageEngine``, and ``EngineStore`` implements `Store` over it (see
/// <doc:WritingABackend>). Each `completion` is called exactly once, on success and on
/// failure alike; the async forms and single-row reads come from extensions.
public protocol Store: AnyObject, Sendable {
    /// A short name of the backend ("memory", "sqlite", "lmdb"), for logs and reports.
    var backendName: String { get }

    /// Creates or migrates the storage for these entities, then calls `completion` with
    /// their handles, in the same order.
    ///
    /// Registering an entity that is already registered with the same description costs
    /// a lookup and returns the same handle. Additive changes are applied (see
    /// ``SchemaMigration``); others fail.
    ///
    /// - Throws (through `completion`): ``DepotError/Code/invalidSchema``,
    ///   ``DepotError/Code/schemaMismatch``.
    func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<[EntityHandle], any Error>) -> Void)

    /// Runs `body` in a read transaction on the store's own execution resources, then calls
    /// `completion` with what it returned or threw.
    func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void)

    /// Runs `body` in a write transaction, after every write submitted before it. The
    /// transaction commits when `body` returns and rolls back when it throws.
    func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void)

    /// Runs `body` in a write transaction as ``submitWrite(_:completion:)`` does, for a
    /// caller that keeps what `body` computed itself.
    ///
    /// Not generic, so a backend runs it without instantiating a type of the caller's at run
    /// time (its queued write, its `Result`, its closures), which a generic requirement
    /// called through `any Store` does on every call. A ``Controller``'s writes come here.
    /// The default calls ``submitWrite(_:completion:)``.
    func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void)

    /// The feed of committed changes.
    var changes: ChangeFeed { get }

    /// Where the store reports metrics and spans; nil (the default) for none.
    var telemetry: StoreTelemetry? { get }

    /// The handles of every entity the store holds: those registered in this process and,
    /// for a store on files or a server, those it holds from before, registered now with
    /// their stored descriptions (so nothing changes).
    ///
    /// What tools that work without the application's record types read the schema from:
    /// JSON import and export, ``StoreCopy``, ``StoreChecks`` and the `depot` command.
    func storedEntities() async throws -> [EntityHandle]

    /// Checks the store's own files beyond what Depot sees through transactions (SQLite's
    /// `integrity_check` and `foreign_key_check`, LMDB's indexes against its records, the
    /// memory store's trees), as `depot check` does beside ``StoreChecks``.
    ///
    /// - Returns: Every problem found, in words; empty when there is none.
    func checkIntegrity() async throws -> [String]

    /// Waits for the work submitted before it (queued work included) to finish, ends the
    /// change feed, then releases files and threads. Later calls fail with
    /// ``DepotError/Code/closed``. Closing twice is harmless, and every call returns only
    /// after the store's resources are released, whichever call began closing.
    func close() async
}

extension Store {
    /// Runs the write through ``submitWrite(_:completion:)``: a backend without a faster
    /// way to run a write whose result the caller keeps.
    public func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        submitWrite(body, completion: completion)
    }

    /// ``submitWrite(_:completion:)`` for a backend whose writes all go through its
    /// ``submitUntypedWrite(_:completion:)``: the result is kept in a box beside the write.
    package func submitWriteThroughUntyped<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        let call = AwaitedCall<any WriteTransaction, T>(body)
        submitUntypedWrite({ try call.run($0) }) { result in
            completion(result.flatMap { call.result(of: "write") })
        }
    }
}

extension ReadTransaction {
    /// Visits the rows matching `query` in backend-neutral form: for the places that keep
    /// rows (observation diffs, tests). Decoding records goes through ``fetch(_:reserve:_:)``.
    public func fetchRows(_ query: Query, _ body: (Row) throws -> Void) throws {
        try fetch(query, reserve: { _ in }) { try body($0.row()) }
    }

    /// Reads the row with primary key `key` in backend-neutral form into `row`; returns
    /// whether it exists.
    public func fetchRow(_ entity: EntityHandle, key: Value, into row: inout Row) throws -> Bool {
        var found: Row?
        let exists = try fetchRow(entity, key: key) { found = try $0.row() }
        if let found { row = found }
        return exists
    }
}

extension Store {
    /// Reads the record with primary key `key` as a read of its own, calls `visit` with it
    /// when there is one, then calls `completion` with whether there was.
    ///
    /// Through the store's own lookup by key when it has one; otherwise one
    /// ``ReadTransaction/fetchRow(_:key:_:)`` in a read transaction.
    public func readRow(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        if let fast = self as? any RowReadingStore {
            return fast.submitRowRead(entity, key: key, visit: visit, completion: completion)
        }
        submitRead({ transaction -> Bool in try transaction.fetchRow(entity, key: key, visit) }, completion: completion)
    }

    /// Reads the record with primary key `key` as a read of its own, decodes it with
    /// `decode`, then calls `completion` with the result (`nil` when there is none).
    @inlinable
    public func readRow<T: Sendable>(
        _ entity: EntityHandle, key: Value, decode: @escaping @Sendable (any ColumnReader) throws -> T,
        completion: @escaping @Sendable (Result<T?, any Error>) -> Void
    ) {
        let box = ReadBox<T>()
        readRow(entity, key: key, visit: { box.value = try decode($0) }) { found in
            completion(found.map { _ in box.value })
        }
    }
}

/// What a read's `visit` decoded, kept by the caller while the backend runs the read on its
/// thread.
///
/// `@unchecked Sendable`: the backend's thread writes `value` before it completes the
/// read, and the caller reads it only after the completion (a continuation's resume, or the
/// completion handler itself), which orders the two.
@usableFromInline
final class ReadBox<T>: @unchecked Sendable {
    @usableFromInline var value: T?
    @inlinable init() {}
}
