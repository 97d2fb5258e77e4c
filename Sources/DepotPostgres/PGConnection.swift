import CLibPQ
import DepotCore
import Foundation
import Logging

/// One parameter in PostgreSQL's binary format, with its type's OID (0 lets the server
/// infer it, for NULL).
struct PGParam {
    var oid: Oid
    var bytes: [UInt8]?

    static let int8Oid: Oid = 20
    static let boolOid: Oid = 16
    static let float8Oid: Oid = 701
    static let textOid: Oid = 25
    static let byteaOid: Oid = 17
    static let uuidOid: Oid = 2950

    static func int(_ v: Int64) -> PGParam {
        PGParam(oid: int8Oid, bytes: withUnsafeBytes(of: v.bigEndian) { Array($0) })
    }

    static func float(_ v: Double) -> PGParam {
        PGParam(oid: float8Oid, bytes: withUnsafeBytes(of: v.bitPattern.bigEndian) { Array($0) })
    }

    static func text(_ s: String) -> PGParam {
        PGParam(oid: textOid, bytes: PGText.encode(s))
    }

    static func value(_ value: Value) -> PGParam {
        switch value {
        case .null: PGParam(oid: 0, bytes: nil)
        case .int(let v): .int(v)
        case .bool(let v): PGParam(oid: boolOid, bytes: [v ? 1 : 0])
        case .double(let v): .float(v)
        case .date(let v): .float(v.timeIntervalSinceReferenceDate)
        case .string(let s): .text(s)
        case .data(let d): PGParam(oid: byteaOid, bytes: Array(d))
        case .uuid(let u): PGParam(oid: uuidOid, bytes: withUnsafeBytes(of: u.uuid) { Array($0) })
        }
    }
}

