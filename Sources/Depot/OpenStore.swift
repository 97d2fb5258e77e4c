public import DepotCore
import DepotLMDB
#if PostgreSQL
import DepotPostgres
#endif
import DepotSQLite
import Foundation
public import Logging
public import Configuration

extension StoreURL {
    /// Opens the store this URL names on the calling thread, blocking it until the store is
    /// ready.
    ///
    /// Opening reads and checks files, may wait for another process's lock (up to the busy
    /// timeout), may run a recovery, and connects to a server: blocking work. This form is
    /// for code that is not async (a command-line tool's synchronous `main`, a test
    /// fixture); async code uses ``open(logger:)``, which does the same on a thread of its
    /// own and never blocks Swift's cooperative pool.
    ///
    /// - Parameter logger: Where the store logs (nothing by default). The URL's
    ///   `slowThreshold` option sets when a transaction is logged as slow.
    /// - Throws: `DepotError` from the backend: `DepotError.Code.storeCorrupted` for a
    ///   file that is not a store of that kind, `DepotError.Code.permissionDenied` or
    ///   `DepotError.Code.io` when the path cannot be used. Its message never holds the
    ///   URL's password, also where it quotes what libpq said about the URL.
    public func openBlocking(logger: Logger? = nil) throws(DepotError) -> any Store {
        do {
            return try openUnredacted(logger: logger)
        } catch {
            // The boundary where what a backend or libpq said about this URL becomes the
            // caller's error: no password passes it.
            throw DepotError(error.code, redacting(error.message), nativeCode: error.nativeCode)
        }
    }

    private func openUnredacted(logger: Logger?) throws(DepotError) -> any Store {
        var log = logger.map { StoreLog(logger: $0) } ?? .disabled
        if let value = self[option: "slowThreshold"], let threshold = Self.parseDuration(value) { log.slowThreshold = threshold }
        let metrics = self[option: "metrics"] == "true"
        let tracing = self[option: "tracing"] == "true"
        if metrics || tracing {
            log.telemetry = StoreTelemetry(
                backend: backend == .postgres ? "postgres" : backend.rawValue, metrics: metrics, tracing: tracing, namespace: telemetryNamespace)
        }
        let readOnly = self[option: "readOnly"] == "true"
        switch backend {
        case .memory:
            return MemoryStore(log: log, readOnly: readOnly)
        case .sqlite:
            var options = SQLiteStore.Options()
            if let value = self[option: "durability"] { options.durability = value == "full" ? .full : .normal }
            if let value = self[option: "readers"], let readers = Int(value) { options.readers = readers }
            if let value = self[option: "busyTimeout"], let timeout = Self.parseDuration(value) { options.busyTimeout = timeout }
            if let value = self[option: "adopt"] { options.adoptForeignDatabase = value == "true" }
            options.createDirectories = self[option: "createDirectories"] == "true"
            options.readOnly = readOnly
            guard let path else { return try SQLiteStore.inMemory(options: options, log: log) }
            return try SQLiteStore(path: path, options: options, log: log)
        case .postgres:
            #if PostgreSQL
            var options = PostgresStore.Options()
            if let value = self[option: "schema"] { options.schema = value }
            if let value = self[option: "readers"], let readers = Int(value) { options.readers = readers }
            if let value = self[option: "durability"] { options.durability = value == "normal" ? .normal : .full }
            if let value = self[option: "statementTimeout"], let timeout = Self.parseDuration(value) { options.statementTimeout = timeout }
            if let value = self[option: "retries"], let retries = Int(value) { options.retries = retries }
            if let value = self[option: "consistency"] { options.consistency = value == "eventual" ? .eventual : .readYourWrites }
            if let value = self[option: "standbyWait"], let wait = Self.parseDuration(value) { options.standbyWait = wait }
            if let value = self[option: "preparedStatements"] { options.preparedStatements = value == "true" }
            options.readOnly = readOnly
            return try PostgresStore(url: postgresConnectionString, options: options, log: log)
            #else
            throw DepotError(.invalidConfiguration, StoreURL.postgresTraitMissing)
            #endif
        case .lmdb:
            var options = LMDBStore.Options()
            if let value = self[option: "mapSize"], let size = Self.parseSize(value) { options.mapSize = size }
            if let value = self[option: "maxReaders"], let readers = Int(value) { options.maxReaders = readers }
            if let value = self[option: "durability"] {
                options.durability = value == "relaxed" ? .relaxed : (value == "unsafe" ? .unsafe : .full)
            }
            options.createDirectories = self[option: "createDirectories"] == "true"
            options.readOnly = readOnly
            guard let path else {
                throw DepotError(.invalidConfiguration, "An lmdb: URL needs a directory: lmdb:///absolute/dir or lmdb:relative/dir.")
            }
            do {
                return try LMDBStore(directory: path, options: options, log: log)
            } catch let error as DepotError {
                throw error
            } catch {
                throw DepotError(.io, "Cannot open the LMDB store at \(path): \(error)")
            }
        }
    }
}

extension StoreURL {
    /// Why a `postgres:` URL cannot be opened by a build of Depot without its PostgreSQL
    /// backend, and how to add it.
    static let postgresTraitMissing = """
        This build of Depot has no PostgreSQL backend: turn on Depot's PostgreSQL trait in \
        the package that depends on it, .package(url: "…/Depot.git", from: "…", traits: ["PostgreSQL"]) \
        (with `swift build --traits PostgreSQL` when building Depot itself), or depend on \
        the DepotPostgres product and open a PostgresStore directly.
        """

