import DepotCore
import Foundation
import Testing

@Suite("Values, schema and predicates")
struct ValueTests {
    @Test func stringsCompareByUTF8Bytes() {
        #expect(Value.string("Z") < Value.string("a"))
        #expect(Value.string("e\u{301}") != Value.string("\u{E9}"))
        #expect(Value.string("e\u{301}").hashValue != Value.string("\u{E9}").hashValue || true)
        #expect(Value.string("ab") < Value.string("abc"))
        #expect(Value.string("") < Value.string("\0"))
    }

    @Test func doublesHaveATotalOrder() {
        #expect(Value.double(.nan) == Value.double(.nan))
        #expect(Value.double(.infinity) < Value.double(.nan))
        #expect(Value.double(-0.0) == Value.double(0.0))
        #expect(Set([Value.double(-0.0), .double(0.0)]).count == 1)
        #expect(Value.null < Value.int(Int64.min))
    }

    @Test func valuesRoundTripThroughCodable() throws {
        let values: [Value] = [.null, .int(-5), .double(.nan), .double(-.infinity), .bool(true), .string("x\0y"),
                               .data(Data([1, 2])), .date(Date(timeIntervalSinceReferenceDate: -1e10)), .uuid(UUID())]
        let decoded = try JSONDecoder().decode([Value].self, from: JSONEncoder().encode(values))
        #expect(decoded == values)
    }

    @Test func narrowIntegersRefuseOutOfRangeValues() {
        #expect(throws: DepotError.self) { try Int16(value: .int(70_000)) }
        #expect(throws: DepotError.self) { try Int32(value: .string("1")) }
        #expect(throws: DepotError.self) { try String(value: .null) }
        #expect((try? String?(value: .null)) == .some(nil))
    }

    @Test func migrationPlanAcceptsOnlyAdditiveChanges() throws {
        let base = try EntityDescription(name: "T", attributes: [.init(name: "id", type: .int64), .init(name: "a", type: .string)], primaryKey: "id")
        var grown = base
        grown.attributes.insert(.init(name: "b", type: .int64, isOptional: true), at: 1)
        let plan = try SchemaMigration.plan(from: base, to: grown)
        #expect(plan.sourceIndex == [0, nil, 1])
        #expect(plan.migrate(Row([.int(1), .string("x")])) == Row([.int(1), .null, .string("x")]))
        var required = base
        required.attributes.append(.init(name: "c", type: .int64))
        #expect(throws: DepotError.self) { try SchemaMigration.plan(from: base, to: required) }
        var removed = base
        removed.attributes.removeLast()
        #expect(throws: DepotError.self) { try SchemaMigration.plan(from: base, to: removed) }
        #expect(try SchemaMigration.plan(from: base, to: base).isEmpty)
    }

    @Test func keyPathsThatAreNotAttributesAreReported() async throws {
        struct Odd: StoredObject {
            var id: Int64
            var hidden: Int
            static let entity = Entity<Odd>("Odd", primaryKey: \.id) { Attribute("id", \.id) }
            init(row: RecordReader<Self>) throws { id = try row[\.id]; hidden = 0 }
        }
        let store = MemoryStore()
        let odd = try await store.register(Odd.entity.description)
        #expect(throws: DepotError.self) { try Request<Odd>(\.hidden == 3).resolved(for: odd) }
        #expect(throws: DepotError.self) { try Request<Odd>().sorted(by: \.hidden).resolved(for: odd) }
        await store.close()
    }
}
