import CSQLite
public import DepotCore
import Foundation

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
/// operation sees one consistent snapshot. All SQLite calls run on the store's own
/// threads (one per connection), never on Swift's cooperative thread pool. Writes run one
/// at a time, in the order they were submitted.
public final class SQLiteStore: Store {
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
        /// with ``DepotError/Code/busy``; 5 seconds by default.
        public var busyTimeout: Duration
        /// Whether to open an SQLite database that another program created; `false` by
        /// default (URL option `adopt=true`).
        ///
        /// By default a database that has tables but none of Depot's bookkeeping
        /// (`depot_meta`, `depot_entities`) is refused with
        /// ``DepotError/Code/storeCorrupted`` and left byte for byte as it was, so a
        /// mistyped path never changes another program's file. Set this when you mean
        /// Depot to share the file: Depot then adds its bookkeeping tables and one table
        /// per entity beside the existing ones, never reads, changes or drops those, and
        /// refuses an entity whose name is already taken (``DepotError/Code/invalidSchema``).
        /// The file is switched to WAL mode for good, so every program that uses it must
        /// run on the same host (WAL needs shared memory) with SQLite 3.7 or newer.
        public var adoptForeignDatabase: Bool

        public init(
            durability: Durability = .normal, readers: Int = 4, busyTimeout: Duration = .seconds(5),
            adoptForeignDatabase: Bool = false
        ) {
            self.durability = durability
            self.readers = readers
            self.busyTimeout = busyTimeout
            self.adoptForeignDatabase = adoptForeignDatabase
        }
    }

    /// The most reader connections a store opens.
    public static let maximumReaders = 64

    /// The version of Depot's layout of the file, kept in `depot_meta`.
    static let formatVersion = 1

    public var backendName: String { "sqlite" }
    public let changes = ChangeFeed()
    /// The database file (for an in-memory store, its private temporary file).
    public let path: String
    /// Whether the store is a private temporary database, removed when it closes.
    public let isInMemory: Bool
    /// The options the store was opened with.
    public let options: Options
    /// Where the store logs.
    public let log: StoreLog

    private struct State: Sendable {
        var tables: [String: Table] = [:]
        var nextSerial = 1
    }

    /// A reader connection and the thread that uses it.
    final class Reader: Sendable {
        let connection: Connection
        let worker: Worker

        init(connection: Connection, worker: Worker) {
            self.connection = connection
            self.worker = worker
        }
    }

    private struct Pool: Sendable {
        /// Idle readers, most recently used last: it is handed out first, while its worker
        /// is still spinning.
        var idle: [Reader]
        var waiting: [@Sendable (Reader) -> Void] = []
        var waitingStart = 0
    }

    private let state = Locked(State())
    private let pool: Locked<Pool>
    private let writer: Connection
    private let writerWorker: Worker
    private let readers: [Reader]
    private let gate: StoreGate
    private let temporaryDirectory: URL?

    // MARK: Opening

    /// Opens the SQLite database at `path`, creating the file and its directory if missing.
    ///
    /// ```swift
    /// let store = try SQLiteStore(path: "data/app.sqlite", options: .init(durability: .full))
    /// ```
    ///
    /// The file is checked before anything is written to it: a file that is not an SQLite
    /// database, or whose schema cannot be read, is refused and left untouched. So is an
    /// SQLite database that another program made (it has tables, but not Depot's), unless
    /// ``Options/adoptForeignDatabase`` is set. An empty file, or a database with no
    /// tables at all, is a new store: that is what a crash while creating one leaves.
    ///
    /// Opening blocks the calling thread: it reads the file, and waits up to
    /// ``Options/busyTimeout`` at each step that needs a lock another process holds. From
    /// async code, open the store off Swift's cooperative thread pool.
    ///
    /// - Parameters:
    ///   - path: The database file.
    ///   - options: Durability, reader count, busy timeout and whether to adopt another
    ///     program's database.
    /// - Throws: ``DepotError`` with ``DepotError/Code/storeCorrupted`` for a file that is
    ///   not a database, is damaged, or is another program's database (see
    ///   ``Options/adoptForeignDatabase``), ``DepotError/Code/invalidConfiguration`` for bad
    ///   options or a path that is a directory, ``DepotError/Code/io`` or
    ///   ``DepotError/Code/permissionDenied`` when the file cannot be opened or created,
    ///   ``DepotError/Code/busy`` when another process holds a lock past the timeout.
    ///   - log: Where the store logs (nothing by default); see `StoreLog`.
    public convenience init(path: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        guard !path.isEmpty else {
            throw DepotError(.invalidConfiguration, "The SQLite store path is empty; give a file path, or use SQLiteStore.inMemory().")
        }
        let url = URL(fileURLWithPath: path)
        try Self.createDirectory(url.deletingLastPathComponent())
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
    /// - Parameter options: Reader count and busy timeout; durability is ignored.
    /// - Throws: ``DepotError`` with ``DepotError/Code/io`` when the temporary directory
    ///   cannot be created, ``DepotError/Code/invalidConfiguration`` for bad options.
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

    private static func createDirectory(_ url: URL) throws(DepotError) {
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw DepotError(.io, "Cannot create the directory \(url.path) for the SQLite store: \(error). Check the path and its permissions.")
        }
    }

    private init(file: String, temporaryDirectory: URL?, options: Options, log: StoreLog) throws(DepotError) {
        guard (1...Self.maximumReaders).contains(options.readers) else {
            throw DepotError(.invalidConfiguration, "SQLiteStore.Options.readers is \(options.readers); use 1 to \(Self.maximumReaders) reader connections (each has a thread of its own).")
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
        let writer = try Connection.open(path: file, create: true, busyTimeout: options.busyTimeout)
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
            writer.setCheckpointOnClose(true)
            let journal = try Self.retryingWhileBusy(writer, options.busyTimeout) { () throws(DepotError) in
                try writer.scalarText("PRAGMA journal_mode = WAL")
            }
            guard journal?.lowercased() == "wal" else {
                throw DepotError(.invalidConfiguration, "SQLite could not put \(file) in WAL mode (it reports '\(journal ?? "nothing")'); WAL needs a local file system with shared memory support.")
            }
            try writer.execute("PRAGMA synchronous = \(Self.synchronous(options, inMemory: temporaryDirectory != nil))")
            let stored = try Self.prepareBookkeeping(writer, file: file)
            var connections: [Connection] = []
            for _ in 0..<options.readers {
                let reader = try Connection.open(path: file, create: false, busyTimeout: options.busyTimeout)
                try reader.execute("PRAGMA query_only = 1")
                reader.traceStatements(to: log)
                connections.append(reader)
            }
            let readers = connections.enumerated().map { Reader(connection: $1, worker: Worker(name: "depot.sqlite.reader\($0)")) }
            self.writer = writer
            self.writerWorker = Worker(name: "depot.sqlite.writer")
            self.readers = readers
            self.pool = Locked(Pool(idle: readers))
            state.withLock { s in
                for entity in stored {
                    s.tables[entity.name] = Table(entity: entity, serial: s.nextSerial)
                    s.nextSerial += 1
                }
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

    /// Which of a database's `-wal` and `-shm` files exist.
    private static func companions(of file: String) -> (wal: Bool, shm: Bool) {
        (FileManager.default.fileExists(atPath: file + "-wal"), FileManager.default.fileExists(atPath: file + "-shm"))
    }

    /// Removes the `-wal` and `-shm` that reading a WAL database created when opening it
    /// failed: with checkpointing on close turned off, SQLite leaves them behind, and a file
    /// Depot refuses must be left as it was. A `-wal` that holds frames, or that existed
    /// before (another program's uncheckpointed commits), is never touched.
    private static func removeCompanions(of file: String, createdSince before: (wal: Bool, shm: Bool)) {
        let wal = file + "-wal"
        var walGone = !FileManager.default.fileExists(atPath: wal)
        if !before.wal, !walGone,
            let size = (try? FileManager.default.attributesOfItem(atPath: wal))?[.size] as? NSNumber, size.intValue == 0
        {
            walGone = (try? FileManager.default.removeItem(atPath: wal)) != nil
        }
        if !before.shm, walGone { try? FileManager.default.removeItem(atPath: file + "-shm") }
    }

    private static func synchronous(_ options: Options, inMemory: Bool) -> String {
        if inMemory { return "OFF" }
        switch options.durability {
        case .normal: return "NORMAL"
        case .full: return "FULL"
        }
    }

    /// Runs `body` on `connection` again while it fails with `busy`, for up to `timeout`
    /// in all. Switching a new database to WAL needs an exclusive lock, and SQLite returns
    /// SQLITE_BUSY at once, without its busy handler, while another process is creating
    /// the same file. Each attempt may also wait in SQLite's busy handler, so the handler
    /// is given only the time left: the whole loop ends within `timeout` (plus one 5 ms
    /// pause). It sleeps on the calling thread, which is why opening is documented as
    /// blocking.
    private static func retryingWhileBusy<T>(
        _ connection: Connection, _ timeout: Duration, _ body: () throws(DepotError) -> T
    ) throws(DepotError) -> T {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        defer { connection.setBusyTimeout(timeout) }
        while true {
            connection.setBusyTimeout(max(.zero, deadline - clock.now))
            do {
                return try body()
            } catch where error.code == .busy && clock.now < deadline {
                usleep(5_000)
            }
        }
    }

    /// SQLite takes a file shorter than its 100-byte header for an empty database and
    /// writes a new one over it; a non-empty file must therefore start with SQLite's magic
    /// string, or it is not ours to touch. (An empty file is a new database: what a crash
    /// during creation leaves behind.)
    ///
    /// The header is read through the connection's own file (see
    /// ``Connection/readMainFileHead(_:)``), never through a second descriptor, which would
    /// drop the locks of every other connection of this process to the same file.
    private static func checkHeader(_ connection: Connection) throws(DepotError) {
        let (head, size) = try connection.readMainFileHead(100)
        // stat, not open: a size needs no descriptor.
        let walSize = ((try? FileManager.default.attributesOfItem(atPath: connection.path + "-wal"))?[.size] as? NSNumber)?.intValue ?? 0
        try validateHeader(head, fileSize: size, walSize: walSize, file: connection.path)
    }

    /// Checks the first (up to) 100 bytes of a database file, the file's size and its
    /// WAL's size. Pure, so tests and fuzzers can feed it anything; it never traps.
    static func validateHeader(_ head: [UInt8], fileSize size: Int, walSize: Int, file: String) throws(DepotError) {
        if head.isEmpty { return }
        guard head.count >= 100, head.starts(with: Array("SQLite format 3\u{0}".utf8)) else {
            throw DepotError(.storeCorrupted, "\(file) is not an SQLite database (it does not start with SQLite's header). Depot did not modify it; restore it from a backup or open another path.", nativeCode: SQLITE_NOTADB)
        }
        // SQLite reads a page cut short by truncation as if its missing bytes were zeros and
        // returns wrong rows without an error. Every page is written whole, so a file that
        // is not a whole number of pages, or (with no WAL to replay) shorter than the page
        // count its header states, has lost data.
        let pageSize = head[16] == 0 && head[17] == 1 ? 65_536 : Int(head[16]) << 8 | Int(head[17])
        func truncated(_ detail: String) -> DepotError {
            DepotError(.storeCorrupted, "\(file) is truncated (\(detail)). Depot did not modify it; restore it from a backup or open another path.", nativeCode: SQLITE_CORRUPT)
        }
        guard pageSize >= 512, pageSize & (pageSize - 1) == 0 else { return }  // SQLite reports a bad header itself
        if size % pageSize != 0 { throw truncated("\(size) bytes is not a whole number of \(pageSize)-byte pages") }
        // At most 2^32 - 1 pages of at most 65,536 bytes: the product fits in 64 bits.
        let headerPages = Int(head[28]) << 24 | Int(head[29]) << 16 | Int(head[30]) << 8 | Int(head[31])
        let headerPagesValid = head[24..<28] == head[92..<96]
        if headerPagesValid && walSize == 0 && size < headerPages * pageSize {
            throw truncated("\(size) bytes, but its header counts \(headerPages) pages of \(pageSize) bytes")
        }
    }

    /// Reads the schema before anything writes, and refuses another program's database.
    ///
    /// Setting WAL mode rewrites the header, so a file that is not a database, or is a
    /// database Depot did not make, must be refused here to stay byte for byte as it was.
    /// A database with no schema objects at all is new: SQLite's view of an empty file,
    /// and what a crash leaves between switching a new file to WAL and committing the
    /// bookkeeping tables (created in one transaction, so they exist both or neither).
    private static func checkOwnership(_ connection: Connection, adopt: Bool) throws(DepotError) {
        var tables: [String] = []
        var objects = 0
        do {
            let statement = try connection.prepare("SELECT type, name FROM sqlite_master", cached: false)
            while try connection.step(statement, "Reading the schema of \(connection.path)") {
                objects += 1
                guard case .string(let type) = try connection.column(0, of: statement, as: .string), type == "table",
                    case .string(let name) = try connection.column(1, of: statement, as: .string)
                else { continue }
                tables.append(name)
            }
        } catch {
            let primary = (error.nativeCode ?? 0) & 0xFF
            if primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT {
                throw DepotError(.storeCorrupted, "\(connection.path) is not an SQLite database, or it is damaged (\(error.message)). Depot did not modify it; restore it from a backup or open another path.", nativeCode: error.nativeCode)
            }
            throw error
        }
        if let refusal = foreignDatabaseRefusal(file: connection.path, objects: objects, tables: tables, adopt: adopt) { throw refusal }
    }

    /// The error that refuses a database with schema objects but without Depot's
    /// bookkeeping tables, or nil when the database is Depot's, new, or adopted on purpose.
    static func foreignDatabaseRefusal(file: String, objects: Int, tables: [String], adopt: Bool) -> DepotError? {
        if objects == 0 || adopt { return nil }
        let names = Set(tables.map { $0.lowercased() })
        if names.contains("depot_meta") && names.contains("depot_entities") { return nil }
        let shown = tables.filter { !$0.lowercased().hasPrefix("sqlite_") }.sorted()
        let list = shown.isEmpty ? "\(objects) schema objects" : "tables " + shown.prefix(5).joined(separator: ", ") + (shown.count > 5 ? " and \(shown.count - 5) more" : "")
        return DepotError(
            .storeCorrupted,
            "\(file) is an SQLite database that another program made: it has \(list), but not Depot's bookkeeping tables (depot_meta, depot_entities). It is not damaged, and Depot did not modify it. Open another path for Depot's store; or, to keep Depot's tables beside the existing ones in this file (switching it to WAL mode for good), open it with SQLiteStore.Options(adoptForeignDatabase: true), or the URL option adopt=true.")
    }

    /// Creates Depot's bookkeeping tables when missing and reads the stored entities.
    private static func prepareBookkeeping(_ writer: Connection, file: String) throws(DepotError) -> [EntityDescription] {
        try writer.execute("BEGIN IMMEDIATE")
        do throws(DepotError) {
            try writer.execute(
                """
                CREATE TABLE IF NOT EXISTS depot_meta (key TEXT PRIMARY KEY NOT NULL, value ANY) WITHOUT ROWID;
                INSERT OR IGNORE INTO depot_meta (key, value) VALUES ('format', \(formatVersion));
                CREATE TABLE IF NOT EXISTS depot_entities (name TEXT PRIMARY KEY NOT NULL, description TEXT NOT NULL) WITHOUT ROWID;
                """)
            let format = try writer.scalarText("SELECT value FROM depot_meta WHERE key = 'format'")
            guard let format, let version = Int(format), version <= formatVersion else {
                throw DepotError(.schemaMismatch, "\(file) was written with Depot's SQLite format \(format ?? "unknown"), newer than this version's \(formatVersion); open it with a newer Depot.")
            }
            let statement = try writer.prepare("SELECT name, description FROM depot_entities ORDER BY name", cached: false)
            var entities: [EntityDescription] = []
            while try writer.step(statement, "Reading depot_entities") {
                let name = try writer.column(0, of: statement, as: .string)
                guard case .string(let json) = try writer.column(1, of: statement, as: .string),
                    let entity = try? JSONDecoder().decode(EntityDescription.self, from: Data(json.utf8)),
                    (try? entity.validate()) != nil
                else {
                    throw DepotError(.storeCorrupted, "The stored description of entity \(name) in \(file) cannot be read; the depot_entities table was changed outside Depot.")
                }
                entities.append(entity)
            }
            try repairIndexes(entities, on: writer)
            try writer.execute("COMMIT")
            return entities
        } catch {
            try? writer.execute("ROLLBACK")
            throw error
        }
    }

    /// Creates the declared indexes a file lacks. Versions before collision-free index names
    /// skipped the second of two attributes whose names collided (`a_b` + `c` and
    /// `a` + `b_c`); their files get the missing index the first time this version opens
    /// them. An entity whose table is missing is left for registration to report.
    private static func repairIndexes(_ entities: [EntityDescription], on writer: Connection) throws(DepotError) {
        for entity in entities where entity.attributes.contains(where: { DDL.wantsIndex($0, in: entity) }) {
            let table = try writer.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE", cached: false)
            try writer.bind(.string(entity.name), at: 1, in: table)
            guard try writer.step(table, "Looking up table \(entity.name)") else { continue }
            for attribute in entity.attributes where DDL.wantsIndex(attribute, in: entity) {
                try ensureIndex(attribute, in: entity, on: writer)
            }
        }
    }

    /// A store released without ``close()``: closing its connections checkpoints the WAL,
    /// blocking I/O that must not run on whatever thread dropped the last reference (a
    /// thread of Swift's cooperative pool, often). The writer's thread does it, after any
    /// job still queued there; this returns at once.
    deinit {
        // Jobs hold the store strongly, so no job of this store runs or waits any more.
        let alreadyClosed = gate.isClosed
        if !alreadyClosed {
            let readers = self.readers
            let writer = self.writer
            let temporaryDirectory = self.temporaryDirectory
            let log = self.log
            let location = isInMemory ? ":memory:" : path
            let close: @Sendable () -> Void = {
                Self.closeConnections(readers: readers, writer: writer, temporaryDirectory: temporaryDirectory)
                log.closed("sqlite", at: location)
            }
            if !writerWorker.submit(close) { close() }
        }
        stopWorkers()
    }

    // MARK: Work accounting

    @inline(__always)
    private func begin() throws(DepotError) { try gate.enter() }

    @inline(__always)
    private func end() { gate.leave() }

    private var tables: [String: Table] { state.withLock { $0.tables } }

    // MARK: Registration

    public func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        writerWorker.submit {
            let result = Result { try self.log.loggingFailure("registering entities") { try self.registerNow(entities) } }
            self.end()
            completion(result)
        }
    }

    private func registerNow(_ entities: [EntityDescription]) throws(DepotError) {
        for entity in entities { try entity.validate() }
        var current = tables
        if entities.allSatisfy({ current[$0.name]?.entity == $0 }) { return }
        let serial = state.withLock { s in
            defer { s.nextSerial += entities.count }
            return s.nextSerial
        }
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        do throws(DepotError) {
            for (offset, entity) in entities.enumerated() {
                // Another process may have registered or migrated the entity since this
                // store read depot_entities at open; under the write lock the file is the
                // truth, so refresh the entry from it before deciding.
                if current[entity.name]?.entity != entity, let stored = try storedDescription(of: entity.name) {
                    current[entity.name] = Table(entity: stored, serial: serial + offset)
                }
                if let existing = current[entity.name] {
                    if existing.entity == entity { continue }
                    let migration = try SchemaMigration.plan(from: existing.entity, to: entity)
                    try migrate(migration)
                    log.schemaMigrated(migration)
                } else {
                    try create(entity)
                    log.schemaCreated(entity)
                }
                try storeDescription(entity)
                current[entity.name] = Table(entity: entity, serial: serial + offset)
            }
            try writer.run(key: Keys.commit, "COMMIT")
        } catch {
            rollback(writer)
            throw error
        }
        state.withLock { $0.tables = current }
    }

    private func create(_ entity: EntityDescription) throws(DepotError) {
        // SQLite names are case-insensitive: refuse to adopt a table Depot did not create.
        let statement = try writer.prepare("SELECT name FROM sqlite_master WHERE name = ?1 COLLATE NOCASE", cached: false)
        try writer.bind(.string(entity.name), at: 1, in: statement)
        if try writer.step(statement, "Looking up table \(entity.name)") {
            let existing = try writer.column(0, of: statement, as: .string)
            throw DepotError(.invalidSchema, "The database already has a table or index named \(existing.debugLiteral) that Depot did not create for entity \(entity.name) (SQLite compares names without case). Rename the entity.")
        }
        try writer.execute(DDL.createTable(entity))
        for attribute in entity.attributes where DDL.wantsIndex(attribute, in: entity) {
            try Self.ensureIndex(attribute, in: entity, on: writer)
        }
    }

    /// The indexes Depot made for `attribute` on the entity's table, by the current name or
    /// the one earlier versions gave them. Looked up by table as well as name: a legacy
    /// name can belong to another entity's table (`a_b` + `c` and `a` + `b_c`).
    static func existingIndexes(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) -> [String] {
        let statement = try connection.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 COLLATE NOCASE AND name IN (?2, ?3)", cached: false)
        try connection.bind(.string(entity.name), at: 1, in: statement)
        try connection.bind(.string(DDL.indexName(entity: entity.name, attribute: attribute.name)), at: 2, in: statement)
        try connection.bind(.string(DDL.legacyIndexName(entity: entity.name, attribute: attribute.name)), at: 3, in: statement)
        var names: [String] = []
        while try connection.step(statement, "Looking up the index of \(entity.name).\(attribute.name)") {
            if case .string(let name) = try connection.column(0, of: statement, as: .string) { names.append(name) }
        }
        return names
    }

    /// Creates the index of `attribute` unless its table already has it (under either name).
    static func ensureIndex(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) {
        if try existingIndexes(attribute, in: entity, on: connection).isEmpty {
            try connection.execute(DDL.createIndex(attribute, in: entity))
        }
    }

    /// Drops the index of `attribute`, whichever name it has.
    static func dropIndex(_ attribute: AttributeDescription, in entity: EntityDescription, on connection: Connection) throws(DepotError) {
        for name in try existingIndexes(attribute, in: entity, on: connection) {
            try connection.execute("DROP INDEX \(quoted(name))")
        }
    }

    private func migrate(_ migration: SchemaMigration) throws(DepotError) {
        let entity = migration.declared
        for attribute in migration.addedAttributes {
            let (sql, needsFill) = DDL.addColumn(attribute, to: entity)
            try writer.execute(sql)
            if needsFill {
                let fill = try writer.prepare("UPDATE \(quoted(entity.name)) SET \(quoted(attribute.name)) = ?1", cached: false)
                try writer.bind(SchemaMigration.fillValue(for: attribute), at: 1, in: fill)
                while try writer.step(fill, "Filling \(entity.name).\(attribute.name) with its default") {}
            }
        }
        for attribute in migration.droppedIndexes {
            try Self.dropIndex(attribute, in: entity, on: writer)
        }
        for attribute in migration.addedIndexes where DDL.wantsIndex(attribute, in: entity) {
            try Self.ensureIndex(attribute, in: entity, on: writer)
        }
    }

    /// The description of `name` stored in depot_entities, read inside the current
    /// transaction.
    private func storedDescription(of name: String) throws(DepotError) -> EntityDescription? {
        let statement = try writer.prepare("SELECT description FROM depot_entities WHERE name = ?1", cached: false)
        try writer.bind(.string(name), at: 1, in: statement)
        guard try writer.step(statement, "Reading the description of \(name)") else { return nil }
        guard case .string(let json) = try writer.column(0, of: statement, as: .string),
            let entity = try? JSONDecoder().decode(EntityDescription.self, from: Data(json.utf8)),
            (try? entity.validate()) != nil
        else {
            throw DepotError(.storeCorrupted, "The stored description of entity \(name) in \(path) cannot be read; the depot_entities table was changed outside Depot.")
        }
        return entity
    }

    private func storeDescription(_ entity: EntityDescription) throws(DepotError) {
        let json: String
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            json = String(decoding: try encoder.encode(entity), as: UTF8.self)
        } catch {
            throw DepotError(.invalidSchema, "The description of entity \(entity.name) cannot be encoded: \(error).")
        }
        let statement = try writer.prepare("INSERT OR REPLACE INTO depot_entities (name, description) VALUES (?1, ?2)", cached: false)
        try writer.bind(.string(entity.name), at: 1, in: statement)
        try writer.bind(.string(json), at: 2, in: statement)
        while try writer.step(statement, "Storing the description of \(entity.name)") {}
    }

    // MARK: Transactions

    /// Statement-cache keys for transaction control (entity serials start at 1, so these
    /// never collide with per-entity keys).
    enum Keys {
        static let begin = 0
        static let beginImmediate = 1
        static let commit = 2
        static let rollback = 3
        static let pin = 4
    }

    private func rollback(_ connection: Connection) {
        if connection.isInTransaction { try? connection.run(key: Keys.rollback, "ROLLBACK") }
    }

    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        checkOutReader { reader in
            let result = Result { try self.readNow(on: reader.connection, body) }
            self.checkIn(reader)
            self.end()
            completion(result)
        }
    }

    /// One row by key, without a transaction around it: in autocommit mode a single
    /// SELECT is its own consistent snapshot, so BEGIN, the snapshot pin and ROLLBACK
    /// would only add three statements to the one that matters.
    public func submitRowRead<T: Sendable>(
        _ entity: EntityDescription, key: Value, decode: @escaping @Sendable (any ColumnReader) throws -> T,
        completion: @escaping @Sendable (Result<T?, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        checkOutReader { reader in
            let result = Result {
                try self.log.transaction("read") { () throws -> T? in
                    let transaction = SQLiteTransaction(
                        connection: reader.connection, tables: self.tables, writable: false, explicit: false)
                    defer { transaction.isFinished = true }
                    var result: T?
                    _ = try transaction.fetchRow(entity, key: key) { result = try decode($0) }
                    return result
                }
            }
            self.checkIn(reader)
            self.end()
            completion(result)
        }
    }

    /// Runs `job` on an idle reader's thread now, or on the next reader handed back.
    /// Nothing blocks a thread while waiting.
    private func checkOutReader(_ job: @escaping @Sendable (Reader) -> Void) {
        let reader = pool.withLock { p -> Reader? in
            if let reader = p.idle.popLast() { return reader }
            p.waiting.append(job)
            return nil
        }
        if let reader { reader.worker.submit { job(reader) } }
    }

    private func checkIn(_ reader: Reader) {
        let next = pool.withLock { p -> (@Sendable (Reader) -> Void)? in
            guard p.waitingStart < p.waiting.count else {
                p.idle.append(reader)
                return nil
            }
            let job = p.waiting[p.waitingStart]
            p.waitingStart += 1
            if p.waitingStart == p.waiting.count {
                p.waiting.removeAll(keepingCapacity: true)
                p.waitingStart = 0
            }
            return job
        }
        // Still on this reader's thread: run the waiting job next, in order.
        if let next { reader.worker.submit { next(reader) } }
    }

    private func readNow<T>(on connection: Connection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") { try readInTransaction(on: connection, body) }
    }

    private func readInTransaction<T>(on connection: Connection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        let tables = self.tables
        try connection.run(key: Keys.begin, "BEGIN")
        let transaction = SQLiteTransaction(connection: connection, tables: tables, writable: false)
        defer {
            transaction.isFinished = true
            rollback(connection)
        }
        // A deferred transaction takes its snapshot at its first read: read now, so the
        // snapshot is the one of the moment the operation started.
        try connection.run(key: Keys.pin, "SELECT 1 FROM sqlite_master LIMIT 1")
        return try body(transaction)
    }

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        writerWorker.submit {
            let result = Result { try self.writeNow(body) }
            self.end()
            completion(result)
        }
    }

    private func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try log.transaction("write") { try writeInTransaction(body) }
    }

    private func writeInTransaction<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        let tables = self.tables
        try writer.run(key: Keys.beginImmediate, "BEGIN IMMEDIATE")
        let transaction = SQLiteTransaction(connection: writer, tables: tables, writable: true, recorder: changes.makeRecorder())
        let result: T
        do {
            result = try body(transaction)
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

    public func close() async {
        let first = await gate.close()
        // After the last commit: observations end with `closed` instead of waiting forever.
        changes.finish()
        guard first else { return }
        // Closing checkpoints the WAL: blocking work, so on the writer's thread.
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let accepted = writerWorker.submit {
                self.closeConnections()
                continuation.resume()
            }
            if !accepted { continuation.resume() }
        }
        stopWorkers()
        log.closed("sqlite", at: isInMemory ? ":memory:" : path)
    }

    private func closeConnections() {
        Self.closeConnections(readers: readers, writer: writer, temporaryDirectory: temporaryDirectory)
    }

    /// Readers first: the writer, closing last, checkpoints the WAL into the file.
    private static func closeConnections(readers: [Reader], writer: Connection, temporaryDirectory: URL?) {
        for reader in readers { reader.connection.close() }
        writer.close()
        if let temporaryDirectory { try? FileManager.default.removeItem(at: temporaryDirectory) }
    }

    private func stopWorkers() {
        for reader in readers { reader.worker.stop() }
        writerWorker.stop()
    }

    // MARK: Diagnostics

    /// The journal mode and synchronous level the writer connection runs with, as SQLite
    /// reports them (`PRAGMA journal_mode`, `PRAGMA synchronous`: 0 off, 1 normal, 2 full).
    func pragmaSettings() async throws -> (journalMode: String, synchronous: Int) {
        try await withCheckedThrowingContinuation { continuation in
            do { try begin() } catch { return continuation.resume(throwing: error) }
            writerWorker.submit {
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
    func limitPages(to pages: Int) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            do { try begin() } catch { return continuation.resume(throwing: error) }
            writerWorker.submit {
                let result = Result { () throws(DepotError) in _ = try self.writer.scalarText("PRAGMA max_page_count = \(pages)") }
                self.end()
                continuation.resume(with: result.mapError { $0 as any Error })
            }
        }
    }
}

