import CoreMetrics
import Depot
import DepotTesting
import Foundation
import InMemoryTracing
import MetricsTestKit
import Testing
import Tracing

/// The process-wide metrics and tracing systems, bootstrapped once (both can be only once
/// per process); no other test reports through them.
enum TelemetrySystems {
    static let metrics: TestMetrics = {
        let metrics = TestMetrics()
        MetricsSystem.bootstrap(metrics)
        return metrics
    }()
    static let tracer: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()
}

@Suite("Metrics and tracing", .serialized)
struct TelemetryTests {
    func total(_ label: String, _ dimensions: [(String, String)]) -> Int64 {
        (try? TelemetrySystems.metrics.expectCounter(label, dimensions))?.totalValue ?? 0
    }

    @Test(arguments: [("sqlite::memory:", "sqlite"), ("memory:", "memory"), ("lmdb:DIR", "lmdb")])
    func storesReportTransactionsErrorsAndSpans(template: String, backend: String) async throws {
        let metrics = TelemetrySystems.metrics
        let tracer = TelemetrySystems.tracer
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-telemetry-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let base = template.replacingOccurrences(of: "DIR", with: directory.path)
        let writes: [(String, String)] = [("backend", backend), ("kind", "write")]
        let reads: [(String, String)] = [("backend", backend), ("kind", "read")]
        let duplicates: [(String, String)] = [("backend", backend), ("code", "duplicateKey")]
        let before = (total("depot_transactions_total", writes), total("depot_transactions_total", reads), total("depot_errors_total", duplicates))

        let store = try await openStore(url: base + "?metrics=true&tracing=true")
        let cats = Controller<Cat, CatRecord>(store: store)
        tracer.clearAll()
        try await withSpan("request") { _ in
            try await cats.save(Cat.workload(count: 10))
            #expect(try await cats.fetchAll().count == 10)
            #expect(try await cats.fetchOne(id: 1) != nil)
            await #expect(throws: DepotError.self) { try await cats.insert(Cat(id: 1, name: "again", weight: 1, age: 1)) }
        }
        #expect(total("depot_transactions_total", writes) - before.0 == 2, "the save and the refused insert")
        #expect(total("depot_transactions_total", reads) - before.1 >= 1)
        #expect(total("depot_errors_total", duplicates) - before.2 == 1)
        #expect(try metrics.expectTimer("depot_transaction_duration", writes).values.count >= 2)
        let spans = tracer.finishedSpans
        let request = try #require(spans.first { $0.operationName == "request" })
        let children = spans.filter { $0.parentSpanID == request.spanID }
        #expect(children.map(\.operationName).sorted() == ["fetch Cat", "fetch Cat", "insert Cat", "save Cat"], "\(children.map(\.operationName))")
        #expect(children.allSatisfy { $0.kind == .client })
        #expect(children.filter { !$0.errors.isEmpty }.count == 1, "the refused insert's span records its error")
        await store.close()

        // Off by default: a store opened without the options reports nothing.
        let quiet = (total("depot_transactions_total", writes), tracer.finishedSpans.count)
        let plain = try await openStore(url: template.replacingOccurrences(of: "DIR", with: directory.path + "-plain"))
        try await Controller<Cat, CatRecord>(store: plain).save(Cat.workload(count: 3))
        await plain.close()
        try? FileManager.default.removeItem(atPath: directory.path + "-plain")
        #expect(total("depot_transactions_total", writes) == quiet.0)
        #expect(tracer.finishedSpans.count == quiet.1)
    }

    /// Spans go to the tracer active at each call, so a no-op tracer costs no span at all and
    /// a tracer scoped with `withTracer` (or bootstrapped after the store opened) gets them.
    @Test func spansFollowTheActiveTracer() async throws {
        let global = TelemetrySystems.tracer
        let store = try await openStore(url: "memory:?tracing=true")
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 3))
        global.clearAll()
        try await withTracer(NoOpTracer()) {
            #expect(try await cats.fetchOne(id: 1) != nil)
            try await cats.save(Cat(id: 9, name: "Nine", weight: 1, age: 1))
        }
        #expect(global.finishedSpans.isEmpty, "nothing reaches the bootstrapped tracer while a no-op tracer is active")
        let scoped = InMemoryTracer()
        let count = try await withTracer(scoped) { () async throws -> Int in try await cats.fetchAll().count }
        #expect(count == 4)
        #expect(scoped.finishedSpans.map(\.operationName) == ["fetch Cat"])
        #expect(scoped.finishedSpans.first?.attributes["db.system.name"]?.toSpanAttribute() == .string("other_sql"))
        #expect(global.finishedSpans.isEmpty)
        _ = try await cats.count()
        #expect(global.finishedSpans.map(\.operationName) == ["count Cat"], "outside the scope, the bootstrapped tracer again")
        await store.close()
    }

    /// WAL checkpoints are counted where they ran, with their duration: on the store's
    /// checkpointer thread, or on the writer when that thread fell behind (a loaded
    /// machine), labelled so.
    @Test func sqliteCheckpointsAreCounted() async throws {
        let metrics = TelemetrySystems.metrics
        func checkpoints() -> Int64 {
            total("depot_sqlite_checkpoints_total", [("backend", "sqlite"), ("on", "thread")])
                + total("depot_sqlite_checkpoints_total", [("backend", "sqlite"), ("on", "writer")])
        }
        let before = checkpoints()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-telemetry-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await openStore(url: "sqlite:\(directory.path)/cats.sqlite?metrics=true")
        let cats = Controller<Cat, CatRecord>(store: store)
        // Single saves, each its own commit of a few pages, past the 1,000 pages that start
        // a checkpoint.
        for cat in Cat.workload(count: 800) { try await cats.save(cat) }
        for _ in 0..<3000 where checkpoints() == before {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(checkpoints() > before, "the checkpoint was counted")
        #expect(try metrics.expectTimer("depot_sqlite_checkpoint_duration", [("backend", "sqlite")]).values.isEmpty == false)
        await store.close()
    }

    /// Reads that find every reader connection busy are counted, with the time they waited.
    @Test func poolWaitsAreCounted() async throws {
        let metrics = TelemetrySystems.metrics
        let dimensions = [("backend", "sqlite")]
        let before = total("depot_pool_waits_total", dimensions)
        let store = try await openStore(url: "sqlite::memory:?metrics=true&readers=1")
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 100))
        // The one reader connection is held by a read until a second read has queued
        // behind it (the count rises when a read queues).
        let started = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let holding = Task { try await store.read { _ in
            started.signal()
            _ = release.wait(timeout: .now() + 300)
        } }
        try #require(await signalled(started, within: 300), "the holding read started")
        let waiting = Task { try await cats.fetchAll().count }
        _ = try await eventually { total("depot_pool_waits_total", dimensions) != before }
        #expect(total("depot_pool_waits_total", dimensions) > before, "a read queued behind the only reader connection")
        release.signal()
        try await holding.value
        #expect(try await waiting.value == 100)
        #expect(try metrics.expectTimer("depot_pool_wait_duration", dimensions).values.isEmpty == false)
        await store.close()
    }
}
