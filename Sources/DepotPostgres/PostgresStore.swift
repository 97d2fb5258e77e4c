import CLibPQ
public import DepotCore
import DepotSQL
import Foundation
import NIOConcurrencyHelpers
import Synchronization

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
/// ``Options/retries`` times, so a read-modify-write never loses an update. A write that is
/// one write of a record by key goes out as one autocommit statement, as serializable as
/// the transaction it replaces (see the DocC article). Keep write closures free of outside
/// side effects: one may run more than once.
///
/// A connection string that names several hosts names a primary and its standbys: writes
/// go to the primary, reads to a standby, and a read after this store's write sees it
/// (``Options/consistency``).
///
/// A write committed by any process reaches this store's observers: each write sends the
/// keys it changed with `pg_notify` in its own transaction (so only a commit is heard), and
/// a listener connection publishes other stores' notifications into ``changes``.
public final class PostgresStore: RowReadingStore, @unchecked Sendable {
    /// How hard a commit tries to reach the disk (PostgreSQL's `synchronous_commit`).
    public enum Durability: String, Sendable, Hashable {
        /// `synchronous_commit = on` (the default): a commit is flushed to the server's
        /// write-ahead log before it returns.
        case full
        /// `synchronous_commit = off`: a commit returns before its flush; a server crash may
        /// lose the last commits (never corrupt the database).
        case normal
    }

    /// What a read served by a standby promises (URL option `consistency`).
    public enum Consistency: String, Sendable, Hashable {
        /// A read that follows a write through the same store sees that write (and every
        /// earlier one): a standby serves it once it has replayed the write's commit, for
        /// at most ``Options/standbyWait``, and the primary after that. The default.
        case readYourWrites = "read-your-writes"
        /// A read takes the standby as it is, which may be behind the primary by the
        /// replication lag, even behind this store's own last write. Schema changes are
        /// still waited for, so a standby never serves a layout the store has left.
        case eventual
    }

    /// How a store is opened.
    public struct Options: Sendable, Hashable {
        /// The schema that holds the store's tables; created when missing. `public` by
        /// default. Two stores in one database with different schemas are independent.
        public var schema: String
        /// Reader connections, so the number of reads that run at once; 4 by default.
        public var readers: Int
        /// How hard a commit tries to reach the disk; ``Durability/full`` by default (URL
        /// option `durability`).
        public var durability: Durability
        /// The longest a statement may run before PostgreSQL cancels it (`DepotError.Code.busy`),
        /// at least a millisecond; `.zero` for no limit (PostgreSQL's `statement_timeout = 0`),
        /// nil (the default) to keep the server's or the role's own setting.
        public var statementTimeout: Duration?
        /// How many times a write whose transaction PostgreSQL aborted for a serialization
        /// failure or a deadlock runs again; 20 by default.
        public var retries: Int
        /// Whether to open an existing store for reading only; `false` by default (URL
        /// option `readOnly=true`).
        ///
        /// Nothing is created or changed: a schema without Depot's tables (or no such schema)
        /// is refused, every connection runs with `default_transaction_read_only` on, and
        /// writes, registering an entity that is new or differs from the stored one, and
        /// migrations fail with `DepotError.readOnly(_:)` (`DepotError.Code.permissionDenied`).
        public var readOnly: Bool
        /// What reads served by standbys promise, when the URL names several hosts;
        /// ``Consistency/readYourWrites`` by default (URL option `consistency`).
        public var consistency: Consistency
        /// How long a read waits for a standby to replay this store's last write before the
        /// primary serves it; 2 seconds by default (URL option `standbyWait`).
        public var standbyWait: Duration
        /// Whether each connection prepares the statements it sends again (reads, writes by
        /// key) and keeps a bounded number of them; `true` by default (URL option
        /// `preparedStatements`). Turn it off behind a connection pooler in transaction mode
        /// that does not track prepared statements (PgBouncer before 1.21, or with
        /// `max_prepared_statements = 0`): it hands each transaction to any server session,
        /// where a statement prepared on another does not exist.
        public var preparedStatements: Bool

