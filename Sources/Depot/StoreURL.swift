public import DepotCore
import Foundation

/// A store location and its options, parsed from a URL string, so that an application
/// switches backends in configuration rather than in code.
///
/// | URL | store |
/// |---|---|
/// | `memory:` | a `MemoryStore` |
/// | `sqlite:///var/lib/app/app.sqlite` | an SQLite file (absolute path) |
/// | `sqlite:data/app.sqlite` | an SQLite file (relative to the working directory) |
/// | `sqlite::memory:` | a private SQLite database that lives as long as the store |
/// | `lmdb:///var/lib/app/db` | an LMDB environment in a directory |
/// | `postgres://app:secret@db.internal:5432/app` | a PostgreSQL database (also `postgresql://`) |
/// | `postgres:///app?host=/run/postgresql` | a PostgreSQL database over a Unix socket |
///
/// Options are query items, e.g. `sqlite:///srv/app.sqlite?durability=full&readers=8`.
/// `sqlite:` URLs take `adopt=true` to open a database another program made (see
/// `SQLiteStore.Options.adoptForeignDatabase`); without it such a file is refused untouched.
/// A path under a directory that does not exist is refused, naming the directory, unless
/// `createDirectories=true` (`sqlite:` and `lmdb:`) asks for the missing directories to be
/// created; an `lmdb:` store's own directory is created when missing either way.
/// Every option is typed and validated; an unknown scheme or option, or a bad value, is a
/// `DepotError` with code `DepotError.Code.invalidConfiguration` that names the problem
/// and lists what is accepted.
public struct StoreURL: Sendable, Hashable, CustomStringConvertible {
    /// The backends a URL can name.
    public enum Backend: String, Sendable, Hashable, CaseIterable {
        /// `memory:`, a `MemoryStore` that lives as long as the process.
        case memory
        /// `sqlite:`, a `SQLiteStore` in one database file.
        case sqlite
        /// `lmdb:`, an `LMDBStore` in a directory.
        case lmdb
        /// `postgres:` or `postgresql:`, a `PostgresStore` in a schema of a PostgreSQL
        /// database (with the `PostgreSQL` package trait).
        case postgres
    }

    /// One option a backend accepts.
    public struct OptionSpec: Sendable {
        /// The query item's name, as written in the URL (`durability`).
        public let name: String
        /// The values it accepts.
        public let kind: Kind
        /// What it does and its default, for messages and `--help` texts.
        public let help: String

        /// The values an option accepts.
        public enum Kind: Sendable {
            /// One of these words.
            case choice([String])
            /// A whole number in this range.
            case integer(ClosedRange<Int>)
            /// Bytes, with an optional unit: B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB in powers
            /// of 1000).
            case size
            /// A duration: a number with ms, s or m (seconds when no unit).
            case duration
            /// Any text without NUL.
            case text
        }
    }

    /// Options every backend accepts.
    public static let commonOptions: [OptionSpec] = [
        OptionSpec(name: "slowThreshold", kind: .duration, help: "transactions slower than this are logged at warning (default 500ms)"),
        OptionSpec(name: "metrics", kind: .choice(["false", "true"]), help: "true: report transactions, errors, pool waits and map growths through swift-metrics (default false)"),
        OptionSpec(name: "tracing", kind: .choice(["false", "true"]), help: "true: a swift-distributed-tracing span per read and write (default false)"),
        OptionSpec(name: "readOnly", kind: .choice(["false", "true"]), help: "true: open an existing store for reading only; nothing is created or changed, and writes are refused (default false)"),
    ]

    /// The options each backend accepts, besides ``commonOptions``.
    public static let backendOptions: [Backend: [OptionSpec]] = [
        .memory: [],
        .sqlite: [
            OptionSpec(name: "durability", kind: .choice(["normal", "full"]), help: "normal: WAL + synchronous=NORMAL (default); full: fsync at every commit"),
            OptionSpec(name: "readers", kind: .integer(1...64), help: "reader connections in the pool (default 4)"),
            OptionSpec(name: "busyTimeout", kind: .duration, help: "how long to wait for a lock held by another process (default 5s)"),
            OptionSpec(name: "adopt", kind: .choice(["false", "true"]), help: "true: open an SQLite database another program made, adding Depot's tables beside its own (default false: such a file is refused untouched)"),
            OptionSpec(name: "createDirectories", kind: .choice(["false", "true"]), help: "true: create the file's directory and its missing parents (default false: a missing directory is refused)"),
        ],
        .lmdb: [
            OptionSpec(name: "mapSize", kind: .size, help: "initial map size; the map grows when full (default 64MiB)"),
            OptionSpec(name: "maxReaders", kind: .integer(1...4096), help: "reader slots (default 126)"),
            OptionSpec(name: "durability", kind: .choice(["full", "relaxed", "unsafe"]), help: "full: durable commits (default); relaxed: MDB_NOMETASYNC, a system crash may lose the last commit; unsafe: MDB_NOSYNC, a system crash may lose recent commits and corrupt the store"),
            OptionSpec(name: "createDirectories", kind: .choice(["false", "true"]), help: "true: create the missing directories above the store's directory (default false: the store's directory is created only inside one that exists)"),
        ],
        .postgres: postgresDepotOptions + postgresClientOptions,
    ]

