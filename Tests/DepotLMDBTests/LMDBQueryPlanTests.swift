import CLMDB
import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

/// A record with an index on an attribute of every orderable type, optional ones included,
/// so range scans meet nulls, NaN, signed zeros and infinities.
struct Reading: StoredObject, Hashable {
    var id: Int64
    var sensor: String
    var value: Double?
    var at: Date
    var tag: UUID?
    var flag: Bool
    var count: Int
    var note: String

    static let entity = Entity<Reading>("Reading", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("sensor", \.sensor, indexed: true)
        Attribute("value", \.value, indexed: true)
        Attribute("at", \.at, indexed: true)
        Attribute("tag", \.tag, indexed: true)
        Attribute("flag", \.flag, indexed: true)
        Attribute("count", \.count, indexed: true)
        Attribute("note", \.note)
    }

    init(id: Int64, sensor: String, value: Double?, at: Date, tag: UUID?, flag: Bool, count: Int, note: String) {
        (self.id, self.sensor, self.value, self.at, self.tag, self.flag, self.count, self.note) =
            (id, sensor, value, at, tag, flag, count, note)
    }

    init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        sensor = try row[\.sensor]
        value = try row[\.value]
        at = try row[\.at]
        tag = try row[\.tag]
        flag = try row[\.flag]
        count = try row[\.count]
        note = try row[\.note]
    }

    /// The stored values, compared with Depot's equality (NaN equals NaN).
    var row: Row {
        get throws {
            var row = Row()
            try encode(into: &row)
            return row
        }
    }

    static let tags = (1...4).map { UUID(uuidString: "0000000\($0)-0000-0000-0000-00000000000\($0)")! }

    static func generate(_ n: Int) -> [Reading] {
        var g = SplitMix64(seed: 99)
        let specials: [Double?] = [nil, .nan, -0.0, 0.0, .infinity, -.infinity, 1e300, -1e-300]
        return (0..<n).map { i in
            let r = g.next()
            let value: Double? = r % 5 == 0 ? specials[Int(r / 5 % UInt64(specials.count))] : Double(Int64(r % 2001) - 1000) / 1000
            return Reading(
                id: Int64(i) * 7 - 3000, sensor: "s\(r % 13)" + (r % 3 == 0 ? "x" : ""), value: value,
                at: Date(timeIntervalSinceReferenceDate: Double(Int64(r % 997) - 500) * 0.5),
                tag: r % 4 == 0 ? nil : tags[Int(r / 4 % 4)], flag: r % 2 == 0, count: Int(r % 40) - 20,
                note: "n\(r % 100)")
        }
    }
}

@Suite("LMDB query planning")
struct LMDBQueryPlanTests {
    static let date0 = Date(timeIntervalSinceReferenceDate: 0)

    /// Predicates that the planner turns into point lookups or ranges on the primary key or
    /// an index, alone and combined with residual conditions.
    static let predicates: [(String, Condition<Reading>)] = [
        ("sensor ==", \.sensor == "s3"),
        ("sensor >", \.sensor > "s5"),
        ("sensor range", \.sensor >= "s2" && \.sensor < "s4"),
        ("sensor prefix", .hasPrefix(\.sensor, "s1")),
        ("sensor prefix empty", .hasPrefix(\.sensor, "")),
        ("sensor in", .in(\.sensor, ["s1", "s9x", "zz"])),
        ("value >", \.value > 0.5),
        ("value <= -0", \.value <= -0.0),
        ("value == 0", \.value == 0.0),
        ("value == NaN", \.value == .nan),
        ("value > 1e299", \.value > 1e299),
        ("value < -inf", \.value < -.infinity),
        ("value == nil", \.value == nil),
        ("value in with nil", .in(\.value, [0.0, nil, .nan])),
        ("value window", \.value > -0.5 && \.value < 0.25),
        ("empty window", \.value > 0.5 && \.value < 0.25),
        ("at <", \.at < date0),
        ("at window", \.at >= Date(timeIntervalSinceReferenceDate: -10) && \.at <= Date(timeIntervalSinceReferenceDate: 30)),
        ("tag ==", \.tag == Reading.tags[1]),
        ("tag >", \.tag > Reading.tags[0]),
        ("tag nil", .isNil(\.tag)),
        ("tag not nil", \.tag != nil),
        ("flag", \.flag == true),
        ("count range", \.count >= -3 && \.count <= 4),
        ("count in", .in(\.count, [-20, 0, 19, 100])),
        ("count notIn", .notIn(\.count, [0, 1])),
        ("id range", \.id > 100 && \.id <= 2000),
        ("id in", .in(\.id, [Int64(-3000), 4, 11, 25, 6993])),
        ("id and index", \.id < 0 && \.count == 3),
        ("index and residual", \.sensor == "s3" && \.note > "n5"),
        ("two indexes", \.count > 10 && .hasPrefix(\.sensor, "s2")),
        ("or", \.count == 1 || \.sensor == "s7"),
        ("not", !(\.count > 0)),
        ("all", .all),
    ]

