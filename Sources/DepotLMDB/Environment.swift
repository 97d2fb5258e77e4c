import CLMDB
import DepotCore
import Foundation
import Synchronization

/// Counts the transactions open in this process and lets the map be resized only when
/// there are none, as `mdb_env_set_mapsize` requires: a resize remaps the file, and every
/// pointer an open transaction holds into the old mapping would dangle.
///
/// A resize must not stall the process while one slow transaction finishes. So it never
/// holds back new transactions for longer than ``admissionWait``: it closes the gate, waits
/// that long for the open transactions to finish, and if one is still open, reopens the
/// gate and waits — admitting new transactions — until every transaction that was open
/// then has finished, and tries again. Each transaction carries the generation it entered
/// in, which tells the long ones (entered before the failed attempt) from the newcomers.
/// Only the resizing writer waits for a long reader, up to ``resizePatience``.
///
/// `@unchecked Sendable`: every field is guarded by `condition`.
final class TransactionGate: @unchecked Sendable {
    /// How long one resize attempt holds back new transactions.
    static let admissionWait: TimeInterval = 0.05
    /// How long a resize waits in all for open transactions before it gives up.
    static let resizePatience: TimeInterval = 600

    private let condition = NSCondition()
    /// Open transactions per generation.
    private var active: [UInt64: Int] = [:]
    private var generation: UInt64 = 0
    private var closed = false
    private var resizing = false

    /// Whether a resize is waiting for open transactions (for tests).
    var isResizing: Bool {
        condition.lock()
        defer { condition.unlock() }
        return resizing
    }

    /// Admits a transaction (waiting while a resize attempt holds the gate closed) and
    /// returns the ticket to give to ``leave(_:)``.
    func enter() -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        while closed { condition.wait() }
        active[generation, default: 0] += 1
        return generation
    }

    func leave(_ ticket: UInt64) {
        condition.lock()
        defer { condition.unlock() }
        if let count = active[ticket], count > 1 {
            active[ticket] = count - 1
        } else {
            active[ticket] = nil
            if resizing { condition.broadcast() }
        }
    }

    /// Runs `body` while no transaction is open, or returns `nil` when open transactions
    /// did not let it within `patience` seconds.
    func whenIdle(patience: TimeInterval = resizePatience, _ body: () -> Int32) -> Int32? {
        condition.lock()
        defer { condition.unlock() }
        // One resize at a time (the writer, or a reader following another process's resize).
        while resizing { condition.wait() }
        resizing = true
        defer {
            resizing = false
            closed = false
            condition.broadcast()
        }
        let deadline = Date(timeIntervalSinceNow: patience)
        while true {
            // Hold new transactions back briefly while the open ones finish.
            closed = true
            let attempt = min(deadline, Date(timeIntervalSinceNow: Self.admissionWait))
            while !active.isEmpty {
                if !condition.wait(until: attempt) && !active.isEmpty { break }
            }
            if active.isEmpty { return body() }
            // A long transaction: admit new ones again and wait for the ones open now.
            closed = false
            condition.broadcast()
            let stuck = generation
            generation += 1
            while active.keys.contains(where: { $0 <= stuck }) {
                if !condition.wait(until: deadline) && active.keys.contains(where: { $0 <= stuck }) { return nil }
            }
        }
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
        guard let rc = gate.whenIdle({ mdb_env_set_mapsize(pointer, target) }) else {
            throw DepotError(.storeFull, "The LMDB store at \(path) is full at \(current) bytes and could not grow its map: a read transaction stayed open for \(Int(TransactionGate.resizePatience)) s (the map can only grow while no transaction of the process is open). Finish reads sooner, or open the store with a larger mapSize.", nativeCode: MDB_MAP_FULL)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Growing the map of \(path) to \(target) bytes") }
    }

    /// Adopts the map size another process set (`MDB_MAP_RESIZED`).
    func adoptMapSize() throws(DepotError) {
        guard let rc = gate.whenIdle({ mdb_env_set_mapsize(pointer, 0) }) else {
            throw DepotError(.busy, "Another process grew the LMDB store at \(path), and this process could not follow because a transaction stayed open for \(Int(TransactionGate.resizePatience)) s.", nativeCode: MDB_MAP_RESIZED)
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
