import CLMDB
import DepotCore
package import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// Counts the transactions open in this process and lets the map be resized only when
/// there are none, as `mdb_env_set_mapsize` requires: a resize remaps the file, and every
/// pointer an open transaction holds into the old mapping would dangle.
///
/// A resize must not stall the process while one slow transaction finishes. So it holds
/// back new transactions only briefly: it closes the gate, waits ``admissionWait`` for the
/// open transactions to finish, and if one is still open, reopens the gate and waits —
/// admitting new transactions — until every transaction that was open then has finished,
/// and tries again with twice the wait (up to ``longestAdmissionWait``), so reads that keep
/// overlapping each other cannot starve the resize forever. Each transaction carries the
/// generation it entered in, which tells the long ones (entered before the failed attempt)
/// from the newcomers. Only the resizing writer waits for a long reader, up to
/// ``resizePatience``.
///
/// Every read enters and leaves, and resizes are rare: while none runs, a transaction is
/// counted with one atomic add in ``fast`` (its ticket is ``fastTicket``), not under the
/// lock, which concurrent readers contended for (futex waits and wakes beside every
/// read). A resize sets ``slowFlag`` first; from then on transactions enter under the
/// lock as before, and the resize also waits for the fast count to drain (it cannot grow
/// while the flag is set). The flag is cleared when the resize is done.
///
/// `@unchecked Sendable`: every field but `fast` is guarded by `condition`.
package final class TransactionGate: @unchecked Sendable {
    /// How long one resize attempt holds back new transactions.
    static let admissionWait: TimeInterval = 0.05
    /// The longest one attempt holds back new transactions, after repeated failures.
    static let longestAdmissionWait: TimeInterval = 5
    /// How long a resize waits in all for open transactions before it gives up.
    static let resizePatience: TimeInterval = 600

    /// The ticket of a transaction counted in ``fast``. Generations count up from 0 and never
    /// reach it.
    package static let fastTicket = UInt64.max
    /// Set in ``fast`` while a resize runs: transactions enter under the lock. The
    /// second-highest bit of `Int` on any platform (a fixed `1 << 62` would shift out to 0
    /// on a 32-bit one and the gate would never see a resize); the sign bit stays clear so
    /// the count below it can be compared as a plain positive number.
    private static let slowFlag = 1 << (Int.bitWidth - 2)

    /// Transactions admitted without the lock (low bits), and ``slowFlag``.
    private let fast = Atomic<Int>(0)
    private let condition = NSCondition()
    /// Open transactions admitted under the lock, per generation, oldest generation first.
    /// An array, not a dictionary: there is one generation almost always (a new one starts
    /// only when a resize gives up waiting).
    private var active: [(generation: UInt64, count: Int)] = []
    private var generation: UInt64 = 0
    private var closed = false
    private var resizing = false

    /// Whether a resize is waiting for open transactions (for tests).
    package init() {}

    package var isResizing: Bool {
        condition.lock()
        defer { condition.unlock() }
        return resizing
    }

    /// Admits a transaction (waiting while a resize attempt holds the gate closed) and
    /// returns the ticket to give to `leave(_:)`.
    package func enter() -> UInt64 {
        var current = fast.load(ordering: .relaxed)
        while current & Self.slowFlag == 0 {
            // Acquiring: the transaction must not begin before it is counted, which a
            // resize checks.
            let (exchanged, original) = fast.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return Self.fastTicket }
            current = original
        }
        return enterLocked()
    }

    private func enterLocked() -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        while closed { condition.wait() }
        // Generations only grow: the current one, if it has open transactions, is last.
        if let last = active.indices.last, active[last].generation == generation {
            active[last].count += 1
        } else {
            active.append((generation, 1))
        }
        return generation
    }

    package func leave(_ ticket: UInt64) {
        if ticket == Self.fastTicket {
            // Releasing: the transaction's use of the map happens before a resize sees it gone.
            let now = fast.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue
            if now == Self.slowFlag {
                // The last fast transaction while a resize waits: wake it, under the lock it
                // checks the count under, so the wake cannot fall between check and wait.
                condition.lock()
                condition.broadcast()
                condition.unlock()
            }
            return
        }
        condition.lock()
        defer { condition.unlock() }
        guard let index = active.firstIndex(where: { $0.generation == ticket }) else { return }
        if active[index].count > 1 {
            active[index].count -= 1
        } else {
            active.remove(at: index)
            if resizing { condition.broadcast() }
        }
    }

    /// Transactions admitted without the lock that are still open.
    private var fastOpen: Int { fast.load(ordering: .acquiring) & ~Self.slowFlag }

    /// Runs `body` while no transaction is open, or returns `nil` when open transactions
    /// did not let it within `patience` seconds. `body` must not enter the gate itself.
    package func whenIdle<T>(patience: TimeInterval = resizePatience, _ body: () -> T) -> T? {
        condition.lock()
        defer { condition.unlock() }
        // One resize at a time (the writer, or a reader following another process's resize).
        while resizing { condition.wait() }
        resizing = true
        // From here on nobody enters without the lock, so the fast count only drains.
        fast.bitwiseOr(Self.slowFlag, ordering: .acquiringAndReleasing)
        defer {
            resizing = false
            closed = false
            fast.bitwiseAnd(~Self.slowFlag, ordering: .acquiringAndReleasing)
            condition.broadcast()
        }
        let deadline = Date(timeIntervalSinceNow: patience)
        var wait = Self.admissionWait
        while true {
            // Hold new transactions back briefly while the open ones finish.
            closed = true
            let attempt = min(deadline, Date(timeIntervalSinceNow: wait))
            wait = min(wait * 2, Self.longestAdmissionWait)
            while !active.isEmpty || fastOpen > 0 {
                if !condition.wait(until: attempt) && (!active.isEmpty || fastOpen > 0) { break }
            }
            if active.isEmpty && fastOpen == 0 { return body() }
            // A long transaction: admit new ones again (under the lock, in a new generation)
            // and wait for the ones open now.
            closed = false
            condition.broadcast()
            let stuck = generation
            generation += 1
            while active.contains(where: { $0.generation <= stuck }) || fastOpen > 0 {
                if !condition.wait(until: deadline) && (active.contains(where: { $0.generation <= stuck }) || fastOpen > 0) {
                    return nil
                }
            }
        }
    }
}

