import DepotCore
import Testing

@Suite("Entity handles")
struct EntityHandleTests {
    static func description(_ name: String, extra: Bool = false) throws -> EntityDescription {
        var attributes = [AttributeDescription(name: "id", type: .int64), AttributeDescription(name: "name", type: .string)]
        if extra { attributes.append(AttributeDescription(name: "age", type: .int64, isOptional: true)) }
        return try EntityDescription(name: name, attributes: attributes, primaryKey: "id")
    }

    @Test("a handle carries the description it was registered with; equal descriptions are kept once")
    func handlesCarryInternedDescriptions() throws {
        var first = EntityRegistry<Int>()
        var second = EntityRegistry<Int>()
        let cat = try Self.description("Cat")
        let a = first.set(cat, 1)
        let b = second.set(try Self.description("Cat"), 2)
        #expect(a.entity == cat && b.entity == cat)
        #expect(a.interned === b.interned, "one interned copy per distinct description")
        #expect(a != b, "handles of two stores differ")
        let migrated = first.set(try Self.description("Cat", extra: true), 1)
        #expect(migrated.entity.attributes.count == 3)
        #expect(migrated.interned !== a.interned)
        #expect(a.entity.attributes.count == 2, "a handle keeps the description it was issued with")
        #expect(try first.resolve(migrated) == 1)
    }
}