        /// Creates options; each one not given keeps the default its property names.
        public init(
            schema: String = "public", readers: Int = 4, durability: Durability = .full, statementTimeout: Duration? = nil, retries: Int = 20, readOnly: Bool = false,
            consistency: Consistency = .readYourWrites, standbyWait: Duration = .seconds(2), preparedStatements: Bool = true
        ) {
            self.schema = schema
            self.readers = readers
            self.durability = durability
            self.statementTimeout = statementTimeout
            self.retries = retries
            self.readOnly = readOnly
            self.consistency = consistency
            self.standbyWait = standbyWait
            self.preparedStatements = preparedStatements
        }
    }

    /// The most reader connections a store opens.
    public static let maximumReaders = 64
    static let formatVersion = 1
    /// The channel writes notify on, one per schema.
    let channel: String

    /// The backend's name in logs and reports: "postgres".
    public var backendName: String { "postgres" }
    /// The committed changes of this store's writes and, through the listener connection,
    /// of every other store's writes to the same schema.
    public let changes = ChangeFeed()
    /// The options the store was opened with.
    public let options: Options
    /// Where the store logs.
    public let log: StoreLog
    /// The metrics and spans of ``log``, when they are on.
    public var telemetry: StoreTelemetry? { log.telemetry }
    /// The libpq connection string (a URI or `key=value` pairs), as given.
    let conninfo: String
    /// Tells this store's notifications from other stores'.
    let instance = UUID().uuidString

    struct State: Sendable {
        var tables = EntityRegistry<RegisteredEntity>() {
            // A registry that changed may mean tables that changed: the connections drop
            // their prepared statements before their next one (see PGStatementCache).
            didSet { epoch &+= 1 }
        }
        var epoch: UInt64 = 0
        /// The schema version (`depot_meta`, key `schema`) the registry was last verified
        /// at (see `PostgresStore+SchemaWatch.swift`); nil when the store records none yet.
        var verifiedVersion: String?
    }

    let state = NIOLockedValueBox(State())
    /// Whether the connection string names several hosts: the writer and the listener then
    /// connect to the primary among them, the readers to a standby when there is one
    /// (see `PostgresStore+Standbys.swift`).
    let hasStandbys: Bool
    /// The write-ahead log position after this store's last commit, and after its last
    /// schema change: what a standby must have replayed before it serves a read.
    let lastWrite = Atomic<UInt64>(0)
    let lastSchemaChange = Atomic<UInt64>(0)
    /// The reader connections, handed out to reads in arrival order; each runs its reads on
    /// its own queue.
    let pool: ReaderPool<PGConnection>
    let writer: PGConnection
    let readers: [PGConnection]
    /// A lane over a serial queue, off the global queue's threads that Swift's tasks run on:
    /// every write waits for the server's answer (see ``PGConnection/queue``).
    let writerLane = SerialLane(label: "depot.postgres.writer", concurrent: false)
    let gate: StoreGate
    let listener: ChangeListener?

