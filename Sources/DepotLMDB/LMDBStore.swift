public import DepotCore

/// The LMDB backend: one LMDB environment per directory, one named database per entity
/// and per index, memory-mapped reads.
///
/// Reads run concurrently on the store's reader queue, each on a snapshot; writes run one
/// at a time in submission order, and writes queued behind a running one commit together.
/// Nothing blocking runs on Swift's cooperative pool.
///
/// ```swift
/// let store = try LMDBStore(directory: "/var/lib/app/cats")
/// let cats = Controller<Cat, CatRecord>(store: store)
/// try await cats.save(Cat(id: 1, name: "Tom", weight: 4.2, age: 3))
/// let old = try await cats.fetchAll(Request(\.age > 10).sorted(by: \.name))
/// await store.close()
/// ```
///
/// When the map fills up mid-transaction the store rolls back, doubles the map and runs
/// the write closure again from the start (see <doc:DepotLMDB#Map-growth>): keep write
/// closures free of side effects outside the transaction. The directory is readable with
/// LMDB's tools (`mdb_stat -a <directory>`, `mdb_dump -s <Entity> <directory>`); see
/// <doc:DepotLMDB> for the layout.
public typealias LMDBStore = EngineStore<LMDBEngine>

/// Opening an LMDB store, and where and how it was opened.
extension EngineStore where Engine == LMDBEngine {
    /// How durable a commit is once the write call returns.
    public typealias Durability = LMDBEngine.Durability
    /// How a store opens its environment.
    public typealias Options = LMDBEngine.Options

    /// Opens the store in `directory`, creating the directory and an empty environment when
    /// they do not exist.
    ///
    /// The directory's parent must exist (so a typo is an error, not a new tree) unless
    /// ``LMDBEngine/Options/createDirectories`` is set. Stale reader slots of crashed processes are
    /// cleared, and an existing `data.mdb` is first checked read-only, so a damaged or
    /// foreign file is refused without being modified.
    ///
    /// Opening blocks the calling thread (its first write waits while another process holds
    /// LMDB's write lock): in async code, use Depot's async store opener, which runs this off
    /// Swift's cooperative pool.
    ///
    /// - Parameters:
    ///   - directory: The environment's directory.
    ///   - options: Map size, reader and database limits, durability.
    ///   - log: Where the store logs (nothing by default), and its metrics and spans when
    ///     they are on; see `StoreLog`.
    /// - Throws: `DepotError` with `DepotError.Code.storeCorrupted` when the directory holds
    ///   a damaged or foreign `data.mdb`, `DepotError.Code.invalidConfiguration` for a bad
    ///   option (a `mapSize` above 16 TiB) or a path that is a file, `DepotError.Code.busy`
    ///   when the directory is already open in this process,
    ///   `DepotError.Code.permissionDenied` or `DepotError.Code.io` when the files cannot be
    ///   created (`io` also when the directory's parent is missing).
    public convenience init(directory: String, options: Options = .init(), log: StoreLog = .disabled) throws {
        let engine: LMDBEngine
        do {
            engine = try LMDBEngine(opening: directory, options: options, log: log)
        } catch {
            log.failed("opening the LMDB store at \(directory)", error)
            throw error
        }
        self.init(engine: engine, log: log)
    }

    /// The directory that holds the environment (`data.mdb`, `lock.mdb`).
    public var directory: String { engine.directory }
    /// The options the store was opened with.
    public var options: Options { engine.options }
}
