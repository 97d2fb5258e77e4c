import DepotCore
import DepotTesting
import Dispatch
import Foundation
import InMemoryLogging
import Logging
import Testing

import DepotSQLite

/// The WAL is checkpointed by the store's checkpointer thread, beside the writer, not by
/// the commit that fills it (SQLite's default).
@Suite("SQLite WAL checkpoints")
struct SQLiteCheckpointTests {
    /// Frames in the WAL file: a 32-byte header, then per frame a 24-byte header and a page
    /// (4 KiB, SQLite's default page size, which the store keeps).
    static func walFrames(_ path: String) -> Int {
        let size = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        return max(0, size - 32) / (4096 + 24)
    }

    static func fileSize(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }

    /// Waits, off the cooperative pool's threads, until `condition` holds (at most
    /// `seconds`).
    static func eventually(within seconds: Double, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    @Test func commitsThatFillTheWALLeaveTheCheckpointToTheCheckpointerThread() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("cats.sqlite").path
            let store = try SQLiteStore(path: path)
            let reached = DispatchSemaphore(value: 0)
            let held = DispatchSemaphore(value: 0)
            // Holds the checkpointer's thread at its first checkpoint.
            store.checkpointer.beforeCheckpoint = {
                reached.signal()
                held.wait()
            }
            let cats = Cats(store: store)
            try await cats.save(Cat(id: 1, name: "cat 1", weight: 1, age: 1))
            let mainBefore = Self.fileSize(path)

            // Single saves, each its own commit, until the WAL holds well past the
            // threshold: with SQLite's own checkpointing, the commit crossing it would have
            // copied the pages into the main file before returning.
            var next: Int64 = 2
            while Self.walFrames(path) < Int(store.checkpointer.threshold) + 300 {
                for _ in 0..<50 {
                    try await cats.save(Cat(id: next, name: "cat \(next)", weight: Double(next), age: Int(next % 30)))
                    next += 1
                }
            }
            #expect(await signalled(reached, within: 30), "the checkpointer's thread began a checkpoint")
            // Commits go on while the checkpoint is held, and none copied a page.
            for _ in 0..<200 {
                try await cats.save(Cat(id: next, name: "cat \(next)", weight: Double(next), age: Int(next % 30)))
                next += 1
            }
            #expect(Self.fileSize(path) == mainBefore, "no commit checkpointed the WAL into the main file")
            #expect(store.checkpointer.checkpoints == 0)

            held.signal()
            let copied = await Self.eventually(within: 30) { Self.fileSize(path) > mainBefore && store.checkpointer.checkpoints > 0 }
            #expect(copied, "the checkpointer's thread copied the WAL into the main file")
            #expect(try await cats.count() == Int(next - 1))
            await store.close()
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "closing checkpointed and removed the WAL")
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM Cat;") == "\(next - 1)\n")
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }

    /// A writer connection with the checkpointer installed, over a one-table database,
    /// and a small threshold so a test writes many times its frames quickly.
    static func writer(at path: String, threshold: Int32, log: StoreLog = .disabled) throws -> (Connection, Checkpointer) {
        let writer = try Connection.open(path: path, create: true, busyTimeout: .seconds(5))
        #expect(try writer.scalarText("PRAGMA journal_mode = WAL") == "wal")
        try writer.execute("PRAGMA synchronous = NORMAL")
        try writer.execute("CREATE TABLE t(x INTEGER PRIMARY KEY, y TEXT NOT NULL)")
        let checkpointer = Checkpointer(path: path, log: log, threshold: threshold)
        writer.checkpoint(with: checkpointer)
        return (writer, checkpointer)
    }

    /// A checkpoint running beside a writer that never pauses rarely finds every frame
    /// copied, and the WAL restarts only at a write that does: without the writer copying
    /// the remainder itself now and then, the WAL would grow with every commit.
    @Test func theWALStaysBoundedUnderAStreamOfCommits() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("t.sqlite").path
            let (writer, checkpointer) = try Self.writer(at: path, threshold: 100)
            // Each commit writes at least one frame: 20,000 of them. Alone on the machine the
            // WAL restarts dozens of times and stays under 4 × behindFrames (3,200); a WAL
            // that never restarts ends past 20,000 frames. Beside other tests' threads the
            // checkpointer's thread can be held off the CPU inside a checkpoint, holding the
            // checkpoint lock while the writer adds thousands of frames, so what is checked is
            // that the WAL restarted again and again, and stayed under three quarters of
            // what one that never restarts reaches.
            var largest = 0
            for i in 1...20_000 {
                try writer.execute("INSERT INTO t(x, y) VALUES (\(i), 'row \(i)')")
                if i % 100 == 0 { largest = max(largest, Self.walFrames(path)) }
            }
            #expect(checkpointer.restarts >= 3, "the WAL restarted \(checkpointer.restarts) times")
            #expect(largest <= 15_000, "the WAL grew to \(largest) frames")
            // The thread synced the database file after its rounds: SQLite syncs it only in a
            // checkpoint that copies the whole WAL, which would leave that sync of every page
            // the thread copied to the writer's restart copy.
            #expect(checkpointer.databaseSyncs > 0)
            // The copies the writer makes for a restart are small: the thread copies the rest.
            // Where the thread keeps up (a fast, idle machine) the writer finds every frame
            // copied and restarts the WAL without copying any, so only the bound is checked.
            #expect(
                checkpointer.largestRestartCopy <= checkpointer.writerCopyFrames,
                "the writer copied \(checkpointer.largestRestartCopy) frames at once for a restart")
            #expect(checkpointer.checkpoints > 0)
            checkpointer.close()
            writer.close()
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "the writer's close checkpointed and removed the WAL")
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM t;") == "20000\n")
        }
    }

    /// A checkpointer thread that cannot run (a machine too busy to give it the CPU) does not
    /// let the WAL grow: past ``Checkpointer/behindFrames`` the writer checkpoints itself.
    @Test func theWriterTakesCheckpointsBackWhenTheThreadFallsBehind() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("t.sqlite").path
            let handler = InMemoryLogHandler()
            var logger = Logger(label: "depot.test") { _ in handler }
            logger.logLevel = .debug
            let (writer, checkpointer) = try Self.writer(at: path, threshold: 100, log: StoreLog(logger: logger))
            let reached = DispatchSemaphore(value: 0)
            let held = DispatchSemaphore(value: 0)
            checkpointer.beforeCheckpoint = {
                reached.signal()
                held.wait()
            }
            var largest = 0
            for i in 1...5_000 {
                try writer.execute("INSERT INTO t(x, y) VALUES (\(i), 'row \(i)')")
                largest = max(largest, Self.walFrames(path))
            }
            #expect(await signalled(reached, within: 30), "the thread was woken for a checkpoint")
            #expect(largest <= Int(checkpointer.behindFrames + checkpointer.threshold), "the WAL grew to \(largest) frames")
            #expect(checkpointer.checkpoints > 0, "the writer checkpointed")
            let warnings = handler.entries.filter { $0.level == .warning && "\($0.message)".contains("checkpointer thread fell behind") }
            #expect(!warnings.isEmpty, "the takeover is logged at warning")
            let done = handler.entries.filter { $0.level == .debug && "\($0.message)" == "SQLite WAL checkpointed" }
            #expect(done.contains { $0.metadata["depot.on"] == "writer" }, "the writer's checkpoints are logged at debug")
            held.signal()
            checkpointer.close()
            writer.close()
            #expect(try sqlite3CLI(path, "SELECT count(*) FROM t;") == "5000\n")
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }
}
