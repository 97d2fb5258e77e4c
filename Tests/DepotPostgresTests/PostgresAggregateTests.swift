import DepotCore
import DepotTesting
import Foundation
import Testing

@testable import DepotPostgres

/// PostgreSQL computes aggregates with `GROUP BY` (the conformance suite checks that the
/// answers are every backend's); only sums and averages of doubles read the rows.
@Suite("PostgresStore aggregates", .enabled(if: TestServer.available))
struct PostgresAggregateTests {
    @Test("counts, integer sums and averages, minimums and maximums are one GROUP BY statement; double sums are Depot's")
    func aggregatesRunOnTheServer() async throws {
        let store = try TestServer.makeStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.fixtures)
        let handle = try await cats.registeredEntity()
        let entity = handle.entity
        let position = { (name: String) throws -> Int in try #require(entity.attributes.firstIndex { $0.name == name }) }
        let age = try position("age"), name = try position("name"), weight = try position("weight")
        let table = RegisteredEntity(entity: entity, serial: 0)

        let grouped = try AggregateQuery(
            rows: Query(entity: handle, predicate: .compare(attribute: "age", .greater, .int(1))), groupBy: [age],
            functions: [.count, .countValues(name), .sum(age), .average(age), .minimum(name), .maximum(weight)])
        let compiled = try #require(try PGQueryCompiler.aggregate(grouped, table: table))
        #expect(compiled.query.sql.hasSuffix("GROUP BY \"age\""), "\(compiled.query.sql)")
        #expect(compiled.query.sql.contains("sum(\"age\")::text"), "integer sums exact, as numeric: \(compiled.query.sql)")
        #expect(compiled.query.params.count == 1, "the filter's value bound, not spliced in")
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
        let pagedSQL = try #require(try PGQueryCompiler.aggregate(paged, table: table)).query.sql
        #expect(pagedSQL.contains("LIMIT") && pagedSQL.contains(") AS page"), "order, offset and limit first, in a subquery: \(pagedSQL)")
        let pagedAnswer = try await store.read { transaction in try transaction.aggregate(paged) }
        #expect(pagedAnswer.first?.values.first == .int(3))

        let doubles = try AggregateQuery(rows: Query(all: handle), functions: [.count, .sum(weight)])
        #expect(try PGQueryCompiler.aggregate(doubles, table: table) == nil, "double sums are exactly rounded by Depot, not summed by the server")
        await store.close()
    }
}
