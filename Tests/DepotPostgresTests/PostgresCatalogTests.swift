import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

@Record(name: "Gizmo")
struct GizmoV1: Equatable {
    var id: Int64
    var code: String
}

/// `storedEntities()` reads the schema's `depot_entities` again and replaces this process's
/// registrations with what another process stored: a controller of the old declaration
/// must then be refused, not read or write the new layout as the old.
@Suite("PostgresStore after another process changed an entity", .enabled(if: TestServer.available))
struct PostgresCatalogTests {
    @Test("after storedEntities() picks up another process's type change, the old controller gets schemaMismatch")
    func oldControllerIsRefusedAfterStoredEntities() async throws {
        let url = try #require(TestServer.url)
        let psql = try #require(["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }))
        let schema = "c_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try PostgresStore(url: url, options: .init(schema: schema, readers: 1))
        let old = Controller<GizmoV1, GizmoV1>(store: store)
        try await old.save(GizmoV1(id: 1, code: "one"))

        // Another program turns `code` into an integer: the column and the stored description.
        let run = try ProcessLaunch.run(psql, [
            url, "-q", "-v", "ON_ERROR_STOP=1", "-c",
            """
            SET search_path TO "\(schema)";
            ALTER TABLE "Gizmo" ALTER COLUMN code TYPE bigint USING 10;
            UPDATE depot_entities SET description = replace(description, '"name":"code","type":"string"', '"name":"code","type":"int64"') WHERE name = 'Gizmo';
            """,
        ])
        #expect(run.exit.succeeded, "\(run.stderr)")

        // Before the catalog is read again, the old layout's read is still refused: the
        // column's type is not the one its attribute is kept in.
        do {
            _ = try await old.fetchOne(id: 1)
            Issue.record("the old declaration read the retyped column")
        } catch let error as DepotError {
            #expect(error.code == .conversionFailed || error.code == .schemaMismatch, "\(error)")
        }

        let stored = try await store.storedEntities()
        let gizmo = try #require(stored.first { $0.name == "Gizmo" })
        #expect(gizmo.entity.attributes.map(\.type) == [.int64, .int64])

        do {
            _ = try await old.fetchOne(id: 1)
            Issue.record("the old declaration read the retyped table")
        } catch let error as DepotError {
            #expect(error.code == .schemaMismatch, "\(error)")
        }
        do {
            try await old.save(GizmoV1(id: 3, code: "thirty"))
            Issue.record("the old declaration wrote into the retyped table")
        } catch let error as DepotError {
            #expect(error.code == .schemaMismatch, "\(error)")
        }
        do {
            _ = try await old.fetchAll()
            Issue.record("the old declaration listed the retyped table")
        } catch let error as DepotError {
            #expect(error.code == .schemaMismatch, "\(error)")
        }
        await store.close()
    }
}
