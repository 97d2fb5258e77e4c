import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// PostgreSQL computes aggregates with `GROUP BY` (the conformance suite checks that the
/// answers are every backend's), double sums from exact parts the server sums.
@Suite("PostgresStore aggregates", .enabled(if: TestServer.available))
struct PostgresAggregateTests {
    @Test("counts, integer sums and averages, minimums and maximums are one GROUP BY statement; double sums one more")
    func aggregatesRunOnTheServer() async throws {
        let store = try TestServer.makeStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.fixtures)
        let handle = try await cats.registeredEntity()
        let entity = handle.entity
        let position = { (name: String) throws -> Int in try #require(entity.attributes.firstIndex { $0.name == name }) }
        let age = try position("age"), name = try position("name"), weight = try position("weight")

        let grouped = try AggregateQuery(
            rows: Query(entity: handle, predicate: .compare(attribute: "age", .greater, .int(1))), groupBy: [age],
            functions: [.count, .countValues(name), .sum(age), .average(age), .minimum(name), .maximum(weight)])
        let compiled = try PostgresStore.aggregateStatements(grouped, entity: entity)
        #expect(compiled.sql.hasSuffix("GROUP BY \"age\""), "\(compiled.sql)")
        #expect(compiled.sql.contains("sum(\"age\")::text"), "integer sums exact, as numeric: \(compiled.sql)")
        #expect(compiled.parameterCount == 1, "the filter's value bound, not spliced in")
        // The server's answer equals Depot's reference over the same rows.
        let (served, reference) = try await store.read { transaction in
            var rows: [Row] = []
            try transaction.fetchRows(grouped.rows) { rows.append($0) }
            return (try transaction.aggregate(grouped), try grouped.evaluate(rows))
        }
        #expect(served == reference)
        #expect(served.count > 1)

        let page = try Query(entity: handle, predicate: .constant(true), sortKeys: [SortKey("weight", ascending: false)], limit: 3, offset: 1)
        let paged = try AggregateQuery(rows: page, functions: [.count, .maximum(age)])
        let pagedSQL = try PostgresStore.aggregateStatements(paged, entity: entity).sql
        #expect(pagedSQL.contains("LIMIT") && pagedSQL.contains(") AS page"), "order, offset and limit first, in a subquery: \(pagedSQL)")
        let pagedAnswer = try await store.read { transaction in try transaction.aggregate(paged) }
        #expect(pagedAnswer.first?.values.first == .int(3))

        let doubles = try AggregateQuery(rows: Query(all: handle), groupBy: [age], functions: [.count, .sum(weight), .average(weight)])
        let doubleSQL = try PostgresStore.aggregateStatements(doubles, entity: entity)
        #expect(doubleSQL.doubleSums.count == 1, "one statement for the parts of weight's sums, shared by the sum and the average")
        #expect(doubleSQL.doubleSums.first?.contains("float8send") == true)
        let (servedDoubles, referenceDoubles) = try await store.read { transaction in
            var rows: [Row] = []
            try transaction.fetchRows(doubles.rows) { rows.append($0) }
            return (try transaction.aggregate(doubles), try doubles.evaluate(rows))
        }
        #expect(servedDoubles == referenceDoubles)
        await store.close()
    }

    /// Doubles of every magnitude, subnormals, signs and cancellations: the server's parts,
    /// added by Depot, give the exactly rounded sum the memory store gives, bit for bit.
    @Test("double sums from the server's exact parts equal Depot's exactly rounded sums, for any mix of magnitudes")
    func doubleSumsAreExact() async throws {
        let store = try TestServer.makeStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        var generator = SplitMix64(seed: 77)
        // Groups where one kind of value decides the sum: subnormals alone (a mistake in
        // their exponent shows), cancellations, extremes; then random bits of every
        // exponent. Subnormals are given by their bits (2.5e-320 and -1e-321), or as the
        // largest one: their decimal literals draw underflow warnings, and the literal
        // 0x1.fffffffffffffp-1023 meant for the largest rounded up to leastNormalMagnitude.
        var weights: [(group: String, weight: Double)] = [
            ("tiny", .leastNonzeroMagnitude), ("tiny", .leastNonzeroMagnitude * 3), ("tiny", Double(bitPattern: 0x13C4)), ("tiny", -Double(bitPattern: 0xCA)),
            ("tiny", 0x1p-1060), ("tiny", -0.0),
            ("edge", .leastNormalMagnitude), ("edge", -.leastNonzeroMagnitude), ("edge", Double.leastNormalMagnitude.nextDown),
            ("cancel", 1e16), ("cancel", 1), ("cancel", -1e16), ("cancel", 0.1), ("cancel", 0.2), ("cancel", 0.3),
            ("huge", 1e308), ("huge", -1e308), ("huge", .greatestFiniteMagnitude), ("huge", -0x1p1020), ("huge", 0x1.fffffffffffffp52),
            // Negative zeros alone sum to -0.0; with a positive zero, to 0.0.
            ("minus zero", -0.0), ("minus zero", -0.0), ("zeros", -0.0), ("zeros", 0.0),
        ]
        for n in 0..<400 {
            let bits = generator.next()
            let candidate = Double(bitPattern: bits)
            // Finite values of every exponent, and some of ordinary size that cancel.
            weights.append(("r\(n % 4)", candidate.isFinite && abs(candidate) < 1e300 ? candidate : Double(Int64(bitPattern: bits) % 1_000_000) / 7))
        }
        try await cats.save(weights.enumerated().map { Cat(id: Int64($0.offset + 1), name: $0.element.group, weight: $0.element.weight, age: $0.offset % 3) })
        let handle = try await cats.registeredEntity()
        let entity = handle.entity
        let name = try #require(entity.attributes.firstIndex { $0.name == "name" })
        let weight = try #require(entity.attributes.firstIndex { $0.name == "weight" })
        // Grouped by one attribute twice too: the keys of the sums' statement are aliased.
        for groupBy in [[], [name], [name, name]] {
            let query = try AggregateQuery(rows: Query(all: handle), groupBy: groupBy, functions: [.sum(weight), .average(weight), .count])
            let (served, reference) = try await store.read { transaction in
                var rows: [Row] = []
                try transaction.fetchRows(query.rows) { rows.append($0) }
                return (try transaction.aggregate(query), try query.evaluate(rows))
            }
            #expect(served.count == reference.count)
            for (a, b) in zip(served, reference) {
                #expect(a.keys == b.keys)
                for (x, y) in zip(a.values, b.values) {
                    guard case .double(let p) = x, case .double(let q) = y else {
                        #expect(x == y)
                        continue
                    }
                    #expect(p.bitPattern == q.bitPattern, "\(p) against \(q)")
                }
            }
        }
        await store.close()
    }
}
