import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A PostgreSQL cluster of one test's own, started with scripts/postgres-test-server.sh in
/// a fresh folder: a test may restart it or refuse connections to it without disturbing
/// the other tests, which run at the same time against the shared server.
struct OwnServer {
    let dir: String
    let url: String
    let psql: String

    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/postgres-test-server.sh").path

    static func start() async throws -> OwnServer {
        guard let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw DepotError(.invalidConfiguration, "psql is needed (make test installs it)")
        }
        // Short: the socket path must fit in a Unix socket's 107 bytes.
        let dir = "/tmp/depot-own-\(UUID().uuidString.prefix(8).lowercased())"
        let started = try await ProcessLaunch.runOffPool("/bin/bash", [script, "start", dir])
        let url = started.stdout.split(separator: "\n").last.map(String.init) ?? ""
        guard started.exit.succeeded, url.hasPrefix("postgresql://") else {
            throw DepotError(.io, "could not start a server of the test's own: \(started.exit) \(started.stderr.suffix(2_000))")
        }
        return OwnServer(dir: dir, url: url, psql: psql)
    }

    /// `pg_ctl restart -m fast`, from outside this process: every session ends.
    func restart() async throws {
        let restarted = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, "restart", dir])
        guard restarted.exit.succeeded else { throw DepotError(.io, "restart failed: \(restarted.stderr.suffix(2_000))") }
    }

    func stop() {
        _ = try? ProcessLaunch.run("/bin/bash", [Self.script, "stop", dir])
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Runs `sql` through psql in `database` (the test database by default).
    @discardableResult
    func query(_ sql: String, database: String = "depot_test") async throws -> String {
        let target = url.replacingOccurrences(of: "/depot_test?", with: "/\(database)?")
        let run = try await ProcessLaunch.runOffPool(psql, [target, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        guard run.exit.succeeded else { throw DepotError(.backend, "psql: \(run.stderr)") }
        return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The server's log (the script records a /tmp fallback folder in DIR/location).
    func log() -> String {
        let base = (try? String(contentsOfFile: dir + "/location", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? dir
        return (try? String(contentsOfFile: base + "/server.log", encoding: .utf8)) ?? ""
    }
}

/// A server restart, a failover or a dropped connection must cost an observer a late
/// delivery, never its life; and the reads and writes after it must not fail either.
@Suite("PostgresStore across a server restart", .enabled(if: TestServer.available), .timeLimit(.minutes(3)))
struct PostgresRestartTests {
    @Test("an observer sees every commit made after the server restarted; reads and writes go on")
    func observationSurvivesARestart() async throws {
        let server = try await OwnServer.start()
        defer { server.stop() }
        let first = try PostgresStore(url: server.url, options: .init(schema: "shared", readers: 2))
        let second = try PostgresStore(url: server.url, options: .init(schema: "shared", readers: 2))
        let writer = Controller<Account, Account>(store: first)
        let watcher = Controller<Account, Account>(store: second)
        try await writer.save(Account(id: 1, balance: 1, owner: "a"))
        var iterator = watcher.observe(Request<Account>.all.sorted(by: \.id)).makeAsyncIterator()
        var latest = try #require(try await iterator.next())
        try await writer.save(Account(id: 2, balance: 2, owner: "b"))
        while latest.objects.map(\.id) != [1, 2] { latest = try #require(try await iterator.next()) }
        // Every reader of both stores has a session now, which the restart ends.
        for _ in 0..<4 {
            #expect(try await writer.count() == 2)
            #expect(try await watcher.count() == 2)
        }

        try await server.restart()

        // Each later commit reaches the observer (a delivery may carry several).
        for id in Int64(3)...6 {
            try await writer.save(Account(id: id, balance: id, owner: "after"))
            while latest.objects.map(\.id).last != id {
                latest = try #require(try await iterator.next(), "the observation ended after the restart")
            }
            #expect(latest.objects.map(\.id) == Array(1...id))
        }
        // Reads and writes on both stores, without a failed first attempt.
        #expect(try await watcher.fetchAll().map(\.id) == [1, 2, 3, 4, 5, 6])
        #expect(try await writer.fetchOne(id: 6)?.owner == "after")
        try await watcher.save(Account(id: 7, balance: 7, owner: "watcher"))
        #expect(try await writer.count() == 7)
        await first.close()
        await second.close()
    }

    /// The observer's re-read itself fails (its reader's session was ended and the server
    /// refuses new connections for a while): the observation reads again later instead of
    /// ending.
    @Test("an observation whose re-read fails with io reads again once the server lets it")
    func observationSurvivesAFailedReread() async throws {
        let server = try await OwnServer.start()
        defer { server.stop() }
        let tag = "depot_reread"
        let store = try PostgresStore(url: server.url + "&application_name=\(tag)", options: .init(schema: "reread", readers: 1))
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.save(Account(id: 1, balance: 1, owner: "a"))
        // The callback form: its task reads again as soon as a commit is announced.
        let (updates, continuation) = AsyncStream<Result<ObservedResult<Account>, DepotError>>.makeStream()
        let token = accounts.observe(Request<Account>.all.sorted(by: \.id)) { continuation.yield($0) }
        var deliveries = updates.makeAsyncIterator()
        func next() async throws -> [Int64] {
            try #require(await deliveries.next()).get().objects.map(\.id)
        }
        #expect(try await next() == [1])

        // No new session in the store's database; then the reader's session ends (its last
        // statement was the ROLLBACK of the observation's first read). The writer's stays.
        try await server.query("ALTER DATABASE depot_test WITH ALLOW_CONNECTIONS false", database: "postgres")
        var killed = ""
        for _ in 0..<50 where killed != "1" {
            killed = try await server.query(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '\(tag)' AND query = 'ROLLBACK'", database: "postgres")
            if killed != "1" { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(killed == "1", "the reader's session: \(killed)")

        // The commit makes the observer read again, on the reader whose session is gone and
        // which cannot connect again: that read fails with io.
        try await accounts.save(Account(id: 2, balance: 2, owner: "b"))
        let refused = "is not currently accepting connections"
        // Bounded so that a store that never tries prints why (a failure, not a timing).
        for _ in 0..<600 where !server.log().contains(refused) { try await Task.sleep(for: .milliseconds(50)) }
        try #require(server.log().contains(refused), "the store never tried to connect again: \(server.log().suffix(3_000))")

        try await server.query("ALTER DATABASE depot_test WITH ALLOW_CONNECTIONS true", database: "postgres")
        // Before the fix, the failed re-read was delivered as the observation's last call.
        #expect(try await next() == [1, 2])
        try await accounts.save(Account(id: 3, balance: 3, owner: "c"))
        #expect(try await next() == [1, 2, 3])
        token.cancel()
        await store.close()
    }
}
