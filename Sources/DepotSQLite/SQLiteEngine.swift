import CSQLite
public import DepotCore
import Foundation
import NIOConcurrencyHelpers

/// The SQLite engine under ``SQLiteStore``: one SQLite database file in WAL mode, one
/// writer connection, a pool of reader connections, and the tables of the registered
/// entities.
///
/// ``SQLiteStore`` is `EngineStore<SQLiteEngine>`: Depot's store runtime does admission,
/// the writer's lane with group commit, the pool of readers, reference enforcement, the
/// change feed and telemetry; the engine keeps what is SQLite's own: the connections and
/// their statement caches, savepoints for group commit, the schema cookie that follows
/// other processes' schema changes, the checkpointer beside the writer, and the layout of
/// the file.
public final class SQLiteEngine: StorageEngine {
    /// How hard a commit tries to reach the disk.
    public enum Durability: Sendable, Hashable {
        /// WAL with `synchronous=NORMAL`, the default: a commit survives a crash of the
        /// process; a power loss or an OS crash may lose the last commits, never corrupt
        /// the database. Commits cost no fsync.
        case normal
        /// WAL with `synchronous=FULL`: every commit is fsynced before it returns, so it
        /// survives a power loss too. Each commit costs at least one fsync.
        case full
    }

    /// How a store is opened.
    public struct Options: Sendable, Hashable {
        /// How hard a commit tries to reach the disk; ``Durability/normal`` by default.
        public var durability: Durability
        /// The number of reader connections, so the number of reads that run at once;
        /// 4 by default. From 1 to ``SQLiteEngine/maximumReaders``.
        public var readers: Int
        /// How long a connection waits for a lock held by another process before failing
        /// with `DepotError.Code.busy`; 5 seconds by default.
        public var busyTimeout: Duration
        /// Whether to open an SQLite database that another program created; `false` by
        /// default (URL option `adopt=true`).
        ///
        /// By default a database that has tables but none of Depot's bookkeeping
        /// (`depot_meta`, `depot_entities`) is refused with
        /// `DepotError.Code.storeCorrupted` and left byte for byte as it was, so a
        /// mistyped path never changes another program's file. Set this when you mean
        /// Depot to share the file: Depot then adds its bookkeeping tables and one table
        /// per entity beside the existing ones, never reads, changes or drops those, and
        /// refuses an entity whose name is already taken (`DepotError.Code.invalidSchema`).
        /// The file is switched to WAL mode for good, so every program that uses it must
        /// run on the same host (WAL needs shared memory) with SQLite 3.7 or newer.
        public var adoptForeignDatabase: Bool
        /// Whether to open an existing store for reading only; `false` by default (URL
        /// option `readOnly=true`).
        ///
        /// The file is opened with `SQLITE_OPEN_READONLY` and nothing is created or
        /// changed: a missing file, or one without Depot's tables, is refused, the journal
        /// mode is not switched and no checkpoint runs. Writes, registering an entity that is
        /// new or differs from the stored one, and migrations fail with
        /// `DepotError.readOnly(_:)` (`DepotError.Code.permissionDenied`).
        public var readOnly: Bool
        /// Whether to create the file's directory, and any missing directories above it,
        /// when they do not exist; `false` by default (URL option `createDirectories=true`).
        ///
        /// By default the directory that is to hold the file must exist: a path with a
        /// mistyped directory is refused with `DepotError.Code.io`, naming the missing
        /// directory, and nothing is created. The file itself is created when missing either
        /// way (unless ``readOnly``).
        public var createDirectories: Bool

        /// Creates options; each one not given keeps the default its property names.
        public init(
            durability: Durability = .normal, readers: Int = 4, busyTimeout: Duration = .seconds(5),
            adoptForeignDatabase: Bool = false, readOnly: Bool = false, createDirectories: Bool = false
        ) {
            self.durability = durability
            self.readers = readers
            self.busyTimeout = busyTimeout
            self.adoptForeignDatabase = adoptForeignDatabase
            self.readOnly = readOnly
            self.createDirectories = createDirectories
        }
    }

