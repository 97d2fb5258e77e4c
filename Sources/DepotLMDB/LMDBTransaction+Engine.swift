import CLMDB
public import DepotCore

// What the store runtime calls to end a transaction: a read returns its reader slot, a
// write commits or aborts, and a group commit's save points are nested transactions.
extension LMDBTransaction {
    /// Asks for a rerun after `MDB_MAP_FULL` (the map grows) or a schema another process
    /// changed (the catalog is reloaded), whatever the body did with the error.
    public var retry: EngineRetry? {
        if mapFull { return .mapFull }
        if catalogChanged { return .catalogChanged }
        return nil
    }

    /// The references between the entities of the transaction's catalog.
    public var relationships: Relationships { catalog.relationships }

    /// Ends a read: its reader slot goes back to the environment, with this object kept on
    /// it for the next read (reused when nothing else holds it).
    public func end() {
        isFinished = true
        guard let reader else { return }
        self.reader = nil
        // Nothing of this object is touched once the slot is back: the next read on it may
        // take this object and set its ticket at once.
        let ticket = self.ticket
        reader.transaction = self
        environment.endReader(reader)
        environment.gate.leave(ticket)
    }

    /// Commits the write, and returns what it wrote since it began or since the last save
    /// point was released. On `MDB_MAP_FULL` nothing is kept and ``retry`` asks for a
    /// larger map.
    public func commit() throws -> ChangeRecorder {
        isFinished = true
        let rc = mdb_txn_commit(txn)
        // LMDB frees the transaction whether the commit succeeds or not.
        holdsWriteTicket = false
        environment.gate.leave(ticket)
        if rc != 0 { throw fail(rc, "Committing a write transaction in the LMDB store at \(storeName)") }
        return recorder
    }

    /// Aborts the write, an open save point's nested transaction with it.
    public func rollback() {
        isFinished = true
        guard holdsWriteTicket else { return }
        holdsWriteTicket = false
        if let parent = savepointParent {
            mdb_txn_abort(txn)
            txn = parent
            savepointParent = nil
        }
        mdb_txn_abort(txn)
        environment.gate.leave(ticket)
    }

    /// Begins a nested transaction for one caller's write of a group.
    public func savepoint() throws {
        var begun: OpaquePointer?
        let rc = mdb_txn_begin(mdb_txn_env(txn), txn, 0, &begun)
        guard rc == 0, let child = begun else {
            throw fail(rc, "Beginning a nested write transaction in the LMDB store at \(storeName)")
        }
        savepointParent = txn
        txn = child
    }

    /// Commits the nested transaction into its parent, and returns what it wrote.
    public func releaseSavepoint() throws -> ChangeRecorder {
        guard let parent = savepointParent else {
            throw DepotError(.backend, "No nested write transaction is open in the LMDB store at \(storeName).")
        }
        let rc = mdb_txn_commit(txn)
        // Freed either way; a failed one kept nothing in the parent.
        txn = parent
        savepointParent = nil
        if rc != 0 { throw fail(rc, "Committing a nested write transaction in the LMDB store at \(storeName)") }
        let written = recorder
        recorder = ChangeRecorder(detailed: recording)
        return written
    }

    /// Aborts the nested transaction, and forgets what it recorded; the parent goes on.
    public func rollbackToSavepoint() throws {
        if let parent = savepointParent {
            mdb_txn_abort(txn)
            txn = parent
            savepointParent = nil
        }
        recorder = ChangeRecorder(detailed: recording)
    }
}
