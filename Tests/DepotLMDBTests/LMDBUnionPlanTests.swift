import CLMDB
import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

/// The union plan: an `OR` whose alternatives all have key ranges reads each alternative's
/// ranges and each record once, when that costs less than the plan without it.
@Suite("LMDB union plans")
struct LMDBUnionPlanTests {
    static let readings = Reading.generate(2_000)

    static func components(_ names: String...) -> [IndexDescription.Component] {
        names.map { IndexDescription.Component($0) }
    }

    @Test("explain reports a union of the alternatives' indexes, and a scan when one has no range")
    func explainedUnions() async throws {
        let readings = Self.readings
        try await withStore { store, _ in
            let lmdb = Controller<Reading, Reading>(store: store)
            try await lmdb.save(readings)

            // sensor == "s3" holds about 100 records, count == 7 about 50: a union reads
            // about 150 entries, a lookup each, against 2,000 records scanned.
            let sensor = readings.filter { $0.sensor == "s3" }
            let seven = readings.filter { $0.count == 7 }
            let both = Set(sensor.map(\.id)).intersection(seven.map(\.id))
            #expect(!both.isEmpty, "some records match both alternatives")
            let union = try await lmdb.explain(Request(\.sensor == "s3" || \.count == 7), analyze: true)
            #expect(union.access == .union([Self.components("sensor"), Self.components("count")]), "\(union)")
            #expect(union.ranges == ["sensor == \"s3\"", "count == 7"], "\(union)")
            #expect(union.filtersAfterwards, "the whole filter is checked on every record")
            #expect(!union.sortsAfterwards, "records come in primary key order: \(union)")
            #expect(union.estimatedRows == sensor.count + seven.count, "the estimate is the alternatives' entries: \(union)")
            #expect(union.actualRows == sensor.count + seven.count - both.count, "a record in both is read once: \(union)")

            let withKey = try await lmdb.explain(Request(\.sensor == "s3" || \.id == 4 || Condition<Reading>.in(\.id, [Int64(11), 18])))
            #expect(withKey.access == .union([Self.components("sensor"), Self.components("id"), Self.components("id")]), "\(withKey)")
            #expect(withKey.ranges == ["sensor == \"s3\"", "id == 4", "id == 11", "id == 18"], "\(withKey)")

            let sorted = try await lmdb.explain(Request(\.sensor == "s3" || \.count == 7).sorted(by: \.note).limit(5))
            #expect(sorted.access == .union([Self.components("sensor"), Self.components("count")]), "\(sorted)")
            #expect(sorted.sortsAfterwards, "\(sorted)")

            let oneIndex = try await lmdb.explain(Request(\.count == 1 || \.count == 19 || \.count < -18))
            #expect(oneIndex.access == .index(Self.components("count")), "alternatives on one index read that index: \(oneIndex)")

            let unindexed = try await lmdb.explain(Request(\.sensor == "s3" || \.note == "n5"))
            #expect(unindexed.access == .scan, "an alternative without a range scans: \(unindexed)")

            // count > -19 holds nearly every record: its lookups cost more than a scan.
            let wide = try await lmdb.explain(Request(\.count > -19 || \.sensor == "s3"))
            #expect(wide.access == .scan, "a union dearer than a scan scans: \(wide)")

            // In key order with a limit, a scan stops after about 5 × 2,000 / 150 records.
            let page = try await lmdb.explain(Request(\.sensor == "s3" || \.count == 7).limit(5))
            #expect(page.access == .scan, "a short page in key order scans: \(page)")
            // About three matches: the union reads them, a scan would read most records.
            let rare = try await lmdb.explain(Request(\.at == Date(timeIntervalSinceReferenceDate: 0) || \.id == 4).limit(5))
            #expect(rare.access == .union([Self.components("at"), Self.components("id")]), "a page of rare matches reads the union: \(rare)")
        }
    }

    @Test("a count and an exact page read the union")
    func countsReadTheUnion() async throws {
        let readings = Self.readings
        try await withStore { store, _ in
            let lmdb = Controller<Reading, Reading>(store: store)
            try await lmdb.save(readings)
            let entity = try await lmdb.registeredEntity()
            let query = try Request<Reading>(\.sensor == "s3" || \.count == 7).resolved(for: entity)
            let plan = try await store.read { transaction in
                let t = try #require(transaction as? LMDBTransaction)
                return try t.plan(query, try t.handles(for: entity), needsOrder: false)
            }
            guard case .union(let alternatives) = plan.source else {
                Issue.record("a count reads the union: \(plan)")
                return
            }
            #expect(alternatives.count == 2 && !plan.exact && !plan.ordered)
            let expected = readings.filter { $0.sensor == "s3" || $0.count == 7 }
            #expect(try await lmdb.count(Request(\.sensor == "s3" || \.count == 7)) == expected.count)
            #expect(try await lmdb.count(Request(\.sensor == "s3" || \.count == 7).limit(3)) == 3)
            #expect(try await lmdb.results(Request(\.sensor == "zz" || \.count == 99)).isEmpty())
        }
    }

    @Test("union answers match the memory store in every order, page and count")
    func unionAnswers() async throws {
        let readings = Self.readings
        let predicates: [(String, Condition<Reading>)] = [
            ("two indexes", \.sensor == "s3" || \.count == 7),
            ("index and key", \.sensor == "s3" || \.id == 4 || \.id > 10_900),
            ("overlapping", \.sensor == "s3" || (\.sensor == "s3" && \.count == 7) || \.count == 7),
            ("unindexed alternative", \.sensor == "s3" || \.note == "n5"),
            ("nil and prefix", Condition<Reading>.isNil(\.value) && \.flag == true || Condition<Reading>.hasPrefix(\.sensor, "s12")),
            ("in and range", Condition<Reading>.in(\.count, [1, 2]) || \.at > Date(timeIntervalSinceReferenceDate: 240)),
            ("inside an and", (\.sensor == "s1" || \.count == 2) && \.note > "n5"),
            ("nothing", \.sensor == "zz" || \.count == 99),
        ]
        let orders: [(String, @Sendable (Request<Reading>) -> Request<Reading>)] = [
            ("key order", { $0 }),
            ("id desc, page", { $0.sorted(by: \.id, ascending: false).offset(2).limit(9) }),
            ("note, page", { $0.sorted(by: \.note).offset(3).limit(10) }),
            ("value desc", { $0.sorted(by: \.value, ascending: false) }),
            ("limit only", { $0.limit(4).offset(1) }),
        ]
        try await withStore { store, _ in
            let lmdb = Controller<Reading, Reading>(store: store)
            let memory = Controller<Reading, Reading>(store: MemoryStore())
            try await lmdb.save(readings)
            try await memory.save(readings)
            for (name, predicate) in predicates {
                for (orderName, order) in orders {
                    let request = order(Request(predicate))
                    let reference = try await memory.fetchAll(request).map(\.id)
                    #expect(try await lmdb.fetchAll(request).map(\.id) == reference, "\(name), \(orderName)")
                    #expect(try await lmdb.count(request) == reference.count, "count \(name), \(orderName)")
                    #expect(try await lmdb.fetchFirst(request)?.id == reference.first, "first \(name), \(orderName)")
                }
            }
            for (name, predicate) in predicates {
                #expect(try await lmdb.deleteAll(where: predicate) == memory.deleteAll(where: predicate), "delete \(name)")
            }
            #expect(try await lmdb.fetchAll().map(\.id) == memory.fetchAll().map(\.id), "the records left")
        }
    }
}
