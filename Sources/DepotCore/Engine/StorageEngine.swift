public import Dispatch

/// What only a storage engine can do: keep rows, in transactions.
///
/// A backend is an engine under ``EngineStore``, Depot's one implementation of ``Store``.
/// The store runtime does everything that is the same on every backend — admitting work
/// and draining it on close, the writer's lane with group commit, the pool of read
/// connections, reference enforcement, publishing committed changes, logging, metrics and
/// spans, running reads on the calling task when that is allowed — and calls the engine
/// for what only it can do: begin a read or a write transaction and read and write rows in
/// it, commit and roll back, the save points of a group commit, register and rewrite an
/// entity's schema, and close.
///
/// ```swift
/// let store = EngineStore(engine: try SortedArrayEngine(), log: StoreLog(logger: logger))
/// let cats = Controller<Cat, CatRecord>(store: store)
/// ```
///
/// The runtime calls an engine from its own threads, never from Swift's cooperative pool
/// unless ``EngineTraits/readsBlock`` or ``EngineTraits/writesBlock`` says the call cannot
/// block. It calls the schema members, ``beginWrite(recordingKeys:)`` and ``close()`` on
/// its writer's lane, one at a time; ``beginRead(on:singleStatement:)`` on any number of
/// threads at once, at most one read per read connection. See <doc:WritingABackend>.
public protocol StorageEngine: AnyObject, Sendable {
    /// The engine's read transaction.
    associatedtype Reading: EngineReadTransaction
    /// The engine's write transaction.
    associatedtype Writing: EngineWriteTransaction
    /// What a read holds for its duration when reads need a resource of their own (a
    /// database connection); `Never` (the default) when they need none.
    associatedtype ReadConnection: Sendable = Never

    /// A short name of the backend ("memory", "sqlite"), for logs, spans and reports.
    var backendName: String { get }

    /// Where the store is, for logs: a path, a URL without its password, `memory:`.
    var location: String { get }

    /// How errors name the store: "SQLite store at /var/lib/app/app.sqlite".
    var storeDescription: String { get }

    /// Whether the store refuses every write, migration and new registration; the runtime
    /// refuses them with ``DepotError/readOnly(_:)`` before they reach the engine.
    var isReadOnly: Bool { get }

    /// How the runtime may call the engine.
    var traits: EngineTraits { get }

    /// The read connections the runtime hands out to reads, one read at a time each; empty
    /// (the default when ``ReadConnection`` is `Never`) when reads need none, so any number
    /// run at once.
    var readConnections: [ReadConnection] { get }

    /// The entities registered in this process, in the engine's current descriptions.
    ///
    /// Called on the writer's lane, before each registration to check references.
    func entities() throws -> [EntityHandle]

    /// Every entity the engine holds: those registered in this process and, for a store on
    /// files, those its files hold, which this registers with their stored descriptions (so
    /// nothing changes). What tools that work without the application's record types list
    /// (``Store/storedEntities()``), and what a read-only store's registration is
    /// checked against. The default is ``entities()``: an engine without files.
    ///
    /// Called on the writer's lane.
    func storedEntities() throws -> [EntityHandle]

    /// Creates, or migrates additively, the storage of `entities`, and returns their handles
    /// in the same order.
    ///
    /// The runtime has validated each description and their references against the
    /// entities already held, and refused a read-only store's change. A description is
    /// the one the engine is to hold: the indexes of the entity held now that the
    /// declaration leaves out are already added back
    /// (``EntityDescription/keepingIndexes(of:)``). An entity registered
    /// with the same description returns the same handle. A changed one is migrated when
    /// ``SchemaMigration/plan(from:to:)`` allows it, else refused with what it throws.
    /// Called on the writer's lane; nothing else runs on the engine's writer meanwhile.
    func register(_ entities: [EntityDescription]) throws -> [EntityHandle]

    /// A migration step (what ``Migrator``'s schema steps run on), in one write
    /// transaction: reads every record of the entity `name`, passes each through `transform`
    /// (the old row in, the row in `entity`'s layout out), replaces the entity's stored
    /// description and records with `entity` and the new rows (another name renames the
    /// entity), and inserts `ledgerRow` into `ledger`. Nothing changes when any part fails.
    /// When `ledger` already holds `ledgerRow`'s key as the transaction begins (another
    /// process running the same migration applied the step meanwhile), nothing is rewritten
    /// and the result is nil. Called on the writer's lane.
    ///
    /// - Returns: The handle of the rewritten entity, or nil when the step was applied
    ///   meanwhile.
    /// - Throws: What ``SchemaRewrite/check(renaming:to:registered:relationships:)`` refuses;
    ///   ``DepotError/Code/duplicateKey`` when two new rows share a key or a unique value;
    ///   ``DepotError/Code/missingReference`` when a new row refers to no record; what
    ///   `transform` throws.
    func rewrite(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row,
        ledger: EntityHandle
    ) throws -> EntityHandle?

