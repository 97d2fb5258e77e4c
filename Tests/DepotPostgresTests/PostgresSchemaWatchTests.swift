import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// Reads on the primary leave the schema probe out while the store's listener listens and
/// has heard no schema change; a change another store makes is heard, and the old layout
/// is refused after it as before. A change whose notification has not arrived yet is found
/// in PostgreSQL's answer instead, and refused the same way.
@Suite("PostgresStore following other stores' schema changes", .enabled(if: TestServer.available))
struct PostgresSchemaWatchTests {
    typealias GizmoV1 = CrossProcessSchema.GizmoV1
    typealias GizmoV2 = CrossProcessSchema.GizmoV2

    static func schema() -> String { "w_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())" }

    /// Polls `condition` for up to a minute: the listener's thread hears a notification
    /// when a loaded machine gives it the CPU.
    static func eventually(_ condition: () -> Bool) async throws -> Bool {
        try await DepotTesting.eventually { condition() }
    }

    static func expectSchemaMismatch<T>(_ what: String, _ body: () async throws -> T) async {
        do {
            let value = try await body()
            Issue.record("\(what): expected schemaMismatch, got \(value)")
        } catch let error as DepotError {
            #expect(error.code == .schemaMismatch, "\(what): \(error)")
        } catch {
            Issue.record("\(what): \(error)")
        }
    }

    /// A store in a schema of its own holding two gizmos in the old layout, its listener
    /// listening and its schema checked once; the probes its readers have sent by then.
    static func settledStore(schema: String) async throws -> (store: PostgresStore, old: Controller<GizmoV1, GizmoV1>, probes: Int) {
        let store = try TestServer.makeStore(schema: schema)
        let old = Controller<GizmoV1, GizmoV1>(store: store)
        try await old.save([GizmoV1(id: 1, code: "10"), GizmoV1(id: 2, code: "20")])
        #expect(try await eventually { store.listensForSchemaChanges }, "the listener never listened")
        // The first reads after the listener began may probe, until one finds the schema
        // as the registry has it.
        _ = try await old.fetchAll()
        _ = try await old.fetchAll()
        return (store, old, store.readerProbes)
    }

    @Test("reads send no probe while nothing is heard; after another store's change the old layout is refused")
    func readsProbeOnlyAfterAChangeIsHeard() async throws {
        let schema = Self.schema()
        let (store, old, probes) = try await Self.settledStore(schema: schema)
        for _ in 0..<5 {
            #expect(try await old.fetchAll().count == 2)
            #expect(try await old.fetchOne(id: 1) == GizmoV1(id: 1, code: "10"))
            #expect(try await old.count() == 2)
        }
        #expect(store.readerProbes == probes, "reads probed the schema with nothing heard")

        let notices = store.schemaNotices
        let other = try TestServer.makeStore(schema: schema)
        try await CrossProcessSchema.retype(other)
        await other.close()
        #expect(try await Self.eventually { store.schemaNotices > notices }, "the schema change was not heard")

        await Self.expectSchemaMismatch("reading all in the old layout") { try await old.fetchAll() }
        await Self.expectSchemaMismatch("reading one in the old layout") { try await old.fetchOne(id: 1) }
        await Self.expectSchemaMismatch("saving the old layout") { try await old.save(GizmoV1(id: 3, code: "30")) }
        #expect(store.readerProbes > probes, "no read probed after the change was heard")

        let new = Controller<GizmoV2, GizmoV2>(store: store)
        #expect(try await new.fetchAll() == [GizmoV2(id: 1, code: 10), GizmoV2(id: 2, code: 20)])
        let settled = store.readerProbes
        for _ in 0..<3 { #expect(try await new.fetchAll().count == 2) }
        #expect(store.readerProbes == settled, "reads went on probing once the schema was checked")
        await store.close()
    }

    @Test("a change not heard yet is found in the answer's column types, and the old layout is refused")
    func aChangeNotHeardYetIsRefusedToo() async throws {
        let schema = Self.schema()
        let (store, old, probes) = try await Self.settledStore(schema: schema)

        // What a migration elsewhere commits, without its notification: as if this store
        // read before the notification arrived.
        let other = try TestServer.makeStore(schema: schema)
        for statement in [
            #"ALTER TABLE "Gizmo" ALTER COLUMN code TYPE bigint USING code::bigint"#,
            #"UPDATE depot_entities SET description = replace(description, '"name":"code","type":"string"', '"name":"code","type":"int64"') WHERE name = 'Gizmo'"#,
            "UPDATE depot_meta SET value = (value::bigint + 1)::text WHERE key = 'schema'",
        ] {
            _ = try await other.executeOnWriter(statement)
        }
        await other.close()

        // Without the probe the read meets a bigint column where its text is kept: it runs
        // again once the registry is reloaded (not a conversionFailed about one value), and
        // the reloaded registry refuses the old layout before any statement goes out.
        #expect(store.readerProbes == probes)
        await Self.expectSchemaMismatch("reading all in the old layout") { try await old.fetchAll() }
        await Self.expectSchemaMismatch("reading one in the old layout") { try await old.fetchOne(id: 1) }
        let new = Controller<GizmoV2, GizmoV2>(store: store)
        #expect(try await new.fetchAll() == [GizmoV2(id: 1, code: 10), GizmoV2(id: 2, code: 20)])
        await store.close()
    }
}
