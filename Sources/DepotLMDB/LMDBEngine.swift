import CLMDB
public import DepotCore
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// The LMDB storage engine under ``LMDBStore``: one LMDB environment per directory, one
/// named database per entity and per index, memory-mapped reads.
///
/// What is LMDB's own lives here: the environment and its reader slots, the catalog of
/// entity databases and the schema changes other processes make, growing the map when it
/// fills up, and reopening an environment LMDB declared dead. Everything else a store does
/// is ``DepotCore/EngineStore``'s.
public final class LMDBEngine: StorageEngine {
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
    let log: StoreLog

    /// The backend's name in logs and reports: "lmdb".
    public var backendName: String { "lmdb" }
    /// The environment's directory.
    public var location: String { directory }
    /// "LMDB store at <directory>".
    public var storeDescription: String { "LMDB store at \(directory)" }
    /// Whether the environment was opened with `MDB_RDONLY`.
    public var isReadOnly: Bool { options.readOnly }
    /// Reads and writes do I/O (page faults on the map, syncs); writes queued one behind the
    /// other share one commit, each in a nested transaction.
    public var traits: EngineTraits { EngineTraits(readsBlock: true, writesBlock: true, groupsWrites: true) }

    package let environment: Environment
    /// The registered entities. Changed only by registration, whose commit and publication
    /// happen under this lock and bump its version; a read transaction begins between two
    /// versions, or under the lock (see ``beginReader()``): so a reader's snapshot and its
    /// schema always belong together.
    let catalog = CatalogCell()

    init(opening directory: String, options: Options, log: StoreLog) throws {
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
        self.options = options
        log.logger.debug(
            "LMDB environment opened",
            metadata: ["depot.location": .string(path), "depot.mapSize": .stringConvertible(options.mapSize), "depot.durability": .string("\(options.durability)")])
    }

    // MARK: Reads

    /// Begins a read on a snapshot, with the catalog that belongs to it.
    public func beginRead(on connection: Never?, singleStatement: Bool) throws -> LMDBTransaction {
        let (reader, transaction, ticket) = try beginReader()
        transaction.reader = reader
        transaction.ticket = ticket
        return transaction
    }

    /// Begins a read transaction, with the transaction object whose catalog belongs to its
    /// snapshot.
    ///
    /// The handle's transaction object from its last read is reused when the catalog has
    /// not changed since (almost always): then the read retains no object that other
    /// readers share. Each such retain is an atomic on a cache line every reader thread
    /// writes, and so contends across all concurrent reads.
    func beginReader() throws(DepotError) -> (ReaderHandle, LMDBTransaction, UInt64) {
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
            metaDBI: environment.metaDBI, storeName: directory, recording: false, environment: environment)
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

    // MARK: Writes

    /// Begins a write transaction on the writer's lane. A map another process grew is
    /// adopted, and an environment LMDB declared dead reopened, before it begins.
    public func beginWrite(recordingKeys: Bool) throws -> LMDBTransaction {
        let (txn, ticket) = try beginWriteTxn()
        let env = environment
        let transaction = LMDBTransaction(
            txn: txn, catalog: catalog.snapshot, writable: true, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
            storeName: directory, recording: recordingKeys, environment: env)
        transaction.ticket = ticket
        transaction.holdsWriteTicket = true
        return transaction
    }

    /// Begins an LMDB write transaction (a read-only one in a read-only store, where the
    /// catalog's databases are opened in a read transaction, committed so its handles stay
    /// open), holding the environment gate's ticket it returns. A map another process grew
    /// is adopted, and an environment LMDB declared dead reopened, before it begins.
    func beginWriteTxn() throws -> (OpaquePointer, UInt64) {
        let env = environment
        var reopens = 0
        for _ in 0..<64 {
            let ticket = env.gate.enter()
            let epoch = env.epoch
            guard let pointer = env.pointer else {
                // An earlier reopen failed: try again.
                env.gate.leave(ticket)
                try recover(env, seen: epoch)
                continue
            }
            var begun: OpaquePointer?
            let rc = mdb_txn_begin(pointer, nil, options.readOnly ? UInt32(MDB_RDONLY) : 0, &begun)
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
            return (txn, ticket)
        }
        throw DepotError(.busy, "The LMDB store at \(directory) kept being resized by another process; retry the write.")
    }

    /// Grows a full map, or reloads the catalog another process changed, before a
    /// transaction runs again.
    public func prepareRetry(_ retry: EngineRetry, attempt: Int) throws {
        switch retry {
        case .mapFull:
            guard attempt <= 64 else {
                throw DepotError(.storeFull, "The LMDB store at \(directory) could not grow its map enough for this transaction.", nativeCode: MDB_MAP_FULL)
            }
            try grow(environment)
        default:
            guard attempt <= Self.catalogReloads else {
                throw DepotError(.schemaMismatch, "Another process kept changing the schema of the LMDB store at \(directory) while this transaction ran; retry it.")
            }
            try reloadCatalog()
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
        while true {
            attempts += 1
            guard attempts <= 64 else {
                throw DepotError(.storeFull, "The LMDB store at \(directory) could not grow its map enough for this transaction.", nativeCode: MDB_MAP_FULL)
            }
            let (txn, ticket) = try beginWriteTxn()
            let transaction = LMDBTransaction(
                txn: txn, catalog: snapshot, writable: !options.readOnly, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
                storeName: directory, recording: recording, environment: env)
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
            let rc: Int32
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

    // MARK: Schema

    /// The handles of the entities registered in this process.
    public func entities() throws -> [EntityHandle] {
        catalog.registry.all.map(\.handle)
    }

    /// Every entity registered in this process or stored in the environment's catalog
    /// (`entity:<Name>` keys of `depot_meta`), registered with its stored description.
    public func storedEntities() throws -> [EntityHandle] {
        // Read and registered in one write transaction: registered in a second one, a
        // description another process changed in between would be registered as a change
        // back to the old layout, and refused.
        let snapshot = catalog.snapshot
        _ = try runWrite(catalog: snapshot, recording: false, publish: { $0 }) { transaction in
            var updated: [String: RegisteredEntity] = [:]
            for entity in try transaction.storedEntityDescriptions() {
                updated[entity.name] = try transaction.registerStamped(entity, current: snapshot.registry[entity.name]?.entry)
            }
            return updated
        }
        return catalog.registry.all.map(\.handle)
    }

    /// Creates or updates the databases of `entities`, and publishes their handles with the
    /// commit.
    public func register(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        let snapshot = catalog.snapshot
        let registered = snapshot.registry
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

    // MARK: Closing

    /// Closes the environment, which releases the directory for another open.
    public func close() {
        environment.close()
    }
}

extension EngineRetry {
    /// LMDB reported `MDB_MAP_FULL`: the map grows, and the transaction runs again.
    static let mapFull = EngineRetry(reason: "the LMDB map is full")
    /// Another process changed an entity's stored schema: the catalog is reloaded, and the
    /// transaction runs again with it.
    static let catalogChanged = EngineRetry(reason: "another process changed the schema")
}
