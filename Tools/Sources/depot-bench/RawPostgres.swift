import ToolsCLibPQ
import DepotTesting
import Dispatch
import Foundation
import Synchronization

/// PostgreSQL through libpq directly, written as fast as we can: prepared statements,
/// binary parameters and results, one table in a schema of its own. The yardstick for
/// `postgres` (the same client Depot uses, on the same server).
final class RawPostgresSubject: BenchSubject {
    let name = "raw-postgres"
    let rawCounterpart: String? = nil
    let server: String
    let synchronousCommit: String
    private var connection: RawPGConnection?
    private var schema = ""

    /// - Parameters:
    ///   - server: A libpq connection URI.
    ///   - synchronousCommit: `on` or `off`, matching Depot's durability setting.
    init(server: String, synchronousCommit: String) {
        self.server = server
        self.synchronousCommit = synchronousCommit
    }

    func open(at directory: URL) async throws {
        schema = benchSchemaName(directory, prefix: "raw_")
        let connection = try RawPGConnection(server, synchronousCommit: synchronousCommit)
        try connection.exec("CREATE SCHEMA IF NOT EXISTS \(schema)")
        try connection.exec("SET search_path TO \(schema)")
        try connection.exec("CREATE TABLE IF NOT EXISTS cat (id bigint PRIMARY KEY, name text COLLATE \"C\" NOT NULL, weight double precision NOT NULL, age bigint NOT NULL)")
        try connection.exec("CREATE INDEX IF NOT EXISTS cat_age ON cat (age)")
        try connection.prepareStatements()
        self.connection = connection
    }

    func close() async {
        connection?.close()
        connection = nil
    }

    private func live() throws -> RawPGConnection {
        guard let connection else { throw BenchError("raw-postgres is not open") }
        return connection
    }

    func saveAll(_ cats: [Cat]) async throws {
        let connection = try live()
        try connection.exec("BEGIN")
        for cat in cats { try connection.upsert(cat) }
        try connection.exec("COMMIT")
    }

    func fetchAll() async throws -> [Cat] {
        try live().cats("fetch_all", [])
    }

    func saveEach(_ cats: [Cat]) async throws {
        let connection = try live()
        for cat in cats { try connection.upsert(cat) }
    }

    func lookUpInOneRead(_ ids: [Int64]) async throws -> Int64 {
        let connection = try live()
        try connection.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        defer { try? connection.exec("COMMIT") }
        return try connection.lookUp(ids)
    }

    /// Each lookup is its own statement, called synchronously: the floor that Depot's
    /// per-call async hop is compared with.
    func lookUpEach(_ ids: [Int64]) async throws -> Int64 { try live().lookUp(ids) }

    /// W4ph: W4' with each lookup handed to a thread of a concurrent queue and awaited, as
    /// Depot's reads from an ordinary task (one connection: the lookups follow each other).
    func lookUpEachBehindHandOff(_ ids: [Int64]) async throws -> Int64 {
        let reads = HandOff.concurrent("raw-postgres.readers")
        let connection = Unchecked(try live())
        var sum: Int64 = 0
        for id in ids { sum &+= try await reads.run { checksum(try connection.value.lookUpOne(id)) } }
        return sum
    }

    /// W3h: W3 with each save handed to a serial queue and awaited, as Depot's writes.
    func saveEachBehindHandOff(_ cats: [Cat]) async throws {
        let writer = HandOff.serial("raw-postgres.writer")
        let connection = Unchecked(try live())
        for cat in cats { try await writer.run { try connection.value.upsert(cat) } }
    }

    func oldestByName() async throws -> [Int64] {
        try live().cats("oldest", []).map(\.id)
    }

    func count() async throws -> Int {
        let connection = try live()
        let result = try connection.run("count", [])
        defer { PQclear(result) }
        return Int(RawPGConnection.int64(result, 0, 0))
    }

    // MARK: W8