    /// Depot's own options of a `postgres:` URL.
    static let postgresDepotOptions: [OptionSpec] = [
        OptionSpec(name: "schema", kind: .text, help: "the schema of the store's tables, created when missing (default public)"),
        OptionSpec(name: "readers", kind: .integer(1...64), help: "reader connections in the pool (default 4)"),
        OptionSpec(name: "durability", kind: .choice(["full", "normal"]), help: "full: synchronous_commit=on (default); normal: synchronous_commit=off, a server crash may lose the last commits"),
        OptionSpec(name: "statementTimeout", kind: .duration, help: "statements running longer are cancelled with busy; 0 for no limit (default: the server's setting)"),
        OptionSpec(name: "retries", kind: .integer(0...1000), help: "how often a write aborted by a serialization failure runs again (default 20)"),
        OptionSpec(name: "consistency", kind: .choice(["read-your-writes", "eventual"]), help: "with several hosts, what a read on a standby sees: read-your-writes waits until the standby replayed the store's last write (default); eventual takes it as it is"),
        OptionSpec(name: "standbyWait", kind: .duration, help: "with several hosts, how long a read waits for a standby to replay the store's last write before the primary serves it (default 2s)"),
        OptionSpec(name: "preparedStatements", kind: .choice(["true", "false"]), help: "false: send every statement unprepared, for a connection pooler in transaction mode that does not track prepared statements (default true: each connection prepares the statements it sends again)"),
    ]

