import CSQLite
public import DepotCore
import Foundation
import NIOConcurrencyHelpers

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
/// pool. Writes run one at a time, in the order they were submitted.
public final class SQLiteStore: RowReadingStore, ExecutorReadingStore, WriteGroupRunner {
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
        /// 4 by default. From 1 to ``SQLiteStore/maximumReaders``.
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

    /// The backend's name in logs and reports: "sqlite".
    public var backendName: String { "sqlite" }
    /// The committed changes of this store's writes.
    public let changes = ChangeFeed()
    /// The database file (for an in-memory store, its private temporary file).
    public let path: String
    /// Whether the store is a private temporary database, removed when it closes.
    public let isInMemory: Bool
    /// The options the store was opened with.
    public let options: Options
    /// Where the store logs.
    public let log: StoreLog
    /// The metrics and spans of ``log``, when they are on.
    public var telemetry: StoreTelemetry? { log.telemetry }

    struct State: Sendable {
        /// The registered tables, and the snapshot transactions share.
        var tables = SharingRegistry<RegisteredEntity>()
        var nextSerial = 1
        /// The file's schema cookie the registry was last verified against (see
        /// `SQLiteStore+SchemaWatch.swift`).
        var verifiedCookie: Int64 = -1
    }

    let state = NIOLockedValueBox(State())
    /// The reader connections, handed out to reads in arrival order.
    let pool: ReaderPool<Reader>
    let writer: Connection
    package let writerLane: SerialLane
    /// Where reads run (see `ReaderPool`).
    let readQueue = DispatchQueue(label: "depot.sqlite.readers", attributes: .concurrent)
    let readers: [Reader]
    let gate: StoreGate
    let temporaryDirectory: URL?
    /// Whether the `-wal` and `-shm` files existed when the store opened: a read-only store
    /// removes those its reading created (see `removeCompanionsAfterReading`).
    let companionsAtOpen: (wal: Bool, shm: Bool)
    /// Checkpoints the WAL beside the writer instead of inside its commits.
    package let checkpointer: Checkpointer

    // MARK: Opening

