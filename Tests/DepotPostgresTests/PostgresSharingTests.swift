import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

@Record(name: "Account")
struct Account: Equatable {
    var id: Int64
    var balance: Int64
    var owner: String
}

@Record(name: "Tag")
struct Tag: Equatable {
    var id: String
    var note: String
}

/// Two stores on one schema stand for two servers sharing one database: each has its own
/// connections, writer and listener, exactly as another process would.
@Suite("PostgresStore across servers", .enabled(if: TestServer.available), .serialized)
struct PostgresSharingTests {
    static func schema() -> String { "s_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())" }

    @Test func readModifyWriteFromTwoServersLosesNoUpdate() async throws {
        let schema = Self.schema()
        let first = try TestServer.makeStore(schema: schema)
        let second = try TestServer.makeStore(schema: schema)
        let a = Controller<Account, Account>(store: first)
        let b = Controller<Account, Account>(store: second)
        try await a.save(Account(id: 1, balance: 0, owner: "shared"))
        let rounds = 60
        // Each operation reads the balance and writes it plus one; without serializable
        // transactions (and the retry) the two servers would overwrite each other's updates.
        await withThrowingTaskGroup(of: Void.self) { group in
            for controller in [a, b] {
                group.addTask {
                    for _ in 0..<rounds {
                        try await controller.operation { context in
                            guard let account = try context.fetchOne(id: 1) else { throw DepotError(.notFound, "account 1") }
                            try context.save(Account(id: 1, balance: account.balance + 1, owner: account.owner))
                        }
                    }
                }
            }
        }
        #expect(try await a.fetchOne(id: 1)?.balance == Int64(2 * rounds))
        #expect(try await b.fetchOne(id: 1)?.balance == Int64(2 * rounds))
        await first.close()
        await second.close()
    }

    @Test func observersSeeTheOtherServersWrites() async throws {
        let schema = Self.schema()
        let first = try TestServer.makeStore(schema: schema)
        let second = try TestServer.makeStore(schema: schema)
        let writer = Controller<Account, Account>(store: first)
        let watcher = Controller<Account, Account>(store: second)
        try await writer.save(Account(id: 1, balance: 10, owner: "a"))
        var iterator = watcher.observe(Request<Account>.all.sorted(by: \.id)).makeAsyncIterator()
        let initial = try #require(try await iterator.next())
        #expect(initial.objects.map(\.id) == [1])
        try await writer.save([Account(id: 2, balance: 5, owner: "b"), Account(id: 1, balance: 11, owner: "a")])
        // A delivery may coalesce commits; wait for the one that shows both.
        var latest = initial
        while latest.objects.map(\.balance) != [11, 5] {
            latest = try #require(try await iterator.next())
        }
        #expect(latest.changes.inserted.count + latest.changes.updated.count >= 1)
        _ = try await writer.delete(id: 2)
        while latest.objects.map(\.id) != [1] {
            latest = try #require(try await iterator.next())
        }
        // The raw feed carries the other server's keys.
        let stream = second.changes.stream(entities: ["Account"])
        var feed = stream.makeAsyncIterator()
        try await writer.save(Account(id: 7, balance: 1, owner: "c"))
        let delivered = try #require(await feed.next())
        #expect(delivered.changes == [Change(entity: "Account", key: .int(7), kind: .insert)])
        await first.close()
        await second.close()
    }

    /// Keys travel in the notification's JSON: the characters JSON escapes, and those it
    /// does not, reach the other server as they were written.
    @Test func keysJSONEscapesReachTheOtherServerIntact() async throws {
        let schema = Self.schema()
        let first = try TestServer.makeStore(schema: schema)
        let second = try TestServer.makeStore(schema: schema)
        let writer = Controller<Tag, Tag>(store: first)
        #expect(try await Controller<Tag, Tag>(store: second).count() == 0)
        // The last key is plain: once it is heard, every commit before it was delivered
        // (commit order), so a payload dropped as unreadable shows as a missing key.
        let keys = ["quote\"d", "back\\slash", "tab\tnew\nline\u{1}", "ünïcödé ✓", "\\\"", "last"]
        let stream = second.changes.stream(entities: ["Tag"])
        var feed = stream.makeAsyncIterator()
        for key in keys { try await writer.save(Tag(id: key, note: "n")) }
        // A delivery may coalesce commits: gather them until the last key was heard.
        var heard: [Change] = []
        while !heard.contains(where: { $0.key == .string("last") }), let delivered = await feed.next() { heard += delivered.changes }
        #expect(heard == keys.map { Change(entity: "Tag", key: .string($0), kind: .insert) })
        await first.close()
        await second.close()
    }

