import CoreMetrics
import NIOConcurrencyHelpers
public import Tracing

/// What a store reports through swift-metrics and swift-distributed-tracing.
///
/// Off unless a store is given one (the URL options `metrics=true` and `tracing=true`, or
/// ``StoreLog/telemetry``): a store without one pays a nil check per transaction. The
/// metrics, their dimensions and the spans' attributes are listed in
/// <doc:LoggingAndTracing>.
///
/// Transactions are counted as they end on the store's thread: a write that PostgreSQL
/// aborts for a conflict and runs again counts once per attempt (the failed ones with code
/// `busy`), and a write of a group commit counts when its own part succeeds.
public final class StoreTelemetry: Sendable {
    /// The `backend` dimension of every metric: "sqlite", "lmdb", "memory" or "postgres".
    public let backend: String
    /// Whether the store reports metrics.
    public let metrics: Bool
    /// Whether the store starts spans (when a tracer other than the no-op one is active).
    public let tracing: Bool
    /// The spans' `db.namespace`: the store's file (SQLite) or directory (LMDB), or
    /// `database|schema` (PostgreSQL); `nil` for a store that has none (memory stores).
    /// `openStore(url:)` sets it from the URL, never with a password.
    public let namespace: String?

    let reads: Counter
    let writes: Counter
    let readDuration: Timer
    let writeDuration: Timer
    let poolWaits: Counter
    let poolWaitDuration: Timer
    let mapGrowths: Counter
    let threadCheckpoints: Counter
    let writerCheckpoints: Counter
    let checkpointDuration: Timer
    private let errors = NIOLockedValueBox<[String: Counter]>([:])

    /// Creates the telemetry of one store.
    ///
    /// - Parameters:
    ///   - backend: The `backend` dimension ("sqlite", "lmdb", "memory", "postgres").
    ///   - metrics: Whether to report metrics.
    ///   - tracing: Whether to start spans.
    ///   - namespace: The spans' `db.namespace` (see ``namespace``).
    public init(backend: String, metrics: Bool = true, tracing: Bool = true, namespace: String? = nil) {
        self.backend = backend
        self.metrics = metrics
        self.tracing = tracing
        self.namespace = namespace
        reads = Counter(label: "depot_transactions_total", dimensions: [("backend", backend), ("kind", "read")])
        writes = Counter(label: "depot_transactions_total", dimensions: [("backend", backend), ("kind", "write")])
        readDuration = Timer(label: "depot_transaction_duration", dimensions: [("backend", backend), ("kind", "read")])
        writeDuration = Timer(label: "depot_transaction_duration", dimensions: [("backend", backend), ("kind", "write")])
        poolWaits = Counter(label: "depot_pool_waits_total", dimensions: [("backend", backend)])
        poolWaitDuration = Timer(label: "depot_pool_wait_duration", dimensions: [("backend", backend)])
        mapGrowths = Counter(label: "depot_lmdb_map_growths_total", dimensions: [("backend", backend)])
        threadCheckpoints = Counter(label: "depot_sqlite_checkpoints_total", dimensions: [("backend", backend), ("on", "thread")])
        writerCheckpoints = Counter(label: "depot_sqlite_checkpoints_total", dimensions: [("backend", backend), ("on", "writer")])
        checkpointDuration = Timer(label: "depot_sqlite_checkpoint_duration", dimensions: [("backend", backend)])
        systemName = switch backend {
        case "postgres": "postgresql"
        case "memory": "other_sql"
        default: backend
        }
    }

    /// The database name OpenTelemetry's conventions give the backend.
    let systemName: String

    @usableFromInline
    func transaction(_ kind: StaticString, nanoseconds: UInt64, error: (any Error)?) {
        guard metrics else { return }
        let isWrite = kind.withUTF8Buffer { $0.starts(with: "write".utf8) }
        (isWrite ? writes : reads).increment()
        (isWrite ? writeDuration : readDuration).recordNanoseconds(Int64(clamping: nanoseconds))
        if let error { failed(error) }
    }

    func failed(_ error: any Error) {
        let code = (error as? DepotError)?.code.name ?? "caller"
        let counter = errors.withLockedValue { counters in
            if let counter = counters[code] { return counter }
            let counter = Counter(label: "depot_errors_total", dimensions: [("backend", backend), ("code", code)])
            counters[code] = counter
            return counter
        }
        counter.increment()
    }

