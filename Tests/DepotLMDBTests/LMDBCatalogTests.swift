import CLMDB
import DepotCore
import DepotTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

import DepotLMDB

/// Rewrites the stored schema of `Cat` in a closed store through LMDB itself.
func rewriteStoredCat(_ directory: String, _ change: @escaping @Sendable (inout StoredEntity) -> Void) async throws {
    let store = try LMDBStore(directory: directory)
    try await Controller<Cat, CatRecord>(store: store).save(Cat.fixtures)
    try await store.write { transaction in
        guard let t = transaction as? LMDBTransaction, var stored = try t.readStoredEntity("Cat") else {
            Issue.record("no stored Cat schema")
            return
        }
        change(&stored)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try t.put(t.metaDBI, Catalog.entityKey("Cat"), Array(try encoder.encode(stored)), context: "test")
    }
    await store.close()
}

@Suite("LMDB catalog: stored schemas are checked and followed")
struct LMDBCatalogTests {
    /// A read begins without the catalog's lock while no change is being published (the
    /// catalog's version is even and the same after the LMDB transaction began); one that
    /// overlaps a publishing commit begins again under the lock. Registrations publish a
    /// change with every commit here, while readers keep reading.
    @Test("reads that begin while registrations publish catalog changes see every entity registered before them")
    func readsDuringCatalogChanges() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(directory: directory.path)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.fixtures)
        let before = store.catalogVersion
        // Entities registered (and holding a record) so far; a read that begins after one
        // was added must resolve it, which a reader still holding an older catalog cannot.
        let registered = NIOLockedValueBox<[EntityHandle]>([])
        let done = NIOLockedValueBox(false)
        try await withThrowingTaskGroup(of: Int.self) { group in
            group.addTask {
                defer { done.withLockedValue { $0 = true } }
                for index in 0..<40 {
                    var entity = CatRecord.entity.description
                    entity.name = "Registered\(index)"
                    let handle = try await store.register(entity)
                    try await store.write { transaction in
                        var row = Row()
                        try CatRecord(id: 1, name: "in \(index)", weight: 1, age: 1).encode(into: &row)
                        try transaction.insert(row, into: handle)
                    }
                    registered.withLockedValue { $0.append(handle) }
                }
                return 0
            }
            for reader in 0..<4 {
                group.addTask {
                    var reads = 0
                    while !done.withLockedValue({ $0 }) || reads == 0 {
                        guard let handle = registered.withLockedValue({ $0.last }) else {
                            await Task.yield()
                            continue
                        }
                        let row = try await store.readRow(handle, key: .int(1))
                        #expect(row != nil, "reader \(reader): the record of \(handle.name)")
                        reads += 1
                    }
                    return reads
                }
            }
            var total = 0
            for try await reads in group { total += reads }
            #expect(total >= 4)
        }
        #expect(store.catalogVersion >= before + 80, "every registration published a change (two steps each)")
        #expect(store.catalogVersion % 2 == 0, "no change is left half-published")
        await store.close()
    }

    @Test("a stored schema that decodes but is invalid is refused with storeCorrupted", arguments: [0, 1, 2, 3, 4])
    func invalidStoredSchema(_ kind: Int) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try await rewriteStoredCat(directory.path) { stored in
            switch kind {
            case 0: stored.entity.primaryKeyIndex = 99
            case 1: stored.entity.primaryKeyIndex = -1
            case 2: stored.entity.attributes = []
            case 3: stored.entity.attributes.append(stored.entity.attributes[0])
            default: stored.schemaVersion = Int.max
            }
        }
        let store = try LMDBStore(directory: directory.path)
        await expectDepotError(.storeCorrupted) { try await Controller<Cat, CatRecord>(store: store).fetchAll() }
        await store.close()
    }

    /// Migrates `Cat` to `entity` the way another process sharing the directory would: in a
    /// committed write transaction, without this store's catalog knowing.
    static func migrateBehindTheCatalog(_ store: LMDBStore, to entity: EntityDescription) async throws {
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction else { return }
            _ = try t.register(entity, current: nil)
        }
    }

    static func indexEntries(_ store: LMDBStore, _ name: String) async throws -> Int {
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction, let dbi = try t.openDatabase(name, flags: Int32(MDB_DUPSORT)) else {
                return -1
            }
            return try t.entries(dbi)
        }
    }

    /// Whether the index database `name` holds the pair (value → id).
    static func indexHolds(_ store: LMDBStore, _ name: String, _ value: String, _ id: Int64) async throws -> Bool {
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction, let dbi = try t.openDatabase(name, flags: Int32(MDB_DUPSORT)) else {
                return false
            }
            let key = KeyEncoding.indexKey(.string(value))
            let primary = KeyEncoding.primaryKey(.int(id))
            return try t.withCursor(dbi) { cursor in
                LMDBTransaction.withVal(key) { k in
                    LMDBTransaction.withVal(primary) { v in mdb_cursor_get(cursor, &k, &v, MDB_GET_BOTH) == 0 }
                }
            }
        }
    }

    @Test("after another process adds an index, this store's writes maintain it")
    func followsAnotherProcessIndex() async throws {
        try await withStore { store, _ in
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.fixtures)
            var indexed = CatRecord.entity.description
            let name = try #require(indexed.index(of: "name"))
            indexed.attributes[name].isIndexed = true
            let target = indexed
            try await Self.migrateBehindTheCatalog(store, to: target)
            #expect(try await Self.indexEntries(store, "Cat.idx.name") == Cat.fixtures.count, "the migration built the index")
            // This store still runs the old declaration (no index on name): its writes must
            // keep the other process's index complete.
            try await cats.save(Cat(id: 500, name: "Newcomer", weight: 1, age: 1))
            try await cats.save(Cat(id: Cat.fixtures[0].id, name: "Renamed", weight: 1, age: 1))
            _ = try await cats.delete(id: Cat.fixtures[1].id)
            #expect(try await Self.indexEntries(store, "Cat.idx.name") == Cat.fixtures.count, "one added, one deleted, one renamed")
            let first = Cat.fixtures[0]
            let second = Cat.fixtures[1]
            #expect(try await Self.indexHolds(store, "Cat.idx.name", "Newcomer", 500))
            #expect(try await Self.indexHolds(store, "Cat.idx.name", "Renamed", first.id))
            #expect(try await !Self.indexHolds(store, "Cat.idx.name", first.name, first.id))
            #expect(try await !Self.indexHolds(store, "Cat.idx.name", second.name, second.id))
            // The other process's view: a controller with the indexed declaration finds the
            // rows through the index.
            let registered = try await store.register(target)
            let viaIndex = try await store.read { transaction -> [Int64] in
                var ids: [Int64] = []
                let query = try Query(entity: registered, predicate: .compare(attribute: "name", .equal, .string("Newcomer")))
                try transaction.fetchRows(query) { row in
                    if case .int(let id) = row[value: target.primaryKeyIndex] { ids.append(id) }
                }
                return ids
            }
            #expect(viaIndex == [500])
            #expect(try await cats.count() == Cat.fixtures.count)
        }
    }

    @Test("after another process adds an attribute, this store refuses old-layout writes and reads")
    func refusesOldLayoutAfterAnotherProcessAddsAttribute() async throws {
        try await withStore { store, _ in
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.fixtures)
            try await Self.migrateBehindTheCatalog(store, to: CatRecordV2.entity.description)
            // Writing the old layout would store rows the new schema cannot read, and would
            // reset attributes the other process set: refused with a clear message.
            await expectDepotError(.schemaMismatch) { try await cats.save(Cat(id: 500, name: "Old", weight: 1, age: 1)) }
            await expectDepotError(.schemaMismatch) { try await cats.fetchAll() }
            let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
            let rows = try await grown.fetchAll()
            #expect(rows.count == Cat.fixtures.count, "every row readable in the new layout")
            try await grown.save(CatRecordV2(id: 600, name: "New", weight: 1, age: 1, color: "red", lives: 3))
            #expect(try await grown.fetchAll(Request(\.name == "New")).map(\.id) == [600])
        }
    }

    @Test("stored schema bytes that are not a valid schema are refused, never trapped on")
    func parseJunk() throws {
        let valid = try JSONEncoder().encode(StoredEntity(schemaVersion: 1, recordFormat: 1, entity: CatRecord.entity.description))
        let text = String(decoding: valid, as: UTF8.self)
        let inputs: [String] = [
            "", "{}", "null", "[1,2]", String(repeating: "[", count: 10_000),
            text.replacingOccurrences(of: "\"primaryKeyIndex\":0", with: "\"primaryKeyIndex\":-9223372036854775808"),
            text.replacingOccurrences(of: "\"schemaVersion\":1", with: "\"schemaVersion\":-1"),
            text.replacingOccurrences(of: "\"recordFormat\":1", with: "\"recordFormat\":99"),
            text.replacingOccurrences(of: "\"name\":\"Cat\"", with: "\"name\":\"Dog\""),
        ]
        for input in inputs {
            #expect(throws: DepotError.self, "\(input.prefix(80))") {
                try Array(input.utf8).withUnsafeBytes { try StoredEntity.parse($0, name: "Cat", store: "test") }
            }
        }
        let parsed = try Array(valid).withUnsafeBytes { try StoredEntity.parse($0, name: "Cat", store: "test") }
        #expect(parsed.entity == CatRecord.entity.description)
    }
}