    @Test func serversStartingTogetherApplyANewSchemaOnce() async throws {
        let schema = Self.schema()
        let stores = try (0..<4).map { _ in try TestServer.makeStore(schema: schema, readers: 1) }
        // All register the same new entity at once: one creates it, the others find it.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, store) in stores.enumerated() {
                group.addTask { try await Controller<Account, Account>(store: store).save(Account(id: Int64(index), balance: 0, owner: "s\(index)")) }
            }
            try await group.waitForAll()
        }
        #expect(try await Controller<Account, Account>(store: stores[0]).count() == 4)
        let entities = try await stores[3].storedEntities().map(\.name)
        #expect(entities.filter { $0 == "Account" }.count == 1)
        for store in stores { await store.close() }
    }

    @Test func tablesAreRealPostgreSQLTables() async throws {
        let schema = Self.schema()
        let store = try TestServer.makeStore(schema: schema)
        try await Controller<Account, Account>(store: store).save([Account(id: 1, balance: 3, owner: "Zoë"), Account(id: 2, balance: 4, owner: "a\0b")])
        await store.close()
        guard let url = TestServer.url, let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            Issue.record("psql is not installed (make test installs postgresql-client)")
            return
        }
        let columns = try ProcessLaunch.run(psql, [url, "-At", "-c", "SELECT column_name || ':' || data_type || ':' || coalesce(collation_name, '') FROM information_schema.columns WHERE table_schema = '\(schema)' AND table_name = 'Account' ORDER BY ordinal_position"])
        #expect(columns.exit.status == 0, "\(columns.stderr)")
        #expect(columns.stdout.split(separator: "\n") == ["id:bigint:", "balance:bigint:", "owner:text:C"], "\(columns.stdout)")
        let rows = try ProcessLaunch.run(psql, [url, "-At", "-c", "SELECT owner FROM \"\(schema)\".\"Account\" WHERE id = 1"])
        #expect(rows.stdout == "Zoë\n", "\(rows.stdout)")
    }

    /// Another program (psql) holding an `ACCESS EXCLUSIVE` lock on a schema's `Account`
    /// table until ``release()`` ends its session. It would hold it for a minute, so a test
    /// never depends on how soon a loaded machine gets to its next step.
    struct LockHolder {
        let url: String
        let psql: String
        let schema: String
        let process = Process()
        var name: String { "depot-lock-\(schema)" }

        init(url: String, psql: String, schema: String) throws {
            (self.url, self.psql, self.schema) = (url, psql, schema)
            process.executableURL = URL(fileURLWithPath: psql)
            process.arguments = [url, "-q", "-c", "BEGIN; LOCK TABLE \"\(schema)\".\"Account\" IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60); COMMIT;"]
            var environment = ProcessInfo.processInfo.environment
            environment["PGAPPNAME"] = name
            process.environment = environment
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
        }

        /// How many locks on the table are granted (`granted`) or waited for.
        func locks(granted: Bool) async throws -> Int {
            let sql = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '\(schema)' AND c.relname = 'Account' AND \(granted ? "l.granted AND l.mode = 'AccessExclusiveLock'" : "NOT l.granted")"
            return Int(try await ProcessLaunch.runOffPool(psql, [url, "-At", "-c", sql]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }

        /// Waits up to a minute until `locks(granted:)` is above zero.
        func waitFor(granted: Bool) async throws -> Bool {
            try await eventually(every: .milliseconds(50)) { try await locks(granted: granted) > 0 }
        }

        /// Ends the holder's session, which releases the lock.
        func release() async throws {
            _ = try await ProcessLaunch.runOffPool(psql, [url, "-At", "-c", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '\(name)'"])
            _ = try await eventually(every: .milliseconds(50)) { !process.isRunning }
        }
    }

    /// A statement held up past `statementTimeout` (here by another program's table lock) is
    /// cancelled by the server and reported as `busy`, and the store goes on working.
    @Test func aStatementPastItsTimeoutIsBusy() async throws {
        let schema = Self.schema()
        guard let url = TestServer.url, let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            Issue.record("DEPOT_TEST_POSTGRES_URL and psql are needed")
            return
        }
        // Far above what any statement of the test takes on a loaded machine, far below the
        // lock's minute.
        let store = try PostgresStore(url: url, options: .init(schema: schema, readers: 1, statementTimeout: .seconds(2), retries: 0))
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.save(Account(id: 1, balance: 0, owner: "x"))
        let holder = try LockHolder(url: url, psql: psql, schema: schema)
        let held = try await holder.waitFor(granted: true)
        if held {
            do {
                try await accounts.save(Account(id: 2, balance: 0, owner: "y"))
                Issue.record("the write should have timed out behind the lock")
            } catch let error as DepotError {
                #expect(error.code == .busy, "\(error)")
            }
        }
        try await holder.release()
        try #require(held, "the other program's lock was never seen")
        try await accounts.save(Account(id: 3, balance: 0, owner: "z"))
        #expect(try await accounts.count() == 2)
        await store.close()
    }

    /// `statementTimeout` zero is PostgreSQL's "no limit", not a 1 ms limit: a write held
    /// up by another program's lock waits for it.
    @Test func aZeroStatementTimeoutIsNoLimit() async throws {
        let schema = Self.schema()
        guard let url = TestServer.url, let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            Issue.record("DEPOT_TEST_POSTGRES_URL and psql are needed")
            return
        }
        let store = try PostgresStore(url: url, options: .init(schema: schema, readers: 1, statementTimeout: .zero, retries: 0))
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.save(Account(id: 1, balance: 0, owner: "x"))
        let holder = try LockHolder(url: url, psql: psql, schema: schema)
        let held = try await holder.waitFor(granted: true)
        if !held { try await holder.release() }
        try #require(held, "the other program's lock was never seen")
        // Waits behind the lock (far more than 1 ms) until the lock goes, then succeeds.
        let save = Task { try await accounts.save(Account(id: 2, balance: 0, owner: "y")) }
        let waited = try await holder.waitFor(granted: false)
        try await holder.release()
        #expect(waited, "the write never waited for the lock")
        try await save.value
        #expect(try await accounts.count() == 2)
        await store.close()
    }

    /// The listener's connection dropped (a server restart, a failover): it reconnects, and
    /// observers hear of the other server's writes again.
    @Test func observationSurvivesALostListenerConnection() async throws {
        let schema = Self.schema()
        guard let url = TestServer.url, let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            Issue.record("DEPOT_TEST_POSTGRES_URL and psql are needed")
            return
        }
        let first = try TestServer.makeStore(schema: schema)
        let second = try TestServer.makeStore(schema: schema)
        let writer = Controller<Account, Account>(store: first)
        let watcher = Controller<Account, Account>(store: second)
        try await writer.save(Account(id: 1, balance: 1, owner: "a"))
        var iterator = watcher.observe(Request<Account>.all.sorted(by: \.id)).makeAsyncIterator()
        _ = try await iterator.next()
        let channel = "depot_changes_\(schema)"
        // Both stores' listeners.
        var killed = ""
        for _ in 0..<50 where !killed.hasPrefix("2") {
            killed = try ProcessLaunch.run(psql, [url, "-At", "-c", "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN \"\(channel)\"'"]).stdout
            if !killed.hasPrefix("2") { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(killed.hasPrefix("2"), "both stores' listeners: \(killed)")
        try await Task.sleep(for: .milliseconds(300))
        try await writer.save(Account(id: 2, balance: 2, owner: "b"))
        var latest = try #require(try await iterator.next())
        while latest.objects.count != 2 { latest = try #require(try await iterator.next()) }
        #expect(latest.objects.map(\.id) == [1, 2])
        await first.close()
        await second.close()
    }

    /// A write whose keys do not fit in one notification still commits; the others hear
    /// which entity changed.
    @Test func aWriteTooLargeToListStillCommits() async throws {
        let schema = Self.schema()
        let first = try TestServer.makeStore(schema: schema)
        let second = try TestServer.makeStore(schema: schema)
        let accounts = Controller<DepotTesting.Account, DepotTesting.Account>(store: first)
        _ = try await Controller<DepotTesting.Account, DepotTesting.Account>(store: second).count()
        var feed = second.changes.stream(entities: ["Account"]).makeAsyncIterator()
        let key = String(repeating: "\u{2}", count: 3_000)
        try await accounts.save(DepotTesting.Account(id: key, owner: "x"))
        #expect(try await accounts.fetchOne(id: key)?.owner == "x")
        let delivered = try #require(await feed.next())
        #expect(delivered.entities == ["Account"])
        await first.close()
        await second.close()
    }

    @Test func badURLsAndOptionsAreDepotErrors() async throws {
        #expect(throws: DepotError.self) { try PostgresStore(url: "postgresql://nobody@/nothing?host=/nonexistent/socket&port=1") }
        #expect(throws: DepotError.self) { try TestServer.makeStore(schema: String(repeating: "x", count: 64)) }
        #expect(throws: DepotError.self) { try TestServer.makeStore(schema: "ok", readers: 0) }
    }
}
