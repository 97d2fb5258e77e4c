import DepotCore
import Foundation

/// `Codable` values stored as JSON text: round trips through the macro and by hand,
/// equality predicates, and errors (never traps, never skipped records) for text that does
/// not decode and for values that do not encode.
enum CodableChecks {
    struct Address: Codable, Hashable, JSONAttribute {
        var street: String
        var city: String
        var floor: Int?
        var geo: [Double]
    }

    @Record(name: "Owner")
    struct Owner: Hashable {
        var id: Int64
        var address: Address
        var tags: [String]
        var scores: [String: Int]
        var previous: Address?
    }

    /// The same entity by hand, reading by key path.
    struct OwnerByHand: StoredObject, Hashable {
        var id: Int64
        var address: Address
        var tags: [String]
        var scores: [String: Int]
        var previous: Address?

        static let entity = Entity<OwnerByHand>("Owner", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("address", \.address)
            Attribute("tags", \.tags)
            Attribute("scores", \.scores)
            Attribute("previous", \.previous)
        }

        init(id: Int64, address: Address, tags: [String], scores: [String: Int], previous: Address?) {
            (self.id, self.address, self.tags, self.scores, self.previous) = (id, address, tags, scores, previous)
        }

        init(row: RecordReader<Self>) throws {
            id = try row[\.id]
            address = try row[\.address]
            tags = try row[\.tags]
            scores = try row[\.scores]
            previous = try row[\.previous]
        }
    }

    /// The same entity seen as plain text: how another program (or an older type) wrote it.
    @Record(name: "Owner")
    struct OwnerText: Hashable {
        var id: Int64
        var address: String
        var tags: String
        var scores: String
        var previous: String?
    }

    /// A value whose encoding always fails.
    struct Unencodable: Codable, Hashable, JSONAttribute {
        struct Refused: Error {}
        init() {}
        init(from decoder: any Decoder) throws {}
        func encode(to encoder: any Encoder) throws { throw Refused() }
    }

    @Record(name: "Fussy")
    struct Fussy: Hashable {
        var id: Int64
        var value: Unencodable
    }

    /// A later version of `Fussy` that adds an optional attribute whose default cannot be
    /// stored (were it taken as nil, every existing record would silently get nil).
    struct FussyWithDefault: StoredObject, Hashable {
        var id: Int64
        var value: Unencodable
        var extra: Unencodable?

        static let entity = Entity<FussyWithDefault>("Fussy", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("value", \.value)
            Attribute("extra", \.extra, default: Unencodable())
        }

        init(row: RecordReader<Self>) throws {
            id = try row[\.id]
            value = try row[\.value]
            extra = try row[\.extra]
        }
    }

    static let home = Address(street: "1 Rue de la Paix", city: "Paris", floor: nil, geo: [48.8686, 2.3314])
    static let away = Address(street: "10 Downing St", city: "London", floor: 2, geo: [.infinity, -0.0, .nan])
    static let owners = [
        Owner(id: 1, address: home, tags: ["a", "b"], scores: ["x": 1, "y": 2], previous: nil),
        Owner(id: 2, address: away, tags: [], scores: [:], previous: home),
        Owner(id: 3, address: home, tags: ["b"], scores: ["y": 2, "x": 1], previous: away),
    ]

    static func json(_ value: some JSONAttribute) -> String {
        if case .string(let text) = value.value { return text }
        return ""
    }

