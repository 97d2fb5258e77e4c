import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

import DepotSQLite

/// A list endpoint's record: pets of one species by name, and by birth year, newest first.
@Record(indexes: [.index("species", "name"), .index("species", .descending("born"))])
struct ListedPet: Hashable {
    var id: Int64
    var species: String
    var name: String
    var born: Int64?
}

/// The same record keyed by a UUID: a WITHOUT ROWID table, whose indexes end with the key
/// rather than a rowid.
@Record(name: "ListedPetByUUID", indexes: [.index("species", "name")])
struct ListedPetByUUID: Hashable {
    var id: UUID
    var species: String
    var name: String
}

/// Issue #37: SQLite uses the declared composite indexes for the statements Depot writes
/// for the requests a list endpoint makes, reading entries in the index's order (no temp
/// B-tree) and seeking to a cursor page instead of reading the rows before it. The plans
/// are SQLite's own, for the statements the store ran (from its trace, values expanded).
@Suite("SQLite composite indexes")
struct SQLiteCompositeIndexTests {
    static let species = ["cat", "dog", "bird", "fish"]

    static func pets(_ count: Int) -> [ListedPet] {
        var pets: [ListedPet] = []
        for i in 0..<count {
            let born: Int64? = i % 5 == 0 ? nil : Int64(2000 + i % 20)
            pets.append(ListedPet(id: Int64(i + 1), species: species[i % species.count], name: "n\((i * 7_919) % 1_000)", born: born))
        }
        return pets
    }

    /// The plan SQLite gives `sql` on the file (the sqlite3 program, as the tests do
    /// elsewhere), one line per step.
    static func plan(_ path: String, _ sql: String) throws -> String {
        try sqlite3CLI(path, "EXPLAIN QUERY PLAN \(sql);")
    }

    /// Runs `body` and returns the SELECT statements it made on `table`.
    static func selects(_ statements: SQLiteGroupCommitTests.Statements, on table: String, _ body: () async throws -> Void) async throws -> [String] {
        let before = statements.all.count
        try await body()
        return statements.all[before...].filter { $0.hasPrefix("SELECT") && $0.contains("FROM \"\(table)\"") }
    }

