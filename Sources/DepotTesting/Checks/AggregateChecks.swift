import DepotCore
import Foundation

/// Counts, sums, averages, minimums and maximums, grouped and not: the same answers on every
/// backend, nils and empty sets included.
enum AggregateChecks {
    struct Note: Codable, Hashable, JSONAttribute {
        var text: String
    }

    @Record(name: "Reading")
    struct Reading: Hashable {
        var id: Int64
        var sensor: String
        var value: Double?
        var level: Int?
        var taken: Date
        var tag: UUID?
        var note: Note?
    }

    static let base = Date(timeIntervalSinceReferenceDate: 800_000_000)
    static let tagA = UUID(uuidString: "00000000-0000-0000-0000-00000000000A")!
    static let tagB = UUID(uuidString: "F0000000-0000-0000-0000-000000000001")!

    /// Readings with nils, ties, negative zero, infinities kept apart in their own sensor,
    /// and doubles whose sum depends on the order they are added in (0.1 + 0.2 + 0.3).
    static let readings: [Reading] = [
        Reading(id: 1, sensor: "a", value: 0.1, level: 3, taken: base, tag: tagA, note: Note(text: "x")),
        Reading(id: 2, sensor: "a", value: 0.2, level: nil, taken: base + 10, tag: nil, note: nil),
        Reading(id: 3, sensor: "a", value: 0.3, level: -7, taken: base - 5, tag: tagB, note: nil),
        Reading(id: 4, sensor: "b", value: nil, level: nil, taken: base + 1, tag: nil, note: nil),
        Reading(id: 5, sensor: "b", value: -0.0, level: 9_000_000_000_000_000_000, taken: base + 2, tag: tagA, note: nil),
        Reading(id: 6, sensor: "B", value: 1e308, level: 1, taken: base + 3, tag: nil, note: nil),
        Reading(id: 7, sensor: "B", value: 1e308, level: 2, taken: base + 4, tag: nil, note: nil),
        Reading(id: 8, sensor: "c", value: -.infinity, level: Int.min, taken: base + 6, tag: nil, note: nil),
        Reading(id: 9, sensor: "c", value: 2.5, level: Int.min, taken: base + 7, tag: nil, note: nil),
    ]

    typealias Readings = Controller<Reading, Reading>

    /// Attribute types whose order a SQL server might not share with Depot: booleans,
    /// bytes and UUIDs (which PostgreSQL has no `min` or `max` for), and doubles whose
    /// equal values differ in sign or are NaN.
    @Record(name: "Sample")
    struct Sample: Hashable {
        var id: Int64
        var flag: Bool?
        var blob: Data?
        var tag: UUID?
        var score: Double?
    }

    static let samples: [Sample] = [
        Sample(id: 1, flag: true, blob: Data([0x01, 0x02]), tag: tagB, score: 0.0),
        Sample(id: 2, flag: false, blob: Data([0x01]), tag: tagA, score: -0.0),
        Sample(id: 3, flag: nil, blob: Data([0x00]), tag: nil, score: .nan),
        Sample(id: 4, flag: true, blob: Data([0xFF]), tag: tagA, score: .nan),
        Sample(id: 5, flag: nil, blob: nil, tag: nil, score: nil),
        Sample(id: 6, flag: false, blob: Data([0x01, 0x02]), tag: tagB, score: 1.5),
    ]

