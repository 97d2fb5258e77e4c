import CLMDB
public import DepotCore
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization

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
public final class LMDBStore: RowReadingStore, ExecutorReadingStore, WriteGroupRunner {
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
        /// Whether to open an existing store for reading only; `false` by default (URL
        /// option `readOnly=true`).
        ///
        /// The environment is opened with `MDB_RDONLY` and nothing is created or changed: a
        /// missing directory, or one without a Depot store, is refused. Writes, registering
        /// an entity that is new or differs from the stored one, and migrations fail with
        /// `DepotError.readOnly(_:)` (`DepotError.Code.permissionDenied`).
        public var readOnly: Bool
        /// Whether to create the missing directories above the store's directory; `false` by
        /// default (URL option `createDirectories=true`).
        ///
        /// The store's directory is the store: it is created when missing either way (unless
        /// ``readOnly``), but only inside a directory that exists. By default a path whose
        /// parent directory does not exist (a mistyped path) is refused with
        /// `DepotError.Code.io`, naming the missing directory, and nothing is created; with
        /// this set, the whole chain is created.
        public var createDirectories: Bool

        /// Creates options; each one not given keeps the default its property names.
        public init(
            mapSize: Int = 64 << 20, maxReaders: Int = 126, maxDatabases: Int = 256, durability: Durability = .full, readOnly: Bool = false,
            createDirectories: Bool = false
        ) {
            self.mapSize = mapSize
            self.maxReaders = maxReaders
            self.maxDatabases = maxDatabases
            self.durability = durability
            self.readOnly = readOnly
            self.createDirectories = createDirectories
        }
    }

    /// The directory that holds the environment (`data.mdb`, `lock.mdb`).
    public let directory: String
    /// The options the store was opened with.
    public let options: Options
    /// Where the store logs.
    public let log: StoreLog
    /// The metrics and spans of ``log``, when they are on.
    public var telemetry: StoreTelemetry? { log.telemetry }
    /// The committed changes of this store's writes.
    public let changes = ChangeFeed()
    /// The backend's name in logs and reports: "lmdb".
    public var backendName: String { "lmdb" }

    package let environment: Environment
    /// The registered entities. Changed only by registration, whose commit and publication
    /// happen under this lock and bump its version; a read transaction begins between two
    /// versions, or under the lock (see ``beginRead()``): so a reader's snapshot and its
    /// schema always belong together.
    let catalog = CatalogCell()
    /// Registration, writes and closing, one at a time in submission order; writes queued
    /// behind a running one are committed together (see ``runWrites(_:)``).
    package let writerLane = SerialLane(label: "depot.lmdb.writer", concurrent: false)
    let readers = DispatchQueue(label: "depot.lmdb.readers", attributes: .concurrent)
    let gate: StoreGate

    /// Opens the store in `directory`, creating the directory and an empty environment when
    /// they do not exist.
    ///
    /// The directory's parent must exist (so a typo is an error, not a new tree) unless
    /// ``Options/createDirectories`` is set. Stale reader slots of crashed processes are
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
        } else if options.readOnly {
            throw DepotError(.io, "There is no LMDB store at \(directory) (no such directory), and a store opened read-only is never created. Check the path.")
        } else {
            if !options.createDirectories {
                // Only the store's own directory is created: a missing parent is a typo in
                // the path far more often than a tree the caller wants made.
                let parent = URL(fileURLWithPath: directory).deletingLastPathComponent().path
                var parentIsDirectory: ObjCBool = false
                guard fileManager.fileExists(atPath: parent, isDirectory: &parentIsDirectory) else {
                    throw DepotError(
                        .io,
                        "The directory \(parent) that is to hold the LMDB store \(directory) does not exist. Check the path, or create it (URL option createDirectories=true, LMDBStore.Options.createDirectories).")
                }
                guard parentIsDirectory.boolValue else {
                    throw DepotError(.invalidConfiguration, "\(parent) is a file, not a directory; the LMDB store \(directory) needs a directory to be in. Check the path.")
                }
            }
            do {
                try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: options.createDirectories)
            } catch {
                // Another process opening the same new store may have created the directory
                // between the check above and this call; its directory is the one we want.
                var raced: ObjCBool = false
                guard fileManager.fileExists(atPath: directory, isDirectory: &raced), raced.boolValue else {
                    throw DepotError(.permissionDenied, "Cannot create the store directory \(directory): \(error.localizedDescription).")
                }
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
            } else if options.readOnly {
                throw DepotError(.io, "There is no LMDB store in \(path) (no data.mdb, or an empty one), and a store opened read-only is never created. Check the path.")
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

    // MARK: Work accounting

    @inline(__always)
    func begin() throws(DepotError) { try gate.enter() }

    /// Admission of a transaction run by work admitted when it was submitted (see
    /// `StoreGate.enterWithin()`): not refused while a close waits for that work.
    @inline(__always)
    func beginWithin() throws(DepotError) { try gate.enterWithin() }

    @inline(__always)
    func end() { gate.leave() }

    // MARK: Transactions

    /// Begins a read transaction, with the transaction object whose catalog belongs to its
    /// snapshot.
    ///
    /// The handle's transaction object from its last read is reused when the catalog has
    /// not changed since (almost always): then the read retains no object that other
    /// readers share. Each such retain is an atomic on a cache line every reader thread
    /// writes, and so contends across all concurrent reads.
    func beginRead() throws(DepotError) -> (ReaderHandle, LMDBTransaction, UInt64) {
        let env = environment
        var rc: Int32 = 0
        for _ in 0..<8 {
            // Each attempt's own code only: a previous attempt's MDB_PANIC or
            // MDB_MAP_RESIZED must not be acted on again when this one skips both begins.
            rc = 0
            let ticket = env.gate.enter()
            let epoch = env.epoch
            guard let pointer = env.pointer else {
                // An earlier reopen failed: try again.
                env.gate.leave(ticket)
                try recover(env, seen: epoch)
                continue
            }
            // Between catalog changes (almost always), no lock: the reader begins, and
            // keeps the catalog of the version it began in when no change was published
            // meanwhile.
            let before = catalog.version
            if before & 1 == 0 {
                let begun: ReaderHandle?
                (rc, begun) = env.beginReader(pointer)
                if rc == 0, let begun {
                    var transaction = reusedTransaction(on: begun, catalogVersion: before)
                    if transaction == nil {
                        let (current, version) = catalog.versionedSnapshot
                        if version == before { transaction = newReadTransaction(on: begun, catalog: current, version: version) }
                    }
                    // The reader's view of the database is read before the version is
                    // read again (a seqlock's reader fence; free on x86).
                    atomicMemoryFence(ordering: .acquiring)
                    if let transaction, catalog.version == before {
                        return (begun, transaction, ticket)
                    }
                    // A change was published while the reader began: begin again, below,
                    // under the catalog's lock.
                    env.endReader(begun)
                    rc = 0
                }
            }
            if rc == 0 {
                let begun: ReaderHandle?
                let snapshot: CatalogSnapshot
                let version: UInt64
                (rc, begun, snapshot, version) = catalog.withSnapshot { entities in
                    let (rc, handle) = env.beginReader(pointer)
                    // Stable: changes are made under the lock held here.
                    return (rc, handle, entities, catalog.version)
                }
                if rc == 0, let begun {
                    begun.transaction = nil
                    return (begun, newReadTransaction(on: begun, catalog: snapshot, version: version), ticket)
                }
            }
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

    func readNow<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") { try readInSnapshot(body) }
    }

    func readInSnapshot<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try beginWithin()
        defer { end() }
        var attempts = 0
        while true {
            attempts += 1
            let (reader, transaction, ticket) = try beginRead()
            let result = Result { try body(transaction) }
            transaction.isFinished = true
            // Read before the handle goes back: the next read on it may reuse the object.
            let catalogChanged = transaction.catalogChanged
            // Kept for the next read on this handle; reused only if nothing else keeps it.
            reader.transaction = transaction
            environment.endReader(reader)
            environment.gate.leave(ticket)
            // Another process migrated an entity: reload the catalog (on the writer queue,
            // where every mdb_dbi_open of this process runs) and read again.
            guard catalogChanged, attempts < Self.catalogReloads else { return try result.get() }
            try writerLane.runAndWait { try self.reloadCatalog() }
        }
    }

    /// The transaction object of `reader`'s last read, ready for this one, when it was made
    /// for catalog version `catalogVersion` and nothing outside the store kept it.
    @inline(__always)
    private func reusedTransaction(on reader: ReaderHandle, catalogVersion: UInt64) -> LMDBTransaction? {
        guard var kept = reader.transaction else { return nil }
        reader.transaction = nil
        guard kept.catalogVersion == catalogVersion, isKnownUniquelyReferenced(&kept), kept.reopen() else { return nil }
        return kept
    }

    private func newReadTransaction(on reader: ReaderHandle, catalog snapshot: CatalogSnapshot, version: UInt64) -> LMDBTransaction {
        let transaction = LMDBTransaction(
            txn: reader.txn, catalog: snapshot, writable: false, maxKeySize: environment.maxKeySize,
            metaDBI: environment.metaDBI, storeName: directory, recording: false)
        transaction.catalogVersion = version
        return transaction
    }

    /// How often one transaction follows schema changes of other processes before it gives
    /// up with the `DepotError.Code.schemaMismatch` it met.
    static let catalogReloads = 8

    /// Reloads the handles of every entity whose stored schema another process changed.
    /// Runs on the writer queue.
    func reloadCatalog() throws {
        let snapshot = catalog.snapshot
        let (changed, _) = try runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
            var updated: [String: RegisteredEntity] = [:]
            for (handle, handles) in snapshot.registry.all {
                let name = handle.name
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
    func runWrite<T>(
        catalog snapshot: CatalogSnapshot, recording: Bool,
        publish: ((T) -> [String: RegisteredEntity])? = nil, _ body: (LMDBTransaction) throws -> T
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
            // Read-only: the catalog's databases are opened in a read transaction (committed,
            // so its handles stay open); the transaction refuses writes.
            var rc = mdb_txn_begin(pointer, nil, options.readOnly ? UInt32(MDB_RDONLY) : 0, &begun)
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
                txn: txn, catalog: snapshot, writable: !options.readOnly, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
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
                    snapshot = catalog.snapshot
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
                snapshot = catalog.snapshot
                continue
            }
            if let publish {
                let published = publish(result)
                rc = catalog.mutate { entities in
                    let rc = mdb_txn_commit(txn)
                    if rc == 0 { for entry in published.values { entities.set(entry.entity, entry) } }
                    return rc
                }
            } else {
                // Changes nothing a reader pairs with its snapshot: a commit that changes
                // the registry must go through `catalog.mutate` (above), whose version
                // readers check (see `beginRead`).
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

    /// Runs writes the lane found queued one behind the other. One write runs in a
    /// transaction of its own. Several share one: each in a nested transaction, so a
    /// closure that throws rolls back only its own changes, then one commit, one sync, for
    /// all; each caller gets its own result, and observers one change set per write, in
    /// order. A full map grows and reruns the whole group (write closures may run more than
    /// once, as always); a failed commit fails every write of the group, nothing of them
    /// kept.
    package func runWrites(_ group: [any GroupedWrite]) {
        if group.count == 1, let write = group.first {
            var failure: (any Error)?
            do { _ = try writeNow { try write.perform($0) } } catch { failure = error }
            write.complete(failure: failure)
            return
        }
        var failures: [(any Error)?] = []
        var recorders: [ChangeRecorder?] = []
        do {
            try beginWithin()
            defer { end() }
            let snapshot = catalog.snapshot
            let recording = changes.makeRecorder().isDetailed
            _ = try runWrite(catalog: snapshot, recording: recording) { parent in
                // Run again from the start after a map growth or a catalog reload.
                failures = []
                recorders = []
                for write in group {
                    var begun: OpaquePointer?
                    let rc = mdb_txn_begin(mdb_txn_env(parent.txn), parent.txn, 0, &begun)
                    guard rc == 0, let child = begun else {
                        throw parent.fail(rc, "Beginning a nested write transaction in the LMDB store at \(directory)")
                    }
                    let transaction = LMDBTransaction(
                        txn: child, catalog: parent.snapshot, writable: true, maxKeySize: parent.maxKeySize, metaDBI: parent.metaDBI,
                        storeName: directory, recording: recording)
                    do {
                        try log.transaction("write") {
                            try ReferenceEnforcement.run(transaction, transaction.catalog.relationships) { try write.perform($0) }
                        }
                    } catch {
                        transaction.isFinished = true
                        mdb_txn_abort(child)
                        if transaction.mapFull || transaction.catalogChanged {
                            // The whole group reruns, this write included.
                            parent.mapFull = parent.mapFull || transaction.mapFull
                            parent.catalogChanged = parent.catalogChanged || transaction.catalogChanged
                            throw error
                        }
                        failures.append(error)
                        recorders.append(nil)
                        continue
                    }
                    transaction.isFinished = true
                    if transaction.mapFull || transaction.catalogChanged {
                        mdb_txn_abort(child)
                        parent.mapFull = parent.mapFull || transaction.mapFull
                        parent.catalogChanged = parent.catalogChanged || transaction.catalogChanged
                        throw DepotError.lmdb(MDB_MAP_FULL, context: "Writing in the LMDB store at \(directory)")
                    }
                    let committed = mdb_txn_commit(child)
                    if committed != 0 { throw parent.fail(committed, "Committing a nested write transaction in the LMDB store at \(directory)") }
                    failures.append(nil)
                    recorders.append(transaction.recorder)
                }
            }
        } catch {
            // Nothing of the group was kept: each write fails with its own error if it had
            // one, else with the group's.
            for (index, write) in group.enumerated() {
                write.complete(failure: index < failures.count ? failures[index] ?? error : error)
            }
            return
        }
        for (index, write) in group.enumerated() {
            if let recorder = recorders[index] { changes.publish(recorder) }
            write.complete(failure: failures[index])
        }
    }

    func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try log.transaction("write") { try writeInTransaction(body) }
    }

    func writeInTransaction<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try beginWithin()
        defer { end() }
        let snapshot = catalog.snapshot
        let (result, recorder) = try runWrite(catalog: snapshot, recording: changes.makeRecorder().isDetailed) { transaction in
            try ReferenceEnforcement.run(transaction, transaction.catalog.relationships, body)
        }
        if let recorder { changes.publish(recorder) }
        return result
    }

    func registerNow(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        try beginWithin()
        defer { end() }
        for entity in entities { try entity.validate() }
        let snapshot = catalog.snapshot
        let registered = snapshot.registry
        try Relationships.validate(entities, registered: { registered[$0]?.entity })
        if entities.allSatisfy({ registered[$0.name]?.entity.serves($0) ?? false }) {
            return entities.compactMap { registered.handle(named: $0.name) }
        }
        _ = try runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
            var updated: [String: RegisteredEntity] = [:]
            // Read-only: only entities stored as declared (indexes kept beyond the
            // declaration included) are opened.
            if options.readOnly, try !entities.allSatisfy({ try transaction.readStoredEntity($0.name)?.entity.serves($0) ?? false }) {
                throw DepotError.readOnly("LMDB store at \(directory)")
            }
            transaction.storeLog = log
            for entity in entities {
                updated[entity.name] = try transaction.registerStamped(entity, current: updated[entity.name] ?? registered[entity.name]?.entry)
            }
            return updated
        }
        for entity in entities {
            if let stored = registered[entity.name]?.entity {
                let kept = entity.keepingIndexes(of: stored)
                if stored != kept, let migration = try? SchemaMigration.plan(from: stored, to: kept) { log.schemaMigrated(migration) }
            } else {
                log.schemaCreated(entity)
            }
        }
        let current = catalog.registry
        return entities.compactMap { current.handle(named: $0.name) }
    }

    // MARK: Store

    /// Creates or updates the databases of `entities` on the writer, in submission order
    /// with the writes.
    public func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<[EntityHandle], any Error>) -> Void
    ) {
        writerLane.submit(admittedBy: gate, closed: DepotError.closed("LMDB store at \(directory)"), {
            Result { try self.log.loggingFailure("registering entities") { try self.registerNow(entities) } }
        }, completion: completion)
    }

    /// Runs `body` on the reader queue, in a read transaction over one snapshot.
    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        // On a thread of the store executor (a task preferring it) blocking is allowed:
        // read right here, and the awaiting task goes on without a hop.
        do { try begin() } catch { return completion(.failure(error)) }
        if StoreExecutor.isCurrent {
            let result = Result { try readNow(body) }
            end()
            return completion(result)
        }
        readers.async {
            let result = Result { try self.readNow(body) }
            self.end()
            completion(result)
        }
    }

    /// One row by key in a read transaction of its own. Not generic (see
    /// `RowReadingStore`): the awaited lookup instantiates no type at run time.
    @usableFromInline
    package func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        if StoreExecutor.isCurrent {
            let result = Result { try self.readNow { try $0.fetchRow(entity, key: key, visit) } }
            end()
            return completion(result)
        }
        readers.async {
            let result = Result { try self.readNow { try $0.fetchRow(entity, key: key, visit) } }
            self.end()
            completion(result)
        }
    }

    /// One row by key, as ``submitRowRead(_:key:visit:completion:)``, without retaining the
    /// store: its submitter keeps it alive until `read.finish` (see `RowReadingStore`).
    @usableFromInline
    package func submitRowRead(_ read: any RowRead) {
        do { try begin() } catch { return read.finish(.failure(error)) }
        if StoreExecutor.isCurrent { return readRowNow(read) }
        let store = Unmanaged.passUnretained(self)
        readers.async { store._withUnsafeGuaranteedRef { $0.readRowNow(read) } }
    }

    /// The read of an admitted ``submitRowRead(_:)``, which it ends.
    private func readRowNow(_ read: any RowRead) {
        let result = Result { try readNow { try $0.fetchRow(read.entity, key: read.key) { try read.visit($0) } } }
        end()
        read.finish(result)
    }

    /// Runs a read right here: LMDB readers never wait for a connection.
    @usableFromInline
    package func readOnCallingThread(singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        try begin()
        defer { end() }
        try readNow(body)
        return true
    }

    /// Runs `body` on the writer after every write submitted before it.
    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitWriteThroughUntyped(body, completion: completion)
    }

    /// Runs `body` on the writer after every write submitted before it; writes queued behind a
    /// running one share its commit.
    public func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        if options.readOnly { return completion(.failure(DepotError.readOnly("LMDB store at \(directory)"))) }
        do { try begin() } catch { return completion(.failure(error)) }
        let write = PendingWrite(body, completion: completion, runner: self, admittedBy: gate)
        // On a thread that may block (a task preferring the store executor), an idle writer
        // runs the write right here: no hop to the lane's thread and back.
        if StoreExecutor.isCurrent, writerLane.runHereIfIdle(write: write) { return }
        guard writerLane.submit(write: write) else {
            return write.complete(failure: DepotError.closed("LMDB store at \(directory)"))
        }
    }

    /// Waits for the work submitted before it (queued work included), ends the change feed,
    /// then closes the environment. Later calls fail with
    /// `DepotError.Code.closed`; closing twice is harmless, and every call returns after the
    /// environment has closed, whichever call began closing. A store that is never closed
    /// loses nothing it acknowledged (with ``Durability/full``): the environment closes
    /// when the store is released.
    public func close() async {
        await gate.close {
            // After the last commit and before the environment goes: observations end with
            // `closed` instead of waiting forever, while the store's resources still exist.
            changes.finish()
            let environment = self.environment
            // Closing the environment is blocking work: on the writer's queue, not the pool.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let accepted = writerLane.submit {
                    environment.close()
                    continuation.resume()
                }
                if !accepted { continuation.resume() }
            }
            log.closed("lmdb", at: directory)
        }
    }
}

extension LMDBStore: CatalogStore {
    /// Every entity registered in this process or stored in the environment's catalog
    /// (`entity:<Name>` keys of `depot_meta`), registered with its stored description.
    public func storedEntities() async throws -> [EntityHandle] {
        // Read and registered in one write transaction: registered in a second one, a
        // description another process changed in between would be registered as a change
        // back to the old layout, and refused.
        try begin()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let accepted = writerLane.submit {
                defer { self.end() }
                continuation.resume(with: Result {
                    try self.beginWithin()
                    defer { self.end() }
                    let snapshot = self.catalog.snapshot
                    _ = try self.runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
                        var updated: [String: RegisteredEntity] = [:]
                        for entity in try transaction.storedEntityDescriptions() {
                            updated[entity.name] = try transaction.registerStamped(entity, current: snapshot.registry[entity.name]?.entry)
                        }
                        return updated
                    }
                })
            }
            if !accepted {
                end()
                continuation.resume(throwing: DepotError.closed("LMDB store at \(directory)"))
            }
        }
        return catalog.registry.all.map(\.handle)
    }
}