    // MARK: Opening

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
    public init(url conninfo: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        guard (1...Self.maximumReaders).contains(options.readers) else {
            throw DepotError(.invalidConfiguration, "PostgresStore.Options.readers is \(options.readers); use 1 to \(Self.maximumReaders) reader connections.")
        }
        guard !options.schema.isEmpty, options.schema.utf8.count <= PGDDL.identifierLimit, !options.schema.utf8.contains(0) else {
            throw DepotError(.invalidConfiguration, "PostgresStore.Options.schema must be a name of 1 to \(PGDDL.identifierLimit) bytes; '\(options.schema)' is not.")
        }
        guard options.retries >= 0 else {
            throw DepotError(.invalidConfiguration, "PostgresStore.Options.retries is negative; use 0 or more.")
        }
        if let timeout = options.statementTimeout, timeout < .zero {
            throw DepotError(.invalidConfiguration, "PostgresStore.Options.statementTimeout is negative.")
        }
        guard options.standbyWait >= .zero else {
            throw DepotError(.invalidConfiguration, "PostgresStore.Options.standbyWait is negative.")
        }
        self.hasStandbys = try Self.namesSeveralHosts(conninfo)
        self.conninfo = conninfo
        self.options = options
        self.log = log
        // One channel per schema; a long schema name is hashed, so two schemas never share one.
        self.channel = "depot_changes_\(options.schema)".utf8.count <= PGDDL.identifierLimit
            ? "depot_changes_\(options.schema)" : "depot_changes_h\(String(UInt64(bitPattern: Self.lockKey(options.schema)), radix: 16))"
        self.gate = StoreGate(store: "PostgreSQL store (schema \(options.schema))")
        let settings = Self.sessionSettings(options)
        let primary: [(String, String)] = hasStandbys ? [("target_session_attrs", "read-write")] : []
        let standby: [(String, String)] = hasStandbys ? [("target_session_attrs", "prefer-standby")] : []
        let writer = try PGConnection.open(conninfo, settings: [], logger: log.logger, overrides: primary)
        writer.usesPreparedStatements = options.preparedStatements
        var opened: [PGConnection] = [writer]
        do throws(DepotError) {
            let (stored, version) = try Self.prepareSchema(writer, options: options)
            // The writer's autocommit writes (one statement each, see
            // PostgresStore+SingleStatement.swift) are as serializable as its transactions.
            writer.sessionSettings = settings + ["SET default_transaction_isolation TO serializable"]
            for setting in writer.sessionSettings { try writer.execute(setting, "Setting up the PostgreSQL session") }
            if hasStandbys { lastSchemaChange.store(try Self.currentPosition(writer), ordering: .relaxed) }
            for _ in 0..<options.readers {
                let reader = try PGConnection.open(conninfo, settings: settings, logger: log.logger, overrides: standby)
                reader.usesPreparedStatements = options.preparedStatements
                opened.append(reader)
                if hasStandbys { try reader.readRecoveryState() }
            }
            let listen = try PGConnection.open(conninfo, settings: settings, logger: log.logger, overrides: primary)
            opened.append(listen)
            self.writer = writer
            self.readers = Array(opened[1...options.readers])
            self.pool = ReaderPool(Array(opened[1...options.readers]), telemetry: log.telemetry) { $0.queue }
            self.listener = ChangeListener(connection: listen)
            state.withLockedValue { s in
                s.verifiedVersion = version
                for entity in stored {
                    s.tables.set(entity, RegisteredEntity(entity: entity))
                }
            }
        } catch {
            for connection in opened { connection.close() }
            throw error
        }
        for connection in [writer] + readers {
            connection.schemaCheck = { [weak self] connection, version throws(DepotError) in try self?.checkSchemaVersion(connection, version) }
            connection.statementEpoch = { [weak self] in self?.state.withLockedValue { $0.epoch } ?? 0 }
        }
        listener?.start(store: self)
        log.opened("postgres", at: "schema \(options.schema)", ["depot.readers": .stringConvertible(options.readers), "depot.entities": .stringConvertible(state.withLockedValue { $0.tables.all.count })])
    }

    static func sessionSettings(_ options: Options) -> [String] {
        var settings = [
            "SET search_path TO \(quoted(options.schema))",
            "SET synchronous_commit TO \(options.durability == .full ? "on" : "off")",
            // Messages and identifiers as Depot writes them; no locale-dependent output.
            "SET client_encoding TO 'UTF8'",
        ]
        // A read-only store's sessions refuse writes in the server too, behind Depot's checks.
        if options.readOnly { settings.append("SET default_transaction_read_only TO on") }
        if let timeout = options.statementTimeout {
            // PostgreSQL takes milliseconds up to Int32.max; longer is clamped to that.
            // Zero is PostgreSQL's own "no limit"; anything above it is at least 1 ms, since
            // a fraction of a millisecond must not round down to no limit at all.
            let (seconds, attoseconds) = timeout.components
            let milliseconds = seconds >= Int64(Int32.max) / 1000 ? Int64(Int32.max) : seconds * 1000 + attoseconds / 1_000_000_000_000_000
            let setting = timeout == .zero ? 0 : max(1, min(Int64(Int32.max), milliseconds))
            settings.append("SET statement_timeout TO \(setting)")
        }
        return settings
    }

