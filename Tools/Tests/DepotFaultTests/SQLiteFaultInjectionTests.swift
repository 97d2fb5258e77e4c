import NIOConcurrencyHelpers
import ToolsCSQLite
import CSQLiteFaultVFS
import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotSQLite

// SQLite's extended result codes the faults produce. sqlite3.h defines them as macros over
// other macros (`#define SQLITE_IOERR_WRITE (SQLITE_IOERR | (3<<8))`), which Swift does not
// import.
private let sqliteFull = SQLITE_FULL
private let sqliteIOErrWrite: Int32 = SQLITE_IOERR | (3 << 8)
private let sqliteIOErrFsync: Int32 = SQLITE_IOERR | (4 << 8)

typealias Cats = Controller<Cat, CatRecord>

/// Expects `body` to fail with a `DepotError` of `code`, and returns the error.
@discardableResult
func expectDepotError<T>(_ code: DepotError.Code, _ body: () async throws -> T) async -> DepotError? {
    let error = await #expect(throws: DepotError.self) { _ = try await body() }
    #expect(error?.code == code, "\(String(describing: error))")
    return error
}

/// What `sqlite3 -bail` printed for `sql` on the database at `path`.
func sqlite3CLI(_ path: String, _ sql: String) throws -> String {
    let result = try ProcessLaunch.run("/usr/bin/sqlite3", ["-bail", path, sql])
    #expect(result.exit.succeeded, "sqlite3: \(result.stderr)")
    return result.stdout
}

/// A fresh directory under the system's temporary directory, removed when `body` ends.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("depot-fault-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// The fault switch of the "depot-fault" VFS (Tools/Sources/CSQLiteFaultVFS), scoped to one
/// test's directory: files elsewhere pass straight through, uncounted.
struct DiskFaults {
    struct Operations: OptionSet {
        let rawValue: Int32
        static let write = Operations(rawValue: DEPOT_FAULT_OP_WRITE)
        static let sync = Operations(rawValue: DEPOT_FAULT_OP_SYNC)
        static let truncate = Operations(rawValue: DEPOT_FAULT_OP_TRUNCATE)
    }

    /// Lets `calls` more calls of `operations` through, then fails each one as the system
    /// call failing with `errno` would (EIO, ENOSPC) until ``clear()``, or only `times`
    /// times when given.
    func fail(_ operations: Operations, after calls: Int = 0, errno: Int32, times: Int = 0) {
        depot_fault_arm(operations.rawValue, Int64(calls), errno, Int64(times))
    }

    /// The disk works again.
    func clear() { depot_fault_disarm() }

    var counts: depot_fault_counts { depot_fault_counters() }

    func resetCounts() { depot_fault_reset_counters() }
}

/// Runs `body` with a fresh directory (symbolic links resolved, so the paths SQLite opens
/// start with it) whose files go through the fault VFS. The VFS is the process's default
/// only meanwhile; other tests' stores that open meanwhile pass through it untouched.
func withFailingDisk<T>(_ body: (URL, DiskFaults) async throws -> T) async throws -> T {
    try await withTemporaryDirectory { directory in
        let resolved = directory.resolvingSymlinksInPath()
        try #require(depot_fault_vfs_make_default(1) == 0, "registering the fault VFS")
        depot_fault_set_scope(resolved.path + "/")
        defer {
            depot_fault_set_scope(nil)
            _ = depot_fault_vfs_make_default(0)
        }
        return try await body(resolved, DiskFaults())
    }
}

/// Every cat in the store, by key.
private func contents(_ cats: Cats) async throws -> [Int64: Cat] {
    Dictionary(uniqueKeysWithValues: try await cats.fetchAll().map { ($0.id, $0) })
}

/// Cats with names long enough that a commit of a few of them spans several pages, so a
/// fault can land in the middle of a commit's writes, not only on its first.
private struct Litter {
    private var next: Int64 = 1

    mutating func make(_ count: Int) -> [Cat] {
        defer { next += Int64(count) }
        return (0..<Int64(count)).map { i in
            let id = next + i
            return Cat(id: id, name: "cat \(id) " + String(repeating: "\(id % 10)", count: 1_500), weight: Double(id) / 4, age: Int(id % 20))
        }
    }
}