    /// The most reader connections a store opens.
    public static let maximumReaders = 64

    /// The version of Depot's layout of the file, kept in `depot_meta`.
    static let formatVersion = 1

    /// How often one read follows schema changes before it gives up with `schemaMismatch`.
    static let schemaReloads = 8

    /// The backend's name in logs and reports: "sqlite".
    public var backendName: String { "sqlite" }
    /// The database file (for an in-memory store, its private temporary file).
    public let path: String
    /// Whether the store is a private temporary database, removed when it closes.
    public let isInMemory: Bool
    /// The options the store was opened with.
    public let options: Options
    /// How errors name the store: "SQLite store at /var/lib/app/app.sqlite".
    public let storeDescription: String
    /// The file, or `:memory:` for a private database.
    public var location: String { isInMemory ? ":memory:" : path }
    /// Whether the store was opened with ``Options/readOnly``.
    public var isReadOnly: Bool { options.readOnly }
    /// Reads and writes block (I/O, locks); queued writes share one commit; the writer's
    /// lane runs on a concurrent queue's threads, so a task a write resumes usually goes on
    /// on the thread that ran it.
    public var traits: EngineTraits { EngineTraits(groupsWrites: true, writerOnConcurrentQueue: true) }
    /// The reader connections: one read at a time each.
    public var readConnections: [Reader] { readers }
    let log: StoreLog

    struct State: Sendable {
        /// The registered tables, and the snapshot transactions share.
        var tables = SharingRegistry<RegisteredEntity>()
        var nextSerial = 1
        /// The file's schema cookie the registry was last verified against (see
        /// `SQLiteEngine+SchemaWatch.swift`).
        var verifiedCookie: Int64 = -1
    }

    let state = NIOLockedValueBox(State())
    let writer: Connection
    let readers: [Reader]
    let temporaryDirectory: URL?
    /// Whether the `-wal` and `-shm` files existed when the store opened: a read-only store
    /// removes those its reading created (see `removeCompanionsAfterReading`).
    let companionsAtOpen: (wal: Bool, shm: Bool)
    /// Checkpoints the WAL beside the writer instead of inside its commits.
    package let checkpointer: Checkpointer
    /// The read transactions reader connections keep between reads; `nil` for a read-only
    /// store (see ``KeptSnapshots``).
    let kept: KeptSnapshots?

    // MARK: Opening