    /// The store's name in its spans' `db.namespace`: the file (SQLite) or directory (LMDB)
    /// path; on PostgreSQL the database and the schema, `app|public` (OpenTelemetry's
    /// form, the database left out when the URL does not name it); `nil` for memory stores.
    /// Never holds a password: the database comes from the URL's path or `dbname` option.
    var telemetryNamespace: String? {
        switch backend {
        case .memory:
            return nil
        case .sqlite, .lmdb:
            return path
        case .postgres:
            let schema = self[option: "schema"] ?? "public"
            guard let database = postgresDatabase, !database.isEmpty else { return schema }
            return "\(database)|\(schema)"
        }
    }

    /// The database a `postgres:` URL names: its `dbname` option, or the path after the
    /// server part (`//user@host:5432/app`).
    var postgresDatabase: String? {
        if let name = self[option: "dbname"] { return name }
        guard var rest = server?[...] else { return nil }
        if rest.hasPrefix("//") {
            rest = rest.dropFirst(2)
            // The host part begins after the user part's last '@': a password may hold a
            // '/', and nothing of it may reach a span.
            if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
            guard let slash = rest.firstIndex(of: "/") else { return nil }
            rest = rest[rest.index(after: slash)...]
        }
        let database = String(rest)
        return database.removingPercentEncoding ?? database
    }

    /// The libpq connection URI of a `postgres:` URL: its server part and the client
    /// options, without Depot's own options (libpq refuses parameters it does not know).
    var postgresConnectionString: String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "%&=+#?")
        let client = Self.postgresClientOptions.map(\.name).filter { options[$0] != nil }
        let query = client.map { name in
            "\(name)=\(options[name]?.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
        }.joined(separator: "&")
        return "postgresql:" + (server ?? "//") + (query.isEmpty ? "" : "?" + query)
    }
}

/// Opens the store a URL string names, e.g. `sqlite:///var/lib/app/app.sqlite?durability=full`
/// (see ``StoreURL`` for every scheme and option), blocking the calling thread until it is
/// ready: for code that is not async. Async code uses `openStore(url:logger:)`.
///
/// - Throws: `DepotError.Code.invalidConfiguration` for a malformed URL or option, and
///   the backend's errors when opening fails.
public func openStoreBlocking(url: String, logger: Logger? = nil) throws(DepotError) -> any Store {
    try StoreURL(url).openBlocking(logger: logger)
}

extension StoreURL {
    /// Opens the store this URL names without blocking the caller's thread.
    ///
    /// Opening reads and checks files, may wait for another process's lock (up to the busy
    /// timeout) and may run a recovery; that is blocking work, so it runs on a thread of
    /// its own and the calling task is resumed when the store is ready. Code that is not
    /// async uses ``openBlocking(logger:)``.
    ///
    /// - Parameter logger: Where the store logs (nothing by default). The URL's
    ///   `slowThreshold` option sets when a transaction is logged as slow.
    /// - Throws: The same errors as ``openBlocking(logger:)``.
    public func open(logger: Logger? = nil) async throws(DepotError) -> any Store {
        let url = self
        return try await BlockingWork.run { () throws(DepotError) in try url.openBlocking(logger: logger) }
    }
}

/// Opens the store a URL string names without blocking the calling task's thread (see
/// `StoreURL.open(logger:)`).
///
/// ```swift
/// let store = try await openStore(url: "sqlite:///var/lib/app/app.sqlite")
/// ```
public func openStore(url: String, logger: Logger? = nil) async throws(DepotError) -> any Store {
    try await StoreURL(url).open(logger: logger)
}

/// Runs blocking work (opening files, waiting for locks) on a thread of its own, never on
/// Swift's cooperative pool, and resumes the caller with its result.
public enum BlockingWork {
    /// Set in the `threadDictionary` of the threads that run blocking work, so tests (and
    /// diagnostics) can tell them from the cooperative pool's.
    public static let marker = "depot.blockingWork"

    /// Runs `work` on a new thread and returns its result.
    public static func run<T: Sendable>(_ work: @escaping @Sendable () throws(DepotError) -> T) async throws(DepotError) -> T {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, DepotError>, Never>) in
            let thread = Thread {
                // Named from inside: on Linux a name set before start() is not applied.
                Thread.current.name = "depot.open"
                Thread.current.threadDictionary[BlockingWork.marker] = true
                continuation.resume(returning: Result { () throws(DepotError) -> T in try work() })
            }
            thread.start()
        }
        return try result.get()
    }
}

/// Opens the store named by swift-configuration's `depot.store.url` without blocking the
/// calling task's thread (see `openStore(url:logger:)`).
public func openStore(config: ConfigReader, logger: Logger? = nil) async throws(DepotError) -> any Store {
    guard let url = try StoreURL(config: config) else {
        throw DepotError(.invalidConfiguration, "No store is configured: set \(StoreURL.configurationKey) (environment variable \(StoreURL.environmentVariable)) to a store URL such as sqlite:///var/lib/app/app.sqlite.")
    }
    return try await url.open(logger: logger)
}
