import CLibPQ
public import DepotCore
import Foundation

// One round trip for a write that is one statement.
//
// A write reaches the store as a closure over a `WriteTransaction`, and the closure decides
// what to do next from what each statement returned: the store cannot commit a statement in
// its own round trip without knowing that no statement follows. So the closure runs against
// a `PostgresWriteTransaction`, which holds back its first write of a record by key and answers
// it at once as a write that takes effect is answered (an upsert: as the last upsert of
// that entity went, inserted or updated).
//
// - When the closure returns after that one write, the write goes out as one autocommit
//   statement (``RegisteredEntity/SingleStatements``) that takes effect only as answered,
//   and carries its change notification. Took effect: committed and notified, and the
//   closure's result stands. Took no effect (a duplicate key, no record to update or
//   delete, an upsert that went the other way, a unique value taken, a serialization
//   failure, any error of the server's, a moved schema version): nothing was written or
//   notified, and the closure runs again, as after a serialization failure.
// - When the closure goes on to another statement, the transaction begins then, with the
//   held-back write first (BEGIN pipelined with it, as with any first statement), and
//   the notification goes with the COMMIT as before. Should the held-back write not take
//   effect as answered, the closure was told wrong: the transaction rolls back and the
//   closure runs again in a transaction from its start.
// - A closure whose first statement is a read, or a bulk delete, runs in a transaction
//   from that statement on, as before.
//
// So a closure runs once unless it was told wrong (or PostgreSQL aborted it), the same
// promise as before: keep write closures free of outside side effects. A connection that
// fails after the autocommit statement went out leaves the write's fate unknown, so the
// write fails with `DepotError.Code.io` and is not run again, as a write lost during its
// COMMIT does. The writer's sessions run with `default_transaction_isolation =
// serializable`, so the autocommit statement is as serializable as the transaction it
// replaces.
extension PostgresEngine {
    /// Begins a write's first run: holding back its first write of a record by key.
    public func beginWrite(recordingKeys: Bool) throws -> PostgresWriteTransaction {
        try beginWrite(recordingKeys: recordingKeys, after: nil, attempt: 0)
    }

    /// Begins a write on the writer connection (made afresh first when its server went
    /// away): holding back its first write of a record by key on its first run, and on the
    /// second run of an upsert that went the other way; in a `SERIALIZABLE` transaction
    /// from its start on any other run. Every write records each key it changes: other
    /// processes are told, whether or not this one observes.
    public func beginWrite(recordingKeys: Bool, after retry: EngineRetry?, attempt: Int) throws -> PostgresWriteTransaction {
        healthy(writer)
        writer.lastFailure = nil
        writer.schemaReloadNeeded = false
        let real = PostgresTransaction(connection: writer, tables: tables, writable: true, recorder: ChangeRecorder(detailed: true))
        let write = PostgresWriteTransaction(real, engine: self, after: retry, attempt: attempt)
        if retry != nil && retry != .misansweredUpsert { try write.beginNow() }
        return write
    }

    /// Sends a held-back write as one autocommit statement; its change recorder when it took
    /// effect as it was answered, nil when it took no effect.
    func runSingle(_ write: SingleWrite) throws -> ChangeRecorder? {
        // A session the server ended while it sat idle (a restart) shows here, before the
        // write goes out: once it has gone out, a failure leaves its fate unknown.
        writer.noticeIdleLoss()
        healthy(writer)
        guard !writer.isBroken, !writer.isInTransaction else { return nil }
        let table = write.table
        let verified = state.withLockedValue { $0.verifiedVersion }
        var recorder = ChangeRecorder(detailed: true)
        let sql: String, params: [PGParam], what: String
        switch write.kind {
        case .insert, .upsert(inserting: true):
            recorder.record(entity: table.entity.name, key: write.key, existedBefore: false, existsAfter: true)
            (sql, what) = (table.single.insert, write.kind == .insert ? "Inserting" : "Saving")
            params = write.params
        case .update, .upsert(inserting: false):
            recorder.record(entity: table.entity.name, key: write.key, existedBefore: true, existsAfter: true)
            (sql, what) = (table.single.update, write.kind == .update ? "Updating" : "Saving")
            params = write.params
        case .delete:
            recorder.record(entity: table.entity.name, key: write.key, existedBefore: true, existsAfter: false)
            (sql, what) = (table.single.delete, "Deleting")
            params = [.value(write.key)]
        }
        let extra: [PGParam] = [
            .text(channel), .text(Self.payload(recorder, prefix: ownPayloadPrefix)),
            PGParam(oid: PGParam.textOid, bytes: verified.map { PGText.encode($0) }),
        ]
        let context = "\(what) the \(table.entity.name) with primary key \(write.key.debugLiteral)"
        // Autocommit: once the statement is out, a lost connection may have committed it.
        writer.commitSent = true
        let result: PGResult
        do throws(DepotError) {
            let statement = PGConnection.Step(sql: sql, params: params + extra, prepare: true, context: context)
            if hasStandbys {
                // The position after its commit, for read-your-writes, in the same round trip.
                var position = Self.positionStep
                position.syncBefore = true
                let results = try writer.run([statement, position])
                result = results[0]
                if result.rowCount == 1, result.int64(0, 0) == 1 { noteCommit(at: try Self.position(of: results[1])) }
            } else {
                result = try writer.run([statement])[0]
            }
        } catch {
            if writer.lost { throw error }
            // The statement failed as a whole, so nothing of it was kept: the closure runs
            // again in a transaction, which gives the error in its own words (or retries, or
            // reloads the schema).
            writer.lastFailure = nil
            writer.commitSent = false
            return nil
        }
        writer.commitSent = false
        let tookEffect = result.rowCount == 1 && result.int64(0, 0) == 1
        if case .upsert(let inserting) = write.kind {
            // The next upsert of the entity is answered as this one went.
            table.upsertsInsert.store(tookEffect == inserting, ordering: .relaxed)
        }
        return tookEffect ? recorder : nil
    }

