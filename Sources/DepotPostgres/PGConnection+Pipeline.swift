import CLibPQ
import DepotCore
import Foundation

/// Running statements: one at a time, or several in one round trip (libpq's pipeline mode).
extension PGConnection {
    /// The most parameters one statement takes (the protocol counts them in 16 bits).
    static let parameterLimit = 65_535

    /// PostgreSQL's largest field, 1 GiB - 1 bytes.
    static let fieldLimit = (1 << 30) - 1

    /// One statement of a pipeline.
    struct Step {
        var sql: String
        var params: [PGParam] = []
        /// Whether the statement goes through the connection's prepared-statement cache
        /// (``PGStatementCache``): for statements sent again and again (reads, writes by
        /// key, the schema probe), not for transaction control or DDL.
        var prepare = false
        var context: String
        /// Whether the steps before this one end their implicit transaction first (a sync
        /// point): an autocommit statement commits before this step runs, in the same round
        /// trip.
        var syncBefore = false
    }

    /// How a step goes out: unnamed, prepared already under `name`, or to be prepared under
    /// `name` in the same round trip.
    private struct Sending {
        var name: String?
        var key: PGStatementCache.Key?
        var preparing = false
    }

    /// Runs SQL without parameters (transaction control, DDL).
    func execute(_ sql: String, _ context: @autoclosure () -> String = "Running a statement") throws(DepotError) {
        if pendingBegin != nil, sql == "COMMIT" || sql == "ROLLBACK" {
            // Nothing was sent: there is nothing to end.
            pendingBegin = nil
            return
        }
        _ = try run([Step(sql: sql, context: context())])
    }

    /// Runs a statement with binary parameters and binary results. With `prepare`, the
    /// statement goes through the connection's prepared-statement cache.
    @discardableResult
    func query(_ sql: String, _ params: [PGParam], prepare: Bool = false, _ context: @autoclosure () -> String) throws(DepotError) -> PGResult {
        try run([Step(sql: sql, params: params, prepare: prepare, context: context())])[0]
    }

    /// Runs `steps` in order in one round trip (after a pending BEGIN); returns their
    /// results. A failing step throws, and the steps after it did not run.
    ///
    /// A cached statement whose plan PostgreSQL refuses because the table under it changed
    /// its result columns (`cached plan must not change result type`, after a schema change
    /// the store has not taken in yet) empties the cache and runs the steps once more, when
    /// that cannot repeat anything: the connection was outside a transaction before them
    /// (a transaction they began is rolled back and begun again) and the failing step was
    /// in their first sync segment. Otherwise the error stands and the next use prepares
    /// the statement afresh.
    func run(_ steps: [Step]) throws(DepotError) -> [PGResult] {
        let handle = try liveHandle()
        if needsReset {
            // Not set up for the store (its schema, its timeout): nothing runs on it.
            lost = true
            throw DepotError(.io, "\(steps.first?.context ?? "Running a statement"): the PostgreSQL connection was lost and could not be set up again yet.")
        }
        try settle()
        for step in steps {
            for param in step.params where (param.bytes?.count ?? 0) > Self.fieldLimit {
                throw DepotError(.invalidValue, "\(step.context): a value of \(param.bytes?.count ?? 0) bytes is over PostgreSQL's limit of 1 GiB per field.")
            }
        }
        for step in steps where step.params.count > Self.parameterLimit {
            throw DepotError(.invalidPredicate, "\(step.context): \(step.params.count) values in one statement are more than PostgreSQL takes (\(Self.parameterLimit)); split the list.")
        }
        if let statementEpoch {
            let epoch = statementEpoch()
            if epoch != cachedEpoch {
                cachedEpoch = epoch
                statements.invalidateAll()
            }
        }
        let idle = PQtransactionStatus(handle) == PQTRANS_IDLE
        if idle { deallocateEvicted(handle) }
        let begin = pendingBegin, probe = probePending, failureBefore = lastFailure
        do {
            return try runOnce(steps, on: handle)
        } catch {
            guard let stale = staleStep else { throw error }
            staleStep = nil
            statements.invalidateAll()
            let firstSegment = steps.firstIndex(where: \.syncBefore).map { stale < $0 } ?? true
            guard idle, firstSegment, !lost, !isBroken else { throw error }
            if begin != nil {
                guard (try? execute("ROLLBACK", "Rolling back a statement planned for an old schema")) != nil, !isInTransaction else { throw error }
                pendingBegin = begin
            }
            probePending = probe
            lastFailure = failureBefore
            commitSent = false
            return try runOnce(steps, on: handle)
        }
    }

