package import CLMDB
public import DepotCore
import Foundation

/// A read or write transaction of an ``LMDBEngine``, over one `MDB_txn`.
///
/// Only valid inside the closure it was passed to: the store ends the LMDB transaction
/// when the closure returns and sets `isFinished`, after which every call throws
/// `DepotError.Code.closed` instead of touching the freed handle.
public final class LMDBTransaction: EngineReadTransaction, EngineWriteTransaction {
    /// The LMDB transaction operations run in: a nested one while a save point is open.
    var txn: OpaquePointer
    /// The transaction a save point's nested one was begun in, while it is open.
    var savepointParent: OpaquePointer?
    /// The environment, whose reader slots and gate a transaction of the engine returns.
    let environment: Environment
    /// A read's reader slot, returned by `end()`.
    var reader: ReaderHandle?
    /// The environment gate's ticket the transaction holds until it ends.
    var ticket: UInt64 = 0
    /// Whether `commit()` or `rollback()` leaves ``ticket`` (a write the runtime began).
    var holdsWriteTicket = false
    /// Whether the transaction records each written key (someone observes the store).
    let recording: Bool
    /// The reader `fetchRow(_:key:_:)` reuses.
    var keyColumns: RecordColumns?
    /// The registry this transaction resolves handles in (shared, see ``CatalogSnapshot``).
    let snapshot: CatalogSnapshot
    var catalog: EntityRegistry<RegisteredEntity> {
        @inline(__always) _read { yield snapshot.registry }
    }
    let writable: Bool
    let maxKeySize: Int
    package let metaDBI: MDB_dbi
    let storeName: String
    var recorder: ChangeRecorder
    var isFinished = false
    /// Set when LMDB reported `MDB_MAP_FULL`; the store then grows the map and reruns the
    /// whole transaction, whatever the closure did with the error.
    var mapFull = false
    /// Set when an entity's stored schema is no longer the one the store's catalog was
    /// made from (another process migrated it); the store then reloads its catalog and
    /// reruns the whole transaction, whatever the closure did with the error.
    var catalogChanged = false
    /// The version of the store's catalog (see `CatalogCell.version`) that ``snapshot``
    /// belongs to, for a read transaction the store may reuse.
    var catalogVersion: UInt64 = 0

    // Used only by the one thread that runs the transaction, and never across a call that
    // could re-enter: no dynamic exclusivity checks on the hot path.
    @exclusivity(unchecked) var lastVerifiedSlot = -1
    @exclusivity(unchecked) var verifiedSlots: Set<Int> = []
    @exclusivity(unchecked) var keyBuffer: [UInt8] = []
    @exclusivity(unchecked) var valueBuffer: [UInt8] = []
    @exclusivity(unchecked) var indexKeys: [[UInt8]] = []
    @exclusivity(unchecked) var oldIndexKey: [UInt8] = []
    @exclusivity(unchecked) var oldRow = Row()
    @exclusivity(unchecked) var compositeKeys: [[UInt8]] = []
    @exclusivity(unchecked) var compositePrefixLengths: [Int] = []
    /// Where a registration logs the composite indexes it builds (set by the store for the
    /// transaction that registers).
    var storeLog: StoreLog?
    /// The handles the last ``handles(for:)`` resolved, and the handle it resolved them
    /// for. Unretained: ``snapshot``, which never changes, holds them.
    @exclusivity(unchecked) var resolved: Unmanaged<RegisteredEntity>?
    @exclusivity(unchecked) var resolvedSlot = -1
    @exclusivity(unchecked) var resolvedGeneration: UInt64 = 0
    @exclusivity(unchecked) var resolvedStore: ObjectIdentifier?

    init(
        txn: OpaquePointer, catalog: CatalogSnapshot, writable: Bool, maxKeySize: Int, metaDBI: MDB_dbi,
        storeName: String, recording: Bool, environment: Environment
    ) {
        self.txn = txn
        self.environment = environment
        self.recording = recording
        self.snapshot = catalog
        self.writable = writable
        self.maxKeySize = maxKeySize
        self.metaDBI = metaDBI
        self.storeName = storeName
        // Not recording still notes the touched entities (see ChangeRecorder).
        self.recorder = ChangeRecorder(detailed: recording)
    }

    /// Makes a finished read transaction usable again for the next read on the same reader
    /// handle (renewed by the caller), when nothing outside the store kept it and the catalog
    /// is unchanged: returns `false` for a write transaction.
    /// Call only on a transaction the caller holds the one reference to.
    func reopen() -> Bool {
        guard !writable else { return false }
        isFinished = false
        mapFull = false
        catalogChanged = false
        // Schema checks are per transaction: this is a new snapshot.
        lastVerifiedSlot = -1
        if !verifiedSlots.isEmpty { verifiedSlots.removeAll(keepingCapacity: true) }
        // A record's init(row:) that kept its reader must not see the next record through it.
        if var columns = keyColumns {
            keyColumns = nil
            if !columns.isLent && isKnownUniquelyReferenced(&columns) { keyColumns = columns }
        }
        return true
    }

