// The "Indexes and plans" article's examples (Sources/DepotCore/Documentation.docc/
// IndexesAndPlans.md), compiled and run on every backend that runs without a server.
// DocumentationExampleTests checks that every line of each example is here.
import Depot
import Foundation
import Testing

enum ArticleIndexesAndPlans {
    @Record(indexes: [.index("species", "name")])
    struct Pet {
        var id: Int64
        var species: String
        var name: String
        var born: Date
    }

    static func run(_ store: any Store) async throws -> (page: [Pet], plan: QueryPlan, analyzed: QueryPlan) {
        let born = Date(timeIntervalSinceReferenceDate: 0)
        try await Controller<Pet, Pet>(store: store).save((1...200).map { Pet(id: Int64($0), species: ["cat", "dog", "eel"][$0 % 3], name: "p\($0 % 50)", born: born) })

        let pets = Controller<Pet, Pet>(store: store)
        let page = try await pets.fetchAll(Request(\.species == "cat").sorted(by: \.name).limit(20))
        let plan = try await pets.explain(Request(\.species == "cat").sorted(by: \.name).limit(20))
        // plan.access == .index([species, name]), plan.sortsAfterwards == false

        let analyzed = try await explainWithAnalyze(pets)
        return (page, plan, analyzed)
    }

    /// The step that drops the index once no server declares it.
    static func dropTheIndex(_ store: any Store) async throws -> [String] {
        var migrator = Migrator()
        migrator.dropIndex("drop-pet-species-name", .index("species", "name"), from: "Pet")
        try await migrator.migrate(store, registering: Pet.self)
        return try await migrator.plan(store, registering: Pet.self).applied
    }

    static func explainWithAnalyze(_ pets: Controller<Pet, Pet>) async throws -> QueryPlan {
        let plan = try await pets.explain(Request(\.species == "cat").sorted(by: \.name).limit(20), analyze: true)
        if plan.sortsAfterwards || !plan.usesIndex {
            print("the cat page reads more than it returns: \(plan)")
        }
        return plan
    }
}

@Suite("The Indexes and plans article")
struct IndexesArticleTests {
    @Test(arguments: ["memory:", "sqlite://DIR/pets.sqlite", "lmdb://DIR/pets"])
    func examplesRun(_ template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("indexes-article-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await openStore(url: template.replacingOccurrences(of: "DIR", with: directory.path))
        let (page, plan, analyzed) = try await ArticleIndexesAndPlans.run(store)
        // Pet still declares the index, so registering it after the step builds it again.
        #expect(try await ArticleIndexesAndPlans.dropTheIndex(store) == ["drop-pet-species-name"])
        await store.close()
        #expect(page.count == 20 && page.allSatisfy { $0.species == "cat" })
        #expect(page.map(\.name) == page.map(\.name).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        guard case .index(let components) = plan.access else {
            Issue.record("the page does not read an index: \(plan)")
            return
        }
        #expect(components.prefix(2).map(\.attribute) == ["species", "name"], "\(plan)")
        #expect(!plan.sortsAfterwards, "\(plan)")
        #expect((analyzed.actualRows ?? .max) <= 20, "\(analyzed)")
    }
}
