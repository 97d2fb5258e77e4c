import DepotCore
import Foundation
import Testing

@Record(indexes: [.index("species", "name"), .unique("owner", .descending("born"))])
struct IndexedPet: Hashable {
    var id: Int64
    var species: String
    @Stored(name: "pet_name") var name: String
    var owner: Int64
    var born: Double
}

struct HandIndexedPet: StoredObject, Hashable {
    var id: Int64
    var species: String
    var name: String
    var weight: Double

    static let entity = Entity<HandIndexedPet>(
        "HandPet", primaryKey: \.id, indexes: [.index(\.species, \.name), .unique(.descending(\.weight))]
    ) {
        Attribute("id", \.id)
        Attribute("species", \.species)
        Attribute("name", \.name)
        Attribute("weight", \.weight)
    }

    init(row: RecordReader<Self>) throws {
        (id, species, name, weight) = (try row[\.id], try row[\.species], try row[\.name], try row[\.weight])
    }
}

@Suite("Composite index declarations")
struct IndexDescriptionTests {
    @Test func theMacroDeclaresIndexesByStoredName() throws {
        let entity = IndexedPet.entity.description
        #expect(entity.indexes == [
            .index("species", "pet_name"),
            .unique("owner", .descending("born")),
        ])
        try IndexedPet.entity.validate()
    }

    @Test func keyPathsNameTheirAttributes() throws {
        #expect(HandIndexedPet.entity.description.indexes == [
            IndexDescription([.init("species"), .init("name")]),
            IndexDescription([.init("weight", descending: true)], unique: true),
        ])
        try HandIndexedPet.entity.validate()
    }

    @Test func aKeyPathThatIsNoAttributeIsRefused() {
        struct Loose: StoredObject, Hashable {
            var id: Int64
            var name: String
            var note: String
            static let entity = Entity<Loose>("Loose", primaryKey: \.id, indexes: [.index(\.name, \.note)]) {
                Attribute("id", \.id)
                Attribute("name", \.name)
            }
            init(row: RecordReader<Self>) throws { (id, name, note) = (try row[\.id], try row[\.name], "") }
        }
        #expect { try Loose.entity.validate() } throws: { ($0 as? DepotError)?.code == .invalidSchema }
    }

    @Test func namesAreDistinctForDistinctComponentLists() {
        let a = IndexDescription.index("a_b", "c")
        let b = IndexDescription.index("a", "b_c")
        let c = IndexDescription.index("a_b", .descending("c"))
        #expect(Set([a.name, b.name, c.name]).count == 3)
        #expect(IndexDescription.unique("a_b", "c").name == a.name)
    }

    @Test(arguments: [
        ("no attributes", IndexDescription([])),
        ("unknown attribute", IndexDescription.index("name", "colour")),
        ("an attribute twice", IndexDescription.index("name", .descending("name"))),
        ("too many", IndexDescription((0..<9).map { _ in "name" })),
    ])
    func invalidIndexesAreRefused(_ label: String, _ index: IndexDescription) {
        let entity = EntityDescription(
            name: "Pet", attributes: [.init(name: "id", type: .int64), .init(name: "name", type: .string)],
            primaryKeyIndex: 0, indexes: [index])
        #expect(throws: DepotError.self, "\(label)") { try entity.validate() }
    }

    @Test func theSameIndexTwiceIsRefused() {
        let entity = EntityDescription(
            name: "Pet", attributes: [.init(name: "id", type: .int64), .init(name: "name", type: .string)],
            primaryKeyIndex: 0, indexes: [.index("name"), .unique("NAME")])
        #expect { try entity.validate() } throws: { ($0 as? DepotError)?.code == .invalidSchema }
    }

    @Test func aDescriptionWithoutIndexesIsStoredAsBefore() throws {
        let plain = EntityDescription(name: "Pet", attributes: [.init(name: "id", type: .int64)], primaryKeyIndex: 0)
        let json = try JSONEncoder().encode(plain)
        #expect(!String(decoding: json, as: UTF8.self).contains("indexes"))
        // What versions before indexes wrote decodes, with none.
        let old = #"{"name":"Pet","attributes":[{"name":"id","type":"int64","isOptional":false,"isIndexed":false,"isUnique":false}],"primaryKeyIndex":0}"#
        #expect(try JSONDecoder().decode(EntityDescription.self, from: Data(old.utf8)) == plain)
        let indexed = IndexedPet.entity.description
        #expect(try JSONDecoder().decode(EntityDescription.self, from: JSONEncoder().encode(indexed)) == indexed)
    }

    @Test func aMigrationAddsAndDropsIndexes() throws {
        var stored = IndexedPet.entity.description
        stored.indexes = [.index("species"), .index("owner", .descending("born"))]
        let migration = try SchemaMigration.plan(from: stored, to: IndexedPet.entity.description)
        #expect(!migration.isEmpty)
        #expect(migration.addedCompositeIndexes == IndexedPet.entity.description.indexes)
        #expect(migration.droppedCompositeIndexes == stored.indexes)
        #expect(try SchemaMigration.plan(from: IndexedPet.entity.description, to: IndexedPet.entity.description).isEmpty)
    }

    @Test func renamingAndDroppingAnAttributeCarryItsIndexes() async throws {
        let store = MemoryStore()
        _ = try await store.register([IndexedPet.entity.description])
        var migrator = Migrator()
        migrator.renameAttribute("rename", in: "IndexedPet", from: "pet_name", to: "title")
        migrator.dropAttribute("drop", "born", from: "IndexedPet")
        _ = try await migrator.migrate(store, registering: [])
        let stored = try #require(await store.storedEntities().first { $0.name == "IndexedPet" }?.entity)
        #expect(stored.indexes == [.index("species", "title")])
        await store.close()
    }
}