    // MARK: Plumbing

    func fail(_ rc: Int32, _ context: @autoclosure () -> String) -> DepotError {
        if rc == MDB_MAP_FULL { mapFull = true }
        return DepotError.lmdb(rc, context: context())
    }

    package func handles(for entity: EntityHandle) throws(DepotError) -> RegisteredEntity {
        if isFinished {
            throw DepotError.transactionEnded
        }
        let handles = try catalog.resolve(entity)
        try verify(entity, handles)
        resolvedSlot = entity.slot
        resolvedGeneration = entity.generation
        resolvedStore = entity.store
        resolved = Unmanaged.passUnretained(handles)
        return handles
    }

    /// Calls `body` with the handles of `entity`, as ``handles(for:)`` returns them, without
    /// retaining them when they are those the last call resolved: what a lookup by key in a
    /// read of its own does, every time, on a reused transaction. The handles are shared by
    /// every reader, and a retain of them is an atomic on a cache line all reader threads
    /// write.
    @inline(__always)
    func withHandles<R>(for entity: EntityHandle, _ body: (RegisteredEntity) throws -> R) throws -> R {
        if let resolved, !isFinished, entity.slot == resolvedSlot, entity.generation == resolvedGeneration,
            entity.store == resolvedStore
        {
            return try resolved._withUnsafeGuaranteedRef { handles in
                try verify(entity, handles)
                return try body(handles)
            }
        }
        return try body(handles(for: entity))
    }

    /// Checks that `handles` still match the stored schema of `entity` (see
    /// ``handles(for:)``).
    @inline(__always)
    private func verify(_ entity: EntityHandle, _ handles: RegisteredEntity) throws(DepotError) {
        // Most transactions touch one entity many times: its stamp is checked once.
        if entity.slot == lastVerifiedSlot { return }
        try verifyStamp(entity, handles)
    }

    private func verifyStamp(_ entity: EntityHandle, _ handles: RegisteredEntity) throws(DepotError) {
        if !verifiedSlots.contains(entity.slot) {
            // Several processes may share the directory: one may have migrated the entity
            // since this process loaded its catalog. Writing with stale handles would store
            // rows in the old layout and skip new indexes, so the stored schema is compared,
            // once per entity per transaction (one lookup in the small metadata database)
            // unless an earlier read of this process compared it in the same snapshot.
            let snapshot = writable ? 0 : UInt64(mdb_txn_id(txn))
            if snapshot == 0 || handles.verifiedSnapshot.load(ordering: .relaxed) != snapshot {
                guard let stored = try get(metaDBI, Catalog.entityKey(entity.name), context: "Reading the schema of \(entity.name)"),
                    Self.compare(stored, handles.stamp) == 0
                else {
                    catalogChanged = true
                    throw DepotError(.schemaMismatch, "The schema of \(entity.name) in the LMDB store at \(storeName) was changed by another process; the transaction runs again with the new schema.")
                }
                if snapshot != 0 { handles.verifiedSnapshot.store(snapshot, ordering: .relaxed) }
            }
        }
        // The set remembers the entities verified before the last one, so a transaction
        // of one entity never allocates it.
        if lastVerifiedSlot >= 0 { verifiedSlots.insert(lastVerifiedSlot) }
        lastVerifiedSlot = entity.slot
    }

    func corrupted(_ what: String, entity: String) -> DepotError {
        Self.corrupted(what, entity: entity, store: storeName)
    }

    static func corrupted(_ what: String, entity: String, store: String) -> DepotError {
        DepotError(.storeCorrupted, "\(what) in the \(entity) database of the LMDB store at \(store); the file is damaged or was written by something else. Restore it from a backup.")
    }

    @inline(__always)
    func decode(_ value: MDB_val, _ handles: RegisteredEntity, into row: inout Row) throws(DepotError) {
        let buffer = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
        guard RecordFormat.decode(buffer, types: handles.types, into: &row) else {
            throw corrupted("A record cannot be decoded as \(handles.entity.name)", entity: handles.entity.name)
        }
    }

    /// `memcmp` order with the shorter key first on a common prefix: LMDB's default order.
    @inline(__always)
    static func compare(_ value: MDB_val, _ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBytes { b in
            let common = min(value.mv_size, b.count)
            if common > 0, let base = value.mv_data, let other = b.baseAddress {
                let r = memcmp(base, other, common)
                if r != 0 { return r < 0 ? -1 : 1 }
            }
            return value.mv_size == b.count ? 0 : (value.mv_size < b.count ? -1 : 1)
        }
    }

    @inline(__always)
    package static func withVal<R>(_ bytes: [UInt8], _ body: (inout MDB_val) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes { raw in
            var v = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return try body(&v)
        }
    }

