public import DepotCore

/// The PostgreSQL backend: one table per entity in a schema of a PostgreSQL database, shared
/// by every process (and every server) that opens it.
///
/// ```swift
/// let store = try PostgresStore(url: "postgres://app@db.internal:5432/app")
/// let cats = Controller<Cat, CatRecord>(store: store)
/// try await cats.save(Cat(id: 1, name: "Tom", weight: 4.5, age: 3))
/// await store.close()
/// ```
///
/// Each entity is a real table with typed columns (`bigint`, `boolean`, `double precision`,
/// `text COLLATE "C"`, `bytea`, `uuid`), its primary key, its unique constraints, its indexes
/// and its references' foreign keys, readable with `psql`. Depot's bookkeeping lives in the
/// tables `depot_meta` and `depot_entities` of the same schema.
///
/// The client is libpq, PostgreSQL's own C library, through a system-library target: its
/// calls block, which is what the store's worker threads are for (every other backend's
/// calls block too), it adds no package to build, and it speaks every protocol feature and
/// connection option (`sslmode`, Unix sockets, `.pgpass`) PostgreSQL's tools do. Every
/// call runs on the store's dispatch queues, never on Swift's cooperative pool: each
/// connection on a serial queue of its own, off the global queue's workers that Swift's
/// tasks share on Linux, so that a call waiting for the server holds back no task.
///
/// Reads run on a pool of reader connections in `REPEATABLE READ READ ONLY` transactions,
/// so an operation sees one snapshot; a read that is one statement (a lookup by key, a
/// controller's fetch, count or page) runs alone in autocommit mode, its own snapshot.
/// Writes run one at a time per store on the writer
/// connection, in `SERIALIZABLE` transactions: when two processes' operations conflict
/// (each read what the other writes), PostgreSQL fails one with a serialization failure
/// and the store runs that write's closure again from the start, up to
/// ``PostgresEngine/Options/retries`` times, so a read-modify-write never loses an update. A write that is
/// one write of a record by key goes out as one autocommit statement, as serializable as
/// the transaction it replaces (see the DocC article). Keep write closures free of outside
/// side effects: one may run more than once.
///
/// A connection string that names several hosts names a primary and its standbys: writes
/// go to the primary, reads to a standby, and a read after this store's write sees it
/// (``PostgresEngine/Options/consistency``).
///
/// A write committed by any process reaches this store's observers: each write sends the
/// keys it changed with `pg_notify` in its own transaction (so only a commit is heard), and
/// a listener connection publishes other stores' notifications into `changes`.
///
/// It is `EngineStore<PostgresEngine>`: Depot's one store runtime over the PostgreSQL engine.
public typealias PostgresStore = EngineStore<PostgresEngine>

/// Opening a PostgreSQL store, and how it was opened.
extension EngineStore where Engine == PostgresEngine {
    /// How hard a commit tries to reach the disk (PostgreSQL's `synchronous_commit`).
    public typealias Durability = PostgresEngine.Durability
    /// What a read served by a standby promises (URL option `consistency`).
    public typealias Consistency = PostgresEngine.Consistency
    /// How a store is opened.
    public typealias Options = PostgresEngine.Options

    /// The most reader connections a store opens.
    public static var maximumReaders: Int { PostgresEngine.maximumReaders }

    /// Connects to PostgreSQL and opens the store in `options.schema`, creating the schema
    /// and Depot's bookkeeping tables when missing.
    ///
    /// Opening blocks the calling thread (it connects and reads the catalog): from async
    /// code use `openStore(url:)`, which opens off the cooperative pool.
    ///
    /// - Parameters:
    ///   - conninfo: A libpq connection string: `postgresql://user:password@host:5432/db?sslmode=require`
    ///     or `host=/run/postgresql dbname=app`. Connecting waits at most 10 seconds for the
    ///     server unless it sets `connect_timeout`; its password appears in no error message.
    ///   - options: The schema, reader connections, durability, statement timeout and retries.
    ///   - log: Where the store logs, and its metrics and spans when they are on.
    /// - Throws: `DepotError.Code.io` when the server cannot be reached,
    ///   `DepotError.Code.permissionDenied` when it refuses the login,
    ///   `DepotError.Code.invalidConfiguration` for bad options,
    ///   `DepotError.Code.storeCorrupted` when the schema holds Depot tables of an unknown
    ///   format.
    public convenience init(url conninfo: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        self.init(engine: try PostgresEngine(url: conninfo, options: options, log: log), log: log)
    }

    /// The options the store was opened with.
    public var options: Options { engine.options }
}
