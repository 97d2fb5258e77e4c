package import DepotCore
import DepotSQL
import Logging

// What Depot's own tests look at inside a PostgreSQL store: package members, so the tests
// need no `@testable import`. The connections stay internal; these read what the tests
// count on them.
extension EngineStore where Engine == PostgresEngine {
    /// The exchanges the writer connection has had with the server (see
    /// `PGConnection.roundTrips`). Read between the store's calls, not during one.
    package var writerRoundTrips: Int { engine.writer.roundTrips }

    /// The exchanges the connections to the primary (the writer's, and the one that serves
    /// reads a standby cannot serve yet) have had with the server, summed.
    package var primaryRoundTrips: Int { engine.writer.roundTrips + (engine.primaryReader?.roundTrips ?? 0) }

    /// The exchanges the read connections have had with the server, summed.
    package var readerRoundTrips: Int { engine.readers.reduce(0) { $0 + $1.roundTrips } }

    /// The schema probes the read connections have sent, summed.
    package var readerProbes: Int { engine.readers.reduce(0) { $0 + $1.probesSent } }

    /// Whether the listener listens, so reads on the primary may leave the probe out.
    package var listensForSchemaChanges: Bool { engine.listening.load(ordering: .acquiring) }

    /// How many times the listener has begun to listen or heard a schema change.
    package var schemaNotices: UInt64 { engine.schemaNotices.load(ordering: .acquiring) }

    /// Whether each read connection is inside a transaction (or has an answer to read).
    package var readersInTransaction: [Bool] { engine.readers.map(\.isInTransaction) }

    /// Whether each read connection was found on a standby when it opened.
    package var readersOnStandby: [Bool] { engine.readers.map(\.onStandby) }

    /// Whether the store's URL names several hosts, so that reads may go to standbys.
    package var routesToStandbys: Bool { engine.hasStandbys }

    /// Asks the server whether the writer connection is on a standby, now.
    package func writerIsOnStandby() throws(DepotError) -> Bool {
        try engine.writer.readRecoveryState()
        return engine.writer.onStandby
    }

    /// Runs `body` with the engine on the writer's lane, between the store's transactions.
    private func onWriter<T: Sendable>(_ body: @escaping @Sendable (PostgresEngine) throws -> T) async throws -> T {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed(engine.storeDescription)) {
            self.engine.healthy(self.engine.writer)
            return try body(self.engine)
        }
    }

    /// Runs `sql` on the writer connection, between the store's transactions, and returns
    /// its rows' first column as text (for looking at the catalogs, or changing what a
    /// test needs changed underneath the store).
    package func executeOnWriter(_ sql: String) async throws -> [String] {
        try await onWriter { engine throws -> [String] in
            let result = try engine.writer.query(sql, [], "Running a test's statement")
            guard result.columnCount > 0 else { return [] }
            return (0..<result.rowCount).map { result.text($0, 0) }
        }
    }

    /// The name Depot gives the index of `attribute` of `entity`.
    package static func indexName(entity: String, attribute: String) -> String {
        PGDDL.indexName(entity: entity, attribute: attribute)
    }

    /// Runs `sql` on a connection of its own to a standby among the hosts of `url` (for
    /// pausing and resuming its replay), then closes the connection.
    package static func executeOnStandby(url: String, _ sql: String) throws(DepotError) {
        let connection = try PGConnection.open(url, settings: [], logger: Logger(label: "depot.test"), overrides: [("target_session_attrs", "standby")])
        defer { connection.close() }
        try connection.execute(sql)
    }

    /// The name Depot gives a declared index of `entity`.
    package static func compositeIndexName(entity: String, index: IndexDescription) -> String {
        PGDDL.compositeIndexName(entity: entity, index: index)
    }

    /// The longest name PostgreSQL keeps, in bytes.
    package static var identifierLimit: Int { PGDDL.identifierLimit }

    /// The statement the store sends for `query` (its SELECT, or with `counting` its
    /// count), and the server's plan of it with the parameters it binds, as
    /// `EXPLAIN (FORMAT JSON)` prints it.
    package func explainStatement(_ query: Query, counting: Bool = false) async throws -> (sql: String, plan: String) {
        let table = RegisteredEntity(entity: query.entity)
        let statement = counting ? try PGQueryCompiler.count(query, table: table) : try PGQueryCompiler.select(query, table: table)
        let (sql, parameters) = (statement.sql, statement.parameters)
        let plan = try await onWriter { engine throws -> String in
            let result = try engine.writer.query("EXPLAIN (FORMAT JSON) " + sql, parameters, "Explaining a test's statement")
            return String(decoding: result.bytes(0, 0), as: UTF8.self)
        }
        return (sql, plan)
    }

    /// How many statements each connection's cache holds: the writer's, then each reader's.
    package var cachedStatements: (writer: Int, readers: [Int]) {
        (engine.writer.statements.count, engine.readers.map(\.statements.count))
    }

    /// How many statements a connection caches at most.
    package static var statementCacheCapacity: Int { PGStatementCache.capacity }

    /// How many statements the server has prepared in the session of the writer connection.
    package func serverPreparedOnWriter() async throws -> Int {
        try await onWriter { engine throws -> Int in try PostgresTestConnection.serverPrepared(engine.writer) }
    }

    /// How many statements the server has prepared in the session of a read connection
    /// (the next one the pool hands out).
    package func serverPreparedOnReader() async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            guard let pool else { return continuation.resume(throwing: DepotError(.backend, "The store has no read connections.")) }
            pool.checkOut { reader in
                continuation.resume(with: Result { try PostgresTestConnection.serverPrepared(self.readConnections[reader].connection) })
                pool.checkIn(reader)
            }
        }
    }

    /// The statements a PostgreSQL store sends for `query` over `entity`: the aggregate
    /// itself, how many parameters it binds, and one statement per attribute whose double
    /// sum is computed from exact parts (see `PGQueryCompiler.aggregate`).
    package static func aggregateStatements(
        _ query: AggregateQuery, entity: EntityDescription
    ) throws(DepotError) -> (sql: String, parameterCount: Int, doubleSums: [String]) {
        let compiled = try PGQueryCompiler.aggregate(query, table: RegisteredEntity(entity: entity))
        return (compiled.query.sql, compiled.query.parameters.count, compiled.doubleSums.map(\.query.sql))
    }
}