    /// A read found every reader connection busy and queued for one (counted at once).
    public func poolWaitBegan() {
        guard metrics else { return }
        poolWaits.increment()
    }

    /// A queued read got its reader connection after `nanoseconds`.
    public func poolWaited(nanoseconds: UInt64) {
        guard metrics else { return }
        poolWaitDuration.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    /// LMDB grew its map.
    public func mapGrew() {
        guard metrics else { return }
        mapGrowths.increment()
    }

    /// SQLite copied WAL pages into the database file, on the store's checkpointer thread
    /// or in a commit (`onWriter`), in `nanoseconds`.
    public func checkpointed(onWriter: Bool, nanoseconds: UInt64) {
        guard metrics else { return }
        (onWriter ? writerCheckpoints : threadCheckpoints).increment()
        checkpointDuration.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    /// The tracer spans go to, or `nil` when tracing is off or the active tracer (the
    /// bootstrapped one, or a `withTracer` scope's) is the no-op tracer: then no span is
    /// started at all, which is most of what a span costs (a task-local context, an async
    /// frame, the span itself). Looked up per call, so a tracer bootstrapped after the
    /// store opened is used.
    @usableFromInline
    var activeTracer: (any Tracer)? {
        guard tracing else { return nil }
        let tracer = InstrumentationSystem.tracer
        return tracer is NoOpTracer ? nil : tracer
    }

    /// Runs `operation` in a client span for `call` on `tracer`, a child of the calling
    /// task's span (this runs on the calling task, before the work is handed to the store's
    /// thread), with the attributes of OpenTelemetry's database conventions; `rows` says
    /// how many rows a read returned.
    @usableFromInline
    nonisolated(nonsending) func span<T>(
        _ call: DatabaseCall, on tracer: any Tracer, rows: (T) -> Int? = { _ in nil }, _ operation: () async throws -> T
    ) async throws -> T {
        let summary = call.summary
        let span = tracer.startSpan(summary, context: ServiceContext.current ?? .topLevel, ofKind: .client)
        defer { span.end() }
        span.updateAttributes { attributes in
            attributes[SpanKey.systemName] = systemName
            attributes[SpanKey.operationName] = call.operation
            if let collection = call.collection { attributes[SpanKey.collectionName] = collection }
            if let namespace { attributes[SpanKey.namespace] = namespace }
            attributes[SpanKey.querySummary] = summary
        }
        do {
            let result = try await ServiceContext.withValue(span.context) { try await operation() }
            if let count = rows(result) { span.attributes[SpanKey.returnedRows] = count }
            return result
        } catch {
            span.attributes[SpanKey.errorType] = (error as? DepotError)?.code.name ?? String(describing: type(of: error))
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }
}

/// OpenTelemetry's attribute keys for database client spans, spelled here once.
///
/// Not taken from swift-otel-semantic-conventions: `db.response.returned_rows` is still a
/// development attribute there, behind its `Experimental` trait, which requires an exact
/// minor version, too tight a pin for a library; and the package is two megabytes of
/// generated constants that every application would compile for six strings.
enum SpanKey {
    static let systemName = "db.system.name"
    static let operationName = "db.operation.name"
    static let collectionName = "db.collection.name"
    static let namespace = "db.namespace"
    static let querySummary = "db.query.summary"
    static let returnedRows = "db.response.returned_rows"
    static let errorType = "error.type"
}

/// What a span describes: the operation (`db.operation.name`) and the entity it works on
/// (`db.collection.name`), when it names one.
@usableFromInline
struct DatabaseCall: Sendable {
    @usableFromInline let operation: String
    @usableFromInline let collection: String?

    @inlinable
    init(_ operation: String, _ collection: String? = nil) {
        self.operation = operation
        self.collection = collection
    }

    /// A store's own read or write, which names no entity.
    @usableFromInline static let transaction = DatabaseCall("transaction")

    /// `db.query.summary`, which is also the span's name: `fetch Pet`, or `transaction`.
    var summary: String { collection.map { "\(operation) \($0)" } ?? operation }
}

extension Store {
    /// No telemetry: the default for a store that does not report any.
    public var telemetry: StoreTelemetry? { nil }
}
