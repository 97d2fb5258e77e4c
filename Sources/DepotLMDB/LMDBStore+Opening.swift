import CLMDB
import DepotCore
import Foundation

// Opening a directory: flags and map size, the read-only check of the data file, the metadata database.
extension LMDBEngine {
    /// The flags of the store's environment: `MDB_NOTLS` (transactions are not tied to
    /// threads: they run on dispatch queues) and the durability.
    static func flags(_ options: Options) -> Int32 {
        var flags = Int32(MDB_NOTLS) | (options.readOnly ? Int32(MDB_RDONLY) : 0)
        switch options.durability {
        case .full: break
        case .relaxed: flags |= Int32(MDB_NOMETASYNC)
        case .unsafe: flags |= Int32(MDB_NOSYNC)
        }
        return flags
    }

    /// `size` rounded up to whole system pages, at least 16 of them, and at most
    /// ``Environment/maximumMapSize``: never an overflow, whatever `size` is.
    package static func roundedMapSize(_ size: Int) -> Int {
        let page = max(4096, Int(sysconf(Int32(_SC_PAGESIZE))))
        let bounded = min(max(size, 16 * page), Environment.maximumMapSize)
        let (pages, remainder) = bounded.quotientAndRemainder(dividingBy: page)
        return (pages + (remainder == 0 ? 0 : 1)) * page
    }

    static func openEnvironment(path: String, options: Options, flags: Int32) throws(DepotError) -> OpaquePointer {
        var created: OpaquePointer?
        var rc = mdb_env_create(&created)
        guard rc == 0, let env = created else { throw DepotError.lmdb(rc, context: "Creating an LMDB environment for \(path)") }
        let readOnly = flags & Int32(MDB_RDONLY) != 0
        rc = mdb_env_set_maxdbs(env, MDB_dbi(options.maxDatabases))
        if rc == 0 { rc = mdb_env_set_maxreaders(env, UInt32(options.maxReaders)) }
        if rc == 0 && !readOnly {
            rc = mdb_env_set_mapsize(env, Self.roundedMapSize(options.mapSize))
        }
        if rc == 0 { rc = mdb_env_open(env, path, UInt32(flags), 0o644) }
        if rc != 0 {
            mdb_env_close(env)
            if rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED {
                throw DepotError(.storeCorrupted, "\(path)/data.mdb is not an LMDB environment this version of LMDB can read (\(String(cString: mdb_strerror(rc)))). It was not modified; point the store at another directory or restore the file.", nativeCode: rc)
            }
            throw DepotError.lmdb(rc, context: "Opening the LMDB environment at \(path)")
        }
        return env
    }

