// The README's example, kept here so CI compiles and runs it. Keep the two in step.
import Depot
import Foundation
import Testing

// --- README example begins ---
/// The application's value: an immutable struct.
struct Pet: Sendable, Equatable, ManagedConvertible {
    let id: Int64
    let name: String
    let age: Int

    func toManaged() -> PetRecord { PetRecord(id: id, name: name, age: age) }
}

/// How a Pet is stored.
struct PetRecord: ManagedRecord, ObjectConvertible {
    var id: Int64
    var name: String
    var age: Int

    static let entity = Entity<PetRecord>("Pet", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("name", \.name)
        Attribute("age", \.age, indexed: true)
    }

    init(id: Int64, name: String, age: Int) { (self.id, self.name, self.age) = (id, name, age) }
    init(row: Row) throws { (id, name, age) = (try row[0], try row[1], try row[2]) }
    func toObject() -> Pet { Pet(id: id, name: name, age: age) }
}

func readmeExample(url: String) async throws -> [Pet] {
    let pets = Controller<Pet, PetRecord>(store: try await openStore(url: url))
    try await pets.save([Pet(id: 1, name: "Tom", age: 3), Pet(id: 2, name: "Felix", age: 12)])
    return try await pets.fetchAll(Request(\.age > 10).sorted(by: \.name))
}
// --- README example ends ---

@Suite("README example")
struct ReadmeExampleTests {
    @Test(arguments: ["sqlite://DIR/pets.sqlite", "lmdb://DIR/pets", "memory:"])
    func exampleRunsOnEveryBackend(template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-readme-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let old = try await readmeExample(url: template.replacingOccurrences(of: "DIR", with: directory.path))
        #expect(old == [Pet(id: 2, name: "Felix", age: 12)])
    }
}
