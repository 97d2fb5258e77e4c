import CSQLite
package import DepotCore
import Foundation

/// `SQLITE_TRANSIENT` is a macro over a cast that does not import: SQLite copies the bytes
/// before the bind call returns, so the Swift buffer may go away right after.
let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// One prepared statement. Finalized when released, so a statement dropped from the cache
/// (or a one-off one) never outlives its connection's use of it.
///
/// Its flags and the connection's state below are `@exclusivity(unchecked)`: a statement
/// and its connection are used by one thread at a time (see ``Connection``), and on that
/// thread no access to them overlaps another, so the runtime's check of each access (a
/// call and a thread-local lookup, on every lookup by key) could never find anything.
final class Statement {
    let handle: OpaquePointer
    /// Whether a caller is stepping it right now; a nested use of the same SQL (a fetch
    /// inside a fetch's body) then gets a statement of its own instead of resetting this one.
    @exclusivity(unchecked) var inUse = false
    let isCached: Bool
    /// Whether the next step is the first of an execution: the only step at which SQLite
    /// re-prepares a statement after a schema change (see `Connection.schemaWatch`).
    @exclusivity(unchecked) var atFirstStep = true
    /// Whether a step of this statement has been checked against the schema since it was
    /// prepared; a statement prepared after another process's schema change is compiled
    /// against the new schema without counting as re-prepared.
    @exclusivity(unchecked) var schemaChecked = false

    init(handle: OpaquePointer, isCached: Bool) {
        self.handle = handle
        self.isCached = isCached
    }

    deinit { sqlite3_finalize(handle) }
}

