#if canImport(Glibc)
import DepotCore
import DepotTesting
import Foundation
import Glibc
import Testing

import DepotPostgres

/// Values read from a query's result after libpq freed it.
///
/// Opening a store once asked `query(...).bytes(0, 0).first == 1` whether depot_meta
/// existed: the temporary result was released, and libpq's result freed, before the byte
/// was read. What the freed memory held decided the answer, which depended on what other
/// threads allocated meanwhile: now and then a fresh schema's store skipped creating
/// depot_meta and failed with 42P01 reading its format. glibc's `M_PERTURB` fills freed
/// memory with one byte value, which makes such a read give the same wrong answer every
/// time: 1 (true) on a fresh schema, and not 1 (false) on a schema that has the tables.
@Suite("PostgreSQL results are read before they are freed", .enabled(if: TestServer.available), .serialized)
struct PostgresResultLifetimeTests {
    /// glibc's `M_PERTURB` (malloc.h).
    static let perturb: Int32 = -6

    /// glibc's `mallopt`, which the Glibc module does not import (malloc.h is not in it).
    static let mallopt: (@convention(c) (Int32, Int32) -> Int32)? = dlsym(nil, "mallopt").map {
        unsafeBitCast($0, to: (@convention(c) (Int32, Int32) -> Int32).self)
    }

    /// Runs `body` with freed (and newly allocated) memory filled with `byte`. The setting
    /// is the process's: tests that run meanwhile have their memory filled too, which
    /// changes nothing for code that reads only memory it owns.
    func withFreedMemoryFilled<T>(with byte: Int32, _ body: () throws -> T) throws -> T {
        let mallopt = try #require(Self.mallopt, "glibc's mallopt")
        #expect(mallopt(Self.perturb, byte) == 1)
        defer { _ = mallopt(Self.perturb, 0) }
        return try body()
    }

    @Test("a store opens on a fresh schema and opens again on it, with freed memory overwritten")
    func openingReadsLiveResults() async throws {
        let schema = "t_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        // Freed memory reads as true: depot_meta must not be taken for existing.
        let fresh = try withFreedMemoryFilled(with: 1) { try TestServer.makeStore(schema: schema) }
        try await Controller<Cat, CatRecord>(store: fresh).save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        await fresh.close()
        // Freed memory reads as false: the existing tables must not be created again.
        let reopened = try withFreedMemoryFilled(with: 0xA5) { try TestServer.makeStore(schema: schema) }
        #expect(try await Controller<Cat, CatRecord>(store: reopened).fetchOne(id: 1)?.name == "Tom")
        // A read-only store checks the tables exist the same way.
        let readOnly = try withFreedMemoryFilled(with: 0xA5) {
            try PostgresStore(url: try #require(TestServer.url), options: .init(schema: schema, readers: 1, readOnly: true))
        }
        await readOnly.close()
        await reopened.close()
    }
}
#endif
