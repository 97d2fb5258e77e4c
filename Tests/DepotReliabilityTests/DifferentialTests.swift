import Depot
import DepotCore

typealias DepotPredicate = DepotCore.PredicateExpression
import DepotTesting
import Foundation
import PropertyBased
import Synchronization
import Testing

/// The record the differential tests generate: every attribute type, optional ones, and
/// indexes of several types so that LMDB's planner and SQLite's indexes are exercised.
struct Probe: StoredObject, Hashable {
    var id: Int64
    var int: Int
    var double: Double
    var string: String
    var bool: Bool
    var date: Date
    var data: Data
    var uuid: UUID
    var optionalInt: Int64?
    var optionalDouble: Double?
    var optionalString: String?
    var optionalDate: Date?

    static let entity = Entity<Probe>("Probe", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("int", \.int, indexed: true)
        Attribute("double", \.double, indexed: true)
        Attribute("string", \.string, indexed: true)
        Attribute("bool", \.bool)
        Attribute("date", \.date, indexed: true)
        Attribute("data", \.data)
        Attribute("uuid", \.uuid)
        Attribute("optionalInt", \.optionalInt, indexed: true)
        Attribute("optionalDouble", \.optionalDouble)
        Attribute("optionalString", \.optionalString, indexed: true)
        Attribute("optionalDate", \.optionalDate)
    }

    init(id: Int64, int: Int, double: Double, string: String, bool: Bool, date: Date, data: Data, uuid: UUID,
         optionalInt: Int64?, optionalDouble: Double?, optionalString: String?, optionalDate: Date?) {
        (self.id, self.int, self.double, self.string, self.bool, self.date, self.data, self.uuid) =
            (id, int, double, string, bool, date, data, uuid)
        (self.optionalInt, self.optionalDouble, self.optionalString, self.optionalDate) =
            (optionalInt, optionalDouble, optionalString, optionalDate)
    }

    init(row: RecordReader<Self>) throws {
        (id, int, double, string, bool, date, data, uuid) =
            (try row[\.id], try row[\.int], try row[\.double], try row[\.string], try row[\.bool], try row[\.date], try row[\.data], try row[\.uuid])
        (optionalInt, optionalDouble, optionalString, optionalDate) = (try row[\.optionalInt], try row[\.optionalDouble], try row[\.optionalString], try row[\.optionalDate])
    }
}

/// Small pools of values with many ties and every edge the semantics name: byte order of
/// strings (precomposed and decomposed é, NUL, emoji, "Z" < "a"), NaN, infinities and
/// -0.0, extreme integers and dates. Index 0 of each pool is the simplest value, so a
/// shrunk choice of 0 reads as "the plain case".
enum Pool {
    static let ints: [Int64] = [0, 1, -1, 2, 3, 7, .max, .min, 1 << 40]
    static let doubles: [Double] = [0, 1, -1, 2.5, -0.0, .infinity, -.infinity, .nan, 1e-300, 0.1, 1e300, 3]
    static let strings: [String] = ["", "a", "b", "ab", "A", "Z", "\u{E9}", "e\u{301}", "a\u{0}b", "\u{0}", "😀", "aa", "b\u{7F}", "\u{FFFD}", "'; DROP TABLE Probe; --", "%_"]
    static let dates: [Date] = [0, 1, -1, 1e9, -1e10, 1e11, 0.5].map { Date(timeIntervalSinceReferenceDate: $0) } + [.distantPast, .distantFuture]
    static let datas: [Data] = [Data(), Data([0]), Data([1]), Data([0, 0]), Data([255]), Data([1, 2]), Data([0, 1])]
    static let uuids: [UUID] = [0, 1, 255].map { byte in UUID(uuid: (byte, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(byte & 3))) }

    /// The values an attribute can hold, and whether it may be nil.
    static func values(for attribute: String) -> (values: [Value], optional: Bool) {
        switch attribute {
        case "id", "int": return (ints.map { .int($0) }, false)
        case "double": return (doubles.map { .double($0) }, false)
        case "string": return (strings.map { .string($0) }, false)
        case "bool": return ([.bool(false), .bool(true)], false)
        case "date": return (dates.map { .date($0) }, false)
        case "data": return (datas.map { .data($0) }, false)
        case "uuid": return (uuids.map { .uuid($0) }, false)
        case "optionalInt": return (ints.map { .int($0) }, true)
        case "optionalDouble": return (doubles.map { .double($0) }, true)
        case "optionalString": return (strings.map { .string($0) }, true)
        default: return (dates.map { .date($0) }, true)
        }
    }

