import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A list endpoint's record: pets of one species by name, and by birth year, newest first.
@Record(name: "ListedPet", indexes: [.index("species", "name"), .index("species", .descending("born"))])
struct PGListedPet: Hashable {
    var id: Int64
    var species: String
    var name: String
    var born: Int64?
}

/// Issue #37: PostgreSQL uses the declared composite indexes for the statements Depot
/// compiles for a list endpoint's requests (with the parameters it binds), reading entries in the index's order: no Sort node, no sequential scan. The
/// table has enough rows, analyzed, that the planner chooses by cost.
@Suite("PostgresStore composite indexes", .enabled(if: TestServer.available))
struct PostgresCompositeIndexTests {
    static let species = (0..<16).map { "species\($0)" }

    /// Expects the server's plan of the statement the store sends for `query` (its count,
    /// with `counting`) to read `index`, and, when `sorted`, in the index's order.
    @discardableResult
    static func expectIndexed(
        _ store: PostgresStore, _ query: Query, counting: Bool = false, index: String, what: String, sorted: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> String {
        let (sql, plan) = try await store.explainStatement(query, counting: counting)
        #expect(plan.contains("\"Index Name\": \"\(index)"), "\(what): \(sql)\n\(plan)", sourceLocation: sourceLocation)
        #expect(!plan.contains("Seq Scan"), "\(what): no sequential scan: \(sql)\n\(plan)", sourceLocation: sourceLocation)
        if sorted {
            #expect(
                !plan.contains("\"Node Type\": \"Sort\"") && !plan.contains("\"Node Type\": \"Incremental Sort\""),
                "\(what): read in the index's order, no sort: \(sql)\n\(plan)", sourceLocation: sourceLocation)
        }
        return plan
    }

    @Test("the statements of a list endpoint's requests read the composite index in order")
    func listRequestsUseTheCompositeIndex() async throws {
        let store = try TestServer.makeStore()
        let pets = Controller<PGListedPet, PGListedPet>(store: store)
        var all: [PGListedPet] = []
        for i in 0..<16_000 {
            let born: Int64? = i % 5 == 0 ? nil : Int64(1990 + i % 30)
            all.append(PGListedPet(id: Int64(i + 1), species: Self.species[i % 16], name: "n\((i * 7_919) % 3_000)", born: born))
        }
        try await pets.save(all)
        _ = try await store.executeOnWriter("ANALYZE \"ListedPet\"")
        let handle = try await pets.registeredEntity()
        let byName = PostgresStore.compositeIndexName(entity: "ListedPet", index: .index("species", "name"))
        let byBorn = PostgresStore.compositeIndexName(entity: "ListedPet", index: .index("species", .descending("born")))
        #expect(byName == "depot_cidx_9_ListedPet_ix_7_species_4_name")

        let listPage = try Request<PGListedPet>(\.species == "species3").sorted(by: \.name).limit(20).resolved(for: handle)
        try await Self.expectIndexed(store, listPage, index: byName, what: "equality prefix, sorted by the rest")

        let range = try Request<PGListedPet>(\.species == "species3" && \.name > "n1").sorted(by: \.name).limit(20).resolved(for: handle)
        try await Self.expectIndexed(store, range, index: byName, what: "equality and a range")

        let inList = try Request<PGListedPet>(.in(\.species, ["species1", "species2"])).sorted(by: \.species).sorted(by: \.name).limit(20)
            .resolved(for: handle)
        try await Self.expectIndexed(store, inList, index: byName, what: "IN on the first component")

        let count = try Request<PGListedPet>(\.species == "species3").resolved(for: handle)
        // Either index starting with the species serves it.
        try await Self.expectIndexed(store, count, counting: true, index: "depot_cidx_9_ListedPet_ix_7_species_4_", what: "count", sorted: false)

        let newest = try Request<PGListedPet>(\.species == "species4").sorted(by: \.born, ascending: false).limit(20).resolved(for: handle)
        try await Self.expectIndexed(store, newest, index: byBorn, what: "descending component")

        // A cursor page after the first page's last record, as `page(size:after:)` asks for it.
        let first = try await pets.results.filter(\.species == "species3").sorted(by: \.name).page(size: 20)
        let cursor = try #require(first.next)
        try cursor.validate(for: listPage)
        let after = try Query(
            entity: handle, predicate: Request<PGListedPet>(\.species == "species3").predicate.and(
                ResultSet<PGListedPet, PGListedPet>.Iterator.after(cursor.values, in: listPage)),
            sortKeys: [SortKey("name"), SortKey("id")], limit: 21, offset: 0)
        let plan = try await Self.expectIndexed(store, after, index: byName, what: "cursor page")
        #expect(plan.contains("name >= "), "a cursor page seeks to its cursor through the index: \(plan)")
        let second = try await pets.results.filter(\.species == "species3").sorted(by: \.name).page(size: 20, after: cursor)
        let expected = try await pets.fetchAll(Request(\.species == "species3").sorted(by: \.name).limit(40))
        #expect(first.items + second.items == expected)
        await store.close()
    }