    /// Begins a read transaction: one consistent snapshot, that never sees an open write's
    /// changes. The runtime calls ``EngineReadTransaction/end()`` when the read is done.
    ///
    /// - Parameters:
    ///   - connection: The connection the read holds, or nil when the engine has none.
    ///   - singleStatement: The read should need one statement (a lookup by key, a
    ///     controller's `fetchAll`, `count` or page): an engine whose single statement is its
    ///     own snapshot may skip beginning a transaction. Should the body go on to a second
    ///     statement, which would see another snapshot, the transaction refuses it and asks
    ///     for ``EngineRetry/asTransaction``: the runtime begins the read again with
    ///     `singleStatement` false.
    func beginRead(on connection: ReadConnection?, singleStatement: Bool) throws -> Reading

    /// Begins a read that runs again, after the transaction of its `attempt`-th run asked
    /// for `retry`: what the runtime calls. The default calls
    /// ``beginRead(on:singleStatement:)``; an engine whose reads begin differently when
    /// they run again (on a connection made afresh, in a transaction rather than in
    /// autocommit mode) implements this, and reads `retry` and `attempt` to decide, and to
    /// stop asking.
    ///
    /// - Parameters:
    ///   - connection: The connection the read holds, the same on every run of one read.
    ///   - singleStatement: See ``beginRead(on:singleStatement:)``.
    ///   - retry: What the previous run asked for; nil on the first run.
    ///   - attempt: How many times the read ran before; 0 on the first run.
    func beginRead(on connection: ReadConnection?, singleStatement: Bool, after retry: EngineRetry?, attempt: Int) throws -> Reading

    /// Begins a write transaction. The runtime runs one at a time, and ends each with
    /// ``EngineWriteTransaction/commit()`` or ``EngineWriteTransaction/rollback()``.
    ///
    /// - Parameter recordingKeys: Record each written key for the change feed (someone
    ///   observes it); otherwise record only which entities were touched.
    func beginWrite(recordingKeys: Bool) throws -> Writing

    /// Begins a write transaction that runs again, after its `attempt`-th run asked for
    /// `retry`: what the runtime calls. The default calls ``beginWrite(recordingKeys:)``.
    ///
    /// - Parameters:
    ///   - recordingKeys: See ``beginWrite(recordingKeys:)``.
    ///   - retry: What the previous run asked for; nil on the first run.
    ///   - attempt: How many times the transaction ran before; 0 on the first run.
    func beginWrite(recordingKeys: Bool, after retry: EngineRetry?, attempt: Int) throws -> Writing

    /// The queue the reads on `connection` run on; nil (the default) for the runtime's
    /// shared concurrent read queue. An engine whose connections each want a serial queue
    /// of their own (a client library that blocks on a socket) returns it here.
    func readQueue(for connection: ReadConnection) -> DispatchQueue?

    /// Called once, when the runtime starts running the engine, with what the engine may
    /// ask of the runtime afterwards: publishing changes other processes committed. The
    /// default does nothing.
    func start(_ runtime: EngineRuntime)

    /// Problems found in the stored data, in words; empty when there are none. The default
    /// finds none: the runtime's own checks (references, unique values) run on every store.
    func checkIntegrity() throws -> [String]

    /// Does what must happen before a transaction that asked for it runs again from the
    /// start (``EngineReadTransaction/retry``, ``EngineWriteTransaction/retry``): grow a
    /// memory map that filled up, reload a schema another process changed. Throws to give
    /// up, when more attempts cannot help: the work then fails with that error.
    ///
    /// Called on the writer's lane, with nothing else of the engine's writer running, after
    /// the transaction that asked has ended or rolled back. A read that asked waits for it.
    ///
    /// - Parameters:
    ///   - retry: What the transaction asked for.
    ///   - attempt: How many times this transaction has asked so far, from 1.
    func prepareRetry(_ retry: EngineRetry, attempt: Int) throws

    /// Releases files, connections and threads. The runtime calls it once, on the writer's
    /// lane, after every admitted read and write has ended and the change feed has finished.
    func close()
}

extension StorageEngine {
    /// Begins the read as its first run does.
    public func beginRead(on connection: ReadConnection?, singleStatement: Bool, after retry: EngineRetry?, attempt: Int) throws -> Reading {
        try beginRead(on: connection, singleStatement: singleStatement)
    }

