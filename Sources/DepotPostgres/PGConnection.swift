import CLibPQ
import DepotCore
import Foundation
import Logging

/// One libpq connection, with the names of the statements it has prepared.
///
/// `@unchecked Sendable`: a connection is used by one thread at a time, which the store
/// guarantees (the writer on its lane, a reader only by the job that checked it out).
final class PGConnection: @unchecked Sendable {
    private(set) var handle: OpaquePointer?
    /// Where the connection's reads run: a serial queue of its own, whose thread libdispatch
    /// adds as needed, and not the global queue's one thread per core that Swift's tasks run
    /// on. A query blocks its thread for the whole round trip to the server; on the global
    /// queue, each blocked one held back every task behind it until libdispatch added a
    /// thread, about a second later.
    let queue = DispatchQueue(label: "depot.postgres.connection")
    /// The statements this connection has prepared (see ``PGStatementCache``).
    var statements = PGStatementCache()
    /// Whether statements marked for it go through ``statements``; off with the URL option
    /// `preparedStatements=false` (a pooler in transaction mode hands each transaction to
    /// any server session, where a statement prepared on another does not exist).
    var usesPreparedStatements = true
    /// The store's count of schema changes it made or took in: when it moved since the
    /// cache was last used, every cached statement is dropped (see ``PGStatementCache``).
    var statementEpoch: (() -> UInt64)?
    var cachedEpoch: UInt64 = 0
    /// Set by a run whose statement failed with a plan made for an old schema: the index
    /// of that statement among the caller's steps.
    var staleStep: Int?
    /// The exchanges with the server so far (a statement, a pipeline, a PREPARE, a ROLLBACK
    /// not waited for): what the tests count to show that a call costs one round trip.
    var roundTrips = 0
    /// The last failure's SQLSTATE, for the write loop's retry decision.
    var lastFailure: PGFailure?
    /// Set when a statement found the session gone (the server restarted, failed over, or
    /// ended it); cleared by `PostgresEngine.healthy(_:)` before each operation. The store
    /// runs a read again on the connection made afresh, and a write whose COMMIT was not
    /// sent (``commitSent``): the server rolled back what the lost session had begun.
    var lost = false
    /// Whether a COMMIT went out since the flag was last cleared: a write lost after that
    /// may have committed, so it is not run again.
    var commitSent = false
    /// The connection is to be made afresh before its next use (it was left in a state
    /// libpq refuses statements in).
    private(set) var needsReset = false
    /// Whether the server is a standby (`pg_is_in_recovery()`), as last asked: after
    /// opening and after each reconnect, and when a wait for its replay finds it promoted.
    var onStandby = false
    /// The write-ahead log position this standby is known to have replayed up to.
    var replayed: UInt64 = 0
    /// The `SET` statements that set the session up for its store, applied again after a
    /// reconnect.
    var sessionSettings: [String] = []
    /// Keeps the connection string's password out of messages.
    let redaction: PGRedaction

    /// The store's schema-version check (see `PostgresEngine+SchemaWatch.swift`): called
    /// with the version the probe read (nil when the store records none), in the same
    /// round trip as the transaction's first statement; throws when the schema moved.
    var schemaCheck: ((PGConnection, String?) throws(DepotError) -> Void)?
    /// Whether the next round trip carries the schema probe: set by ``begin(_:)`` and by
    /// ``probeNextStatement()``.
    var probePending = false
    /// The store's ``PostgresEngine/schemaNotices`` when the pending probe was asked for:
    /// what a probe that passes vouches for.
    var probeNotices: UInt64 = 0
    /// How many schema probes the connection has sent (for tests).
    var probesSent = 0
    /// Set by the store's check when it found the schema moved: the work that met it runs
    /// again once the registry is reloaded.
    var schemaReloadNeeded = false
    static let schemaProbe = "SELECT value FROM depot_meta WHERE key = 'schema'"

    /// Where the server's notices and warnings go: the store's logger. libpq's default
    /// prints them on the process's standard error, which a server's operators read as
    /// its own output (a `DROP TABLE IF EXISTS` of a migration printed a NOTICE there).
    private let notices: NoticeSink

