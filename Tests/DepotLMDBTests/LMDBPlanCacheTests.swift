import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

@Suite("LMDB plans reused by query shape")
struct LMDBPlanCacheTests {
    typealias Animals = Controller<TwoIndexAnimal, TwoIndexAnimal>

    /// The plan `fetch` uses for `request` (through the cache) and the one planning afresh
    /// gives, in one transaction.
    static func plans(_ store: LMDBStore, _ animals: Animals, _ request: Request<TwoIndexAnimal>) async throws -> (Plan, Plan)? {
        let query = try request.resolved(for: try await animals.registeredEntity())
        return try await store.read { transaction in
            guard let t = transaction as? LMDBTransaction else { return nil }
            let handles = try t.handles(for: query.handle)
            return (try t.plan(query, handles, needsOrder: true), try t.planAfresh(query, handles, needsOrder: true, describing: false).plan)
        }
    }

    static func same(_ a: Plan, _ b: Plan) -> Bool {
        a.source == b.source && a.ranges == b.ranges && a.exact == b.exact && a.ordered == b.ordered
            && a.descending == b.descending && a.consumed == b.consumed && a.keyset == b.keyset
    }

    static func components(_ plan: QueryPlan) -> [String]? {
        guard case .index(let list) = plan.access else { return nil }
        return list.map(\.attribute)
    }

    @Test("a list page's plan is reused with other values and re-checked after the data changes")
    func reusedPlanAnswersAsPlannedAfresh() async throws {
        let animals = IndexedAnimal.generate(1_500, seed: 5).map(TwoIndexAnimal.init)
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            let memory = Animals(store: MemoryStore())
            try await lmdb.save(animals)
            try await memory.save(animals)
            let long = String(repeating: "x", count: 600)
            let values = IndexedAnimal.species + ["zebra", long, "cat"]
            func check(_ phase: String) async throws {
                for species in values {
                    for request in [
                        Request<TwoIndexAnimal>(\.species == species).sorted(by: \.name).limit(20),
                        Request(\.species == species).sorted(by: \.name, ascending: false).limit(5).offset(3),
                        // Not reusable: a second condition the index does not express.
                        Request(\.species == species && \.age == 3).sorted(by: \.name).limit(4),
                    ] {
                        #expect(try await lmdb.fetchAll(request) == memory.fetchAll(request), "\(phase): \(request)")
                        #expect(try await lmdb.count(request) == memory.count(request), "\(phase): \(request)")
                        let (used, afresh) = try #require(try await Self.plans(store, lmdb, request))
                        #expect(Self.same(used, afresh), "\(phase): \(request): \(used) against \(afresh)")
                    }
                }
            }
            try await check("first")
            // The list page's shape is remembered, once for the fetch and once for the count.
            let page = Request<TwoIndexAnimal>(\.species == "dog").sorted(by: \.name).limit(20)
            let entity = try await lmdb.registeredEntity()
            let shape = PlanShape(try page.resolved(for: entity), needsOrder: true)
            let remembered = try await store.read { transaction in
                try (transaction as? LMDBTransaction).map { try $0.handles(for: entity).reusablePlan(for: shape) != nil }
            }
            #expect(remembered == true)
            #expect(Self.components(try await lmdb.explain(page)) == ["species", "name"])

            // So few records left that reading them all costs less than the page's lookups:
            // the remembered plan loses its check, and every answer still matches.
            let last = animals[11].id
            #expect(try await lmdb.deleteAll(where: \.id > last) == memory.deleteAll(where: \.id > last))
            try await check("after deleting")
            let (used, _) = try #require(try await Self.plans(store, lmdb, page))
            #expect(used.source == .primary, "\(used)")
            #expect(try await lmdb.explain(page).usesIndex == false)

            // Many records again: the index wins again.
            let more = IndexedAnimal.generate(2_000, seed: 9).map { animal in
                var copy = TwoIndexAnimal(animal)
                copy.id += 100_000
                return copy
            }
            try await lmdb.save(more)
            try await memory.save(more)
            try await check("after inserting")
            #expect(Self.components(try await lmdb.explain(page)) == ["species", "name"])
        }
    }
}
