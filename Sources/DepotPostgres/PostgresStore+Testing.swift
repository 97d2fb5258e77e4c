package import DepotCore
import Logging

// What Depot's own tests look at inside a PostgreSQL store: package members, so the tests
// need no `@testable import`. The connections stay internal; these read what the tests
// count on them.
extension PostgresStore {
    /// The exchanges the writer connection has had with the server (see
    /// `PGConnection.roundTrips`). Read between the store's calls, not during one.
    package var writerRoundTrips: Int { writer.roundTrips }

    /// The exchanges the read connections have had with the server, summed.
    package var readerRoundTrips: Int { readers.reduce(0) { $0 + $1.roundTrips } }

    /// Whether each read connection is inside a transaction (or has an answer to read).
    package var readersInTransaction: [Bool] { readers.map(\.isInTransaction) }

    /// Whether each read connection was found on a standby when it opened.
    package var readersOnStandby: [Bool] { readers.map(\.onStandby) }

    /// Whether the store's URL names several hosts, so that reads may go to standbys.
    package var routesToStandbys: Bool { hasStandbys }

    /// Asks the server whether the writer connection is on a standby, now.
    package func writerIsOnStandby() throws(DepotError) -> Bool {
        try writer.readRecoveryState()
        return writer.onStandby
    }

    /// Runs `sql` on the writer connection, between the store's transactions, and returns
    /// its rows' first column as text (for looking at the catalogs, or changing what a
    /// test needs changed underneath the store).
    package func executeOnWriter(_ sql: String) async throws -> [String] {
        try await onWriter("running a test's statement") { () throws -> [String] in
            let result = try self.writer.query(sql, [], "Running a test's statement")
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