    /// Opens the SQLite database at `path`, creating the file if missing.
    ///
    /// ```swift
    /// let store = try SQLiteStore(path: "data/app.sqlite", options: .init(durability: .full, createDirectories: true))
    /// ```
    ///
    /// The file's directory must exist (so a mistyped path is an error, not a new directory
    /// tree) unless ``Options/createDirectories`` is set. The file is checked before anything
    /// is written: one that is not an SQLite database, or is another program's database
    /// (unless ``Options/adoptForeignDatabase``), is refused and left untouched; an empty
    /// file or a database without tables is a new store, which is what a crash while
    /// creating one leaves.
    ///
    /// Opening blocks the calling thread (it reads the file and may wait up to
    /// ``Options/busyTimeout`` for a lock): from async code, open the store off Swift's
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
            return try SQLiteStore(file: directory.appendingPathComponent("memory.sqlite").path, temporaryDirectory: directory, options: options, log: log)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    private init(file: String, temporaryDirectory: URL?, options: Options, log: StoreLog) throws(DepotError) {
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
        self.gate = StoreGate(store: temporaryDirectory == nil ? "SQLite store at \(file)" : "SQLite store (sqlite::memory:)")
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
            if !options.readOnly { writer.checkpoint(with: checkpointer) }
            self.checkpointer = checkpointer
            self.writer = writer
            self.writerLane = SerialLane(label: "depot.sqlite.writer")
            self.readers = readers
            let readQueue = self.readQueue
            self.pool = ReaderPool(readers, telemetry: log.telemetry) { _ in readQueue }
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
            log.opened(
                "sqlite", at: temporaryDirectory == nil ? file : ":memory:",
                ["depot.durability": .string("\(options.durability)"), "depot.readers": .stringConvertible(options.readers), "depot.entities": .stringConvertible(stored.count)])
        } catch {
            writer.close()
            Self.removeCompanions(of: file, createdSince: companionsBefore)
            throw error
        }
    }

    /// A store released without ``close()``: closing its connections checkpoints the WAL,
    /// blocking I/O that must not run on whatever thread dropped the last reference (a
    /// thread of Swift's cooperative pool, often). The writer's lane does it, after any
    /// job still queued there; this returns at once.
    deinit {
        // Jobs hold the store strongly, so no job of this store runs or waits any more.
        let alreadyClosed = gate.isClosed
        if !alreadyClosed {
            let readers = self.readers
            let writer = self.writer
            let checkpointer = self.checkpointer
            let temporaryDirectory = self.temporaryDirectory
            let log = self.log
            let location = isInMemory ? ":memory:" : path
            let close: @Sendable () -> Void = {
                Self.closeConnections(readers: readers, checkpointer: checkpointer, writer: writer, temporaryDirectory: temporaryDirectory)
                log.closed("sqlite", at: location)
            }
            if !writerLane.submit(close) { close() }
        }
        stopWriterLane()
    }

    // MARK: Work accounting

    @inline(__always)
    func begin() throws(DepotError) { try gate.enter() }

    @inline(__always)
    func end() { gate.leave() }

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

    func rollback(_ connection: Connection) {
        if connection.isInTransaction { try? connection.run(key: Keys.rollback, "ROLLBACK") }
    }

    /// Runs `body` on one of the store's reader connections, in a transaction over one snapshot.
    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        pool.checkOut { reader in
            let result = Result { try self.readNow(on: reader.connection, body) }
            self.pool.checkIn(reader)
            self.end()
            completion(result)
        }
    }

    /// One row by key, without a transaction around it: in autocommit mode a single
    /// SELECT is its own consistent snapshot, so BEGIN, the snapshot pin and ROLLBACK
    /// would only add three statements to the one that matters.
    @usableFromInline
    package func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        // An idle reader is taken here, so the read queue gets one block capturing
        // everything, not a block around the closure the pool would keep.
        guard let reader = pool.takeIdle() else {
            return pool.checkOut { reader in self.readRow(entity, key: key, visit: visit, completion: completion, on: reader) }
        }
        if StoreExecutor.isCurrent { return readRow(entity, key: key, visit: visit, completion: completion, on: reader) }
        readQueue.async { self.readRow(entity, key: key, visit: visit, completion: completion, on: reader) }
    }

    /// The single-row read of `submitRowRead` on a checked-out reader, which it checks in.
    private func readRow(
        _ entity: EntityHandle, key: Value, visit: (any ColumnReader) throws -> Void,
        completion: @Sendable (Result<Bool, any Error>) -> Void, on reader: Reader
    ) {
        let result = Result { () throws -> Bool in
            try log.transaction("read") { () throws -> Bool in
                let connection = reader.connection
                return try retryingAfterSchemaChange(on: connection) { () throws -> Bool in
                    connection.lastError = nil
                    let table = try sharedTables.registry.resolve(entity)
                    return try SQLiteTransaction.fetchRow(entity, key: key, table: table, on: connection, visit)
                }
            }
        }
        pool.checkIn(reader)
        end()
        completion(result)
    }

    /// Runs a read right here with an idle reader connection; returns `false` when every
    /// reader is busy (the read then queues for one as usual, without holding the thread).
    @usableFromInline
    package func readOnCallingThread(singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        try begin()
        defer { end() }
        guard let reader = pool.takeIdle() else { return false }
        defer { pool.checkIn(reader) }
        if singleStatement {
            // One statement in autocommit mode is its own snapshot (see submitRowRead).
            try log.transaction("read") {
                try retryingAfterSchemaChange(on: reader.connection) {
                    let transaction = SQLiteTransaction(connection: reader.connection, tables: sharedTables, writable: false, explicit: false)
                    defer { transaction.isFinished = true }
                    try body(transaction)
                }
            }
        } else {
            try readNow(on: reader.connection, body)
        }
        return true
    }

    /// A read of one statement (a controller's `fetchAll`, `fetchFirst`, `count`, a page)
    /// in autocommit mode, where the statement is its own snapshot: without the `BEGIN`,
    /// the snapshot's schema read and the `ROLLBACK` of a read transaction (the statement's
    /// first step checks the schema instead, as a lookup by key's does). Should the read
    /// go on to a second statement, the two would see different snapshots: it stops there
    /// and runs again from its start in a read transaction, which the caller allows, since
    /// such a read has no effect outside what it returns.
    func readOneStatement<T>(on connection: Connection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") {
            try retryingAfterSchemaChange(on: connection) { () throws -> T in
                let transaction = SQLiteTransaction(connection: connection, tables: sharedTables, writable: false, explicit: false)
                transaction.oneStatement = true
                let result: T
                do {
                    defer { transaction.isFinished = true }
                    result = try body(transaction)
                } catch {
                    guard transaction.wantedAnother else { throw error }
                    return try readInTransaction(on: connection, body)
                }
                // A read that caught the refusal of its second statement itself.
                if transaction.wantedAnother { return try readInTransaction(on: connection, body) }
                return result
            }
        }
    }

    func readNow<T>(on connection: Connection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") { try retryingAfterSchemaChange(on: connection) { try readInTransaction(on: connection, body) } }
    }

    func readInTransaction<T>(on connection: Connection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        try connection.run(key: Keys.begin, "BEGIN")
        defer { rollback(connection) }
        // A deferred transaction takes its snapshot at its first read: read now, so the
        // snapshot is the one of the moment the operation started. The read is the schema
        // cookie, checked against the registry's before anything is read with it.
        if let watch = connection.schemaWatch {
            try watch(connection)
        } else {
            _ = try connection.schemaCookie()
        }
        let transaction = SQLiteTransaction(connection: connection, tables: sharedTables, writable: false)
        defer { transaction.isFinished = true }
        return try body(transaction)
    }

    /// Runs `body` on the writer connection after every write submitted before it.
    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitWriteThroughUntyped(body, completion: completion)
    }

    /// Runs `body` on the writer connection after every write submitted before it; writes
    /// queued behind a running one share its commit.
    public func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        if options.readOnly { return completion(.failure(DepotError.readOnly("SQLite store at \(path)"))) }
        do { try begin() } catch { return completion(.failure(error)) }
        let write = PendingWrite(body, completion: completion, runner: self)
        // On a thread that may block (a task preferring the store executor), an idle writer
        // runs the write right here: no hop to the lane's thread and back.
        if StoreExecutor.isCurrent, writerLane.runHereIfIdle(write: write) { return }
        guard writerLane.submit(write: write) else {
            end()
            return completion(.failure(DepotError.closed("SQLite store at \(path)")))
        }
    }

    /// Runs writes the lane found queued one behind the other (see ``SerialLane``). One
    /// write runs in a transaction of its own. Several share one: each in a savepoint, so a
    /// closure that throws rolls back only its own changes, then one commit, one sync, for
    /// all; each caller gets its own result, and observers one change set per write, in
    /// order. Only an error that makes SQLite abandon the whole transaction (an I/O error, a
    /// full disk) or a failed commit fails writes other than the one that caused it, and
    /// then nothing of them is kept.
    package func runWrites(_ group: [any GroupedWrite]) {
        if group.count == 1, let write = group.first {
            var failure: (any Error)?
            do { try writeNow { try write.perform($0) } } catch { failure = error }
            end()
            write.complete(failure: failure)
            return
        }
        var pending = group[...]
        while !pending.isEmpty { pending = runGroup(pending) }
    }

    /// Runs `group` in one transaction; returns the writes it did not get to (after an error
    /// that ended the transaction early), to run in another.
    private func runGroup(_ group: ArraySlice<any GroupedWrite>) -> ArraySlice<any GroupedWrite> {
        func finish(_ writes: some Sequence<any GroupedWrite>, failure: (any Error)?) {
            for write in writes {
                end()
                write.complete(failure: failure)
            }
        }
        do {
            try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
            try verifySchemaOnWriter()
        } catch {
            rollback(writer)
            finish(group, failure: error)
            return []
        }
        let tables = self.sharedTables
        var done: [(write: any GroupedWrite, recorder: ChangeRecorder)] = []
        var index = group.startIndex
        while index < group.endIndex {
            let write = group[index]
            index += 1
            let transaction = SQLiteTransaction(connection: writer, tables: tables, writable: true, recorder: changes.makeRecorder())
            do {
                try writer.run(key: Keys.savepoint, "SAVEPOINT depot_write")
                try log.transaction("write") {
                    try ReferenceEnforcement.run(transaction, tables.registry.relationships) { try write.perform($0) }
                }
                transaction.isFinished = true
                if !writer.isInTransaction { throw DepotError.rolledBack(after: writer.lastError) }
                try writer.run(key: Keys.releaseSavepoint, "RELEASE depot_write")
                done.append((write, transaction.recorder))
            } catch {
                transaction.isFinished = true
                if writer.isInTransaction,
                    (try? writer.run(key: Keys.rollbackToSavepoint, "ROLLBACK TO depot_write")) != nil,
                    (try? writer.run(key: Keys.releaseSavepoint, "RELEASE depot_write")) != nil
                {
                    // Only this write's changes are undone; the group goes on.
                    finish(CollectionOfOne(write), failure: error)
                    continue
                }
                // SQLite abandoned the whole transaction: the writes before this one are
                // lost with it; the ones after it run in a transaction of their own.
                rollback(writer)
                finish(CollectionOfOne(write), failure: error)
                finish(done.map(\.write), failure: DepotError.rolledBack(after: (error as? DepotError) ?? writer.lastError))
                return group[index...]
            }
        }
        do {
            try writer.run(key: Keys.commit, "COMMIT")
        } catch {
            rollback(writer)
            finish(done.map(\.write), failure: error)
            return []
        }
        for (write, recorder) in done {
            changes.publish(recorder)
            end()
            write.complete(failure: nil)
        }
        return []
    }

    func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try log.transaction("write") { try writeInTransaction(body) }
    }

    func writeInTransaction<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        do {
            try verifySchemaOnWriter()
        } catch {
            rollback(writer)
            throw error
        }
        let tables = self.sharedTables
        let transaction = SQLiteTransaction(connection: writer, tables: tables, writable: true, recorder: changes.makeRecorder())
        let result: T
        do {
            result = try ReferenceEnforcement.run(transaction, tables.registry.relationships, body)
            transaction.isFinished = true
            if !writer.isInTransaction { throw DepotError.rolledBack(after: writer.lastError) }
            try writer.run(key: Keys.commit, "COMMIT")
        } catch {
            transaction.isFinished = true
            rollback(writer)
            throw error
        }
        changes.publish(transaction.recorder)
        return result
    }

    // MARK: Closing

    /// Waits for submitted work, ends the change feed, then closes the connections (the
    /// writer last, which checkpoints the WAL into the file).
    /// Every call returns after the connections have closed, whichever call began closing.
    public func close() async {
        await gate.close {
            // After the last commit: observations end with `closed` instead of waiting forever.
            changes.finish()
            // Closing checkpoints the WAL: blocking work, so on the writer's lane.
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let accepted = writerLane.submit {
                    self.closeConnections()
                    if self.options.readOnly { Self.removeCompanionsAfterReading(self.path, createdSince: self.companionsAtOpen) }
                    continuation.resume()
                }
                if !accepted { continuation.resume() }
            }
            stopWriterLane()
            log.closed("sqlite", at: isInMemory ? ":memory:" : path)
        }
    }

    func closeConnections() {
        Self.closeConnections(readers: readers, checkpointer: checkpointer, writer: writer, temporaryDirectory: temporaryDirectory)
    }

    /// Readers and the checkpointer first (after its running checkpoint): the writer,
    /// closing last, checkpoints the WAL into the file and removes it.
    static func closeConnections(readers: [Reader], checkpointer: Checkpointer, writer: Connection, temporaryDirectory: URL?) {
        for reader in readers { reader.connection.close() }
        checkpointer.close()
        writer.close()
        if let temporaryDirectory { try? FileManager.default.removeItem(at: temporaryDirectory) }
    }

    func stopWriterLane() {
        writerLane.stop()
    }

    // MARK: Diagnostics

    /// The journal mode and synchronous level the writer connection runs with, as SQLite
    /// reports them (`PRAGMA journal_mode`, `PRAGMA synchronous`: 0 off, 1 normal, 2 full).
    package func pragmaSettings() async throws -> (journalMode: String, synchronous: Int) {
        try await withCheckedThrowingContinuation { continuation in
            do { try begin() } catch { return continuation.resume(throwing: error) }
            writerLane.submit {
                let result = Result { () throws(DepotError) -> (String, Int) in
                    let journal = try self.writer.scalarText("PRAGMA journal_mode") ?? ""
                    let synchronous = Int(try self.writer.scalarText("PRAGMA synchronous") ?? "") ?? -1
                    return (journal, synchronous)
                }
                self.end()
                continuation.resume(with: result.map { (journalMode: $0.0, synchronous: $0.1) })
            }
        }
    }

    /// Caps the database at `pages` pages on the writer connection (SQLite's
    /// `max_page_count`), so tests can fill the "disk" without filling a real one.
    package func limitPages(to pages: Int) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            do { try begin() } catch { return continuation.resume(throwing: error) }
            writerLane.submit {
                let result = Result { () throws(DepotError) in _ = try self.writer.scalarText("PRAGMA max_page_count = \(pages)") }
                self.end()
                continuation.resume(with: result.mapError { $0 as any Error })
            }
        }
    }
}


