import Depot
import DepotTesting
import Foundation
import InMemoryLogging
import InMemoryTracing
import Logging
import Testing
import Tracing

/// What Depot logs and traces for a call, on every backend (issue #40): OpenTelemetry's
/// database conventions on its spans, under the caller's span; a failure the caller caused
/// logged at `debug` and a failure of the store at `error`; a call's lines in the caller's
/// logger, bound to the controller or to the task.
@Suite("Call logging and spans on every backend")
struct CallTelemetryTests {
    static let postgres = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"]
    static let postgresRequired = ProcessInfo.processInfo.environment["DEPOT_REQUIRE_POSTGRES"] == "1"
    /// Stands for PostgreSQL when DEPOT_REQUIRE_POSTGRES=1 but no server was given: the
    /// test then fails instead of leaving a backend out.
    static let missingPostgres = "postgres-required-but-DEPOT_TEST_POSTGRES_URL-is-not-set"

    /// A URL per backend (`DIR` a fresh directory, `SCHEMA` a fresh PostgreSQL schema).
    static var templates: [String] {
        let server = postgres.map { ["\($0)&schema=SCHEMA"] } ?? (postgresRequired ? [missingPostgres] : [])
        return ["memory:", "sqlite:DIR/calls.sqlite", "lmdb:DIR/calls"] + server
    }

    struct Location {
        let url: String
        let directory: URL
        let schema: String
        /// The spans' expected `db.namespace`.
        let namespace: String?
    }