    static let attributes = Probe.entity.description.attributes.map(\.name)
    static let stringAttributes = ["string", "optionalString"]
}

/// Reads choices from a shrinkable list of numbers; past its end every choice is 0, the
/// simplest option, so a shrunk list means a simpler case.
struct Choices {
    let numbers: [Int]
    var position = 0

    init(_ numbers: [Int]) { self.numbers = numbers }

    mutating func next(_ count: Int) -> Int {
        guard position < numbers.count, count > 0 else { return 0 }
        defer { position += 1 }
        return numbers[position] % count
    }
}

/// One differential case: records, and a request over them.
struct DifferentialCase: Sendable, CustomStringConvertible {
    var records: [Probe]
    var predicate: DepotPredicate
    var sortKeys: [SortKey]
    var limit: Int?
    var offset: Int

    var description: String {
        let rows = records.map { record in
            "(" + ((try? record.row)?.allValues.map(\.debugLiteral).joined(separator: ", ") ?? "unencodable") + ")"
        }
        return "records: [\(rows.joined(separator: ", "))], predicate: \(predicate), sort: \(sortKeys.map { "\($0.attribute)\($0.ascending ? "↑" : "↓")" }), limit: \(limit.map(String.init) ?? "none"), offset: \(offset)"
    }

    /// The attribute the case's aggregates are grouped by (int, string, bool and the
    /// optional int, string and doubles), chosen from the case so that shrinking keeps it.
    var groupAttribute: Int {
        [1, 3, 4, 8, 10, 2, 9][((offset &+ (limit ?? 0) &+ records.count) % 7 + 7) % 7]
    }

    func query(for entity: EntityHandle) throws -> Query {
        try Query(entity: entity, predicate: predicate, sortKeys: sortKeys, limit: limit, offset: offset)
    }

    /// Decodes generated numbers into a case.
    init(records recordChoices: [[Int]], request requestChoices: [Int]) {
        records = recordChoices.enumerated().map { index, numbers in
            var c = Choices(numbers)
            func optional<T>(_ pool: [T]) -> T? {
                let pick = c.next(pool.count + 1)
                return pick == 0 ? nil : pool[pick - 1]
            }
            // Keys: distinct by position, and some negative, some large.
            let id = Int64(index) * [1, -1, 1_000_003][index % 3]
            return Probe(
                id: id, int: Int(Pool.ints[c.next(Pool.ints.count)]), double: Pool.doubles[c.next(Pool.doubles.count)],
                string: Pool.strings[c.next(Pool.strings.count)], bool: c.next(2) == 1, date: Pool.dates[c.next(Pool.dates.count)],
                data: Pool.datas[c.next(Pool.datas.count)], uuid: Pool.uuids[c.next(Pool.uuids.count)],
                optionalInt: optional(Pool.ints), optionalDouble: optional(Pool.doubles),
                optionalString: optional(Pool.strings), optionalDate: optional(Pool.dates))
        }
        var c = Choices(requestChoices)
        predicate = Self.predicate(&c, depth: 3)
        var keys: [SortKey] = []
        for _ in 0..<c.next(4) {
            keys.append(SortKey(Pool.attributes[c.next(Pool.attributes.count)], ascending: c.next(3) != 2))
        }
        sortKeys = keys
        limit = [nil, 0, 1, 2, 3, 5, 10, 1000][c.next(8)]
        offset = [0, 0, 1, 2, 4, 7][c.next(6)]
    }

    init(records: [Probe], predicate: DepotPredicate, sortKeys: [SortKey] = [], limit: Int? = nil, offset: Int = 0) {
        (self.records, self.predicate, self.sortKeys, self.limit, self.offset) = (records, predicate, sortKeys, limit, offset)
    }

    static func value(_ c: inout Choices, for attribute: String) -> Value {
        let (values, optional) = Pool.values(for: attribute)
        // nil is offered for every attribute: `== nil` means "is nil", other comparisons
        // are unknown; a double attribute is also compared with an integer literal.
        switch c.next(12) {
        case 10: return .null
        case 11 where attribute.lowercased().contains("double"): return .int(Int64(c.next(5)) - 2)
        default:
            _ = optional
            return values[c.next(values.count)]
        }
    }

