public import DepotCore
import Foundation

// Reads: on a reader connection made healthy first; on the primary when the reader is a
// standby that has not replayed this store's last write in time; in autocommit mode when
// the read is one statement.
//
// A controller's `fetchAll`, `fetchFirst`, `count` (and so a page) and a lookup by key read
// with one statement, which in autocommit mode is its own snapshot: it runs so, with no
// `BEGIN` before it and no `ROLLBACK` after it, with the schema probe pipelined before it
// when the schema must be checked (see `PostgresEngine+SchemaWatch.swift`). Should the read go on to a second statement (a request that reads related records),
// the two would see different snapshots: the read stops there and asks the runtime to run
// it again from its start in a `REPEATABLE READ READ ONLY` transaction
// (`EngineRetry.asTransaction`), which the core allows because such a read has no effect
// outside what it returns.
extension PostgresEngine {
    /// Begins a read's first run.
    public func beginRead(on connection: Reader?, singleStatement: Bool) throws -> PostgresTransaction {
        try beginRead(on: connection, singleStatement: singleStatement, after: nil, attempt: 0)
    }

    /// Begins a read on `reader` (made afresh first when its server went away), or on the
    /// primary when `reader` is a standby behind this store's last write.
    public func beginRead(on slot: Reader?, singleStatement: Bool, after retry: EngineRetry?, attempt: Int) throws -> PostgresTransaction {
        guard let reader = slot?.connection else {
            throw DepotError(.backend, "A read of the \(storeDescription) began without a reader connection.")
        }
        healthy(reader)
        reader.schemaReloadNeeded = false
        reader.lastFailure = nil
        var connection = reader
        var taken: DispatchSemaphore?
        if !standbyCaughtUp(reader), let primaryReader {
            primaryReaderTaken.wait()
            taken = primaryReaderTaken
            healthy(primaryReader)
            primaryReader.schemaReloadNeeded = false
            primaryReader.lastFailure = nil
            connection = primaryReader
        }
        let probe = readNeedsProbe(connection, after: retry)
        let transaction = PostgresTransaction(connection: connection, tables: tables, writable: false)
        transaction.after = retry
        transaction.attempt = attempt
        transaction.releasesPrimary = taken
        transaction.probeSkipped = !probe
        if singleStatement {
            transaction.single.isOn = true
            if probe { connection.probeNextStatement() }
            return transaction
        }
        do {
            try connection.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        } catch {
            taken?.signal()
            throw error
        }
        if !probe { connection.probePending = false }
        transaction.explicit = true
        return transaction
    }
}

extension PostgresTransaction {
    /// Asks for a rerun when another process changed the schema (the registry is reloaded
    /// first), once when the connection's server went away before anything could have
    /// taken effect (it is made afresh), and, for a read of one statement that went on to a
    /// second, to run again as a transaction.
    public var retry: EngineRetry? {
        if connection.schemaReloadNeeded, attempt + 1 < PostgresEngine.schemaReloads { return .schemaChanged }
        // A read without the probe that met another layout than the registry's: again,
        // with the probe, which tells a schema another process moved from a table changed
        // underneath Depot.
        if probeSkipped, attempt + 1 < PostgresEngine.schemaReloads,
            layoutMismatch || connection.lastFailure.map({ PostgresEngine.schemaShapedStates.contains($0.sqlState) }) == true
        {
            return .schemaChanged
        }
        if connection.lost, !connection.commitSent, after != .connectionLost { return .connectionLost }
        return single.retry
    }

    /// Ends a read: its transaction, when it has one, ends without waiting for the server's
    /// answer, and the connection to the primary, when the read took it, is given back.
    public func end() {
        isFinished = true
        if explicit { connection.endWithoutWaiting() }
        releasesPrimary?.signal()
        releasesPrimary = nil
    }
}

extension EngineRetry {
    /// Another process changed the schema: the registry is reloaded on the writer's lane.
    static let schemaChanged = EngineRetry(reason: "another process changed the schema")
    /// The connection's server went away (a restart, a failover) before the work could
    /// have taken effect: it runs again on the connection made afresh.
    static let connectionLost = EngineRetry(reason: "the connection to PostgreSQL was lost", needsPreparation: false)
    /// PostgreSQL aborted the write for a serialization failure or a deadlock.
    static let serialization = EngineRetry(reason: "a serialization failure")
    /// A write held back as one statement did not go as it was answered: it runs again in
    /// a transaction.
    static let misanswered = EngineRetry(reason: "a held-back write did not go as answered", needsPreparation: false)
    /// A held-back upsert went the other way: it runs again held back, answered that way.
    static let misansweredUpsert = EngineRetry(reason: "a held-back upsert went the other way", needsPreparation: false)
}

extension PostgresEngine {
    /// Prepares a transaction's next run: reloads the registry after another process's
    /// schema change and waits a short random while after a serialization failure (so two
    /// writers that collided do not collide again at once). A lost connection and a write
    /// answered wrong ask for no preparation: the connection is made afresh, and the write
    /// held back or not, as the next run begins.
    public func prepareRetry(_ retry: EngineRetry, attempt: Int) throws {
        switch retry {
        case .schemaChanged:
            try reloadSchemaNow()
        case .serialization:
            usleep(UInt32.random(in: 200...(1_000 * UInt32(min(max(attempt, 1), 20)))))
        default:
            throw DepotError(.backend, "The PostgreSQL engine cannot run a transaction again for \(retry.reason).")
        }
    }
}