    func location(_ template: String) throws -> Location {
        if template == Self.missingPostgres {
            throw DepotError(.invalidConfiguration, "DEPOT_REQUIRE_POSTGRES=1 but DEPOT_TEST_POSTGRES_URL is not set: start a server with scripts/postgres-test-server.sh.")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-calls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let schema = "calls_\(UUID().uuidString.prefix(8).lowercased())"
        let url = template.replacingOccurrences(of: "DIR", with: directory.path).replacingOccurrences(of: "SCHEMA", with: schema)
        let namespace: String? =
            switch template {
            case "memory:": nil
            case _ where template.hasPrefix("sqlite:"): directory.path + "/calls.sqlite"
            case _ where template.hasPrefix("lmdb:"): directory.path + "/calls"
            default: "depot_test|\(schema)"
            }
        return Location(url: url, directory: directory, schema: schema, namespace: namespace)
    }

    func with(_ url: String, _ options: String) -> String { url + (url.contains("?") ? "&" : "?") + options }

    func string(_ span: FinishedInMemorySpan, _ key: String) -> String? {
        guard case .string(let value) = span.attributes[key]?.toSpanAttribute() else { return nil }
        return value
    }

    func int(_ span: FinishedInMemorySpan, _ key: String) -> Int64? {
        guard case .int64(let value) = span.attributes[key]?.toSpanAttribute() else { return nil }
        return value
    }

    /// A read, a write and a failed write: each a client span under the caller's span, named
    /// by its `db.query.summary`, with the conventions' attributes.
    @Test(arguments: templates)
    func spansFollowTheDatabaseConventions(template: String) async throws {
        let place = try location(template)
        defer { try? FileManager.default.removeItem(at: place.directory) }
        let tracer = InMemoryTracer()
        let store = try await openStore(url: with(place.url, "tracing=true"))
        let cats = Controller<Cat, CatRecord>(store: store)
        let system = switch store.backendName {
        case "memory": "other_sql"
        case "postgres", "postgresql": "postgresql"
        default: store.backendName
        }
        // Registered before the traced calls, so the spans are the calls' only.
        _ = try await cats.registeredEntity()
        try await withTracer(tracer) {
            try await withSpan("GET /cats") { _ in
                try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
                #expect(try await cats.fetchAll().count == 1)
                #expect(try await cats.fetchOne(id: 2) == nil)
                await #expect(throws: DepotError.self) { try await cats.insert(Cat(id: 1, name: "Again", weight: 1, age: 1)) }
            }
        }
        await store.close()
        let spans = tracer.finishedSpans
        let request = try #require(spans.first { $0.operationName == "GET /cats" })
        let calls = spans.filter { $0.spanID != request.spanID }
        #expect(calls.map(\.operationName) == ["save Cat", "fetch Cat", "fetch Cat", "insert Cat"], "\(calls.map(\.operationName))")
        for span in calls {
            #expect(span.parentSpanID == request.spanID, "\(span.operationName) is a child of the caller's span")
            #expect(span.traceID == request.traceID)
            #expect(span.kind == .client)
            #expect(string(span, "db.system.name") == system)
            #expect(string(span, "db.collection.name") == "Cat")
            #expect(string(span, "db.query.summary") == span.operationName)
            #expect(string(span, "db.namespace") == place.namespace, "\(span.attributes)")
            #expect(!(string(span, "db.namespace") ?? "").contains("password"))
        }
        let (save, fetch, lookup, insert) = (calls[0], calls[1], calls[2], calls[3])
        #expect(string(save, "db.operation.name") == "save")
        #expect(int(save, "db.response.returned_rows") == nil, "a write returns no rows")
        #expect(save.status == nil && save.errors.isEmpty && string(save, "error.type") == nil)
        #expect(string(fetch, "db.operation.name") == "fetch")
        #expect(int(fetch, "db.response.returned_rows") == 1)
        #expect(int(lookup, "db.response.returned_rows") == 0, "a lookup that finds nothing")
        #expect(string(insert, "db.operation.name") == "insert")
        #expect(string(insert, "error.type") == "duplicateKey")
        #expect(insert.status?.code == .error)
        #expect(insert.errors.count == 1)
    }

    /// A failure the caller caused is logged at `debug`, never at `error`; a call's lines go
    /// to the caller's logger, bound to the controller or to the task, with its metadata.
    @Test(arguments: templates)
    func aCallLogsToTheCallersLogger(template: String) async throws {
        let place = try location(template)
        defer { try? FileManager.default.removeItem(at: place.directory) }
        let storeHandler = InMemoryLogHandler()
        var storeLogger = Logger(label: "app.depot") { _ in storeHandler }
        storeLogger.logLevel = .trace
        let requestHandler = InMemoryLogHandler()
        var requestLogger = Logger(label: "app.request") { _ in requestHandler }
        requestLogger.logLevel = .debug
        requestLogger[metadataKey: "request.id"] = "r-42"

        let store = try await openStore(url: place.url, logger: storeLogger)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        storeHandler.clear()

        // Bound to the controller.
        let bound = cats.logging(to: requestLogger)
        await #expect(throws: DepotError.self) { try await bound.insert(Cat(id: 1, name: "Again", weight: 1, age: 1)) }
        let failure = try #require(requestHandler.entries.first { "\($0.message)".contains("failed") }, "\(requestHandler.entries)")
        #expect(failure.level == .debug, "a duplicate key is the caller's failure")
        #expect(failure.metadata["depot.code"] == .string("duplicateKey"))
        #expect(failure.metadata["request.id"] == .string("r-42"), "the line carries the caller's metadata")
        #expect(!storeHandler.entries.contains { "\($0.message)".contains("failed") }, "nor is it logged to the store's logger too")
        #expect(!requestHandler.entries.contains { $0.level >= .error })

        // Bound to the task with swift-log's withLogger, as a Hummingbird handler does.
        requestHandler.clear()
        try await withLogger(requestLogger) { _ in
            try await cats.save(Cat(id: 2, name: "Felix", weight: 3, age: 2))
            #expect(try await cats.fetchOne(id: 2) != nil)
            #expect(try await cats.count() == 2)
        }
        let lines = requestHandler.entries
        #expect(lines.contains { "\($0.message)" == "Depot write transaction" && $0.metadata["request.id"] == .string("r-42") }, "\(lines)")
        #expect(lines.filter { "\($0.message)" == "Depot read transaction" && $0.metadata["request.id"] == .string("r-42") }.count == 2, "\(lines)")
        #expect(!storeHandler.entries.contains { "\($0.message)".hasSuffix("transaction") }, "\(storeHandler.entries)")

        // Without either, the store's logger, with the same level for a caller's failure.
        storeHandler.clear()
        await #expect(throws: DepotError.self) { try await cats.insert(Cat(id: 1, name: "Again", weight: 1, age: 1)) }
        let unbound = try #require(storeHandler.entries.first { "\($0.message)".contains("failed") })
        #expect(unbound.level == .debug)
        #expect(unbound.metadata["request.id"] == nil)
        await store.close()
    }

    /// A failure of the store itself is logged at `error`: a file that is not an SQLite
    /// database.
    @Test func aStoreFailureIsLoggedAtError() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-calls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("not-a-database.sqlite")
        try Data(repeating: 0x5A, count: 8192).write(to: file)
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "app.depot") { _ in handler }
        logger.logLevel = .trace
        await #expect(throws: DepotError.self) { try await openStore(url: "sqlite://\(file.path)", logger: logger) }
        let failure = try #require(handler.entries.first { "\($0.message)".contains("failed") }, "\(handler.entries)")
        #expect(failure.level == .error)
        #expect(failure.metadata["depot.code"] == .string("storeCorrupted"))
    }

    /// The one place that decides a failure's level.
    @Test func levelsByCode() {
        #expect(StoreLog.level(for: DepotError.duplicateKey(entity: "Cat", key: .int(1))) == .debug)
        #expect(StoreLog.level(for: DepotError.notFound(entity: "Cat", key: .int(1))) == .debug)
        #expect(StoreLog.level(for: DepotError(.missingReference, "x")) == .debug)
        #expect(StoreLog.level(for: DepotError.readOnly("SQLite store at /x")) == .debug)
        #expect(StoreLog.level(for: DepotError(.permissionDenied, "the directory is not writable", nativeCode: 8)) == .error)
        #expect(StoreLog.level(for: DepotError(.io, "x")) == .error)
        #expect(StoreLog.level(for: DepotError(.storeFull, "x")) == .error)
        #expect(StoreLog.level(for: DepotError(.storeCorrupted, "x")) == .error)
        #expect(StoreLog.level(for: CancellationError()) == .debug, "the caller's own error")
    }
}
