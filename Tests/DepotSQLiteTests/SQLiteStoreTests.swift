import CSQLite
import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Testing

import DepotSQLite

/// Runs the `sqlite3` command line on a database and returns what it printed.
func sqlite3CLI(_ path: String, _ sql: String) throws -> String {
    let result = try ProcessLaunch.run("/usr/bin/sqlite3", ["-bail", path, sql])
    if !result.exit.succeeded {
        Issue.record("sqlite3 ended with \(result.exit): \(result.stderr)")
    }
    return result.stdout
}

/// Expects `body` to throw a `DepotError` with `code` and returns it.
@discardableResult
func expectDepotError<T>(_ code: DepotError.Code, _ body: () async throws -> T) async -> DepotError? {
    do {
        let value = try await body()
        Issue.record("expected DepotError.\(code), got \(value)")
    } catch let error as DepotError {
        #expect(error.code == code, "\(error)")
        return error
    } catch {
        Issue.record("expected DepotError.\(code), got \(error)")
    }
    return nil
}

typealias Cats = Controller<Cat, CatRecord>

@Suite("SQLiteStore files, schema and concurrency")
struct SQLiteStoreTests {
    struct Room: Codable, Hashable, JSONAttribute {
        var name: String
        var size: Double
    }

    @Record struct House {
        var id: Int64
        var rooms: [Room]
        var owner: [String: String]
    }