    /// Ends a write whose closure returned in a transaction: its notification and COMMIT in
    /// one round trip.
    func commitTransaction(_ transaction: PostgresTransaction) throws {
        if writer.isInFailedTransaction {
            throw DepotError(writer.lastFailure.map { $0.depotError("").code } ?? .backend, "PostgreSQL rolled this transaction back after an error in it that the operation caught (\(writer.lastFailure?.message ?? "see that error")); nothing of it was kept.")
        }
        do {
            var steps: [PGConnection.Step] = []
            if let notification = notification(transaction.recorder) { steps.append(notification) }
            steps.append(PGConnection.Step(sql: "COMMIT", context: "Committing a write"))
            // The position after the commit, for read-your-writes on standbys.
            if hasStandbys, writer.pendingBegin == nil { steps.append(Self.positionStep) }
            if steps.count == 1 {
                try writer.execute("COMMIT", "Committing a write")
            } else {
                let results = try writer.run(steps)
                if hasStandbys, let last = results.last { noteCommit(at: try Self.position(of: last)) }
            }
        } catch {
            if writer.isInTransaction { try? writer.execute("ROLLBACK") }
            throw error
        }
    }
}

/// One write of a record by key, held back.
struct SingleWrite {
    enum Kind: Equatable {
        case insert, update, delete
        /// An upsert, answered as an insert or as an update.
        case upsert(inserting: Bool)
    }
    let kind: Kind
    let handle: EntityHandle
    let table: RegisteredEntity
    let key: Value
    let row: Row?
    /// The row's parameters (none for a delete).
    let params: [PGParam]
}

/// The writer's transaction as a write closure sees it: on a write's first run its first
/// write of a record by key is held back and answered as a write that takes effect; any
/// later statement begins the transaction, with the held-back write first (see
/// `PostgresEngine+SingleStatement.swift`).
public final class PostgresWriteTransaction: EngineWriteTransaction {
    /// Thrown when the held-back write, run in the transaction, did not go as it was
    /// answered: the closure runs again.
    struct Misanswered: Error {}

    let real: PostgresTransaction
    unowned let engine: PostgresEngine
    /// What the previous run asked for, and how many runs came before.
    let after: EngineRetry?
    let attempt: Int
    private(set) var deferred: SingleWrite?
    /// Whether the SQL transaction has begun (a read, a second write).
    private(set) var begun = false
    /// Whether the closure was told wrong about its held-back write.
    private(set) var misanswered = false

    /// Whether the held-back write is an upsert (answered one of two ways).
    var heldBackUpsert: Bool {
        if case .upsert = deferred?.kind { return true }
        return false
    }

    init(_ real: PostgresTransaction, engine: PostgresEngine, after: EngineRetry?, attempt: Int) {
        self.real = real
        self.engine = engine
        self.after = after
        self.attempt = attempt
    }

    /// Begins the SQL transaction before any statement: a run that holds nothing back.
    func beginNow() throws {
        begun = true
        try real.connection.begin("BEGIN ISOLATION LEVEL SERIALIZABLE")
    }

    /// Begins the transaction, with the held-back write first; throws when that write did
    /// not go as it was answered.
    private func begin() throws {
        if misanswered { throw Misanswered() }
        if real.isFinished { throw DepotError.transactionEnded }
        guard !begun else { return }
        begun = true
        try real.connection.begin("BEGIN ISOLATION LEVEL SERIALIZABLE")
        guard let write = deferred else { return }
        let row = write.row ?? Row()
        let handle = write.handle
        let wentAsAnswered: Bool
        do {
            switch write.kind {
            case .insert:
                try real.insert(row, into: handle)
                wentAsAnswered = true
            case .update:
                try real.update(row, in: handle)
                wentAsAnswered = true
            case .upsert(let inserting):
                let inserted = try real.upsert(row, into: handle)
                write.table.upsertsInsert.store(inserted, ordering: .relaxed)
                wentAsAnswered = inserted == inserting
            case .delete:
                wentAsAnswered = try real.delete(key: write.key, from: handle)
            }
        } catch {
            misanswered = true
            throw Misanswered()
        }
        if !wentAsAnswered {
            misanswered = true
            throw Misanswered()
        }
    }

