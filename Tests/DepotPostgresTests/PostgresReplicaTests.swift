import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A primary and a streaming standby (`make test` starts both: scripts/postgres-test-server.sh
/// standby): DEPOT_TEST_POSTGRES_CLUSTER_URL names both hosts. Without it these tests are
/// skipped, unless DEPOT_REQUIRE_POSTGRES_STANDBY=1 (as `make test` sets), which makes its
/// absence a failure.
enum TestCluster {
    static let url = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_CLUSTER_URL"]
    static let required = ProcessInfo.processInfo.environment["DEPOT_REQUIRE_POSTGRES_STANDBY"] == "1"
    static var available: Bool { url != nil || required }

    static func requireURL() throws -> String {
        guard let url else {
            throw DepotError(.invalidConfiguration, "DEPOT_REQUIRE_POSTGRES_STANDBY=1 but DEPOT_TEST_POSTGRES_CLUSTER_URL is not set: start a primary and a standby with scripts/postgres-test-server.sh start DIR, then standby DIR (make test does).")
        }
        return url
    }

    static func makeStore(
        schema: String = "r_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())", readers: Int = 2,
        consistency: PostgresStore.Consistency = .readYourWrites, standbyWait: Duration = .seconds(2)
    ) throws -> PostgresStore {
        try PostgresStore(url: requireURL(), options: .init(schema: schema, readers: readers, consistency: consistency, standbyWait: standbyWait))
    }

    /// Runs `sql` on the standby itself, for pausing and resuming its replay.
    static func onStandby(_ sql: String) throws {
        try PostgresStore.executeOnStandby(url: requireURL(), sql)
    }
}

/// The conformance suite with every read served by the standby (and read-your-writes
/// making each read after a write wait for its replay).
@Suite("PostgresStore with a standby: conformance", .enabled(if: TestCluster.available), .serialized)
struct PostgresReplicaConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        let store = try TestCluster.makeStore()
        // Every reader on the standby, or the suite would not show anything about it.
        let onStandby = store.readersOnStandby
        #expect(!onStandby.isEmpty && !onStandby.contains(false))
        #expect(store.routesToStandbys)
        try await check.runAndClose(store)
    }
}

@Suite("PostgresStore with a standby", .enabled(if: TestCluster.available), .serialized)
struct PostgresReplicaTests {
    @Test("the writer and the listener are on the primary, the readers on the standby")
    func routing() async throws {
        let store = try TestCluster.makeStore()
        defer { Task { await store.close() } }
        let onStandby = store.readersOnStandby
        #expect(!onStandby.isEmpty && !onStandby.contains(false))
        #expect(try store.writerIsOnStandby() == false)
        // A single-host URL routes nothing.
        let single = try TestServer.makeStore()
        defer { Task { await single.close() } }
        #expect(single.routesToStandbys == false)
    }

    @Test("a read after a write sees it while the standby's replay is paused: the primary serves it; eventual reads do not wait")
    func readYourWritesUnderLag() async throws {
        let schema = "r_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try TestCluster.makeStore(schema: schema, standbyWait: .milliseconds(200))
        let eventual = try TestCluster.makeStore(schema: schema, consistency: .eventual)
        defer {
            Task {
                await store.close()
                await eventual.close()
            }
        }
        let cats = Controller<Cat, CatRecord>(store: store)
        let lagging = Controller<Cat, CatRecord>(store: eventual)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        #expect(try await cats.fetchOne(id: 1)?.name == "Tom")
        // The standby has replayed Tom before its replay is paused: an eventual read (on the
        // standby) sees him. A loaded machine can take a while to replay.
        let replayed = try await eventually(every: .milliseconds(50)) { try await lagging.count() == 1 }
        try #require(replayed, "the standby never replayed the first save")

        try TestCluster.onStandby("SELECT pg_wal_replay_pause()")
        do {
            try await cats.save(Cat(id: 2, name: "Felix", weight: 3, age: 2))
            let before = store.primaryRoundTrips
            // Read-your-writes: the standby cannot replay the save, so after the wait the
            // primary (a connection of its own, one read at a time) serves the reads.
            #expect(try await cats.fetchOne(id: 2)?.name == "Felix")
            #expect(try await cats.count() == 2)
            #expect(try await cats.fetchAll().map(\.id) == [1, 2])
            #expect(store.primaryRoundTrips > before, "the primary served the reads")
            // Eventual: the standby as it is, without the save it has not replayed.
            #expect(try await lagging.fetchOne(id: 2) == nil)
            #expect(try await lagging.count() == 1)
        } catch {
            try? TestCluster.onStandby("SELECT pg_wal_replay_resume()")
            throw error
        }
        try TestCluster.onStandby("SELECT pg_wal_replay_resume()")
        // Replay resumed: the standby serves the read once it caught up.
        #expect(try await cats.fetchOne(id: 2)?.name == "Felix")
        let caughtUp = try await eventually(every: .milliseconds(50)) { try await lagging.count() == 2 }
        #expect(caughtUp, "the standby replayed the save once resumed")
    }

    @Test("a read the primary serves takes in another process's schema change and runs again")
    func primaryReadAfterASchemaChange() async throws {
        let schema = "r_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try TestCluster.makeStore(schema: schema, standbyWait: .milliseconds(100))
        let other = try TestServer.makeStore(schema: schema)
        defer {
            Task {
                await store.close()
                await other.close()
            }
        }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        try TestCluster.onStandby("SELECT pg_wal_replay_pause()")
        do {
            try await cats.save(Cat(id: 2, name: "Felix", weight: 3, age: 2))
            // Another process registers an entity: the schema version moves on the primary.
            try await Controller<Account, Account>(store: other).save(Account(id: 1, balance: 1, owner: "a"))
            #expect(try await cats.fetchOne(id: 2)?.name == "Felix")
        } catch {
            try? TestCluster.onStandby("SELECT pg_wal_replay_resume()")
            throw error
        }
        try TestCluster.onStandby("SELECT pg_wal_replay_resume()")
    }

    @Test("an observer hears every commit, its own store's and another's, while reads go to the standby")
    func observationHearsThePrimary() async throws {
        let schema = "r_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let first = try TestCluster.makeStore(schema: schema)
        let second = try TestCluster.makeStore(schema: schema)
        defer {
            Task {
                await first.close()
                await second.close()
            }
        }
        let writer = Controller<Cat, CatRecord>(store: first)
        let watcher = Controller<Cat, CatRecord>(store: second)
        try await writer.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        _ = try await watcher.count()
        var iterator = watcher.observe(Request<CatRecord>.all.sorted(by: \.id)).makeAsyncIterator()
        var latest = try #require(try await iterator.next())
        try await writer.save(Cat(id: 2, name: "Felix", weight: 3, age: 2))
        try await writer.insert(Cat(id: 3, name: "Kitty", weight: 2, age: 1))
        while latest.objects.map(\.id) != [1, 2, 3] { latest = try #require(try await iterator.next()) }
        #expect(latest.objects.map(\.name) == ["Tom", "Felix", "Kitty"])
    }
}