    /// The libpq connection parameters a `postgres:` URL passes on to the client.
    static let postgresClientOptions: [OptionSpec] = [
        OptionSpec(name: "host", kind: .text, help: "a host name, or the directory of a Unix socket; several, comma-separated, for a primary and its standbys"),
        OptionSpec(name: "port", kind: .text, help: "the server's port (default 5432); one per host, comma-separated, or one for all"),
        OptionSpec(name: "user", kind: .text, help: "the role to log in as"),
        OptionSpec(name: "password", kind: .text, help: "the role's password (or in the URL's user part, or ~/.pgpass)"),
        OptionSpec(name: "dbname", kind: .text, help: "the database"),
        OptionSpec(name: "sslmode", kind: .choice(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]), help: "TLS to the server (libpq's default: prefer)"),
        OptionSpec(name: "sslrootcert", kind: .text, help: "the CA certificates file for verify-ca and verify-full"),
        OptionSpec(name: "sslcert", kind: .text, help: "the client certificate file"),
        OptionSpec(name: "sslkey", kind: .text, help: "the client key file"),
        OptionSpec(name: "connect_timeout", kind: .integer(0...3600), help: "seconds to wait for a connection (default 10; 0 waits without a limit)"),
        OptionSpec(name: "application_name", kind: .text, help: "the name the server shows for the connections"),
        OptionSpec(name: "target_session_attrs", kind: .choice(["any", "read-write", "read-only", "primary", "standby", "prefer-standby"]), help: "which of several hosts to use"),
    ]

    /// Every option a backend accepts.
    public static func options(for backend: Backend) -> [OptionSpec] {
        (backendOptions[backend] ?? []) + commonOptions
    }

    /// The backend.
    public let backend: Backend
    /// The file or directory path; `nil` for `memory:`, `sqlite::memory:` and `postgres:`.
    public let path: String?
    /// A `postgres:` URL's server part, as written after the scheme's colon
    /// (`//user:password@host:port/database`); `nil` for the other backends.
    public private(set) var server: String?
    /// The options given, validated, by name.
    public private(set) var options: [String: String]

    /// The URL as text for messages and logs: ``unredacted`` with the password (in the
    /// user part or a `password` option) replaced by `***`, so interpolating a URL into a
    /// log line never writes a password.
    public var description: String { redacted }

    /// The URL as text that ``init(_:)`` parses back to this URL, password included: for
    /// handing the URL on (to another process, a configuration file), never for logs.
    /// Characters that would change its meaning (`%`, `?`, `&`, `=`, spaces, non-ASCII) are
    /// %-escaped.
    public var unredacted: String {
        var text = "\(backend.rawValue):"
        if let server {
            text += server
        } else if let path {
            let escaped = Self.escape(path, keeping: Self.pathCharacters)
            text += path.hasPrefix("/") ? "//\(escaped)" : escaped
        } else if backend == .sqlite {
            text += ":memory:"
        }
        if !options.isEmpty {
            text += "?" + options.keys.sorted().map {
                "\(Self.escape($0, keeping: Self.optionCharacters))=\(Self.escape(options[$0] ?? "", keeping: Self.optionCharacters))"
            }.joined(separator: "&")
        }
        return text
    }

    /// ``unredacted`` with a `postgres:` URL's password (what follows the user name in the
    /// user part, and the `password` option) replaced by `***`, for logs and messages; the
    /// same as ``description``.
    public var redacted: String {
        var copy = self
        if copy.options["password"] != nil { copy.options["password"] = "***" }
        if let server { copy.server = Self.redactingPasswords(in: server) }
        return copy.unredacted
    }

    private static let pathCharacters: CharacterSet = {
        var set = CharacterSet.urlPathAllowed
        set.remove(charactersIn: "%?#")
        return set
    }()

    private static let optionCharacters: CharacterSet = {
        var set = CharacterSet.urlQueryAllowed
        set.remove(charactersIn: "%&=+#?")
        return set
    }()

    private static func escape(_ text: String, keeping allowed: CharacterSet) -> String {
        text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    /// Parses and validates a store URL.
    ///
    /// - Throws: `DepotError.Code.invalidConfiguration` naming the problem.
    public init(_ string: String) throws(DepotError) {
        let text = string.trimmingCharacters(in: .whitespaces)
        guard let colon = text.firstIndex(of: ":") else {
            throw Self.problem("'\(Self.redactingPasswords(in: text))' has no scheme. Use one of: \(Self.schemes).")
        }
        let scheme = String(text[..<colon]).lowercased()
        guard let backend = Backend(rawValue: scheme == "postgresql" ? "postgres" : scheme) else {
            // Only the scheme, and only when it is one by its spelling: what comes after the
            // colon may be a password ("app:secret@db" without "postgres://").
            let looksLikeScheme = !scheme.isEmpty && scheme.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "+-.".unicodeScalars.contains($0) }
            throw Self.problem("Unknown store scheme\(looksLikeScheme ? " '\(scheme)'" : " (the text before the first ':' is not one)"). Use one of: \(Self.schemes).")
        }
        var rest = String(text[text.index(after: colon)...])
        var query: String?
        // libpq reads a postgres: URL's user part up to its '@', a '?' in the password
        // included: the query starts after it.
        var queryFrom = rest.startIndex
        if backend == .postgres, rest.hasPrefix("//") {
            let authority = rest[rest.index(rest.startIndex, offsetBy: 2)...]
            if let at = authority[..<(authority.firstIndex(of: "/") ?? authority.endIndex)].lastIndex(of: "@") { queryFrom = at }
        }
        if let mark = rest[queryFrom...].firstIndex(of: "?") {
            query = String(rest[rest.index(after: mark)...])
            rest = String(rest[..<mark])
        }
        self.backend = backend
        if backend == .postgres {
            guard rest.hasPrefix("//") else {
                throw Self.problem("'\(Self.redactingPasswords(in: text))' is not a PostgreSQL URL; write postgres://user@host:5432/database (or postgres:///database?host=/socket/dir).")
            }
            guard !rest.utf8.contains(0) else { throw Self.problem("'\(Self.redactingPasswords(in: text))' contains a NUL byte.") }
            self.server = rest
            self.path = nil
        } else {
            self.server = nil
            self.path = try Self.parsePath(rest, backend: backend, original: Self.redactingPasswords(in: text))
        }
        self.options = try Self.parseOptions(query, backend: backend)
    }

    static var schemes: String {
        "memory:, sqlite:///absolute/path.sqlite, sqlite:relative/path.sqlite, sqlite::memory:, lmdb:///absolute/dir, lmdb:relative/dir, postgres://user@host:5432/database"
    }

    static func problem(_ message: String) -> DepotError {
        DepotError(.invalidConfiguration, message)
    }

    private static func parsePath(_ raw: String, backend: Backend, original: String) throws(DepotError) -> String? {
        switch backend {
        case .postgres:
            return nil
        case .memory:
            guard raw.isEmpty else { throw problem("memory: takes no path; '\(original)' has one. Write memory:") }
            return nil
        case .sqlite where raw == ":memory:":
            return nil
        case .sqlite, .lmdb:
            var path = raw
            if path.hasPrefix("//") {
                path.removeFirst(2)
                guard path.hasPrefix("/") else {
                    throw problem("'\(original)' names a host; stores are local. Use \(backend.rawValue):///absolute/path or \(backend.rawValue):relative/path.")
                }
            }
            guard let decoded = path.removingPercentEncoding, !decoded.isEmpty else {
                throw problem("'\(original)' has no path (or a malformed %-escape). Use \(backend.rawValue):///absolute/path or \(backend.rawValue):relative/path.")
            }
            guard !decoded.utf8.contains(0) else { throw problem("The path in '\(original)' contains a NUL byte.") }
            return decoded
        }
    }

    private static func parseOptions(_ query: String?, backend: Backend) throws(DepotError) -> [String: String] {
        guard let query, !query.isEmpty else { return [:] }
        let specs = options(for: backend)
        let accepted = specs.map { "\($0.name) (\($0.help))" }.joined(separator: "; ")
        var result: [String: String] = [:]
        for item in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).removingPercentEncoding ?? String(parts[0])
            let value = parts.count > 1 ? (String(parts[1]).removingPercentEncoding ?? String(parts[1])) : ""
            guard let spec = specs.first(where: { $0.name == name }) else {
                throw problem("Unknown option '\(Self.redactingPasswords(in: name))' for \(backend.rawValue) stores. Accepted options: \(accepted).")
            }
            guard result[name] == nil else { throw problem("Option '\(Self.redactingPasswords(in: name))' is given twice.") }
            _ = try validate(value, for: spec, backend: backend)
            result[name] = value
        }
        return result
    }

    @discardableResult
    static func validate(_ value: String, for spec: OptionSpec, backend: Backend) throws(DepotError) -> Int? {
        switch spec.kind {
        case .choice(let choices):
            guard choices.contains(value) else {
                throw problem("Option \(spec.name)=\(value) is not valid for \(backend.rawValue); use one of: \(choices.joined(separator: ", ")).")
            }
            return nil
        case .integer(let range):
            guard let number = Int(value), range.contains(number) else {
                throw problem("Option \(spec.name)=\(value) must be a whole number from \(range.lowerBound) to \(range.upperBound).")
            }
            return number
        case .size:
            guard let bytes = parseSize(value), bytes > 0 else {
                throw problem("Option \(spec.name)=\(value) is not a size; write e.g. 65536, 64KiB, 512MiB or 1GiB.")
            }
            return bytes
        case .text:
            guard !value.isEmpty, !value.utf8.contains(0) else {
                throw problem("Option \(spec.name) needs a value without NUL bytes.")
            }
            return nil
        case .duration:
            guard let duration = parseDuration(value) else {
                throw problem("Option \(spec.name)=\(value) is not a duration; write e.g. 500ms, 5s or 2m.")
            }
            return Int(duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000)
        }
    }

    /// Parses `65536`, `64KiB`, `1GiB`, `10MB`.
    public static func parseSize(_ text: String) -> Int? {
        let units: [(String, Int)] = [
            ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10),
            ("TB", 1_000_000_000_000), ("GB", 1_000_000_000), ("MB", 1_000_000), ("KB", 1_000), ("B", 1),
        ]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let number = Int(text.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)), number >= 0 else { return nil }
            let (product, overflow) = number.multipliedReportingOverflow(by: factor)
            return overflow ? nil : product
        }
        return Int(text)
    }

    /// Parses `500ms`, `5s`, `2m`, or a number of seconds.
    public static func parseDuration(_ text: String) -> Duration? {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let number = Double(text.dropLast(suffix.count)), number >= 0, number.isFinite, number * factor < 86_400 else { return nil }
            return .milliseconds(Int64((number * factor * 1000).rounded()))
        }
        guard let seconds = Double(text), seconds >= 0, seconds < 86_400 else { return nil }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// The value of an option, or `nil` when it was not given.
    public subscript(option name: String) -> String? { options[name] }

    /// This URL with `value` for the option `name`, validated.
    ///
    /// - Throws: `DepotError.Code.invalidConfiguration` for an unknown option or bad value.
    public func setting(_ name: String, to value: String) throws(DepotError) -> StoreURL {
        guard let spec = Self.options(for: backend).first(where: { $0.name == name }) else {
            throw Self.problem("Unknown option '\(Self.redactingPasswords(in: name))' for \(backend.rawValue) stores. Accepted options: \(Self.options(for: backend).map(\.name).joined(separator: ", ")).")
        }
        try Self.validate(value, for: spec, backend: backend)
        var copy = self
        copy.options[name] = value
        return copy
    }
}