    /// The composite index Depot's `Pet` declares, with the primary key as its last column
    /// so the order's tie-break is read from the index too.
    func savePets(_ pets: [BenchPet]) async throws {
        let connection = try live()
        try connection.exec("CREATE TABLE IF NOT EXISTS pet (id bigint PRIMARY KEY, name text COLLATE \"C\" NOT NULL, species text COLLATE \"C\" NOT NULL, birth_year bigint NOT NULL, weight double precision NOT NULL)")
        try connection.exec("CREATE INDEX IF NOT EXISTS pet_species_name ON pet (species, name, id)")
        try connection.preparePetStatements()
        try connection.exec("BEGIN")
        for pet in pets {
            let params = [
                RawPGConnection.bytes(pet.id), Array(pet.name.utf8), Array(pet.species.utf8), RawPGConnection.bytes(Int64(pet.birthYear)),
                withUnsafeBytes(of: pet.weight.bitPattern.bigEndian) { Array($0) },
            ]
            PQclear(try connection.run("pet_insert", params))
        }
        try connection.exec("COMMIT")
    }

    func listPage(species: String, indexed: Bool) async throws -> [BenchPet] {
        guard indexed else { throw BenchError("raw-postgres keeps the composite index; W8n is for Depot's stores") }
        return try live().pets("pet_page", [Array(species.utf8), RawPGConnection.bytes(Int64(ListPageFixture.pageSize))])
    }

    /// Keyset pages as an application writes them by hand: one row more than the page, to
    /// know whether another follows, and the next page after the last row's (name, id).
    func walkPages(species: String, pages: Int) async throws -> (pets: [BenchPet], nanoseconds: [UInt64]) {
        let connection = try live()
        let limit = RawPGConnection.bytes(Int64(ListPageFixture.pageSize + 1))
        var all: [BenchPet] = []
        var nanoseconds: [UInt64] = []
        var last: BenchPet?
        for _ in 0..<pages {
            let start = DispatchTime.now().uptimeNanoseconds
            var page: [BenchPet]
            if let last {
                page = try connection.pets("pet_after", [Array(species.utf8), limit, Array(last.name.utf8), RawPGConnection.bytes(last.id)])
            } else {
                page = try connection.pets("pet_page", [Array(species.utf8), limit])
            }
            let more = page.count > ListPageFixture.pageSize
            if more { page.removeLast() }
            nanoseconds.append(elapsed(since: start))
            all += page
            guard more else { break }
            last = page.last
        }
        return (all, nanoseconds)
    }

    /// W6 like for like: reader tasks, each with its own connection, every lookup a hop onto
    /// a concurrent queue (as Depot's reads); the writer's saves hop onto a serial queue.
    func concurrentMix(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let server = self.server
        let schema = self.schema
        let synchronousCommit = self.synchronousCommit
        let reads = HandOff.concurrent("raw-postgres.readers")
        let writer = HandOff.serial("raw-postgres.writer")
        let connection = Unchecked(try live())
        return try await asyncMix(
            readers: readers, lookups: lookups, writes: writes,
            save: { cat in try await writer.run { try connection.value.upsert(cat) } },
            openReader: {
                try await reads.run { () throws -> Unchecked<RawPGConnection> in
                    let reader = try RawPGConnection(server, synchronousCommit: synchronousCommit)
                    try reader.exec("SET search_path TO \(schema)")
                    try reader.prepareStatements()
                    return Unchecked(reader)
                }
            },
            closeReader: { $0.value.close() },
            lookUp: { reader, id in try await reads.run { try reader.value.lookUpOne(id) } })
    }

    /// W6t: the same mix with each reader on a plain thread of its own, no hand-off.
    func concurrentMixOnThreads(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let share = lookups.count / readers
        let server = self.server
        let schema = self.schema
        let synchronousCommit = self.synchronousCommit
        let results = ResultBox(readers)
        let writer = WriterDone()
        let group = DispatchGroup()
        for reader in 0..<readers {
            let mine = Array(lookups[(reader * share)..<((reader + 1) * share)])
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let connection = try RawPGConnection(server, synchronousCommit: synchronousCommit)
                    defer { connection.close() }
                    try connection.exec("SET search_path TO \(schema)")
                    try connection.prepareStatements()
                    results.set(reader, .success(try ReaderLoop.run(mine, until: writer) { try connection.lookUpOne($0) }))
                } catch {
                    results.set(reader, .failure(error))
                }
            }
        }
        try await writeWhileThreadsRead(writer, group) { try await saveEach(writes) }
        return try results.merged()
    }
}

