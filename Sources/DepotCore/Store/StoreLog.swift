import Dispatch
public import Logging
#if canImport(Glibc)
    import Glibc
#endif

/// How a store logs, through swift-log.
///
/// Levels: opening, closing and schema changes at `info`; each transaction at `debug`
/// (with its duration); SQL statements and LMDB operations at `trace`; an operation slower
/// than ``slowThreshold`` at `warning`. A failure is logged with its ``DepotError`` code at
/// the level ``level(for:)`` gives it, following swift-log's guidance for libraries: a
/// failure the caller caused and is told about (a duplicate key, a missing reference, a
/// record not found, a refused value or predicate, a write to a read-only store) at
/// `debug`, for the application to log as it sees fit; a failure of the store itself (I/O,
/// corruption, a full disk or map, a lost connection) at `error`. The default logger
/// discards everything and costs a level check per event.
///
/// A transaction run for a call that carries the caller's logger (a controller bound with
/// `Controller.logging(to:)`, or a task that bound swift-log's `Logger.current` with
/// `withLogger`, as a Hummingbird request handler does) logs its transaction, slowness and
/// failure lines to that logger instead, so they carry the caller's metadata (a request
/// id) and obey its level.
///
/// ```swift
/// let store = try SQLiteStore(path: path, log: StoreLog(logger: Logger(label: "app.depot"), slowThreshold: .milliseconds(100)))
/// ```
public struct StoreLog: Sendable {
    /// The store's own logger: opening, closing, schema changes, and each transaction a caller's
    /// logger does not take.
    public var logger: Logger
    /// Transactions that take longer are logged at `warning`. A negative threshold counts
    /// as zero (every transaction is slow); one past about 584 years, as never.
    public var slowThreshold: Duration {
        didSet { slowNanoseconds = Self.nanoseconds(slowThreshold) }
    }
    /// Where the store reports metrics and spans (see ``StoreTelemetry``); nil, the
    /// default, for nowhere.
    public var telemetry: StoreTelemetry?

    /// The threshold in nanoseconds, computed once so checking a transaction cannot
    /// overflow whatever the caller set.
    @usableFromInline var slowNanoseconds: UInt64

    /// A logger that discards everything.
    public static let disabled = StoreLog(logger: Logger(label: "depot", factory: { _ in SwiftLogNoOpLogHandler() }))

