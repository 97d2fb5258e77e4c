import DepotCore
import DepotTesting
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization
import Testing

import DepotLMDB

typealias Cats = Controller<Cat, CatRecord>
typealias Accounts = Controller<Account, Account>

/// Runs `body` with a store in a fresh directory, then closes the store and removes the
/// directory.
func withStore<T>(
    options: LMDBStore.Options = .init(), _ body: (LMDBStore, TemporaryDirectory) async throws -> T
) async throws -> T {
    let directory = TemporaryDirectory()
    defer { directory.remove() }
    let store = try LMDBStore(directory: directory.path, options: options)
    do {
        let result = try await body(store, directory)
        await store.close()
        return result
    } catch {
        await store.close()
        throw error
    }
}

func expectDepotError<T>(_ code: DepotError.Code, _ body: () async throws -> T) async {
    do {
        let value = try await body()
        Issue.record("expected DepotError.\(code), got \(value)")
    } catch let error as DepotError {
        #expect(error.code == code, "\(error)")
        #expect(!error.message.isEmpty)
    } catch {
        Issue.record("expected DepotError.\(code), got \(error)")
    }
}

/// Finds an executable on PATH (and in /usr/bin).
func executable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    for directory in path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin"] {
        let candidate = (directory as NSString).appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Runs a command and returns its standard output.
func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let result = try ProcessLaunch.run(tool, arguments)
    return (result.exit.status, result.stdout + result.stderr)
}

@Suite("LMDBStore")
struct LMDBStoreTests {
    @Test("a 64 KiB map grows to hold 100,000 records")
    func mapGrowth() async throws {
        let cats = Cat.workload(count: 100_000, seed: 11)
        try await withStore(options: .init(mapSize: 64 << 10)) { store, directory in
            let initial = store.environment.mapSize
            let controller = Cats(store: store)
            try await controller.save(cats)
            #expect(try await controller.count() == 100_000)
            #expect(store.environment.mapSize > initial, "the map grew from \(initial)")
            let back = try await controller.fetchAll()
            #expect(back == cats)
            // One more commit after growth, and reads through the age index.
            try await controller.save(Cat(id: 100_001, name: "Late", weight: 1, age: 3))
            #expect(try await controller.count(Request(\.age == 3)) == cats.filter { $0.age == 3 }.count + 1)
            await store.close()
            // Reopened with the tiny option, the store keeps its grown map and its data.
            let reopened = try LMDBStore(directory: directory.path, options: .init(mapSize: 64 << 10))
            let again = Cats(store: reopened)
            #expect(try await again.count() == 100_001)
            #expect(try await again.fetchOne(id: 99_999) == cats[99_998])
            await reopened.close()
        }
    }

    @Test("an over-long key or indexed value is refused with nothing written")
    func overlongKeys() async throws {
        try await withStore { store, _ in
            let maxKey = store.environment.maxKeySize
            #expect(maxKey == 511)
            let accounts = Accounts(store: store)
            // A string key takes one prefix byte: 510 bytes of string is the longest key.
            let longest = String(repeating: "k", count: maxKey - 1)
            let tooLong = String(repeating: "k", count: maxKey)
            await expectDepotError(.invalidValue) {
                try await accounts.save([Account(id: "fine", owner: "a"), Account(id: tooLong, owner: "b")])
            }
            #expect(try await accounts.count() == 0, "nothing of the batch was written")
            await expectDepotError(.invalidValue) { try await accounts.insert(Account(id: tooLong, owner: "c")) }
            // A unique (indexed) value over the limit: index keys take one marker byte.
            await expectDepotError(.invalidValue) {
                try await accounts.insert(Account(id: "x", owner: String(repeating: "o", count: maxKey)))
            }
            await expectDepotError(.invalidValue) {
                try await accounts.operation { context in
                    try context.insert(Account(id: "y", owner: "y"))
                    try context.insert(Account(id: "z", owner: "z", nickname: String(repeating: "n", count: 4096)))
                }
            }
            #expect(try await accounts.count() == 0)
            // A caller that catches the refusal inside an operation keeps a clean transaction.
            try await accounts.operation { context in
                try? context.insert(Account(id: "w", owner: String(repeating: "o", count: 600)))
                try context.insert(Account(id: "v", owner: "v"))
            }
            #expect(try await accounts.fetchAll().map(\.id) == ["v"])
            #expect(try await accounts.fetchOne(id: "w") == nil)
            // The limits themselves are accepted, and lookups of over-long keys find nothing.
            try await accounts.insert(Account(id: longest, owner: String(repeating: "o", count: maxKey - 1)))
            #expect(try await accounts.fetchOne(id: longest)?.owner.utf8.count == maxKey - 1)
            #expect(try await accounts.fetchOne(id: tooLong) == nil)
            #expect(try await accounts.delete(id: tooLong) == false)
            // Values that are not keys are not limited.
            try await accounts.save(Account(id: "big", owner: "big", balance: 1))
            let samples = Controller<Sample, Sample>(store: store)
            try await samples.save(Sample(id: 1, string: String(repeating: "s", count: 100_000)))
            #expect(try await samples.fetchOne(id: 1)?.string.count == 100_000)
        }
    }

