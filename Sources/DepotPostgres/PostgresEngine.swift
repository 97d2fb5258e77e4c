import CLibPQ
public import DepotCore
import DepotSQL
import Foundation
public import Dispatch
import NIOConcurrencyHelpers
import Synchronization

/// The PostgreSQL engine under ``PostgresStore``: a writer connection to the primary, reader
/// connections (to standbys when the connection string names several hosts), and a
/// listener connection that hears other processes' commits.
///
/// ``PostgresStore`` is `EngineStore<PostgresEngine>`: Depot's store runtime does admission,
/// the writer's lane, the pool of readers, reference enforcement, the change feed and
/// telemetry; the engine keeps what is PostgreSQL's own: libpq connections and their
/// statement caches, one round trip per single-statement call, serialization retries,
/// schema-version checks, standby routing with read-your-writes, reconnecting after a
/// failover, and the listener.
public final class PostgresEngine: StorageEngine, @unchecked Sendable {
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
    /// The options the store was opened with.
    public let options: Options
    /// How errors name the store: "PostgreSQL store (schema public)".
    public var storeDescription: String { "PostgreSQL store (schema \(options.schema))" }
    /// The schema, for logs (the connection string may hold a password).
    public var location: String { "schema \(options.schema)" }
    /// Whether the store was opened with ``Options/readOnly``.
    public var isReadOnly: Bool { options.readOnly }
    /// Reads and writes wait for the server; writes do not group (each is one serializable
    /// transaction, or one autocommit statement), and run on one serial queue's thread.
    public var traits: EngineTraits { EngineTraits() }
    /// The reader connections: one read at a time each.
    public var readConnections: [Reader] { readerSlots }
    /// A reader connection as the runtime's pool hands it to one read at a time.
    public final class Reader: Sendable {
        let connection: PGConnection

        init(_ connection: PGConnection) {
            self.connection = connection
        }
    }
    let readerSlots: [Reader]
    let log: StoreLog
    /// What the listener publishes other processes' commits through; set by ``start(_:)``.
    let runtime = NIOLockedValueBox<EngineRuntime?>(nil)
    /// The libpq connection string (a URI or `key=value` pairs), as given.
    let conninfo: String
    /// Tells this store's notifications from other stores'.
    let instance: String
    /// How this store's own notifications begin (see ChangeListener.swift): the listener
    /// compares every payload it hears with it.
    let ownPayloadPrefix: String

    struct State: Sendable {
        var tables = EntityRegistry<RegisteredEntity>() {
            // A registry that changed may mean tables that changed: the connections drop
            // their prepared statements before their next one (see PGStatementCache).
            didSet { epoch &+= 1 }
        }
        var epoch: UInt64 = 0
        /// The schema version (`depot_meta`, key `schema`) the registry was last verified
        /// at (see `PostgresEngine+SchemaWatch.swift`); nil when the store records none yet.
        var verifiedVersion: String?
    }

    let state = NIOLockedValueBox(State())
    /// Whether the connection string names several hosts: the writer and the listener then
    /// connect to the primary among them, the readers to a standby when there is one
    /// (see `PostgresEngine+Standbys.swift`).
    let hasStandbys: Bool
    /// The write-ahead log position after this store's last commit, and after its last
    /// schema change: what a standby must have replayed before it serves a read.
    let lastWrite = Atomic<UInt64>(0)
    let lastSchemaChange = Atomic<UInt64>(0)
    /// What the listener has heard that may mean another process changed the schema:
    /// raised when it begins to listen (what was said before is not heard) and for each
    /// schema notification (see `PostgresEngine+SchemaWatch.swift`).
    let schemaNotices = Atomic<UInt64>(1)
    /// The value of ``schemaNotices`` a schema probe was sent at and passed: while the two
    /// are equal and the listener listens, reads on the primary send no probe.
    let schemaNoticesChecked = Atomic<UInt64>(0)
    /// Whether the listener's LISTEN is in place, as far as its thread knows.
    let listening = Atomic<Bool>(false)
    let writer: PGConnection
    /// The reader connections, handed out to reads in arrival order by the runtime's pool;
    /// each runs its reads on its own queue.
    let readers: [PGConnection]
    /// With standbys: a connection to the primary for the reads a standby cannot serve yet
    /// (it has not replayed this store's last write in time), one at a time.
    let primaryReader: PGConnection?
    /// Held by the read on ``primaryReader`` from its begin to its end.
    let primaryReaderTaken = DispatchSemaphore(value: 1)
    let listener: ChangeListener?