/// A schema name from a bench directory's name: fresh stores get fresh schemas. Each name
/// is kept, and ``dropBenchSchemas(on:)`` drops them when the run ends.
func benchSchemaName(_ directory: URL, prefix: String = "") -> String {
    let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789_")
    let name = String(directory.lastPathComponent.lowercased().map { allowed.contains($0) ? $0 : "_" })
    let schema = prefix + String(("b_" + name).prefix(40)) + "_" + String(UUID().uuidString.prefix(8).lowercased())
    benchSchemas.withLock { $0.append(schema) }
    return schema
}

/// The schemas this run created (or will have created), for ``dropBenchSchemas(on:)``.
private let benchSchemas = Mutex<[String]>([])

/// Drops every schema the run made on `server`, with what is in them: a run against a
/// server of the user's own leaves nothing behind. On a thread of its own (libpq blocks).
/// Returns what it could not drop, as messages.
func dropBenchSchemas(on server: String) async -> [String] {
    let schemas = benchSchemas.withLock { all -> [String] in
        defer { all.removeAll() }
        return all
    }
    guard !schemas.isEmpty else { return [] }
    return await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            var problems: [String] = []
            do {
                let connection = try RawPGConnection(server, synchronousCommit: "on")
                defer { connection.close() }
                for schema in schemas {
                    do { try connection.exec("DROP SCHEMA IF EXISTS \(schema) CASCADE") } catch { problems.append("\(error)") }
                }
            } catch {
                problems.append("\(error)")
            }
            continuation.resume(returning: problems)
        }
    }
}

/// One libpq connection of the raw subject, with its prepared statements.
final class RawPGConnection {
    private var handle: OpaquePointer?

    init(_ server: String, synchronousCommit: String) throws {
        let handle = PQconnectdb(server)
        guard let handle, PQstatus(handle) == CONNECTION_OK else {
            let message = handle.map { String(cString: PQerrorMessage($0)) } ?? "no connection"
            PQfinish(handle)
            throw BenchError("raw-postgres cannot connect: \(message)")
        }
        self.handle = handle
        try exec("SET synchronous_commit TO \(synchronousCommit)")
    }

    func close() {
        PQfinish(handle)
        handle = nil
    }