    static func predicate(_ c: inout Choices, depth: Int) -> DepotPredicate {
        let kind = c.next(depth > 0 ? 13 : 9)
        let attribute = Pool.attributes[c.next(Pool.attributes.count)]
        switch kind {
        case 0: return .constant(true)
        case 1: return .compare(attribute: attribute, ComparisonOperator.allCases[c.next(6)], value(&c, for: attribute))
        case 2, 3:
            var values: [Value] = []
            for _ in 0..<c.next(4) { values.append(value(&c, for: attribute)) }
            return kind == 2 ? .oneOf(attribute: attribute, values) : .notOneOf(attribute: attribute, values)
        case 4: return .isNil(attribute: attribute)
        case 5, 6:
            let name = Pool.stringAttributes[c.next(2)]
            let text = Pool.strings[c.next(Pool.strings.count)]
            // Prefixes and needles also cut inside a multi-byte character's bytes? No: a
            // String cannot hold a partial scalar, so the first scalars are taken.
            let cut = String(String.UnicodeScalarView(text.unicodeScalars.prefix(c.next(3))))
            let needle = c.next(2) == 0 ? text : cut
            return kind == 5 ? .hasPrefix(attribute: name, needle) : .contains(attribute: name, needle)
        case 7: return .constant(false)
        case 8: return .compare(attribute: attribute, ComparisonOperator.allCases[c.next(6)], .null)
        case 9, 10:
            var parts: [DepotPredicate] = []
            for _ in 0..<(1 + c.next(3)) { parts.append(predicate(&c, depth: depth - 1)) }
            return kind == 9 ? .and(parts) : .or(parts)
        default:
            return .not(predicate(&c, depth: depth - 1))
        }
    }
}

/// The stores a differential test compares: the memory reference first.
final class DifferentialStores: Sendable {
    let directory = TemporaryDirectory("diff")
    let stores: [(name: String, store: any Store)]
    let selective = Counter()
    /// The entity the cases are stored in: Probe's description, or a variant of it.
    let entity: EntityDescription

    /// Every backend, the cases stored as `Probe`.
    convenience init() async throws {
        try await self.init(entity: Probe.entity.description, backends: nil)
    }

    /// The backends named in `backends` (all when `nil`), the cases stored as `entity`
    /// (Probe's attributes in Probe's order).
    init(entity: EntityDescription, backends: Set<String>?) async throws {
        self.entity = entity
        var stores: [(name: String, store: any Store)] = [("memory", MemoryStore())]
        func wanted(_ name: String) -> Bool { backends?.contains(name) ?? true }
        do {
            if wanted("sqlite") { stores.append(("sqlite", try await openStore(url: Backend.sqlite.url(in: directory)))) }
            if wanted("sqlite::memory:") { stores.append(("sqlite::memory:", try await openStore(url: "sqlite::memory:"))) }
            if wanted("lmdb") { stores.append(("lmdb", try await openStore(url: Backend.lmdb.url(in: directory)))) }
            // PostgreSQL where a server runs (`make test`, `make stress`): its filters, order,
            // pages and aggregates are SQL of Depot's, compared case by case like the others.
            if !wanted("postgres") {
                // Not compared in this run.
            } else if let url = Stress.postgresURL {
                let schema = "diff_\(UUID().uuidString.prefix(8).lowercased())"
                stores.append(("postgres", try await openStore(url: "\(url)&schema=\(schema)")))
            } else if Stress.postgresRequired {
                throw DepotError(.invalidConfiguration, "DEPOT_REQUIRE_POSTGRES=1 but DEPOT_TEST_POSTGRES_URL is not set: start a server with scripts/postgres-test-server.sh (make test does).")
            }
            for (_, store) in stores { _ = try await store.register(entity) }
        } catch {
            // The stores opened so far would otherwise keep their threads and files.
            for (_, store) in stores { await store.close() }
            directory.remove()
            throw error
        }
        self.stores = stores
    }

    /// The backends compared with the memory reference, for the report.
    var comparedNames: String { stores.dropFirst().map(\.name).joined(separator: ", ") }

    func close() async {
        for (_, store) in stores { await store.close() }
        directory.remove()
    }

    /// What one store answers to a case: the fetched rows, the count, and the rows deleted
    /// by the same query and the rows left (every write is then undone by reloading).
    struct Answer: Equatable {
        var rows: [Row]
        var count: Int
        var deleted: Int
        var remaining: [Row]
        /// The aggregates of the query's rows, ungrouped and grouped (or the error code).
        var aggregates: [String]
    }

