import DepotCore
import Foundation

/// Sorting, tie-breaking, limit and offset, counting.
enum OrderChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("default order is by primary key") { store in
            let cats = try await seededCats(store)
            try await expectEqual(cats.fetchAll().map(\.id), Array(1...10), "ids")
            let accounts = Accounts(store: store)
            let keys = ["b", "B", "a", "é", "e\u{301}", "", "ab", "Z"]
            try await accounts.insert(keys.enumerated().map { Account(id: $0.element, owner: "o\($0.offset)") })
            try await expectEqual(accounts.fetchAll().map(\.id), keys.sorted(by: utf8Less), "string keys by UTF-8 bytes")
        },
        ConformanceCheck("string order is by UTF-8 bytes") { store in
            let cats = try await seededCats(store)
            let byName = try await cats.fetchAll(Request().sorted(by: \.name)).map(\.name)
            try expectEqual(byName, fixtureCats.map(\.name).sorted(by: utf8Less), "ascending")
            let descending = try await cats.fetchAll(Request().sorted(by: \.name, ascending: false)).map(\.name)
            try expectEqual(descending, fixtureCats.map(\.name).sorted(by: utf8Less).reversed(), "descending")
        },
        ConformanceCheck("several sort keys, ties broken by primary key") { store in
            let cats = try await seededCats(store)
            let request = Request<CatRecord>().sorted(by: \.age, ascending: false).sorted(by: \.weight)
            let expected = fixtureCats.sorted { a, b in
                if a.age != b.age { return a.age > b.age }
                if a.weight != b.weight { return a.weight < b.weight }
                return a.id < b.id
            }.map(\.id)
            try await expectEqual(cats.fetchAll(request).map(\.id), expected, "age desc, weight asc, id")
            let tiesOnly = try await cats.fetchAll(Request().sorted(by: \.weight)).map(\.id)
            try expectEqual(tiesOnly, [10, 4, 7, 2, 3, 5, 6, 9, 8, 1], "weight ties by id")
            let descendingTies = try await cats.fetchAll(Request().sorted(by: \.weight, ascending: false)).map(\.id)
            try expectEqual(descendingTies, [1, 8, 9, 3, 5, 6, 2, 7, 4, 10], "descending weight, ties by id ascending")
        },
        ConformanceCheck("nil sorts first ascending and last descending; doubles by total order") { store in
            let samples = Samples(store: store)
            try await samples.save([
                Sample(id: 1, double: .nan, optionalInt: 3), Sample(id: 2, double: .infinity),
                Sample(id: 3, double: -.infinity, optionalInt: -3), Sample(id: 4, double: 0, optionalInt: 0),
                Sample(id: 5, double: -1.5), Sample(id: 6, double: 1e300, optionalInt: 3),
            ])
            func ids(_ request: Request<Sample>) async throws -> [Int64] { try await samples.fetchAll(request).map(\.id) }
            try await expectEqual(ids(Request().sorted(by: \.optionalInt)), [2, 5, 3, 4, 1, 6], "optional ascending")
            try await expectEqual(ids(Request().sorted(by: \.optionalInt, ascending: false)), [1, 6, 4, 3, 2, 5], "optional descending")
            try await expectEqual(ids(Request().sorted(by: \.double)), [3, 5, 4, 6, 2, 1], "doubles with NaN last")
            try await expectEqual(ids(Request(\.double > 1e301)), [1, 2], "NaN is greater than infinity")
            try await expectEqual(ids(Request(\.double == .nan)), [1], "NaN equals NaN")
        },
        ConformanceCheck("descending sort on an indexed attribute with ties at its largest value") { store in
            let cats = try await seededCats(store)
            try await cats.save([Cat(id: 11, name: "Old", weight: 1, age: 15), Cat(id: 12, name: "Older", weight: 1, age: 15)])
            let byAge = try await cats.fetchAll(Request().sorted(by: \.age, ascending: false)).map(\.id)
            try expectEqual(byAge, [8, 11, 12, 1, 6, 2, 3, 10, 5, 9, 7, 4], "age descending, ties by id")
            let oldest = try await cats.fetchAll(Request(\.age >= 12).sorted(by: \.age, ascending: false).limit(4)).map(\.id)
            try expectEqual(oldest, [8, 11, 12, 1], "filtered, descending, limited")
        },
        ConformanceCheck("limit and offset") { store in
            let cats = try await seededCats(store)
            let byAge = Request<CatRecord>().sorted(by: \.age)
            try await expectEqual(cats.fetchAll(byAge.limit(3)).map(\.id), [4, 7, 5], "limit 3")
            try await expectEqual(cats.fetchAll(byAge.offset(2).limit(3)).map(\.id), [5, 9, 2], "offset 2 limit 3")
            try await expectEqual(cats.fetchAll(byAge.offset(8)).map(\.id), [6, 8], "offset without limit")
            try await expectEqual(cats.fetchAll(byAge.offset(50)).map(\.id), [], "offset past the end")
            try await expectEqual(cats.fetchAll(byAge.limit(0)).map(\.id), [], "limit 0")
            try await expectEqual(cats.fetchAll(Request(\.age > 5).limit(2)).map(\.id), [1, 2], "filter and limit")
            try await expectEqual(cats.fetchFirst(byAge.offset(1))?.id, 7, "fetchFirst honours offset")
            try await expectEqual(cats.fetchFirst(Request(\.age > 100)), nil, "fetchFirst of nothing")
            try await expectError(.invalidPredicate, "negative limit") { try await cats.fetchAll(byAge.limit(-1)) }
            try await expectError(.invalidPredicate, "negative offset") { try await cats.fetchAll(byAge.offset(-1)) }
        },
        ConformanceCheck("count runs the request without fetching") { store in
            let cats = try await seededCats(store)
            try await expectEqual(cats.count(), 10, "count all")
            try await expectEqual(cats.count(Request(\.age == 7)), 3, "count age == 7")
            try await expectEqual(cats.count(Request(\.age == 7).limit(2)), 2, "count with limit")
            try await expectEqual(cats.count(Request().offset(8)), 2, "count with offset")
            try await expectEqual(cats.count(Request().offset(20)), 0, "count with offset past the end")
            try await expectEqual(cats.count(Request(\.age > 100)), 0, "count of nothing")
        },
        ConformanceCheck("time-ordered UUID keys read back in the order they were made") { store in
            let tickets = Controller<Ticket, Ticket>(store: store)
            let made = (0..<200).map { Ticket(id: .timeOrdered(), number: $0) }
            try await tickets.save(made.reversed())
            try await expectEqual(tickets.fetchAll().map(\.number), Array(0..<200), "default order, by key")
            let newest = try await tickets.fetchAll(Request().sorted(by: \.id, ascending: false).limit(20))
            try expectEqual(newest.map(\.number), Array((180..<200).reversed()), "the newest first")
            try await expectEqual(tickets.count(Request(\.id > made[149].id)), 50, "made after the 150th")
        },
    ]

    /// A record keyed by a UUID the application makes.
    @Record(name: "Ticket")
    struct Ticket: Hashable {
        var id: UUID
        var number: Int
    }
}
