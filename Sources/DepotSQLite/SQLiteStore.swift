public import DepotCore

/// The SQLite backend: one ordinary SQLite database file with one table per entity.
///
/// Each entity is a real table with typed columns, its primary key, its unique constraints
/// and the indexes it declares, so the `sqlite3` command line can read and query the file.
/// Depot's own bookkeeping lives in the tables `depot_meta` and `depot_entities`.
///
/// ```swift
/// let store = try SQLiteStore(path: "/var/lib/app/app.sqlite")
/// let cats = Controller<Cat, CatRecord>(store: store)
/// try await cats.save(Cat(id: 1, name: "Tom", weight: 4.5, age: 3))
/// await store.close()
/// ```
///
/// The database runs in WAL mode with one writer connection and a pool of reader
/// connections: reads run in parallel with each other and with the writer, and every read
/// operation sees one consistent snapshot. All SQLite calls run on the store's dispatch
/// queues (at most one call per connection at a time), never on Swift's cooperative thread
/// pool. Writes run one at a time, in the order they were submitted, and writes queued
/// behind a running one share its commit.
///
/// It is `EngineStore<SQLiteEngine>`: Depot's one store runtime over the SQLite engine.
public typealias SQLiteStore = EngineStore<SQLiteEngine>

/// Opening an SQLite store, and where and how it was opened.
extension EngineStore where Engine == SQLiteEngine {
    /// How hard a commit tries to reach the disk.
    public typealias Durability = SQLiteEngine.Durability
    /// How a store is opened.
    public typealias Options = SQLiteEngine.Options

    /// The most reader connections a store opens.
    public static var maximumReaders: Int { SQLiteEngine.maximumReaders }

    /// Opens the SQLite database at `path`, creating the file if missing.
    ///
    /// ```swift
    /// let store = try SQLiteStore(path: "data/app.sqlite", options: .init(durability: .full, createDirectories: true))
    /// ```
    ///
    /// The file's directory must exist (so a mistyped path is an error, not a new directory
    /// tree) unless ``SQLiteEngine/Options/createDirectories`` is set. The file is checked before anything
    /// is written: one that is not an SQLite database, or is another program's database
    /// (unless ``SQLiteEngine/Options/adoptForeignDatabase``), is refused and left untouched; an empty
    /// file or a database without tables is a new store, which is what a crash while
    /// creating one leaves.
    ///
    /// Opening blocks the calling thread (it reads the file and may wait up to
    /// ``SQLiteEngine/Options/busyTimeout`` for a lock): from async code, open the store off Swift's
    /// cooperative thread pool.
    ///
    /// - Parameters:
    ///   - path: The database file.
    ///   - options: Durability, reader count, busy timeout and whether to adopt another
    ///     program's database.
    ///   - log: Where the store logs (nothing by default), and its metrics and spans when
    ///     they are on; see `StoreLog`.
    /// - Throws: `DepotError` with `DepotError.Code.storeCorrupted` for a file that is
    ///   not a database, is damaged, or is another program's database,
    ///   `DepotError.Code.invalidConfiguration` for bad options or a path that is a
    ///   directory, `DepotError.Code.io` or `DepotError.Code.permissionDenied` when the file
    ///   cannot be opened or created (`io` also when its directory is missing),
    ///   `DepotError.Code.busy` when another process holds a lock past the timeout.
    public convenience init(path: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        self.init(engine: try SQLiteEngine(path: path, options: options, log: log), log: log)
    }

    /// Opens a private database that lives as long as the store.
    ///
    /// ```swift
    /// let store = try SQLiteStore.inMemory()
    /// ```
    ///
    /// SQLite's own `:memory:` databases are private to one connection, and shared-cache
    /// or `memdb` databases lock whole tables or have no WAL, so readers would wait for the
    /// writer. An in-memory store is therefore an ordinary WAL database in a private
    /// temporary directory (in `/dev/shm`, which is memory, when it exists; otherwise the
    /// system's temporary directory), with `synchronous=OFF`; the directory is removed
    /// when the store closes or is released (a crashed process leaves it behind). It
    /// behaves exactly like a file store.
    ///
    /// - Parameters:
    ///   - options: Reader count and busy timeout; durability is ignored.
    ///   - log: Where the store logs, and its metrics and spans when they are on.
    /// - Throws: `DepotError` with `DepotError.Code.io` when the temporary directory
    ///   cannot be created, `DepotError.Code.invalidConfiguration` for bad options.
    public static func inMemory(options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) -> SQLiteStore {
        SQLiteStore(engine: try SQLiteEngine.inMemory(options: options, log: log), log: log)
    }

    /// The database file (for an in-memory store, its private temporary file).
    public var path: String { engine.path }
    /// Whether the store is a private temporary database, removed when it closes.
    public var isInMemory: Bool { engine.isInMemory }
    /// The options the store was opened with.
    public var options: Options { engine.options }
}
