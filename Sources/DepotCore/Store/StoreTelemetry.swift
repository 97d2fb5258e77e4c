import CoreMetrics
import NIOConcurrencyHelpers
public import Tracing

/// What a store reports through swift-metrics and swift-distributed-tracing. Off unless a
/// store is given one (the URL options `metrics=true` and `tracing=true`, or
/// ``StoreLog/telemetry``): a store without one pays a nil check per transaction.
///
/// Metrics (through whatever `MetricsSystem` the application bootstrapped, e.g.
/// swift-prometheus), every one with the dimension `backend`:
/// - `depot_transactions_total` (`kind`: read, write) and `depot_transaction_duration`
///   (a timer: the time a transaction ran on the store's thread);
/// - `depot_errors_total` (`code`: the ``DepotError/Code`` name of each failed transaction);
/// - `depot_pool_waits_total` and `depot_pool_wait_duration`: reads that found every reader
///   connection busy (SQLite, PostgreSQL) and how long they waited;
/// - `depot_lmdb_map_growths_total`: LMDB map resizes;
/// - `depot_sqlite_checkpoints_total` (`on`: thread, writer) and
///   `depot_sqlite_checkpoint_duration`: WAL checkpoints that copied pages, by the store's
///   checkpointer thread or by a commit (when the thread fell behind), and how long each
///   took.
///
/// Transactions are counted as they end on the store's thread: a write that PostgreSQL
/// aborts for a conflict and runs again counts once per attempt (the failed ones with code
/// `busy`), and a write of a group commit counts when its own part succeeds.
///
/// Tracing (through `InstrumentationSystem`'s tracer): a client span per read, write and
/// single-record read of a controller's async API or of ``Store/read(_:)``, ``Store/write(_:)`` and
/// ``Store/readRow(_:key:decode:)``, named `depot.read`, `depot.write` and `depot.readRow`,
/// a child of the calling task's span, with the attributes `db.system.name` and, on
/// failure, the error.
public final class StoreTelemetry: Sendable {
    public let backend: String
    public let metrics: Bool
    public let tracing: Bool

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

    /// - Parameters:
    ///   - backend: The `backend` dimension ("sqlite", "lmdb", "memory", "postgres").
    ///   - metrics: Whether to report metrics.
    ///   - tracing: Whether to start spans.
    public init(backend: String, metrics: Bool = true, tracing: Bool = true) {
        self.backend = backend
        self.metrics = metrics
        self.tracing = tracing
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

    /// Runs `operation` in a client span named `name` on `tracer`, a child of the task's
    /// current span.
    @usableFromInline
    func span<T>(_ name: String, on tracer: any Tracer, _ operation: () async throws -> T) async throws -> T {
        try await tracer.withSpan(name, ofKind: .client) { span in
            span.attributes["db.system.name"] = systemName
            return try await operation()
        }
    }
}

extension Store {
    /// No telemetry: the default for a store that does not report any.
    public var telemetry: StoreTelemetry? { nil }
}
