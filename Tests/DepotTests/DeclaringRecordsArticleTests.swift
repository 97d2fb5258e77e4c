// The "Declaring records" article's examples (Sources/DepotCore/Documentation.docc/
// DeclaringRecords.md), each in a namespace of its own (they reuse the names Cat and
// CatRecord), compiled and run on a memory store. Keep the two in step:
// DocumentationExampleTests checks that every line of each example is here.
import Depot
import Foundation
import Testing

enum ArticleFirstRecord {
    @Record
    struct Cat {
        var id: Int64
        var name: String
        var age: Int
    }

    static func run(_ store: any Store) async throws -> Int {
        let cats = Controller<Cat, Cat>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", age: 3))
        return try await cats.count()
    }
}

enum ArticleAttributeOptions {
    @Record(name: "Cat")  // stored entity name; the type name by default
    struct CatRecord {
        @PrimaryKey var code: String  // the key, when it is not named `id`
        @Stored(.indexed) var name: String  // an index, for fast filters and sorts
        @Stored(.unique, name: "chip") var microchip: String?  // unique (implies an index), stored as "chip"
        var lives: Int = 9  // the default existing records get when `lives` is added
        @NotStored var selected = false  // not stored: records read from the store get `false`
        var label: String { "\(code) \(name)" }  // computed: not stored
    }
}

enum ArticleIndexes {
    @Record(indexes: [.index("species", "name"), .unique("ownerID", .descending("born"))])
    struct Pet {
        var id: Int64
        var species: String
        var name: String
        var ownerID: Int64
        var born: Date
    }

    static func run(_ store: any Store) async throws -> [String] {
        let pets = Controller<Pet, Pet>(store: store)
        let born = Date(timeIntervalSinceReferenceDate: 0)
        try await pets.save([
            Pet(id: 1, species: "cat", name: "Tom", ownerID: 1, born: born),
            Pet(id: 2, species: "dog", name: "Rex", ownerID: 1, born: born.addingTimeInterval(1)),
            Pet(id: 3, species: "cat", name: "Ada", ownerID: 2, born: born),
        ])
        let page = try await pets.fetchAll(Request(\.species == "cat").sorted(by: \.name).limit(20))
        return page.map(\.name)
    }
}

enum ArticleEnums {
    enum Mood: String, AttributeValue { case calm, playful, grumpy }

    @Record
    struct Cat {
        var id: Int64
        @Stored(.indexed) var mood: Mood
        var formerMood: Mood?
    }

    static func run(_ store: any Store) async throws -> [Int64] {
        let cats = Controller<Cat, Cat>(store: store)
        try await cats.save([Cat(id: 1, mood: .calm, formerMood: nil), Cat(id: 2, mood: .grumpy, formerMood: .playful)])
        let grumpy = try await cats.fetchAll(Request(\.mood == .grumpy).sorted(by: \.mood))
        return grumpy.map(\.id)
    }
}

enum ArticleJSONAttributes {
    struct Address: Codable, Hashable, JSONAttribute {
        var street: String
        var city: String
    }

    @Record
    struct Owner {
        var id: Int64
        var address: Address
        var tags: [String]
        var scores: [String: Int]
        var previous: Address?
    }

    static func run(_ store: any Store) async throws -> [Int64] {
        let owners = Controller<Owner, Owner>(store: store)
        try await owners.save(Owner(id: 1, address: Address(street: "1 Rue de la Paix", city: "Paris"), tags: ["a"], scores: ["x": 1], previous: nil))
        let parisians = try await owners.fetchAll(Request(\.address == Address(street: "1 Rue de la Paix", city: "Paris")))
        return parisians.map(\.id)
    }
}

enum ArticleHandWritten {
    struct Cat: Sendable, Equatable {
        var id: Int64
        var name: String
        var nickname: String?
        var age: Int
    }

    struct CatRecord: ManagedRecord, ObjectConvertible {
        var id: Int64
        var name: String
        var nickname: String?
        var age: Int

        static let entity = Entity<CatRecord>("Cat", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("name", \.name, indexed: true)
            Attribute("nickname", \.nickname, unique: true)
            Attribute("age", \.age, default: 0)
        }

        init(row: RecordReader<Self>) throws {
            id = try row[\.id]; name = try row[\.name]; nickname = try row[\.nickname]; age = try row[\.age]
        }

        func toObject() -> Cat { Cat(id: id, name: name, nickname: nickname, age: age) }

        init(id: Int64, name: String, nickname: String?, age: Int) {
            self.id = id
            self.name = name
            self.nickname = nickname
            self.age = age
        }
    }

    static func run(_ store: any Store) async throws -> Cat? {
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", nickname: "T", age: 3))
        return try await cats.fetchOne(id: 1)
    }
}

extension ArticleHandWritten.Cat: ManagedConvertible {
    func toManaged() -> ArticleHandWritten.CatRecord { .init(id: id, name: name, nickname: nickname, age: age) }
}

enum ArticleServerKeys {
    @Record
    struct Owner {
        var id: UUID
        var name: String
    }

    @Record
    struct Pet {
        var id: UUID
        @Stored(.references(ArticleServerKeys.Owner.self)) var ownerID: UUID
        var name: String
    }

    struct PetInput {
        var name: String
    }

    /// Two pets made one after the other come back in that order, by key.
    static func run(_ store: any Store) async throws -> [String] {
        let owner = Owner(id: .timeOrdered(), name: "Ann")
        try await Controller<Owner, Owner>(store: store).save(owner)
        let pets = Controller<Pet, Pet>(store: store)
        for input in [PetInput(name: "Tom"), PetInput(name: "Ada")] {
            let pet = Pet(id: .timeOrdered(), ownerID: owner.id, name: input.name)
            try await pets.save(pet)
        }
        return try await pets.fetchAll().map(\.name)
    }
}

@Suite("The Declaring records article")
struct DeclaringRecordsArticleTests {
    @Test func examplesRun() async throws {
        let store = MemoryStore()
        #expect(try await ArticleFirstRecord.run(store) == 1)
        await store.close()
        let pets = MemoryStore()
        #expect(try await ArticleIndexes.run(pets) == ["Ada", "Tom"])
        await pets.close()
        let moods = MemoryStore()
        #expect(try await ArticleEnums.run(moods) == [2])
        await moods.close()
        let owners = MemoryStore()
        #expect(try await ArticleJSONAttributes.run(owners) == [1])
        await owners.close()
        let handWritten = MemoryStore()
        #expect(try await ArticleHandWritten.run(handWritten) == ArticleHandWritten.Cat(id: 1, name: "Tom", nickname: "T", age: 3))
        await handWritten.close()
        let keyed = MemoryStore()
        #expect(try await ArticleServerKeys.run(keyed) == ["Tom", "Ada"])
        await keyed.close()
        let names = ArticleAttributeOptions.CatRecord.entity.description.attributes.map(\.name)
        #expect(names.contains("chip") && names.contains("lives") && !names.contains("selected") && !names.contains("label"), "\(names)")
    }
}