    /// An advisory lock key for the schema: registration, opening and schema rewrites of
    /// one schema take it, so two servers starting at once apply a change once.
    static func lockKey(_ schema: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array("depot:".utf8) + Array(schema.utf8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int64(bitPattern: hash)
    }

    /// Creates the schema and the bookkeeping tables when missing, checks the format, and
    /// reads the stored entity descriptions.
    static func prepareSchema(_ connection: PGConnection, options: Options) throws(DepotError) -> (entities: [EntityDescription], schemaVersion: String?) {
        try connection.execute("BEGIN", "Opening the PostgreSQL store")
        do throws(DepotError) {
            try connection.query("SELECT pg_advisory_xact_lock($1)", [.int(lockKey(options.schema))], "Locking the schema \(options.schema)")
            let encoding = try connection.query("SELECT current_setting('server_encoding')", [], "Reading the database's encoding")
            let serverEncoding = encoding.text(0, 0)
            guard serverEncoding == "UTF8" else {
                throw DepotError(.invalidConfiguration, "The PostgreSQL database uses the encoding \(serverEncoding), which cannot hold every string; Depot needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8').")
            }
            // Created only when missing: PostgreSQL checks the CREATE privilege before it
            // looks at IF NOT EXISTS, and an application's role often has none.
            let schemaExists = try connection.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [.text(options.schema)], "Looking up the schema \(options.schema)").rowCount > 0
            if options.readOnly { try checkReadOnly(connection, options: options, schemaExists: schemaExists) }
            if !schemaExists {
                try connection.execute("CREATE SCHEMA \(quoted(options.schema))", "Creating the schema \(options.schema)")
            }
            try connection.execute("SET LOCAL search_path TO \(quoted(options.schema))")
            func exists(_ table: String) throws(DepotError) -> Bool {
                try connection.query("SELECT to_regclass($1) IS NOT NULL", [.text("\(quoted(options.schema)).\(table)")], "Looking up \(table)").bool(0, 0)
            }
            if try !exists("depot_meta") {
                try connection.execute("CREATE TABLE depot_meta (key text COLLATE \"C\" PRIMARY KEY, value text NOT NULL)", "Creating depot_meta")
                try connection.query("INSERT INTO depot_meta (key, value) VALUES ('format', $1)", [.text(String(formatVersion))], "Recording the store's format")
            }
            if try !exists("depot_entities") {
                try connection.execute("CREATE TABLE depot_entities (name text COLLATE \"C\" PRIMARY KEY, description text NOT NULL)", "Creating depot_entities")
            }
            let format = try connection.query("SELECT value FROM depot_meta WHERE key = 'format'", [], "Reading the store's format")
            let version = format.text(0, 0)
            guard version == String(formatVersion) else {
                throw DepotError(.storeCorrupted, "The Depot tables in the PostgreSQL schema \(options.schema) have format \(version.debugDescription), which this version of Depot does not know (it writes \(formatVersion)).")
            }
            let rows = try connection.query("SELECT name, description FROM depot_entities ORDER BY name", [], "Reading the stored entities")
            var stored: [EntityDescription] = []
            for row in 0..<rows.rowCount {
                let name = rows.text(row, 0)
                stored.append(try decodeDescription(rows, row, 1, name: name))
            }
            if !options.readOnly { try upgradeIndexOrder(connection, stored) }
            let schemaVersion = try connection.query(PGConnection.schemaProbe, [], "Reading the schema version")
            try connection.execute("COMMIT", "Opening the PostgreSQL store")
            return (stored, schemaVersion.rowCount > 0 ? schemaVersion.text(0, 0) : nil)
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
    }

    /// The order of the indexes Depot makes, recorded in `depot_meta` (key `index_order`):
    /// 2 since their columns follow ``PGDDL/indexColumn(_:descending:nullable:)``, 3 since
    /// a nullable unique attribute has an index of its own besides its constraint's
    /// (``PGDDL/wantsIndex(_:in:)``). Stores made before 2 have single-attribute indexes in
    /// PostgreSQL's default order and composite ones with `NULLS FIRST` on every ascending
    /// column, which the ORDER BY keys Depot writes no longer match; stores made before 3
    /// have no index that serves a sort by a nullable unique attribute.
    static let indexOrder = 3

    /// Rebuilds every index Depot made in an older order, or, from order 2, makes the
    /// indexes of nullable unique attributes (see ``indexOrder``), once, in the opening
    /// transaction under the schema's lock: queries stay right without it, but sorts by an
    /// indexed attribute or the primary key would read and sort every row.
    static func upgradeIndexOrder(_ connection: PGConnection, _ stored: [EntityDescription]) throws(DepotError) {
        let recorded = try connection.query("SELECT value FROM depot_meta WHERE key = 'index_order'", [], "Reading the order of the store's indexes")
        // No record: a store made before the order was recorded (order 1). A later order
        // than this Depot's is left as it is.
        let from = recorded.rowCount > 0 ? Int(recorded.text(0, 0)) ?? 1 : 1
        if from >= indexOrder { return }
        for entity in stored {
            if from == 2 {
                // The indexes in order 2 are right; only the nullable unique attributes'
                // are missing.
                for attribute in entity.attributes where attribute.isUnique && PGDDL.wantsIndex(attribute, in: entity) {
                    try connection.execute(PGDDL.createIndex(attribute, in: entity), "Indexing \(entity.name).\(attribute.name)")
                }
                continue
            }
            for attribute in entity.attributes where PGDDL.wantsIndex(attribute, in: entity) {
                try connection.execute(PGDDL.dropIndex(attribute, in: entity), "Rebuilding the index of \(entity.name).\(attribute.name)")
                try connection.execute(PGDDL.createIndex(attribute, in: entity), "Rebuilding the index of \(entity.name).\(attribute.name)")
            }
            for index in entity.indexes {
                try connection.execute(PGDDL.dropIndex(index, in: entity), "Rebuilding the index (\(index.summary)) of \(entity.name)")
                try connection.execute(PGDDL.createIndex(index, in: entity), "Rebuilding the index (\(index.summary)) of \(entity.name)")
            }
        }
        try connection.query(
            "INSERT INTO depot_meta (key, value) VALUES ('index_order', $1) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            [.text(String(indexOrder))], "Recording the order of the store's indexes")
    }

    /// The entity description stored in `result`'s field, read while the result is alive.
    static func decodeDescription(_ result: PGResult, _ row: Int, _ column: Int, name: String) throws(DepotError) -> EntityDescription {
        guard let entity = try? JSONDecoder().decode(EntityDescription.self, from: Data(result.bytes(row, column))), (try? entity.validate()) != nil else {
            throw DepotError(.storeCorrupted, "The stored description of entity \(name) cannot be read; the depot_entities table was changed outside Depot.")
        }
        return entity
    }

    deinit {
        if !gate.isClosed {
            let listener = self.listener
            let connections = [writer] + readers
            // Closing sends a terminate message and the listener stops within its poll
            // interval: kept off whatever thread drops the store.
            DispatchQueue.global().async {
                listener?.stop()
                for connection in connections { connection.close() }
            }
        }
        writerLane.stop()
    }

    // MARK: Work accounting

    @inline(__always)
    func begin() throws(DepotError) { try gate.enter() }

    @inline(__always)
    func end() { gate.leave() }

    var tables: EntityRegistry<RegisteredEntity> { state.withLockedValue { $0.tables } }

    // MARK: Reads

    /// A connection whose server went away (a restart, a failover) is reconnected before
    /// its next use, with the store's session settings.
    ///
    /// A connection's loss shows only when a statement is sent on it: libpq's status of an
    /// idle connection stays "ok" after its server restarted. The operation that finds it
    /// lost runs again on the connection made afresh when that is safe (``rerunsAfterLoss(_:)``).
    func healthy(_ connection: PGConnection) {
        // A failure ending the last read shows in `isBroken`, and the connection is reset
        // here rather than failing the read that checked it out.
        try? connection.settle()
        connection.lost = false
        connection.commitSent = false
        guard connection.isBroken, connection.handle != nil else { return }
        guard connection.reset() else { return }
        for setting in connection.sessionSettings {
            do throws(DepotError) {
                try connection.execute(setting, "Setting up the PostgreSQL session again")
            } catch {
                // Without its search_path it would read another schema's tables: unusable
                // until a later reset succeeds.
                connection.markForReset()
                connection.lost = false
                return
            }
        }
        // Made afresh, the connection may have reached another server (a promoted standby).
        if hasStandbys, connection !== writer { try? connection.readRecoveryState() }
    }

    /// Whether an operation that failed on `connection` runs again, once, after
    /// ``healthy(_:)`` made the connection afresh: when the failure was the session's loss
    /// (a server restart, a failover, a dropped connection) and the operation cannot have
    /// taken effect: a read, or a write whose COMMIT was not sent (the server rolls back
    /// what a lost session had begun). A write lost during its COMMIT may have committed,
    /// so it fails with `DepotError.Code.io` instead.
    func rerunsAfterLoss(_ connection: PGConnection) -> Bool {
        connection.lost && !connection.commitSent
    }

    /// Runs `body` on one of the store's reader connections, in a `REPEATABLE READ READ ONLY`
    /// transaction over one snapshot (a single read by key: one statement, no transaction).
    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        dispatchRead(body, { reader in try self.readInTransaction(on: reader, body) }, completion: completion)
    }

    /// Runs a read on a reader connection checked out of the pool: made healthy first; on
    /// the primary (in a transaction of the writer's, `primary`) when the reader is a
    /// standby that has not caught up; again after the registry took in a schema change
    /// (``retryingAfterSchemaChange(on:_:)``), and once more on the connection made afresh
    /// when it was lost (``rerunsAfterLoss(_:)``). `read` is the work on the reader.
    func dispatchRead<T: Sendable>(
        _ primary: @escaping @Sendable (any ReadTransaction) throws -> T, _ read: @escaping @Sendable (PGConnection) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { try begin() } catch { return completion(.failure(error)) }
        pool.checkOut { reader in
            self.healthy(reader)
            let result: Result<T, any Error>
            if self.standbyCaughtUp(reader) {
                let attempt = { try self.log.transaction("read") { try self.retryingAfterSchemaChange(on: reader) { try read(reader) } } }
                var first = Result { try attempt() }
                if case .failure = first, self.rerunsAfterLoss(reader) {
                    self.healthy(reader)
                    first = Result { try attempt() }
                }
                result = first
            } else {
                result = Result { try self.log.transaction("read") { try self.readOnPrimary(primary) } }
            }
            self.pool.checkIn(reader)
            self.end()
            completion(result)
        }
    }

    func readInTransaction<T>(on connection: PGConnection, _ body: (any ReadTransaction) throws -> T) throws -> T {
        try connection.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        let transaction = PostgresTransaction(connection: connection, tables: tables, writable: false)
        defer {
            transaction.isFinished = true
            connection.endWithoutWaiting()
        }
        return try body(transaction)
    }

    /// One row by key as a single statement in autocommit mode, which is its own snapshot.
    public func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        dispatchRead({ try $0.fetchRow(entity, key: key, visit) }, { reader in
            let transaction = PostgresTransaction(connection: reader, tables: self.tables, writable: false)
            defer { transaction.isFinished = true }
            reader.probeNextStatement()
            return try transaction.fetchRow(entity, key: key, visit)
        }, completion: completion)
    }