    /// Holds `write` back when it is the first statement; false when the transaction is
    /// to run it.
    private func holdBack(_ kind: SingleWrite.Kind, _ entity: EntityHandle, row: Row?, key: Value?) throws -> Bool {
        if misanswered { throw Misanswered() }
        guard !begun, deferred == nil else { return false }
        if real.isFinished { throw DepotError.transactionEnded }
        let table = try real.tables.resolve(entity)
        // Checked now, as the statement would be: an invalid row sends nothing either way.
        let params = try row.map { try PostgresTransaction.params($0, table: table) } ?? []
        deferred = SingleWrite(kind: kind, handle: entity, table: table, key: key ?? row.map { $0[value: table.keyIndex] } ?? .null, row: row, params: params)
        return true
    }

    /// The rows `query` selects, in the transaction.
    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        try begin()
        try real.fetch(query, reserve: reserve, body)
    }

    /// The row of `entity` whose key is `key`, in the transaction.
    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        try begin()
        return try real.fetchRow(entity, key: key, body)
    }

    /// How many rows `query` selects, in the transaction.
    public func count(_ query: Query) throws -> Int {
        try begin()
        return try real.count(query)
    }

    /// The groups and values of `query`, in the transaction.
    public func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        try begin()
        return try real.aggregate(query)
    }

    /// Deletes the rows `query` selects, in the transaction.
    public func delete(_ query: Query) throws -> Int {
        try begin()
        return try real.delete(query)
    }

    /// Inserts `row`: held back when it is the run's first statement.
    public func insert(_ row: Row, into entity: EntityHandle) throws {
        if try holdBack(.insert, entity, row: row, key: nil) { return }
        try begin()
        try real.insert(row, into: entity)
    }

    /// Saves `row`: held back when it is the run's first statement, and answered as the
    /// entity's last upsert went.
    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        let inserting = (try? real.tables.resolve(entity))?.upsertsInsert.load(ordering: .relaxed) ?? true
        if try holdBack(.upsert(inserting: inserting), entity, row: row, key: nil) { return inserting }
        try begin()
        return try real.upsert(row, into: entity)
    }

    /// Updates the row with `row`'s key: held back when it is the run's first statement.
    public func update(_ row: Row, in entity: EntityHandle) throws {
        if try holdBack(.update, entity, row: row, key: nil) { return }
        try begin()
        try real.update(row, in: entity)
    }

    /// Deletes the row whose key is `key`: held back when it is the run's first statement.
    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        // A key of another type matches nothing and sends nothing, as in the transaction.
        if let table = try? real.tables.resolve(entity), key.type != table.keyType {
            if misanswered { throw Misanswered() }
            return false
        }
        if try holdBack(.delete, entity, row: nil, key: key) { return true }
        try begin()
        return try real.delete(key: key, from: entity)
    }
}

// What the store runtime calls around a write's closure.
extension PostgresWriteTransaction {
    /// The references between the entities of the registry the write began with.
    public var relationships: Relationships { real.tables.relationships }

    /// Asks for a rerun when the held-back write was answered wrong (held back again for an
    /// upsert's first rerun, in a transaction otherwise), when another process changed the
    /// schema, once when the writer's server went away before the write could have taken
    /// effect, and when PostgreSQL aborted the write for a serialization failure or a
    /// deadlock (up to ``PostgresEngine/Options/retries`` times).
    public var retry: EngineRetry? {
        if misanswered { return heldBackUpsert && attempt == 0 && after == nil ? .misansweredUpsert : .misanswered }
        let writer = real.connection
        if writer.schemaReloadNeeded, attempt + 1 < PostgresEngine.schemaReloads { return .schemaChanged }
        if writer.lost, !writer.commitSent, after != .connectionLost { return .connectionLost }
        if writer.lastFailure?.isRetryable == true, attempt < engine.options.retries { return .serialization }
        return nil
    }

    /// Commits: a transaction with its notification and `COMMIT` in one round trip; a write
    /// held back as one autocommit statement that carries its notification, which asks for
    /// a rerun when it did not take effect as answered.
    public func commit() throws -> ChangeRecorder {
        if misanswered { throw Misanswered() }
        real.isFinished = true
        if begun {
            try engine.commitTransaction(real)
            return real.recorder
        }
        // Nothing written: nothing to send.
        guard let write = deferred else { return ChangeRecorder(detailed: true) }
        if let recorder = try engine.runSingle(write) { return recorder }
        misanswered = true
        throw Misanswered()
    }

    /// Rolls the transaction back, when one began.
    public func rollback() {
        real.isFinished = true
        let writer = real.connection
        if writer.isInTransaction { try? writer.execute("ROLLBACK") }
    }
}
