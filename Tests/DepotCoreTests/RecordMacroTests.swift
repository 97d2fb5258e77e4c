import DepotCore
import DepotTesting
import Foundation
import Testing

// Records declared here, in a module other than DepotCore, as an application would.

/// The one-line record: a complete record, its own object.
@Record struct Pet { var id: Int64; var name: String; var age: Int }

/// Every option at once.
@Record(name: "Shelter")
struct ShelterRecord {
    @PrimaryKey @Stored(name: "code") var shelterCode: String
    @Stored(.unique, name: "title") var name: String
    @Stored(.indexed) var capacity: Int
    var lives: Int = 9
    var mood: Mood = .calm
    @NotStored var visits = 0
    @NotStored var note: String?
    var label: String { "\(shelterCode): \(name)" }
    static let region = "north"
}

/// Enums by hand: a hand-written entity reads and writes them like any attribute.
struct HandWrittenCritter: StoredObject, Hashable {
    var id: Int64
    var mood: Mood
    var size: Size?

    static let entity = Entity<HandWrittenCritter>("Critter", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("mood", \.mood, indexed: true)
        Attribute("size", \.size)
    }

    init(id: Int64, mood: Mood, size: Size?) { (self.id, self.mood, self.size) = (id, mood, size) }
    init(row: RecordReader<Self>) throws { (id, mood, size) = (try row[\.id], try row[\.mood], try row[\.size]) }
}

@Suite("@Record at run time")
struct RecordMacroTests {
    @Test func entityFollowsDeclarationOrderAndOptions() throws {
        let shelter = ShelterRecord.entity.description
        try ShelterRecord.entity.validate()
        #expect(shelter.name == "Shelter")
        #expect(shelter.attributes.map(\.name) == ["code", "title", "capacity", "lives", "mood"])
        #expect(shelter.attributes.map(\.type) == [.string, .string, .int64, .int64, .string])
        #expect(shelter.primaryKeyIndex == 0)
        #expect(shelter.attributes.map(\.isUnique) == [false, true, false, false, false])
        #expect(shelter.attributes.map(\.isIndexed) == [false, true, true, false, false])
        #expect(shelter.attributes.map(\.defaultValue) == [nil, nil, nil, .int(9), .string("calm")])
        #expect(ShelterRecord.entity.attributeName(for: \ShelterRecord.shelterCode) == "code")

        let pet = Pet.entity.description
        #expect(pet.name == "Pet")
        #expect(pet.attributes.map(\.name) == ["id", "name", "age"])
        #expect(pet.attributes.allSatisfy { !$0.isIndexed && $0.defaultValue == nil })
    }

    /// Names are found by key path equality, whatever the key path's object: one made anew
    /// on every use finds its name, and one that is not an attribute finds none.
    @Test func keyPathsResolveByEqualityWhateverTheirObject() {
        let root = \ShelterRecord.self
        for round in 0..<600 {
            let fresh: AnyKeyPath = round.isMultiple(of: 2) ? root.appending(path: \ShelterRecord.shelterCode) : root.appending(path: \ShelterRecord.lives)
            #expect(ShelterRecord.entity.attributeName(for: fresh) == (round.isMultiple(of: 2) ? "code" : "lives"))
        }
        #expect(ShelterRecord.entity.attributeName(for: \ShelterRecord.name) == "title")
        #expect(ShelterRecord.entity.attributeName(for: \ShelterRecord.name) == "title")
        #expect(ShelterRecord.entity.attributeName(for: \ShelterRecord.name.count) == nil)
        #expect(ShelterRecord.entity.attributeName(for: \ShelterRecord.name.count) == nil)
    }

    @Test func recordRoundTripsThroughARow() throws {
        var shelter = ShelterRecord(shelterCode: "N1", name: "North", capacity: 40, lives: 7, mood: .grumpy)
        shelter.visits = 3
        shelter.note = "busy"
        #expect(shelter.id == "N1")
        var row = Row()
        try shelter.encode(into: &row)
        #expect(row.allValues == [.string("N1"), .string("North"), .int(40), .int(7), .string("grumpy")])
        let read = try ShelterRecord(decoding: row)
        #expect(read.shelterCode == "N1" && read.name == "North" && read.capacity == 40 && read.lives == 7)
        #expect(read.mood == .grumpy)
        #expect(read.visits == 0 && read.note == nil, "not-stored properties take their initial values")
    }

    @Test func aMismatchedRowIsAnErrorNotATrap() {
        #expect(throws: DepotError.self) { try Pet(decoding: Row([.int(1), .int(2), .int(3)])) }
        #expect(throws: DepotError.self) { try Pet(decoding: Row([.int(1)])) }
        #expect(throws: DepotError.self) { try ShelterRecord(decoding: Row([.string("a"), .string("b"), .int(1), .int(2), .string("sulky")])) }
    }

    @Test func oneLineRecordWorksWithAController() async throws {
        let store = MemoryStore()
        let pets = Controller<Pet, Pet>(store: store)
        try await pets.save([Pet(id: 1, name: "Tom", age: 3), Pet(id: 2, name: "Felix", age: 12)])
        #expect(try await pets.fetchAll(Request(\.age > 10)).map(\.name) == ["Felix"])
        let shelters = Controller<ShelterRecord, ShelterRecord>(store: store)
        try await shelters.save(ShelterRecord(shelterCode: "S", name: "South", capacity: 3))
        #expect(try await shelters.fetchOne(id: "S")?.capacity == 3)
        await store.close()
    }

    @Test func enumsByHandAndByMacroShareOneSchema() async throws {
        let store = MemoryStore()
        let byHand = Controller<HandWrittenCritter, HandWrittenCritter>(store: store)
        try await byHand.save(HandWrittenCritter(id: 1, mood: .playful, size: .large))
        #expect(try await byHand.fetchAll(Request(\.mood == .playful)).map(\.id) == [1])
        #expect(try await byHand.fetchOne(id: 1)?.size == .large)
        #expect(Critter.entity.description.attributes.map(\.type) == [.int64, .string, .int64, .string])
        #expect(try Mood(value: .string("grumpy")) == .grumpy)
        #expect(try Size(value: .int(2)) == .medium)
        #expect(Size.large.value == .int(3))
        #expect(throws: DepotError.self) { try Mood(value: .string("sulky")) }
        #expect(throws: DepotError.self) { try Size(value: .int(9)) }
        #expect(throws: DepotError.self) { try Size(value: .string("small")) }
        await store.close()
    }
}
