import DepotCore
import Dispatch
import NIOConcurrencyHelpers
import Synchronization

/// The WAL-index header SQLite keeps at the start of the `-shm` file (48 bytes, see
/// "WAL-mode file formats" in SQLite's documentation): every commit, by any connection of
/// any process, changes it (the last frame, its checksum, the change counter), and so does a
/// WAL restart (the salts). Equal headers mean no transaction committed in between.
struct WALIndexHeader: Equatable {
    private var words: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)

    /// The header as `region` (the start of the mapped `-shm`) holds it now. Read without a
    /// lock, as SQLite's readers read it: a commit in progress can leave a torn copy, which
    /// only compares unequal, so a reader begins a fresh transaction.
    @inline(__always)
    init(_ region: UnsafeRawPointer) {
        words = (
            region.load(fromByteOffset: 0, as: UInt64.self), region.load(fromByteOffset: 8, as: UInt64.self),
            region.load(fromByteOffset: 16, as: UInt64.self), region.load(fromByteOffset: 24, as: UInt64.self),
            region.load(fromByteOffset: 32, as: UInt64.self), region.load(fromByteOffset: 40, as: UInt64.self)
        )
    }

    @inline(__always)
    static func == (a: Self, b: Self) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2
            && a.words.3 == b.words.3 && a.words.4 == b.words.4 && a.words.5 == b.words.5
    }
}

/// Read transactions that reader connections keep open between reads of one statement,
/// while nothing has committed since they began.
///
/// In WAL mode every read transaction takes a shared lock on one of the WAL's read marks,
/// and SQLite asks the operating system for it (`fcntl`, under a mutex all of the
/// process's connections share) whenever no other connection of the process holds that
/// mark: when reads come one after another on few threads (a server's tasks preferring
/// the store's executor), most of them paid a lock and an unlock, and a reader on the other
/// core waited for the mutex. A reader connection therefore keeps its transaction after a
/// read of one statement, together with the WAL-index header as it was just before the
/// transaction began; the next such read on it compares the header first, and reuses the
/// transaction when no commit, of this process or another, has happened since. A read
/// thus still sees every transaction that committed before it began.
///
/// A kept transaction holds its read mark, so a checkpoint cannot copy frames past it and
/// the WAL cannot restart while it is open. So the transactions of idle readers are ended:
/// by the store's checkpointer before it copies frames (`releaseIdle(all: true)`), and
/// by a sweep that runs while any is kept and ends those no read used since the sweep
/// before (`sweepInterval`): another process's checkpoint or restart waits at most about
/// twice that long for this store's idle readers. Once the writer has copied the WAL's last
/// frames for a restart, reads keep nothing until the WAL has restarted
/// (`restartPending`).
final class KeptSnapshots: Sendable {
    /// How long an idle reader keeps its transaction at most (between one and two of these).
    static let sweepInterval: DispatchTimeInterval = .milliseconds(100)

    /// One reader connection's use: whether a read has it now (so nothing else may touch
    /// the connection), and whether one had it since the last sweep.
    struct Use {
        var busy = false
        var usedSinceSweep = false
        var closed = false
    }

    /// The start of the writer connection's mapping of the `-shm` file, which SQLite keeps
    /// until that connection closes (after the readers).
    private nonisolated(unsafe) let region: UnsafeRawPointer
    private let readers: [SQLiteEngine.Reader]
    private let sweepScheduled = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// Set by the writer's own copies (for a WAL restart, or while the checkpointer's thread
    /// is behind), cleared once the WAL has restarted: the restart needs every reader off
    /// the WAL's read marks, so meanwhile each read ends its transaction when it is done
    /// instead of keeping it.
    let restartPending = Atomic<Bool>(false)
    /// Tests: sweeps end no transaction while set (the checkpointer's releases still do).
    let sweepsPaused = Atomic<Bool>(false)

    init(region: UnsafeRawPointer, readers: [SQLiteEngine.Reader]) {
        self.region = region
        self.readers = readers
    }

    /// The header as it is now.
    @inline(__always)
    var header: WALIndexHeader { WALIndexHeader(region) }

    /// Prepares `connection` (which the caller's read has claimed) for a read of one
    /// statement: keeps its open transaction when nothing committed since it began,
    /// otherwise ends it and begins a new one.
    @inline(__always)
    func begin(on connection: Connection) throws(DepotError) {
        let now = header
        if connection.keptHeader == now && connection.isInTransaction { return }
        if connection.isInTransaction { SQLiteEngine.rollback(connection) }
        connection.keptHeader = nil
        // The header is read before the transaction takes its snapshot (at its first
        // statement), so a commit in between makes the next read begin afresh.
        try connection.run(key: SQLiteEngine.Keys.begin, "BEGIN")
        connection.keptHeader = now
        scheduleSweep()
    }

    /// Ends the transactions idle readers keep: all of them (`all`), or those no read used
    /// since the last sweep. Returns how many readers still keep one.
    @discardableResult
    func releaseIdle(all: Bool) -> Int {
        var kept = 0
        for reader in readers {
            reader.use.withLockedValue { use in
                // A busy reader's connection belongs to its read: not even looked at.
                guard !use.closed else { return }
                if use.busy {
                    kept += 1
                    return
                }
                guard reader.connection.keptHeader != nil else { return }
                if !all && use.usedSinceSweep {
                    use.usedSinceSweep = false
                    kept += 1
                    return
                }
                reader.connection.keptHeader = nil
                SQLiteEngine.rollback(reader.connection)
            }
        }
        return kept
    }

    /// How many readers keep a transaction, or are reading now (tests).
    var keptCount: Int {
        readers.reduce(0) { count, reader in
            count + reader.use.withLockedValue { use in use.busy || reader.connection.keptHeader != nil ? 1 : 0 }
        }
    }

    private func scheduleSweep() {
        // A plain load first: every reader begins transactions after each commit, and a
        // failed exchange would still take the shared flag's cache line from the others.
        guard !closed.load(ordering: .relaxed), !sweepScheduled.load(ordering: .relaxed),
            sweepScheduled.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + Self.sweepInterval) { [weak self] in
            self?.sweep()
        }
    }

    private func sweep() {
        sweepScheduled.store(false, ordering: .sequentiallyConsistent)
        if closed.load(ordering: .sequentiallyConsistent) { return }
        if sweepsPaused.load(ordering: .sequentiallyConsistent) || releaseIdle(all: false) > 0 { scheduleSweep() }
    }

    /// Stops the sweeps and marks every reader closed, before the connections close: a
    /// sweep running now finishes first (it holds the reader's lock).
    func close() {
        closed.store(true, ordering: .sequentiallyConsistent)
        for reader in readers {
            reader.use.withLockedValue { $0.closed = true }
        }
    }
}
