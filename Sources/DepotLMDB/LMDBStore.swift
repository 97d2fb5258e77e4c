import CLMDB
public import DepotCore
import Dispatch
import Foundation
import Synchronization

/// The LMDB backend: one LMDB environment per directory, one named database per entity
/// and per index, memory-mapped reads.
///
/// Read transactions run concurrently on the store's reader queue and see a snapshot;
/// write transactions run one at a time on the store's writer queue, in submission order.
/// Nothing blocking runs on Swift's cooperative pool. When the map is full the store
/// doubles it and reruns the transaction; see <doc:DepotLMDB#Map-growth> for how growth
/// waits for open reads without stalling the others.
///
/// ```swift
/// let store = try LMDBStore(directory: "/var/lib/app/cats")
/// let cats = Controller<Cat, CatRecord>(store: store)
/// try await cats.save(Cat(id: 1, name: "Tom", weight: 4.2, age: 3))
/// let old = try await cats.fetchAll(Request(\.age > 10).sorted(by: \.name))
/// await store.close()
/// ```
///
/// A write closure may run more than once: when the map fills up mid-transaction, the
/// transaction is rolled back, the map grows and the closure runs again from the start.
/// Keep write closures free of side effects outside the transaction.
///
/// The directory is readable with LMDB's tools: `mdb_stat -a <directory>` lists the
/// databases, `mdb_dump -s <Entity> <directory>` dumps one. See <doc:DepotLMDB> for the
/// layout.
public final class LMDBStore: Store {
    /// How durable a commit is once the write call returns.
    public enum Durability: Sendable, Hashable {
        /// LMDB's default: every commit is flushed to disk (data and metadata) before it
        /// returns. Nothing acknowledged is lost, even on power failure.
        case full
        /// `MDB_NOMETASYNC`: data pages are flushed on commit, the metadata page only on
        /// the next commit. A system crash or power failure may lose the last commit; the
        /// store stays consistent. A process crash loses nothing.
        case relaxed
        /// `MDB_NOSYNC`: nothing is flushed on commit; the operating system writes pages
        /// when it likes. A process crash loses nothing, but a system crash or power
        /// failure may lose recent commits **and may corrupt the store** (the file system
        /// may reorder writes). Only for data you can rebuild.
        case unsafe
    }

    /// How a store opens its environment.
    public struct Options: Sendable, Hashable {
        /// The initial size of the memory map in bytes (64 MiB by default, at most 16 TiB;
        /// rounded up to whole pages). It is address space, not disk: the file grows with
        /// the data. When it fills up, the store doubles it.
        public var mapSize: Int
        /// The most read transactions open at once, across every process using the
        /// directory (LMDB's default, 126).
        public var maxReaders: Int
        /// The most named databases: one per entity, one per indexed or unique attribute,
        /// plus one for the schema.
        public var maxDatabases: Int
        /// How durable a commit is; ``Durability/full`` by default.
        public var durability: Durability

        public init(mapSize: Int = 64 << 20, maxReaders: Int = 126, maxDatabases: Int = 256, durability: Durability = .full) {
            self.mapSize = mapSize
            self.maxReaders = maxReaders
            self.maxDatabases = maxDatabases
            self.durability = durability
        }
    }

    /// The directory that holds the environment (`data.mdb`, `lock.mdb`).
    public let directory: String
    /// The options the store was opened with.
    public let options: Options
    /// Where the store logs.
    public let log: StoreLog
    public let changes = ChangeFeed()
    public var backendName: String { "lmdb" }

    let environment: Environment
    /// The registered entities. Changed only by registration, whose commit and publication
    /// happen under this lock, as does the start of every read transaction: so a reader's
    /// snapshot and its schema always belong together.
    private let catalog = Locked<[String: EntityHandles]>([:])
    private let writer = DispatchQueue(label: "depot.lmdb.writer")
    private let readers = DispatchQueue(label: "depot.lmdb.readers", attributes: .concurrent)
    private let gate: StoreGate