/// A read transaction kept between reads (reset while idle, renewed for the next read), and
/// what the reads on it reuse: the transaction object, with the record reader of lookups
/// by key and the key buffer it keeps. A lookup in a read of its own (an awaited
/// `fetchOne`) would otherwise allocate and free the transaction, its reader and its
/// buffer, and retain and release what the transaction holds, every time.
///
/// `@unchecked Sendable`: one party owns it at a time (an idle slot, or the one read using
/// it).
package final class ReaderHandle: @unchecked Sendable {
    let txn: OpaquePointer
    /// The transaction object of the last read on this handle (with the catalog version it
    /// was made for): the next read reuses it while the version is unchanged.
    package var transaction: LMDBTransaction?

    package init(txn: OpaquePointer) {
        self.txn = txn
    }
}

/// The idle read transactions of one environment, each in a slot on a cache line of its
/// own, taken and put back with one atomic exchange and no lock.
///
/// A thread starts its search at a slot picked by its identity, so a thread that reads
/// again mostly gets back the handle it put back: the handle, its transaction object and
/// their buffers stay in that core's cache. A list under a lock would hand the handles
/// round-robin among the threads and take the lock twice per read; under concurrent
/// readers both show as contended atomics.
package final class IdleReaders: @unchecked Sendable {
    static let capacity = 16
    /// Words between slots: 128 bytes, so that no two slots share a cache line (or the
    /// adjacent line a prefetcher pairs with it).
    private static let spacing = 16
    private let words: UnsafeMutablePointer<Synchronization.Atomic<UInt>>

    package init() {
        let count = Self.capacity * Self.spacing
        words = .allocate(capacity: count)
        for index in 0..<count { (words + index).initialize(to: Synchronization.Atomic(0)) }
    }

    deinit {
        _ = drain()
        words.deinitialize(count: Self.capacity * Self.spacing)
        words.deallocate()
    }

    /// Where the calling thread starts looking: a mix of its identity's bits (thread
    /// addresses are far apart and aligned, so their low bits say nothing).
    @inline(__always)
    private static var startSlot: Int {
        // pthread_t is an integer on Linux and a pointer on Darwin: its bits either way.
        #if os(Linux)
        let mixed = UInt(pthread_self()) &* 0x9E37_79B9_7F4A_7C15
        #else
        let mixed = unsafeBitCast(pthread_self(), to: UInt.self) &* 0x9E37_79B9_7F4A_7C15
        #endif
        return Int(truncatingIfNeeded: mixed >> 60) & (capacity - 1)
    }

    /// An idle handle, preferring the one this thread put back last; `nil` when there is
    /// none.
    package func take() -> ReaderHandle? {
        let start = Self.startSlot
        for probe in 0..<Self.capacity {
            let slot = words + ((start &+ probe) & (Self.capacity - 1)) * Self.spacing
            guard slot.pointee.load(ordering: .relaxed) != 0 else { continue }
            let bits = slot.pointee.exchange(0, ordering: .acquiring)
            if let pointer = UnsafeRawPointer(bitPattern: bits) {
                return Unmanaged<ReaderHandle>.fromOpaque(pointer).takeRetainedValue()
            }
        }
        return nil
    }

    /// Keeps `handle` for a later read; `false` (the handle is not kept) when every slot
    /// is taken.
    package func put(_ handle: ReaderHandle) -> Bool {
        let bits = UInt(bitPattern: Unmanaged.passRetained(handle).toOpaque())
        let start = Self.startSlot
        for probe in 0..<Self.capacity {
            let slot = words + ((start &+ probe) & (Self.capacity - 1)) * Self.spacing
            guard slot.pointee.load(ordering: .relaxed) == 0 else { continue }
            if slot.pointee.compareExchange(expected: 0, desired: bits, ordering: .releasing).exchanged { return true }
        }
        Unmanaged<ReaderHandle>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).release()
        return false
    }

    /// Takes every idle handle out.
    package func drain() -> [ReaderHandle] {
        var taken: [ReaderHandle] = []
        for index in 0..<Self.capacity {
            let bits = words[index * Self.spacing].exchange(0, ordering: .acquiring)
            if let pointer = UnsafeRawPointer(bitPattern: bits) {
                taken.append(Unmanaged<ReaderHandle>.fromOpaque(pointer).takeRetainedValue())
            }
        }
        return taken
    }
}