    static func seeded(_ store: any Store) async throws -> Readings {
        let readings = Readings(store: store)
        try await readings.save(Self.readings)
        return readings
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("sums, averages, minimums and maximums skip nils; counts count records or values") { store in
            let readings = try await seeded(store)
            let sensorA = Request<Reading>(\.sensor == "a")
            // 0.1 + 0.2 + 0.3 added in that order is 0.6000000000000001; the exact sum
            // rounded once is 0.6, whatever order a backend reads the rows in.
            try await expectEqual(readings.sum(\.value, sensorA), 0.6, "exactly rounded double sum")
            try await expectEqual(readings.average(\.value, sensorA), 0.6 / 3, "average of doubles")
            try await expectEqual(readings.sum(\.level, sensorA), -4, "integer sum skips nil")
            try await expectEqual(readings.average(\.level, sensorA), -2, "integer average over the non-nil values")
            try await expectEqual(readings.minimum(\.value, sensorA), 0.1, "minimum")
            try await expectEqual(readings.maximum(\.taken, sensorA), base + 10, "maximum date")
            try await expectEqual(readings.minimum(\.taken), base - 5, "minimum date over everything")
            try await expectEqual(readings.minimum(\.sensor), "B", "strings by UTF-8 bytes: B before a")
            try await expectEqual(readings.maximum(\.tag), tagB, "UUIDs by bytes")
            try await expectEqual(readings.minimum(\.value), -.infinity, "minimum double")
            let counts = try await readings.aggregate([.count, .count(\.value), .count(\.level), .count(\.tag)])
            try expectEqual(counts.count, 1, "one group without grouping")
            try expectEqual(try counts[0][.count, as: Int.self], 9, "records")
            try expectEqual(try counts[0][.count(\.value), as: Int.self], 8, "non-nil values")
            try expectEqual(try counts[0][.count(\.level), as: Int.self], 7, "non-nil levels")
            try expectEqual(try counts[0][.count(\.tag), as: Int.self], 3, "non-nil tags")
        },
        ConformanceCheck("aggregates over no values are nil, and counts are zero") { store in
            let readings = try await seeded(store)
            let none = Request<Reading>(\.sensor == "nobody")
            try await expectEqual(readings.sum(\.value, none), nil, "sum of nothing")
            try await expectEqual(readings.sum(\.level, none), nil, "integer sum of nothing")
            try await expectEqual(readings.average(\.level, none), nil, "average of nothing")
            try await expectEqual(readings.minimum(\.taken, none), nil, "minimum of nothing")
            try await expectEqual(readings.maximum(\.sensor, none), nil, "maximum of nothing")
            let onlyNil = Request<Reading>(\.id == 4)
            try await expectEqual(readings.sum(\.value, onlyNil), nil, "sum of a nil")
            try await expectEqual(readings.maximum(\.level, onlyNil), nil, "maximum of a nil")
            let counts = try await readings.aggregate([.count, .count(\.value)], none)
            try expectEqual(counts.map { try $0[.count, as: Int.self] }, [0], "count of nothing is one group of 0")
            try expectEqual(counts.map { try $0[.count(\.value), as: Int.self] }, [0], "count of values")
            try await expectEqual(Readings(store: store).count(groupedBy: \.sensor, none).count, 0, "no groups")
        },
        ConformanceCheck("infinities, NaN, negative zero and integer overflow") { store in
            let readings = try await seeded(store)
            try await expectEqual(readings.sum(\.value, Request(\.sensor == "B")), .infinity, "a finite sum past the double range is infinite")
            try await expectEqual(readings.sum(\.value, Request(\.sensor == "c")), -.infinity, "an infinity dominates")
            let zero = try await readings.sum(\.value, Request(\.id == 5))
            try expect(zero == 0, "-0.0 sums to zero (got \(String(describing: zero)))")
            try await readings.save(Reading(id: 20, sensor: "n", value: .nan, level: nil, taken: base, tag: nil, note: nil))
            try await readings.save(Reading(id: 21, sensor: "n", value: 1, level: nil, taken: base, tag: nil, note: nil))
            let nanSum = try await readings.sum(\.value, Request(\.sensor == "n"))
            try expect(nanSum?.isNaN == true, "NaN makes the sum NaN (got \(String(describing: nanSum)))")
            let nanMax = try await readings.maximum(\.value)
            try expect(nanMax?.isNaN == true, "NaN is the largest double (got \(String(describing: nanMax)))")
            // 9e18 + 9e18 does not fit Int64: refused, not wrapped.
            try await readings.save(Reading(id: 22, sensor: "b", value: nil, level: 9_000_000_000_000_000_000, taken: base, tag: nil, note: nil))
            try await expectError(.invalidValue, "integer sum beyond Int64") { try await readings.sum(\.level, Request(\.sensor == "b")) }
            // The average of the same values is fine: sums are kept in 128 bits.
            try await expectEqual(readings.average(\.level, Request(\.sensor == "b")), 9e18, "average of large integers")
            // Int.min + Int.min overflows below.
            try await expectError(.invalidValue, "integer sum below Int64") { try await readings.sum(\.level, Request(\.sensor == "c")) }
        },
        ConformanceCheck("grouped aggregates: one group per value, ordered by value with nil first") { store in
            let readings = try await seeded(store)
            let groups = try await readings.aggregate([.count, .sum(\.value), .maximum(\.level)], groupedBy: [\.sensor])
            try expectEqual(try groups.map { try $0.key(\.sensor) }, ["B", "a", "b", "c"], "group keys in byte order")
            try expectEqual(try groups.map { try $0[.count, as: Int.self] }, [2, 3, 2, 2], "counts per group")
            try expectEqual(try groups.map { try $0[.sum(\.value), as: Double?.self] }, [.infinity, 0.6, 0, -.infinity], "sums per group")
            try expectEqual(try groups.map { try $0[.maximum(\.level), as: Int?.self] }, [2, 3, 9_000_000_000_000_000_000, Int.min], "maximums per group")
            let byLevel = try await readings.count(groupedBy: \.level)
            try expectEqual(byLevel.map(\.key), [nil, Int.min, -7, 1, 2, 3, 9_000_000_000_000_000_000], "nil is its own group, first")
            try expectEqual(byLevel.map(\.count), [2, 2, 1, 1, 1, 1, 1], "counts per level")
            let two = try await readings.aggregate([.count], groupedBy: [\.sensor, \.tag])
            try expectEqual(
                try two.map { "\(try $0.key(\.sensor)) \(try $0.key(\.tag)?.uuidString.suffix(1) ?? "nil") \(try $0[.count, as: Int.self])" },
                ["B nil 2", "a nil 1", "a A 1", "a 1 1", "b nil 1", "b A 1", "c nil 2"], "grouped by two attributes")
            let filtered = try await readings.aggregate([.average(\.value)], groupedBy: [\.sensor], Request(\.level != nil))
            try expectEqual(try filtered.map { try $0.key(\.sensor) }, ["B", "a", "b", "c"], "a filter applies before grouping")
            try expectEqual(try filtered[1][.average(\.value), as: Double?.self], 0.2, "average of the filtered rows")
        },
        ConformanceCheck("minimums, maximums and groups of booleans, bytes, UUIDs and doubles follow Depot's order") { store in
            let samples = Controller<Sample, Sample>(store: store)
            try await samples.save(Self.samples)
            try await expectEqual(samples.minimum(\.flag), false, "false before true")
            try await expectEqual(samples.maximum(\.flag), true, "true after false")
            try await expectEqual(samples.minimum(\.blob), Data([0x00]), "bytes in byte order")
            try await expectEqual(samples.maximum(\.blob), Data([0xFF]), "0xFF after 0x01 0x02")
            try await expectEqual(samples.minimum(\.tag), tagA, "UUIDs by bytes")
            try await expectEqual(samples.maximum(\.tag), tagB, "UUIDs by bytes")
            try await expectEqual(samples.maximum(\.tag, Request(\.flag == false)), tagB, "a filtered maximum")
            let lowest = try await samples.minimum(\.score)
            try expect(lowest == 0, "zero and negative zero are the smallest (got \(String(describing: lowest)))")
            let highest = try await samples.maximum(\.score)
            try expect(highest?.isNaN == true, "NaN is the largest double (got \(String(describing: highest)))")
            let byFlag = try await samples.count(groupedBy: \.flag)
            try expectEqual(byFlag.map(\.key), [nil, false, true], "boolean groups, nil first")
            try expectEqual(byFlag.map(\.count), [2, 2, 2], "counts per boolean")
            let byBlob = try await samples.count(groupedBy: \.blob)
            try expectEqual(byBlob.map(\.key), [nil, Data([0x00]), Data([0x01]), Data([0x01, 0x02]), Data([0xFF])], "byte groups in byte order, shorter first")
            try expectEqual(byBlob.map(\.count), [1, 1, 1, 2, 1], "counts per bytes")
            let byScore = try await samples.count(groupedBy: \.score)
            try expectEqual(byScore.count, 4, "nil, zero (either sign), 1.5 and NaN: \(byScore.map { "\(String(describing: $0.key))" })")
            try expect(byScore.first?.key == nil && byScore.dropFirst().first?.key == 0, "nil, then zero")
            try expectEqual(byScore.map(\.count), [1, 2, 1, 2], "negative zero groups with zero, NaN with NaN")
            try expect(byScore.last?.key?.isNaN == true, "NaN's group last")
            let byTag = try await samples.aggregate([.count, .maximum(\.flag), .minimum(\.blob)], groupedBy: [\.tag])
            try expectEqual(try byTag.map { try $0.key(\.tag) }, [nil, tagA, tagB], "UUID groups")
            try expectEqual(try byTag.map { try $0[.maximum(\.flag), as: Bool?.self] }, [nil, true, true], "maximum per group")
            try expectEqual(try byTag.map { try $0[.minimum(\.blob), as: Data?.self] }, [Data([0x00]), Data([0x01]), Data([0x01, 0x02])], "minimum bytes per group")
        },
        ConformanceCheck("double sums are exact past the largest double, in whatever order the rows come") { store in
            let readings = try await seeded(store)
            // 2^1023 + 2^1023 passes the largest double; with the two -2^1022 first it never
            // does. Exactly, the sum is 2^1023 either way.
            let values = [0x1p1023, -0x1p1022, 0x1p1023, -0x1p1022]
            for (offset, value) in values.enumerated() {
                try await readings.save(Reading(id: 40 + Int64(offset), sensor: "d", value: value, level: nil, taken: base, tag: nil, note: nil))
            }
            for ascending in [true, false] {
                let sorted = Request<Reading>(\.sensor == "d").sorted(by: \.value, ascending: ascending)
                try await expectEqual(readings.sum(\.value, sorted), 0x1p1023, "sum sorted \(ascending ? "ascending" : "descending")")
                try await expectEqual(readings.average(\.value, sorted), 0x1p1021, "average sorted \(ascending ? "ascending" : "descending")")
            }
            let groups = try await readings.aggregate([.sum(\.value)], groupedBy: [\.sensor])
            try expectEqual(try groups.map { try $0[.sum(\.value), as: Double?.self] }, [.infinity, 0.6, 0, -.infinity, 0x1p1023], "sums per group")
            // An exact sum beyond the range is infinite: 1e308 + 1e308 (sensor "B") above.
            try await readings.save(Reading(id: 44, sensor: "d", value: .greatestFiniteMagnitude, level: nil, taken: base, tag: nil, note: nil))
            try await expectEqual(readings.sum(\.value, Request(\.sensor == "d")), .infinity, "2^1023 + the largest double")
        },
        ConformanceCheck("aggregates honour the request's order, offset and limit") { store in
            let readings = try await seeded(store)
            let heaviestTwo = Request<Reading>(\.value != nil).sorted(by: \.value, ascending: false).limit(2)
            try await expectEqual(readings.sum(\.value, heaviestTwo), .infinity, "1e308 + 1e308")
            let lowest = Request<Reading>().sorted(by: \.taken).offset(1).limit(3)
            try await expectEqual(readings.aggregate([.count], groupedBy: [\.sensor], lowest).map { try $0.key(\.sensor) }, ["a", "b"], "groups of the page")
            try await expectEqual(readings.sum(\.level, lowest), 9_000_000_000_000_000_003, "the levels of ids 1, 4 and 5")
        },
        ConformanceCheck("aggregates that make no sense are refused as invalidPredicate") { store in
            let readings = try await seeded(store)
            try await expectError(.invalidPredicate, "sum of a string") { try await readings.aggregate([.sum(\.sensor)]) }
            try await expectError(.invalidPredicate, "average of a date") { try await readings.aggregate([.average(\.taken)]) }
            try await expectError(.invalidPredicate, "unknown attribute") { try await readings.aggregate([.maximum("colour")]) }
            try await expectError(.invalidPredicate, "maximum of a JSON attribute") { try await readings.aggregate([.maximum(\.note)]) }
            try await expectError(.invalidPredicate, "grouping by a JSON attribute") { try await readings.aggregate([.count], groupedBy: [\.note]) }
            try await expectError(.invalidPredicate, "no aggregate") { try await readings.aggregate([]) }
            let groups = try await readings.aggregate([.count], groupedBy: [\.sensor])
            try await expectError(.invalidPredicate, "a key not grouped by") { try groups[0].key(\.level) }
            try await expectError(.invalidPredicate, "an aggregate not asked for") { try groups[0][.sum(\.value), as: Double?.self] }
            try await expectError(.conversionFailed, "a count read as a string") { try groups[0][.count, as: String.self] }
            // Counting a JSON attribute's values is fine.
            try await expectEqual(readings.aggregate([.count(\.note)]).first.map { try $0[.count(\.note), as: Int.self] }, 1, "count of JSON values")
        },
        ConformanceCheck("aggregates inside a read and an operation see the same snapshot as their reads") { store in
            let readings = try await seeded(store)
            let seen = try await readings.operation { context -> [Double?] in
                try context.save(Reading(id: 30, sensor: "a", value: 0.4, level: nil, taken: base, tag: nil, note: nil))
                return [try context.sum(\.value, Request(\.sensor == "a")), try context.maximum(\.value, Request(\.sensor == "a"))]
            }
            try expectEqual(seen, [1.0, 0.4], "an operation's aggregates see its own writes")
            let total = try await readings.read { context in try context.count(groupedBy: \.sensor).map(\.count).reduce(0, +) }
            try expectEqual(total, 10, "grouped counts add up to the records")
        },
    ]
}
