import Depot
import DepotTesting
import Foundation

/// One thing the benchmark measures: a Depot backend through Depot's public API, or a raw
/// engine through its C API. Every subject gets the same data and the same workloads.
protocol BenchSubject: AnyObject {
    /// The name in reports: memory, sqlite, lmdb, raw-sqlite, raw-lmdb.
    var name: String { get }
    /// The raw engine this subject is compared with, if any.
    var rawCounterpart: String? { get }

    /// Opens (creating if needed) the subject's store in `directory`.
    func open(at directory: URL) async throws
    func close() async

    /// W1: every cat in one call (one transaction).
    func saveAll(_ cats: [Cat]) async throws
    /// W2: every cat back, in key order.
    func fetchAll() async throws -> [Cat]
    /// W3: one durable commit per cat.
    func saveEach(_ cats: [Cat]) async throws
    /// W3e: W3 from a task preferring the store's executor.
    func saveEachPreferringStoreExecutor(_ cats: [Cat]) async throws
    /// W3c: the same saves from `writers` concurrent tasks, each save awaited on its own.
    func saveEachConcurrently(_ cats: [Cat], writers: Int) async throws
    /// W4: lookups inside one read operation; returns the checksum of what was found.
    func lookUpInOneRead(_ ids: [Int64]) async throws -> Int64
    /// W4': one async call per lookup; returns the checksum of what was found.
    func lookUpEach(_ ids: [Int64]) async throws -> Int64
    /// W4'e: W4' from a task preferring the store's executor.
    func lookUpEachPreferringStoreExecutor(_ ids: [Int64]) async throws -> Int64
    /// W5: ids of cats older than 10, sorted by name, first 100.
    func oldestByName() async throws -> [Int64]
    /// The number of cats stored.
    func count() async throws -> Int
    /// W7: every cat of a JSON array, in a fresh store.
    func importJSON(_ data: Data) async throws
    /// W6: `readers` concurrent readers doing lookups while one writer saves `writes` one
    /// commit each. Returns per-read latencies in nanoseconds and the lookup checksum.
    func concurrentMix(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64)
    /// W6e (Depot's stores only): W6 with every task preferring the store's executor.
    func concurrentMixPreferringStoreExecutor(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64)
    /// W6t (raw engines only): the same mix on plain threads, no async hand-off: the floor.
    func concurrentMixOnThreads(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64)
    /// W4ph (raw engines only): W4', each lookup handed to a thread of a concurrent queue
    /// and awaited, as Depot's reads from an ordinary task are: what the hop itself costs.
    func lookUpEachBehindHandOff(_ ids: [Int64]) async throws -> Int64
    /// W3h (raw engines only): W3, each save handed to a serial queue and awaited, as
    /// Depot's writes from an ordinary task are.
    func saveEachBehindHandOff(_ cats: [Cat]) async throws
    /// W8's pets, in one call, beside the cats of the populated store (Depot's stores keep
    /// them twice: with the composite index and without it).
    func savePets(_ pets: [BenchPet]) async throws
    /// W8: the first page of a species' pets sorted by name (then id), through the
    /// composite index, or (`indexed: false`, Depot's stores only: W8n) without it.
    func listPage(species: String, indexed: Bool) async throws -> [BenchPet]
    /// W8, W8e and W8n: the list pages of `species`, one after another (W8e: from a task
    /// preferring the store's executor; the raw engines: W8), and the milliseconds they
    /// took. The time covers the reads that make the subject's own objects (a Depot
    /// store's records, a raw engine's `BenchPet`s); turning Depot's records into
    /// `BenchPet`s for the check comes after it, as no application does it.
    func timedListPages(species: [String], indexed: Bool, preferringStoreExecutor: Bool) async throws -> (pages: [[BenchPet]], ms: Double)
    /// W8c: up to `pages` pages of a species' pets in the list page's order, each page
    /// starting after the last pet of the one before; the pets and each page's time.
    func walkPages(species: String, pages: Int) async throws -> (pets: [BenchPet], nanoseconds: [UInt64])
}

/// A cat as an API sends it: what W7 imports.
struct CatJSON: Codable {
    let id: Int64
    let name: String
    let weight: Double
    let age: Int

    init(_ cat: Cat) {
        id = cat.id
        name = cat.name
        weight = cat.weight
        age = cat.age
    }

    var cat: Cat { Cat(id: id, name: name, weight: weight, age: age) }
}

extension BenchSubject {
    /// W7 for the raw engines: Foundation's JSONDecoder into structs, then every cat in one
    /// transaction.
    func importJSON(_ data: Data) async throws {
        try await saveAll(try JSONDecoder().decode([CatJSON].self, from: data).map(\.cat))
    }

    /// The raw engines' W4' already reads on the calling task.
    func lookUpEachPreferringStoreExecutor(_ ids: [Int64]) async throws -> Int64 {
        try await lookUpEach(ids)
    }

    /// The raw engines read on the calling task, and their objects are `BenchPet`s.
    func timedListPages(species: [String], indexed: Bool, preferringStoreExecutor: Bool) async throws -> (pages: [[BenchPet]], ms: Double) {
        var pages: [[BenchPet]] = []
        pages.reserveCapacity(species.count)
        let start = DispatchTime.now().uptimeNanoseconds
        for name in species { pages.append(try await listPage(species: name, indexed: indexed)) }
        return (pages, Double(elapsed(since: start)) / 1_000_000)
    }

    /// The raw engines already commit on the calling task.
    func saveEachPreferringStoreExecutor(_ cats: [Cat]) async throws {
        try await saveEach(cats)
    }