    @Test("indexes are created, added to an existing table, kept when undeclared and dropped by a step; a unique one over duplicates is refused")
    func indexesFollowTheDeclaration() async throws {
        let schema = "ci_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let plain = try EntityDescription(
            name: "Pet", attributes: [.init(name: "id", type: .int64), .init(name: "species", type: .string), .init(name: "name", type: .string)],
            primaryKey: "id")
        var indexed = plain
        indexed.indexes = [.index("species", .descending("name"))]
        var unique = plain
        unique.indexes = [.unique("species", "name")]
        func definitions(_ store: PostgresStore) async throws -> [String] {
            try await store.executeOnWriter(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Pet' AND indexname LIKE 'depot_cidx%' ORDER BY indexname")
        }
        do {
            let store = try TestServer.makeStore(schema: schema)
            let handle = try await store.register(plain)
            try await store.write { transaction in
                for i in 1...10 {
                    try transaction.insert(Row([.int(Int64(i)), .string(i % 2 == 0 ? "cat" : "dog"), .string(i <= 4 ? "same" : "n\(i)")]), into: handle)
                }
            }
            await store.close()
        }
        do {
            let store = try TestServer.makeStore(schema: schema)
            _ = try await store.register(indexed)
            let defs = try await definitions(store)
            #expect(defs.count == 1 && defs[0].hasSuffix("(species, name DESC, id)"), "\(defs)")
            await store.close()
        }
        do {
            let store = try TestServer.makeStore(schema: schema)
            do {
                _ = try await store.register(unique)
                Issue.record("a unique index over records that share its values was built")
            } catch let error as DepotError {
                #expect(error.code == .schemaMismatch, "\(error)")
            }
            let defs = try await definitions(store)
            #expect(defs.count == 1 && defs[0].contains("name DESC"), "the index as it was: \(defs)")
            await store.close()
        }
        do {
            // Removed from the declaration: kept, until a migration step drops it.
            let store = try TestServer.makeStore(schema: schema)
            #expect(try await store.register(plain).entity.indexes == indexed.indexes)
            #expect(try await definitions(store).count == 1)
            var migrator = Migrator()
            migrator.dropIndex("drop-pet-species-name", .index("species", .descending("name")), from: "Pet")
            #expect(try await migrator.migrate(store, registering: []) == ["drop-pet-species-name"])
            #expect(try await definitions(store).isEmpty)
            await store.close()
        }
    }

    @Test("a long entity name gets a hashed index name within PostgreSQL's 63 bytes")
    func longNamesAreHashed() {
        let entity = String(repeating: "e", count: 40)
        let name = PostgresStore.compositeIndexName(entity: entity, index: .index("species", "name"))
        #expect(name.utf8.count <= PostgresStore.identifierLimit)
        #expect(name.hasPrefix("depot_cidx_h"))
        #expect(name != PostgresStore.compositeIndexName(entity: entity, index: .index("species", .descending("name"))))
        #expect(name != PostgresStore.compositeIndexName(entity: entity, index: .index("name", "species")))
    }
}