    private init(handle: OpaquePointer, logger: Logger, redaction: PGRedaction) {
        self.handle = handle
        self.redaction = redaction
        self.notices = NoticeSink(logger: logger, redaction: redaction)
        // The receiver stays with the connection through PQreset; the sink lives as long
        // as the connection that points to it.
        PQsetNoticeReceiver(handle, { context, result in
            guard let context, let result else { return }
            Unmanaged<NoticeSink>.fromOpaque(context).takeUnretainedValue().receive(result)
        }, Unmanaged.passUnretained(notices).toOpaque())
    }

    /// How long libpq waits for a server to answer while connecting, in seconds, unless the
    /// connection string says otherwise (`connect_timeout`). libpq's own default is to wait
    /// indefinitely: on a network that drops packets, a reconnect would hold the writer or
    /// a reader (and every operation queued behind it) for as long as the partition lasts.
    static let defaultConnectTimeout = 10

    /// Connects (blocking: run it off the cooperative pool) and applies `settings`
    /// (`SET` statements) to the session. The server's notices go to `logger`.
    static func open(_ conninfo: String, settings: [String], logger: Logger, overrides: [(String, String)] = []) throws(DepotError) -> PGConnection {
        let redaction = PGRedaction(conninfo: conninfo)
        // The default first, the connection string expanded after it (expand_dbname), then
        // the store's overrides: libpq takes the last value of a keyword, so the string's
        // own connect_timeout wins, and an override (target_session_attrs) wins over both.
        let pairs = [("connect_timeout", String(defaultConnectTimeout)), ("dbname", conninfo)] + overrides
        let keys = pairs.map { strdup($0.0) }
        let values = pairs.map { strdup($0.1) }
        defer {
            for pointer in keys + values { free(pointer) }
        }
        let keywords = keys.map { UnsafePointer($0) } + [nil]
        let settingsValues = values.map { UnsafePointer($0) } + [nil]
        let handle = PQconnectdbParams(keywords, settingsValues, 1)
        guard let handle else {
            throw DepotError(.io, "libpq could not allocate a PostgreSQL connection.")
        }
        guard PQstatus(handle) == CONNECTION_OK else {
            let message = redaction.redact(String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines))
            PQfinish(handle)
            let code: DepotError.Code = message.contains("password") || message.contains("authentication") || message.contains("permission")
                ? .permissionDenied : (message.contains("too many") ? .busy : .io)
            throw DepotError(code, "Cannot connect to PostgreSQL: \(message)")
        }
        let connection = PGConnection(handle: handle, logger: logger, redaction: redaction)
        connection.sessionSettings = settings
        for setting in settings {
            do {
                try connection.execute(setting)
            } catch {
                connection.close()
                throw DepotError(.invalidConfiguration, "PostgreSQL refused the session setting '\(setting)': \(error.message)")
            }
        }
        return connection
    }

    /// After a reconnect the server has none of the prepared statements.
    func forgetPrepared() {
        statements.forgetAll()
        pendingBegin = nil
        probePending = false
        rollbackInFlight = false
    }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    deinit { close() }

    func liveHandle() throws(DepotError) -> OpaquePointer {
        guard let handle else { throw DepotError(.closed, "This PostgreSQL connection is closed.") }
        return handle
    }

    /// Whether a transaction is open (or begun and waiting for its first statement).
    var isInTransaction: Bool {
        guard let handle else { return false }
        if pendingBegin != nil { return true }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    var isInFailedTransaction: Bool {
        guard let handle else { return false }
        return PQtransactionStatus(handle) == PQTRANS_INERROR
    }

    var isBroken: Bool {
        guard let handle else { return true }
        return needsReset || PQstatus(handle) != CONNECTION_OK
    }

    /// Makes the connection afresh (blocking) with libpq's `PQreset`; true when it is usable.
    func reset() -> Bool {
        guard let handle else { return false }
        PQreset(handle)
        forgetPrepared()
        needsReset = false
        return PQstatus(handle) == CONNECTION_OK
    }

    /// Marks the connection to be made afresh before its next use.
    func markForReset() {
        needsReset = true
        lost = true
    }

    /// A BEGIN not sent yet: it goes out with the transaction's first statement, in one
    /// round trip (libpq's pipeline mode), so a transaction costs no round trip of its own.
    var pendingBegin: String?

    /// Begins a transaction with `sql` (`BEGIN ISOLATION LEVEL ...`), sent with the first
    /// statement; a transaction that runs none never reaches the server.
    func begin(_ sql: String) throws(DepotError) {
        try settle()
        guard !isInTransaction else { throw DepotError(.backend, "A PostgreSQL transaction is already open on this connection.") }
        pendingBegin = sql
        probePending = schemaCheck != nil
    }

    /// Sends the schema probe with the next statement, which runs in autocommit mode: a
    /// single-statement read checks the schema in its own round trip.
    func probeNextStatement() {
        probePending = schemaCheck != nil
    }

    /// A ROLLBACK sent by ``endWithoutWaiting()`` whose answer is still to be read.
    private var rollbackInFlight = false

    /// Ends a read-only transaction without waiting for the server: the ROLLBACK goes out
    /// now, so the server ends the transaction (and lets go of its snapshot) as soon as it
    /// reads it, and its answer is read before the connection's next statement
    /// (``settle()``). A read then costs the round trips of its own statements only; the
    /// ROLLBACK's overlaps with handing the result to the caller. Only for transactions that
    /// changed nothing: a write's end must be confirmed before its caller hears of it.
    func endWithoutWaiting() {
        if pendingBegin != nil {
            // Nothing was sent: there is nothing to end.
            pendingBegin = nil
            return
        }
        guard let handle, isInTransaction else { return }
        // In libpq's default blocking mode the query is flushed before this returns.
        roundTrips += 1
        if PQsendQuery(handle, "ROLLBACK") == 1 {
            rollbackInFlight = true
        } else {
            // Could not even send it (a broken connection, which the next checkout resets).
            try? execute("ROLLBACK")
        }
    }

    /// Reads the answer to a ROLLBACK sent by ``endWithoutWaiting()``. Called before every
    /// statement and at every checkout; a failed ROLLBACK means the connection is gone
    /// (a read-only transaction always ends), which ``isBroken`` then reports.
    ///
    /// - Throws: `io` when the connection failed while ending the transaction.
    func settle() throws(DepotError) {
        guard rollbackInFlight, let handle else { return }
        rollbackInFlight = false
        var failed = false
        while let raw = PQgetResult(handle) {
            if PQresultStatus(raw) != PGRES_COMMAND_OK { failed = true }
            PQclear(raw)
        }
        if failed || PQtransactionStatus(handle) != PQTRANS_IDLE {
            throw connectionLost("Ending a read transaction")
        }
    }

    /// Notifications received so far (LISTEN), after reading what the socket holds.
    func notifications() -> [(channel: String, payload: String, pid: Int32)] {
        guard let handle else { return [] }
        PQconsumeInput(handle)
        var out: [(String, String, Int32)] = []
        while let notify = PQnotifies(handle) {
            let channel = String(cString: notify.pointee.relname)
            let payload = notify.pointee.extra.map { String(cString: $0) } ?? ""
            out.append((channel, payload, notify.pointee.be_pid))
            PQfreemem(notify)
        }
        return out
    }

    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Asks the server whether it is a standby and how far it replayed; stores both.
    func readRecoveryState() throws(DepotError) {
        let result = try query("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text", [], "Asking whether the server is a standby")
        guard result.rowCount == 1 else { return }
        onStandby = result.bool(0, 0)
        replayed = result.isNull(0, 1) ? 0 : (Self.lsn(result.text(0, 1)) ?? 0)
    }

    /// A write-ahead log position as PostgreSQL prints it (`16/B374D848`), as a number.
    static func lsn(_ text: String) -> UInt64? {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let high = UInt64(parts[0], radix: 16), let low = UInt64(parts[1], radix: 16), high <= UInt64(UInt32.max), low <= UInt64(UInt32.max) else { return nil }
        return high << 32 | low
    }

    /// Finds out, without waiting, whether the server ended this idle session (a restart,
    /// a failover, a terminated backend): it sent its farewell and closed, which leaves the
    /// socket readable while no statement is out. ``isBroken`` then says so, and the store
    /// makes the connection afresh before sending anything on it.
    func noticeIdleLoss() {
        guard let handle, !rollbackInFlight, pendingBegin == nil, PQstatus(handle) == CONNECTION_OK else { return }
        // The farewell (an error message) and the end of the stream may come in one read
        // or in two: read while there is something to read, a few times at most.
        for _ in 0..<4 {
            var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 0) > 0 else { return }
            if PQconsumeInput(handle) == 0 || PQstatus(handle) != CONNECTION_OK {
                markForReset()
                return
            }
        }
    }
}
