import Depot
import DepotTesting
import Foundation
import Testing

/// Schema changes made by another process (a real one: depot-crash-writer) while this one
/// holds the store open: no backend may go on writing or reading the old layout, and two
/// processes running the same migration at once both succeed, the step applied once.
@Suite("cross-process schema changes")
struct CrossProcessSchemaTests {
    typealias GizmoV1 = CrossProcessSchema.GizmoV1
    typealias GizmoV2 = CrossProcessSchema.GizmoV2

    /// Rounds of two processes migrating at once.
    static let rounds = Stress.size("DEPOT_MIGRATION_RACES", ci: 4, tsan: 2, full: 20)

    /// The durable backends (which other processes can open) and, where a server runs,
    /// PostgreSQL: each location a store URL of its own.
    static func locations(_ label: String, in directory: TemporaryDirectory) throws -> [(name: String, url: String)] {
        var urls = [("sqlite", Backend.sqlite.url(in: directory, name: label)), ("lmdb", Backend.lmdb.url(in: directory, name: label))]
        if let url = Stress.postgresURL {
            urls.append(("postgres", "\(url)&schema=\(label)_\(UUID().uuidString.prefix(8).lowercased())"))
        } else if Stress.postgresRequired {
            throw DepotError(.invalidConfiguration, "DEPOT_REQUIRE_POSTGRES=1 but DEPOT_TEST_POSTGRES_URL is not set: start a server with scripts/postgres-test-server.sh (make test does).")
        }
        return urls
    }

    /// Waits for a helper process on a thread of its own (see `ProcessLaunch.runOffPool`).
    static func waitOffPool(_ helper: Helper) async -> (status: Int32, stderr: String) {
        let pid = helper.child.pid
        let status = await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: ProcessLaunch.wait(pid).status) }
            thread.name = "depot.test.wait"
            thread.start()
        }
        return (status, (try? String(contentsOfFile: helper.stderrPath, encoding: .utf8)) ?? "")
    }

    @Test("after another process retypes an attribute, old-layout writes and reads are refused with schemaMismatch")
    func retypedElsewhere() async throws {
        let directory = TemporaryDirectory("xschema")
        defer { directory.remove() }
        for (name, url) in try Self.locations("retype", in: directory) {
            let store = try await openStore(url: url)
            let old = Controller<GizmoV1, GizmoV1>(store: store)
            try await old.save([GizmoV1(id: 1, code: "10"), GizmoV1(id: 2, code: "20")])
            #expect(try await old.fetchAll().count == 2, "\(name)")

            let path = try #require(crashWriterPath, "depot-crash-writer was not found next to the test runner")
            let helper = try await ProcessLaunch.runOffPool(path, ["retype", url])
            #expect(helper.exit.status == 0, "\(name): \(helper.stderr)")

            await expectDepotError(.schemaMismatch, "\(name): saving the old layout after the other process's change") {
                try await old.save(GizmoV1(id: 3, code: "thirty"))
            }
            await expectDepotError(.schemaMismatch, "\(name): reading all in the old layout") { try await old.fetchAll() }
            await expectDepotError(.schemaMismatch, "\(name): reading one in the old layout") { try await old.fetchOne(id: 1) }

            let new = Controller<GizmoV2, GizmoV2>(store: store)
            #expect(try await new.fetchAll().sorted { $0.id < $1.id } == [GizmoV2(id: 1, code: 10), GizmoV2(id: 2, code: 20)], "\(name): nothing written in the old layout")
            try await new.save(GizmoV2(id: 3, code: 30))
            #expect(try await new.fetchOne(id: 3) == GizmoV2(id: 3, code: 30), "\(name)")
            await store.close()
        }
    }

    @Test("two processes running the same schema step at once both succeed; the step runs once")
    func concurrentMigrations() async throws {
        let directory = TemporaryDirectory("xmigrate")
        defer { directory.remove() }
        var races = 0
        for round in 0..<Self.rounds {
            for (name, url) in try Self.locations("race\(round)", in: directory) {
                do {
                    let store = try await openStore(url: url)
                    try await Controller<CrossProcessSchema.Widget, CrossProcessSchema.Widget>(store: store)
                        .save((1...200).map { CrossProcessSchema.Widget(id: $0, name: "widget \($0)") })
                    await store.close()
                }
                let first = try Helper(["rename", url], stderrPath: directory.file("first-\(name)-\(round).txt"))
                let second = try Helper(["rename", url], stderrPath: directory.file("second-\(name)-\(round).txt"))
                let outcomes = [await Self.waitOffPool(first), await Self.waitOffPool(second)]
                for outcome in outcomes { #expect(outcome.status == 0, "\(name) round \(round): \(outcome.stderr)") }
                let store = try await openStore(url: url)
                let renamed = try await Controller<CrossProcessSchema.RenamedWidget, CrossProcessSchema.RenamedWidget>(store: store).fetchAll()
                #expect(renamed.count == 200 && renamed.allSatisfy { $0.label == "widget \($0.id)" }, "\(name) round \(round): \(renamed.prefix(3))")
                let stored = try await store.storedEntities()
                let ledger = try #require(stored.first { $0.name == EntityDescription.migrationLedgerName }, "\(name): the ledger")
                let applied = try await Migrator.applied(in: store, ledger: ledger)
                #expect(applied == ["widget-name-to-label"], "\(name) round \(round): the ledger holds the step once")
                await store.close()
                races += 1
            }
        }
        report("two processes migrating at once: \(races) races, both processes succeeded in each, every step applied once")
    }
}
