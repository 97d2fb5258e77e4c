import CLibPQ
import DepotCore
import Foundation

// One round trip for a write that is one statement.
//
// A write reaches the store as a closure over a `WriteTransaction`, and the closure decides
// what to do next from what each statement returned: the store cannot commit a statement in
// its own round trip without knowing that no statement follows. So the closure runs against
// a `DeferringTransaction`, which holds back its first write of a record by key and answers
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
extension PostgresStore {
    /// Runs `body` as a write, in one autocommit statement when it is one write of a record
    /// by key.
    ///
    /// A write held back that did not go as answered runs again held back once when it was
    /// an upsert (now answered the other way); any other (a duplicate insert, an update or a
    /// delete of nothing) runs in a transaction, which gives its error or its result.
    func writeDeferring<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        for attempt in 0..<2 {
            let tables = self.tables
            let deferring = DeferringTransaction(
                PostgresTransaction(connection: writer, tables: tables, writable: true, recorder: changes.makeRecorder(detailedAlways: true)))
            let result: T
            do {
                result = try ReferenceEnforcement.run(deferring, tables.relationships, body)
            } catch {
                deferring.real.isFinished = true
                if writer.isInTransaction { try? writer.execute("ROLLBACK") }
                if deferring.misanswered {
                    if attempt == 0, deferring.heldBackUpsert { continue }
                    break
                }
                throw error
            }
            deferring.real.isFinished = true
            if deferring.misanswered {
                if writer.isInTransaction { try? writer.execute("ROLLBACK") }
                if attempt == 0, deferring.heldBackUpsert { continue }
                break
            }
            if deferring.begun {
                try commit(deferring.real)
                return result
            }
            // Nothing written: nothing to send.
            guard let write = deferring.deferred else { return result }
            if let recorder = try runSingle(write) {
                publishLocally(recorder)
                return result
            }
            if !deferring.heldBackUpsert { break }
        }
        writer.lastFailure = nil
        return try writeInTransaction(body)
    }

    /// Sends a held-back write as one autocommit statement; its change recorder when it took
    /// effect as it was answered, nil when it took no effect.
    private func runSingle(_ write: SingleWrite) throws -> ChangeRecorder? {
        // A session the server ended while it sat idle (a restart) shows here, before the
        // write goes out: once it has gone out, a failure leaves its fate unknown.
        writer.noticeIdleLoss()
        healthy(writer)
        guard !writer.isBroken, !writer.isInTransaction else { return nil }
        let table = write.table
        let verified = state.withLockedValue { $0.verifiedVersion }
        var recorder = changes.makeRecorder(detailedAlways: true)
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
            .text(channel), .text(Self.payload(recorder, instance: instance)),
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
    /// one round trip; then the local publication.
    func commit(_ transaction: PostgresTransaction) throws {
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
        publishLocally(transaction.recorder)
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

/// The writer's transaction as a write closure sees it: its first write of a record by key
/// is held back and answered as a write that takes effect; any later statement begins the
/// transaction, with the held-back write first (see `PostgresStore+SingleStatement.swift`).
final class DeferringTransaction: WriteTransaction {
    /// Thrown when the held-back write, run in the transaction, did not go as it was
    /// answered: the closure runs again.
    struct Misanswered: Error {}

    let real: PostgresTransaction
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

    init(_ real: PostgresTransaction) {
        self.real = real
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

    func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        try begin()
        try real.fetch(query, reserve: reserve, body)
    }

    func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        try begin()
        return try real.fetchRow(entity, key: key, body)
    }

    func count(_ query: Query) throws -> Int {
        try begin()
        return try real.count(query)
    }

    func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        try begin()
        return try real.aggregate(query)
    }

    func delete(_ query: Query) throws -> Int {
        try begin()
        return try real.delete(query)
    }

    func insert(_ row: Row, into entity: EntityHandle) throws {
        if try holdBack(.insert, entity, row: row, key: nil) { return }
        try begin()
        try real.insert(row, into: entity)
    }

    func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        let inserting = (try? real.tables.resolve(entity))?.upsertsInsert.load(ordering: .relaxed) ?? true
        if try holdBack(.upsert(inserting: inserting), entity, row: row, key: nil) { return inserting }
        try begin()
        return try real.upsert(row, into: entity)
    }

    func update(_ row: Row, in entity: EntityHandle) throws {
        if try holdBack(.update, entity, row: row, key: nil) { return }
        try begin()
        try real.update(row, in: entity)
    }

    func delete(key: Value, from entity: EntityHandle) throws -> Bool {
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