/// A connection of its own to a PostgreSQL server, as a store's connections are made, for
/// the tests of what a connection does itself (its prepared-statement cache): the
/// connection type stays internal.
package final class PostgresTestConnection {
    let connection: PGConnection

    /// Opens a connection to `url` that runs `settings` first (and again after a reconnect).
    package init(url: String, settings: [String] = []) throws(DepotError) {
        connection = try PGConnection.open(url, settings: settings, logger: Logger(label: "depot.test"))
    }

    /// What a statement answered: its columns, and its first row's values as integers
    /// (nil for NULL; the tests read only `bigint` columns).
    package struct Answer {
        package let columnCount: Int
        package let firstRow: [Int64?]
    }

    /// Runs `sql` without parameters.
    package func execute(_ sql: String) throws(DepotError) { try connection.execute(sql) }

    /// Begins a transaction with `sql` (`BEGIN …`), sent with the next statement.
    package func begin(_ sql: String) throws(DepotError) { try connection.begin(sql) }

    /// Runs `sql` with `bigint` parameters, prepared and cached when `prepare` is set, as
    /// the store's statements are.
    package func query(_ sql: String, _ parameters: [Int64] = [], prepare: Bool) throws(DepotError) -> Answer {
        let result = try connection.query(sql, parameters.map { PGParam.int($0) }, prepare: prepare, "Running a test's statement")
        let row = result.rowCount > 0 ? (0..<result.columnCount).map { result.isNull(0, $0) ? nil : result.int64(0, $0) } : []
        return Answer(columnCount: result.columnCount, firstRow: row)
    }

    /// How many statements the connection's cache holds.
    package var cachedStatements: Int { connection.statements.count }

    /// How many statements the server has prepared in the connection's session.
    package func serverPrepared() throws(DepotError) -> Int { try Self.serverPrepared(connection) }

    static func serverPrepared(_ connection: PGConnection) throws(DepotError) -> Int {
        Int(try connection.query("SELECT count(*) FROM pg_prepared_statements", [], "Counting prepared statements").int64(0, 0))
    }

    /// The exchanges the connection has had with the server.
    package var roundTrips: Int { connection.roundTrips }

    package var isInTransaction: Bool { connection.isInTransaction }

    package var isInFailedTransaction: Bool { connection.isInFailedTransaction }

    package func close() { connection.close() }
}
