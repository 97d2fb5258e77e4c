import DepotCore
import Dispatch
import Testing

/// An entity's key path → attribute lookup, which remembers the key path objects it was
/// asked for and finds them by identity afterwards: its answers must stay those of the
/// declaration whatever the objects, however many, from however many threads.
@Suite("Key paths to attributes")
struct KeyPathLookupTests {
    struct Pet: StoredObject, Equatable {
        var id: Int64
        var name: String
        var species: String
        var weight: Double
        var size = Size(grams: 0)
        var unstored = 0

        struct Size: Equatable {
            var grams: Double
        }

        static let entity = Entity<Pet>("Pet", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("name", \.name)
            Attribute("species", \.species)
            Attribute("weight", \.weight)
            Attribute("grams", \.size.grams)
        }

        init(id: Int64, name: String, species: String, weight: Double) {
            self.id = id
            self.name = name
            self.species = species
            self.weight = weight
        }

        init(row: RecordReader<Self>) throws {
            id = try row[\.id]
            name = try row[\.name]
            species = try row[\.species]
            weight = try row[\.weight]
            size = Size(grams: try row[\.size.grams])
        }
    }

    @Test func literalKeyPathsAnswerTheSameEveryTime() {
        for _ in 0..<3 {
            #expect(Pet.entity.attributeName(for: \Pet.id) == "id")
            #expect(Pet.entity.attributeName(for: \Pet.name) == "name")
            #expect(Pet.entity.attributeName(for: \Pet.species) == "species")
            #expect(Pet.entity.attributeName(for: \Pet.weight) == "weight")
            #expect(Pet.entity.attributeName(for: \Pet.unstored) == nil)
        }
    }

    /// Key paths made afresh (each a new object, equal to the declared one) outnumber the
    /// ones the lookup remembers: each is still found, and so are the others afterwards.
    @Test func freshKeyPathsBeyondTheRememberedOnesAreFound() {
        let fresh: [AnyKeyPath] = (0..<40).map { _ in (\Pet.size).appending(path: \Pet.Size.grams) }
        #expect(Set(fresh.map { ObjectIdentifier($0) }).count == fresh.count, "each a distinct object")
        for _ in 0..<2 {
            for keyPath in fresh { #expect(Pet.entity.attributeName(for: keyPath) == "grams") }
        }
        #expect(Pet.entity.attributeName(for: \Pet.size.grams) == "grams")
        #expect(Pet.entity.attributeName(for: \Pet.name) == "name")
        #expect(Pet.entity.attributeName(for: \Pet.unstored) == nil)
        #expect(Pet.entity.attributeName(for: (\Pet.size).appending(path: \Pet.Size.grams)) == "grams")
    }

    /// Threads asking at once, some for key paths no thread has asked for yet: every
    /// answer is right (Thread Sanitizer checks the slots' hand-off in CI).
    @Test func concurrentLookupsAgree() {
        let failures = ManagedCounter()
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<200 {
                let pairs: [(AnyKeyPath, String?)] = [
                    (\Pet.id, "id"), (\Pet.name, "name"), (\Pet.unstored, nil),
                    (\Pet.species, "species"), ((\Pet.size).appending(path: \Pet.Size.grams), "grams"),
                    (thread.isMultiple(of: 2) ? \Pet.weight : \Pet.name, thread.isMultiple(of: 2) ? "weight" : "name"),
                ]
                for (keyPath, name) in pairs where Pet.entity.attributeName(for: keyPath) != name {
                    failures.add(round)
                }
            }
        }
        #expect(failures.count == 0)
    }

    /// A hand-written record reads its attributes by key path, through the same lookup.
    @Test func recordsReadByKeyPathDecode() async throws {
        let store = MemoryStore()
        let pets = Controller<Pet, Pet>(store: store)
        let all = (1...50).map { Pet(id: Int64($0), name: "pet \($0)", species: $0.isMultiple(of: 3) ? "cat" : "dog", weight: Double($0) / 4) }.map { pet in
            var pet = pet
            pet.size = Pet.Size(grams: pet.weight * 1000)
            return pet
        }
        try await pets.save(all)
        #expect(try await pets.fetchAll() == all)
        #expect(try await pets.fetchAll(Request(\.species == "cat").sorted(by: \.weight, ascending: false)) == all.filter { $0.species == "cat" }.reversed())
        await store.close()
    }
}

/// A counter many threads add to.
private final class ManagedCounter: @unchecked Sendable {
    private let lock = DispatchQueue(label: "counter")
    private var value = 0
    func add(_: Int) { lock.sync { value += 1 } }
    var count: Int { lock.sync { value } }
}