/// One SQLite connection and its statement cache.
///
/// `@unchecked Sendable` because the handle is opened in `NOMUTEX` mode: it is safe only
/// while one thread at a time uses it. The store guarantees that: the writer connection is
/// used only on the writer queue, and a reader connection only by the one job that has
/// checked it out of the pool (the pool's mutex orders the hand-overs).
package final class Connection: @unchecked Sendable {
    @exclusivity(unchecked) private(set) var handle: OpaquePointer?
    let path: String
    /// Statements of the fixed per-entity SQL, keyed by entity serial and statement kind.
    /// Indexed by key directly (keys are small: serial × 16 + kind), so a lookup is an
    /// array access rather than a hash.
    @exclusivity(unchecked) private var fixed: [Statement?] = []
    /// Statements of compiled queries, keyed by their SQL text.
    @exclusivity(unchecked) private var dynamic: [String: Statement] = [:]
    /// Beyond this many compiled queries the cache is emptied, so queries with varying
    /// `in` lists cannot grow it without bound.
    private static let dynamicLimit = 256
    /// Compiled statements by their request's shape (see `SQLSelectShape`),
    /// each with the table it was compiled for: a page request repeated with other values
    /// then skips building its SQL again, and finding its statement by the SQL's text, and
    /// reuses the reader over its columns. An entry is used only for the very table object
    /// it was compiled for, so a table registered again (another column list, another
    /// name) compiles afresh.
    @exclusivity(unchecked) private var shaped: [SelectShape: ShapedStatement] = [:]
    /// Keeps the trace hook's context alive as long as the connection (see `traceStatements`).
    var traceContext: TraceContext?
    /// Keeps the WAL hook's context alive as long as the connection (see
    /// `checkpoint(with:)`).
    var walHookContext: Checkpointer?
    /// The reader the last lookup by key on this connection used, with its statement and
    /// table: lookups by key come one per read on a reader connection, and the reader
    /// outlives the read, so it is made once per connection and table, not per read.
    @exclusivity(unchecked) var rowColumns: (statement: OpaquePointer, serial: Int, columns: StatementColumns)?
    /// Called after the first step of a statement that SQLite prepared or re-prepared since
    /// it was last checked: then the schema may have changed under this process (another
    /// process migrated an entity), and the store compares the file's schema cookie with
    /// the one its registry was verified at. Set on reader connections only; the writer
    /// checks the cookie when each write transaction begins.
    @exclusivity(unchecked) var schemaWatch: ((Connection) throws(DepotError) -> Void)?
    /// Set when the read on this connection found the file's schema cookie moved past the
    /// registry's: its transaction asks the runtime to reload the registry and run it again
    /// (see `SQLiteEngine+SchemaWatch.swift`). Cleared when the next read begins.
    @exclusivity(unchecked) var schemaMoved = false
    /// The WAL-index header as it was just before the read transaction this reader keeps
    /// open between reads began; `nil` when it keeps none (see ``KeptSnapshots``).
    @exclusivity(unchecked) var keptHeader: WALIndexHeader?

    private init(handle: OpaquePointer, path: String) {
        self.handle = handle
        self.path = path
    }

    /// Opens a connection. Does not read or write the file yet.
    package static func open(path: String, create: Bool, busyTimeout: Duration, readOnly: Bool = false) throws(DepotError) -> Connection {
        var db: OpaquePointer?
        var flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) }
            if let db { sqlite3_close_v2(db) }
            throw DepotError.sqlite(rc, message: message, context: "Opening the SQLite database at \(path)")
        }
        sqlite3_extended_result_codes(db, 1)
        let connection = Connection(handle: db, path: path)
        connection.setBusyTimeout(busyTimeout)
        do {
            try connection.registerAggregateFunctions()
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Whether closing this connection, when it is the last one, checkpoints a WAL database
    /// into its main file and removes the `-wal` and `-shm` files (SQLite's default).
    func setCheckpointOnClose(_ enabled: Bool) {
        guard let handle else { return }
        _ = depot_sqlite3_db_config_int(handle, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, enabled ? 0 : 1)
    }

    /// How long SQLite's busy handler waits for a lock, clamped to what SQLite takes.
    func setBusyTimeout(_ timeout: Duration) {
        guard let handle else { return }
        let (seconds, attoseconds) = timeout.components
        // Saturating: a caller's Duration may be far beyond what milliseconds in Int64 hold.
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        let whole = overflow ? (seconds < 0 ? Int64.min : Int64.max) : scaled
        let (sum, carry) = whole.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        let total = carry ? (whole < 0 ? Int64.min : Int64.max) : sum
        let milliseconds = max(0, min(Int64(Int32.max), total))
        sqlite3_busy_timeout(handle, Int32(milliseconds))
    }

    /// The first `count` bytes of the main database file (fewer when the file is shorter)
    /// and the file's size, read through the file SQLite itself opened.
    ///
    /// Not through a descriptor of our own: closing any descriptor of a file drops every
    /// POSIX lock this process holds on it, including the locks of other connections to
    /// the same database in this process (SQLite's "How To Corrupt An SQLite Database
    /// File", section 2.2). SQLite's unix VFS shares one lock state per file and defers
    /// closing descriptors while locks are held; reading through its own file object
    /// keeps that bookkeeping intact.
    func readMainFileHead(_ count: Int) throws(DepotError) -> (head: [UInt8], size: Int) {
        let db = try liveHandle()
        let (rc, main) = Self.mainFile(of: db)
        guard let (file, methods) = main, let fileSize = methods.xFileSize, let read = methods.xRead else {
            throw DepotError(.io, "Cannot reach the file of the SQLite database at \(path) (SQLite result \(rc)).", nativeCode: rc)
        }
        var size: sqlite3_int64 = 0
        let sizeCode = fileSize(file, &size)
        guard sizeCode == SQLITE_OK else { throw error(sizeCode, "Reading the size of \(path)") }
        if size == 0 {
            // The unix VFS reports a 1-byte file as empty (a workaround for an old OS X msdos
            // file system bug, SQLite ticket #3260), and SQLite would then write a database
            // over it: ask for the byte itself.
            var byte: UInt8 = 0
            if read(file, &byte, 1, 0) == SQLITE_OK { size = 1 }
        }
        let length = Int(max(0, min(sqlite3_int64(max(0, count)), size)))
        var head = [UInt8](repeating: 0, count: length)
        if length > 0 {
            let readCode = head.withUnsafeMutableBytes { read(file, $0.baseAddress, Int32(length), 0) }
            guard readCode == SQLITE_OK else { throw error(readCode, "Reading the header of \(path)") }
        }
        return (head, Int(size))
    }

    /// Flushes the main database file to the disk, as SQLite's own syncs do (SQLite's
    /// `xSync` of the file it opened, so every lock stays as SQLite keeps it; see
    /// ``readMainFileHead(_:)``). Returns SQLite's result code.
    func syncMainFile() -> Int32 {
        guard let db = handle else { return SQLITE_MISUSE }
        let (rc, main) = Self.mainFile(of: db)
        guard let (file, methods) = main, let sync = methods.xSync else { return rc == SQLITE_OK ? SQLITE_MISUSE : rc }
        return sync(file, SQLITE_SYNC_NORMAL)
    }

    /// The start of SQLite's mapping of the WAL index (the `-shm` file) for this connection,
    /// through the VFS's own `xShmMap`, so it is the mapping SQLite itself reads; valid until
    /// the connection closes. `nil` when the connection has none (not in WAL mode, or not
    /// yet mapped: nothing is created here).
    func walIndexRegion() -> UnsafeRawPointer? {
        guard let db = handle else { return nil }
        let (_, main) = Self.mainFile(of: db)
        guard let (file, methods) = main, methods.iVersion >= 2, let map = methods.xShmMap else { return nil }
        var region: UnsafeMutableRawPointer?
        guard map(file, 0, 32_768, 0, &region) == SQLITE_OK, let region else { return nil }
        return UnsafeRawPointer(region)
    }

    /// The main database file SQLite opened for `db`, and its methods; `nil` with SQLite's
    /// result code when it cannot be reached.
    private static func mainFile(of db: OpaquePointer) -> (Int32, (UnsafeMutablePointer<sqlite3_file>, sqlite3_io_methods)?) {
        var pointer: UnsafeMutablePointer<sqlite3_file>?
        let rc = sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &pointer)
        guard rc == SQLITE_OK, let file = pointer, let methods = file.pointee.pMethods else { return (rc, nil) }
        return (rc, (file, methods.pointee))
    }

    deinit { close() }

    /// Finalizes every statement, then closes the handle. The last connection to close
    /// checkpoints the WAL into the database file and removes it.
    package func close() {
        fixed.removeAll()
        dynamic.removeAll()
        shaped.removeAll()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    // MARK: Errors

    func error(_ code: Int32, _ context: @autoclosure () -> String) -> DepotError {
        let message = handle.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) }
        let error = DepotError.sqlite(code, message: message, context: context())
        lastError = error
        return error
    }

    /// The last error this connection reported. When SQLite rolls a transaction back by
    /// itself (after an I/O error or a full disk), the statements that follow are refused;
    /// their error names this cause so the caller still sees `io` or `storeFull`.
    /// Transactions clear it when they begin.
    @exclusivity(unchecked) var lastError: DepotError?

    private func liveHandle() throws(DepotError) -> OpaquePointer {
        guard let handle else { throw DepotError(.closed, "The SQLite store has been closed; open a new store to continue.") }
        return handle
    }

    // MARK: Statements

    /// Runs SQL without results (DDL, pragmas, transaction control) that is not worth caching.
    package func execute(_ sql: String) throws(DepotError) {
        let db = try liveHandle()
        let rc = sqlite3_exec(db, sql, nil, nil, nil)
        if rc != SQLITE_OK { throw error(rc, "Running \(sql.prefix(120))") }
    }

    func prepare(_ sql: String, cached: Bool) throws(DepotError) -> Statement {
        let db = try liveHandle()
        var statement: OpaquePointer?
        let flags = cached ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let rc = sqlite3_prepare_v3(db, sql, -1, flags, &statement, nil)
        guard rc == SQLITE_OK, let statement else {
            if let statement { sqlite3_finalize(statement) }
            throw error(rc, "Preparing \(sql.prefix(120))")
        }
        return Statement(handle: statement, isCached: cached)
    }

    /// A cached statement for fixed SQL, marked in use; give it back with ``release(_:)``.
    @inline(__always)
    func statement(key: Int, sql: () -> String) throws(DepotError) -> Statement {
        if key < fixed.count, let cached = fixed[key] {
            if !cached.inUse {
                cached.inUse = true
                return cached
            }
            let fresh = try prepare(sql(), cached: false)
            fresh.inUse = true
            return fresh
        }
        let made = try prepare(sql(), cached: true)
        if key >= fixed.count { fixed.append(contentsOf: repeatElement(nil, count: key + 1 - fixed.count)) }
        fixed[key] = made
        made.inUse = true
        return made
    }

    /// A cached statement for compiled SQL, marked in use; give it back with ``release(_:)``.
    func statement(sql: String) throws(DepotError) -> Statement {
        if let cached = dynamic[sql] {
            if !cached.inUse {
                cached.inUse = true
                return cached
            }
            let fresh = try prepare(sql, cached: false)
            fresh.inUse = true
            return fresh
        }
        if dynamic.count >= Self.dynamicLimit {
            // Statements in use stay alive through their caller's reference.
            dynamic.removeAll(keepingCapacity: true)
        }
        let made = try prepare(sql, cached: true)
        dynamic[sql] = made
        made.inUse = true
        return made
    }

    /// The statement of a request of `shape` on `table`, marked in use (give it back with
    /// ``release(_:)``), and a reader over its columns as `table`'s attributes: the one
    /// kept for the shape, else one prepared from `compile()`'s SQL and kept. A nested use
    /// of a shape whose statement is being stepped gets a statement of its own.
    func statement(
        shape: SelectShape, table: RegisteredEntity, compile: () throws(DepotError) -> String
    ) throws(DepotError) -> (statement: Statement, columns: StatementColumns) {
        if let kept = shaped[shape], kept.table === table {
            if !kept.statement.inUse {
                kept.statement.inUse = true
                return (kept.statement, kept.columns)
            }
            let fresh = try prepare(kept.sql, cached: false)
            fresh.inUse = true
            return (fresh, StatementColumns(fresh, table: table))
        }
        let sql = try compile()
        let made = try prepare(sql, cached: true)
        let kept = ShapedStatement(table: table, sql: sql, statement: made, columns: StatementColumns(made, table: table))
        // Bounded like the statements: shapes vary with `in` lists' lengths. A statement in
        // use stays alive through its caller's reference.
        if shaped.count >= Self.dynamicLimit { shaped.removeAll(keepingCapacity: true) }
        shaped[shape] = kept
        made.inUse = true
        return (made, kept.columns)
    }

    /// Resets a statement and drops its bindings (so a large bound value is not kept).
    @inline(__always)
    /// Resets a statement for its next use. Its bindings stay: every use binds each of
    /// its parameters before stepping, so clearing them would be a wasted call.
    func release(_ statement: Statement) {
        sqlite3_reset(statement.handle)
        statement.inUse = false
        statement.atFirstStep = true
    }

    /// Steps a statement: `true` for a row, `false` when done.
    @inline(__always)
    func step(_ statement: Statement, _ context: @autoclosure () -> String) throws(DepotError) -> Bool {
        let rc = sqlite3_step(statement.handle)
        if statement.atFirstStep {
            statement.atFirstStep = false
            if let watch = schemaWatch, rc == SQLITE_ROW || rc == SQLITE_DONE { try checkSchema(statement, watch) }
        }
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        throw error(rc, context())
    }

    @inline(never)
    private func checkSchema(_ statement: Statement, _ watch: (Connection) throws(DepotError) -> Void) throws(DepotError) {
        let reprepared = sqlite3_stmt_status(statement.handle, SQLITE_STMTSTATUS_REPREPARE, 1) != 0
        guard reprepared || !statement.schemaChecked else { return }
        statement.schemaChecked = true
        try watch(self)
    }

    /// The file's schema cookie (`PRAGMA schema_version`), which SQLite changes with every
    /// change to the schema, by any connection of any process. Read in the connection's
    /// current transaction, or in one of its own when there is none.
    func schemaCookie() throws(DepotError) -> Int64 {
        let statement = try statement(key: Self.schemaCookieKey) { "PRAGMA schema_version" }
        defer { release(statement) }
        // Stepped directly: this statement is the check itself, not a read to check.
        let rc = sqlite3_step(statement.handle)
        guard rc == SQLITE_ROW else { throw error(rc == SQLITE_DONE ? SQLITE_ERROR : rc, "Reading the schema version") }
        return sqlite3_column_int64(statement.handle, 0)
    }

    /// The statement-cache key of `schemaCookie()`, apart from the store's transaction
    /// keys (0–7) and the entities' (serial × 16 and up, serials starting at 1).
    static let schemaCookieKey = 8

    /// Runs a cached statement without bindings or results (BEGIN, COMMIT, ROLLBACK).
    func run(key: Int, _ sql: String) throws(DepotError) {
        let statement = try statement(key: key) { sql }
        defer { release(statement) }
        // Transaction control reads no table: nothing for the schema watch to check, and
        // a BEGIN it failed would leave the transaction open behind the error.
        statement.atFirstStep = false
        while try step(statement, sql) {}
    }

    /// The first column of the first row of a query, as text.
    package func scalarText(_ sql: String) throws(DepotError) -> String? {
        let statement = try prepare(sql, cached: false)
        guard try step(statement, sql) else { return nil }
        return sqlite3_column_text(statement.handle, 0).map { String(cString: $0) }
    }

    var changes: Int { handle.map { Int(sqlite3_changes64($0)) } ?? 0 }
    var isInTransaction: Bool { handle.map { sqlite3_get_autocommit($0) == 0 } ?? false }
}

