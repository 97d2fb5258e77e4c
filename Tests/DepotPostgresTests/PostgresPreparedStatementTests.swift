import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

@testable import DepotPostgres

/// The connections' prepared-statement cache (PGStatementCache): bounded, dropped when a
/// table changes its result columns under it, and off with `preparedStatements: false`.
@Suite("PostgreSQL prepared statements", .enabled(if: TestServer.available), .serialized)
struct PostgresPreparedStatementTests {
    /// A connection to the test server with a schema of its own as its search path, and a
    /// second one for the changes made "by another process".
    func connections() throws -> (PGConnection, PGConnection, String) {
        let url = try #require(TestServer.url)
        let schema = "p_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let other = try PGConnection.open(url, settings: [], logger: Logger(label: "test"))
        try other.execute("CREATE SCHEMA \(schema)")
        try other.execute("SET search_path TO \(schema)")
        let connection = try PGConnection.open(url, settings: ["SET search_path TO \(schema)"], logger: Logger(label: "test"))
        return (connection, other, schema)
    }

    /// The statements prepared in the connection's session, as the server lists them.
    func serverPrepared(_ connection: PGConnection) throws -> Int {
        Int(try connection.query("SELECT count(*) FROM pg_prepared_statements", [], "Counting").int64(0, 0))
    }

    @Test("a cached statement whose table changed its result columns is prepared afresh and run again")
    func stalePlan() throws {
        let (connection, other, schema) = try connections()
        defer {
            try? other.execute("DROP SCHEMA \(schema) CASCADE")
            connection.close()
            other.close()
        }
        try other.execute("CREATE TABLE t (a bigint)")
        try other.execute("INSERT INTO t VALUES (1)")
        let select = "SELECT * FROM t"
        #expect(try connection.query(select, [], prepare: true, "Reading").columnCount == 1)
        #expect(connection.statements.count == 1)

        // In autocommit mode.
        try other.execute("ALTER TABLE t ADD COLUMN b bigint DEFAULT 7")
        let widened = try connection.query(select, [], prepare: true, "Reading")
        #expect(widened.columnCount == 2 && widened.int64(0, 1) == 7)

        // As the first statement of a transaction: the transaction begins again with it.
        try other.execute("ALTER TABLE t ADD COLUMN c bigint DEFAULT 8")
        try connection.begin("BEGIN ISOLATION LEVEL REPEATABLE READ")
        let again = try connection.query(select, [], prepare: true, "Reading")
        #expect(again.columnCount == 3 && again.int64(0, 2) == 8)
        #expect(connection.isInTransaction && !connection.isInFailedTransaction)
        try connection.execute("COMMIT")

        // After another statement of the same transaction: running it again would not be
        // the transaction the caller began, so the error stands; the next use prepares it
        // afresh.
        try other.execute("ALTER TABLE t ADD COLUMN d bigint DEFAULT 9")
        try connection.begin("BEGIN")
        try connection.query("SELECT 1", [], "Reading")
        #expect(throws: DepotError.self) { try connection.query(select, [], prepare: true, "Reading") }
        try connection.execute("ROLLBACK")
        #expect(try connection.query(select, [], prepare: true, "Reading").columnCount == 4)
    }

    @Test("the cache keeps a bounded number of statements and deallocates the ones it drops")
    func bounded() throws {
        let (connection, other, schema) = try connections()
        defer {
            try? other.execute("DROP SCHEMA \(schema) CASCADE")
            connection.close()
            other.close()
        }
        let capacity = PGStatementCache.capacity
        for n in 0..<(capacity + 10) {
            #expect(try connection.query("SELECT $1::bigint + \(n)", [.int(1)], prepare: true, "Adding").int64(0, 0) == Int64(n + 1))
        }
        #expect(connection.statements.count == capacity)
        // The dropped ones are deallocated before the connection's next statement.
        #expect(try serverPrepared(connection) == capacity)
        // The one used last is still there: no round trip of its own to prepare it.
        let before = connection.roundTrips
        #expect(try connection.query("SELECT $1::bigint + \(capacity + 9)", [.int(1)], prepare: true, "Adding").int64(0, 0) == Int64(capacity + 10))
        #expect(connection.roundTrips - before == 1)
        #expect(connection.statements.count == capacity)
    }

    @Test("with preparedStatements off, a store prepares nothing on its connections")
    func off() async throws {
        let url = try #require(TestServer.url)
        let schema = "p_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try PostgresStore(url: url, options: .init(schema: schema, readers: 1, preparedStatements: false))
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        try await cats.save([Cat(id: 2, name: "Felix", weight: 3, age: 2), Cat(id: 3, name: "Kit", weight: 1, age: 1)])
        #expect(try await cats.fetchOne(id: 2)?.name == "Felix")
        #expect(try await cats.count(Request(\.age < 3)) == 2)
        #expect(try await cats.read { try $0.count() } == 3)
        #expect(store.writer.statements.count == 0 && store.readers[0].statements.count == 0)
        #expect(try await store.onWriter("counting") { try serverPrepared(store.writer) } == 0)
    }

    @Test("a store's connections drop their statements when its registry changes, and deallocate them")
    func schemaChange() async throws {
        let store = try TestServer.makeStore(readers: 1)
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        #expect(try await cats.fetchOne(id: 1)?.name == "Tom")
        #expect(try await cats.count(Request(\.age < 5)) == 1)
        let reader = store.readers[0]
        // The schema probe, the lookup by key and the count.
        #expect(reader.statements.count == 3)
        // Registering the grown entity changes the table and the registry.
        let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
        #expect(try await grown.fetchOne(id: 1)?.lives == 9)
        // The reader's next read began with an empty cache: the probe and the new lookup.
        #expect(reader.statements.count == 2)
        let prepared = try await withCheckedThrowingContinuation { continuation in
            store.pool.checkOut { connection in
                continuation.resume(with: Result { try serverPrepared(connection) })
                store.pool.checkIn(connection)
            }
        }
        #expect(prepared == 2)
    }
}