    func exec(_ sql: String) throws {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw BenchError("raw-postgres \(sql): \(String(cString: PQerrorMessage(handle)))")
        }
    }

    func prepareStatements() throws {
        try prepare([
            ("upsert", "INSERT INTO cat (id, name, weight, age) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, weight = EXCLUDED.weight, age = EXCLUDED.age", [20, 25, 701, 20]),
            ("by_id", "SELECT id, name, weight, age FROM cat WHERE id = $1", [20]),
            ("fetch_all", "SELECT id, name, weight, age FROM cat ORDER BY id", []),
            ("oldest", "SELECT id, name, weight, age FROM cat WHERE age > 10 ORDER BY name, id LIMIT 100", []),
            ("count", "SELECT count(*) FROM cat", []),
        ])
    }

    /// W8's statements, once its table exists.
    func preparePetStatements() throws {
        let columns = "SELECT id, name, species, birth_year, weight FROM pet"
        try prepare([
            ("pet_insert", "INSERT INTO pet (id, name, species, birth_year, weight) VALUES ($1, $2, $3, $4, $5)", [20, 25, 25, 20, 701]),
            ("pet_page", "\(columns) WHERE species = $1 ORDER BY name, id LIMIT $2", [25, 20]),
            ("pet_after", "\(columns) WHERE species = $1 AND (name, id) > ($3, $4) ORDER BY name, id LIMIT $2", [25, 20, 25, 20]),
        ])
    }

    private func prepare(_ statements: [(String, String, [Oid])]) throws {
        for (name, sql, types) in statements {
            var types = types
            let result = PQprepare(handle, name, sql, Int32(types.count), &types)
            defer { PQclear(result) }
            guard PQresultStatus(result) == PGRES_COMMAND_OK else {
                throw BenchError("raw-postgres prepare \(name): \(String(cString: PQerrorMessage(handle)))")
            }
        }
    }

    /// Runs a prepared statement with binary parameters and results; the caller clears it.
    func run(_ name: String, _ params: [[UInt8]]) throws -> OpaquePointer? {
        var buffer: [UInt8] = params.flatMap { $0 }
        if buffer.isEmpty { buffer.append(0) }
        let lengths = params.map { Int32($0.count) }
        let formats = [Int32](repeating: 1, count: params.count)
        let result: OpaquePointer? = buffer.withUnsafeBufferPointer { storage in
            let base = UnsafeRawPointer(storage.baseAddress!).assumingMemoryBound(to: CChar.self)
            var values: [UnsafePointer<CChar>?] = []
            var offset = 0
            for param in params {
                values.append(base + offset)
                offset += param.count
            }
            return PQexecPrepared(handle, name, Int32(params.count), values, lengths, formats, 1)
        }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let message = String(cString: PQerrorMessage(handle))
            PQclear(result)
            throw BenchError("raw-postgres \(name): \(message)")
        }
        return result
    }

    static func int64(_ result: OpaquePointer?, _ row: Int32, _ column: Int32) -> Int64 {
        guard let value = PQgetvalue(result, row, column) else { return 0 }
        return Int64(bigEndian: UnsafeRawPointer(value).loadUnaligned(as: Int64.self))
    }

    static func cat(_ result: OpaquePointer?, _ row: Int32) -> Cat {
        let name = PQgetvalue(result, row, 1).map {
            String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(PQgetlength(result, row, 1))), as: UTF8.self)
        } ?? ""
        let weight = PQgetvalue(result, row, 2).map { Double(bitPattern: UInt64(bigEndian: UnsafeRawPointer($0).loadUnaligned(as: UInt64.self))) } ?? 0
        return Cat(id: int64(result, row, 0), name: name, weight: weight, age: Int(int64(result, row, 3)))
    }

    static func bytes(_ v: Int64) -> [UInt8] { withUnsafeBytes(of: v.bigEndian) { Array($0) } }

    func upsert(_ cat: Cat) throws {
        let params = [
            Self.bytes(cat.id), Array(cat.name.utf8), withUnsafeBytes(of: cat.weight.bitPattern.bigEndian) { Array($0) }, Self.bytes(Int64(cat.age)),
        ]
        PQclear(try run("upsert", params))
    }

    func cats(_ statement: String, _ params: [[UInt8]]) throws -> [Cat] {
        let result = try run(statement, params)
        defer { PQclear(result) }
        let count = PQntuples(result)
        var cats: [Cat] = []
        cats.reserveCapacity(Int(count))
        for row in 0..<count { cats.append(Self.cat(result, row)) }
        return cats
    }

    func pets(_ statement: String, _ params: [[UInt8]]) throws -> [BenchPet] {
        let result = try run(statement, params)
        defer { PQclear(result) }
        let count = PQntuples(result)
        var pets: [BenchPet] = []
        pets.reserveCapacity(Int(count))
        func text(_ row: Int32, _ column: Int32) -> String {
            PQgetvalue(result, row, column).map {
                String(decoding: UnsafeRawBufferPointer(start: $0, count: Int(PQgetlength(result, row, column))), as: UTF8.self)
            } ?? ""
        }
        for row in 0..<count {
            let weight = PQgetvalue(result, row, 4).map { Double(bitPattern: UInt64(bigEndian: UnsafeRawPointer($0).loadUnaligned(as: UInt64.self))) } ?? 0
            pets.append(
                BenchPet(
                    id: Self.int64(result, row, 0), name: text(row, 1), species: text(row, 2), birthYear: Int(Self.int64(result, row, 3)),
                    weight: weight))
        }
        return pets
    }

    func lookUpOne(_ id: Int64) throws -> Cat {
        let result = try run("by_id", [Self.bytes(id)])
        defer { PQclear(result) }
        guard PQntuples(result) == 1 else { throw BenchError("raw-postgres: cat \(id) missing") }
        return Self.cat(result, 0)
    }

    func lookUp(_ ids: [Int64]) throws -> Int64 {
        var sum: Int64 = 0
        for id in ids { sum &+= checksum(try lookUpOne(id)) }
        return sum
    }
}
