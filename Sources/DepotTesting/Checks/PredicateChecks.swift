import DepotCore
import Foundation

/// Every predicate operator, nil semantics, dynamic predicates, hostile strings.
enum PredicateChecks {
    static func ids(_ cats: Cats, _ request: Request<CatRecord>) async throws -> [Int64] {
        try await cats.fetchAll(request).map(\.id)
    }

    /// The expected ids, computed here in plain Swift (ordered by id).
    static func expected(_ include: (Cat) -> Bool) -> [Int64] {
        fixtureCats.filter(include).map(\.id).sorted()
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("comparison operators on integers, doubles and strings") { store in
            let cats = try await seededCats(store)
            try await expectEqual(ids(cats, Request(\.age == 7)), expected { $0.age == 7 }, "age == 7")
            try await expectEqual(ids(cats, Request(\.age != 7)), expected { $0.age != 7 }, "age != 7")
            try await expectEqual(ids(cats, Request(\.age < 7)), expected { $0.age < 7 }, "age < 7")
            try await expectEqual(ids(cats, Request(\.age <= 7)), expected { $0.age <= 7 }, "age <= 7")
            try await expectEqual(ids(cats, Request(\.age > 7)), expected { $0.age > 7 }, "age > 7")
            try await expectEqual(ids(cats, Request(\.age >= 7)), expected { $0.age >= 7 }, "age >= 7")
            try await expectEqual(ids(cats, Request(\.weight > 4.5)), expected { $0.weight > 4.5 }, "weight > 4.5")
            try await expectEqual(ids(cats, Request(\.weight <= -1.5)), expected { $0.weight <= -1.5 }, "weight <= -1.5")
            try await expectEqual(ids(cats, Request(\.name == "Tom")), [5], "name == Tom is case-sensitive")
            try await expectEqual(ids(cats, Request(\.name > "Tom")), expected { utf8Less("Tom", $0.name) }, "name > Tom by bytes")
            try await expectEqual(ids(cats, Request(\.name < "a")), expected { utf8Less($0.name, "a") }, "name < a by bytes")
            try await expectEqual(ids(cats, Request(\.id >= 9)), [9, 10], "primary key range")
        },
        ConformanceCheck("in, notIn, hasPrefix and contains") { store in
            let cats = try await seededCats(store)
            try await expectEqual(ids(cats, Request(.in(\.age, [3, 12]))), expected { [3, 12].contains($0.age) }, "age in [3, 12]")
            try await expectEqual(ids(cats, Request(.in(\.age, [Int]()))), [], "in []")
            try await expectEqual(ids(cats, Request(.notIn(\.age, [3, 12]))), expected { ![3, 12].contains($0.age) }, "age notIn [3, 12]")
            try await expectEqual(ids(cats, Request(.notIn(\.age, [Int]()))), expected { _ in true }, "notIn []")
            try await expectEqual(ids(cats, Request(.in(\.id, [Int64(1), 2, 99]))), [1, 2], "id in list")
            try await expectEqual(ids(cats, Request(.hasPrefix(\.name, "Tom"))), [5, 6], "hasPrefix Tom")
            try await expectEqual(ids(cats, Request(.hasPrefix(\.name, "t"))), [9], "hasPrefix is case-sensitive")
            try await expectEqual(ids(cats, Request(.hasPrefix(\.name, ""))), expected { _ in true }, "hasPrefix empty")
            try await expectEqual(ids(cats, Request(.contains(\.name, "om"))), [5, 6, 9], "contains om")
            try await expectEqual(ids(cats, Request(.contains(\.name, "clai"))), [7], "contains after non-ASCII")
            try await expectEqual(ids(cats, Request(.contains(\.name, "É"))), [7], "contains non-ASCII")
            try await expectEqual(ids(cats, Request(.contains(\.name, "e\u{301}"))), [], "contains is byte-exact")
            try await expectEqual(ids(cats, Request(.contains(\.name, ""))), expected { _ in true }, "contains empty")
        },
        ConformanceCheck("and, or, not and chained filters") { store in
            let cats = try await seededCats(store)
            try await expectEqual(ids(cats, Request(\.age == 7 && \.weight > 3.5)), [3], "and")
            try await expectEqual(ids(cats, Request(\.age == 1 || \.name == "Zed")), [3, 7], "or")
            try await expectEqual(ids(cats, Request(!(\.age >= 7))), expected { !($0.age >= 7) }, "not")
            let chained = Request<CatRecord>().filter(\.age == 7).filter(\.weight > 3.5)
            try await expectEqual(ids(cats, chained), [3], "chained filters AND together")
            let widened = Request<CatRecord>(\.age == 1).or(\.age == 15)
            try await expectEqual(ids(cats, widened), [7, 8], "or widens")
            let nested = Request<CatRecord>((\.age == 3 || \.age == 12) && !(.hasPrefix(\.name, "T")))
            try await expectEqual(ids(cats, nested), [1, 9], "nested")
            try await expectEqual(ids(cats, Request(.all)), expected { _ in true }, "all")
            try await expectEqual(ids(cats, Request(.none)), [], "none")
        },
        ConformanceCheck("nil semantics: == nil is 'is nil'; other comparisons never match nil") { store in
            let samples = Samples(store: store)
            try await samples.save([
                Sample(id: 1, optionalInt: 1, optionalString: "a"), Sample(id: 2, optionalInt: 5, optionalString: "b"),
                Sample(id: 3), Sample(id: 4, optionalInt: 10),
            ])
            func ids(_ p: Condition<Sample>) async throws -> [Int64] { try await samples.fetchAll(Request(p)).map(\.id) }
            try await expectEqual(ids(\.optionalInt == nil), [3], "== nil")
            try await expectEqual(ids(\.optionalInt != nil), [1, 2, 4], "!= nil")
            try await expectEqual(ids(.isNil(\.optionalString)), [3, 4], "isNil")
            try await expectEqual(ids(\.optionalInt > 3), [2, 4], "> 3 skips nil")
            try await expectEqual(ids(!(\.optionalInt > 3)), [1], "!(> 3) skips nil too")
            try await expectEqual(ids(\.optionalInt != 5), [1, 4], "!= 5 skips nil")
            try await expectEqual(ids(\.optionalInt < nil), [], "< nil never matches")
            try await expectEqual(ids(!(\.optionalInt < nil)), [], "!(< nil) never matches")
            try await expectEqual(ids(.notIn(\.optionalInt, [Int64(1)])), [2, 4], "notIn skips nil")
            try await expectEqual(ids(.in(\.optionalInt, [Int64(1), nil])), [1, 3], "in with nil matches nil")
            try await expectEqual(ids(!(.in(\.optionalInt, [Int64(1), nil]))), [2, 4], "not (in with nil)")
            try await expectEqual(ids(.hasPrefix(\.optionalString, "")), [1, 2], "hasPrefix skips nil")
            try await expectEqual(ids(\.optionalInt > 3 || \.optionalInt == nil), [2, 3, 4], "or with is-nil")
        },
        ConformanceCheck("dynamic predicates by attribute name are validated") { store in
            let cats = try await seededCats(store)
            try await expectEqual(ids(cats, Request(.where("name", equalTo: "Felix"))), [2], "where name == Felix")
            try await expectEqual(ids(cats, Request(.where("age", .greater, 10))), [1, 6, 8], "where age > 10")
            try await expectEqual(ids(cats, Request(.where("weight", .less, 1))), [4, 10], "integer value for a double attribute")
            try await expectEqual(ids(cats, Request<CatRecord>().filter("age", equalTo: 3)), [5, 9], "filter by name")
            try await expectEqual(ids(cats, Request(.where("age", in: [1, 15]))), [7, 8], "where in")
            try await expectError(.invalidPredicate, "unknown attribute") {
                try await cats.fetchAll(Request(.where("colour", equalTo: "red")))
            }
            try await expectError(.invalidPredicate, "wrong value type") {
                try await cats.fetchAll(Request(.where("age", equalTo: "three")))
            }
            try await expectError(.invalidPredicate, "hasPrefix on a number") {
                try await cats.fetchAll(Request(.where("age", hasPrefix: "1")))
            }
            try await expectError(.invalidPredicate, "unknown sort attribute") {
                try await cats.fetchAll(Request().sorted(by: "colour"))
            }
            try await expectError(.invalidPredicate, "count with unknown attribute") {
                try await cats.count(Request(.where("colour", equalTo: "red")))
            }
            try await expectError(.invalidPredicate, "deleteAll with unknown attribute") {
                try await cats.deleteAll(where: .where("colour", equalTo: "red"))
            }
            try await expectEqual(cats.count(), fixtureCats.count, "nothing deleted")
        },
        ConformanceCheck("hostile strings are values, never syntax") { store in
            let cats = Cats(store: store)
            let hostile = [
                "' OR 1=1 --", "\"; DROP TABLE Cat; --", "100%", "1000", "a_b", "axb", "%", "_", "\\", "a\0b", "O'Brien",
            ]
            try await cats.save(hostile.enumerated().map { Cat(id: Int64($0.offset + 1), name: $0.element, weight: 1, age: 1) })
            for (i, name) in hostile.enumerated() {
                try await expectEqual(ids(cats, Request(\.name == name)), [Int64(i + 1)], "== \(name.debugDescription)")
            }
            try await expectEqual(ids(cats, Request(.hasPrefix(\.name, "100%"))), [3], "hasPrefix with %")
            try await expectEqual(ids(cats, Request(.contains(\.name, "_"))), [5, 8], "contains _")
            try await expectEqual(ids(cats, Request(.contains(\.name, "%"))), [3, 7], "contains %")
            try await expectEqual(ids(cats, Request(.hasPrefix(\.name, "a\0"))), [10], "hasPrefix with NUL")
            try await expectEqual(ids(cats, Request(.contains(\.name, "\0b"))), [10], "contains with NUL")
            try await expectEqual(ids(cats, Request(.in(\.name, ["' OR 1=1 --", "zzz"]))), [1], "in with hostile")
            try await expectEqual(cats.count(), hostile.count, "every row still there")
        },
        ConformanceCheck("predicates over every attribute type") { store in
            let samples = Samples(store: store)
            let u1 = UUID(uuidString: "00000000-0000-0000-0000-000000000001")!
            let u2 = UUID(uuidString: "F0000000-0000-0000-0000-000000000000")!
            try await samples.save([
                Sample(id: 1, bool: true, data: Data([1]), date: Date(timeIntervalSince1970: -100), uuid: u1),
                Sample(id: 2, bool: false, data: Data([1, 0]), date: Date(timeIntervalSince1970: 100), uuid: u2),
                Sample(id: 3, bool: true, data: Data([2]), date: Date(timeIntervalSince1970: 0), uuid: u1),
            ])
            func ids(_ p: Condition<Sample>) async throws -> [Int64] { try await samples.fetchAll(Request(p)).map(\.id) }
            try await expectEqual(ids(\.bool == true), [1, 3], "bool")
            try await expectEqual(ids(\.bool > false), [1, 3], "bool order")
            try await expectEqual(ids(\.data > Data([1])), [2, 3], "data by bytes")
            try await expectEqual(ids(\.date < Date(timeIntervalSince1970: 0)), [1], "date before 1970")
            try await expectEqual(ids(\.uuid == u1), [1, 3], "uuid equality")
            try await expectEqual(ids(\.uuid > u1), [2], "uuid by bytes")
            try await expectEqual(ids(.in(\.date, [Date(timeIntervalSince1970: 100)])), [2], "date in")
        },
    ]
}