    @Test("a corrupt or foreign data file is refused and left byte for byte as it was", arguments: [0, 1, 2, 3])
    func corruptFile(kind: Int) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        let dataFile = (directory.path as NSString).appendingPathComponent("data.mdb")
        var generator = SplitMix64(seed: UInt64(kind) + 1)
        var bytes: [UInt8]
        switch kind {
        case 0:  // random bytes, a few pages
            bytes = (0..<(16 << 10)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        case 1:  // shorter than a page
            bytes = Array("not an lmdb file".utf8)
        case 2:  // another engine's file
            bytes = Array("SQLite format 3\0".utf8) + (0..<8192).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
        default:  // a real store whose meta pages were overwritten
            let store = try LMDBStore(directory: directory.path)
            let cats = Cats(store: store)
            try await cats.save(Array(fixtureCatsForTests))
            await store.close()
            bytes = Array(try Data(contentsOf: URL(fileURLWithPath: dataFile)))
            for i in 0..<min(bytes.count, 8192) { bytes[i] = UInt8(truncatingIfNeeded: generator.next()) }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: dataFile))
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile))
        do {
            let store = try LMDBStore(directory: directory.path)
            await store.close()
            Issue.record("a corrupt data.mdb must be refused")
        } catch let error as DepotError {
            #expect(error.code == .storeCorrupted, "\(error)")
        }
        let after = try Data(contentsOf: URL(fileURLWithPath: dataFile))
        #expect(before == after, "data.mdb is unchanged")
        // The directory is free again after the refusal.
        do {
            _ = try LMDBStore(directory: directory.path)
            Issue.record("refused again")
        } catch let error as DepotError {
            #expect(error.code == .storeCorrupted)
        }
    }

    @Test("an LMDB environment that is not a Depot store is refused")
    func foreignEnvironment() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(directory: directory.path)
        let cats = Cats(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1))
        // Rewrite the metadata's format marker as a future version, through LMDB itself.
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction else { return }
            try t.put(t.metaDBI, Catalog.formatKey, Array("99".utf8), context: "test")
        }
        await store.close()
        let dataFile = (directory.path as NSString).appendingPathComponent("data.mdb")
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile))
        await expectDepotError(.storeCorrupted) { try LMDBStore(directory: directory.path) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: dataFile)) == before)
    }

    @Test("two stores in one process on different directories; one directory opens once")
    func twoStores() async throws {
        try await withStore { first, firstDirectory in
            try await withStore { second, _ in
                let a = Cats(store: first)
                let b = Cats(store: second)
                try await a.save(Cat.workload(count: 300, seed: 1))
                try await b.save(Cat.workload(count: 50, seed: 2))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in 0..<20 {
                        group.addTask { try await a.save(Cat(id: Int64(1000 + i), name: "a\(i)", weight: 1, age: 1)) }
                        group.addTask { try await b.save(Cat(id: Int64(2000 + i), name: "b\(i)", weight: 2, age: 2)) }
                    }
                    try await group.waitForAll()
                }
                #expect(try await a.count() == 320)
                #expect(try await b.count() == 70)
                #expect(try await a.fetchOne(id: 2000) == nil)
                #expect(try await b.fetchOne(id: 2000)?.name == "b0")
                #expect(first.directory != second.directory)
                await expectDepotError(.busy) { try LMDBStore(directory: firstDirectory.path) }
            }
        }
    }

    @Test("readers run while a write transaction is open and do not see it")
    func readersDuringWrite() async throws {
        try await withStore { store, _ in
            let cats = Cats(store: store)
            try await cats.save(Array(fixtureCatsForTests))
            let entity = try await cats.registeredEntity()
            let insideWrite = DispatchSemaphore(value: 0)
            let finishWrite = DispatchSemaphore(value: 0)
            let writeDone = Flag()
            // The writer blocks on the store's writer thread with an uncommitted insert.
            let writer = Task {
                try await store.write { transaction in
                    var row = Row()
                    try CatRecord(id: 500, name: "Pending", weight: 1, age: 1).encode(into: &row)
                    try transaction.insert(row, into: entity)
                    insideWrite.signal()
                    // Only keeps a broken store from hanging the run; it must outlast a slow
                    // machine (Thread Sanitizer on a loaded CI host).
                    _ = finishWrite.wait(timeout: .now() + 300)
                }
                writeDone.set()
            }
            try #require(await signalled(insideWrite, within: 300), "the write started")
            let counts = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await cats.count() }
                    group.addTask { try await cats.exists(id: 500) ? 1 : 0 }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(writeDone.isSet == false, "the write was still open while the readers ran")
            #expect(counts.sorted() == Array(repeating: 0, count: 8) + Array(repeating: 10, count: 8))
            finishWrite.signal()
            try await writer.value
            #expect(try await cats.count() == 11)
        }
    }

    @Test("mdb_stat -a lists the entity, index and metadata databases")
    func mdbStat() async throws {
        guard let tool = executable("mdb_stat") else {
            Issue.record("mdb_stat is not installed (apt: lmdb-utils); run make deps")
            return
        }
        try await withStore { store, directory in
            let cats = Cats(store: store)
            try await cats.save(Array(fixtureCatsForTests))
            let accounts = Accounts(store: store)
            try await accounts.save(Account(id: "a", owner: "ann"))
            let (status, output) = try run(tool, ["-a", directory.path])
            #expect(status == 0, "\(output)")
            for name in ["depot_meta", "Cat", "Cat.idx.age", "Account", "Account.idx.owner", "Account.idx.nickname"] {
                #expect(output.contains("Status of \(name)\n"), "mdb_stat lists \(name): \(output)")
            }
            // The Cat database holds one entry per cat.
            let catSection = output.components(separatedBy: "Status of Cat\n").last ?? ""
            #expect(catSection.contains("Entries: 10\n"), "\(catSection)")
        }
    }

    @Test("an additive schema change is kept across close and reopen")
    func additiveChangeAcrossReopen() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try LMDBStore(directory: directory.path)
            try await Cats(store: store).save(Array(fixtureCatsForTests))
            await store.close()
        }
        do {
            let store = try LMDBStore(directory: directory.path)
            let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
            let migrated = try await grown.fetchAll()
            #expect(migrated.count == 10)
            #expect(migrated.allSatisfy { $0.color == nil && $0.lives == 9 })
            try await grown.save(CatRecordV2(id: 100, name: "Nova", weight: 1, age: 1, color: "grey", lives: 7))
            await store.close()
        }
        do {
            let store = try LMDBStore(directory: directory.path)
            let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
            #expect(try await grown.count() == 11)
            #expect(try await grown.fetchAll(Request(\.color == "grey")).map(\.id) == [100])
            // The index on name built during the migration answers range queries.
            let byName = try await grown.fetchAll(Request(.hasPrefix(\.name, "Tom")).sorted(by: \.name))
            #expect(byName.map(\.name) == ["Tom", "Tomasz"])
            #expect(try await grown.count(Request(\.lives == 9)) == 10)
            // Going back to the older declaration would drop attributes: refused.
            await expectDepotError(.schemaMismatch) { try await Cats(store: store).fetchAll() }
            await store.close()
            if let tool = executable("mdb_stat") {
                let (_, output) = try run(tool, ["-a", directory.path])
                #expect(output.contains("Status of Cat.idx.name\n"))
            }
        }
    }

    @Test("an incompatible schema change is refused after reopen and changes nothing")
    func incompatibleChangeAfterReopen() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try LMDBStore(directory: directory.path)
            try await Cats(store: store).save(Array(fixtureCatsForTests))
            await store.close()
        }
        let dataFile = (directory.path as NSString).appendingPathComponent("data.mdb")
        let before = try Data(contentsOf: URL(fileURLWithPath: dataFile))
        do {
            let store = try LMDBStore(directory: directory.path)
            let retyped = Controller<CatRecordRetyped, CatRecordRetyped>(store: store)
            do {
                _ = try await retyped.fetchAll()
                Issue.record("a retyped attribute must be refused")
            } catch let error as DepotError {
                #expect(error.code == .schemaMismatch)
                #expect(error.message.contains("age"), "\(error.message)")
            }
            await store.close()
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: dataFile)) == before, "the refusal wrote nothing")
        let store = try LMDBStore(directory: directory.path)
        let cats = Cats(store: store)
        #expect(try await cats.fetchAll() == fixtureCatsForTests.sorted { $0.id < $1.id })
        await store.close()
    }

    @Test("relaxed and unsafe durability open, write and read back", arguments: [LMDBStore.Durability.relaxed, .unsafe])
    func durabilityOptions(_ durability: LMDBStore.Durability) async throws {
        try await withStore(options: .init(durability: durability)) { store, _ in
            let cats = Cats(store: store)
            try await cats.save(Array(fixtureCatsForTests))
            #expect(try await cats.count() == 10)
            #expect(store.options.durability == durability)
            #expect(store.backendName == "lmdb")
        }
    }

    @Test("bad options and a file path are refused")
    func badConfiguration() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        await expectDepotError(.invalidConfiguration) { try LMDBStore(directory: directory.path, options: .init(mapSize: 0)) }
        try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
        let file = (directory.path as NSString).appendingPathComponent("plain")
        try Data([1]).write(to: URL(fileURLWithPath: file))
        await expectDepotError(.invalidConfiguration) { try LMDBStore(directory: file) }
    }
}