    /// Reads `key` in `dbi`; the returned value points into the map and is valid until the
    /// next write of this transaction.
    func get(_ dbi: MDB_dbi, _ key: [UInt8], context: @autoclosure () -> String) throws(DepotError) -> MDB_val? {
        var data = MDB_val()
        let rc = Self.withVal(key) { k in mdb_get(txn, dbi, &k, &data) }
        if rc == 0 { return data }
        if rc == MDB_NOTFOUND { return nil }
        throw fail(rc, context())
    }

    package func put(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8], flags: UInt32 = 0, context: @autoclosure () -> String) throws(DepotError) {
        let rc = Self.withVal(key) { k in Self.withVal(value) { v in mdb_put(txn, dbi, &k, &v, flags) } }
        if rc != 0 { throw fail(rc, context()) }
    }

    /// Deletes `key` (and, in a DUPSORT database, only the pair with `value`).
    @discardableResult
    func del(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8]?, context: @autoclosure () -> String) throws(DepotError) -> Bool {
        let rc: Int32
        if let value {
            rc = Self.withVal(key) { k in Self.withVal(value) { v in mdb_del(txn, dbi, &k, &v) } }
        } else {
            rc = Self.withVal(key) { k in mdb_del(txn, dbi, &k, nil) }
        }
        if rc == MDB_NOTFOUND { return false }
        if rc != 0 { throw fail(rc, context()) }
        return true
    }

    package func entries(_ dbi: MDB_dbi) throws(DepotError) -> Int {
        var stat = MDB_stat()
        let rc = mdb_stat(txn, dbi, &stat)
        if rc != 0 { throw fail(rc, "Reading database statistics in \(storeName)") }
        // The count comes from the file: a damaged one must not make later arithmetic overflow.
        return max(0, stat.ms_entries)
    }

    package func withCursor<R>(_ dbi: MDB_dbi, _ body: (OpaquePointer) throws -> R) throws -> R {
        var cursor: OpaquePointer?
        let rc = mdb_cursor_open(txn, dbi, &cursor)
        guard rc == 0, let cursor else { throw fail(rc, "Opening a cursor in \(storeName)") }
        defer { mdb_cursor_close(cursor) }
        return try body(cursor)
    }

    /// Visits the entries of `range` (each duplicate of a DUPSORT key, in ascending order)
    /// forwards or backwards. Returns `false` when `body` stopped the scan.
    func scan(
        _ cursor: OpaquePointer, dupSort: Bool, range: KeyRange, descending: Bool,
        _ body: (MDB_val, MDB_val) throws -> Bool
    ) throws -> Bool {
        var key = MDB_val()
        var data = MDB_val()
        var rc: Int32
        func seek(_ bound: [UInt8]) -> Int32 {
            bound.withUnsafeBytes { raw in
                key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
                return mdb_cursor_get(cursor, &key, &data, MDB_SET_RANGE)
            }
        }
        if !descending {
            if let lower = range.lower {
                rc = seek(lower)
                if rc == 0 && !range.lowerInclusive && Self.compare(key, lower) == 0 {
                    rc = mdb_cursor_get(cursor, &key, &data, dupSort ? MDB_NEXT_NODUP : MDB_NEXT)
                }
            } else {
                rc = mdb_cursor_get(cursor, &key, &data, MDB_FIRST)
            }
            while rc == 0 {
                if let upper = range.upper {
                    let c = Self.compare(key, upper)
                    if c > 0 || (c == 0 && !range.upperInclusive) { return true }
                }
                if try !body(key, data) { return false }
                rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT)
            }
        } else {
            if let upper = range.upper {
                rc = seek(upper)
                if rc == MDB_NOTFOUND {
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_LAST)
                } else if rc == 0 {
                    let c = Self.compare(key, upper)
                    if c > 0 || (c == 0 && !range.upperInclusive) {
                        rc = mdb_cursor_get(cursor, &key, &data, dupSort ? MDB_PREV_NODUP : MDB_PREV)
                    }
                }
            } else {
                rc = mdb_cursor_get(cursor, &key, &data, MDB_LAST)
            }
            while rc == 0 {
                if let lower = range.lower {
                    let c = Self.compare(key, lower)
                    if c < 0 || (c == 0 && !range.lowerInclusive) { return true }
                }
                if dupSort {
                    // Keys descend, but a key's duplicates (primary keys) ascend: that is
                    // the primary-key tie-break of a descending sort.
                    // MDB_SET rather than MDB_FIRST_DUP: after MDB_LAST, LMDB 0.9 leaves the
                    // cursor flagged at its end, and MDB_NEXT_DUP would stop after one item.
                    let current = key
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_SET)
                    while rc == 0 {
                        if try !body(current, data) { return false }
                        rc = mdb_cursor_get(cursor, &key, &data, MDB_NEXT_DUP)
                    }
                    if rc != MDB_NOTFOUND { break }
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_PREV_NODUP)
                } else {
                    if try !body(key, data) { return false }
                    rc = mdb_cursor_get(cursor, &key, &data, MDB_PREV)
                }
            }
        }
        if rc != MDB_NOTFOUND { throw fail(rc, "Scanning a database in \(storeName)") }
        return true
    }

}
