import NIOConcurrencyHelpers
import CSQLite
import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Logging
import Testing

import DepotSQLite

#if canImport(Glibc)
import Glibc
#endif

/// The bytes of a file and whether SQLite left companions beside it.
private struct FileState: Equatable {
    let bytes: Data
    let wal: Bool
    let shm: Bool
    let journal: Bool

    init(_ path: String) throws {
        bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        wal = FileManager.default.fileExists(atPath: path + "-wal")
        shm = FileManager.default.fileExists(atPath: path + "-shm")
        journal = FileManager.default.fileExists(atPath: path + "-journal")
    }
}

@Suite("SQLiteStore opening: foreign databases, headers, locks, release")
struct SQLiteOpeningTests {
    // MARK: Another program's database (issue #11, item 4)

    @Test func anotherProgramsDatabaseIsRefusedAndLeftByteForByte() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("theirs.sqlite").path
            _ = try sqlite3CLI(path, "CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices VALUES (1, 9.5);")
            let before = try FileState(path)
            #expect(!before.wal && !before.shm, "the other program's file is a rollback-journal database")

            let error = await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(error?.message.contains("another program") == true, "\(String(describing: error))")
            #expect(error?.message.contains("invoices") == true, "the message names what is there: \(String(describing: error))")
            #expect(error?.message.contains("adopt=true") == true, "the message says how to opt in: \(String(describing: error))")
            #expect(try FileState(path) == before, "bytes unchanged, no -wal, -shm or -journal left behind")
            #expect(try sqlite3CLI(path, "PRAGMA journal_mode;") == "delete\n", "still in its own journal mode")
            #expect(try sqlite3CLI(path, "SELECT name FROM sqlite_master ORDER BY name;") == "invoices\n", "no Depot table added")
        }
    }

    @Test func anotherProgramsWALDatabaseIsRefusedToo() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("theirs-wal.sqlite").path
            _ = try sqlite3CLI(path, "PRAGMA journal_mode=WAL; CREATE TABLE notes(body TEXT); CREATE INDEX notes_body ON notes(body);")
            let before = try FileState(path)
            await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(try FileState(path) == before)
        }
    }

    /// A program that died with its WAL database open leaves committed frames in `-wal`.
    /// Refusing the file must not checkpoint them into the main file or delete the `-wal`
    /// and `-shm` (SQLite does both when the last connection closes).
    @Test func anotherProgramsUncheckpointedWALIsLeftAsItWas() async throws {
        try await withTemporaryDirectory { directory in
            let live = directory.appendingPathComponent("live.sqlite").path
            let path = directory.appendingPathComponent("crashed.sqlite").path
            var db: OpaquePointer?
            #expect(sqlite3_open(live, &db) == SQLITE_OK)
            defer { sqlite3_close(db) }
            for sql in [
                "PRAGMA journal_mode=WAL", "PRAGMA wal_autocheckpoint=0", "CREATE TABLE notes(body TEXT)",
                "INSERT INTO notes VALUES ('kept only in the WAL')",
            ] {
                #expect(sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
            }
            // Copy the three files while the connection is open: what a crash leaves.
            for suffix in ["", "-wal", "-shm"] {
                try FileManager.default.copyItem(atPath: live + suffix, toPath: path + suffix)
            }
            let before = try FileState(path)
            let walBefore = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
            #expect(before.wal && before.shm)
            await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(try FileState(path) == before, "main file unchanged, -wal and -shm still there")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path + "-wal")) == walBefore, "the WAL is not checkpointed or reset")
        }
    }

    @Test func anotherProgramsDatabaseIsAdoptedWhenAskedTo() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("shared.sqlite").path
            _ = try sqlite3CLI(path, "CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices VALUES (1, 9.5), (2, 20.25);")
            let store = try SQLiteStore(path: path, options: .init(adoptForeignDatabase: true))
            let cats = Cats(store: store)
            try await cats.save(Cat.workload(count: 20))
            #expect(try await cats.count() == 20)
            await store.close()

            #expect(try sqlite3CLI(path, "SELECT id, total FROM invoices ORDER BY id;") == "1|9.5\n2|20.25\n", "their rows untouched")
            let tables = try sqlite3CLI(path, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name;")
            #expect(tables == "Cat\ndepot_entities\ndepot_meta\ninvoices\n", "Depot's tables beside theirs: \(tables)")
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")

            // Once adopted, the file carries Depot's bookkeeping and opens without the option.
            let again = try SQLiteStore(path: path)
            #expect(try await Cats(store: again).count() == 20)
            await again.close()
        }
    }

    @Test func anAdoptedDatabaseStillRefusesAnEntityNamedLikeOneOfItsTables() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("clash.sqlite").path
            _ = try sqlite3CLI(path, "CREATE TABLE cat (x TEXT); INSERT INTO cat VALUES ('theirs');")
            let store = try SQLiteStore(path: path, options: .init(adoptForeignDatabase: true))
            await expectDepotError(.invalidSchema) { try await Cats(store: store).count() }
            await store.close()
            #expect(try sqlite3CLI(path, "SELECT x FROM cat;") == "theirs\n")
        }
    }

    @Test func aNewEmptyOrHalfCreatedFileOpensAsANewStore() async throws {
        try await withTemporaryDirectory { directory in
            // An empty file: what a crash leaves right after the file was created.
            let empty = directory.appendingPathComponent("empty.sqlite").path
            #expect(FileManager.default.createFile(atPath: empty, contents: Data()))
            // A database switched to WAL whose bookkeeping never committed (Depot switches
            // to WAL first, then creates depot_meta and depot_entities in one transaction).
            let halfway = directory.appendingPathComponent("halfway.sqlite").path
            _ = try sqlite3CLI(halfway, "PRAGMA journal_mode=WAL;")
            // A database with no tables at all, in rollback-journal mode.
            let blank = directory.appendingPathComponent("blank.sqlite").path
            _ = try sqlite3CLI(blank, "PRAGMA user_version = 0; VACUUM;")
            for path in [empty, halfway, blank, directory.appendingPathComponent("missing.sqlite").path] {
                let store = try SQLiteStore(path: path)
                try await Cats(store: store).save(Cat(id: 1, name: "Tom", weight: 4.5, age: 3))
                await store.close()
                let reopened = try SQLiteStore(path: path)
                #expect(try await Cats(store: reopened).count() == 1, "\(path)")
                await reopened.close()
            }
        }
    }

    @Test func ownershipRuleDecidesOnBookkeepingNotOnOtherTables() {
        #expect(SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 0, tables: [], adopt: false) == nil, "new")
        #expect(SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 3, tables: ["depot_meta", "depot_entities", "Cat"], adopt: false) == nil, "Depot's")
        #expect(SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 1, tables: ["invoices"], adopt: true) == nil, "adopted")
        #expect(SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 1, tables: ["invoices"], adopt: false)?.code == .storeCorrupted)
        #expect(SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 1, tables: ["depot_meta"], adopt: false) != nil, "half of the bookkeeping is not Depot's layout")
        let many = (0..<9).map { "t\($0)" }
        let message = SQLiteStore.foreignDatabaseRefusal(file: "f", objects: 9, tables: many, adopt: false)?.message ?? ""
        #expect(message.contains("t0, t1, t2, t3, t4 and 4 more"), "\(message)")
    }

    // MARK: The header (issue #11, item 5)

    @Test func headerCheckRefusesWhatIsNotADatabaseAndAcceptsRandomInputWithoutTrapping() throws {
        let magic = Array("SQLite format 3\u{0}".utf8)
        #expect(throws: Never.self) { try SQLiteStore.validateHeader([], fileSize: 0, walSize: 0, file: "f") }
        #expect(throws: DepotError.self) { try SQLiteStore.validateHeader(Array("not a database".utf8), fileSize: 14, walSize: 0, file: "f") }
        #expect(throws: DepotError.self) { try SQLiteStore.validateHeader(magic, fileSize: magic.count, walSize: 0, file: "f") }
        var header = magic + [UInt8](repeating: 0, count: 100 - magic.count)
        header[16] = 0x10  // 4096-byte pages
        header[31] = 3  // three pages
        header[27] = 1; header[95] = 1  // the page count is valid
        #expect(throws: Never.self) { try SQLiteStore.validateHeader(header, fileSize: 3 * 4096, walSize: 0, file: "f") }
        #expect(throws: DepotError.self) { try SQLiteStore.validateHeader(header, fileSize: 2 * 4096, walSize: 0, file: "f") }
        #expect(throws: Never.self) { try SQLiteStore.validateHeader(header, fileSize: 2 * 4096, walSize: 4096, file: "f") }
        #expect(throws: DepotError.self) { try SQLiteStore.validateHeader(header, fileSize: 3 * 4096 + 1, walSize: 0, file: "f") }

        // Every header field at its extremes: a result or a DepotError, never a trap.
        var generator = SplitMix64(seed: 5)
        for _ in 0..<20_000 {
            var bytes = magic + (0..<(100 - magic.count)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            if generator.next() % 4 == 0 { bytes = Array(bytes.prefix(Int(generator.next() % 101))) }
            let size = Int(truncatingIfNeeded: generator.next() >> (generator.next() % 64))
            let wal = Int(generator.next() % 3) * 4096
            do { try SQLiteStore.validateHeader(bytes, fileSize: abs(size % (1 << 50)), walSize: wal, file: "f") } catch {
                #expect(error.code == .storeCorrupted)
            }
        }
    }

    @Test func aOneByteFileIsRefusedNotOverwritten() async throws {
        try await withTemporaryDirectory { directory in
            // SQLite's unix VFS reports a 1-byte file as empty, so the header must be read,
            // not inferred from the size.
            let path = directory.appendingPathComponent("one.sqlite").path
            try Data([0x7B]).write(to: URL(fileURLWithPath: path))
            await expectDepotError(.storeCorrupted) { try SQLiteStore(path: path) }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data([0x7B]))
        }
    }

    #if os(Linux)
    /// Whether a lock that SQLite's SHARED lock conflicts with could be taken on `path` now,
    /// asked with an open-file-description lock: unlike a classic POSIX lock, it conflicts
    /// with this very process's POSIX locks, so it sees the locks of our own connections.
    /// `descriptor` stays open for the whole test: closing it would itself drop every
    /// POSIX lock of this process on the file, the very defect under test.
    private func sharedLockIsHeld(descriptor: Int32) -> Bool {
        let pendingByte: Int = 0x4000_0000  // SQLite's lock bytes: PENDING, RESERVED, then 510 SHARED bytes
        var probe = flock()
        probe.l_type = Int16(F_WRLCK)
        probe.l_whence = Int16(SEEK_SET)
        probe.l_start = off_t(pendingByte + 2)
        probe.l_len = 510
        probe.l_pid = 0
        let getOFDLock: Int32 = 36  // F_OFD_GETLK (Linux 3.15+)
        let rc = fcntl(descriptor, getOFDLock, &probe)
        #expect(rc == 0, "F_OFD_GETLK failed: errno \(errno)")
        return probe.l_type != Int16(F_UNLCK)
    }

    @Test func openingASecondStoreOnTheSameFileKeepsTheFirstStoresLocks() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("locks.sqlite").path
            let first = try SQLiteStore(path: path)
            try await Cats(store: first).save(Cat.workload(count: 10))
            let descriptor = open(path, O_RDONLY)
            #expect(descriptor >= 0)
            defer { close(descriptor) }
            // A connection in WAL mode keeps a SHARED lock on the database file for as long
            // as it is open; that lock is what stops another process from taking the file
            // out of WAL mode or deleting the WAL under it.
            #expect(sharedLockIsHeld(descriptor: descriptor), "the first store holds its SHARED lock")

            let second = try SQLiteStore(path: path)
            #expect(sharedLockIsHeld(descriptor: descriptor), "opening a second store must not drop the first store's locks")
            // And a process that would take the file out of WAL mode is still kept out.
            let output = try? sqlite3CLIResult(path, "PRAGMA journal_mode=DELETE;")
            #expect(output?.status != 0 || output?.text != "delete\n", "another process switched the open store out of WAL: \(String(describing: output))")

            #expect(try await Cats(store: second).count() == 10)
            await second.close()
            await first.close()
        }
    }
    #endif

    // MARK: Released without close (issue #11, item 11)

    @Test func aStoreReleasedWithoutCloseIsClosedOnItsWriterLaneNotInTheRelease() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("released.sqlite").path
            let events = ThreadRecordingLog()
            var logger = Logger(label: "test.depot") { _ in events }
            logger.logLevel = .info
            var store: SQLiteStore? = try SQLiteStore(path: path, log: StoreLog(logger: logger))
            try await Cats(store: store!).save(Cat.workload(count: 100))
            #expect(FileManager.default.fileExists(atPath: path + "-wal"))
            // The last reference, dropped on a thread of the cooperative pool: closing must
            // not run inside that call (it blocks on I/O), but later, on the writer's lane
            // (a dispatch thread, which may happen to be this same OS thread afterwards).
            events.releasing(true)
            store = nil
            events.releasing(false)

            let thread = await events.threadOfFirst("Depot store closed")
            #expect(thread != nil, "the store was closed")
            #expect(!events.loggedDuringRelease("Depot store closed"), "closing did not run inside the release")
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"), "closing checkpointed and removed the WAL")
            let reopened = try SQLiteStore(path: path)
            #expect(try await Cats(store: reopened).count() == 100)
            await reopened.close()
        }
    }

    // MARK: Busy at open (issue #11, item 11)

    @Test func openingGivesUpWithBusyWhenAnotherConnectionKeepsTheFileLocked() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("busy.sqlite").path
            let holder = try Connection.open(path: path, create: true, busyTimeout: .zero)
            try holder.execute("BEGIN EXCLUSIVE")
            await expectDepotError(.busy) { try SQLiteStore(path: path, options: .init(busyTimeout: .milliseconds(50))) }
            try holder.execute("ROLLBACK")
            holder.close()
            let store = try SQLiteStore(path: path)
            await store.close()
        }
    }
}

