import CLMDB
import DepotCore
import Foundation
import Synchronization

/// Counts the transactions open in this process and lets the map be resized only when
/// there are none, as `mdb_env_set_mapsize` requires: a resize remaps the file, and every
/// pointer an open transaction holds into the old mapping would dangle.
///
/// New transactions wait while a resize is pending; the resize itself waits for open ones
/// only up to a deadline, so a reader that waits for the writer cannot deadlock it.
/// `@unchecked Sendable`: every field is guarded by `condition`.
final class TransactionGate: @unchecked Sendable {
    private let condition = NSCondition()
    private var active = 0
    private var exclusive = false

    func enter() {
        condition.lock()
        while exclusive { condition.wait() }
        active += 1
        condition.unlock()
    }

    func leave() {
        condition.lock()
        active -= 1
        if active == 0 { condition.broadcast() }
        condition.unlock()
    }

    /// Runs `body` while no transaction is open, or returns `nil` when open transactions
    /// did not finish within `timeout` seconds.
    func whenIdle(timeout: TimeInterval, _ body: () -> Int32) -> Int32? {
        condition.lock()
        defer { condition.unlock() }
        while exclusive { condition.wait() }
        exclusive = true
        defer {
            exclusive = false
            condition.broadcast()
        }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while active > 0 {
            if !condition.wait(until: deadline) && active > 0 { return nil }
        }
        return body()
    }
}

/// The directories open in this process: LMDB forbids opening one environment twice in a
/// process (closing either would drop the other's file locks).
enum OpenDirectories {
    private static let paths = Locked<Set<String>>([])

    static func claim(_ path: String) -> Bool { paths.withLock { $0.insert(path).inserted } }
    static func release(_ path: String) { _ = paths.withLock { $0.remove(path) } }
}

/// Owns one `MDB_env`.
///
/// `@unchecked Sendable`: an environment opened with `MDB_NOTLS` may begin transactions on
/// any thread; the map is only resized through ``gate`` when no transaction is open; and
/// the store closes it only after its work has drained (``close()`` runs once).
final class Environment: @unchecked Sendable {
    let pointer: OpaquePointer
    let path: String
    let maxKeySize: Int
    let gate = TransactionGate()
    /// Set once during open, before the environment is shared.
    var metaDBI: MDB_dbi = 0
    private let closed = Atomic<Bool>(false)
    /// Read transactions reset after use. Renewing one skips the allocation and the
    /// reader-table lock of `mdb_txn_begin`: with `MDB_NOTLS` a reset transaction keeps its
    /// reader slot. A reset transaction holds no snapshot, so it does not block a resize.
    private let idleReaders = Locked<[ReaderHandle]>([])
    private static let idleReaderLimit = 16

    struct ReaderHandle: @unchecked Sendable {
        // Owned by exactly one party at a time: the pool (under its lock) or one reader.
        let txn: OpaquePointer
    }
    /// How long a resize waits for open transactions before the write fails.
    static let resizeTimeout: TimeInterval = 15
    /// Growth stops here (the map is virtual address space, not disk).
    static let maximumMapSize = 1 << 44

    init(pointer: OpaquePointer, path: String) {
        self.pointer = pointer
        self.path = path
        self.maxKeySize = Int(mdb_env_get_maxkeysize(pointer))
    }

    var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(pointer, &info)
        return info.me_mapsize
    }

    /// Doubles the map after `MDB_MAP_FULL`. Call with no transaction of this store open.
    func grow() throws(DepotError) {
        let current = mapSize
        guard current < Self.maximumMapSize else {
            throw DepotError(.storeFull, "The LMDB store at \(path) has reached the largest map Depot grows to (\(current) bytes).", nativeCode: MDB_MAP_FULL)
        }
        let target = min(current * 2, Self.maximumMapSize)
        guard let rc = gate.whenIdle(timeout: Self.resizeTimeout, { mdb_env_set_mapsize(pointer, target) }) else {
            throw DepotError(.storeFull, "The LMDB store at \(path) is full at \(current) bytes and could not grow its map: read transactions stayed open for \(Int(Self.resizeTimeout)) s. Finish reads sooner or open the store with a larger mapSize.", nativeCode: MDB_MAP_FULL)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Growing the map of \(path) to \(target) bytes") }
    }

    /// Adopts the map size another process set (`MDB_MAP_RESIZED`).
    func adoptMapSize() throws(DepotError) {
        guard let rc = gate.whenIdle(timeout: Self.resizeTimeout, { mdb_env_set_mapsize(pointer, 0) }) else {
            throw DepotError(.busy, "Another process grew the LMDB store at \(path), and this process could not follow because its transactions stayed open for \(Int(Self.resizeTimeout)) s.", nativeCode: MDB_MAP_RESIZED)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Adopting the new map size of \(path)") }
    }

    /// Begins a read transaction, renewing an idle one when there is one.
    func beginReader() -> (Int32, OpaquePointer?) {
        if let idle = idleReaders.withLock({ $0.popLast() }) {
            let rc = mdb_txn_renew(idle.txn)
            if rc == 0 { return (0, idle.txn) }
            mdb_txn_abort(idle.txn)
            if rc == MDB_MAP_RESIZED { return (rc, nil) }
        }
        var begun: OpaquePointer?
        let rc = mdb_txn_begin(pointer, nil, UInt32(MDB_RDONLY), &begun)
        return (rc, rc == 0 ? begun : nil)
    }

    /// Ends a read transaction, keeping its handle for the next reader.
    func endReader(_ txn: OpaquePointer) {
        mdb_txn_reset(txn)
        let kept = idleReaders.withLock { idle -> Bool in
            guard idle.count < Self.idleReaderLimit else { return false }
            idle.append(ReaderHandle(txn: txn))
            return true
        }
        if !kept { mdb_txn_abort(txn) }
    }

    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for idle in idleReaders.withLock({ idle in defer { idle.removeAll() }; return idle }) {
            mdb_txn_abort(idle.txn)
        }
        mdb_env_close(pointer)
        OpenDirectories.release(path)
    }

    deinit { close() }
}
