import CLMDB
import DepotCore
import Foundation
import NIOConcurrencyHelpers

// Recovery: reopening an environment LMDB declared dead, and growing the map.
extension LMDBEngine {
    // MARK: Recovery

    /// Replaces the environment after LMDB declared it dead, and reloads what depends on it.
    ///
    /// LMDB sets `MDB_FATAL_ERROR` when a write of the meta page fails (the commit that
    /// met it fails with the disk's error): from then on every transaction of that
    /// environment, reads included, fails with `MDB_PANIC`, although the file is intact —
    /// the meta page still names the last acknowledged commit. Only closing and opening
    /// the environment again clears it. Runs with every transaction of this store drained
    /// and new ones held back (``TransactionGate/whenIdle(patience:_:)``), then opens the
    /// directory as ``init(directory:options:log:)`` does (the read-only check of the data
    /// file, the metadata) and reopens the databases of the catalog, whose handles belong to
    /// the old environment.
    ///
    /// `epoch` is the ``Environment/epoch`` the caller's failed begin saw: when another
    /// transaction reopened the environment since, there is nothing to do.
    ///
    /// - Throws: `DepotError.Code.io` (`DepotError.Code.storeCorrupted` when the reopened
    ///   file fails its check) when the environment cannot be opened again; the environment
    ///   then stays closed, and the next transaction tries again.
    func recover(_ env: Environment, seen epoch: UInt64) throws(DepotError) {
        let options = self.options
        let path = directory
        let outcome = env.gate.whenIdle { () -> Result<Bool, DepotError> in
            guard env.epoch == epoch else { return .success(false) }
            return Result { () throws(DepotError) -> Bool in
                try env.replace(
                    open: { mapSize throws(DepotError) in try Self.reopenEnvironment(path: path, options: options, mapSize: mapSize) },
                    prepare: { env throws(DepotError) in
                        guard let pointer = env.pointer else { return }
                        env.metaDBI = try Self.prepareMetadata(env, pointer: pointer, idle: true)
                        try self.reopenCatalog(env, pointer: pointer)
                    })
                return true
            }
        }
        switch outcome {
        case .success(true)?:
            log.logger.warning(
                "LMDB environment reopened: a write to disk had failed and LMDB had stopped the environment (MDB_PANIC); nothing acknowledged was lost",
                metadata: ["depot.location": .string(directory)])
        case .success(false)?:
            break
        case .failure(let error)?:
            log.logger.error(
                "LMDB environment could not be reopened after a failed write",
                metadata: ["depot.location": .string(directory), "depot.error": .string(error.description)])
            throw DepotError(
                error.code == .storeCorrupted ? .storeCorrupted : .io,
                "A write to disk failed earlier, so LMDB stopped the environment of the store at \(directory), and reopening it failed: the disk refused it (\(error.message)). Nothing acknowledged was lost. The store tries to reopen at each new transaction: retry once the disk works again (check free space, permissions and the system log for I/O errors).",
                nativeCode: error.nativeCode ?? MDB_PANIC)
        case nil:
            throw DepotError(
                .busy,
                "A write to disk failed earlier, so LMDB stopped the environment of the store at \(directory); it can only be reopened while no transaction is open, and one stayed open for \(Int(TransactionGate.resizePatience)) s. Finish transactions sooner; the next transaction tries again.",
                nativeCode: MDB_PANIC)
        }
    }

    /// Opens the environment again for ``recover(_:seen:)``, after the same checks as the
    /// first open. The data file must still be there: opening would otherwise create an
    /// empty store in its place and silently drop every record.
    static func reopenEnvironment(path: String, options: Options, mapSize: Int) throws(DepotError) -> OpaquePointer {
        let dataFile = (path as NSString).appendingPathComponent("data.mdb")
        guard let size = (try? FileManager.default.attributesOfItem(atPath: dataFile))?[.size] as? NSNumber, size.intValue > 0 else {
            throw DepotError(.io, "\(dataFile) is missing or empty; restore it (the store will not create an empty one in its place)", nativeCode: 2 /* ENOENT */)
        }
        try validate(path: path, options: options)
        var reopening = options
        reopening.mapSize = min(max(options.mapSize, mapSize), Environment.maximumMapSize)
        let pointer = try openEnvironment(path: path, options: reopening, flags: flags(options))
        var dead: Int32 = 0
        _ = mdb_reader_check(pointer, &dead)
        return pointer
    }

    /// Reopens the databases of every registered entity in the reopened environment (a
    /// database handle belongs to one environment) and publishes the new handles. Opens
    /// the stored schema, like ``reloadCatalog()``: another process may have migrated an
    /// entity meanwhile. Writes nothing. Runs inside the gate, with no transaction open.
    func reopenCatalog(_ env: Environment, pointer: OpaquePointer) throws(DepotError) {
        let snapshot = catalog.snapshot
        for _ in 0..<64 {
            var begun: OpaquePointer?
            var rc = mdb_txn_begin(pointer, nil, 0, &begun)
            if rc == MDB_MAP_RESIZED {
                rc = env.adoptMapSizeNow()
                if rc != 0 { throw DepotError.lmdb(rc, context: "Adopting the new map size of \(directory)") }
                continue
            }
            guard rc == 0, let txn = begun else {
                throw DepotError.lmdb(rc, context: "Reopening the databases of the LMDB store at \(directory)")
            }
            let transaction = LMDBTransaction(
                txn: txn, catalog: snapshot, writable: true, maxKeySize: env.maxKeySize, metaDBI: env.metaDBI,
                storeName: directory, recording: false, environment: env)
            var reopened: [String: RegisteredEntity] = [:]
            do {
                for name in snapshot.registry.names {
                    guard let stored = try transaction.readStoredEntity(name) else { continue }
                    reopened[name] = try transaction.registerStamped(stored.entity, current: nil)
                }
            } catch {
                transaction.isFinished = true
                mdb_txn_abort(txn)
                throw DepotError.wrapping(error, code: .backend, context: "Reopening the databases of the LMDB store at \(directory)")
            }
            transaction.isFinished = true
            rc = catalog.mutate { entities in
                let rc = mdb_txn_commit(txn)
                if rc == 0 {
                    // Keep the registry (its handles stay valid); an entity whose stored
                    // schema is gone is forgotten.
                    for name in entities.names where reopened[name] == nil { entities.remove(named: name) }
                    for entry in reopened.values { entities.set(entry.entity, entry) }
                }
                return rc
            }
            if rc != 0 { throw DepotError.lmdb(rc, context: "Reopening the databases of the LMDB store at \(directory)") }
            return
        }
        throw DepotError(.busy, "The LMDB store at \(directory) kept being resized by another process while it was reopened; retry.")
    }

    /// Grows the map (the whole transaction then runs again), and says so at `info`.
    func grow(_ env: Environment) throws {
        try env.grow()
        log.telemetry?.mapGrew()
        log.logger.info("LMDB map grown; the write transaction runs again", metadata: ["depot.location": .string(directory)])
    }
}
