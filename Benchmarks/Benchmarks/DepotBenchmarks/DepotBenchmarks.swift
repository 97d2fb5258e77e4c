// Regression tracking for Depot's workloads (docs/benchmarks/README.md) at a smaller N, on every
// backend: wall clock, throughput and malloc counts. depot-bench is the comparison with the
// raw engines; this suite is for spotting a change that makes Depot slower or hungrier.
import Benchmark
import Depot
import DepotTesting
import Foundation

let records = 10_000
let cats = Cat.workload(count: records)
let lookups: [Int64] = {
    var generator = SplitMix64(seed: 2024)
    return (0..<records).map { _ in Int64(generator.next() % UInt64(records)) + 1 }
}()

/// One populated store per backend, opened on first use and shared by the read benchmarks.
actor Fixtures {
    private var controllers: [String: Controller<Cat, CatRecord>] = [:]
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-benchmarks-\(UUID().uuidString)")

    func populated(_ backend: String) async throws -> Controller<Cat, CatRecord> {
        if let existing = controllers[backend] { return existing }
        let controller = Controller<Cat, CatRecord>(store: try openStoreBlocking(url: url(backend, "populated")))
        try await controller.save(cats)
        controllers[backend] = controller
        return controller
    }

    func url(_ backend: String, _ name: String) -> String {
        // A store URL does not create a missing directory (createDirectories=true would).
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return switch backend {
        case "sqlite": "sqlite://\(directory.appendingPathComponent("\(name).sqlite").path)"
        case "lmdb": "lmdb://\(directory.appendingPathComponent(name).path)"
        default: "memory:"
        }
    }
}

let fixtures = Fixtures()

struct WrongCount: Error { let found: Int }

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal, .peakMemoryResident],
        timeUnits: .milliseconds,
        warmupIterations: 1,
        maxDuration: .seconds(2),
        maxIterations: 20,
        thresholds: [
            .mallocCountTotal: .init(relative: [.p50: 5, .p90: 10]),
            .wallClock: .init(relative: [.p50: 35, .p90: 50]),
        ])

    for backend in ["memory", "sqlite", "lmdb"] {
        Benchmark("W1 save \(records) in one call, \(backend)") { benchmark async throws in
            for iteration in benchmark.scaledIterations {
                let store = try openStoreBlocking(url: await fixtures.url(backend, "fresh-\(iteration)-\(UUID().uuidString)"))
                let controller = Controller<Cat, CatRecord>(store: store)
                try await store.register(CatRecord.self)
                benchmark.startMeasurement()
                try await controller.save(cats)
                benchmark.stopMeasurement()
                await store.close()
            }
        }

        Benchmark("W2 fetch all \(records), \(backend)") { benchmark async throws in
            let controller = try await fixtures.populated(backend)
            for _ in benchmark.scaledIterations {
                benchmark.startMeasurement()
                let all = try await controller.fetchAll()
                benchmark.stopMeasurement()
                guard all.count == records else { throw WrongCount(found: all.count) }
                blackHole(all)
            }
        }

        Benchmark("W4 \(records) lookups in one read, \(backend)") { benchmark async throws in
            let controller = try await fixtures.populated(backend)
            for _ in benchmark.scaledIterations {
                benchmark.startMeasurement()
                let sum = try await controller.read { context in
                    var sum: Int64 = 0
                    for id in lookups { sum &+= try context.fetchOne(id: id)?.id ?? 0 }
                    return sum
                }
                benchmark.stopMeasurement()
                blackHole(sum)
            }
        }

        Benchmark("W5 age > 10 by name limit 100, \(backend)") { benchmark async throws in
            let controller = try await fixtures.populated(backend)
            let request = Request<CatRecord>(\.age > 10).sorted(by: \.name).limit(100)
            for _ in benchmark.scaledIterations {
                benchmark.startMeasurement()
                let page = try await controller.fetchAll(request)
                benchmark.stopMeasurement()
                blackHole(page)
            }
        }

        // Streaming keeps one batch in memory: compare its peak memory with W2's.
        Benchmark("Stream \(records) in batches of 500, \(backend)") { benchmark async throws in
            let controller = try await fixtures.populated(backend)
            for _ in benchmark.scaledIterations {
                benchmark.startMeasurement()
                var seen = 0
                for try await cat in controller.results.batched(500) { seen &+= Int(cat.id & 1) + 1 }
                benchmark.stopMeasurement()
                blackHole(seen)
            }
        }
    }
}