    /// Begins the write as its first run does.
    public func beginWrite(recordingKeys: Bool, after retry: EngineRetry?, attempt: Int) throws -> Writing {
        try beginWrite(recordingKeys: recordingKeys)
    }

    /// The runtime's shared read queue.
    public func readQueue(for connection: ReadConnection) -> DispatchQueue? { nil }

    /// Asks nothing of the runtime.
    public func start(_ runtime: EngineRuntime) {}

    /// The entities registered in this process: an engine without files holds no others.
    public func storedEntities() throws -> [EntityHandle] { try entities() }

    /// Finds no problems: the runtime's own checks run on every store.
    public func checkIntegrity() throws -> [String] { [] }

    /// Gives up: an engine whose transactions ask for a retry implements this itself.
    public func prepareRetry(_ retry: EngineRetry, attempt: Int) throws {
        throw DepotError(.backend, "The \(backendName) engine asked to run a transaction again (\(retry.reason)) but does not implement prepareRetry(_:attempt:).")
    }
}

/// An engine's request that the runtime run a transaction again from the start, because
/// the transaction met a condition the engine can mend but the transaction cannot go on
/// from: a full memory map, a schema another process changed meanwhile.
///
/// The request wins over what the transaction's body did: a body that caught the error
/// the condition raised and returned normally still runs again, since what it read or
/// wrote may rest on the stale state. So a body must have no effect outside the
/// transaction and what it returns. The runtime calls ``StorageEngine/prepareRetry(_:attempt:)``
/// between the attempts.
///
/// A transaction may ask as soon as it begins (the engine found the schema changed while
/// beginning it): its calls then throw, and it runs again once the engine is prepared.
public struct EngineRetry: Sendable, Hashable, CustomStringConvertible {
    /// What the engine must mend, in words ("the memory map is full"), for logs; engines
    /// also tell their own requests apart by it.
    public var reason: String
    /// Whether the read runs again as a transaction, with nothing to prepare: see
    /// ``asTransaction``.
    public let inTransaction: Bool
    /// Whether the runtime calls ``StorageEngine/prepareRetry(_:attempt:)`` before the next
    /// run: see ``init(reason:needsPreparation:)``.
    public let needsPreparation: Bool

    /// Creates a request to run the transaction again for `reason`.
    ///
    /// - Parameters:
    ///   - reason: What went wrong, in words, for logs.
    ///   - needsPreparation: Whether the engine must mend something shared first (grow the
    ///     map, reload the schema). Then the runtime calls
    ///     ``StorageEngine/prepareRetry(_:attempt:)`` on the writer's lane before the next
    ///     run, and a read waits for the lane. Pass false when what went wrong belongs to
    ///     the transaction alone and is mended as the next run begins (a lost connection
    ///     made afresh): the transaction runs again at once, a read without waiting for the
    ///     writer, and ``StorageEngine/prepareRetry(_:attempt:)`` is not called. Either way
    ///     the run counts as an attempt.
    public init(reason: String, needsPreparation: Bool = true) {
        self.reason = reason
        self.inTransaction = false
        self.needsPreparation = needsPreparation
    }

    private init(inTransactionBecause reason: String) {
        self.reason = reason
        self.inTransaction = true
        self.needsPreparation = false
    }

    /// A read begun with `singleStatement` (see ``StorageEngine/beginRead(on:singleStatement:)``)
    /// went on to a second statement: the runtime ends it and begins it again with
    /// `singleStatement` false, so that its statements share one snapshot. Nothing is
    /// prepared (``StorageEngine/prepareRetry(_:attempt:)`` is not called) and it does not
    /// count as an attempt.
    public static let asTransaction = EngineRetry(inTransactionBecause: "the read went on to a second statement")

    /// The reason.
    public var description: String { reason }
}

extension StorageEngine where ReadConnection == Never {
    /// No read connections: reads need none, so any number run at once.
    public var readConnections: [Never] { [] }
}

/// How the runtime may call an engine.
public struct EngineTraits: Sendable, Hashable {
    /// Whether a read may block: do I/O, or wait for a lock a writer holds. When it never
    /// does (the memory engine), awaited reads run on the calling task, even one of Swift's
    /// cooperative pool, without a hop to the store's threads.
    public var readsBlock: Bool

    /// Whether a write may block. When it never does, an awaited write runs on the calling
    /// task when no other write is running or queued.
    public var writesBlock: Bool

    /// Whether writes queued one behind the other may share one transaction, each caller's
    /// write in a save point (``EngineWriteTransaction/savepoint()``): one commit, and one
    /// sync, for all of them. Otherwise each runs in a transaction of its own.
    public var groupsWrites: Bool