    /// Sends the DEALLOCATEs of the statements dropped from the cache, outside a
    /// transaction (one that failed would refuse them); a failure leaves the statement to
    /// die with the session.
    private func deallocateEvicted(_ handle: OpaquePointer) {
        guard !statements.evicted.isEmpty else { return }
        let names = statements.takeEvicted()
        roundTrips += 1
        if let result = PQexec(handle, names.map { "DEALLOCATE \($0)" }.joined(separator: "; ")) { PQclear(result) }
    }

    private func sending(_ step: Step) -> Sending {
        guard step.prepare, usesPreparedStatements else { return Sending() }
        let key = PGStatementCache.Key(sql: step.sql, types: step.params.map(\.oid))
        if let name = statements.name(of: key) { return Sending(name: name, key: key) }
        return Sending(name: statements.freshName(), key: key, preparing: true)
    }

    private func runOnce(_ steps: [Step], on handle: OpaquePointer) throws(DepotError) -> [PGResult] {
        staleStep = nil
        var all = steps
        if steps.contains(where: { $0.sql == "COMMIT" }) { commitSent = true }
        var probeAt: Int?
        if probePending {
            probePending = false
            all.insert(Step(sql: Self.schemaProbe, prepare: true, context: "Reading the schema version"), at: 0)
            probeAt = 0
            probesSent += 1
        }
        if let begin = pendingBegin {
            pendingBegin = nil
            all.insert(Step(sql: begin, context: "Beginning a transaction"), at: 0)
            probeAt = probeAt.map { $0 + 1 }
        }
        // Where the caller's steps begin in `all`.
        let offset = all.count - steps.count
        let plan = all.map(sending)
        roundTrips += 1
        if all.count == 1, !plan[0].preparing {
            guard let raw = send(all[0], as: plan[0].name, on: handle, wait: true) else { throw connectionLost(all[0].context) }
            let result = PGResult(raw)
            do throws(DepotError) {
                try check(result, all[0].context)
            } catch {
                if isStalePlan(plan[0]) { staleStep = 0 }
                throw error
            }
            return [result]
        }
        guard PQenterPipelineMode(handle) == 1 else { throw connectionLost(all[0].context) }
        var results: [PGResult] = []
        var failure: DepotError?
        var sent = 0
        for (step, how) in zip(all, plan) {
            if step.syncBefore, sent > 0, PQpipelineSync(handle) != 1 { break }
            if how.preparing, let name = how.name {
                let types = step.params.map(\.oid)
                guard PQsendPrepare(handle, name, step.sql, Int32(truncatingIfNeeded: types.count), types) == 1 else { break }
            }
            guard send(step, as: how.name, on: handle, wait: false) != nil else { break }
            sent += 1
        }
        if PQpipelineSync(handle) != 1 { failure = connectionLost(all[0].context) }
        for (index, (step, how)) in zip(all, plan).prefix(sent).enumerated() {
            if step.syncBefore, index > 0 {
                // The sync point's own result, after the steps before it.
                while let raw = PQgetResult(handle) {
                    let status = PQresultStatus(raw)
                    PQclear(raw)
                    if status == PGRES_PIPELINE_SYNC { break }
                }
            }
            if how.preparing, let name = how.name, let key = how.key {
                guard let raw = PQgetResult(handle) else {
                    failure = failure ?? connectionLost(step.context)
                    break
                }
                let prepared = PGResult(raw)
                while let extra = PQgetResult(handle) { PQclear(extra) }
                let status = PQresultStatus(raw)
                if status == PGRES_COMMAND_OK {
                    statements.insert(key, name: name)
                } else if status != PGRES_PIPELINE_ABORTED {
                    do throws(DepotError) {
                        try check(prepared, step.context)
                    } catch {
                        failure = failure ?? error
                    }
                }
            }
            guard let raw = PQgetResult(handle) else {
                failure = failure ?? connectionLost(step.context)
                break
            }
            let result = PGResult(raw)
            // Each statement's results end with a NULL.
            while let extra = PQgetResult(handle) { PQclear(extra) }
            let status = PQresultStatus(raw)
            if status == PGRES_PIPELINE_ABORTED { continue }
            do throws(DepotError) {
                try check(result, step.context)
            } catch {
                if isStalePlan(how), index >= offset, staleStep == nil { staleStep = index - offset }
                failure = failure ?? error
            }
            results.append(result)
        }
        // Up to the sync point, then out of pipeline mode.
        while let raw = PQgetResult(handle) {
            let status = PQresultStatus(raw)
            PQclear(raw)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        if PQexitPipelineMode(handle) != 1 {
            // Left in pipeline mode, the connection would refuse every later call: it is
            // made afresh before its next use (the server ends the transaction with the old
            // session), where the store also sets the session up again.
            markForReset()
            failure = failure ?? connectionLost(all[0].context)
        }
        // The schema check before any failure of the statements after it: a statement in
        // the old layout fails (a column of another type) because the schema moved.
        if let probeAt, let schemaCheck, results.count > probeAt, PQresultStatus(results[probeAt].handle) == PGRES_TUPLES_OK {
            let probed = results[probeAt]
            do throws(DepotError) {
                try schemaCheck(self, probed.rowCount > 0 ? probed.text(0, 0) : nil)
            } catch {
                // The store reloads the schema and runs the work again itself.
                staleStep = nil
                failure = error
            }
        }
        if let failure { throw failure }
        if sent < all.count || results.count < all.count { throw connectionLost(all[0].context) }
        // The caller's steps' results, without the BEGIN's.
        return Array(results.suffix(steps.count))
    }

    /// Whether the last failure is PostgreSQL refusing a statement prepared by an earlier
    /// call because its result columns changed under it (`cached plan must not change
    /// result type`, SQLSTATE 0A000; matched by the code and the statement, since the
    /// message's language follows the server's `lc_messages`).
    private func isStalePlan(_ how: Sending) -> Bool {
        lastFailure?.sqlState == "0A000" && how.name != nil && !how.preparing
    }

    /// Sends one statement in binary form; with `wait`, returns its result (else a marker
    /// that the send succeeded).
    private func send(_ step: Step, as name: String?, on handle: OpaquePointer, wait: Bool) -> OpaquePointer? {
        let params = step.params
        // All parameters' bytes in one buffer; pointers into it for libpq.
        var buffer: [UInt8] = []
        var offsets: [Int] = []
        var lengths: [Int32] = []
        for param in params {
            offsets.append(buffer.count)
            if let bytes = param.bytes {
                buffer.append(contentsOf: bytes)
                lengths.append(Int32(truncatingIfNeeded: bytes.count))
            } else {
                lengths.append(-1)
            }
        }
        if buffer.isEmpty { buffer.append(0) }
        let formats = [Int32](repeating: 1, count: params.count)
        let count = Int32(truncatingIfNeeded: params.count)
        return buffer.withUnsafeBufferPointer { storage -> OpaquePointer? in
            guard let start = storage.baseAddress else { return nil }
            let base = UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self)
            var values: [UnsafePointer<CChar>?] = []
            values.reserveCapacity(params.count)
            for (i, param) in params.enumerated() {
                values.append(param.bytes == nil ? nil : base + offsets[i])
            }
            let types = params.map(\.oid)
            if wait {
                if let name {
                    return PQexecPrepared(handle, name, count, values, lengths, formats, 1)
                }
                return PQexecParams(handle, step.sql, count, types, values, lengths, formats, 1)
            }
            let queued: Int32
            if let name {
                queued = PQsendQueryPrepared(handle, name, count, values, lengths, formats, 1)
            } else {
                queued = PQsendQueryParams(handle, step.sql, count, types, values, lengths, formats, 1)
            }
            return queued == 1 ? OpaquePointer(bitPattern: 1) : nil
        }
    }