    /// Every kind of aggregate over Probe's attributes, nils and doubles included.
    static let functions: [AggregateFunction] = [
        .count, .countValues(9), .sum(1), .sum(2), .sum(8), .average(8), .average(9), .sum(9),
        .minimum(3), .maximum(10), .minimum(11), .maximum(2), .minimum(7), .maximum(6), .minimum(4),
    ]

    static func aggregates(_ transaction: any ReadTransaction, _ query: Query, groupedBy: Int) -> [String] {
        [[], [groupedBy]].map { groupBy in
            do {
                let rows = try transaction.aggregate(AggregateQuery(rows: query, groupBy: groupBy, functions: functions))
                // -0.0 and 0.0 are equal in Depot, and SQLite stores both as 0.0.
                func literal(_ value: Value) -> String {
                    if case .double(let d) = value, d == 0 { return "0.0" }
                    return value.debugLiteral
                }
                return rows.map { "\($0.keys.map(literal)) \($0.values.map(literal))" }.joined(separator: "; ")
            } catch let error as DepotError {
                return "error \(error.code)"
            } catch {
                return "error \(error)"
            }
        }
    }

    static func answer(_ store: any Store, _ testCase: DifferentialCase, as description: EntityDescription) async throws -> Answer {
        // Registered already: this returns the store's handle.
        let entity = try await store.register(description)
        let query = try testCase.query(for: entity)
        let records = testCase.records
        try await store.write { transaction in
            try transaction.delete(Query(all: entity))
            for record in records { try transaction.insert(record.row, into: entity) }
        }
        let groupedBy = testCase.groupAttribute
        let (rows, count, aggregates) = try await store.read { transaction in
            var rows: [Row] = []
            try transaction.fetchRows(query) { rows.append($0) }
            return (rows, try transaction.count(query), Self.aggregates(transaction, query, groupedBy: groupedBy))
        }
        let (deleted, remaining) = try await store.write { transaction in
            let deleted = try transaction.delete(query)
            var rows: [Row] = []
            try transaction.fetchRows(Query(all: entity)) { rows.append($0) }
            return (deleted, rows)
        }
        return Answer(rows: rows, count: count, deleted: deleted, remaining: remaining, aggregates: aggregates)
    }

    /// Checks every backend against the reference for one case; returns whether all agree.
    @discardableResult
    func check(_ testCase: DifferentialCase, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Bool {
        let reference = try await Self.answer(stores[0].store, testCase, as: entity)
        // A case that selects some but not all records tells the backends apart best.
        if !reference.rows.isEmpty && reference.rows.count < testCase.records.count { selective.increment() }
        var agree = true
        for (name, store) in stores.dropFirst() {
            let answer = try await Self.answer(store, testCase, as: entity)
            if answer != reference {
                agree = false
                Issue.record("""
                    \(name) differs from the memory reference for \(testCase)
                      fetched \(answer.rows.map { $0[value: 0].debugLiteral }) expected \(reference.rows.map { $0[value: 0].debugLiteral })
                      aggregates \(answer.aggregates) expected \(reference.aggregates)
                      count \(answer.count) expected \(reference.count); deleted \(answer.deleted) expected \(reference.deleted); remaining \(answer.remaining.count) expected \(reference.remaining.count)
                    """, sourceLocation: sourceLocation)
            }
        }
        return agree
    }
}

@Suite("differential: every backend answers like the memory reference")
struct DifferentialTests {
    /// Cases: `DEPOT_DIFFERENTIAL_CASES`, or 10,000 in the full run.
    static let cases = Stress.size("DEPOT_DIFFERENTIAL_CASES", ci: 400, tsan: 60, full: 10_000)

    // Numbers, not values, are generated: the library's array shrinker then removes records
    // and request parts and lowers choices toward 0, the simplest option, so a failure
    // shrinks to a minimal case (printed decoded, ready to paste into DifferentialRegressionTests).
    static let recordsGenerator = Gen.int(in: 0...1_000).array(of: 12).array(of: 0...24)
    static let requestGenerator = Gen.int(in: 0...1_000_000).array(of: 0...48)

    @Test("random records and random requests", .shrinking)
    func randomCases() async throws {
        let stores = try await DifferentialStores()
        let checked = Counter()
        await propertyCheck(count: Self.cases, input: Self.recordsGenerator, Self.requestGenerator) { records, request in
            let testCase = DifferentialCase(records: records, request: request)
            try await stores.check(testCase)
            checked.increment()
        }
        await stores.close()
        report("differential: \(checked.value) cases checked against memory on \(stores.comparedNames) (fetch, count, aggregates, delete), \(stores.selective.value) selecting some but not all records; mismatches fail the test")
    }