    static func expectIndexed(
        _ path: String, _ statements: [String], index: String, what: String, sorted: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        #expect(!statements.isEmpty, "\(what): no statement ran", sourceLocation: sourceLocation)
        for sql in statements {
            let plan = try plan(path, sql)
            #expect(plan.contains("INDEX \(index)"), "\(what): \(sql)\n\(plan)", sourceLocation: sourceLocation)
            #expect(!plan.contains("SCAN "), "\(what): no full scan: \(sql)\n\(plan)", sourceLocation: sourceLocation)
            if sorted {
                #expect(!plan.contains("TEMP B-TREE"), "\(what): read in the index's order, no sort: \(sql)\n\(plan)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func requestsOfAListEndpointReadTheCompositeIndexInOrder() async throws {
        try await withTemporaryDirectory { directory in
            let statements = SQLiteGroupCommitTests.Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let path = directory.appendingPathComponent("pets.sqlite").path
            let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
            let pets = Controller<ListedPet, ListedPet>(store: store)
            let all = Self.pets(2_000)
            try await pets.save(all)
            let byName = "depot_cidx_9_ListedPet_ix_7_species_4_name"
            let byBorn = "depot_cidx_9_ListedPet_ix_7_species_4_born_d"
            let schema = try sqlite3CLI(path, ".schema ListedPet")
            #expect(schema.contains("CREATE INDEX \"\(byName)\" ON \"ListedPet\" (\"species\" ASC, \"name\" ASC)"), "\(schema)")
            #expect(schema.contains("CREATE INDEX \"\(byBorn)\" ON \"ListedPet\" (\"species\" ASC, \"born\" DESC, \"id\" ASC)"), "\(schema)")

            func ordered(_ filter: (ListedPet) -> Bool) -> [ListedPet] {
                all.filter(filter).sorted { ($0.name.utf8.lexicographicallyPrecedes($1.name.utf8)) || ($0.name == $1.name && $0.id < $1.id) }
            }

            // The list page: equality on the first component, sorted by the second.
            var page: [ListedPet] = []
            var sql = try await Self.selects(statements, on: "ListedPet") {
                page = try await pets.fetchAll(Request(\.species == "cat").sorted(by: \.name).limit(20))
            }
            #expect(page == Array(ordered { $0.species == "cat" }.prefix(20)))
            try Self.expectIndexed(path, sql, index: byName, what: "equality prefix, sorted by the rest")

            // Equality, then a range on the next component.
            sql = try await Self.selects(statements, on: "ListedPet") {
                page = try await pets.fetchAll(Request(\.species == "dog" && \.name > "n5").sorted(by: \.name).limit(20))
            }
            #expect(page == Array(ordered { $0.species == "dog" && $0.name > "n5" }.prefix(20)))
            try Self.expectIndexed(path, sql, index: byName, what: "equality and a range")

            // IN on the first component, sorted by both components: each value's range in order.
            sql = try await Self.selects(statements, on: "ListedPet") {
                page = try await pets.fetchAll(Request(.in(\.species, ["bird", "fish"])).sorted(by: \.species).sorted(by: \.name).limit(20))
            }
            #expect(page.count == 20 && page.allSatisfy { $0.species == "bird" })
            try Self.expectIndexed(path, sql, index: byName, what: "IN on the first component")

            // A count reads the index's range.
            var count = 0
            sql = try await Self.selects(statements, on: "ListedPet") { count = try await pets.count(Request(\.species == "cat")) }
            #expect(count == 500)
            // Either index starting with the species serves it.
            try Self.expectIndexed(path, sql, index: "depot_cidx_9_ListedPet_ix_7_species_4_", what: "count")

            // A descending component, the key ascending after it (Depot's tie-break).
            sql = try await Self.selects(statements, on: "ListedPet") {
                page = try await pets.fetchAll(Request(\.species == "fish").sorted(by: \.born, ascending: false).limit(20))
            }
            #expect(page.count == 20)
            try Self.expectIndexed(path, sql, index: byBorn, what: "descending component")

            // Cursor pages: each one seeks to its cursor through the index.
            let set = pets.results.filter(\.species == "cat").sorted(by: \.name)
            var walked: [ListedPet] = []
            var cursor: PageCursor?
            var pageStatements: [String] = []
            repeat {
                var next: Page<ListedPet>?
                let ran = try await Self.selects(statements, on: "ListedPet") { next = try await set.page(size: 60, after: cursor) }
                if cursor != nil { pageStatements += ran }
                walked += next?.items ?? []
                cursor = next?.next
            } while cursor != nil
            #expect(walked == ordered { $0.species == "cat" }, "every cat once, in order")
            try Self.expectIndexed(path, pageStatements, index: byName, what: "cursor page")
            for sql in pageStatements {
                let plan = try Self.plan(path, sql)
                #expect(plan.contains("species=? AND name>?"), "a cursor page seeks to its cursor: \(sql)\n\(plan)")
            }
            await store.close()
        }
    }

    @Test func aTableKeyedByAUUIDEndsItsIndexesWithTheKey() async throws {
        try await withTemporaryDirectory { directory in
            let statements = SQLiteGroupCommitTests.Statements()
            var logger = Logger(label: "test.depot") { _ in statements }
            logger.logLevel = .trace
            let path = directory.appendingPathComponent("uuid.sqlite").path
            let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
            let pets = Controller<ListedPetByUUID, ListedPetByUUID>(store: store)
            try await pets.save((0..<200).map { ListedPetByUUID(id: UUID(), species: Self.species[$0 % 4], name: "n\($0 % 10)") })
            let sql = try await Self.selects(statements, on: "ListedPetByUUID") {
                _ = try await pets.results.filter(\.species == "cat").sorted(by: \.name).page(size: 20)
            }
            try Self.expectIndexed(path, sql, index: "depot_cidx_15_ListedPetByUUID_ix_7_species_4_name", what: "UUID key")
            await store.close()
        }
    }

    @Test func indexesAddedAndRemovedWithTheDeclaration() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("migrate.sqlite").path
            let messages = LogMessages()
            var logger = Logger(label: "test.depot") { _ in messages }
            logger.logLevel = .info
            let plain = try EntityDescription(
                name: "Pet", attributes: [.init(name: "id", type: .int64), .init(name: "species", type: .string), .init(name: "name", type: .string)],
                primaryKey: "id")
            var indexed = plain
            indexed.indexes = [.index("species", "name")]
            var unique = plain
            unique.indexes = [.unique("species", "name")]
            do {
                let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
                let handle = try await store.register(plain)
                try await store.write { transaction in
                    for i in 1...10 {
                        try transaction.insert(Row([.int(Int64(i)), .string(i % 2 == 0 ? "cat" : "dog"), .string(i <= 4 ? "same" : "n\(i)")]), into: handle)
                    }
                }
                await store.close()
            }
            let name = "depot_cidx_3_Pet_ix_7_species_4_name"
            // Added to an existing store when it opens: built over the existing records.
            do {
                let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
                _ = try await store.register(indexed)
                await store.close()
            }
            #expect(try sqlite3CLI(path, ".schema Pet").contains(name))
            #expect(messages.all.contains("Depot index build started Pet species, name"), "\(messages.all)")
            #expect(messages.all.contains("Depot index built Pet species, name 10"), "\(messages.all)")
            // Unique over records that already share its values: refused, nothing changed.
            do {
                let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
                await #expect(throws: DepotError.self) { _ = try await store.register(unique) }
                do {
                    _ = try await store.register(unique)
                } catch let error as DepotError {
                    #expect(error.code == .schemaMismatch, "\(error)")
                }
                await store.close()
            }
            #expect(try sqlite3CLI(path, "SELECT sql FROM sqlite_master WHERE name = '\(name)'").contains("CREATE INDEX"), "the index as it was")
            // Removed from the declaration: kept, until a migration step drops it.
            do {
                let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
                let handle = try await store.register(plain)
                #expect(handle.entity.indexes == indexed.indexes)
                await store.close()
            }
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM sqlite_master WHERE name = '\(name)'") == "1\n")
            do {
                let store = try SQLiteStore(path: path, log: StoreLog(logger: logger))
                var migrator = Migrator()
                migrator.dropIndex("drop-pet-species-name", .index("species", "name"), from: "Pet")
                #expect(try await migrator.migrate(store, registering: []) == ["drop-pet-species-name"])
                #expect(try await store.register(plain).entity.indexes == [])
                await store.close()
            }
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM sqlite_master WHERE name = '\(name)'") == "0\n")
        }
    }
}

/// Collects each log message with its entity, index and record count, as one line.
final class LogMessages: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var collected: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
        let parts = ["depot.entity", "depot.index", "depot.records"].compactMap { event.metadata?[$0].map { "\($0)" } }
        lock.lock()
        collected.append(([event.message.description] + parts).joined(separator: " "))
        lock.unlock()
    }
    var all: [String] {
        lock.lock()
        defer { lock.unlock() }
        return collected
    }
}
