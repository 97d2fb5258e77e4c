import ToolsCSQLite
import DepotTesting
import Dispatch
import Foundation

/// SQLite through its C API, written as fast as we can: prepared statements reused,
/// columns read by index, arrays reserved from a count. The yardstick for `sqlite`.
final class RawSQLiteSubject: BenchSubject {
    let name = "raw-sqlite"
    let rawCounterpart: String? = nil
    let synchronous: String
    private var db: OpaquePointer?
    private var path = ""
    private var statements: [String: OpaquePointer] = [:]

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// - Parameter synchronous: `NORMAL` or `FULL`, matching Depot's durability setting.
    init(synchronous: String) { self.synchronous = synchronous }

    private func check(_ code: Int32, _ what: String, on handle: OpaquePointer? = nil) throws {
        guard code == SQLITE_OK || code == SQLITE_DONE || code == SQLITE_ROW else {
            let message = (handle ?? db).flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "?"
            throw BenchError("raw-sqlite \(what): \(code) \(message)")
        }
    }

    fileprivate static func connect(_ path: String, synchronous: String) throws -> OpaquePointer {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
            sqlite3_close(handle)
            throw BenchError("raw-sqlite cannot open \(path)")
        }
        sqlite3_busy_timeout(handle, 5_000)
        sqlite3_exec(handle, "PRAGMA journal_mode=WAL; PRAGMA synchronous=\(synchronous);", nil, nil, nil)
        return handle
    }

    func open(at directory: URL) async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("raw.sqlite").path
        let handle = try Self.connect(path, synchronous: synchronous)
        db = handle
        try check(
            sqlite3_exec(
                handle,
                "CREATE TABLE IF NOT EXISTS Cat(id INTEGER PRIMARY KEY, name TEXT NOT NULL, weight REAL NOT NULL, age INTEGER NOT NULL); CREATE INDEX IF NOT EXISTS Cat_age ON Cat(age);",
                nil, nil, nil), "create table")
    }

    func close() async {
        for statement in statements.values { sqlite3_finalize(statement) }
        statements = [:]
        sqlite3_close_v2(db)
        db = nil
    }

    private func statement(_ sql: String) throws -> OpaquePointer {
        if let cached = statements[sql] { return cached }
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v3(db, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil), "prepare \(sql)")
        guard let statement else { throw BenchError("raw-sqlite: empty statement") }
        statements[sql] = statement
        return statement
    }

    private func exec(_ sql: String) throws { try check(sqlite3_exec(db, sql, nil, nil, nil), sql) }

    private func insert(_ cat: Cat, with statement: OpaquePointer) throws {
        sqlite3_bind_int64(statement, 1, cat.id)
        var name = cat.name
        name.withUTF8 { _ = sqlite3_bind_text(statement, 2, $0.baseAddress, Int32($0.count), Self.transient) }
        sqlite3_bind_double(statement, 3, cat.weight)
        sqlite3_bind_int64(statement, 4, Int64(cat.age))
        let code = sqlite3_step(statement)
        sqlite3_reset(statement)
        try check(code, "insert")
    }

    private static let upsertSQL = "INSERT INTO Cat(id, name, weight, age) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET name = excluded.name, weight = excluded.weight, age = excluded.age"

    func saveAll(_ cats: [Cat]) async throws {
        let statement = try statement(Self.upsertSQL)
        try exec("BEGIN IMMEDIATE")
        for cat in cats { try insert(cat, with: statement) }
        try exec("COMMIT")
    }

    @inline(__always)
    fileprivate static func cat(from statement: OpaquePointer) -> Cat {
        let length = Int(sqlite3_column_bytes(statement, 1))
        let name: String
        if let text = sqlite3_column_text(statement, 1) {
            name = String(decoding: UnsafeBufferPointer(start: text, count: length), as: UTF8.self)
        } else {
            name = ""
        }
        return Cat(
            id: sqlite3_column_int64(statement, 0), name: name, weight: sqlite3_column_double(statement, 2),
            age: Int(sqlite3_column_int64(statement, 3)))
    }

    func fetchAll() async throws -> [Cat] {
        let countStatement = try statement("SELECT count(*) FROM Cat")
        try exec("BEGIN")
        defer { try? exec("COMMIT") }
        var cats: [Cat] = []
        if sqlite3_step(countStatement) == SQLITE_ROW { cats.reserveCapacity(Int(sqlite3_column_int64(countStatement, 0))) }
        sqlite3_reset(countStatement)
        let statement = try statement("SELECT id, name, weight, age FROM Cat ORDER BY id")
        while sqlite3_step(statement) == SQLITE_ROW { cats.append(Self.cat(from: statement)) }
        sqlite3_reset(statement)
        return cats
    }

    func saveEach(_ cats: [Cat]) async throws {
        let statement = try statement(Self.upsertSQL)
        for cat in cats { try insert(cat, with: statement) }
    }

    private func lookUp(_ ids: [Int64]) throws -> Int64 {
        let statement = try statement("SELECT id, name, weight, age FROM Cat WHERE id = ?")
        var sum: Int64 = 0
        for id in ids {
            sqlite3_bind_int64(statement, 1, id)
            guard sqlite3_step(statement) == SQLITE_ROW else {
                sqlite3_reset(statement)
                throw BenchError("raw-sqlite: cat \(id) missing")
            }
            sum &+= checksum(Self.cat(from: statement))
            sqlite3_reset(statement)
        }
        return sum
    }

    func lookUpInOneRead(_ ids: [Int64]) async throws -> Int64 {
        try exec("BEGIN")
        defer { try? exec("COMMIT") }
        return try lookUp(ids)
    }

    /// Each lookup is its own implicit transaction, called synchronously: the floor that
    /// Depot's per-call async hop is compared with.
    func lookUpEach(_ ids: [Int64]) async throws -> Int64 { try lookUp(ids) }

    func oldestByName() async throws -> [Int64] {
        let statement = try statement("SELECT id, name, weight, age FROM Cat WHERE age > 10 ORDER BY name, id LIMIT 100")
        var ids: [Int64] = []
        ids.reserveCapacity(100)
        while sqlite3_step(statement) == SQLITE_ROW { ids.append(Self.cat(from: statement).id) }
        sqlite3_reset(statement)
        return ids
    }

    func count() async throws -> Int {
        let statement = try statement("SELECT count(*) FROM Cat")
        defer { sqlite3_reset(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW else { throw BenchError("raw-sqlite: count failed") }
        return Int(sqlite3_column_int64(statement, 0))
    }

    /// Readers on their own connections and threads, the writer on this connection.
    /// W6 like for like: four reader tasks, each with its own connection, every lookup a hop
    /// onto a concurrent queue (as Depot's reads); the writer's saves hop onto a serial queue
    /// (as Depot's writes), each its own autocommit.
    func concurrentMix(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let path = self.path
        let synchronous = self.synchronous
        let reads = HandOff.concurrent("raw-sqlite.readers")
        let writer = HandOff.serial("raw-sqlite.writer")
        let subject = Unchecked(self)
        return try await asyncMix(
            readers: readers, lookups: lookups, writes: writes,
            save: { cat in try await writer.run { try subject.value.saveOne(cat) } },
            openReader: { try await reads.run { Unchecked(try RawReader(path: path, synchronous: synchronous)) } },
            closeReader: { $0.value.close() },
            lookUp: { connection, id in try await reads.run { try connection.value.lookUp(id) } })
    }

    /// W4ph: W4' with each lookup on a reader connection of its own, handed to a thread of
    /// a concurrent queue and awaited, as Depot's reads from an ordinary task.
    func lookUpEachBehindHandOff(_ ids: [Int64]) async throws -> Int64 {
        let reads = HandOff.concurrent("raw-sqlite.readers")
        let path = self.path
        let synchronous = self.synchronous
        let reader = try await reads.run { Unchecked(try RawReader(path: path, synchronous: synchronous)) }
        defer { reader.value.close() }
        var sum: Int64 = 0
        for id in ids { sum &+= try await reads.run { checksum(try reader.value.lookUp(id)) } }
        return sum
    }

    /// W3h: W3 with each save handed to a serial queue and awaited, as Depot's writes.
    func saveEachBehindHandOff(_ cats: [Cat]) async throws {
        let writer = HandOff.serial("raw-sqlite.writer")
        let subject = Unchecked(self)
        for cat in cats { try await writer.run { try subject.value.saveOne(cat) } }
    }

    /// One save in its own autocommit, as `saveEach` does per cat.
    func saveOne(_ cat: Cat) throws {
        try insert(cat, with: try statement(Self.upsertSQL))
    }

    // MARK: W8

    func savePets(_ pets: [BenchPet]) async throws {
        // The composite index Depot's `Pet` declares, on the same columns.
        try exec(
            "CREATE TABLE IF NOT EXISTS Pet(id INTEGER PRIMARY KEY, name TEXT NOT NULL, species TEXT NOT NULL, birthYear INTEGER NOT NULL, weight REAL NOT NULL); CREATE INDEX IF NOT EXISTS Pet_species_name ON Pet(species, name)"
        )
        let statement = try statement("INSERT OR REPLACE INTO Pet(id, name, species, birthYear, weight) VALUES (?, ?, ?, ?, ?)")
        try exec("BEGIN IMMEDIATE")
        for pet in pets {
            sqlite3_bind_int64(statement, 1, pet.id)
            bindText(pet.name, 2, statement)
            bindText(pet.species, 3, statement)
            sqlite3_bind_int64(statement, 4, Int64(pet.birthYear))
            sqlite3_bind_double(statement, 5, pet.weight)
            let code = sqlite3_step(statement)
            sqlite3_reset(statement)
            try check(code, "insert pet")
        }
        try exec("COMMIT")
    }

    private func bindText(_ text: String, _ index: Int32, _ statement: OpaquePointer) {
        var text = text
        text.withUTF8 { _ = sqlite3_bind_text(statement, index, $0.baseAddress, Int32($0.count), Self.transient) }
    }

    private static func text(_ statement: OpaquePointer, _ column: Int32) -> String {
        guard let text = sqlite3_column_text(statement, column) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column))), as: UTF8.self)
    }

    /// Steps `statement` to its end, a pet per row.
    private func pets(_ statement: OpaquePointer) throws -> [BenchPet] {
        defer { sqlite3_reset(statement) }
        var pets: [BenchPet] = []
        pets.reserveCapacity(ListPageFixture.pageSize + 1)
        var code = sqlite3_step(statement)
        while code == SQLITE_ROW {
            pets.append(
                BenchPet(
                    id: sqlite3_column_int64(statement, 0), name: Self.text(statement, 1), species: Self.text(statement, 2),
                    birthYear: Int(sqlite3_column_int64(statement, 3)), weight: sqlite3_column_double(statement, 4)))
            code = sqlite3_step(statement)
        }
        try check(code, "list page")
        return pets
    }

    private static let petColumns = "SELECT id, name, species, birthYear, weight FROM Pet"

    func listPage(species: String, indexed: Bool) async throws -> [BenchPet] {
        guard indexed else { throw BenchError("raw-sqlite keeps the composite index; W8n is for Depot's stores") }
        let statement = try statement("\(Self.petColumns) WHERE species = ?1 ORDER BY name, id LIMIT ?2")
        bindText(species, 1, statement)
        sqlite3_bind_int64(statement, 2, Int64(ListPageFixture.pageSize))
        return try pets(statement)
    }

    /// Keyset pages as an application writes them by hand: one row more than the page, to
    /// know whether another follows, and the next page after the last row's (name, id).
    func walkPages(species: String, pages: Int) async throws -> (pets: [BenchPet], nanoseconds: [UInt64]) {
        let first = try statement("\(Self.petColumns) WHERE species = ?1 ORDER BY name, id LIMIT ?2")
        let next = try statement("\(Self.petColumns) WHERE species = ?1 AND (name, id) > (?3, ?4) ORDER BY name, id LIMIT ?2")
        var all: [BenchPet] = []
        var nanoseconds: [UInt64] = []
        var last: BenchPet?
        for _ in 0..<pages {
            let start = DispatchTime.now().uptimeNanoseconds
            let statement = last == nil ? first : next
            bindText(species, 1, statement)
            sqlite3_bind_int64(statement, 2, Int64(ListPageFixture.pageSize + 1))
            if let last {
                bindText(last.name, 3, statement)
                sqlite3_bind_int64(statement, 4, last.id)
            }
            var page = try pets(statement)
            let more = page.count > ListPageFixture.pageSize
            if more { page.removeLast() }
            nanoseconds.append(elapsed(since: start))
            all += page
            guard more else { break }
            last = page.last
        }
        return (all, nanoseconds)
    }

    /// A reader connection of the like-for-like W6.
    final class RawReader {
        let handle: OpaquePointer
        let statement: OpaquePointer

        init(path: String, synchronous: String) throws {
            handle = try RawSQLiteSubject.connect(path, synchronous: synchronous)
            var statement: OpaquePointer?
            sqlite3_prepare_v2(handle, "SELECT id, name, weight, age FROM Cat WHERE id = ?", -1, &statement, nil)
            guard let statement else {
                sqlite3_close_v2(handle)
                throw BenchError("raw-sqlite: prepare failed")
            }
            self.statement = statement
        }

        func lookUp(_ id: Int64) throws -> Cat {
            sqlite3_bind_int64(statement, 1, id)
            defer { sqlite3_reset(statement) }
            guard sqlite3_step(statement) == SQLITE_ROW else { throw BenchError("raw-sqlite: cat \(id) missing") }
            return RawSQLiteSubject.cat(from: statement)
        }

        func close() {
            sqlite3_finalize(statement)
            sqlite3_close_v2(handle)
        }
    }

    /// W6t: the same mix with each reader on a plain thread of its own, no hand-off.
    func concurrentMixOnThreads(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let share = lookups.count / readers
        let path = self.path
        let synchronous = self.synchronous
        let results = ResultBox(readers)
        let writer = WriterDone()
        let group = DispatchGroup()
        for reader in 0..<readers {
            let mine = Array(lookups[(reader * share)..<((reader + 1) * share)])
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let connection = try Self.connect(path, synchronous: synchronous)
                    defer { sqlite3_close_v2(connection) }
                    var statement: OpaquePointer?
                    sqlite3_prepare_v2(connection, "SELECT id, name, weight, age FROM Cat WHERE id = ?", -1, &statement, nil)
                    defer { sqlite3_finalize(statement) }
                    guard let statement else { throw BenchError("raw-sqlite: prepare failed") }
                    let result = try ReaderLoop.run(mine, until: writer) { id in
                        sqlite3_bind_int64(statement, 1, id)
                        defer { sqlite3_reset(statement) }
                        guard sqlite3_step(statement) == SQLITE_ROW else { throw BenchError("raw-sqlite: cat \(id) missing") }
                        return Self.cat(from: statement)
                    }
                    results.set(reader, .success(result))
                } catch {
                    results.set(reader, .failure(error))
                }
            }
        }
        try await writeWhileThreadsRead(writer, group) { try await saveEach(writes) }
        return try results.merged()
    }
}

/// Per-thread results of a raw concurrent run, filled from plain threads.
final class ResultBox: @unchecked Sendable {
    // Each slot is written by exactly one thread before the group is left, and read only
    // after the group has been waited for, so the lock only guards the array itself.
    private let lock = NSLock()
    private var slots: [Result<([UInt64], Int64), any Error>?]

    init(_ count: Int) { slots = Array(repeating: nil, count: count) }

    func set(_ index: Int, _ value: Result<([UInt64], Int64), any Error>) {
        lock.lock()
        slots[index] = value
        lock.unlock()
    }

    func merged() throws -> (latencies: [UInt64], checksum: Int64) {
        lock.lock()
        defer { lock.unlock() }
        var latencies: [UInt64] = []
        var sum: Int64 = 0
        for slot in slots {
            guard let slot else { throw BenchError("a reader did not finish") }
            let (part, partSum) = try slot.get()
            latencies += part
            sum &+= partSum
        }
        return (latencies, sum)
    }
}