    /// Requests shaped for composite indexes, over an entity that declares them, on every
    /// backend: each plans with the indexes its own way, and all answer as the memory store.
    @Test("random records and requests shaped for composite indexes", .shrinking)
    func compositeIndexCases() async throws {
        let stores = try await DifferentialStores(entity: Probe.indexedEntity, backends: nil)
        let checked = Counter()
        let indexed = Counter()
        await propertyCheck(count: Self.cases, input: Self.recordsGenerator, Self.requestGenerator) { records, request in
            let testCase = DifferentialCase(indexShaped: records, request: request)
            try await stores.check(testCase)
            checked.increment()
            // The plans compared: how many read an index (so the test is not all scans).
            let store = stores.stores.first { $0.name == "lmdb" }?.store ?? stores.stores[0].store
            let entity = try await store.register(Probe.indexedEntity)
            let query = try testCase.query(for: entity)
            if try await store.read({ try $0.explain(query, analyze: false) }).usesIndex { indexed.increment() }
        }
        await stores.close()
        #expect(indexed.value > 0)
        report("differential, composite indexes: \(checked.value) cases checked against memory on \(stores.comparedNames), \(indexed.value) planned over an index, \(stores.selective.value) selecting some but not all records; mismatches fail the test")
    }

    /// Requests whose filter is an `OR` of conditions on indexed attributes and the primary
    /// key (LMDB reads them as a union of ranges when that costs less than a scan), on
    /// every backend, compared with the memory store.
    @Test("random records and OR requests shaped for unions of ranges", .shrinking)
    func unionCases() async throws {
        let stores = try await DifferentialStores()
        let checked = Counter()
        let unions = Counter()
        await propertyCheck(count: Self.cases, input: Self.recordsGenerator, Self.requestGenerator) { records, request in
            let testCase = DifferentialCase(orShaped: records, request: request)
            try await stores.check(testCase)
            checked.increment()
            // The plans compared: how many LMDB reads as a union (so the test is not all scans).
            guard let store = stores.stores.first(where: { $0.name == "lmdb" })?.store else { return }
            let entity = try await store.register(Probe.entity.description)
            let query = try testCase.query(for: entity)
            if try await store.read({ try $0.explain(query, analyze: false) }).usesIndex { unions.increment() }
        }
        await stores.close()
        #expect(unions.value > 0)
        report("differential, OR filters: \(checked.value) cases checked against memory on \(stores.comparedNames), \(unions.value) planned by LMDB over indexes, \(stores.selective.value) selecting some but not all records; mismatches fail the test")
    }
}

extension DifferentialCase {
    /// The attributes of Probe with a single-attribute index, and its primary key.
    static let keyedAttributes = ["id", "int", "double", "string", "date", "optionalInt", "optionalString"]