// MARK: - Values in and out

/// The 8 bytes that stand for NaN in a REAL column. SQLite turns a bound NaN into NULL, so
/// NaN is stored as a BLOB instead: SQLite orders every BLOB after every number, which is
/// exactly Depot's "NaN is greater than +infinity", and two NaN blobs compare equal.
let nanBlob: [UInt8] = [0x7F, 0xF8, 0, 0, 0, 0, 0, 0]

/// What a bound parameter holds: a value, or raw UTF-8 bytes bound as TEXT (the exclusive
/// upper bound of a prefix range, which need not be valid UTF-8).
enum Binding {
    case value(Value)
    case textBytes([UInt8])
    case blobBytes([UInt8])
    case integer(Int64)
}

extension Connection {
    @inline(__always)
    func bind(_ value: Value, at index: Int32, in statement: Statement) throws(DepotError) {
        let s = statement.handle
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(s, index)
        case .int(let v): rc = sqlite3_bind_int64(s, index, v)
        case .bool(let v): rc = sqlite3_bind_int64(s, index, v ? 1 : 0)
        case .double(let v): rc = bindDouble(v, at: index, in: s)
        case .date(let v): rc = bindDouble(v.timeIntervalSinceReferenceDate, at: index, in: s)
        case .string(let v): rc = bindText(v, at: index, in: s)
        case .data(let v):
            rc = v.withUnsafeBytes { raw in
                // A zero-length bind with a nil pointer would store NULL, not an empty blob.
                guard let base = raw.baseAddress, raw.count > 0 else { return sqlite3_bind_zeroblob(s, index, 0) }
                return sqlite3_bind_blob64(s, index, base, UInt64(raw.count), sqliteTransient)
            }
        case .uuid(let v):
            rc = withUnsafeBytes(of: v.uuid) { raw in
                sqlite3_bind_blob64(s, index, raw.baseAddress, UInt64(raw.count), sqliteTransient)
            }
        }
        if rc != SQLITE_OK { throw error(rc, "Binding \(value.debugLiteral)") }
    }

    @inline(__always)
    private func bindDouble(_ v: Double, at index: Int32, in s: OpaquePointer) -> Int32 {
        if v.isNaN {
            return nanBlob.withUnsafeBytes { sqlite3_bind_blob64(s, index, $0.baseAddress, 8, sqliteTransient) }
        }
        return sqlite3_bind_double(s, index, v)
    }

    @inline(__always)
    private func bindText(_ v: String, at index: Int32, in s: OpaquePointer) -> Int32 {
        var v = v
        return v.withUTF8 { buffer in
            // The explicit length keeps embedded NUL bytes; a nil pointer would bind NULL.
            guard let base = buffer.baseAddress, buffer.count > 0 else {
                return sqlite3_bind_text(s, index, "", 0, sqliteTransient)
            }
            return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                sqlite3_bind_text64(s, index, $0, UInt64(buffer.count), sqliteTransient, UInt8(SQLITE_UTF8))
            }
        }
    }

    func bind(_ binding: Binding, at index: Int32, in statement: Statement) throws(DepotError) {
        let s = statement.handle
        let rc: Int32
        switch binding {
        case .value(let value):
            try bind(value, at: index, in: statement)
            return
        case .integer(let v):
            rc = sqlite3_bind_int64(s, index, v)
        case .textBytes(let bytes):
            rc = bytes.withUnsafeBytes { raw in
                guard let base = raw.baseAddress, raw.count > 0 else { return sqlite3_bind_text(s, index, "", 0, sqliteTransient) }
                return sqlite3_bind_text64(s, index, base.assumingMemoryBound(to: CChar.self), UInt64(raw.count), sqliteTransient, UInt8(SQLITE_UTF8))
            }
        case .blobBytes(let bytes):
            rc = bytes.withUnsafeBytes { raw in
                guard let base = raw.baseAddress, raw.count > 0 else { return sqlite3_bind_zeroblob(s, index, 0) }
                return sqlite3_bind_blob64(s, index, base, UInt64(raw.count), sqliteTransient)
            }
        }
        if rc != SQLITE_OK { throw error(rc, "Binding a query parameter") }
    }

    /// Decodes one column as a value of `type`, reading SQLite's own storage class first.
    @inline(__always)
    func column(_ index: Int32, of statement: Statement, as type: AttributeType) throws(DepotError) -> Value {
        let s = statement.handle
        let storage = sqlite3_column_type(s, index)
        if storage == SQLITE_NULL { return .null }
        switch type {
        case .int64:
            return .int(sqlite3_column_int64(s, index))
        case .bool:
            return .bool(sqlite3_column_int64(s, index) != 0)
        case .double:
            return storage == SQLITE_BLOB ? .double(.nan) : .double(sqlite3_column_double(s, index))
        case .date:
            let t = storage == SQLITE_BLOB ? Double.nan : sqlite3_column_double(s, index)
            return .date(Date(timeIntervalSinceReferenceDate: t))
        case .string:
            // column_text before column_bytes: the byte count is of the text form.
            guard let text = sqlite3_column_text(s, index) else { return .string("") }
            let count = Int(sqlite3_column_bytes(s, index))
            return .string(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case .data:
            guard let blob = sqlite3_column_blob(s, index) else { return .data(Data()) }
            return .data(Data(bytes: blob, count: Int(sqlite3_column_bytes(s, index))))
        case .uuid:
            let count = Int(sqlite3_column_bytes(s, index))
            guard count == 16, let blob = sqlite3_column_blob(s, index) else {
                throw DepotError(.storeCorrupted, "A UUID column holds \(count) bytes instead of 16; the database was changed outside Depot.")
            }
            var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(start: blob, count: 16)) }
            return .uuid(UUID(uuid: uuid))
        }
    }
}

/// A statement's request shape on one entity (see `SQLSelectShape`): which
/// statement (a select, a count, a delete) and the request's shape.
struct SelectShape: Hashable {
    enum Kind: Hashable {
        case select
        case count
        case delete(returningKeys: Bool)
    }

    let serial: Int
    let kind: Kind
    let tokens: [Int]
}

/// A statement kept for a request shape (see `Connection.statement(shape:table:compile:)`).
final class ShapedStatement {
    let table: RegisteredEntity
    let sql: String
    let statement: Statement
    let columns: StatementColumns

    init(table: RegisteredEntity, sql: String, statement: Statement, columns: StatementColumns) {
        self.table = table
        self.sql = sql
        self.statement = statement
        self.columns = columns
    }
}
