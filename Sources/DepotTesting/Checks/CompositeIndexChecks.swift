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
            // Every backend refuses with the same error: the one DepotError words for a
            // unique composite index, naming the refused record's values.
            let entity = try await pets.registeredEntity().entity
            guard let index = entity.indexes.first(where: \.isUnique) else {
                throw ConformanceFailure(message: "OwnedPet's handle lists no unique index: \(entity.indexes)", file: #fileID, line: #line)
            }
            func expectRefusal(_ what: String, of pet: OwnedPet, _ write: () async throws -> Void) async throws {
                var row = Row()
                try pet.encode(into: &row)
                let expected = DepotError.duplicateUnique(entity: entity, index: index, row: row)
                do {
                    try await write()
                    throw ConformanceFailure(message: "\(what): expected \(expected), got success", file: #fileID, line: #line)
                } catch let error as DepotError {
                    try expectEqual(error.code, expected.code, "\(what): the code of \(error)")
                    try expectEqual(error.message, expected.message, "\(what): the message")
                }
            }
            let taken = OwnedPet(id: 6, owner: 1, name: "Rex")
            try await expectRefusal("insert with taken values", of: taken) { try await pets.insert(taken) }
            let updated = OwnedPet(id: 2, owner: 1, name: "Rex")
            try await expectRefusal("update to taken values", of: updated) { try await pets.update(updated) }
            let saved = OwnedPet(id: 7, owner: 2, name: "Rex")
            try await expectRefusal("save of a new record with taken values", of: saved) { try await pets.save(saved) }
            // A record keeps its own values.
            try await pets.save(OwnedPet(id: 1, owner: 1, name: "Rex"))
            // A write that catches the refusal goes on, and the rest of it commits.
            let refusedInside = OwnedPet(id: 8, owner: 2, name: "Rex")
            let refusal = try await pets.operation { context -> DepotError? in
                var refusal: DepotError?
                do {
                    try context.insert(refusedInside)
                } catch let error as DepotError {
                    refusal = error
                }
                try context.update(OwnedPet(id: 3, owner: 2, name: "Max"))
                try context.insert(OwnedPet(id: 9, owner: 2, name: "Rex"))
                return refusal
            }
            var refusedRow = Row()
            try refusedInside.encode(into: &refusedRow)
            let expectedInside = DepotError.duplicateUnique(entity: entity, index: index, row: refusedRow)
            try expectEqual(refusal?.code, expectedInside.code, "the refused insert inside a write: \(String(describing: refusal))")
            try expectEqual(refusal?.message, expectedInside.message, "the refused insert inside a write")
            try await expectEqual(pets.fetchAll().map(\.id), [1, 2, 3, 4, 5, 9], "records after the refusals")
            try await expectEqual(pets.fetchOne(id: 2)?.name, "Ada", "the refused update changed nothing")
        }
    ]
}