    /// A case shaped for a union of ranges: an `OR` of two or three alternatives, each a
    /// condition the planners turn into a range (equality, `IN`, a comparison, `isNil`, a
    /// prefix) on an indexed attribute or the primary key, sometimes with a second
    /// condition; now and then an alternative on an unindexed attribute (which must scan),
    /// and maybe another condition joined by `AND` around the `OR`.
    init(orShaped records: [[Int]], request requestChoices: [Int]) {
        self.init(records: records, request: [])
        var c = Choices(requestChoices)
        func ranged(_ c: inout Choices) -> DepotPredicate {
            let attribute = Self.keyedAttributes[c.next(Self.keyedAttributes.count)]
            switch c.next(5) {
            case 0:
                var values: [Value] = []
                for _ in 0..<(1 + c.next(3)) { values.append(Self.value(&c, for: attribute)) }
                return .oneOf(attribute: attribute, values)
            case 1:
                return .compare(attribute: attribute, [.less, .lessOrEqual, .greater, .greaterOrEqual][c.next(4)], Self.value(&c, for: attribute))
            case 2 where attribute.hasPrefix("optional"):
                return .isNil(attribute: attribute)
            case 3 where Pool.stringAttributes.contains(attribute):
                let text = Pool.strings[c.next(Pool.strings.count)]
                return .hasPrefix(attribute: attribute, String(String.UnicodeScalarView(text.unicodeScalars.prefix(1 + c.next(2)))))
            default:
                let value = Self.value(&c, for: attribute)
                return value.isNull ? .isNil(attribute: attribute) : .compare(attribute: attribute, .equal, value)
            }
        }
        var alternatives: [DepotPredicate] = []
        for _ in 0..<(2 + c.next(2)) {
            switch c.next(8) {
            case 0: alternatives.append(Self.predicate(&c, depth: 0))
            case 1: alternatives.append(.and([ranged(&c), Self.predicate(&c, depth: 0)]))
            default: alternatives.append(ranged(&c))
            }
        }
        predicate = c.next(3) == 0 ? .and([.or(alternatives), Self.predicate(&c, depth: 1)]) : .or(alternatives)
        var keys: [SortKey] = []
        for _ in 0..<c.next(3) {
            keys.append(SortKey(Pool.attributes[c.next(Pool.attributes.count)], ascending: c.next(2) == 0))
        }
        sortKeys = keys
        limit = [nil, 0, 1, 3, 5, 10][c.next(6)]
        offset = [0, 0, 1, 4][c.next(4)]
    }
}

extension Probe {
    /// Probe's attributes with composite indexes over attributes with many ties, nils and
    /// edge values: ascending and descending components, optional ones, three components,
    /// and the primary key as a component.
    static let indexedEntity = EntityDescription(
        name: "IndexedProbe", attributes: Probe.entity.description.attributes,
        primaryKeyIndex: Probe.entity.description.primaryKeyIndex,
        indexes: [
            .index("string", "int"), .index(.descending("optionalString"), "double"),
            .index("bool", "optionalInt", .descending("date")), .index(.descending("int"), "optionalDate"),
            .index("bool", .descending("id")),
        ])
}

extension DifferentialCase {
    /// A case shaped for one of ``Probe/indexedEntity``'s indexes: equality on a prefix of
    /// its components, maybe `IN` or a comparison on the next, sorted by the rest (each
    /// direction as declared or all reversed, or sorted otherwise), and maybe another
    /// random condition.
    init(indexShaped records: [[Int]], request requestChoices: [Int]) {
        self.init(records: records, request: [])
        var c = Choices(requestChoices)
        let index = Probe.indexedEntity.indexes[c.next(Probe.indexedEntity.indexes.count)]
        let components = index.components
        let fixed = c.next(components.count + 1)
        var parts: [DepotPredicate] = []
        for component in components.prefix(fixed) {
            let value = Self.value(&c, for: component.attribute)
            parts.append(value.isNull ? .isNil(attribute: component.attribute) : .compare(attribute: component.attribute, .equal, value))
        }
        if fixed < components.count {
            let next = components[fixed].attribute
            switch c.next(4) {
            case 0:
                var values: [Value] = []
                for _ in 0..<(1 + c.next(3)) { values.append(Self.value(&c, for: next)) }
                parts.append(.oneOf(attribute: next, values))
            case 1, 2:
                parts.append(.compare(attribute: next, [.less, .lessOrEqual, .greater, .greaterOrEqual][c.next(4)], Self.value(&c, for: next)))
            default:
                break
            }
        }
        if c.next(3) == 0 { parts.append(Self.predicate(&c, depth: 1)) }
        predicate = parts.isEmpty ? .constant(true) : .and(parts)
        let flip = c.next(2) == 1
        switch c.next(4) {
        case 0:
            sortKeys = []
        case 1:
            sortKeys = [SortKey(Pool.attributes[c.next(Pool.attributes.count)], ascending: c.next(2) == 0)]
        default:
            sortKeys = components.dropFirst(c.next(2) == 0 ? fixed : 0).map { SortKey($0.attribute, ascending: $0.isDescending == flip) }
            if flip { sortKeys.append(SortKey("id", ascending: false)) }
        }
        limit = [nil, 0, 1, 3, 5, 10][c.next(6)]
        offset = [0, 0, 1, 4][c.next(4)]
    }
}

/// A count shared with `@Sendable` closures (an atomic, which Thread Sanitizer sees).
final class Counter: Sendable {
    private let storage = Atomic<Int>(0)
    func increment(by amount: Int = 1) { storage.add(amount, ordering: .relaxed) }
    var value: Int { storage.load(ordering: .relaxed) }
}

extension Probe {
    var row: Row {
        get throws {
            var row = Row()
            try encode(into: &row)
            return row
        }
    }
}