    /// The raw engines commit one save at a time whoever calls: their W3c is W3, the
    /// engine's own cost per commit, which group commit is measured against.
    func saveEachConcurrently(_ cats: [Cat], writers: Int) async throws {
        try await saveEach(cats)
    }

    func concurrentMixOnThreads(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        throw BenchError("\(name) runs W6 only through its async API; W6t is for the raw engines")
    }

    func concurrentMixPreferringStoreExecutor(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        throw BenchError("\(name) has no store executor; W6e is for Depot's stores")
    }

    func lookUpEachBehindHandOff(_ ids: [Int64]) async throws -> Int64 {
        throw BenchError("\(name) hands its reads off itself; W4ph is for the raw engines")
    }

    func saveEachBehindHandOff(_ cats: [Cat]) async throws {
        throw BenchError("\(name) hands its writes off itself; W3h is for the raw engines")
    }
}

/// A checksum of one cat's fields, so a benchmark cannot skip reading any of them.
@inline(__always)
func checksum(_ cat: Cat) -> Int64 {
    cat.id &* 31 &+ Int64(cat.age) &* 7 &+ Int64(cat.name.utf8.count) &+ Int64(cat.weight * 1000)
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A Depot backend, measured through `Controller<Cat, CatRecord>`.
final class DepotSubject: BenchSubject {
    let name: String
    let rawCounterpart: String?
    private let makeStore: (URL) throws -> any Store
    private(set) var store: (any Store)?
    private var cats: Controller<Cat, CatRecord>?
    /// W8's controllers, kept from `savePets` on: a controller registers its entity on
    /// first use, which an application does once, not per request.
    var indexedPets: Controller<IndexedPet, IndexedPet>?
    var plainPets: Controller<PlainPet, PlainPet>?

    init(name: String, rawCounterpart: String?, makeStore: @escaping (URL) throws -> any Store) {
        self.name = name
        self.rawCounterpart = rawCounterpart
        self.makeStore = makeStore
    }

    /// The open store, for the workloads on other records than cats (ListPage.swift).
    func openStore() throws -> any Store {
        guard let store else { throw BenchError("\(name) is not open") }
        return store
    }

    private var controller: Controller<Cat, CatRecord> {
        get throws {
            guard let cats else { throw BenchError("\(name) is not open") }
            return cats
        }
    }

    func open(at directory: URL) async throws {
        // As the raw subjects do: a store URL no longer creates a missing directory.
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try makeStore(directory)
        try await store.register(CatRecord.self)
        self.store = store
        self.cats = Controller(store: store)
    }

    func close() async {
        await store?.close()
        store = nil
        cats = nil
        indexedPets = nil
        plainPets = nil
    }

    func saveAll(_ cats: [Cat]) async throws { try await controller.save(cats) }

    func fetchAll() async throws -> [Cat] { try await controller.fetchAll() }

    func importJSON(_ data: Data) async throws { _ = try await controller.importJSON(data) }

    func saveEach(_ cats: [Cat]) async throws {
        let controller = try controller
        for cat in cats { try await controller.save(cat) }
    }

    func saveEachPreferringStoreExecutor(_ cats: [Cat]) async throws {
        guard let store else { throw BenchError("\(name) is not open") }
        try await withTaskExecutorPreference(store.executor) { try await saveEach(cats) }
    }

    func saveEachConcurrently(_ cats: [Cat], writers: Int) async throws {
        let controller = try controller
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for cat in stride(from: writer, to: cats.count, by: writers).map({ cats[$0] }) {
                        try await controller.save(cat)
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    func lookUpInOneRead(_ ids: [Int64]) async throws -> Int64 {
        try await controller.read { context in
            var sum: Int64 = 0
            for id in ids {
                guard let cat = try context.fetchOne(id: id) else { throw BenchError("cat \(id) missing") }
                sum &+= checksum(cat)
            }
            return sum
        }
    }

    func lookUpEach(_ ids: [Int64]) async throws -> Int64 {
        let controller = try controller
        var sum: Int64 = 0
        for id in ids {
            guard let cat = try await controller.fetchOne(id: id) else { throw BenchError("cat \(id) missing") }
            sum &+= checksum(cat)
        }
        return sum
    }

    func lookUpEachPreferringStoreExecutor(_ ids: [Int64]) async throws -> Int64 {
        guard let store else { throw BenchError("\(name) is not open") }
        return try await withTaskExecutorPreference(store.executor) { try await lookUpEach(ids) }
    }

    func oldestByName() async throws -> [Int64] {
        try await controller.fetchAll(Request(\.age > 10).sorted(by: \.name).limit(100)).map(\.id)
    }

    func count() async throws -> Int { try await controller.count() }

    func concurrentMix(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        try await concurrentMix(readers: readers, lookups: lookups, writes: writes, executor: nil)
    }

    func concurrentMixPreferringStoreExecutor(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        guard let store else { throw BenchError("\(name) is not open") }
        return try await concurrentMix(readers: readers, lookups: lookups, writes: writes, executor: store.executor)
    }

    private func concurrentMix(
        readers: Int, lookups: [Int64], writes: [Cat], executor: (any TaskExecutor)?
    ) async throws -> (latencies: [UInt64], checksum: Int64) {
        let controller = try controller
        return try await asyncMix(
            readers: readers, lookups: lookups, writes: writes, executor: executor, save: { try await controller.save($0) }, openReader: {},
            lookUp: { _, id in
                guard let cat = try await controller.fetchOne(id: id) else { throw BenchError("cat \(id) missing") }
                return cat
            })
    }

}