/// Runs the `sqlite3` command line and returns its exit status and output, without
/// recording a failure when it fails (some tests expect it to).
func sqlite3CLIResult(_ path: String, _ sql: String) throws -> (status: Int32, text: String) {
    let result = try ProcessLaunch.run("/usr/bin/sqlite3", ["-bail", "-cmd", ".timeout 0", path, sql])
    return (result.exit.status, result.stdout)
}

/// A log handler that remembers the thread (`pthread_self`) each message was logged on, and
/// lets a test wait for a message.
final class ThreadRecordingLog: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [(message: String, thread: UInt, duringRelease: Bool)] = []
    /// The thread inside the release the test marks, while it is inside it.
    private var releasingThread: UInt?

    func releasing(_ inside: Bool) {
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        lock.lock()
        releasingThread = inside ? thread : nil
        lock.unlock()
    }

    /// Whether `message` was logged by the releasing thread inside the marked release.
    func loggedDuringRelease(_ message: String) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return entries.contains { $0.message == message && $0.duringRelease }
    }
    private var waiters: [(message: String, deliver: @Sendable (UInt) -> Void)] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let message = "\(event.message)"
        let thread = UInt(bitPattern: Int(bitPattern: pthread_self()))
        lock.lock()
        entries.append((message, thread, releasingThread == thread))
        let ready = waiters.filter { $0.message == message }
        waiters.removeAll { $0.message == message }
        lock.unlock()
        for waiter in ready { waiter.deliver(thread) }
    }

    /// The thread `message` was logged on, waiting for it if need be. Gives up after a
    /// minute (a failure, not a measurement) so a missing message cannot hang the suite.
    func threadOfFirst(_ message: String) async -> UInt? {
        let result: UInt?? = await withCheckedContinuation { (continuation: CheckedContinuation<UInt??, Never>) in
            let resumed = NIOLockedValueBox(false)
            let resume: @Sendable (UInt??) -> Void = { value in
                let first = resumed.withLockedValue { done in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume(returning: value) }
            }
            lock.lock()
            if let entry = entries.first(where: { $0.message == message }) {
                lock.unlock()
                resume(.some(entry.thread))
                return
            }
            waiters.append((message, { resume(.some($0)) }))
            lock.unlock()
            DispatchQueue.global().asyncAfter(deadline: .now() + 60) { resume(nil) }
        }
        guard let thread = result else {
            Issue.record("'\(message)' was never logged")
            return nil
        }
        return thread
    }
}
