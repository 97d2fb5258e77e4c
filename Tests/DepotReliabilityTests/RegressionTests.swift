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
        let first = try await openStore(url: url)
        let second = try await openStore(url: url)  // reads depot_entities now: empty
        try await Controller<Cat, CatRecord>(store: first).save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        let cats = Controller<Cat, CatRecord>(store: second)
        try await cats.save(Cat(id: 2, name: "Felix", weight: 5, age: 9))
        #expect(try await cats.fetchAll().map(\.id) == [1, 2])
        await first.close()
        await second.close()
    }

    /// Found by the truncated-file test: LMDB trusted the page count in the meta page and
    /// read past the end of a truncated data.mdb, and the process died of SIGBUS.
    @Test("LMDB: a data.mdb cut short is refused with storeCorrupted, not a SIGBUS")
    func lmdbTruncatedDataFile() async throws {
        let directory = TemporaryDirectory("reg")
        defer { directory.remove() }
        let valid = try await validStoreBytes(.lmdb, in: directory)
        try await BadFileTests.expectRefused(.lmdb, valid.prefix(valid.count - 4096), codes: corrupted, "one page short")
    }

    /// Found by the random-file test: SQLite takes a file shorter than its header for an
    /// empty database, so Depot wrote a new database over a 1-byte file it did not create.
    @Test("SQLite: a file shorter than a header is refused, not overwritten")
    func sqliteTinyFile() async throws {
        try await BadFileTests.expectRefused(.sqlite, Data([0x42]), codes: corrupted, "a 1-byte file")
        try await BadFileTests.expectRefused(.sqlite, Data("SQLite format 3\u{0}".utf8), codes: corrupted, "a bare magic string")
    }

    /// Found by the truncated-file test: SQLite reads a page cut short as if the missing
    /// bytes were zeros, so a database that lost its last byte opened and returned a
    /// damaged record without any error.
    @Test("SQLite: a database cut by one byte is refused, not read with zeros")
    func sqliteCutByOneByte() async throws {
        let directory = TemporaryDirectory("reg")
        defer { directory.remove() }
        let valid = try await validStoreBytes(.sqlite, in: directory)
        try await BadFileTests.expectRefused(.sqlite, valid.prefix(valid.count - 1), codes: corrupted, "one byte short")
    }
}
