// The Relationships article's example (Sources/DepotCore/Documentation.docc/Relationships.md),
// kept here so CI compiles and runs it on every backend. Keep the two in step.
import Depot
import Foundation
import Testing

// --- article example begins ---
@Record
struct Dog: Equatable {
    var id: Int64
    var name: String
}

@Record
struct Walk: Equatable {
    var id: Int64
    @Stored(.references(Dog.self, onDelete: .cascade)) var dogID: Int64
    var position: Int  // the walk's place in its dog's list
    var minutes: Int
}

extension Dog {
    /// The inverse of `Walk.dogID`, declared once so requests can name it.
    static let walks = ToMany<Dog, Walk>(\.dogID).sorted(by: \.position)
}
// --- article example ends ---

@Suite("The Relationships article")
struct RelationshipsArticleTests {
    @Test(arguments: ["sqlite://DIR/dogs.sqlite", "lmdb://DIR/dogs", "memory:"])
    func exampleRunsOnEveryBackend(template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-article-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await openStore(url: template.replacingOccurrences(of: "DIR", with: directory.path))

        let dogs = Controller<Dog, Dog>(store: store)
        let walks = Controller<Walk, Walk>(store: store)
        try await dogs.save(Dog(id: 1, name: "Rex"))
        try await walks.save([
            Walk(id: 10, dogID: 1, position: 0, minutes: 30),
            Walk(id: 11, dogID: 1, position: 1, minutes: 45),
        ])

        let rex = try await dogs.fetchAll(Request(\.name == "Rex"), including: Dog.walks)
        // The relationships example of ToMany's documentation.
        let withWalks = try await dogs.fetchAll(Request(.hasPrefix(\.name, "R")), including: Dog.walks)
        #expect(withWalks.map(\.object.name) == ["Rex"] && withWalks.first?.related.count == 2)
        #expect(rex.map(\.object.name) == ["Rex"])
        #expect(rex.first?.related.map(\.id) == [10, 11])
        let perDog = try await dogs.countRelated(Dog.walks)
        #expect(perDog == [1: 2])
        let walkers = try await dogs.fetchAll(having: Dog.walks, where: \.minutes > 40)
        #expect(walkers.map(\.id) == [1])
        let idle = try await dogs.fetchAll(lacking: Dog.walks)
        #expect(idle.isEmpty)

        try await dogs.delete(id: 1)  // walks 10 and 11 go too
        #expect(try await walks.count() == 0)

        // Integrity: two entity types written in one operation, the child first.
        let walkEntity = try await walks.registeredEntity()
        try await dogs.operation { dogs in
            let walks = Context<Walk, Walk>(dogs.transaction, entity: walkEntity)
            try walks.save(Walk(id: 12, dogID: 2, position: 0, minutes: 20))  // its dog does not exist yet
            try dogs.save(Dog(id: 2, name: "Fido"))  // it does when the write ends
        }
        #expect(try await dogs.fetchAll(including: Dog.walks).map { [$0.object.id] + $0.related.map(\.id) } == [[2, 12]])
        await #expect(throws: DepotError.self) {
            try await dogs.operation { dogs in
                try Context<Walk, Walk>(dogs.transaction, entity: walkEntity).save(Walk(id: 13, dogID: 3, position: 0, minutes: 5))
            }
        }
        try await dogs.delete(id: 2)
        #expect(try await walks.count() == 0)
        await #expect(throws: DepotError.self) { try await walks.save(Walk(id: 12, dogID: 1, position: 0, minutes: 5)) }
        await store.close()
    }
}