    // MARK: Opening

    /// Connects to PostgreSQL and opens the store's engine: what
    /// `PostgresStore(url:options:log:)` runs, which documents it.
    public init(url conninfo: String, options: Options = .init(), log: StoreLog = .disabled) throws(DepotError) {
        instance = UUID().uuidString
        ownPayloadPrefix = Self.payloadPrefix(instance: instance)
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
        let settings = Self.sessionSettings(options)
        let primary: [(String, String)] = hasStandbys ? [("target_session_attrs", "read-write")] : []
        let standby: [(String, String)] = hasStandbys ? [("target_session_attrs", "prefer-standby")] : []
        let writer = try PGConnection.open(conninfo, settings: [], logger: log.logger, overrides: primary)
        writer.usesPreparedStatements = options.preparedStatements
        var opened: [PGConnection] = [writer]
        do throws(DepotError) {
            let (stored, version) = try Self.prepareSchema(writer, options: options)
            // The writer's autocommit writes (one statement each, see
            // PostgresEngine+SingleStatement.swift) are as serializable as its transactions.
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
            var onPrimary: PGConnection?
            if hasStandbys {
                let connection = try PGConnection.open(conninfo, settings: settings, logger: log.logger, overrides: primary)
                connection.usesPreparedStatements = options.preparedStatements
                opened.append(connection)
                onPrimary = connection
            }
            self.writer = writer
            self.readers = Array(opened[1...options.readers])
            self.readerSlots = readers.map(Reader.init)
            self.primaryReader = onPrimary
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
        for connection in [writer] + readers + (primaryReader.map { [$0] } ?? []) {
            connection.schemaCheck = { [weak self] connection, version throws(DepotError) in try self?.checkSchemaVersion(connection, version) }
            connection.statementEpoch = { [weak self] in self?.state.withLockedValue { $0.epoch } ?? 0 }
        }
        log.logger.debug(
            "PostgreSQL store opened",
            metadata: ["depot.readers": .stringConvertible(options.readers), "depot.entities": .stringConvertible(state.withLockedValue { $0.tables.all.count })])
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
        try StoredDescription.decode(utf8: result.bytes(row, column), of: name, in: nil)
    }

    var tables: EntityRegistry<RegisteredEntity> { state.withLockedValue { $0.tables } }

    // MARK: Connections

    /// A connection whose server went away (a restart, a failover) is reconnected before
    /// its next use, with the store's session settings.
    ///
    /// A connection's loss shows only when a statement is sent on it: libpq's status of an
    /// idle connection stays "ok" after its server restarted. The operation that finds it
    /// lost runs again on the connection made afresh when that is safe: a read, or a write
    /// whose COMMIT was not sent (the server rolls back what a lost session had begun); a
    /// write lost during its COMMIT may have committed, so it fails with
    /// `DepotError.Code.io` instead (see the transactions' `retry`).
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

    // MARK: The engine contract

    /// Each connection's reads run on the connection's own serial queue, off the global
    /// queue's workers that Swift's tasks share.
    public func readQueue(for reader: Reader) -> DispatchQueue? { reader.connection.queue }

    /// Starts the listener, which publishes other processes' commits through `runtime`.
    public func start(_ runtime: EngineRuntime) {
        self.runtime.withLockedValue { $0 = runtime }
        listener?.start(engine: self)
    }

    /// The entities registered in this process and those stored when the store opened.
    public func entities() throws -> [EntityHandle] {
        tables.all.map(\.handle)
    }

    /// Stops the listener, then closes the readers and the writer.
    public func close() {
        listener?.stop()
        for reader in readers { reader.close() }
        primaryReader?.close()
        writer.close()
    }
}

extension PostgresEngine {
    /// Every entity registered in this process or stored in the schema's `depot_entities`
    /// (read again, so entities another process registered are listed too).
    public func storedEntities() throws -> [EntityHandle] {
        healthy(writer)
        let rows = try writer.query("SELECT name, description FROM depot_entities ORDER BY name", [], "Reading the stored entities")
        var current = tables
        for row in 0..<rows.rowCount {
            let name = rows.text(row, 0)
            let entity = try Self.decodeDescription(rows, row, 1, name: name)
            if current[name]?.entity != entity {
                current.set(entity, RegisteredEntity(entity: entity))
            }
        }
        let updated = current
        state.withLockedValue { $0.tables = updated }
        return updated.all.map(\.handle)
    }
}