/// Depot strings in PostgreSQL `text`, which cannot hold U+0000: NUL is stored as the two
/// bytes 01 01 and U+0001 as 01 02, every other byte as itself. The code is prefix-free and
/// keeps the byte order (01 01 < 01 02 < 02 and above, and a shorter string still sorts
/// first), so `COLLATE "C"` comparisons, sorting, equality and prefixes on the stored text
/// are Depot's on the original strings. Strings without those two control characters (all
/// but a few) are stored as they are, readable with `psql`.
enum PGText {
    @inline(__always)
    static func encode(_ s: String) -> [UInt8] {
        var bytes = Array(s.utf8)
        guard bytes.contains(where: { $0 <= 1 }) else { return bytes }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 4)
        for byte in bytes {
            switch byte {
            case 0: out.append(1); out.append(1)
            case 1: out.append(1); out.append(2)
            default: out.append(byte)
            }
        }
        bytes = out
        return bytes
    }

    /// The string `bytes` encode; nil when they hold a 01 byte not followed by 01 or 02,
    /// which ``encode(_:)`` never writes (another program's text with a raw U+0001).
    static func decode(_ bytes: UnsafeRawBufferPointer) -> String? {
        guard bytes.contains(1) else { return String(decoding: bytes, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            let byte = bytes[i]
            if byte == 1 {
                guard i + 1 < bytes.count, bytes[i + 1] == 1 || bytes[i + 1] == 2 else { return nil }
                out.append(bytes[i + 1] == 1 ? 0 : 1)
                i += 2
            } else {
                out.append(byte)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A query's result. Cleared when released.
final class PGResult {
    let handle: OpaquePointer

    init(_ handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    var rowCount: Int { Int(PQntuples(handle)) }
    var columnCount: Int { Int(PQnfields(handle)) }

    @inline(__always)
    func isNull(_ row: Int, _ column: Int) -> Bool {
        PQgetisnull(handle, Int32(truncatingIfNeeded: row), Int32(truncatingIfNeeded: column)) == 1
    }

    @inline(__always)
    func bytes(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer {
        let r = Int32(truncatingIfNeeded: row)
        let c = Int32(truncatingIfNeeded: column)
        guard let value = PQgetvalue(handle, r, c) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: value, count: Int(PQgetlength(handle, r, c)))
    }

    /// The rows an INSERT, UPDATE or DELETE changed.
    var affectedRows: Int { PQcmdTuples(handle).flatMap { Int(String(cString: $0)) } ?? 0 }

    @inline(__always)
    func int64(_ row: Int, _ column: Int) -> Int64 {
        let b = bytes(row, column)
        guard b.count == 8 else { return 0 }
        return Int64(bigEndian: b.loadUnaligned(as: Int64.self))
    }
}

/// A PostgreSQL failure with its SQLSTATE, before it becomes a `DepotError`.
struct PGFailure: Error {
    let sqlState: String
    let message: String
    let detail: String?
    let constraint: String?

    /// Serialization failures and deadlocks: the transaction is retried from the start.
    var isRetryable: Bool { sqlState == "40001" || sqlState == "40P01" }

    /// The session is gone: a connection failure (class 08), or the server ending it
    /// (57P01 administrator shutdown, 57P02 crash shutdown).
    var isSessionLost: Bool { sqlState.hasPrefix("08") || sqlState == "57P01" || sqlState == "57P02" }

    func depotError(_ context: String) -> DepotError {
        let text = "\(context): PostgreSQL \(sqlState): \(message)\(detail.map { " (\($0))" } ?? "")"
        let code: DepotError.Code
        switch sqlState {
        case "23505": code = .duplicateKey
        case "23503": code = .missingReference
        case "23502", "23514": code = .invalidValue
        case "40001", "40P01", "55P03", "57014", "53300", "57P03": code = .busy
        case "53100": code = .storeFull
        case "42501", "28000", "28P01": code = .permissionDenied
        case "42P01", "42703", "0A000": code = .schemaMismatch
        // An index row over PostgreSQL's limit (a long value in a key, unique or indexed
        // column), a string the database's encoding cannot hold.
        case "54000", "22P05", "22021": code = .invalidValue
        default:
            if sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || sqlState.hasPrefix("58") {
                code = .io
            } else if sqlState.hasPrefix("22") {
                code = .invalidValue
            } else {
                code = .backend
            }
        }
        return DepotError(code, text)
    }
}

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
    private var prepared: Set<String> = []
    /// The last failure's SQLSTATE, for the write loop's retry decision.
    var lastFailure: PGFailure?
    /// Set when a statement found the session gone (the server restarted, failed over, or
    /// ended it); cleared by ``PostgresStore/healthy(_:)`` before each operation. The store
    /// runs a read again on the connection made afresh, and a write whose COMMIT was not
    /// sent (``commitSent``): the server rolled back what the lost session had begun.
    var lost = false
    /// Whether a COMMIT went out since the flag was last cleared: a write lost after that
    /// may have committed, so it is not run again.
    var commitSent = false
    /// The connection is to be made afresh before its next use (it was left in a state
    /// libpq refuses statements in).
    private var needsReset = false
    /// Keeps the connection string's password out of messages.
    let redaction: PGRedaction

    /// The store's schema-version check (see `PostgresStore+SchemaWatch.swift`): called
    /// with the version the probe read (nil when the store records none), in the same
    /// round trip as the transaction's first statement; throws when the schema moved.
    var schemaCheck: ((PGConnection, String?) throws(DepotError) -> Void)?
    /// Whether the next round trip carries the schema probe: set by ``begin(_:)`` and by
    /// ``probeNextStatement()``.
    private var probePending = false
    /// Set by the store's check when it found the schema moved: the work that met it runs
    /// again once the registry is reloaded.
    var schemaReloadNeeded = false
    static let schemaProbe = "SELECT value FROM depot_meta WHERE key = 'schema'"
    static let schemaProbeName = "depot_schema_probe"

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
    static func open(_ conninfo: String, settings: [String], logger: Logger) throws(DepotError) -> PGConnection {
        let redaction = PGRedaction(conninfo: conninfo)
        // The default first and the connection string expanded after it (expand_dbname):
        // libpq takes the last value of a keyword, so the string's own connect_timeout wins.
        let handle = "connect_timeout".withCString { timeoutKey in
            "dbname".withCString { dbnameKey in
                String(defaultConnectTimeout).withCString { timeout in
                    conninfo.withCString { dbname in
                        let keywords: [UnsafePointer<CChar>?] = [timeoutKey, dbnameKey, nil]
                        let values: [UnsafePointer<CChar>?] = [timeout, dbname, nil]
                        return PQconnectdbParams(keywords, values, 1)
                    }
                }
            }
        }
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
        prepared.removeAll()
        pendingBegin = nil
        probePending = false
        rollbackInFlight = false
    }

    func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    deinit { close() }

    private func liveHandle() throws(DepotError) -> OpaquePointer {
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
    private var pendingBegin: String?

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

    /// The most parameters one statement takes (the protocol counts them in 16 bits).
    static let parameterLimit = 65_535

    /// PostgreSQL's largest field, 1 GiB - 1 bytes.
    static let fieldLimit = (1 << 30) - 1

    /// One statement of a pipeline.
    struct Step {
        var sql: String
        var params: [PGParam] = []
        /// The prepared statement's name, for a statement prepared once per connection.
        var name: String?
        var context: String
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

    /// Runs a statement with binary parameters and binary results. With `name`, the
    /// statement is prepared once per connection under that name and reused.
    @discardableResult
    func query(_ sql: String, _ params: [PGParam], name: String? = nil, _ context: @autoclosure () -> String) throws(DepotError) -> PGResult {
        try run([Step(sql: sql, params: params, name: name, context: context())])[0]
    }

    /// Runs `steps` in order in one round trip (after a pending BEGIN); returns their
    /// results. A failing step throws, and the steps after it did not run.
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
        // Prepared before the BEGIN is taken: a failure here leaves the transaction still
        // to begin, not silently gone.
        for step in steps {
            if let name = step.name, !prepared.contains(name) {
                var types = step.params.map(\.oid)
                guard let result = PQprepare(handle, name, step.sql, Int32(truncatingIfNeeded: step.params.count), &types) else {
                    throw connectionLost(step.context)
                }
                try check(PGResult(result), step.context)
                prepared.insert(name)
            }
        }
        var all = steps
        if steps.contains(where: { $0.sql == "COMMIT" }) { commitSent = true }
        var probeAt: Int?
        if probePending {
            probePending = false
            if !prepared.contains(Self.schemaProbeName) {
                guard let result = PQprepare(handle, Self.schemaProbeName, Self.schemaProbe, 0, nil) else {
                    throw connectionLost("Preparing the schema probe")
                }
                try check(PGResult(result), "Preparing the schema probe")
                prepared.insert(Self.schemaProbeName)
            }
            all.insert(Step(sql: Self.schemaProbe, name: Self.schemaProbeName, context: "Reading the schema version"), at: 0)
            probeAt = 0
        }
        if let begin = pendingBegin {
            pendingBegin = nil
            all.insert(Step(sql: begin, context: "Beginning a transaction"), at: 0)
            probeAt = probeAt.map { $0 + 1 }
        }
        if all.count == 1 {
            guard let raw = send(all[0], on: handle, wait: true) else { throw connectionLost(all[0].context) }
            let result = PGResult(raw)
            try check(result, all[0].context)
            return [result]
        }
        guard PQenterPipelineMode(handle) == 1 else { throw connectionLost(all[0].context) }
        var results: [PGResult] = []
        var failure: DepotError?
        var sent = 0
        for step in all {
            guard send(step, on: handle, wait: false) != nil else { break }
            sent += 1
        }
        if PQpipelineSync(handle) != 1 { failure = connectionLost(all[0].context) }
        for step in all.prefix(sent) {
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
                try schemaCheck(self, probed.rowCount > 0 ? String(decoding: probed.bytes(0, 0), as: UTF8.self) : nil)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        if sent < all.count || results.count < all.count { throw connectionLost(all[0].context) }
        // The caller's steps' results, without the BEGIN's.
        return Array(results.suffix(steps.count))
    }

    /// Sends one statement in binary form; with `wait`, returns its result (else a marker
    /// that the send succeeded).
    private func send(_ step: Step, on handle: OpaquePointer, wait: Bool) -> OpaquePointer? {
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
                if let name = step.name {
                    return PQexecPrepared(handle, name, count, values, lengths, formats, 1)
                }
                return PQexecParams(handle, step.sql, count, types, values, lengths, formats, 1)
            }
            let queued: Int32
            if let name = step.name {
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

    private func connectionLost(_ context: String) -> DepotError {
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
        // libpq's own errors carry no SQLSTATE: one on a connection it found closed is a
        // lost connection (08006, so `io`), not an error of the server's.
        let lost = connection.map { PQstatus($0) != CONNECTION_OK } ?? true
        return PGFailure(
            sqlState: field("C") ?? (lost ? "08006" : "XX000"), message: message, detail: field("D").map(redaction.redact), constraint: field("n"))
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
    var backendPID: Int32 { handle.map { PQbackendPID($0) } ?? 0 }
}

/// One field of an error or notice result (`PQresultErrorField`: 'C' the SQLSTATE, 'M' the
/// message, 'D' the detail, 'n' the constraint, 'V' the severity), or `nil` when absent.
func errorField(_ code: Character, of result: OpaquePointer) -> String? {
    guard let ascii = code.asciiValue, let value = PQresultErrorField(result, Int32(ascii)) else { return nil }
    return String(cString: value)
}

/// Receives a connection's notices (libpq calls it on the thread running the statement) and
/// logs them: `WARNING` at `warning`, everything else the server sends this way (`NOTICE`,
/// `INFO`, `LOG`, `DEBUG`) at `debug`.
final class NoticeSink: Sendable {
    let logger: Logger
    let redaction: PGRedaction

    init(logger: Logger, redaction: PGRedaction) {
        self.logger = logger
        self.redaction = redaction
    }

    func receive(_ result: OpaquePointer) {
        func field(_ code: Character) -> String? { errorField(code, of: result) }
        // 'V': the severity, never localized.
        let severity = field("V") ?? field("S") ?? "NOTICE"
        let level: Logger.Level = severity == "WARNING" ? .warning : .debug
        guard logger.logLevel <= level else { return }
        let message = redaction.redact(field("M") ?? String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines))
        var metadata: Logger.Metadata = ["postgres.severity": .string(severity)]
        if let state = field("C") { metadata["postgres.sqlstate"] = .string(state) }
        logger.log(level: level, "PostgreSQL \(severity.lowercased()): \(message)", metadata: metadata)
    }
}
