import DepotCore
import Foundation

/// Composite indexes: list pages, cursor walks, `IN` and ranges over an indexed entity, and
/// an index added to an entity that already has records, answer alike everywhere; a plan
/// that reads an index reads the right one in order.
enum IndexChecks {
    @Record(name: "ListedPet", indexes: [.index("species", "name")])
    struct ListedPet: Hashable {
        var id: Int64
        var species: String
        var name: String
        var weight: Double
    }

    /// The same entity before its index was declared.
    @Record(name: "ListedPet")
    struct UnindexedPet: Hashable {
        var id: Int64
        var species: String
        var name: String
        var weight: Double
    }

    static let speciesCount = 8

    static func pets(count: Int) -> [ListedPet] {
        // Names repeat across species and within one, so ties are broken by key.
        (1...count).map { id in
            ListedPet(id: Int64(id), species: "s\(id % speciesCount)", name: "n\((id * 7919) % 97)", weight: Double(id % 13))
        }
    }

    static func expected(_ pets: [ListedPet], species: Set<String>, after: (name: String, id: Int64)? = nil) -> [ListedPet] {
        pets.filter { species.contains($0.species) }
            .filter { pet in after.map { utf8Less($0.name, pet.name) || ($0.name == pet.name && $0.id < pet.id) } ?? true }
            .sorted { utf8Less($0.name, $1.name) || ($0.name == $1.name && $0.id < $1.id) }
    }

    /// The plan of `request`, or nil from an engine that does not explain its plans (the
    /// default of ``ReadTransaction/explain(_:analyze:)``).
    static func plan(_ pets: Controller<ListedPet, ListedPet>, _ request: Request<ListedPet>, analyze: Bool = false) async throws -> QueryPlan? {
        do {
            return try await pets.explain(request, analyze: analyze)
        } catch let error as DepotError where error.code == .backend {
            return nil
        }
    }