    /// Checks an existing environment without writing to it: LMDB must read it, and it must
    /// be a Depot store (or empty) of a format this version reads.
    static func validate(path: String, options: Options) throws(DepotError) {
        let env = try openEnvironment(path: path, options: options, flags: Int32(MDB_RDONLY) | Int32(MDB_NOTLS))
        defer { mdb_env_close(env) }
        // A data file shorter than the pages its snapshot uses (a truncated copy, a disk that
        // lost its tail) would make LMDB read past the end of the map: SIGBUS, not an error.
        // Check the pages before LMDB reads any beyond the meta pages (see DataFileCheck).
        let txn = try beginCheckedSnapshot(env, path: path)
        defer { mdb_txn_abort(txn) }
        var rc: Int32
        var meta: MDB_dbi = 0
        rc = mdb_dbi_open(txn, Catalog.metaName, 0, &meta)
        if rc == MDB_NOTFOUND {
            var main: MDB_dbi = 0
            var stat = MDB_stat()
            rc = mdb_dbi_open(txn, nil, 0, &main)
            if rc == 0 { rc = mdb_stat(txn, main, &stat) }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
            if stat.ms_entries > 0 {
                throw DepotError(.storeCorrupted, "\(path) holds an LMDB environment that is not a Depot store (it has no \(Catalog.metaName) database). It was not modified; use another directory.")
            }
            return
        }
        if rc == MDB_INCOMPATIBLE {
            throw DepotError(.storeCorrupted, "\(path) holds an LMDB environment whose \(Catalog.metaName) is not a Depot metadata database. It was not modified; use another directory.", nativeCode: rc)
        }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the metadata of the LMDB store at \(path)") }
        var key = MDB_val()
        var value = MDB_val()
        rc = Catalog.formatKey.withUnsafeBytes { raw in
            key = MDB_val(mv_size: raw.count, mv_data: UnsafeMutableRawPointer(mutating: raw.baseAddress))
            return mdb_get(txn, meta, &key, &value)
        }
        if rc == MDB_NOTFOUND { return }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the metadata of the LMDB store at \(path)") }
        let format = String(decoding: UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size), as: UTF8.self)
        guard format == String(Catalog.formatVersion) else {
            throw DepotError(.storeCorrupted, "The LMDB store at \(path) has layout format '\(format.prefix(16))', but this version of Depot reads format \(Catalog.formatVersion). It was not modified.")
        }
    }

    /// Begins a read transaction on the read-only `env` whose snapshot is checked to lie
    /// inside `data.mdb`.
    ///
    /// The check reads the meta page of the transaction's own snapshot: while the
    /// transaction is open, no writer (of any process) reuses that snapshot's pages. A
    /// writer in another process may overwrite the meta slot two commits later; the check
    /// then starts over with a new transaction.
    static func beginCheckedSnapshot(_ env: OpaquePointer, path: String) throws(DepotError) -> OpaquePointer {
        var descriptor: Int32 = -1
        var stat = MDB_stat()
        var rc = mdb_env_get_fd(env, &descriptor)
        if rc == 0 { rc = mdb_env_stat(env, &stat) }
        if rc != 0 { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
        let dataFile = (path as NSString).appendingPathComponent("data.mdb")
        let check = DataFileCheck(descriptor: descriptor, pageSize: Int(stat.ms_psize), path: dataFile)
        for _ in 0..<100 {
            var begun: OpaquePointer?
            rc = mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &begun)
            guard rc == 0, let txn = begun else { throw DepotError.lmdb(rc, context: "Reading the LMDB environment at \(path)") }
            let id = UInt64(mdb_txn_id(txn))
            do throws(DepotError) {
                if let meta = try check.meta(slot: Int(id % 2)), meta.txnid == id {
                    var status = Foundation.stat()
                    guard fstat(descriptor, &status) == 0 else {
                        throw DepotError.lmdb(errno, context: "Reading the size of \(dataFile)")
                    }
                    try check.check(meta, fileSize: Int(status.st_size))
                    // Read again: a meta page torn by a concurrent commit is not trusted.
                    if try check.meta(slot: Int(id % 2)) == meta { return txn }
                }
            } catch {
                mdb_txn_abort(txn)
                throw error
            }
            mdb_txn_abort(txn)
        }
        throw DepotError(.busy, "The LMDB store at \(path) changed too fast to be checked while opening (another process commits continuously); retry the open.")
    }

    /// Opens (creating when new) the metadata database of `pointer`, the environment of
    /// `environment`, and records the layout format. `idle`: called inside the gate (while
    /// reopening), where the map is resized directly rather than through the gate.
    static func prepareMetadata(_ environment: Environment, pointer: OpaquePointer, idle: Bool) throws(DepotError) -> MDB_dbi {
        var environmentFlags: UInt32 = 0
        if mdb_env_get_flags(pointer, &environmentFlags) == 0, environmentFlags & UInt32(MDB_RDONLY) != 0 {
            return try openMetadataReadOnly(environment, pointer: pointer)
        }
        for _ in 0..<64 {
            var begun: OpaquePointer?
            var rc = mdb_txn_begin(pointer, nil, 0, &begun)
            if rc == MDB_MAP_RESIZED {
                if idle {
                    let resized = environment.adoptMapSizeNow()
                    if resized != 0 { throw DepotError.lmdb(resized, context: "Adopting the new map size of \(environment.path)") }
                } else {
                    try environment.adoptMapSize()
                }
                continue
            }
            guard rc == 0, let txn = begun else {
                throw DepotError.lmdb(rc, context: "Opening the LMDB store at \(environment.path)")
            }
            var meta: MDB_dbi = 0
            rc = mdb_dbi_open(txn, Catalog.metaName, UInt32(MDB_CREATE), &meta)
            if rc == 0 {
                var key = MDB_val()
                var value = MDB_val()
                let format = Array(String(Catalog.formatVersion).utf8)
                rc = Catalog.formatKey.withUnsafeBytes { k in
                    format.withUnsafeBytes { v in
                        key = MDB_val(mv_size: k.count, mv_data: UnsafeMutableRawPointer(mutating: k.baseAddress))
                        value = MDB_val(mv_size: v.count, mv_data: UnsafeMutableRawPointer(mutating: v.baseAddress))
                        return mdb_put(txn, meta, &key, &value, UInt32(MDB_NOOVERWRITE))
                    }
                }
                if rc == MDB_KEYEXIST { rc = 0 }
            }
            if rc != 0 {
                mdb_txn_abort(txn)
            } else {
                rc = mdb_txn_commit(txn)
            }
            if rc == MDB_MAP_FULL {
                if idle { try environment.growNow().get() } else { try environment.grow() }
                continue
            }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Preparing the metadata of the LMDB store at \(environment.path)") }
            return meta
        }
        throw DepotError(.storeFull, "The LMDB store at \(environment.path) could not grow its map to hold its metadata.")
    }

    /// Opens the metadata database of an environment opened read-only (`Options.readOnly`),
    /// refusing one that has none instead of creating it.
    static func openMetadataReadOnly(_ environment: Environment, pointer: OpaquePointer) throws(DepotError) -> MDB_dbi {
        var begun: OpaquePointer?
        var rc = mdb_txn_begin(pointer, nil, UInt32(MDB_RDONLY), &begun)
        guard rc == 0, let txn = begun else {
            throw DepotError.lmdb(rc, context: "Opening the LMDB store at \(environment.path)")
        }
        var meta: MDB_dbi = 0
        rc = mdb_dbi_open(txn, Catalog.metaName, 0, &meta)
        if rc == MDB_NOTFOUND {
            mdb_txn_abort(txn)
            throw DepotError(.storeCorrupted, "\(environment.path) holds no Depot store (no \(Catalog.metaName) database), and a store opened read-only is never created. Check the path.")
        }
        // Committed, not aborted: the handle of a database opened in a transaction stays
        // open only when the transaction commits (for a read transaction that writes nothing).
        rc = rc == 0 ? mdb_txn_commit(txn) : { mdb_txn_abort(txn); return rc }()
        if rc != 0 { throw DepotError.lmdb(rc, context: "Opening the metadata of the LMDB store at \(environment.path)") }
        return meta
    }
}