    // MARK: Writes

    /// Runs `body` on the writer connection after every write submitted before it, in a
    /// `SERIALIZABLE` transaction, again from the start after a serialization failure.
    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        if options.readOnly { return completion(.failure(DepotError.readOnly("PostgreSQL store (schema \(options.schema))"))) }
        writerLane.submit(
            admittedBy: gate, closed: DepotError.closed("PostgreSQL store (schema \(options.schema))"),
            { Result { try self.writeNow(body) } }, completion: completion)
    }

    /// Runs the write, again from the start when PostgreSQL aborts it for a serialization
    /// failure or a deadlock (another process wrote what it read), with a short random
    /// back-off, up to ``Options/retries`` times.
    func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        var attempt = 0
        var reloads = 0
        var rerun = false
        while true {
            healthy(writer)
            writer.lastFailure = nil
            // The first attempt as one autocommit statement when the write is one statement;
            // retries, reloads and reruns after a lost connection in a transaction.
            let single = attempt == 0 && reloads == 0 && !rerun
            do {
                return try log.transaction("write") { () throws -> T in
                    single ? try writeDeferring(body) : try writeInTransaction(body)
                }
            } catch {
                if writer.schemaReloadNeeded {
                    // Another process changed the schema: the registry takes it in, and the
                    // write runs again (refused if its handles are of the old layout).
                    writer.schemaReloadNeeded = false
                    reloads += 1
                    guard reloads < Self.schemaReloads else { throw error }
                    try reloadSchemaNow()
                    continue
                }
                if !rerun && rerunsAfterLoss(writer) {
                    rerun = true
                    continue
                }
                guard attempt < options.retries, writer.lastFailure?.isRetryable == true else { throw error }
                attempt += 1
                usleep(UInt32.random(in: 200...(1_000 * UInt32(min(attempt, 20)))))
            }
        }
    }

    func writeInTransaction<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        let tables = self.tables
        try writer.begin("BEGIN ISOLATION LEVEL SERIALIZABLE")
        let transaction = PostgresTransaction(connection: writer, tables: tables, writable: true, recorder: changes.makeRecorder(detailedAlways: true))
        let result: T
        do {
            result = try ReferenceEnforcement.run(transaction, tables.relationships, body)
        } catch {
            transaction.isFinished = true
            if writer.isInTransaction { try? writer.execute("ROLLBACK") }
            throw error
        }
        transaction.isFinished = true
        try commit(transaction)
        return result
    }

    // MARK: Closing

    /// Waits for submitted work, ends the change feed, then closes the connections.
    /// Every call returns after the connections have closed, whichever call began closing.
    public func close() async {
        await gate.close {
            changes.finish()
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // On the lane: stopping the listener waits for its thread, and closing a
                // connection is network I/O; neither belongs on the cooperative pool.
                let accepted = writerLane.submit {
                    self.listener?.stop()
                    for reader in self.readers { reader.close() }
                    self.writer.close()
                    continuation.resume()
                }
                if !accepted {
                    self.listener?.stop()
                    continuation.resume()
                }
            }
            writerLane.stop()
            log.closed("postgres", at: "schema \(options.schema)")
        }
    }

    /// Runs `body` with the writer connection on the writer's lane (registration, schema
    /// rewrites, checks).
    func onWriter<T: Sendable>(_ what: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed("PostgreSQL store (schema \(options.schema))")) {
            self.healthy(self.writer)
            return try self.log.loggingFailure(what) { try body() }
        }
    }
}

extension ChangeFeed {
    /// A recorder that records every key: PostgreSQL stores tell other processes what they
    /// changed whether or not this process observes.
    func makeRecorder(detailedAlways: Bool) -> ChangeRecorder {
        detailedAlways ? ChangeRecorder(detailed: true) : makeRecorder()
    }
}

extension PostgresStore: CatalogStore {
    /// Every entity registered in this process or stored in the schema's `depot_entities`
    /// (read again, so entities another process registered are listed too).
    public func storedEntities() async throws -> [EntityHandle] {
        try await onWriter("listing the stored entities") {
            let rows = try self.writer.query("SELECT name, description FROM depot_entities ORDER BY name", [], "Reading the stored entities")
            var current = self.tables
            for row in 0..<rows.rowCount {
                let name = rows.text(row, 0)
                let entity = try Self.decodeDescription(rows, row, 1, name: name)
                if current[name]?.entity != entity {
                    current.set(entity, RegisteredEntity(entity: entity))
                }
            }
            let updated = current
            self.state.withLockedValue { $0.tables = updated }
            return updated.all.map(\.handle)
        }
    }
}
