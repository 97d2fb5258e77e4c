import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

import DepotSQLite

/// Values another program wrote into Depot's tables that the record cannot hold: SQLite
/// keeps text in an INTEGER column and would read it as 0. Each is refused with an error
/// naming the entity, the attribute and the record, in a lookup and in a fetch.
@Suite("SQLite: values of the wrong type written by another program")
struct SQLiteForeignValueTests {
    @Test("the audit's case: text in Cat.age and Cat.weight reads as an error, not zero")
    func catAgeAndWeight() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("cats.sqlite").path
            do {
                let store = try SQLiteStore(path: path)
                try await Controller<Cat, CatRecord>(store: store).save(Cat.fixtures)
                await store.close()
            }
            _ = try sqlite3CLI(path, "UPDATE Cat SET age='twelve' WHERE id=\(Cat.fixtures[1].id); UPDATE Cat SET weight='heavy' WHERE id=\(Cat.fixtures[0].id)")
            let store = try SQLiteStore(path: path)
            let cats = Controller<Cat, CatRecord>(store: store)
            let age = await expectDepotError(.conversionFailed) { try await cats.fetchOne(id: Cat.fixtures[1].id) }
            #expect(age?.message.contains("Cat.age of the record with key \(Cat.fixtures[1].id) holds the text \"twelve\"") == true, "\(String(describing: age))")
            let weight = await expectDepotError(.conversionFailed) { try await cats.fetchOne(id: Cat.fixtures[0].id) }
            #expect(weight?.message.contains("Cat.weight of the record with key \(Cat.fixtures[0].id)") == true, "\(String(describing: weight))")
            await expectDepotError(.conversionFailed) { try await cats.fetchAll() }
            // The other records still read.
            #expect(try await cats.fetchOne(id: Cat.fixtures[2].id) == Cat.fixtures[2])
            await store.close()
        }
    }

    /// Every attribute type, with values of each other storage class SQLite can hold.
    static let cases: [(attribute: String, sql: String, code: DepotError.Code)] = [
        ("int", "'twelve'", .conversionFailed), ("int", "1.5", .conversionFailed), ("int", "x'00'", .conversionFailed),
        ("int32", "x'03'", .conversionFailed),
        ("double", "'heavy'", .conversionFailed), ("double", "x'0102'", .conversionFailed),
        ("bool", "2", .conversionFailed), ("bool", "'yes'", .conversionFailed),
        ("string", "x'35'", .conversionFailed), ("string", "CAST(x'61ff62' AS TEXT)", .conversionFailed),
        // Invalid UTF-8 after a NUL byte: a reading that stopped at the NUL would miss it.
        ("string", "CAST(x'6100ff' AS TEXT)", .conversionFailed),
        ("data", "'text'", .conversionFailed), ("data", "5", .conversionFailed),
        ("date", "'yesterday'", .conversionFailed),
        ("uuid", "'0000'", .conversionFailed), ("uuid", "x'0011'", .conversionFailed),
        ("optionalInt", "'none'", .conversionFailed), ("optionalDouble", "x'00'", .conversionFailed),
        ("optionalString", "x'31'", .conversionFailed), ("optionalDate", "'later'", .conversionFailed),
    ]

    @Test("a value of another storage class in any attribute is refused", arguments: 0..<cases.count)
    func everyType(_ index: Int) async throws {
        let (attribute, sql, code) = Self.cases[index]
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("samples.sqlite").path
            do {
                let store = try SQLiteStore(path: path)
                try await Controller<Sample, Sample>(store: store).save([Sample(id: 1), Sample(id: 2, optionalInt: 1, optionalDouble: 1, optionalString: "a")])
                await store.close()
            }
            // Literals a column's affinity would convert (a number into a TEXT column) are
            // not among the cases: those are values the record can hold.
            _ = try sqlite3CLI(path, "UPDATE Sample SET \"\(attribute)\" = \(sql) WHERE id = 1")
            let stored = try sqlite3CLI(path, "SELECT typeof(\"\(attribute)\") FROM Sample WHERE id = 1").trimmingCharacters(in: .whitespacesAndNewlines)
            let store = try SQLiteStore(path: path)
            let samples = Controller<Sample, Sample>(store: store)
            let one = await expectDepotError(code) { try await samples.fetchOne(id: 1) }
            #expect(one?.message.contains("Sample.\(attribute) of the record with key 1 holds") == true, "\(attribute) = \(sql) (stored as \(stored)): \(String(describing: one))")
            await expectDepotError(code) { try await samples.fetchAll() }
            #expect(try await samples.fetchOne(id: 2)?.optionalInt == 1, "the other record reads")
            await store.close()
        }
    }
}

/// A page reads at most its size: no statement counts the whole table first.
@Suite("SQLite: pages without counting the table")
struct SQLitePageCostTests {
    @Test("fetchFirst and unfiltered pages run no count(*) over the table")
    func firstPageDoesNotCount() async throws {
        try await withTemporaryDirectory { directory in
            let statements = SQLiteGroupCommitTests.Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let store = try SQLiteStore(path: directory.appendingPathComponent("pages.sqlite").path, log: StoreLog(logger: logger))
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.workload(count: 300))
            let before = statements.all.count
            #expect(try await cats.fetchFirst() != nil)
            #expect(try await cats.fetchAll(Request<CatRecord>.all.limit(20)).count == 20)
            #expect(try await cats.results.page(size: 20).items.count == 20)
            let reads = statements.all.dropFirst(before)
            #expect(!reads.isEmpty, "the trace shows the reads")
            #expect(!reads.contains { $0.lowercased().contains("count(") }, "\(reads)")
            // Without a limit the count still sizes the result (one walk of the b-tree).
            #expect(try await cats.fetchAll().count == 300)
            await store.close()
        }
    }
}
