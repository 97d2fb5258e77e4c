public import DepotCore

// What the store runtime calls to end a transaction: a read rolls its SQL transaction back
// (a read of one statement has none), a write commits or rolls back, and a group commit's
// save points are SQL savepoints inside the one write transaction.
extension SQLiteTransaction {
    /// Asks for a rerun when another process changed the schema under the read (the
    /// registry is reloaded first), or, for a read of one statement that went on to a
    /// second, to run again as a transaction.
    public var retry: EngineRetry? {
        if connection.schemaMoved { return .schemaChanged }
        return single.retry
    }

    /// The references between the registered tables.
    public var relationships: Relationships { tables.relationships }

    /// Ends a read: its SQL transaction, when it has one, rolls back (it wrote nothing); a
    /// read of one statement leaves the transaction its reader keeps (see `KeptSnapshots`).
    public func end() {
        isFinished = true
        if explicit { SQLiteEngine.rollback(connection) }
        guard let claimed else { return }
        // While the writer waits to restart the WAL, no read keeps its transaction.
        if let kept, kept.restartPending.load(ordering: .relaxed), connection.keptHeader != nil {
            connection.keptHeader = nil
            SQLiteEngine.rollback(connection)
        }
        claimed.use.withLockedValue { $0.busy = false }
    }

    /// Commits, and returns what was written since the transaction began or since the last
    /// savepoint was released. A transaction SQLite already rolled back (after an I/O error
    /// or a full disk) is refused with what rolled it back.
    public func commit() throws -> ChangeRecorder {
        isFinished = true
        if !connection.isInTransaction { throw DepotError.rolledBack(after: connection.lastError) }
        try connection.run(key: SQLiteEngine.Keys.commit, "COMMIT")
        return recorder
    }

    /// Rolls everything back.
    public func rollback() {
        isFinished = true
        SQLiteEngine.rollback(connection)
        connection.keptHeader = nil
        claimed?.use.withLockedValue { $0.busy = false }
    }

    /// Begins one caller's write of a group: `SAVEPOINT depot_write`.
    public func savepoint() throws {
        connection.lastError = nil
        recorder = ChangeRecorder(detailed: recorder.isDetailed)
        try connection.run(key: SQLiteEngine.Keys.savepoint, "SAVEPOINT depot_write")
    }

    /// Keeps the caller's write (`RELEASE depot_write`), and returns what it wrote.
    public func releaseSavepoint() throws -> ChangeRecorder {
        if !connection.isInTransaction { throw DepotError.rolledBack(after: connection.lastError) }
        try connection.run(key: SQLiteEngine.Keys.releaseSavepoint, "RELEASE depot_write")
        let written = recorder
        recorder = ChangeRecorder(detailed: written.isDetailed)
        return written
    }

    /// Undoes the caller's write (`ROLLBACK TO depot_write`, then `RELEASE`); throws when
    /// SQLite abandoned the whole transaction instead.
    public func rollbackToSavepoint() throws {
        recorder = ChangeRecorder(detailed: recorder.isDetailed)
        guard connection.isInTransaction else { throw DepotError.rolledBack(after: connection.lastError) }
        try connection.run(key: SQLiteEngine.Keys.rollbackToSavepoint, "ROLLBACK TO depot_write")
        try connection.run(key: SQLiteEngine.Keys.releaseSavepoint, "RELEASE depot_write")
    }
}