    private func check(_ result: PGResult, _ context: String) throws(DepotError) {
        let status = PQresultStatus(result.handle)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY { return }
        let failure = Self.failure(of: result.handle, connection: handle, redaction: redaction)
        lastFailure = failure
        if failure.isSessionLost || isBroken { lost = true }
        throw failure.depotError(context)
    }

    func connectionLost(_ context: String) -> DepotError {
        let message = redaction.redact(handle.map { String(cString: PQerrorMessage($0)) } ?? "closed")
        lastFailure = PGFailure(sqlState: "08006", message: message, detail: nil, constraint: nil)
        lost = true
        return DepotError(.io, "\(context): the PostgreSQL connection failed: \(message.trimmingCharacters(in: .whitespacesAndNewlines))")
    }

    static func failure(of result: OpaquePointer, connection: OpaquePointer?, redaction: PGRedaction) -> PGFailure {
        func field(_ code: Character) -> String? { errorField(code, of: result) }
        // The texts, not the SQLSTATE or the constraint's name, which are matched against
        // Depot's own names (a password that happens to be part of one must not break that).
        let message = (field("M") ?? connection.map { String(cString: PQerrorMessage($0)) }).map(redaction.redact) ?? "unknown error"
        // The server sends a SQLSTATE with every error; one without is libpq's own, about the
        // connection (closed, unreadable, out of step), so a lost connection: 08006, `io`.
        // Not only when libpq already says the connection is bad: in a pipeline, the result
        // that reports the server closing the connection comes back while the connection's
        // status still reads OK (a write in flight in a failover failed as `backend` so).
        return PGFailure(
            sqlState: field("C") ?? "08006", message: message, detail: field("D").map(redaction.redact), constraint: field("n"))
    }
}