    /// Opens the store in `directory`, creating the directory and an empty environment when
    /// they do not exist.
    ///
    /// Stale reader slots left by crashed processes are cleared on open. An existing
    /// `data.mdb` is first checked in read-only mode, so a damaged, truncated or foreign
    /// file is refused without being modified.
    ///
    /// Opening blocks the calling thread: it reads the file, and its first write transaction
    /// waits while another process holds LMDB's write lock. It never sleeps on a timer. In
    /// async code, use Depot's async store opener, which runs this off Swift's cooperative
    /// pool.
    ///
    /// - Parameters:
    ///   - directory: The environment's directory.
    ///   - options: Map size, reader and database limits, durability.
    /// - Throws: ``DepotError`` — ``DepotError/Code/storeCorrupted`` when the directory holds
    ///   a damaged or foreign `data.mdb`; ``DepotError/Code/invalidConfiguration`` for a
    ///   bad option (a `mapSize` above 16 TiB) or a path that is a file; ``DepotError/Code/busy`` when the directory is
    ///   already open in this process; ``DepotError/Code/permissionDenied`` or
    ///   ``DepotError/Code/io`` when the files cannot be created.
    ///   - log: Where the store logs (nothing by default); see `StoreLog`.
    public convenience init(directory: String, options: Options = .init(), log: StoreLog = .disabled) throws {
        do {
            try self.init(opening: directory, options: options, log: log)
        } catch {
            log.failed("opening the LMDB store at \(directory)", error)
            throw error
        }
    }

