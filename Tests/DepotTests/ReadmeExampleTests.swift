// The README's example, kept here so CI compiles and runs it. Keep the two in step.
import Depot
import Foundation
import Testing

// --- README example begins ---
@Record  // the entity, decoding and encoding are generated
struct Pet: Equatable {
    var id: Int64  // `id` is the primary key
    var name: String
    @Stored(.indexed) var age: Int
}

func readmeExample(url: String) async throws -> [Pet] {
    let pets = Controller<Pet, Pet>(store: try await openStore(url: "\(url)"))
    try await pets.save([Pet(id: 1, name: "Tom", age: 3), Pet(id: 2, name: "Felix", age: 12)])
    let old = try await pets.fetchAll(Request(\.age > 10).sorted(by: \.name))
    return old
}

// The paired form the README mentions: a domain type with no Depot in it, and its record.
struct Owner: Sendable, Equatable {
    let id: Int64
    let name: String
}

@Record(name: "Owner")
struct OwnerRecord: ObjectConvertible {
    var id: Int64
    var name: String
    func toObject() -> Owner { Owner(id: id, name: name) }
}

extension Owner: ManagedConvertible {
    func toManaged() -> OwnerRecord { OwnerRecord(id: id, name: name) }
}
// --- README example ends ---

@Suite("README example")
struct ReadmeExampleTests {
    @Test(arguments: ["sqlite://DIR/pets.sqlite", "lmdb://DIR/pets", "memory:"])
    func exampleRunsOnEveryBackend(template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-readme-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let old = try await readmeExample(url: template.replacingOccurrences(of: "DIR", with: directory.path))
        #expect(old == [Pet(id: 2, name: "Felix", age: 12)])
    }

    @Test func pairedFormWorks() async throws {
        let store = MemoryStore()
        let owners = Controller<Owner, OwnerRecord>(store: store)
        try await owners.save(Owner(id: 1, name: "Ada"))
        #expect(try await owners.fetchOne(id: 1) == Owner(id: 1, name: "Ada"))
        await store.close()
    }
}
