public import DepotCore

/// A record with a unique index over two attributes: an owner names each of its pets once.
/// The name is optional, so that a record with nil in a component can be checked.
@Record(indexes: [.unique("owner", "name")])
public struct OwnedPet: Hashable {
    /// The primary key.
    public var id: Int64
    /// The owner's id, the index's first component.
    public var owner: Int64
    /// The pet's name, the index's second component.
    public var name: String?

    /// A pet with the given values.
    public init(id: Int64, owner: Int64, name: String?) {
        self.id = id
        self.owner = owner
        self.name = name
    }
}

typealias OwnedPets = Controller<OwnedPet, OwnedPet>

/// Declared indexes over several attributes, as every backend must honour them.
enum CompositeIndexChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("a unique composite index refuses a second record with the same values, nil excepted") { store in
            let pets = OwnedPets(store: store)
            // Equal in one component only, or nil in one: no conflict.
            try await pets.insert([
                OwnedPet(id: 1, owner: 1, name: "Rex"), OwnedPet(id: 2, owner: 1, name: "Ada"), OwnedPet(id: 3, owner: 2, name: "Rex"),
                OwnedPet(id: 4, owner: 1, name: nil), OwnedPet(id: 5, owner: 1, name: nil),
            ])
            try await expectError(.duplicateKey, "insert with taken values") {
                try await pets.insert(OwnedPet(id: 6, owner: 1, name: "Rex"))
            }
            try await expectError(.duplicateKey, "update to taken values") {
                try await pets.update(OwnedPet(id: 2, owner: 1, name: "Rex"))
            }
            try await expectError(.duplicateKey, "save of a new record with taken values") {
                try await pets.save(OwnedPet(id: 7, owner: 2, name: "Rex"))
            }
            // A record keeps its own values.
            try await pets.save(OwnedPet(id: 1, owner: 1, name: "Rex"))
            // A write that catches the refusal goes on, and the rest of it commits.
            let code = try await pets.operation { context -> String? in
                var code: String?
                do {
                    try context.insert(OwnedPet(id: 8, owner: 2, name: "Rex"))
                } catch let error as DepotError {
                    code = error.code.name
                }
                try context.update(OwnedPet(id: 3, owner: 2, name: "Max"))
                try context.insert(OwnedPet(id: 9, owner: 2, name: "Rex"))
                return code
            }
            try expectEqual(code, "duplicateKey", "the refused insert inside a write")
            try await expectEqual(pets.fetchAll().map(\.id), [1, 2, 3, 4, 5, 9], "records after the refusals")
            try await expectEqual(pets.fetchOne(id: 2)?.name, "Ada", "the refused update changed nothing")
        }
    ]
}