    /// A log to `logger`, warning about transactions slower than `slowThreshold`, with optional
    /// metrics and spans.
    public init(logger: Logger, slowThreshold: Duration = .milliseconds(500), telemetry: StoreTelemetry? = nil) {
        self.logger = logger
        self.telemetry = telemetry
        self.slowThreshold = slowThreshold
        self.slowNanoseconds = Self.nanoseconds(slowThreshold)
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds < 0) { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return .max }
        let (total, carry) = whole.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        return carry ? .max : total
    }

    /// Whether `trace` events are wanted; check before building an expensive message.
    @inlinable public var tracing: Bool { logger.logLevel <= .trace }

    /// Logs at `info` that a store opened, with `metadata` and the backend and location.
    public func opened(_ backend: String, at location: String, _ metadata: Logger.Metadata = [:]) {
        var all = metadata
        all["depot.backend"] = .string(backend)
        all["depot.location"] = .string(location)
        logger.info("Depot store opened", metadata: all)
    }

    /// Logs at `info` that a store closed.
    public func closed(_ backend: String, at location: String) {
        logger.info("Depot store closed", metadata: ["depot.backend": .string(backend), "depot.location": .string(location)])
    }

    /// Logs at `info` that an entity's storage was created.
    public func schemaCreated(_ entity: EntityDescription) {
        logger.info("Depot entity created", metadata: ["depot.entity": .string(entity.name), "depot.attributes": .stringConvertible(entity.attributes.count)])
    }

    /// Logs at `info` what a migration changed: attributes added, indexes added and dropped.
    public func schemaMigrated(_ migration: SchemaMigration) {
        logger.info(
            "Depot entity migrated",
            metadata: [
                "depot.entity": .string(migration.declared.name),
                "depot.added": .array(migration.addedAttributes.map { .string($0.name) }),
                "depot.indexesAdded": .array(migration.addedIndexes.map { .string($0.name) }),
                "depot.indexesDropped": .array(migration.droppedIndexes.map { .string($0.name) }),
                "depot.compositeIndexesAdded": .array(migration.addedCompositeIndexes.map { .string($0.summary) }),
                "depot.compositeIndexesDropped": .array(migration.droppedCompositeIndexes.map { .string($0.summary) }),
            ])
    }

    /// Logs at `info` that building `index` over an entity's existing records starts, so
    /// that a long start-up says what it is waiting for.
    public func indexBuildStarted(_ index: IndexDescription, of entity: String) {
        logger.info("Depot index build started", metadata: ["depot.entity": .string(entity), "depot.index": .string(index.summary)])
    }

    /// Logs at `info` that `index` was built over `records` existing records.
    public func indexBuilt(_ index: IndexDescription, of entity: String, records: Int) {
        logger.info(
            "Depot index built",
            metadata: ["depot.entity": .string(entity), "depot.index": .string(index.summary), "depot.records": .stringConvertible(records)])
    }

    /// Logs `message` at `trace` (SQL statements, LMDB transaction events).
    public func trace(_ message: @autoclosure () -> Logger.Message, _ metadata: @autoclosure () -> Logger.Metadata? = nil) {
        logger.trace(message(), metadata: metadata())
    }

    /// The level a failure is logged at: the one place that decides it, by the
    /// ``DepotError/Code``.
    ///
    /// `debug` for what the caller caused and is told about by the error it gets (which it
    /// may log at a level of its own choosing): ``DepotError/Code/notFound``,
    /// ``DepotError/Code/duplicateKey``, ``DepotError/Code/missingReference``,
    /// ``DepotError/Code/deleteDenied``, ``DepotError/Code/invalidPredicate``,
    /// ``DepotError/Code/invalidValue``, ``DepotError/Code/conversionFailed``,
    /// ``DepotError/Code/invalidSchema``, ``DepotError/Code/schemaMismatch``,
    /// ``DepotError/Code/invalidConfiguration``, ``DepotError/Code/closed``, a write refused
    /// by a store opened read-only (``DepotError/readOnly(_:)``), and an error the caller's
    /// own closure threw. `error` for failures of the store itself, which the caller cannot
    /// fix by changing its call: ``DepotError/Code/io``, ``DepotError/Code/storeCorrupted``,
    /// ``DepotError/Code/storeFull``, ``DepotError/Code/busy``,
    /// ``DepotError/Code/permissionDenied`` from the operating system or the server, and
    /// ``DepotError/Code/backend`` (a failure that fits no other code); a code this version
    /// does not know is logged at `error` too.
    public static func level(for error: any Error) -> Logger.Level {
        guard let depot = error as? DepotError else { return .debug }
        switch depot.code {
        case .notFound, .duplicateKey, .missingReference, .deleteDenied, .invalidPredicate, .invalidValue, .conversionFailed,
            .invalidSchema, .schemaMismatch, .invalidConfiguration, .closed:
            return .debug
        case .permissionDenied:
            return depot.isReadOnlyRefusal ? .debug : .error
        default:
            return .error
        }
    }

    /// Logs a failure with its code, at the level ``level(for:)`` gives it.
    public func failed(_ what: String, _ error: any Error) {
        failed(what, error, to: logger)
    }

    @usableFromInline
    func failed(_ what: String, _ error: any Error, to logger: Logger) {
        let level = Self.level(for: error)
        guard logger.logLevel <= level else { return }
        if let depot = error as? DepotError {
            var metadata: Logger.Metadata = ["depot.code": .string(depot.code.name), "depot.message": .string(depot.message)]
            if let native = depot.nativeCode { metadata["depot.nativeCode"] = .stringConvertible(native) }
            logger.log(level: level, "Depot \(what) failed", metadata: metadata)
        } else {
            // Caller errors thrown from an operation are the caller's own: a rollback, not a failure of the store.
            logger.log(level: level, "Depot \(what) rolled back by the caller's error", metadata: ["depot.error": .string("\(error)")])
        }
    }

    /// Runs `body`, logging its failure (and rethrowing it).
    @inlinable
    public func loggingFailure<T>(_ what: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            failed(what, error)
            throw error
        }
    }

    /// Runs one transaction, logging it at `debug`, at `warning` when slow, and its failure
    /// at the level ``level(for:)`` gives it: to the logger of the call it runs for when
    /// `body` adopted one, else to ``logger``.
    @inlinable
    public func transaction<T>(_ kind: StaticString, _ body: () throws -> T) throws -> T {
        // The level is read once per transaction: `Logger.logLevel` copies the handler out
        // of the logger's storage under an exclusivity check and asks it through its
        // protocol, which is not free on a path as short as a lookup by key.
        let debugging = logger.logLevel <= .debug
        let coarse = coarseClockSuffices(debugging: debugging)
        let scope = CallLogger.Scope.begin()
        defer { scope.end() }
        let start = Self.now(coarse: coarse)
        do {
            let result = try body()
            // One clock read serves the log and the metrics.
            let elapsed = Self.now(coarse: coarse) &- start
            if let caller = scope.adopted {
                finished(kind, elapsed: elapsed, debugging: caller.logLevel <= .debug, to: caller)
            } else {
                finished(kind, elapsed: elapsed, debugging: debugging, to: logger)
            }
            if let telemetry { telemetry.transaction(kind, nanoseconds: elapsed, error: nil) }
            return result
        } catch {
            failed("\(kind) transaction", error, to: scope.adopted ?? logger)
            if let telemetry { telemetry.transaction(kind, nanoseconds: Self.now(coarse: coarse) &- start, error: error) }
            throw error
        }
    }

    /// Whether the coarse clock is precise enough for this transaction: nothing records its
    /// duration (no telemetry, no `debug` log) and the slow threshold is many ticks of it.
    /// A precise clock read is a noticeable share of a lookup by key (on a virtual machine
    /// especially); the coarse one reads a value the kernel keeps.
    @usableFromInline func coarseClockSuffices(debugging: Bool) -> Bool {
        telemetry == nil && slowNanoseconds >= Self.coarseEnough && !debugging
    }

    /// Thresholds from ten ticks of the coarse clock up are measured with it.
    @usableFromInline static let coarseEnough: UInt64 = {
        #if canImport(Glibc)
            var resolution = timespec()
            guard clock_getres(CLOCK_MONOTONIC_COARSE, &resolution) == 0, resolution.tv_sec >= 0, resolution.tv_nsec >= 0,
                resolution.tv_sec < 1
            else { return .max }
            return UInt64(resolution.tv_nsec) &* 10
        #else
            return .max
        #endif
    }()

    /// Monotonic nanoseconds: from the coarse clock when `coarse` (Linux; elsewhere the
    /// precise one).
    @usableFromInline static func now(coarse: Bool) -> UInt64 {
        #if canImport(Glibc)
            if coarse {
                var time = timespec()
                if clock_gettime(CLOCK_MONOTONIC_COARSE, &time) == 0 {
                    return UInt64(truncatingIfNeeded: time.tv_sec) &* 1_000_000_000 &+ UInt64(truncatingIfNeeded: time.tv_nsec)
                }
            }
        #endif
        return DispatchTime.now().uptimeNanoseconds
    }

    @usableFromInline
    func finished(_ kind: StaticString, elapsed: UInt64, debugging: Bool, to logger: Logger) {
        if elapsed > slowNanoseconds {
            logger.warning("Depot \(kind) transaction was slow", metadata: ["depot.milliseconds": .stringConvertible(Double(elapsed) / 1_000_000)])
        } else if debugging {
            logger.debug("Depot \(kind) transaction", metadata: ["depot.microseconds": .stringConvertible(elapsed / 1_000)])
        }
    }
}