/// The directories open in this process: LMDB forbids opening one environment twice in a
/// process (closing either would drop the other's file locks).
enum OpenDirectories {
    private static let paths = NIOLockedValueBox<Set<String>>([])

    static func claim(_ path: String) -> Bool { paths.withLockedValue { $0.insert(path).inserted } }
    static func release(_ path: String) { _ = paths.withLockedValue { $0.remove(path) } }
}

/// Owns one `MDB_env`, and replaces it when LMDB declares it dead.
///
/// `@unchecked Sendable`: an environment opened with `MDB_NOTLS` may begin transactions on
/// any thread; the map is only resized, and ``pointer`` only replaced, through ``gate`` when
/// no transaction is open (every transaction reads ``pointer`` and ``metaDBI`` while it
/// holds a gate ticket); and the store closes it only after its work has drained
/// (``close()`` runs once).
package final class Environment: @unchecked Sendable {
    /// The open environment, or `nil` after a reopen failed (each new transaction then
    /// tries again). Changed only inside `gate.whenIdle`.
    package private(set) var pointer: OpaquePointer?
    /// Counts the replacements of ``pointer``: a transaction that met `MDB_PANIC` passes the
    /// epoch it saw, so that of several transactions meeting the same dead environment only
    /// the first reopens it.
    package private(set) var epoch: UInt64 = 0
    /// The map size when the environment was last closed for a reopen.
    private var lastMapSize = 0
    let path: String
    package let maxKeySize: Int
    package let gate = TransactionGate()
    /// Set during open and by a reopen, while no transaction is open.
    var metaDBI: MDB_dbi = 0
    private let closed = Atomic<Bool>(false)
    /// Read transactions reset after use. Renewing one skips the allocation and the
    /// reader-table lock of `mdb_txn_begin`: with `MDB_NOTLS` a reset transaction keeps its
    /// reader slot. A reset transaction holds no snapshot, so it does not block a resize.
    private let idleReaders = IdleReaders()
    /// Growth stops here (the map is virtual address space, not disk).
    package static let maximumMapSize = 1 << 44

    init(pointer: OpaquePointer, path: String) {
        self.pointer = pointer
        self.path = path
        self.maxKeySize = Int(mdb_env_get_maxkeysize(pointer))
    }

    /// The size of the map (0 while the environment is closed after a failed reopen). Read
    /// it with no transaction of this store starting (on the writer queue, inside the gate,
    /// or in tests).
    package var mapSize: Int {
        guard let pointer else { return 0 }
        var info = MDB_envinfo()
        mdb_env_info(pointer, &info)
        return info.me_mapsize
    }

    /// Doubles the map after `MDB_MAP_FULL`. Call with no transaction of this store open.
    func grow() throws(DepotError) {
        guard let result = gate.whenIdle({ growNow() }) else {
            throw DepotError(.storeFull, "The LMDB store at \(path) is full and could not grow its map: a read transaction stayed open for \(Int(TransactionGate.resizePatience)) s (the map can only grow while no transaction of the process is open). Finish reads sooner, or open the store with a larger mapSize.", nativeCode: MDB_MAP_FULL)
        }
        try result.get()
    }

    /// Doubles the map. Call with no transaction open (inside `gate.whenIdle`).
    func growNow() -> Result<Void, DepotError> {
        guard let pointer else { return .failure(DepotError(.io, "The LMDB store at \(path) is not open (reopening it failed); retry.")) }
        let current = mapSize
        guard current < Self.maximumMapSize else {
            return .failure(DepotError(.storeFull, "The LMDB store at \(path) has reached the largest map Depot grows to (\(current) bytes).", nativeCode: MDB_MAP_FULL))
        }
        let target = min(current * 2, Self.maximumMapSize)
        let rc = mdb_env_set_mapsize(pointer, target)
        if rc != 0 { return .failure(DepotError.lmdb(rc, context: "Growing the map of \(path) to \(target) bytes")) }
        return .success(())
    }

    /// Adopts the map size another process set (`MDB_MAP_RESIZED`).
    func adoptMapSize() throws(DepotError) {
        guard let rc = gate.whenIdle({ adoptMapSizeNow() }) else {
            throw DepotError(.busy, "Another process grew the LMDB store at \(path), and this process could not follow because a transaction stayed open for \(Int(TransactionGate.resizePatience)) s.", nativeCode: MDB_MAP_RESIZED)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Adopting the new map size of \(path)") }
    }

    /// Adopts the map size another process set. Call with no transaction open.
    func adoptMapSizeNow() -> Int32 {
        guard let pointer else { return MDB_PANIC }
        return mdb_env_set_mapsize(pointer, 0)
    }

    /// Begins a read transaction, renewing an idle one when there is one. Call holding a
    /// gate ticket, with ``pointer`` not `nil`.
    func beginReader(_ pointer: OpaquePointer) -> (Int32, ReaderHandle?) {
        if let idle = idleReaders.take() {
            let rc = mdb_txn_renew(idle.txn)
            if rc == 0 { return (0, idle) }
            mdb_txn_abort(idle.txn)
            if rc == MDB_MAP_RESIZED || rc == MDB_PANIC { return (rc, nil) }
        }
        var begun: OpaquePointer?
        let rc = mdb_txn_begin(pointer, nil, UInt32(MDB_RDONLY), &begun)
        // LMDB returns 0 only with a transaction; a nil one is reported as the code it came
        // with, which the caller turns into an error like any other.
        guard rc == 0, let begun else { return (rc, nil) }
        return (0, ReaderHandle(txn: begun))
    }

    /// Ends a read transaction, keeping its handle (and its scratch) for the next reader.
    func endReader(_ handle: ReaderHandle) {
        mdb_txn_reset(handle.txn)
        if !idleReaders.put(handle) { mdb_txn_abort(handle.txn) }
    }

    /// Closes the environment LMDB declared dead (`MDB_PANIC`: a write of its meta page
    /// failed, and LMDB refuses every transaction from then on, although the file is
    /// intact) and opens it again with `open`. Call with no transaction open (inside
    /// `gate.whenIdle`), and only when ``epoch`` is still the one the failing transaction
    /// saw.
    ///
    /// The idle readers go first: with `MDB_NOTLS` each keeps a reader slot and points into
    /// the old environment, so renewing one later would use freed memory. Closing the
    /// environment then clears this process's reader slots and locks; the directory stays
    /// claimed in ``OpenDirectories`` throughout (LMDB forbids a second environment of the
    /// same directory in the process, and closing first keeps to that). When `open` fails,
    /// ``pointer`` stays `nil` and the next transaction tries again.
    func replace(
        open: (_ mapSize: Int) throws(DepotError) -> OpaquePointer, prepare: (Environment) throws(DepotError) -> Void
    ) throws(DepotError) {
        guard !closed.load(ordering: .acquiring) else { throw DepotError.closed("LMDB store at \(path)") }
        if let old = pointer {
            // Reopened at the size it had grown to, so the writes that grew it need not
            // grow it again.
            lastMapSize = mapSize
            abortIdleReaders()
            mdb_env_close(old)
            pointer = nil
            epoch += 1
        }
        let reopened = try open(lastMapSize)
        pointer = reopened
        epoch += 1
        do throws(DepotError) {
            try prepare(self)
        } catch {
            mdb_env_close(reopened)
            pointer = nil
            epoch += 1
            throw error
        }
    }

    private func abortIdleReaders() {
        for idle in idleReaders.drain() {
            mdb_txn_abort(idle.txn)
        }
    }

    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        abortIdleReaders()
        if let pointer { mdb_env_close(pointer) }
        pointer = nil
        OpenDirectories.release(path)
    }

    deinit { close() }
}