    /// Opens the SQLite database at `path`, creating the file if missing: what
    /// `SQLiteStore(path:options:log:)` runs, which documents it.
    public convenience init(path: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        guard !path.isEmpty else {
            throw DepotError(.invalidConfiguration, "The SQLite store path is empty; give a file path, or use SQLiteStore.inMemory().")
        }
        let url = URL(fileURLWithPath: path)
        if !options.readOnly {
            let directory = url.deletingLastPathComponent()
            if options.createDirectories {
                try Self.createDirectory(directory)
            } else {
                try Self.requireDirectory(directory)
            }
        }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw DepotError(.invalidConfiguration, "\(url.path) is a directory; give the path of a database file inside it.")
        }
        do {
            try self.init(file: url.path, temporaryDirectory: nil, options: options, log: log)
        } catch {
            log.failed("opening the SQLite store at \(url.path)", error)
            throw error
        }
    }

    /// Opens a private database that lives as long as the engine: what
    /// `SQLiteStore.inMemory(options:log:)` runs, which documents it.
    public static func inMemory(options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) -> SQLiteEngine {
        var base = FileManager.default.temporaryDirectory
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: "/dev/shm", isDirectory: &isDirectory), isDirectory.boolValue,
            FileManager.default.isWritableFile(atPath: "/dev/shm")
        {
            base = URL(fileURLWithPath: "/dev/shm")
        }
        let directory = base.appendingPathComponent("depot-sqlite-\(UUID().uuidString)", isDirectory: true)
        try createDirectory(directory)
        do {
            return try SQLiteEngine(file: directory.appendingPathComponent("memory.sqlite").path, temporaryDirectory: directory, options: options, log: log)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    init(file: String, temporaryDirectory: URL?, options: Options, log: StoreLog) throws(DepotError) {
        guard (1...Self.maximumReaders).contains(options.readers) else {
            throw DepotError(.invalidConfiguration, "SQLiteStore.Options.readers is \(options.readers); use 1 to \(Self.maximumReaders) reader connections.")
        }
        guard options.busyTimeout >= .zero else {
            throw DepotError(.invalidConfiguration, "SQLiteStore.Options.busyTimeout is negative; use zero or more.")
        }
        self.path = file
        self.isInMemory = temporaryDirectory != nil
        self.options = options
        self.log = log
        self.storeDescription = temporaryDirectory == nil ? "SQLite store at \(file)" : "SQLite store (sqlite::memory:)"
        self.temporaryDirectory = temporaryDirectory

        let companionsBefore = Self.companions(of: file)
        self.companionsAtOpen = companionsBefore
        if options.readOnly, temporaryDirectory != nil {
            throw DepotError(.invalidConfiguration, "An sqlite::memory: store starts empty, so it cannot be opened read-only; open a file.")
        }
        let writer = try Connection.open(path: file, create: !options.readOnly, busyTimeout: options.busyTimeout, readOnly: options.readOnly)
        writer.traceStatements(to: log)
        do throws(DepotError) {
            // Nothing below writes until the file has been found to be a database that is
            // Depot's (or new, or adopted on purpose): setting WAL mode rewrites the header.
            // Closing the last connection to a WAL database checkpoints it and deletes its
            // -wal and -shm, which would rewrite another program's file while refusing it:
            // no checkpoint on close until the file is known to be ours.
            writer.setCheckpointOnClose(false)
            try Self.checkHeader(writer)
            try Self.checkOwnership(writer, adopt: options.adoptForeignDatabase)
            // Read-only: no checkpoint on close, no journal mode switch, no bookkeeping tables.
            if !options.readOnly {
                writer.setCheckpointOnClose(true)
                let journal = try Self.retryingWhileBusy(writer, options.busyTimeout) { () throws(DepotError) in
                    try writer.scalarText("PRAGMA journal_mode = WAL")
                }
                guard journal?.lowercased() == "wal" else {
                    throw DepotError(.invalidConfiguration, "SQLite could not put \(file) in WAL mode (it reports '\(journal ?? "nothing")'); WAL needs a local file system with shared memory support.")
                }
                try writer.execute("PRAGMA synchronous = \(Self.synchronous(options, inMemory: temporaryDirectory != nil))")
            }
            // SQLite enforces the references' FOREIGN KEY clauses too (deferred to commit),
            // behind Depot's own checks; tables without references pay nothing for it.
            try writer.execute("PRAGMA foreign_keys = ON")
            let (stored, cookie) = options.readOnly ? try Self.readBookkeeping(writer, file: file) : try Self.prepareBookkeeping(writer, file: file)
            var connections: [Connection] = []
            for _ in 0..<options.readers {
                let reader = try Connection.open(path: file, create: false, busyTimeout: options.busyTimeout, readOnly: options.readOnly)
                try reader.execute("PRAGMA query_only = 1")
                reader.traceStatements(to: log)
                connections.append(reader)
            }
            let readers = connections.map { Reader(connection: $0) }
            let checkpointer = Checkpointer(path: file, log: log)
            // The writer has written in WAL mode by now, so SQLite has mapped the WAL index.
            let kept = options.readOnly ? nil : writer.walIndexRegion().map { KeptSnapshots(region: $0, readers: readers) }
            checkpointer.kept = kept
            if !options.readOnly { writer.checkpoint(with: checkpointer) }
            self.checkpointer = checkpointer
            self.kept = kept
            self.writer = writer
            self.readers = readers
            state.withLockedValue { s in
                s.verifiedCookie = cookie
                for entity in stored {
                    s.tables.registry.set(entity, RegisteredEntity(entity: entity, serial: s.nextSerial))
                    s.nextSerial += 1
                }
            }
            for reader in readers {
                reader.connection.schemaWatch = { [weak self] connection throws(DepotError) in try self?.watchSchema(connection) }
            }
            log.logger.debug(
                "SQLite store opened",
                metadata: [
                    "depot.durability": .string("\(options.durability)"), "depot.readers": .stringConvertible(options.readers),
                    "depot.entities": .stringConvertible(stored.count),
                ])
        } catch {
            writer.close()
            Self.removeCompanions(of: file, createdSince: companionsBefore)
            throw error
        }
    }

    var tables: EntityRegistry<RegisteredEntity> { state.withLockedValue { $0.tables.registry } }
    /// The registered tables as transactions take them: one retain, not one per array and
    /// dictionary of the registry.
    var sharedTables: SharedRegistry<RegisteredEntity> { state.withLockedValue { $0.tables.snapshot() } }

    // MARK: Transactions

    /// Statement-cache keys for transaction control (entity serials start at 1, so these
    /// never collide with per-entity keys).
    enum Keys {
        static let begin = 0
        static let beginImmediate = 1
        static let commit = 2
        static let rollback = 3
        static let savepoint = 5
        static let releaseSavepoint = 6
        static let rollbackToSavepoint = 7
    }

    static func rollback(_ connection: Connection) {
        if connection.isInTransaction { try? connection.run(key: Keys.rollback, "ROLLBACK") }
    }

    func rollback(_ connection: Connection) { Self.rollback(connection) }

    // MARK: The engine contract

    /// The entities registered in this process and those the file held when it opened.
    public func entities() throws -> [EntityHandle] {
        tables.all.map(\.handle)
    }

    /// Begins a read on `reader`: in autocommit mode for a read of one statement (the
    /// statement is its own snapshot, so `BEGIN`, the snapshot's pin and `ROLLBACK` would
    /// only add statements to the one that matters; a second statement asks for
    /// `EngineRetry.asTransaction`), otherwise in a transaction whose snapshot is taken
    /// now, by reading the schema cookie. A cookie that moved past the one the registry
    /// was verified at asks for a rerun once the registry is reloaded.
    public func beginRead(on reader: Reader?, singleStatement: Bool) throws -> SQLiteTransaction {
        guard let reader else {
            throw DepotError(.backend, "A read of the \(storeDescription) began without a reader connection.")
        }
        let connection = reader.connection
        connection.schemaMoved = false
        guard let kept else { return try beginRead(on: connection, singleStatement: singleStatement, claimed: nil) }
        // Claimed until the transaction ends: a sweep of kept transactions leaves it alone.
        reader.use.withLockedValue {
            $0.busy = true
            $0.usedSinceSweep = true
        }
        do {
            if singleStatement {
                try kept.begin(on: connection)
                let transaction = SQLiteTransaction(connection: connection, tables: sharedTables, writable: false, explicit: false, claimed: reader, kept: kept)
                transaction.single.isOn = true
                return transaction
            }
            if connection.keptHeader != nil {
                connection.keptHeader = nil
                rollback(connection)
            }
            return try beginRead(on: connection, singleStatement: false, claimed: reader)
        } catch {
            reader.use.withLockedValue { $0.busy = false }
            throw error
        }
    }

    /// A read in autocommit mode (`singleStatement`) or in a transaction of its own.
    private func beginRead(on connection: Connection, singleStatement: Bool, claimed: Reader?) throws -> SQLiteTransaction {
        if singleStatement {
            let transaction = SQLiteTransaction(connection: connection, tables: sharedTables, writable: false, explicit: false)
            transaction.single.isOn = true
            return transaction
        }
        try connection.run(key: Keys.begin, "BEGIN")
        do {
            // A deferred transaction takes its snapshot at its first read: read now, so the
            // snapshot is the one of the moment the operation started. The read is the
            // schema cookie, checked against the registry's before anything is read with it.
            let cookie = try connection.schemaCookie()
            if cookie != state.withLockedValue({ $0.verifiedCookie }) { connection.schemaMoved = true }
        } catch {
            rollback(connection)
            throw error
        }
        return SQLiteTransaction(connection: connection, tables: sharedTables, writable: false, claimed: claimed)
    }

    /// Begins an immediate write transaction on the writer connection, with the registry
    /// verified against the file's schema first.
    public func beginWrite(recordingKeys: Bool) throws -> SQLiteTransaction {
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        do {
            try verifySchemaOnWriter()
        } catch {
            rollback(writer)
            throw error
        }
        return SQLiteTransaction(connection: writer, tables: sharedTables, writable: true, recorder: ChangeRecorder(detailed: recordingKeys))
    }

    /// Reloads the registry after another process changed the schema under a read: the
    /// reader's statement found the file's schema cookie moved.
    public func prepareRetry(_ retry: EngineRetry, attempt: Int) throws {
        guard retry == .schemaChanged else {
            throw DepotError(.backend, "The SQLite engine cannot run a transaction again for \(retry.reason).")
        }
        guard attempt < Self.schemaReloads else {
            throw DepotError(.schemaMismatch, "The schema of \(path) changed \(attempt) times while one read ran; nothing was read. Run the read again.")
        }
        try writer.run(key: Keys.begin, "BEGIN")
        defer { rollback(writer) }
        try verifySchemaOnWriter()
    }

    /// SQLite's `PRAGMA integrity_check` (pages, indexes, constraints) and
    /// `PRAGMA foreign_key_check` (references), run on the writer connection.
    public func checkIntegrity() throws -> [String] {
        var problems: [String] = []
        let integrity = try writer.prepare("PRAGMA integrity_check", cached: false)
        while try writer.step(integrity, "Checking the integrity of \(path)") {
            if case .string(let line) = try writer.column(0, of: integrity, as: .string), line != "ok" {
                problems.append("SQLite integrity_check: \(line)")
            }
        }
        let references = try writer.prepare("PRAGMA foreign_key_check", cached: false)
        while try writer.step(references, "Checking the references of \(path)") {
            let table = try writer.column(0, of: references, as: .string)
            let row = try writer.column(1, of: references, as: .int64)
            let parent = try writer.column(2, of: references, as: .string)
            problems.append("SQLite foreign_key_check: a row of \(table.debugLiteral) (rowid \(row.debugLiteral)) refers to a missing \(parent.debugLiteral)")
        }
        return problems
    }

    /// Closes the readers and the checkpointer (after its running checkpoint), then the
    /// writer, which checkpoints the WAL into the file and removes it; a read-only store
    /// removes the `-wal` and `-shm` its reading created, a private one its directory.
    public func close() {
        kept?.close()
        for reader in readers { reader.connection.close() }
        checkpointer.close()
        writer.close()
        if let temporaryDirectory { try? FileManager.default.removeItem(at: temporaryDirectory) }
        if options.readOnly { Self.removeCompanionsAfterReading(path, createdSince: companionsAtOpen) }
    }

    // MARK: Diagnostics

    /// The journal mode and synchronous level the writer connection runs with, as SQLite
    /// reports them (`PRAGMA journal_mode`, `PRAGMA synchronous`: 0 off, 1 normal, 2 full).
    func pragmaSettings() throws(DepotError) -> (journalMode: String, synchronous: Int) {
        let journal = try writer.scalarText("PRAGMA journal_mode") ?? ""
        let synchronous = Int(try writer.scalarText("PRAGMA synchronous") ?? "") ?? -1
        return (journal, synchronous)
    }

    /// Caps the database at `pages` pages on the writer connection (SQLite's
    /// `max_page_count`).
    func limitPages(to pages: Int) throws(DepotError) {
        _ = try writer.scalarText("PRAGMA max_page_count = \(pages)")
    }
}

extension EngineRetry {
    /// Another process changed the file's schema under a read: the registry is reloaded on
    /// the writer's lane, and the read runs again.
    static let schemaChanged = EngineRetry(reason: "another process changed the schema")
}