    private init(opening directory: String, options: Options, log: StoreLog) throws {
        self.log = log
        guard options.mapSize > 0, options.maxReaders > 0, options.maxDatabases > 1,
            options.maxReaders <= Int(UInt32.max), options.maxDatabases <= Int(UInt32.max)
        else {
            throw DepotError(.invalidConfiguration, "LMDBStore options must be positive (mapSize \(options.mapSize), maxReaders \(options.maxReaders), maxDatabases \(options.maxDatabases) of at least 2).")
        }
        // The map is address space: more than this cannot be mapped on today's machines, and
        // bounding it here keeps page rounding and doubling free of overflow.
        guard options.mapSize <= Environment.maximumMapSize else {
            throw DepotError(.invalidConfiguration, "LMDBStore mapSize \(options.mapSize) is larger than the largest map Depot supports, \(Environment.maximumMapSize) bytes (16 TiB); use a smaller mapSize (the map grows when it fills up).")
        }
        let fileManager = FileManager.default
        var isDirectory: ObjCBool = false
        if fileManager.fileExists(atPath: directory, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw DepotError(.invalidConfiguration, "\(directory) is a file; an LMDB store needs a directory of its own.")
            }
        } else {
            do {
                try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw DepotError(.permissionDenied, "Cannot create the store directory \(directory): \(error.localizedDescription).")
            }
        }
        let path = URL(fileURLWithPath: directory).standardizedFileURL.resolvingSymlinksInPath().path
        guard OpenDirectories.claim(path) else {
            throw DepotError(.busy, "The LMDB store at \(path) is already open in this process; share that LMDBStore instead of opening the directory twice.")
        }
        let pointer: OpaquePointer
        do {
            let dataFile = (path as NSString).appendingPathComponent("data.mdb")
            if let size = (try? fileManager.attributesOfItem(atPath: dataFile))?[.size] as? NSNumber, size.intValue > 0 {
                try Self.validate(path: path, options: options)
            }
            pointer = try Self.openEnvironment(path: path, options: options, flags: Self.flags(options))
        } catch {
            OpenDirectories.release(path)
            throw error
        }
        let environment = Environment(pointer: pointer, path: path)
        var dead: Int32 = 0
        _ = mdb_reader_check(pointer, &dead)
        environment.metaDBI = try Self.prepareMetadata(environment, pointer: pointer, idle: false)
        self.environment = environment
        self.directory = path
        self.gate = StoreGate(store: "LMDB store at \(path)")
        self.options = options
        log.opened(
            "lmdb", at: path,
            ["depot.mapSize": .stringConvertible(options.mapSize), "depot.durability": .string("\(options.durability)")])
    }

    /// The flags of the store's environment: `MDB_NOTLS` (transactions are not tied to
    /// threads: they run on dispatch queues) and the durability.
    private static func flags(_ options: Options) -> Int32 {
        var flags = Int32(MDB_NOTLS)
        switch options.durability {
        case .full: break
        case .relaxed: flags |= Int32(MDB_NOMETASYNC)
        case .unsafe: flags |= Int32(MDB_NOSYNC)
        }
        return flags
    }

    /// `size` rounded up to whole system pages, at least 16 of them, and at most
    /// ``Environment/maximumMapSize``: never an overflow, whatever `size` is.
    static func roundedMapSize(_ size: Int) -> Int {
        let page = max(4096, Int(sysconf(Int32(_SC_PAGESIZE))))
        let bounded = min(max(size, 16 * page), Environment.maximumMapSize)
        let (pages, remainder) = bounded.quotientAndRemainder(dividingBy: page)
        return (pages + (remainder == 0 ? 0 : 1)) * page
    }

    private static func openEnvironment(path: String, options: Options, flags: Int32) throws(DepotError) -> OpaquePointer {
        var created: OpaquePointer?
        var rc = mdb_env_create(&created)
        guard rc == 0, let env = created else { throw DepotError.lmdb(rc, context: "Creating an LMDB environment for \(path)") }
        let readOnly = flags & Int32(MDB_RDONLY) != 0
        rc = mdb_env_set_maxdbs(env, MDB_dbi(options.maxDatabases))
        if rc == 0 { rc = mdb_env_set_maxreaders(env, UInt32(options.maxReaders)) }
        if rc == 0 && !readOnly {
            rc = mdb_env_set_mapsize(env, Self.roundedMapSize(options.mapSize))
        }
        if rc == 0 { rc = mdb_env_open(env, path, UInt32(flags), 0o644) }
        if rc != 0 {
            mdb_env_close(env)
            if rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED {
                throw DepotError(.storeCorrupted, "\(path)/data.mdb is not an LMDB environment this version of LMDB can read (\(String(cString: mdb_strerror(rc)))). It was not modified; point the store at another directory or restore the file.", nativeCode: rc)
            }
            throw DepotError.lmdb(rc, context: "Opening the LMDB environment at \(path)")
        }
        return env
    }

    /// Checks an existing environment without writing to it: LMDB must read it, and it must
    /// be a Depot store (or empty) of a format this version reads.
    private static func validate(path: String, options: Options) throws(DepotError) {
        let env = try openEnvironment(path: path, options: options, flags: Int32(MDB_RDONLY) | Int32(MDB_NOTLS))
        defer { mdb_env_close(env) }
        // A data file shorter than the pages its snapshot uses (a truncated copy, a disk that
        // lost its tail) would make LMDB read past the end of the map: SIGBUS, not an error.
        // Check the pages before LMDB reads any beyond the meta pages (see DataFileCheck).
        let txn = try beginCheckedSnapshot(env, path: path)
        defer { mdb_txn_abort(txn) }
        var rc: Int32
        var meta: MDB_dbi = 0
        rc = mdb_dbi_open(txn, Catalog.metaName, 0, &meta)
        if rc == MDB_NOTFOUND {
            var main: MDB_dbi = 0
            var stat = MDB_stat()
            rc = mdb_dbi_open(txn, nil, 0, &main)
            if rc == 0 { rc = mdb_stat(txn, main, &stat) }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
            if stat.ms_entries > 0 {
                throw DepotError(.storeCorrupted, "\(path) holds an LMDB environment that is not a Depot store (it has no \(Catalog.metaName) database). It was not modified; use another directory.")
            }
            return
        }
        if rc == MDB_INCOMPATIBLE {
            throw DepotError(.storeCorrupted, "\(path) holds an LMDB environment whose \(Catalog.metaName) is not a Depot metadata database. It was not modified; use another directory.", nativeCode: rc)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the metadata of the LMDB store at \(path)") }
        var key = MDB_val()
        var value = MDB_val()
        rc = Catalog.formatKey.withUnsafeBytes { raw in
            key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return mdb_get(txn, meta, &key, &value)
        }
        if rc == MDB_NOTFOUND { return }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the metadata of the LMDB store at \(path)") }
        let format = String(decoding: UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size), as: UTF8.self)
        guard format == String(Catalog.formatVersion) else {
            throw DepotError(.storeCorrupted, "The LMDB store at \(path) has layout format '\(format.prefix(16))', but this version of Depot reads format \(Catalog.formatVersion). It was not modified.")
        }
    }

    /// Begins a read transaction on the read-only `env` whose snapshot is checked to lie
    /// inside `data.mdb`.
    ///
    /// The check reads the meta page of the transaction's own snapshot: while the
    /// transaction is open, no writer (of any process) reuses that snapshot's pages. A
    /// writer in another process may overwrite the meta slot two commits later; the check
    /// then starts over with a new transaction.
    private static func beginCheckedSnapshot(_ env: OpaquePointer, path: String) throws(DepotError) -> OpaquePointer {
        var descriptor: Int32 = -1
        var stat = MDB_stat()
        var rc = mdb_env_get_fd(env, &descriptor)
        if rc == 0 { rc = mdb_env_stat(env, &stat) }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
        let dataFile = (path as NSString).appendingPathComponent("data.mdb")
        let check = DataFileCheck(descriptor: descriptor, pageSize: Int(stat.ms_psize), path: dataFile)
        for _ in 0..<100 {
            var begun: OpaquePointer?
            rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &begun)
            guard rc == 0, let txn = begun else { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
            let id = UInt64(mdb_txn_id(txn))
            do throws(DepotError) {
                if let meta = try check.meta(slot: Int(id % 2)), meta.txnid == id {
                    var status = Foundation.stat()
                    guard fstat(descriptor, &status) == 0 else {
                        throw DepotError.lmdb(errno, context: "Reading the size of \(dataFile)")
                    }
                    try check.check(meta, fileSize: Int(status.st_size))
                    // Read again: a meta page torn by a concurrent commit is not trusted.
                    if try check.meta(slot: Int(id % 2)) == meta { return txn }
                }
            } catch {
                mdb_txn_abort(txn)
                throw error
            }
            mdb_txn_abort(txn)
        }
        throw DepotError(.busy, "The LMDB store at \(path) changed too fast to be checked while opening (another process commits continuously); retry the open.")
    }

    /// Opens (creating when new) the metadata database of `pointer`, the environment of
    /// `environment`, and records the layout format. `idle`: called inside the gate (while
    /// reopening), where the map is resized directly rather than through the gate.
    private static func prepareMetadata(_ environment: Environment, pointer: OpaquePointer, idle: Bool) throws(DepotError) -> MDB_dbi {
        for _ in 0..<64 {
            var begun: OpaquePointer?
            var rc = mdb_txn_begin(pointer, nil, 0, &begun)
            if rc == MDB_MAP_RESIZED {
                if idle {
                    let resized = environment.adoptMapSizeNow()
                    if resized != 0 { throw DepotError.lmdb(resized, context: "Adopting the new map size of \(environment.path)") }
                } else {
                    try environment.adoptMapSize()
                }
                continue
            }
            guard rc == 0, let txn = begun else {
                throw DepotError.lmdb(rc, context: "Opening the LMDB store at \(environment.path)")
            }
            var meta: MDB_dbi = 0
            rc = mdb_dbi_open(txn, Catalog.metaName, UInt32(MDB_CREATE), &meta)
            if rc == 0 {
                var key = MDB_val()
                var value = MDB_val()
                let format = Array(String(Catalog.formatVersion).utf8)
                rc = Catalog.formatKey.withUnsafeBytes { k in
                    format.withUnsafeBytes { v in
                        key = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                        value = MDB_val(mv_size: v.count, mv_data: UnsafeMutableRawPointer(mutating: v.baseAddress))
                        return mdb_put(txn, meta, &key, &value, UInt32(MDB_NOOVERWRITE))
                    }
                }
                if rc == MDB_KEYEXIST { rc = 0 }
            }
            if rc != 0 {
                mdb_txn_abort(txn)
            } else {
                rc = mdb_txn_commit(txn)
            }
            if rc == MDB_MAP_FULL {
                if idle { try environment.growNow().get() } else { try environment.grow() }
                continue
            }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Preparing the metadata of the LMDB store at \(environment.path)") }
            return meta
        }
        throw DepotError(.storeFull, "The LMDB store at \(environment.path) could not grow its map to hold its metadata.")
    }

    // MARK: Work accounting

    @inline(__always)
    private func begin() throws(DepotError) { try gate.enter() }

    @inline(__always)
    private func end() { gate.leave() }

    // MARK: Transactions

    /// Begins a read transaction and takes the catalog that belongs to its snapshot.
    private func beginRead() throws(DepotError) -> (OpaquePointer, [String: EntityHandles], UInt64) {
        let env = environment
        var rc: Int32 = 0
        for _ in 0..<8 {
            let ticket = env.gate.enter()
            let epoch = env.epoch
            guard let pointer = env.pointer else {
                // An earlier reopen failed: try again.
                env.gate.leave(ticket)
                try recover(env, seen: epoch)
                continue
            }
            let begun: Environment.ReaderHandle?
            let snapshot: [String: EntityHandles]
            (rc, begun, snapshot) = catalog.withLock { entities in
                let (rc, txn) = env.beginReader(pointer)
                return (rc, txn.map { Environment.ReaderHandle(txn: $0) }, entities)
            }
            if rc == 0, let txn = begun?.txn { return (txn, snapshot, ticket) }
            env.gate.leave(ticket)
            if rc == MDB_MAP_RESIZED {
                try env.adoptMapSize()
                continue
            }
            if rc == MDB_PANIC {
                try recover(env, seen: epoch)
                continue
            }
            throw DepotError.lmdb(rc, context: "Beginning a read transaction in the LMDB store at \(directory)")
        }
        if rc == MDB_PANIC { throw DepotError.lmdb(rc, context: "Beginning a read transaction in the LMDB store at \(directory)") }
        throw DepotError(.busy, "The LMDB store at \(directory) kept being resized by another process; retry the read.")
    }

    private func readNow<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") { try readInSnapshot(body) }
    }

    private func readInSnapshot<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try begin()
        defer { end() }
        var attempts = 0
        while true {
            attempts += 1
            let (txn, snapshot, ticket) = try beginRead()
            let transaction = LMDBTransaction(
                txn: txn, catalog: snapshot, writable: false, maxKeySize: environment.maxKeySize,
                metaDBI: environment.metaDBI, storeName: directory, recording: false)
            let result = Result { try body(transaction) }
            transaction.isFinished = true
            environment.endReader(txn)
            environment.gate.leave(ticket)
            // Another process migrated an entity: reload the catalog (on the writer queue,
            // where every mdb_dbi_open of this process runs) and read again.
            guard transaction.catalogChanged, attempts < Self.catalogReloads else { return try result.get() }
            try writer.sync { try reloadCatalog() }
        }
    }

    /// How often one transaction follows schema changes of other processes before it gives
    /// up with the ``DepotError/Code/schemaMismatch`` it met.
    private static let catalogReloads = 8

    /// Reloads the handles of every entity whose stored schema another process changed.
    /// Runs on the writer queue.
    private func reloadCatalog() throws {
        let snapshot = catalog.withLock { $0 }
        let (changed, _) = try runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
            var updated: [String: EntityHandles] = [:]
            for (name, handles) in snapshot {
                guard try transaction.storedStamp(name) != handles.stamp, let stored = try transaction.readStoredEntity(name) else {
                    continue
                }
                // Opens the databases of the stored schema (new indexes included); writes nothing.
                updated[name] = try transaction.registerStamped(stored.entity, current: nil)
            }
            return updated
        }
        for (name, handles) in changed {
            log.logger.info(
                "LMDB catalog reloaded: another process changed the schema",
                metadata: ["depot.entity": .string(name), "depot.schemaVersion": .stringConvertible(handles.schemaVersion)])
        }
    }

    /// Runs `body` in a write transaction and commits it; on `MDB_MAP_FULL` (from any
    /// operation or from the commit) rolls back, grows the map and runs `body` again.
    /// `publish` turns the result into catalog entries, published atomically with the
    /// commit.
    private func runWrite<T>(
        catalog snapshot: [String: EntityHandles], recording: Bool,
        publish: ((T) -> [String: EntityHandles])? = nil, _ body: (LMDBTransaction) throws -> T
    ) throws -> (T, ChangeRecorder?) {
        let env = environment
        var snapshot = snapshot
        var attempts = 0
        var reloads = 0
        var reopens = 0
        while true {
            attempts += 1
            guard attempts <= 64 else {
                throw DepotError(.storeFull, "The LMDB store at \(directory) could not grow its map enough for this transaction.", nativeCode: MDB_MAP_FULL)
            }
            let ticket = env.gate.enter()
            let epoch = env.epoch
            guard let pointer = env.pointer else {
                // An earlier reopen failed: try again.
                env.gate.leave(ticket)
                try recover(env, seen: epoch)
                continue
            }
            var begun: OpaquePointer?
            var rc = mdb_txn_begin(pointer, nil, 0, &begun)
            guard rc == 0, let txn = begun else {
                env.gate.leave(ticket)
                if rc == MDB_MAP_RESIZED {
                    try env.adoptMapSize()
                    continue
                }
                // A failed write left the environment dead: reopen it and begin again. Only
                // a disk that keeps failing panics it again straight away.
                if rc == MDB_PANIC && reopens < 4 {
                    reopens += 1
                    try recover(env, seen: epoch)
                    continue
                }
                throw DepotError.lmdb(rc, context: "Beginning a write transaction in the LMDB store at \(directory)")
            }
            let transaction = LMDBTransaction(
                txn: txn, catalog: snapshot, writable: true, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
                storeName: directory, recording: recording)
            let result: T
            do {
                result = try body(transaction)
            } catch {
                transaction.isFinished = true
                mdb_txn_abort(txn)
                env.gate.leave(ticket)
                if transaction.mapFull {
                    try grow(env)
                    continue
                }
                if transaction.catalogChanged, reloads < Self.catalogReloads {
                    reloads += 1
                    try reloadCatalog()
                    snapshot = catalog.withLock { $0 }
                    continue
                }
                if log.tracing { log.trace("LMDB write transaction aborted") }
                throw error
            }
            transaction.isFinished = true
            if transaction.mapFull {
                // The closure caught the error and returned; LMDB has poisoned the
                // transaction anyway, so rerun it in a larger map.
                mdb_txn_abort(txn)
                env.gate.leave(ticket)
                try grow(env)
                continue
            }
            if transaction.catalogChanged, reloads < Self.catalogReloads {
                // The closure caught the stale-schema error and returned: what it wrote used
                // the old layout, so roll it back and run it again with the new catalog.
                mdb_txn_abort(txn)
                env.gate.leave(ticket)
                reloads += 1
                try reloadCatalog()
                snapshot = catalog.withLock { $0 }
                continue
            }
            if let publish {
                let published = publish(result)
                rc = catalog.withLock { entities in
                    let rc = mdb_txn_commit(txn)
                    if rc == 0 { entities.merge(published) { $1 } }
                    return rc
                }
            } else {
                rc = mdb_txn_commit(txn)
            }
            env.gate.leave(ticket)
            if rc == MDB_MAP_FULL {
                try grow(env)
                continue
            }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Committing a write transaction in the LMDB store at \(directory)") }
            if log.tracing { log.trace("LMDB write transaction committed", ["depot.attempts": .stringConvertible(attempts)]) }
            return (result, transaction.recorder)
        }
    }

    // MARK: Recovery

    /// Replaces the environment after LMDB declared it dead, and reloads what depends on it.
    ///
    /// LMDB sets `MDB_FATAL_ERROR` when a write of the meta page fails (the commit that
    /// met it fails with the disk's error): from then on every transaction of that
    /// environment, reads included, fails with `MDB_PANIC`, although the file is intact —
    /// the meta page still names the last acknowledged commit. Only closing and opening
    /// the environment again clears it. Runs with every transaction of this store drained
    /// and new ones held back (``TransactionGate/whenIdle(patience:_:)``), then opens the
    /// directory as ``init(directory:options:log:)`` does (the read-only check of the data
    /// file, the metadata) and reopens the databases of the catalog, whose handles belong to
    /// the old environment.
    ///
    /// `epoch` is the ``Environment/epoch`` the caller's failed begin saw: when another
    /// transaction reopened the environment since, there is nothing to do.
    ///
    /// - Throws: ``DepotError/Code/io`` (``DepotError/Code/storeCorrupted`` when the reopened
    ///   file fails its check) when the environment cannot be opened again; the environment
    ///   then stays closed, and the next transaction tries again.
    private func recover(_ env: Environment, seen epoch: UInt64) throws(DepotError) {
        let options = self.options
        let path = directory
        let outcome = env.gate.whenIdle { () -> Result<Bool, DepotError> in
            guard env.epoch == epoch else { return .success(false) }
            return Result { () throws(DepotError) -> Bool in
                try env.replace(
                    open: { mapSize throws(DepotError) in try Self.reopenEnvironment(path: path, options: options, mapSize: mapSize) },
                    prepare: { env throws(DepotError) in
                        guard let pointer = env.pointer else { return }
                        env.metaDBI = try Self.prepareMetadata(env, pointer: pointer, idle: true)
                        try self.reopenCatalog(env, pointer: pointer)
                    })
                return true
            }
        }
        switch outcome {
        case .success(true)?:
            log.logger.warning(
                "LMDB environment reopened: a write to disk had failed and LMDB had stopped the environment (MDB_PANIC); nothing acknowledged was lost",
                metadata: ["depot.location": .string(directory)])
        case .success(false)?:
            break
        case .failure(let error)?:
            log.logger.error(
                "LMDB environment could not be reopened after a failed write",
                metadata: ["depot.location": .string(directory), "depot.error": .string(error.description)])
            throw DepotError(
                error.code == .storeCorrupted ? .storeCorrupted : .io,
                "A write to disk failed earlier, so LMDB stopped the environment of the store at \(directory), and reopening it failed: the disk refused it (\(error.message)). Nothing acknowledged was lost. The store tries to reopen at each new transaction: retry once the disk works again (check free space, permissions and the system log for I/O errors).",
                nativeCode: error.nativeCode ?? MDB_PANIC)
        case nil:
            throw DepotError(
                .busy,
                "A write to disk failed earlier, so LMDB stopped the environment of the store at \(directory); it can only be reopened while no transaction is open, and one stayed open for \(Int(TransactionGate.resizePatience)) s. Finish transactions sooner; the next transaction tries again.",
                nativeCode: MDB_PANIC)
        }
    }

    /// Opens the environment again for ``recover(_:seen:)``, after the same checks as the
    /// first open. The data file must still be there: opening would otherwise create an
    /// empty store in its place and silently drop every record.
    private static func reopenEnvironment(path: String, options: Options, mapSize: Int) throws(DepotError) -> OpaquePointer {
        let dataFile = (path as NSString).appendingPathComponent("data.mdb")
        guard let size = (try? FileManager.default.attributesOfItem(atPath: dataFile))?[.size] as? NSNumber, size.intValue > 0 else {
            throw DepotError(.io, "\(dataFile) is missing or empty; restore it (the store will not create an empty one in its place)", nativeCode: 2 /* ENOENT */)
        }
        try validate(path: path, options: options)
        var reopening = options
        reopening.mapSize = min(max(options.mapSize, mapSize), Environment.maximumMapSize)
        let pointer = try openEnvironment(path: path, options: reopening, flags: flags(options))
        var dead: Int32 = 0
        _ = mdb_reader_check(pointer, &dead)
        return pointer
    }

    /// Reopens the databases of every registered entity in the reopened environment (a
    /// database handle belongs to one environment) and publishes the new handles. Opens
    /// the stored schema, like ``reloadCatalog()``: another process may have migrated an
    /// entity meanwhile. Writes nothing. Runs inside the gate, with no transaction open.
    private func reopenCatalog(_ env: Environment, pointer: OpaquePointer) throws(DepotError) {
        let snapshot = catalog.withLock { $0 }
        for _ in 0..<64 {
            var begun: OpaquePointer?
            var rc = mdb_txn_begin(pointer, nil, 0, &begun)
            if rc == MDB_MAP_RESIZED {
                rc = env.adoptMapSizeNow()
                if rc != 0 { throw DepotError.lmdb(rc, context: "Adopting the new map size of \(directory)") }
                continue
            }
            guard rc == 0, let txn = begun else {
                throw DepotError.lmdb(rc, context: "Reopening the databases of the LMDB store at \(directory)")
            }
            let transaction = LMDBTransaction(
                txn: txn, catalog: snapshot, writable: true, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
                storeName: directory, recording: false)
            var reopened: [String: EntityHandles] = [:]
            do {
                for name in snapshot.keys {
                    guard let stored = try transaction.readStoredEntity(name) else { continue }
                    reopened[name] = try transaction.registerStamped(stored.entity, current: nil)
                }
            } catch {
                transaction.isFinished = true
                mdb_txn_abort(txn)
                throw DepotError.wrapping(error, code: .backend, context: "Reopening the databases of the LMDB store at \(directory)")
            }
            transaction.isFinished = true
            rc = catalog.withLock { entities in
                let rc = mdb_txn_commit(txn)
                if rc == 0 { entities = reopened }
                return rc
            }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Reopening the databases of the LMDB store at \(directory)") }
            return
        }
        throw DepotError(.busy, "The LMDB store at \(directory) kept being resized by another process while it was reopened; retry.")
    }

    /// Grows the map (the whole transaction then runs again), and says so at `info`.
    private func grow(_ env: Environment) throws {
        try env.grow()
        log.logger.info("LMDB map grown; the write transaction runs again", metadata: ["depot.location": .string(directory)])
    }

    private func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try log.transaction("write") { try writeInTransaction(body) }
    }

    private func writeInTransaction<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try begin()
        defer { end() }
        let snapshot = catalog.withLock { $0 }
        let (result, recorder) = try runWrite(catalog: snapshot, recording: changes.makeRecorder().isDetailed) { try body($0) }
        if let recorder { changes.publish(recorder) }
        return result
    }

    private func registerNow(_ entities: [EntityDescription]) throws {
        try begin()
        defer { end() }
        for entity in entities { try entity.validate() }
        let snapshot = catalog.withLock { $0 }
        if entities.allSatisfy({ snapshot[$0.name]?.entity == $0 }) { return }
        _ = try runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
            var updated: [String: EntityHandles] = [:]
            for entity in entities {
                updated[entity.name] = try transaction.registerStamped(entity, current: updated[entity.name] ?? snapshot[entity.name])
            }
            return updated
        }
        for entity in entities {
            if let stored = snapshot[entity.name]?.entity {
                if stored != entity, let migration = try? SchemaMigration.plan(from: stored, to: entity) { log.schemaMigrated(migration) }
            } else {
                log.schemaCreated(entity)
            }
        }
    }

    // MARK: Store

    public func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        writer.async {
            completion(Result { try self.log.loggingFailure("registering entities") { try self.registerNow(entities) } })
        }
    }

    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        readers.async {
            completion(Result { try self.readNow(body) })
        }
    }

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        writer.async {
            completion(Result { try self.writeNow(body) })
        }
    }

    /// Waits for running transactions, then closes the environment. Later calls fail with
    /// ``DepotError/Code/closed``; closing twice is harmless. A store that is never closed
    /// loses nothing it acknowledged (with ``Durability/full``): the environment closes
    /// when the store is released.
    public func close() async {
        let first = await gate.close()
        let environment = self.environment
        // Closing the environment is blocking work: on the writer's queue, not the pool.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            writer.async {
                environment.close()
                continuation.resume()
            }
        }
        // After the last commit: observations end with `closed` instead of waiting forever.
        changes.finish()
        if first { log.closed("lmdb", at: directory) }
    }
}