    /// Checks that a plan that reads an index reads the (species, name) one.
    ///
    /// Whether a backend uses an index, and whether it still sorts, is a matter of speed,
    /// not of what it answers: the backends' own tests check their plans (PostgreSQL's on
    /// analyzed tables, since its planner chooses by statistics autovacuum gathers, and may
    /// rightly scan or sort a small table it just filled). Here, a plan must only name the
    /// index that fits when it says it reads one.
    static func expectIndexPlan(_ plan: QueryPlan?, _ what: String, file: String = #fileID, line: Int = #line) throws {
        guard let plan, plan.usesIndex else { return }
        let read: [[IndexDescription.Component]] =
            switch plan.access {
            case .index(let components): [components]
            case .union(let lists): lists
            case .scan, .primaryKey: []
            }
        try expect(
            read.allSatisfy { $0.prefix(2).map(\.attribute) == ["species", "name"] },
            "\(what) reads the (species, name) index: \(plan)", file: file, line: line)
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("a list page reads its composite index in order and stops at the limit") { store in
            let pets = Controller<ListedPet, ListedPet>(store: store)
            let all = Self.pets(count: 2_000)
            try await pets.save(all)
            let request = Request<ListedPet>(\.species == "s3").sorted(by: \.name).limit(20)
            try await expectEqual(pets.fetchAll(request), Array(Self.expected(all, species: ["s3"]).prefix(20)), "the page")
            try await expectEqual(pets.count(Request(\.species == "s3")), all.filter { $0.species == "s3" }.count, "the count")
            if let plan = try await Self.plan(pets, request, analyze: true) {
                try expect(plan.entity == "ListedPet", "the plan names its entity: \(plan)")
                try Self.expectIndexPlan(plan, "the page")
            }
        },
        ConformanceCheck("a cursor walk over a composite index returns every record once, in order") { store in
            let pets = Controller<ListedPet, ListedPet>(store: store)
            let all = Self.pets(count: 600)
            try await pets.save(all)
            let set = pets.results(Request(\.species == "s5").sorted(by: \.name))
            var walked: [ListedPet] = []
            var cursor: PageCursor?
            repeat {
                let page = try await set.page(size: 7, after: cursor)
                walked += page.items
                cursor = page.next
            } while cursor != nil && walked.count < all.count
            try expectEqual(walked, Self.expected(all, species: ["s5"]), "the walk")
            // A page from the middle starts right after the cursor's record.
            let middle = walked[30]
            let after = Request<ListedPet>((\.species == "s5") && ((\.name > middle.name) || ((\.name == middle.name) && (\.id > middle.id))))
                .sorted(by: \.name).limit(5)
            try await expectEqual(pets.fetchAll(after), Array(walked[31..<36]), "the records after the cursor")
            try Self.expectIndexPlan(try await Self.plan(pets, after), "the page after a cursor")
        },
        ConformanceCheck("IN on an index's first attribute, ranges on the next, and descending sorts answer alike") { store in
            let pets = Controller<ListedPet, ListedPet>(store: store)
            let all = Self.pets(count: 500)
            try await pets.save(all)
            let both = Request<ListedPet>(.in(\.species, ["s1", "s6"])).sorted(by: \.species).sorted(by: \.name)
            let expectedBoth = all.filter { ["s1", "s6"].contains($0.species) }
                .sorted { ($0.species, $0.name, $0.id) < ($1.species, $1.name, $1.id) }
            try await expectEqual(pets.fetchAll(both), expectedBoth, "IN, sorted by species then name")
            let range = Request<ListedPet>((\.species == "s2") && (\.name >= "n5") && (\.name < "n8")).sorted(by: \.name)
            let expectedRange = Self.expected(all, species: ["s2"]).filter { !utf8Less($0.name, "n5") && utf8Less($0.name, "n8") }
            try await expectEqual(pets.fetchAll(range), expectedRange, "a range on the second attribute")
            try Self.expectIndexPlan(try await Self.plan(pets, range), "the range")
            let descending = Request<ListedPet>(\.species == "s4").sorted(by: \.name, ascending: false)
            let expectedDescending = all.filter { $0.species == "s4" }
                .sorted { utf8Less($1.name, $0.name) || ($0.name == $1.name && $0.id < $1.id) }
            try await expectEqual(pets.fetchAll(descending), expectedDescending, "descending by name, ties by key")
        },
        ConformanceCheck("a composite index added to an entity with records is built from them") { store in
            let before = Controller<UnindexedPet, UnindexedPet>(store: store)
            let all = Self.pets(count: 300)
            try await before.save(all.map { UnindexedPet(id: $0.id, species: $0.species, name: $0.name, weight: $0.weight) })
            let pets = Controller<ListedPet, ListedPet>(store: store)
            let request = Request<ListedPet>(\.species == "s7").sorted(by: \.name).limit(10)
            try await expectEqual(pets.fetchAll(request), Array(Self.expected(all, species: ["s7"]).prefix(10)), "the page after the index is added")
            try Self.expectIndexPlan(try await Self.plan(pets, request), "the page over the new index")
            try await pets.save(ListedPet(id: 10_000, species: "s7", name: "", weight: 1))
            try await expectEqual(pets.fetchAll(request).first?.id, 10_000, "a record written afterwards is in the index")
        },
        ConformanceCheck("an index a declaration stops naming is kept and maintained until a step drops it") { store in
            let pets = Controller<ListedPet, ListedPet>(store: store)
            var all = Self.pets(count: 200)
            try await pets.save(all)
            // The previous version of the application, which never declared the index, opens
            // the store beside the new one (a rolling deploy) and writes.
            let previous = Controller<UnindexedPet, UnindexedPet>(store: store)
            let kept = try await store.register(UnindexedPet.self).first?.entity.indexes
            try expectEqual(kept, [.index("species", "name")], "the store keeps the undeclared index")
            try await previous.save(UnindexedPet(id: 5_000, species: "s3", name: "", weight: 1))
            try await previous.update(UnindexedPet(id: 3, species: "s3", name: "a", weight: 2))
            _ = try await previous.delete(id: 11)
            all.append(ListedPet(id: 5_000, species: "s3", name: "", weight: 1))
            all.removeAll { $0.id == 3 || $0.id == 11 }
            all.append(ListedPet(id: 3, species: "s3", name: "a", weight: 2))
            let request = Request<ListedPet>(\.species == "s3").sorted(by: \.name).limit(10)
            try await expectEqual(pets.fetchAll(request), Array(Self.expected(all, species: ["s3"]).prefix(10)), "the page after writes that did not declare the index")
            try Self.expectIndexPlan(try await Self.plan(pets, request), "the page over the kept index")
            try await expectEqual(pets.count(Request(\.species == "s3")), Self.expected(all, species: ["s3"]).count, "the count over the kept index")

            var migrator = Migrator()
            migrator.dropIndex("drop-listed-pet-species-name", .index("species", "name"), from: "ListedPet")
            let plan = try await migrator.plan(store, registering: UnindexedPet.self)
            try expectEqual(plan.pending, ["drop-listed-pet-species-name"], "the plan's pending step")
            try expect(plan.automaticChanges.contains { $0.hasPrefix("keep the index ListedPet (species, name)") }, "the plan names the kept index: \(plan.automaticChanges)")
            try await expectEqual(migrator.migrate(store, registering: UnindexedPet.self), ["drop-listed-pet-species-name"], "the step runs")
            let dropped = try await store.register(UnindexedPet.self).first?.entity.indexes
            try expectEqual(dropped, [], "the step drops the index")
            let plain = Request<UnindexedPet>(\.species == "s3").sorted(by: \.name).limit(10)
            try await expectEqual(previous.fetchAll(plain).map(\.id), Self.expected(all, species: ["s3"]).prefix(10).map(\.id), "the page without the index")

            var missing = migrator
            missing.dropIndex("drop-again", .index("species", "name"), from: "ListedPet")
            try await expectError(.invalidSchema, "a step that drops an index the store does not have") {
                try await missing.migrate(store, registering: UnindexedPet.self)
            }
        },
    ]
}