    @Test func sqlite3JSONFunctionsReadCodableAttributes() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("houses.sqlite").path
            let store = try SQLiteStore(path: path)
            let houses = Controller<House, House>(store: store)
            try await houses.save(House(id: 1, rooms: [Room(name: "kitchen", size: 12.5), Room(name: "hall", size: 4)], owner: ["name": "Ann", "city": "Oslo"]))
            await store.close()
            #expect(try sqlite3CLI(path, "SELECT json_extract(rooms, '$[0].name'), json_extract(owner, '$.city') FROM House;") == "kitchen|Oslo\n")
            #expect(try sqlite3CLI(path, "SELECT json_array_length(rooms), json_valid(owner) FROM House;") == "2|1\n")
            #expect(try sqlite3CLI(path, "SELECT owner FROM House;") == "{\"city\":\"Oslo\",\"name\":\"Ann\"}\n", "canonical: keys sorted")
        }
    }

    @Test func theSqlite3CommandLineReadsWhatDepotWrote() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("cats.sqlite").path
            let store = try SQLiteStore(path: path)
            let cats = Cats(store: store)
            try await cats.save([
                Cat(id: 1, name: "Tom", weight: 4.5, age: 3), Cat(id: 2, name: "O'Malley", weight: 6.25, age: 7),
            ])
            // While the store is open, through WAL.
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM Cat;") == "2\n")
            await store.close()

            let rows = try sqlite3CLI(path, "SELECT id, name, weight, age FROM Cat ORDER BY id;")
            #expect(rows == "1|Tom|4.5|3\n2|O'Malley|6.25|7\n")
            let schema = try sqlite3CLI(path, ".schema Cat")
            #expect(schema.contains("CREATE TABLE") && schema.contains("\"Cat\" ("), "\(schema)")
            #expect(schema.contains("\"id\" INTEGER PRIMARY KEY NOT NULL"), "\(schema)")
            #expect(schema.contains("\"name\" TEXT NOT NULL"), "\(schema)")
            #expect(schema.contains("CREATE INDEX \"depot_idx_3_Cat_age\""), "the declared index: \(schema)")
            #expect(try sqlite3CLI(path, "SELECT name FROM Cat WHERE age > 5;") == "O'Malley\n")
            #expect(try sqlite3CLI(path, "SELECT name FROM depot_entities;") == "Cat\n")
            #expect(try sqlite3CLI(path, "SELECT value FROM depot_meta WHERE key = 'format';") == "1\n")
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "the WAL is checkpointed and removed on close")
        }
    }

    @Test func aFileThatIsNotADatabaseIsRefusedAndLeftAlone() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("notes.sqlite").path
            let text = Data(String(repeating: "These are notes, not a database.\n", count: 300).utf8)
            try text.write(to: URL(fileURLWithPath: path))
            let error = await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(error?.nativeCode.map(SQLiteCode.primary) == SQLITE_NOTADB, "SQLITE_NOTADB kept: \(String(describing: error))")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == text, "the file is unchanged")

            var generator = SplitMix64(seed: 3)
            let noise = Data((0..<8192).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
            try noise.write(to: URL(fileURLWithPath: path))
            await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == noise, "the file is unchanged")
        }
    }

    @Test func aCorruptDatabaseIsRefusedAndLeftAlone() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("damaged.sqlite").path
            let store = try SQLiteStore(path: path)
            try await Cats(store: store).save(Cat.workload(count: 500))
            await store.close()
            // Keep the valid header but wreck the b-tree page that holds the schema.
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            for i in 100..<400 { bytes[i] = 0xA5 }
            try bytes.write(to: URL(fileURLWithPath: path))
            let error = await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(error?.message.contains(path) == true, "the message names the file: \(String(describing: error))")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes, "the file is unchanged")
        }
    }

    @Test func anAdditiveChangeKeepsRowsAcrossCloseAndReopen() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("grow.sqlite").path
            let cats = Cat.workload(count: 50, seed: 11)
            do {
                let store = try SQLiteStore(path: path)
                try await Cats(store: store).save(cats)
                await store.close()
            }
            do {
                let store = try SQLiteStore(path: path)
                let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
                let migrated = try await grown.fetchAll()
                #expect(migrated.map(\.name) == cats.map(\.name))
                #expect(migrated.allSatisfy { $0.color == nil && $0.lives == 9 })
                try await grown.save(CatRecordV2(id: 1000, name: "Nova", weight: 1, age: 1, color: "grey", lives: 7))
                await store.close()
            }
            let schema = try sqlite3CLI(path, ".schema Cat")
            #expect(schema.contains("\"lives\" INTEGER NOT NULL DEFAULT 9"), "\(schema)")
            #expect(schema.contains("depot_idx_3_Cat_name"), "the new index: \(schema)")
            do {
                let store = try SQLiteStore(path: path)
                let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
                #expect(try await grown.count() == 51)
                #expect(try await grown.fetchAll(Request(\.color == "grey")).map(\.id) == [1000])
                #expect(try await grown.count(Request(\.lives == 9)) == 50)
                await store.close()
            }
        }
    }

    @Test func anIncompatibleChangeIsRefusedAfterReopen() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("retype.sqlite").path
            do {
                let store = try SQLiteStore(path: path)
                try await Cats(store: store).save(Cat.workload(count: 20))
                await store.close()
            }
            let store = try SQLiteStore(path: path)
            let retyped = Controller<CatRecordRetyped, CatRecordRetyped>(store: store)
            let error = await expectDepotError(.schemaMismatch) { try await retyped.fetchAll() }
            #expect(error?.message.contains("age") == true, "\(String(describing: error))")
            #expect(try await Cats(store: store).count() == 20, "the stored records still load")
            await store.close()
            let stored = try sqlite3CLI(path, "SELECT description FROM depot_entities WHERE name = 'Cat';")
            #expect(stored.contains("\"int64\"") && !stored.contains("\"string\",\"name\":\"age\""), "the stored schema is unchanged")
        }
    }

    /// Defaults given to existing rows by `ALTER TABLE`, including ones that cannot be
    /// written as an exact literal and values that look like SQL.
    @Test func defaultsOfEveryKindReachExistingRowsExactly() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("defaults.sqlite").path
            let v1 = EntityDescription(name: "Thing", attributes: [.init(name: "id", type: .int64)], primaryKeyIndex: 0)
            let u = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!
            let defaults: [(String, AttributeType, Value)] = [
                ("note", .string, .string("'); DROP TABLE Thing; --")), ("nul", .string, .string("a\0b")),
                ("ratio", .double, .double(0.1)), ("notANumber", .double, .double(.nan)),
                ("whole", .double, .double(-3)), ("bytes", .data, .data(Data([0, 1, 255]))),
                ("empty", .data, .data(Data())), ("moment", .date, .date(Date(timeIntervalSinceReferenceDate: 12.5))),
                ("flag", .bool, .bool(true)), ("big", .int64, .int(.min)), ("tag", .uuid, .uuid(u)),
            ]
            var attributes = v1.attributes
            for (name, type, value) in defaults { attributes.append(.init(name: name, type: type, defaultValue: value)) }
            attributes.append(.init(name: "maybe", type: .string, isOptional: true))
            let v2 = EntityDescription(name: "Thing", attributes: attributes, primaryKeyIndex: 0)

            do {
                let store = try SQLiteStore(path: path)
                let v1 = try await store.register(v1)
                try await store.write { t in
                    try t.insert(Row([.int(1)]), into: v1)
                    try t.insert(Row([.int(2)]), into: v1)
                }
                await store.close()
            }
            let store = try SQLiteStore(path: path)
            let registered = try await store.register(v2)
            let rows = try await store.read { t in
                var rows: [Row] = []
                try t.fetchRows(Query(all: registered)) { rows.append($0) }
                return rows
            }
            #expect(rows.count == 2)
            for row in rows {
                #expect(row.allValues.dropFirst() == ArraySlice(defaults.map(\.2) + [.null]), "\(row.allValues)")
            }
            await store.close()
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM Thing;") == "2\n")
        }
    }

    @Test func hostileStringsAreStoredAndMatchedVerbatim() async throws {
        let store = try SQLiteStore.inMemory()
        let hostile = [
            "' OR 1=1 --", "'; DROP TABLE Account; --", "\"; DELETE FROM depot_entities; --", "Robert'); DROP TABLE Students;--",
            "%", "_", "a%b_c", "\\", "\0", "x\0y", "?1", ":name", "$1", "''''", "\"\"", "🐈' OR ''='",
        ]
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.insert(hostile.enumerated().map { Account(id: $0.element, owner: "owner \($0.element)", nickname: $0.element, balance: Int64($0.offset)) })
        for (i, text) in hostile.enumerated() {
            #expect(try await accounts.fetchOne(id: text)?.balance == Int64(i), "key \(text.debugDescription)")
            #expect(try await accounts.fetchAll(Request(\.owner == "owner " + text)).map(\.id) == [text])
            #expect(try await accounts.fetchAll(Request(.hasPrefix(\.nickname, text))).map(\.id).contains(text))
            #expect(try await accounts.count(Request(.contains(\.owner, text))) >= 1)
        }
        #expect(try await accounts.fetchAll(Request(.in(\.id, ["' OR 1=1 --", "nobody"]))).map(\.id) == ["' OR 1=1 --"])
        #expect(try await accounts.count(Request(\.id == "' OR 1=1 --")) == 1)
        #expect(try await accounts.count(Request(.hasPrefix(\.id, "%"))) == 1, "no LIKE wildcards")
        #expect(try await accounts.count() == hostile.count, "every row, and the table, still there")
        await store.close()
    }

    @Test func readersRunWhileALongWriteTransactionIsOpen() async throws {
        let store = try SQLiteStore.inMemory(options: .init(readers: 3))
        let cats = Cats(store: store)
        try await cats.save(Cat.workload(count: 100))
        let entity = try await cats.registeredEntity()
        let writing = DispatchSemaphore(value: 0)
        let finishWrite = DispatchSemaphore(value: 0)
        async let written: Void = withCheckedThrowingContinuation { continuation in
            store.submitWrite({ transaction in
                try transaction.insert(Row([.int(1000), .string("Pending"), .double(1), .int(1)]), into: entity)
                writing.signal()
                // Holds the write transaction open until the readers are done. The timeout
                // only keeps a broken store from hanging the run: it must outlast a slow
                // machine (Thread Sanitizer on a loaded CI host).
                _ = finishWrite.wait(timeout: .now() + 300)
            }) { continuation.resume(with: $0) }
        }
        try #require(await signalled(writing, within: 300), "the write started")
        // Three reads that wait for each other inside their transactions: they finish only
        // if they run at the same time, and while the writer holds its transaction.
        let rendezvous = DispatchGroup()
        for _ in 0..<3 { rendezvous.enter() }
        let counts = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    try await store.read { transaction in
                        let count = try transaction.count(Query(all: entity))
                        rendezvous.leave()
                        guard rendezvous.wait(timeout: .now() + 240) == .success else {
                            throw DepotError(.busy, "the readers did not run in parallel")
                        }
                        return count
                    }
                }
            }
            var counts: [Int] = []
            for try await count in group { counts.append(count) }
            return counts
        }
        #expect(counts == [100, 100, 100], "readers see the committed state, not the open write")
        #expect(try await cats.fetchOne(id: 1000) == nil)
        finishWrite.signal()
        try await written
        #expect(try await cats.fetchOne(id: 1000)?.name == "Pending")
        await store.close()
    }

    @Test(arguments: [(SQLiteStore.Durability.normal, 1), (.full, 2)])
    func durabilitySettingsReadBack(durability: SQLiteStore.Durability, synchronous: Int) async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(path: directory.appendingPathComponent("d.sqlite").path, options: .init(durability: durability))
            let settings = try await store.pragmaSettings()
            #expect(settings.journalMode == "wal")
            #expect(settings.synchronous == synchronous)
            await store.close()
        }
    }

    @Test func theInMemoryStoreIsWALWithoutSyncAndRemovedOnClose() async throws {
        let store = try SQLiteStore.inMemory()
        let settings = try await store.pragmaSettings()
        #expect(settings.journalMode == "wal")
        #expect(settings.synchronous == 0)
        #expect(store.isInMemory && FileManager.default.fileExists(atPath: store.path))
        await store.close()
        await store.close()
        #expect(!FileManager.default.fileExists(atPath: store.path))
        await expectDepotError(.closed) { try await store.pragmaSettings() }
    }

    @Test func badOptionsAndPathsAreRefused() async throws {
        try await withTemporaryDirectory { directory in
            await expectDepotError(.invalidConfiguration) { try SQLiteStore(path: directory.path) }
            await expectDepotError(.invalidConfiguration) { try SQLiteStore(path: "") }
            await expectDepotError(.invalidConfiguration) {
                try SQLiteStore(path: directory.appendingPathComponent("x.sqlite").path, options: .init(readers: 0))
            }
            await expectDepotError(.invalidConfiguration) {
                try SQLiteStore(path: directory.appendingPathComponent("x.sqlite").path, options: .init(readers: 100_000))
            }
        }
    }

    @Test func aTableDepotDidNotCreateIsNotAdopted() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("foreign.sqlite").path
            _ = try sqlite3CLI(path, "CREATE TABLE cat (x TEXT);")
            // Another program's file is refused at open unless adopted (SQLiteOpeningTests);
            // adopted, its tables are still never taken for an entity's.
            let store = try SQLiteStore(path: path, options: .init(adoptForeignDatabase: true))
            await expectDepotError(.invalidSchema) { try await Cats(store: store).count() }
            await store.close()
        }
    }

    @Test func aDamagedEntityDescriptionIsReportedNotTrusted() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("tampered.sqlite").path
            let store = try SQLiteStore(path: path)
            _ = try await Cats(store: store).count()
            await store.close()
            _ = try sqlite3CLI(path, "UPDATE depot_entities SET description = '{\"name\":\"Cat\",\"attributes\":[],\"primaryKeyIndex\":0}';")
            await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
        }
    }

    @Test func fetchReservesTheRowCountAndLargeInListsWork() async throws {
        let store = try SQLiteStore.inMemory()
        let cats = Cats(store: store)
        try await cats.save(Cat.workload(count: 3000))
        let entity = try await cats.registeredEntity()
        func fetch(limit: Int?) async throws -> (reserved: [Int], fetched: Int) {
            try await store.read { t in
                var reserved: [Int] = []
                var fetched = 0
                let query = try Query(entity: entity, predicate: .constant(true), limit: limit, offset: 1000)
                try t.fetch(query, reserve: { reserved.append($0) }) { _ in fetched += 1 }
                return (reserved, fetched)
            }
        }
        // A page reserves its size (counting the table would cost a walk of all of it);
        // a read of every row reserves the count.
        let page = try await fetch(limit: 2500)
        #expect(page.reserved == [2500] && page.fetched == 2000)
        let rest = try await fetch(limit: nil)
        #expect(rest.reserved == [2000] && rest.fetched == 2000)
        let ids = (1...5000).map { Int64($0 * 2) }
        #expect(try await cats.count(Request(.in(\.id, ids))) == 1500)
        #expect(try await cats.deleteAll(where: .notIn(\.id, ids)) == 1500)
        #expect(try await cats.count() == 1500)
        await store.close()
    }
}

@Suite("SQLite full disk")
struct SQLiteFullDiskTests {
    /// A full database refuses the write with storeFull, keeps everything it had, and works
    /// again once there is room.
    @Test func fullDatabaseRefusesTheWriteAndLosesNothing() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SQLiteStore(path: directory.appendingPathComponent("full.sqlite").path)
        let cats = Controller<Cat, CatRecord>(store: store)
        let first = Cat.workload(count: 200)
        try await cats.save(first)
        try await store.limitPages(to: 8)
        do {
            try await cats.save(Cat.workload(count: 20_000, seed: 9).map { Cat(id: $0.id + 1_000, name: $0.name, weight: $0.weight, age: $0.age) })
            Issue.record("the write should not fit")
        } catch let error as DepotError {
            #expect(error.code == .storeFull, "\(error)")
        }
        #expect(try await cats.count() == 200)
        #expect(try await cats.fetchAll() == first)
        try await store.limitPages(to: 1_000_000)
        try await cats.save(Cat(id: 5_000_000, name: "Room", weight: 1, age: 1))
        #expect(try await cats.count() == 201)
        await store.close()
    }
}
