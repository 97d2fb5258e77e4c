import DepotCore
import DepotTesting
import Foundation
import Synchronization
import Testing

import DepotSQLite

/// A reader connection keeps its read transaction between reads of one statement while
/// nothing commits (see `KeptSnapshots`): a read still sees every commit made before it
/// began, by this process or another, and idle readers give their transactions up so that
/// checkpoints and WAL restarts, this process's or another's, are not held back.
@Suite("SQLite snapshots kept between reads")
struct SQLiteKeptSnapshotTests {
    /// Tells the readers of a test that the writer is done.
    final class Done: Sendable {
        let flag = Atomic<Bool>(false)
    }

    /// A store in `directory` holding `count` cats, with its sweeps of idle readers paused
    /// when `paused`, and the database file's path.
    static func store(in directory: URL, cats count: Int, paused: Bool) async throws -> (SQLiteStore, Controller<Cat, CatRecord>, String) {
        let path = directory.appendingPathComponent("kept.sqlite").path
        let store = try SQLiteStore(path: path)
        store.pauseSnapshotSweeps(paused)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: count))
        return (store, cats, path)
    }

    @Test func aReadSeesWhatAnotherProcessCommittedSinceTheLastRead() async throws {
        try await withTemporaryDirectory { directory in
            let (store, cats, path) = try await Self.store(in: directory, cats: 10, paused: true)
            #expect(try await cats.fetchOne(id: 3)?.name != "renamed")
            #expect(store.keptSnapshots >= 1, "the read kept its transaction")
            // Another process commits while the reader keeps its transaction.
            #expect(try sqlite3CLI(path, "UPDATE Cat SET name = 'renamed' WHERE id = 3; SELECT changes();") == "1\n")
            #expect(try await cats.fetchOne(id: 3)?.name == "renamed")
            #expect(try await cats.count(Request(\.name == "renamed")) == 1)
            // And this process's own writes, through another store on the same file.
            let other = try SQLiteStore(path: path)
            try await Controller<Cat, CatRecord>(store: other).save(Cat(id: 11, name: "eleven", weight: 1, age: 1))
            #expect(try await cats.fetchOne(id: 11)?.name == "eleven")
            await other.close()
            await store.close()
        }
    }

    /// Readers that read all the time keep transactions all the time: the writer's copy for
    /// a restart makes them give theirs up, so the WAL still restarts and stays bounded.
    @Test func theWALRestartsWhileReadersReadBesideAStreamOfSaves() async throws {
        try await withTemporaryDirectory { directory in
            let (store, cats, path) = try await Self.store(in: directory, cats: 100, paused: false)
            // Each save adds about two frames (the table's page, the index's): enough for
            // several restarts at the checkpointer's threshold of 1,000 frames, under Thread
            // Sanitizer too.
            let saves = TestScale.size("DEPOT_KEPT_SAVES", ci: 8_000, tsan: 8_000)
            let done = Done()
            var largest = 0
            try await withThrowingTaskGroup(of: Void.self) { group in
                for reader in 0..<4 {
                    group.addTask {
                        var id = Int64(reader)
                        while !done.flag.load(ordering: .relaxed) {
                            let cat = try await cats.fetchOne(id: id % 100 + 1)
                            #expect(cat != nil)
                            id += 1
                        }
                    }
                }
                for i in 0..<saves {
                    try await cats.save(Cat(id: Int64(1_000 + i), name: "cat \(i)", weight: 1, age: i % 16))
                    if i % 100 == 0 { largest = max(largest, SQLiteCheckpointTests.walFrames(path)) }
                }
                done.flag.store(true, ordering: .relaxed)
                try await group.waitForAll()
            }
            #expect(store.checkpointer.restarts >= 1, "the WAL never restarted (largest \(largest) frames)")
            // A WAL that never restarts passes 16,000 frames at the CI size; one that does
            // stays near 4 × the threshold, where the writer copies the rest for a restart.
            let bound = 12 * Int(store.checkpointer.threshold)
            #expect(largest <= bound, "the WAL grew to \(largest) frames")
            #expect(try await cats.count() == 100 + saves)
            await store.close()
        }
    }

    @Test func idleReadersGiveTheirTransactionsUpSoAnotherProcessCanRestartTheWAL() async throws {
        try await withTemporaryDirectory { directory in
            let (store, cats, path) = try await Self.store(in: directory, cats: 50, paused: true)
            // Reads on several readers at once, so that more than one keeps a transaction.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for id in Int64(1)...8 { group.addTask { _ = try await cats.fetchOne(id: id) } }
                try await group.waitForAll()
            }
            #expect(store.keptSnapshots >= 1)
            store.pauseSnapshotSweeps(false)
            let released = try await eventually { store.keptSnapshots == 0 }
            #expect(released, "idle readers still keep \(store.keptSnapshots) transactions")
            // Nothing of this process holds a read mark: another process's checkpoint copies
            // every frame and truncates the WAL.
            #expect(try sqlite3CLIResult(path, "PRAGMA wal_checkpoint(TRUNCATE);").text == "0|0|0\n")
            #expect(try await cats.count() == 50)
            await store.close()
        }
    }
}
