import Depot
import DepotTesting
import Foundation
import Testing

/// Each defect the reliability tests found, kept as a small deterministic test.
@Suite("regressions found by the reliability tests")
struct RegressionTests {
    /// Found by the two-process crash test: the second process to register an entity
    /// trusted the entity list it had read at open, saw a table it did not know and refused
    /// it as "a table Depot did not create".
    @Test("SQLite: an entity registered by another connection after open is adopted, not refused")
    func sqliteRegistrationByAnotherConnection() async throws {
        let directory = TemporaryDirectory("reg")
        defer { directory.remove() }
        let url = Backend.sqlite.url(in: directory)
        let first = try openStore(url: url)
        let second = try openStore(url: url)  // reads depot_entities now: empty
        try await Controller<Cat, CatRecord>(store: first).save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        let cats = Controller<Cat, CatRecord>(store: second)
        try await cats.save(Cat(id: 2, name: "Felix", weight: 5, age: 9))
        #expect(try await cats.fetchAll().map(\.id) == [1, 2])
        await first.close()
        await second.close()
    }
}