@Suite("SQLite when the disk fails (fault-injecting VFS)", .serialized)
struct SQLiteFaultInjectionTests {
    /// Writes fail (EIO) after 0, 1, 2, … further writes, so commits fail on their first
    /// WAL frame, in the middle of their frames and not at all; each failure must be a
    /// DepotError, lose no acknowledged commit, leave no trace of its own, and leave the
    /// same store able to commit as soon as the disk works again.
    @Test func failedWritesAreReportedAndLoseNothingAcknowledged() async throws {
        try await withFailingDisk { directory, faults in
            let path = directory.appendingPathComponent("cats.sqlite").path
            var litter = Litter()
            var acknowledged: [Int64: Cat] = [:]
            var failed: Set<Int64> = []
            let store = try SQLiteStore(path: path)
            let cats = Cats(store: store)
            for _ in 0..<3 {
                let batch = litter.make(4)
                try await cats.save(batch)
                for cat in batch { acknowledged[cat.id] = cat }
            }

            var failures = 0
            for after in [0, 1, 2, 3, 5, 8, 13, 21, 34] {
                let batch = litter.make(8)
                faults.fail(.write, after: after, errno: EIO)
                do {
                    try await cats.save(batch)
                    // The commit needed fewer writes than the fault let through.
                    for cat in batch { acknowledged[cat.id] = cat }
                } catch let error as DepotError {
                    failures += 1
                    failed.formUnion(batch.map(\.id))
                    #expect(error.code == .io, "\(error)")
                    #expect(error.nativeCode == sqliteIOErrWrite, "\(error)")
                    #expect(error.message.contains("I/O error"), "\(error)")
                    // Still failing: reads see every acknowledged commit and nothing else,
                    // and another commit fails the same way rather than some other way.
                    #expect(try await contents(cats) == acknowledged)
                    await expectDepotError(.io) { try await cats.save(litter.make(1)) }
                }
                faults.clear()
                // The same store, with no reopening, commits again.
                let healed = litter.make(2)
                try await cats.save(healed)
                for cat in healed { acknowledged[cat.id] = cat }
                #expect(try await contents(cats) == acknowledged, "after a fault after \(after) writes")
            }
            #expect(failures >= 3, "the fault hit commits (it hit \(failures))")
            #expect(faults.counts.injected >= Int64(failures))
            await store.close()

            let reopened = try SQLiteStore(path: path)
            let recovered = try await contents(Cats(store: reopened))
            #expect(recovered == acknowledged)
            #expect(failed.isDisjoint(with: recovered.keys))
            await reopened.close()
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }

    /// A full disk (ENOSPC) fails the commit with `storeFull`, for as long as it lasts,
    /// and the store takes writes again once space is freed.
    @Test func aFullDiskIsStoreFullUntilSpaceIsFreed() async throws {
        try await withFailingDisk { directory, faults in
            let path = directory.appendingPathComponent("cats.sqlite").path
            var litter = Litter()
            let store = try SQLiteStore(path: path)
            let cats = Cats(store: store)
            var acknowledged: [Int64: Cat] = [:]
            let first = litter.make(5)
            try await cats.save(first)
            for cat in first { acknowledged[cat.id] = cat }

            faults.fail(.write, after: 2, errno: ENOSPC)
            for _ in 0..<3 {
                let error = await expectDepotError(.storeFull) { try await cats.save(litter.make(8)) }
                #expect(error?.nativeCode == sqliteFull, "\(String(describing: error))")
                #expect(error?.message.contains("free space") == true, "\(String(describing: error))")
                #expect(try await contents(cats) == acknowledged)
            }
            faults.clear()
            let later = litter.make(3)
            try await cats.save(later)
            for cat in later { acknowledged[cat.id] = cat }
            await store.close()

            let reopened = try SQLiteStore(path: path)
            #expect(try await contents(Cats(store: reopened)) == acknowledged)
            await reopened.close()
        }
    }

    /// With `durability: .full` every commit fsyncs the WAL; when that fsync fails the
    /// commit is not acknowledged, is not visible, and later commits work.
    @Test func aFailedFsyncFailsTheCommitUnderFullDurability() async throws {
        try await withFailingDisk { directory, faults in
            let path = directory.appendingPathComponent("cats.sqlite").path
            var litter = Litter()
            let store = try SQLiteStore(path: path, options: .init(durability: .full))
            let cats = Cats(store: store)
            var acknowledged: [Int64: Cat] = [:]
            let first = litter.make(3)
            try await cats.save(first)
            for cat in first { acknowledged[cat.id] = cat }

            faults.fail(.sync, errno: EIO)
            let lost = litter.make(4)
            let error = await expectDepotError(.io) { try await cats.save(lost) }
            #expect(error?.nativeCode == sqliteIOErrFsync, "\(String(describing: error))")
            #expect(try await contents(cats) == acknowledged)
            await expectDepotError(.io) { try await cats.save(litter.make(1)) }
            faults.clear()

            let later = litter.make(2)
            try await cats.save(later)
            for cat in later { acknowledged[cat.id] = cat }
            #expect(try await contents(cats) == acknowledged)
            await store.close()

            let reopened = try SQLiteStore(path: path)
            let recovered = try await contents(Cats(store: reopened))
            #expect(recovered == acknowledged)
            #expect(lost.allSatisfy { recovered[$0.id] == nil })
            await reopened.close()
        }
    }

    /// A transaction larger than SQLite's page cache (2 MB by default) writes pages to the
    /// WAL before it commits, so the fault hits a save inside the operation, and SQLite
    /// rolls the whole transaction back there. An operation that catches the error and goes
    /// on writing must not commit any part of itself, and the store must work once the disk
    /// does.
    @Test(arguments: [EIO, ENOSPC])
    func aFailureInsideALargeTransactionKeepsNothingOfIt(errno: Int32) async throws {
        try await withFailingDisk { directory, faults in
            let path = directory.appendingPathComponent("cats.sqlite").path
            var litter = Litter()
            let store = try SQLiteStore(path: path)
            let cats = Cats(store: store)
            var acknowledged: [Int64: Cat] = [:]
            let first = litter.make(4)
            try await cats.save(first)
            for cat in first { acknowledged[cat.id] = cat }

            let large = litter.make(2_000)  // about 3.5 MB of pages
            let small = litter.make(1)
            let caughtInside = NIOLockedValueBox<[DepotError]>([])
            // One failed write only: the disk works again at once, so a statement run after
            // SQLite's rollback would commit on its own if the store let it run.
            faults.fail(.write, after: 5, errno: errno, times: 1)
            let expected: DepotError.Code = errno == ENOSPC ? .storeFull : .io
            var final: DepotError?
            do {
                try await cats.operation { context in
                    do {
                        try context.save(large)
                    } catch let error as DepotError {
                        // An application that swallows the error and carries on.
                        caughtInside.withLockedValue { $0.append(error) }
                    }
                    try context.save(small)
                }
                Issue.record("the operation committed although the disk failed")
            } catch let error as DepotError {
                final = error
            } catch {
                Issue.record("expected a DepotError, got \(error)")
            }
            let inside = caughtInside.withLockedValue { $0 }
            #expect(inside.count == 1, "the fault hit a save inside the transaction, not its commit: \(inside)")
            #expect(inside.first?.code == expected, "\(inside)")
            #expect(final != nil)
            // SQLite rolled the whole transaction back at the failed save; the next save is
            // refused, with the code of the disk error that caused the rollback, so the
            // caller still sees `storeFull` or `io`.
            #expect(final?.code == expected, "\(String(describing: final))")
            #expect(try await contents(cats) == acknowledged)
            faults.clear()

            let later = litter.make(2)
            try await cats.save(later)
            for cat in later { acknowledged[cat.id] = cat }
            #expect(try await contents(cats) == acknowledged)
            await store.close()

            let reopened = try SQLiteStore(path: path)
            #expect(try await contents(Cats(store: reopened)) == acknowledged)
            await reopened.close()
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }

    /// A store closed while its disk fails cannot checkpoint its WAL; reopened once the
    /// disk works, it recovers every acknowledged commit from the WAL.
    @Test func closingWhileTheDiskFailsLosesNothingAcknowledged() async throws {
        try await withFailingDisk { directory, faults in
            let path = directory.appendingPathComponent("cats.sqlite").path
            var litter = Litter()
            let store = try SQLiteStore(path: path)
            let cats = Cats(store: store)
            var acknowledged: [Int64: Cat] = [:]
            for _ in 0..<4 {
                let batch = litter.make(4)
                try await cats.save(batch)
                for cat in batch { acknowledged[cat.id] = cat }
            }
            faults.fail([.write, .sync, .truncate], errno: EIO)
            await expectDepotError(.io) { try await cats.save(litter.make(4)) }
            await store.close()
            #expect(FileManager.default.fileExists(atPath: path + "-wal"), "the close's checkpoint failed too, so the WAL stays for the next open to recover")
            faults.clear()

            let reopened = try SQLiteStore(path: path)
            #expect(try await contents(Cats(store: reopened)) == acknowledged)
            await reopened.close()
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }

    /// The durability setting decides whether a commit costs an fsync, as documented:
    /// none with `.normal`, at least one per commit with `.full`.
    @Test(arguments: [SQLiteStore.Durability.normal, .full])
    func durabilityDecidesWhetherCommitsSync(durability: SQLiteStore.Durability) async throws {
        try await withFailingDisk { directory, faults in
            let store = try SQLiteStore(path: directory.appendingPathComponent("cats.sqlite").path, options: .init(durability: durability))
            let cats = Cats(store: store)
            var litter = Litter()
            try await cats.save(litter.make(1))  // registration and creation sync in either mode
            faults.resetCounts()
            let commits = 5
            for _ in 0..<commits { try await cats.save(litter.make(1)) }
            let counts = faults.counts
            #expect(counts.writes > 0)
            switch durability {
            case .normal: #expect(counts.syncs == 0, "\(counts)")
            case .full: #expect(counts.syncs >= Int64(commits), "\(counts)")
            }
            await store.close()
        }
    }
}