    static let orders: [(String, @Sendable (Request<Reading>) -> Request<Reading>)] = [
        ("key order", { $0 }),
        ("id desc", { $0.sorted(by: \.id, ascending: false) }),
        ("value asc", { $0.sorted(by: \.value) }),
        ("value desc, limit", { $0.sorted(by: \.value, ascending: false).offset(3).limit(17) }),
        ("sensor desc", { $0.sorted(by: \.sensor, ascending: false) }),
        ("count asc, offset", { $0.sorted(by: \.count).offset(40) }),
        ("at desc, limit", { $0.sorted(by: \.at, ascending: false).limit(25) }),
        ("tag then at", { $0.sorted(by: \.tag).sorted(by: \.at, ascending: false) }),
        ("limit only", { $0.limit(9).offset(2) }),
    ]

    /// Readings in the store (DEPOT_PLAN_RECORDS), fewer under Thread Sanitizer: every
    /// request below runs one after another, nothing concurrent for it to check (``TestScale``).
    /// At least 576, so that the ids the predicates name (4, 11, 25 and past 100) exist.
    static let rangeScanRecords = TestScale.size("DEPOT_PLAN_RECORDS", ci: 2_000, tsan: 700)

    @Test("index and key range scans return the same rows as a full scan")
    func rangeScansMatchFullScans() async throws {
        let readings = Reading.generate(Self.rangeScanRecords)
        try await withStore { store, _ in
            let lmdb = Controller<Reading, Reading>(store: store)
            let memory = Controller<Reading, Reading>(store: MemoryStore())
            try await lmdb.save(readings)
            try await memory.save(readings)
            for (name, predicate) in Self.predicates {
                for (orderName, order) in Self.orders {
                    let request = order(Request(predicate))
                    // `!!p` means p, but hides it from the planner: a full scan in Swift.
                    let scanned = order(Request(!(!predicate)))
                    let viaPlan = try await lmdb.fetchAll(request).map(\.id)
                    let viaScan = try await lmdb.fetchAll(scanned).map(\.id)
                    let reference = try await memory.fetchAll(request).map(\.id)
                    #expect(viaPlan == reference, "\(name), \(orderName)")
                    #expect(viaScan == reference, "\(name), \(orderName) (full scan)")
                    #expect(try await lmdb.count(request) == reference.count, "count \(name), \(orderName)")
                }
            }
            // The same after updates and deletes have moved index entries.
            try await lmdb.operation { context in
                for r in readings.prefix(300) {
                    var changed = r
                    changed.count = -r.count
                    changed.sensor = r.sensor + "u"
                    changed.value = r.value.map { -$0 }
                    try context.save(changed)
                }
            }
            try await memory.operation { context in
                for r in readings.prefix(300) {
                    var changed = r
                    changed.count = -r.count
                    changed.sensor = r.sensor + "u"
                    changed.value = r.value.map { -$0 }
                    try context.save(changed)
                }
            }
            #expect(try await lmdb.deleteAll(where: \.count > 15) == memory.deleteAll(where: \.count > 15))
            for (name, predicate) in Self.predicates {
                let request = Request(predicate).sorted(by: \.value)
                let viaPlan = try await lmdb.fetchAll(request).map { try $0.row }
                let reference = try await memory.fetchAll(request).map { try $0.row }
                #expect(viaPlan == reference, "after changes: \(name)")
            }
        }
    }

