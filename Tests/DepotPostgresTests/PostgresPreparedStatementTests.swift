import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// The connections' prepared-statement cache (PGStatementCache): bounded, dropped when a
/// table changes its result columns under it, and off with `preparedStatements: false`.
@Suite("PostgreSQL prepared statements", .enabled(if: TestServer.available), .serialized)
struct PostgresPreparedStatementTests {
    /// A connection to the test server with a schema of its own as its search path, and a
    /// second one for the changes made "by another process".
    func connections() throws -> (PostgresTestConnection, PostgresTestConnection, String) {
        let url = try #require(TestServer.url)
        let schema = "p_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let other = try PostgresTestConnection(url: url)
        try other.execute("CREATE SCHEMA \(schema)")
        try other.execute("SET search_path TO \(schema)")
        let connection = try PostgresTestConnection(url: url, settings: ["SET search_path TO \(schema)"])
        return (connection, other, schema)
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
        #expect(try connection.query(select, prepare: true).columnCount == 1)
        #expect(connection.cachedStatements == 1)

        // In autocommit mode.
        try other.execute("ALTER TABLE t ADD COLUMN b bigint DEFAULT 7")
        let widened = try connection.query(select, prepare: true)
        #expect(widened.columnCount == 2 && widened.firstRow[1] == 7)

        // As the first statement of a transaction: the transaction begins again with it.
        try other.execute("ALTER TABLE t ADD COLUMN c bigint DEFAULT 8")
        try connection.begin("BEGIN ISOLATION LEVEL REPEATABLE READ")
        let again = try connection.query(select, prepare: true)
        #expect(again.columnCount == 3 && again.firstRow[2] == 8)
        #expect(connection.isInTransaction && !connection.isInFailedTransaction)
        try connection.execute("COMMIT")

        // After another statement of the same transaction: running it again would not be
        // the transaction the caller began, so the error stands; the next use prepares it
        // afresh.
        try other.execute("ALTER TABLE t ADD COLUMN d bigint DEFAULT 9")
        try connection.begin("BEGIN")
        _ = try connection.query("SELECT 1", prepare: false)
        #expect(throws: DepotError.self) { try connection.query(select, prepare: true) }
        try connection.execute("ROLLBACK")
        #expect(try connection.query(select, prepare: true).columnCount == 4)
    }

    @Test("the cache keeps a bounded number of statements and deallocates the ones it drops")
    func bounded() throws {
        let (connection, other, schema) = try connections()
        defer {
            try? other.execute("DROP SCHEMA \(schema) CASCADE")
            connection.close()
            other.close()
        }
        let capacity = PostgresStore.statementCacheCapacity
        for n in 0..<(capacity + 10) {
            #expect(try connection.query("SELECT $1::bigint + \(n)", [1], prepare: true).firstRow == [Int64(n + 1)])
        }
        #expect(connection.cachedStatements == capacity)
        // The dropped ones are deallocated before the connection's next statement.
        #expect(try connection.serverPrepared() == capacity)
        // The one used last is still there: no round trip of its own to prepare it.
        let before = connection.roundTrips
        #expect(try connection.query("SELECT $1::bigint + \(capacity + 9)", [1], prepare: true).firstRow == [Int64(capacity + 10)])
        #expect(connection.roundTrips - before == 1)
        #expect(connection.cachedStatements == capacity)
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
        #expect(store.cachedStatements.writer == 0 && store.cachedStatements.readers == [0])
        #expect(try await store.serverPreparedOnWriter() == 0)
    }

    @Test("a store's connections drop their statements when its registry changes, and deallocate them")
    func schemaChange() async throws {
        let store = try TestServer.makeStore(readers: 1)
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        // Once the listener listens, the first read probes the schema and the next do not.
        #expect(try await PostgresSchemaWatchTests.eventually { store.listensForSchemaChanges })
        #expect(try await cats.fetchOne(id: 1)?.name == "Tom")
        #expect(try await cats.count(Request(\.age < 5)) == 1)
        // The schema probe, the lookup by key and the count.
        #expect(store.cachedStatements.readers == [3])
        // Registering the grown entity changes the table and the registry.
        let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
        #expect(try await grown.fetchOne(id: 1)?.lives == 9)
        // The reader's next read began with an empty cache: the new lookup alone (this
        // store's own change needs no probe).
        #expect(store.cachedStatements.readers == [1])
        #expect(try await store.serverPreparedOnReader() == 1)
    }
}