extension SQLiteStore: SingleStatementReadingStore {
    /// Runs `body`, which reads with one statement, on a reader connection as a read of its
    /// own (see `readOneStatement`).
    @usableFromInline
    package func submitSingleStatementRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        pool.checkOut { reader in
            let result = Result { try self.readOneStatement(on: reader.connection, body) }
            self.pool.checkIn(reader)
            self.end()
            completion(result)
        }
    }
}

extension SQLiteStore: SingleStatementExecutorReadingStore {
    /// Runs `body`, which reads with one statement, right here with an idle reader
    /// connection as a read of its own (see `readOneStatement`); returns `false` when every
    /// reader is busy.
    @usableFromInline
    package func readOneStatementOnCallingThread(_ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        try begin()
        defer { end() }
        guard let reader = pool.takeIdle() else { return false }
        defer { pool.checkIn(reader) }
        try readOneStatement(on: reader.connection, body)
        return true
    }
}

extension SQLiteStore: CatalogStore {
    /// Every entity registered in this process or found in the file's `depot_entities`
    /// when the store opened.
    public func storedEntities() async throws -> [EntityHandle] {
        tables.all.map(\.handle)
    }
}

extension SQLiteStore: IntegrityCheckingStore {
    /// SQLite's `PRAGMA integrity_check` (pages, indexes, constraints) and
    /// `PRAGMA foreign_key_check` (references), run on the writer connection.
    public func checkIntegrity() async throws -> [String] {
        try await withCheckedThrowingContinuation { continuation in
            do { try begin() } catch { return continuation.resume(throwing: error) }
            let accepted = writerLane.submit {
                let result = Result { () throws(DepotError) -> [String] in
                    var problems: [String] = []
                    let integrity = try self.writer.prepare("PRAGMA integrity_check", cached: false)
                    while try self.writer.step(integrity, "Checking the integrity of \(self.path)") {
                        if case .string(let line) = try self.writer.column(0, of: integrity, as: .string), line != "ok" {
                            problems.append("SQLite integrity_check: \(line)")
                        }
                    }
                    let references = try self.writer.prepare("PRAGMA foreign_key_check", cached: false)
                    while try self.writer.step(references, "Checking the references of \(self.path)") {
                        let table = try self.writer.column(0, of: references, as: .string)
                        let row = try self.writer.column(1, of: references, as: .int64)
                        let parent = try self.writer.column(2, of: references, as: .string)
                        problems.append("SQLite foreign_key_check: a row of \(table.debugLiteral) (rowid \(row.debugLiteral)) refers to a missing \(parent.debugLiteral)")
                    }
                    return problems
                }
                self.end()
                continuation.resume(with: result.mapError { $0 as any Error })
            }
            if !accepted {
                self.end()
                continuation.resume(throwing: DepotError.closed("SQLite store at \(path)"))
            }
        }
    }
}
