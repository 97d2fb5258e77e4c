// Depot's SQLite backend beside GRDB 7.10, the library most Swift developers would pick:
// GRDB with Codable records, and GRDB with hand-written `init(row:)` records. Same data,
// same WAL + synchronous=NORMAL, same workloads (W1, W2, W4, W5 of docs/benchmarks/README.md).
import Benchmark
import Depot
import DepotTesting
import Foundation
import GRDB

let records = 10_000
let cats = Cat.workload(count: records)
let lookups: [Int64] = {
    var generator = SplitMix64(seed: 2024)
    return (0..<records).map { _ in Int64(generator.next() % UInt64(records)) + 1 }
}()

/// A GRDB record through Codable: the way most GRDB code is written.
struct CodableCat: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "cat"
    var id: Int64
    var name: String
    var weight: Double
    var age: Int
}

/// A GRDB record with hand-written row mapping: GRDB at its fastest.
struct TunedCat: FetchableRecord, PersistableRecord {
    static let databaseTableName = "cat"
    var id: Int64
    var name: String
    var weight: Double
    var age: Int

    init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    init(row: GRDB.Row) {
        id = row[0]
        name = row[1]
        weight = row[2]
        age = row[3]
    }

    func encode(to container: inout PersistenceContainer) {
        container["id"] = id
        container["name"] = name
        container["weight"] = weight
        container["age"] = age
    }
}

let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-peers-\(UUID().uuidString)")

func grdbPool(_ name: String) throws -> DatabasePool {
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    var configuration = Configuration()
    configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
    let pool = try DatabasePool(path: directory.appendingPathComponent("\(name).sqlite").path, configuration: configuration)
    try pool.write { db in
        try db.execute(sql: "CREATE TABLE IF NOT EXISTS cat(id INTEGER PRIMARY KEY, name TEXT NOT NULL, weight REAL NOT NULL, age INTEGER NOT NULL)")
        try db.execute(sql: "CREATE INDEX IF NOT EXISTS cat_age ON cat(age)")
    }
    return pool
}

/// Populated stores, made once and shared by the read benchmarks.
actor Peers {
    private var pool: DatabasePool?
    private var depot: Controller<Cat, CatRecord>?

    func populatedPool() async throws -> DatabasePool {
        if let pool { return pool }
        let made = try grdbPool("populated")
        try await made.write { db in for cat in cats { try TunedCat(id: cat.id, name: cat.name, weight: cat.weight, age: cat.age).insert(db) } }
        pool = made
        return made
    }

    func populatedDepot() async throws -> Controller<Cat, CatRecord> {
        if let depot { return depot }
        let made = Controller<Cat, CatRecord>(store: try openStoreBlocking(url: "sqlite://\(directory.appendingPathComponent("depot.sqlite").path)"))
        try await made.save(cats)
        depot = made
        return made
    }
}

let peers = Peers()

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal], timeUnits: .milliseconds, warmupIterations: 1,
        maxDuration: .seconds(2), maxIterations: 20)

    // W1: save N in one transaction, into a fresh database.
    Benchmark("W1 GRDB Codable") { benchmark async throws in
        for _ in benchmark.scaledIterations {
            let pool = try grdbPool("w1-\(UUID().uuidString)")
            benchmark.startMeasurement()
            try await pool.write { db in
                for cat in cats { try CodableCat(id: cat.id, name: cat.name, weight: cat.weight, age: cat.age).insert(db) }
            }
            benchmark.stopMeasurement()
        }
    }
    Benchmark("W1 GRDB hand-written") { benchmark async throws in
        for _ in benchmark.scaledIterations {
            let pool = try grdbPool("w1-\(UUID().uuidString)")
            benchmark.startMeasurement()
            try await pool.write { db in
                for cat in cats { try TunedCat(id: cat.id, name: cat.name, weight: cat.weight, age: cat.age).insert(db) }
            }
            benchmark.stopMeasurement()
        }
    }
    Benchmark("W1 Depot sqlite") { benchmark async throws in
        for _ in benchmark.scaledIterations {
            let store = try openStoreBlocking(url: "sqlite://\(directory.appendingPathComponent("w1-\(UUID().uuidString).sqlite").path)")
            try await store.register(CatRecord.self)
            let controller = Controller<Cat, CatRecord>(store: store)
            benchmark.startMeasurement()
            try await controller.save(cats)
            benchmark.stopMeasurement()
            await store.close()
        }
    }

    // W2: fetch all N.
    Benchmark("W2 GRDB Codable") { benchmark async throws in
        let pool = try await peers.populatedPool()
        for _ in benchmark.scaledIterations { blackHole(try await pool.read { try CodableCat.fetchAll($0) }) }
    }
    Benchmark("W2 GRDB hand-written") { benchmark async throws in
        let pool = try await peers.populatedPool()
        for _ in benchmark.scaledIterations { blackHole(try await pool.read { try TunedCat.fetchAll($0) }) }
    }
    Benchmark("W2 Depot sqlite") { benchmark async throws in
        let controller = try await peers.populatedDepot()
        for _ in benchmark.scaledIterations { blackHole(try await controller.fetchAll()) }
    }

    // W4: N random primary-key lookups inside one read.
    Benchmark("W4 GRDB Codable") { benchmark async throws in
        let pool = try await peers.populatedPool()
        for _ in benchmark.scaledIterations {
            blackHole(try await pool.read { db in try lookups.reduce(Int64(0)) { $0 &+ (try CodableCat.fetchOne(db, key: $1)?.id ?? 0) } })
        }
    }
    Benchmark("W4 GRDB hand-written") { benchmark async throws in
        let pool = try await peers.populatedPool()
        for _ in benchmark.scaledIterations {
            blackHole(try await pool.read { db in try lookups.reduce(Int64(0)) { $0 &+ (try TunedCat.fetchOne(db, key: $1)?.id ?? 0) } })
        }
    }
    Benchmark("W4 Depot sqlite") { benchmark async throws in
        let controller = try await peers.populatedDepot()
        for _ in benchmark.scaledIterations {
            blackHole(try await controller.read { context in try lookups.reduce(Int64(0)) { $0 &+ (try context.fetchOne(id: $1)?.id ?? 0) } })
        }
    }

    // W5: age > 10, by name, limit 100.
    Benchmark("W5 GRDB Codable") { benchmark async throws in
        let pool = try await peers.populatedPool()
        let request = CodableCat.filter(Column("age") > 10).order(Column("name"), Column("id")).limit(100)
        for _ in benchmark.scaledIterations { blackHole(try await pool.read { try request.fetchAll($0) }) }
    }
    Benchmark("W5 GRDB hand-written") { benchmark async throws in
        let pool = try await peers.populatedPool()
        let request = TunedCat.filter(Column("age") > 10).order(Column("name"), Column("id")).limit(100)
        for _ in benchmark.scaledIterations { blackHole(try await pool.read { try request.fetchAll($0) }) }
    }
    Benchmark("W5 Depot sqlite") { benchmark async throws in
        let controller = try await peers.populatedDepot()
        let request = Request<CatRecord>(\.age > 10).sorted(by: \.name).limit(100)
        for _ in benchmark.scaledIterations { blackHole(try await controller.fetchAll(request)) }
    }
}