    @Test("the planner uses the primary key and indexes")
    func planChoices() throws {
        let entity = Reading.entity.description
        let indexes = entity.attributes.indices.filter { entity.attributes[$0].isIndexed && $0 != entity.primaryKeyIndex }
            .map { IndexHandle(position: $0, dbi: MDB_dbi($0 + 10), isUnique: false) }
        let handles = RegisteredEntity(entity: entity, main: 2, indexes: indexes, schemaVersion: 1)
        var registry = EntityRegistry<RegisteredEntity>()
        let registered = registry.set(entity, handles)
        func plan(_ request: Request<Reading>, order: Bool = true) throws -> Plan {
            QueryPlanner.plan(try request.resolved(for: registered), handles: handles, maxKeySize: 511, needsOrder: order)
        }
        let count = entity.index(of: "count")!
        let sensor = entity.index(of: "sensor")!

        let point = try plan(Request(\.count == 3))
        #expect(point.source == .index(indexes.first { $0.position == count }!))
        #expect(point.exact && point.ranges?.count == 1)

        let keys = try plan(Request(.in(\.id, [Int64(3), 1, 2])))
        #expect(keys.source == .primary && keys.exact && keys.ranges?.count == 3 && keys.ordered)

        let range = try plan(Request(\.id > 5 && \.id < 9).sorted(by: \.id, ascending: false))
        #expect(range.source == .primary && range.exact && range.ordered && range.descending)

        let ordered = try plan(Request(\.note == "x").sorted(by: \.sensor, ascending: false).limit(5))
        #expect(ordered.source == .index(indexes.first { $0.position == sensor }!))
        #expect(ordered.ordered && ordered.descending && !ordered.exact && ordered.ranges == nil)

        let residual = try plan(Request(\.count > 3 && \.note == "x"))
        #expect(residual.source == .index(indexes.first { $0.position == count }!) && !residual.exact)

        let scan = try plan(Request(\.note == "x"))
        #expect(scan.source == .primary && scan.ranges == nil && !scan.exact && scan.ordered)

        let empty = try plan(Request(\.count > 5 && \.count < 2))
        #expect(empty.ranges == [])
    }

    @Test("an index range holding a large share of the records gives way to a scan of the main database")
    func wideRangesScanTheMainDatabase() async throws {
        // count runs from -20 to 19: `count > 15` holds a tenth of the records, `count > -15`
        // most of them.
        let readings = Reading.generate(2_000)
        try await withStore { store, _ in
            let lmdb = Controller<Reading, Reading>(store: store)
            try await lmdb.save(readings)
            let entity = try await lmdb.registeredEntity()
            let narrow = try Request<Reading>(\.count > 15).sorted(by: \.note).limit(20).resolved(for: entity)
            let wide = try Request<Reading>(\.count > -15).sorted(by: \.note).limit(20).resolved(for: entity)
            let (narrowPlan, widePlan, counted) = try await store.read { transaction in
                let t = try #require(transaction as? LMDBTransaction)
                let handles = try t.handles(for: entity)
                let position = try #require(entity.entity.index(of: "count"))
                let countIndex = try #require(handles.index(at: position))
                let narrowPlan = try t.plan(narrow, handles, needsOrder: true)
                let widePlan = try t.plan(wide, handles, needsOrder: true)
                let wideRanges = try #require(QueryPlanner.plan(wide, handles: handles, maxKeySize: 511, needsOrder: true).ranges)
                let counted = try t.countIndexEntries(countIndex, wideRanges, reaching: .max)
                return (narrowPlan, widePlan, counted)
            }
            #expect(counted == readings.filter { $0.count > -15 }.count, "distinct keys with their duplicates count every entry")
            #expect(narrowPlan.source != .primary && narrowPlan.ranges?.count == 1, "a narrow range keeps its index")
            #expect(widePlan.source == .primary && widePlan.ranges == nil && !widePlan.exact, "a wide range scans the main database")
            for floor in [15, -15] {
                let request = Request<Reading>(\.count > floor).sorted(by: \.note).limit(20)
                let expected = readings.filter { $0.count > floor }.sorted { ($0.note, $0.id) < ($1.note, $1.id) }.prefix(20).map(\.id)
                #expect(try await lmdb.fetchAll(request).map(\.id) == Array(expected), "count > \(floor)")
            }
        }
    }
}