    /// Whether the writer's lane may run its jobs on any thread of a concurrent queue (a
    /// task a write resumes then usually goes on on the thread that ran it) rather than on
    /// one serial queue's thread.
    public var writerOnConcurrentQueue: Bool

    /// Creates traits; by default reads and writes may block, and writes neither group nor leave
    /// the writer's serial queue.
    public init(readsBlock: Bool = true, writesBlock: Bool = true, groupsWrites: Bool = false, writerOnConcurrentQueue: Bool = false) {
        self.readsBlock = readsBlock
        self.writesBlock = writesBlock
        self.groupsWrites = groupsWrites
        self.writerOnConcurrentQueue = writerOnConcurrentQueue
    }
}

/// An engine's read transaction.
public protocol EngineReadTransaction: ReadTransaction {
    /// Set when the read must run again from the start (see ``EngineRetry``); the runtime
    /// reads it after the body returns or throws, before ``end()``. Nil by default.
    var retry: EngineRetry? { get }

    /// Ends the read and releases its snapshot. Calls made through the transaction after it
    /// throw ``DepotError/transactionEnded``.
    func end()
}

extension EngineReadTransaction {
    /// Never asks for a retry.
    public var retry: EngineRetry? { nil }
}

extension EngineReadTransaction where Self: EngineWriteTransaction {
    /// Never asks for a retry: one transaction type for reads and writes.
    public var retry: EngineRetry? { nil }
}

/// An engine's write transaction. Reads in it see its own writes.
///
/// The runtime wraps it for reference enforcement, so the engine keeps primary keys,
/// unique values and the rows' shape (``EntityDescription/check(_:)``), and records what
/// it wrote in a ``ChangeRecorder``.
public protocol EngineWriteTransaction: WriteTransaction {
    /// The references between the entities the transaction writes, enforced around each
    /// caller's write (``ReferenceEnforcement``).
    var relationships: Relationships { get }

    /// Set when the transaction must roll back and run again from the start, every write it
    /// holds with it (see ``EngineRetry``). The runtime reads it after each caller's write
    /// and after a failed commit. Nil by default.
    var retry: EngineRetry? { get }

    /// Commits, and returns what was written since the transaction began or since the last
    /// ``releaseSavepoint()``. On failure nothing is kept, and the runtime calls
    /// ``rollback()``.
    func commit() throws -> ChangeRecorder

    /// Undoes everything and ends the transaction.
    func rollback()

    /// Marks where one caller's write begins within a grouped transaction. Only called when
    /// ``EngineTraits/groupsWrites`` is set; the default throws.
    func savepoint() throws

    /// Keeps the write since the save point, and returns what it wrote.
    func releaseSavepoint() throws -> ChangeRecorder

    /// Undoes the write since the save point and forgets what it recorded. Throws when the
    /// engine lost the whole transaction instead (an I/O error, a full disk); the runtime
    /// then rolls back and fails the writes before it too.
    func rollbackToSavepoint() throws
}

extension EngineWriteTransaction {
    /// Never asks for a retry.
    public var retry: EngineRetry? { nil }

    /// Fails with ``DepotError/Code/backend``: an engine that sets
    /// ``EngineTraits/groupsWrites`` implements save points itself.
    public func savepoint() throws { throw DepotError(.backend, "This engine does not group writes; clear EngineTraits.groupsWrites.") }
    /// Fails as ``savepoint()`` does.
    public func releaseSavepoint() throws -> ChangeRecorder { try savepoint(); return ChangeRecorder() }
    /// Fails as ``savepoint()`` does.
    public func rollbackToSavepoint() throws { try savepoint() }
}

/// What an engine may ask of the store runtime it runs under (``StorageEngine/start(_:)``).
///
/// It holds the store weakly: once the store is gone, asking does nothing.
public struct EngineRuntime: Sendable {
    private let publishChanges: @Sendable ([Change]) -> Void
    private let publishEntities: @Sendable ([String]) -> Void

    /// Creates a runtime handle from what the runtime does for each request.
    public init(publish: @escaping @Sendable ([Change]) -> Void, publishTouched: @escaping @Sendable ([String]) -> Void) {
        self.publishChanges = publish
        self.publishEntities = publishTouched
    }

    /// Publishes changes another process (or another store on the same data) committed to
    /// the store's observers, in order with the store's own commits.
    public func publish(_ changes: [Change]) { publishChanges(changes) }

    /// Tells the store's observers that `entities` changed in ways not known key by key
    /// (another process's large write, or commits that may have been missed), in order with
    /// the store's own commits: they read them again.
    public func publishTouched(_ entities: [String]) { publishEntities(entities) }
}
