import DepotCore
import Foundation

/// `OR` across indexed attributes: a backend may read each alternative through its own
/// index (LMDB's union plan, SQLite's multi-index OR, PostgreSQL's BitmapOr) or scan; either
/// way every matching record comes once, in the request's order, paged and counted alike.
enum UnionChecks {
    @Record(name: "OwnedPet")
    struct OwnedPet: Hashable {
        var id: Int64
        @Stored(.indexed) var species: String
        @Stored(.indexed) var owner: Int
        var name: String
    }

    static func pets(count: Int) -> [OwnedPet] {
        (1...count).map { id in
            OwnedPet(id: Int64(id), species: "s\(id % 12)", owner: id % 50, name: "n\((id * 7919) % 97)")
        }
    }

    /// The records `include` selects, in primary key order.
    static func matching(_ pets: [OwnedPet], _ include: (OwnedPet) -> Bool) -> [OwnedPet] {
        pets.filter(include).sorted { $0.id < $1.id }
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("an OR across indexed attributes and the primary key returns each match once") { store in
            let pets = Controller<OwnedPet, OwnedPet>(store: store)
            let all = Self.pets(count: 1_200)
            try await pets.save(all)
            let cases: [(String, Request<OwnedPet>, (OwnedPet) -> Bool)] = [
                ("two indexed attributes", Request(\.species == "s3" || \.owner == 7), { $0.species == "s3" || $0.owner == 7 }),
                // ids ≡ 3 (mod 300) match both alternatives.
                ("overlapping alternatives", Request(\.species == "s3" || \.owner == 3), { $0.species == "s3" || $0.owner == 3 }),
                ("an index and the primary key", Request(\.species == "s5" || \.id == 7 || \.id > 1_190), {
                    $0.species == "s5" || $0.id == 7 || $0.id > 1_190
                }),
                ("an unindexed alternative", Request(\.species == "s3" || \.name == "n5"), { $0.species == "s3" || $0.name == "n5" }),
                ("IN, a range and a prefix", Request(Condition<OwnedPet>.in(\.owner, [1, 2]) || \.species >= "s9" || Condition<OwnedPet>.hasPrefix(\.species, "s1")), {
                    [1, 2].contains($0.owner) || !utf8Less($0.species, "s9") || $0.species.hasPrefix("s1")
                }),
                ("an OR inside an AND", Request((\.species == "s1" || \.owner == 2) && \.name > "n5"), {
                    ($0.species == "s1" || $0.owner == 2) && utf8Less("n5", $0.name)
                }),
                ("alternatives that match nothing", Request(\.species == "none" || \.owner == -1), { _ in false }),
            ]
            for (what, request, include) in cases {
                let expected = Self.matching(all, include)
                try await expectEqual(pets.fetchAll(request), expected, what)
                try await expectEqual(pets.count(request), expected.count, "\(what): the count")
                try await expectEqual(pets.results(request).isEmpty(), expected.isEmpty, "\(what): whether any matches")
                try await expectEqual(pets.fetchFirst(request), expected.first, "\(what): the first")
                let byName = expected.sorted { utf8Less($0.name, $1.name) || ($0.name == $1.name && $0.id < $1.id) }
                let page = request.sorted(by: \.name, ascending: true).offset(3).limit(10)
                try await expectEqual(pets.fetchAll(page), Array(byName.dropFirst(3).prefix(10)), "\(what): a page by name")
                let backwards = request.sorted(by: \.id, ascending: false).offset(2).limit(7)
                try await expectEqual(pets.fetchAll(backwards), Array(expected.reversed().dropFirst(2).prefix(7)), "\(what): a page by id, descending")
                try await expectEqual(pets.count(request.offset(5).limit(4)), min(4, max(0, expected.count - 5)), "\(what): a count within a window")
            }
            // Deleting through an OR removes each match once, and nothing else.
            let doomed = Request<OwnedPet>(\.species == "s7" || \.owner == 7)
            let removed = Self.matching(all) { $0.species == "s7" || $0.owner == 7 }
            try await expectEqual(pets.deleteAll(where: doomed), removed.count, "the records deleted")
            try await expectEqual(pets.count(), all.count - removed.count, "the records left")
            try await expectEqual(pets.fetchAll(doomed), [], "no match is left")
        }
    ]
}