@Suite("LMDB read transaction reuse")
struct LMDBReaderReuseTests {
    /// A pointer `IdleReaders` keeps but never dereferences.
    static func handle(_ n: Int) -> ReaderHandle {
        ReaderHandle(txn: OpaquePointer(bitPattern: 0x1000 + n * 16)!)
    }

    @Test("an idle read transaction goes back to the thread that put it back; at most 16 are kept")
    func idleSlots() {
        let idle = IdleReaders()
        let handles = (0..<17).map(Self.handle)
        #expect(idle.take() == nil)
        #expect(idle.put(handles[0]))
        #expect(idle.take() === handles[0])
        #expect(idle.take() == nil)
        for handle in handles.prefix(16) { #expect(idle.put(handle)) }
        #expect(!idle.put(handles[16]), "a seventeenth idle transaction is not kept")
        let drained = idle.drain()
        #expect(Set(drained.map(ObjectIdentifier.init)) == Set(handles.prefix(16).map(ObjectIdentifier.init)))
        #expect(idle.take() == nil)
    }

    @Test("threads taking and putting back idle transactions never share one and lose none")
    func idleSlotsUnderContention() {
        let idle = IdleReaders()
        let inUse = NIOLockedValueBox<Set<ObjectIdentifier>>([])
        let created = Atomic<Int>(0)
        let discarded = Atomic<Int>(0)
        let shared = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<20_000 {
                let handle = idle.take() ?? Self.handle(created.wrappingAdd(1, ordering: .relaxed).newValue)
                if !inUse.withLockedValue({ $0.insert(ObjectIdentifier(handle)).inserted }) { shared.add(1, ordering: .relaxed) }
                // A write to the handle, which Thread Sanitizer checks is ordered.
                handle.transaction = nil
                inUse.withLockedValue { _ = $0.remove(ObjectIdentifier(handle)) }
                if !idle.put(handle) { discarded.add(1, ordering: .relaxed) }
            }
        }
        let drained = idle.drain()
        #expect(shared.load(ordering: .relaxed) == 0, "a handle was taken by two threads at once")
        #expect(Set(drained.map(ObjectIdentifier.init)).count == drained.count)
        #expect(drained.count + discarded.load(ordering: .relaxed) == created.load(ordering: .relaxed))
    }

    @Test("lookups on reused read transactions follow entities registered and records written since")
    func reuseFollowsCatalogChanges() async throws {
        try await withStore { store, _ in
            let cats = Cats(store: store)
            try await cats.save(Array(fixtureCatsForTests))
            let first = try #require(fixtureCatsForTests.first)
            // Leaves idle read transactions behind, made with a catalog of one entity.
            for _ in 0..<8 { #expect(try await cats.fetchOne(id: first.id) == first) }
            let accounts = Accounts(store: store)
            try await accounts.save(Account(id: "a", owner: "Ann", balance: 5))
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<8 {
                    group.addTask {
                        let account = try await accounts.fetchOne(id: "a")
                        let cat = try await cats.fetchOne(id: first.id)
                        let missing = try await cats.fetchOne(id: 10_000 + Int64(n))
                        #expect(account?.balance == 5)
                        #expect(cat == first)
                        #expect(missing == nil)
                    }
                }
                try await group.waitForAll()
            }
            try await accounts.save(Account(id: "a", owner: "Ann", balance: 6))
            #expect(try await accounts.fetchOne(id: "a")?.balance == 6)
        }
    }
}

/// The conformance suite's fixture cats.
let fixtureCatsForTests = Cat.fixtures

final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}