    /// Owners compared through their stored JSON text, so NaN equals NaN as in the store.
    static func same(_ a: [Owner], _ b: [Owner]) -> Bool {
        func text(_ owners: [Owner]) -> [String] {
            owners.map { owner in
                let previous = owner.previous.map { json($0) } ?? "nil"
                return "\(owner.id) \(json(owner.address)) \(owner.tags) \(owner.scores.sorted { $0.key < $1.key }) \(previous)"
            }
        }
        return text(a) == text(b)
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("Codable attributes round-trip as JSON, through the macro and by hand") { store in
            let macro = Controller<Owner, Owner>(store: store)
            try await macro.save(owners)
            let back = try await macro.fetchAll()
            try expect(same(back, owners), "every owner back through the macro: \(back)")
            let byHand = try await Controller<OwnerByHand, OwnerByHand>(store: store).fetchAll()
            try expect(same(byHand.map { Owner(id: $0.id, address: $0.address, tags: $0.tags, scores: $0.scores, previous: $0.previous) }, owners), "every owner back by hand")
            let text = try await Controller<OwnerText, OwnerText>(store: store).fetchOne(id: 1)
            try expectEqual(text?.tags, "[\"a\",\"b\"]", "stored as canonical JSON text")
            try expectEqual(text?.scores, "{\"x\":1,\"y\":2}", "keys sorted")
            try expectEqual(text?.previous, nil, "a nil JSON value is nil")
        },
        ConformanceCheck("Codable attributes match by equality, whatever the order keys were inserted in") { store in
            let owners = Controller<Owner, Owner>(store: store)
            try await owners.save(Self.owners)
            try await expectEqual(owners.fetchAll(Request(\.address == home).sorted(by: \.id)).map(\.id), [1, 3], "struct equality")
            var reordered: [String: Int] = [:]
            reordered["y"] = 2
            reordered["x"] = 1
            try await expectEqual(owners.fetchAll(Request(\.scores == reordered).sorted(by: \.id)).map(\.id), [1, 3], "dictionary equality")
            try await expectEqual(owners.fetchAll(Request(\.tags != ["b"]).sorted(by: \.id)).map(\.id), [1, 2], "array inequality")
            try await expectEqual(owners.fetchAll(Request(\.previous == nil)).map(\.id), [1], "== nil")
            try await expectEqual(owners.fetchAll(Request(.in(\.previous, [away, home])).sorted(by: \.id)).map(\.id), [2, 3], "in")
        },
        ConformanceCheck("ordering, text matching and sorting on a Codable attribute are refused as invalidPredicate") { store in
            let owners = Controller<Owner, Owner>(store: store)
            try await owners.save(Self.owners)
            try await expectError(.invalidPredicate, "<") { try await owners.fetchAll(Request(\.address < home)) }
            try await expectError(.invalidPredicate, ">= on an optional") { try await owners.fetchAll(Request(\.previous >= home)) }
            try await expectError(.invalidPredicate, "hasPrefix") { try await owners.fetchAll(Request(.hasPrefix(\.tags, "["))) }
            try await expectError(.invalidPredicate, "contains") { try await owners.count(Request(.contains(\.scores, "x"))) }
            try await expectError(.invalidPredicate, "sorted(by:)") { try await owners.fetchAll(Request<Owner>().sorted(by: \.address)) }
            // The same by attribute name, nested inside other conditions.
            try await expectError(.invalidPredicate, "< by name") { try await owners.fetchAll(Request(.where("address", .less, "x"))) }
            try await expectError(.invalidPredicate, "hasPrefix by name under ! and ||") {
                try await owners.fetchAll(Request(!(.where("id", equalTo: Int64(1)) || .where("tags", hasPrefix: "["))))
            }
            try await expectError(.invalidPredicate, "contains by name") { try await owners.count(Request(.where("scores", contains: "x"))) }
            try await expectError(.invalidPredicate, "sorted(by:) by name") { try await owners.fetchAll(Request<Owner>().sorted(by: "previous")) }
            try await expectEqual(owners.count(Request(.where("tags", .equal, ["b"]))), 1, "equality by name still works")
            try await expectEqual(owners.count(Request(\.address != home)), 1, "!= still works")
        },
        ConformanceCheck("stored text that is not JSON of the type is a conversion error, never a trap or a skipped record") { store in
            let text = Controller<OwnerText, OwnerText>(store: store)
            try await text.save([
                OwnerText(id: 1, address: "{\"street\":\"x\"}", tags: "[]", scores: "{}"),
                OwnerText(id: 2, address: "not json", tags: "[]", scores: "{}"),
                OwnerText(id: 3, address: json(home), tags: "[1,2]", scores: "{}"),
            ])
            let owners = Controller<Owner, Owner>(store: store)
            for id: Int64 in 1...3 {
                try await expectError(.conversionFailed, "owner \(id)") { try await owners.fetchOne(id: id) }
            }
            try await expectError(.conversionFailed, "fetchAll") { try await owners.fetchAll() }
        },
        ConformanceCheck("a Codable value that does not encode fails the write and writes nothing") { store in
            let fussy = Controller<Fussy, Fussy>(store: store)
            try await expectError(.conversionFailed, "save") { try await fussy.save(Fussy(id: 1, value: Unencodable())) }
            try await expectEqual(fussy.count(), 0, "nothing written")
            try await expectError(.invalidPredicate, "a predicate on it") { try await fussy.fetchAll(Request(\.value == Unencodable())) }
        },
        ConformanceCheck("a default value that does not encode is refused at registration, not stored as nil") { store in
            try await expectError(.invalidSchema, "registering the declaration") {
                try await Controller<FussyWithDefault, FussyWithDefault>(store: store).count()
            }
            try await expectError(.invalidSchema, "registering it through the store") { try await store.register(FussyWithDefault.self) }
            try expectEqual(FussyWithDefault.entity.description.attributes[2].defaultValue, nil, "no nil default stands in for the value")
        },
    ]
}
