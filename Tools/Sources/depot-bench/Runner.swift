import DepotTesting
import Dispatch
import Foundation

/// The workloads, as docs/benchmarks/README.md describes them.
enum Workload: String, CaseIterable, Codable {
    case w1 = "W1", w1x = "W1x", w2 = "W2", w3 = "W3", w3x = "W3x", w3e = "W3e", w3h = "W3h", w3c = "W3c", w4 = "W4", w4p = "W4p", w4pe = "W4pe", w4ph = "W4ph"
    case w5 = "W5", w6 = "W6", w6e = "W6e", w6t = "W6t", w7 = "W7", w8 = "W8", w8e = "W8e", w8n = "W8n", w8c = "W8c"

    var summary: String {
        switch self {
        case .w1: "save N objects in one call (fresh store)"
        case .w1x: "W1 into an entity that also declares a composite index on (age, name) (Depot's stores only)"
        case .w2: "fetch all N objects"
        case .w3: "1,000 saves of one object, each its own durable commit (fresh store)"
        case .w3x: "W3 into an entity that also declares a composite index on (age, name) (Depot's stores only)"
        case .w3e: "W3 from a task preferring the store's executor (withTaskExecutorPreference(store.executor)); raw engines: W3"
        case .w3h: "W3 for the raw engines behind the same async hand-off as Depot's writes (each save handed to a serial queue and awaited)"
        case .w3c: "W3's 1,000 saves from 8 concurrent tasks, each save awaited (raw engines: W3, one commit per save)"
        case .w4: "random primary-key lookups inside one read operation"
        case .w4p: "10,000 random lookups, each its own async fetchOne(id:) call"
        case .w4pe: "W4' from a task preferring the store's executor (withTaskExecutorPreference(store.executor)); raw engines: W4'"
        case .w4ph: "W4' for the raw engines behind the same async hand-off as Depot's reads (each lookup handed to a concurrent queue and awaited)"
        case .w5: "age > 10, sorted by name, limit 100 (time per query)"
        case .w6: "4 concurrent readers doing W4' for as long as one writer does W3 (raw engines behind the same async hand-off as Depot)"
        case .w6e: "W6 with the readers and the writer preferring the store's executor, as the article Using Depot in a server tells servers to call Depot (Depot's stores only; compared with W6t)"
        case .w6t: "W6 for the raw engines on plain threads, no async hand-off (the floor)"
        case .w7: "import N objects from a JSON array (fresh store); raw engines: JSONDecoder into structs, then one transaction"
        case .w8: "the list page: N pets, species == x (one of 16) sorted by name, limit 20, composite index on (species, name) (time per page)"
        case .w8e: "W8 from a task preferring the store's executor (withTaskExecutorPreference(store.executor)), as the article Using Depot in a server tells servers to call Depot; raw engines: W8"
        case .w8n: "W8 on the same pets with species indexed alone, no composite index (Depot's stores only; time per page)"
        case .w8c: "up to 200 cursor pages of 20 of one species walked in order with page(size:after:), composite index (time per walk)"
        }
    }

    /// Whether the workload needs the populated store (the others start from a fresh one).
    var readsPopulatedStore: Bool { ![.w1, .w1x, .w3, .w3x, .w3e, .w3h, .w3c, .w7].contains(self) }

    /// Whether only the raw engines run it: the hand-off baselines and the floor.
    var isRawOnly: Bool { [.w3h, .w4ph, .w6t].contains(self) }

    /// Whether only Depot's stores run it (a raw engine has no store executor to prefer).
    var isDepotOnly: Bool { [.w1x, .w3x, .w6e, .w8n].contains(self) }

    /// Whether the workload reads W8's pets (which the populated store then holds too).
    var readsPets: Bool { [.w8, .w8e, .w8n, .w8c].contains(self) }
}

/// A subject's name, its raw counterpart and how to make a fresh instance.
struct SubjectKind {
    let name: String
    let rawCounterpart: String?
    let make: () -> any BenchSubject
}

/// One workload on one subject: its samples and what they mean.
struct Measurement: Codable {
    let backend: String
    let workload: String
    var samplesMs: [Double]
    var checksumOK: Bool
    var ratioToRaw: Double?
    /// W4': microseconds per call; W6: read p99 in microseconds and reads per second.
    var perCallMicroseconds: Double?
    var p99Microseconds: Double?
    var readsPerSecond: Double?
    var objectsPerSecond: Double?
    /// W8c: the median time of a walk's first page and of its last page, in microseconds,
    /// over every walk of every run, and how many pages a walk read.
    var firstPageMicroseconds: Double?
    var lastPageMicroseconds: Double?
    var pagesPerWalk: Int?
    /// W2: the peak resident size of a process doing W2 once, and its size just before, in
    /// KiB; and the peak's ratio to the raw engine's (MemoryProbe).
    var peakRSSKiB: Int?
    var rssBeforeKiB: Int?
    var rssRatioToRaw: Double?

    var medianMs: Double { Self.median(samplesMs) }
    var minMs: Double { samplesMs.min() ?? .nan }
    var maxMs: Double { samplesMs.max() ?? .nan }

    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let mid = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
    }

    enum CodingKeys: String, CodingKey {
        case backend, workload
        case samplesMs = "samples_ms"
        case checksumOK = "checksum_ok"
        case ratioToRaw = "ratio_to_raw"
        case perCallMicroseconds = "per_call_us"
        case p99Microseconds = "p99_us"
        case readsPerSecond = "reads_per_s"
        case objectsPerSecond = "objects_per_s"
        case firstPageMicroseconds = "first_page_us"
        case lastPageMicroseconds = "last_page_us"
        case pagesPerWalk = "pages_per_walk"
        case peakRSSKiB = "peak_rss_kib"
        case rssBeforeKiB = "rss_before_kib"
        case rssRatioToRaw = "peak_rss_ratio_to_raw"
        case medianMs = "median_ms"
        case minMs = "min_ms"
        case maxMs = "max_ms"
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(backend, forKey: .backend)
        try c.encode(workload, forKey: .workload)
        try c.encode(medianMs, forKey: .medianMs)
        try c.encode(minMs, forKey: .minMs)
        try c.encode(maxMs, forKey: .maxMs)
        try c.encode(samplesMs, forKey: .samplesMs)
        try c.encode(ratioToRaw, forKey: .ratioToRaw)
        try c.encode(checksumOK, forKey: .checksumOK)
        try c.encodeIfPresent(perCallMicroseconds, forKey: .perCallMicroseconds)
        try c.encodeIfPresent(p99Microseconds, forKey: .p99Microseconds)
        try c.encodeIfPresent(readsPerSecond, forKey: .readsPerSecond)
        try c.encodeIfPresent(objectsPerSecond, forKey: .objectsPerSecond)
        try c.encodeIfPresent(firstPageMicroseconds, forKey: .firstPageMicroseconds)
        try c.encodeIfPresent(lastPageMicroseconds, forKey: .lastPageMicroseconds)
        try c.encodeIfPresent(pagesPerWalk, forKey: .pagesPerWalk)
        try c.encodeIfPresent(peakRSSKiB, forKey: .peakRSSKiB)
        try c.encodeIfPresent(rssBeforeKiB, forKey: .rssBeforeKiB)
        try c.encodeIfPresent(rssRatioToRaw, forKey: .rssRatioToRaw)
    }

    init(backend: String, workload: String) {
        self.backend = backend
        self.workload = workload
        self.samplesMs = []
        self.checksumOK = true
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        backend = try c.decode(String.self, forKey: .backend)
        workload = try c.decode(String.self, forKey: .workload)
        samplesMs = try c.decode([Double].self, forKey: .samplesMs)
        checksumOK = try c.decode(Bool.self, forKey: .checksumOK)
        ratioToRaw = try c.decodeIfPresent(Double.self, forKey: .ratioToRaw)
        peakRSSKiB = try c.decodeIfPresent(Int.self, forKey: .peakRSSKiB)
        rssBeforeKiB = try c.decodeIfPresent(Int.self, forKey: .rssBeforeKiB)
        rssRatioToRaw = try c.decodeIfPresent(Double.self, forKey: .rssRatioToRaw)
        firstPageMicroseconds = try c.decodeIfPresent(Double.self, forKey: .firstPageMicroseconds)
        lastPageMicroseconds = try c.decodeIfPresent(Double.self, forKey: .lastPageMicroseconds)
        pagesPerWalk = try c.decodeIfPresent(Int.self, forKey: .pagesPerWalk)
    }
}

/// Runs the workloads, interleaving subjects so that drift on a shared machine hits every
/// subject alike.
struct Runner {
    let kinds: [SubjectKind]
    let workloads: [Workload]
    let records: Int
    /// How many pets W8, W8e, W8n and W8c read.
    let pets: Int
    let repetitions: Int
    let directory: URL
    let progress: (String) -> Void

    /// Data every subject shares.
    struct Fixture {
        let cats: [Cat]
        let fullChecksum: Int64
        let lookups: [Int64]
        let lookupChecksum: Int64
        let callLookups: [Int64]
        let callChecksum: Int64
        let singles: [Cat]
        let oldestByName: [Int64]
        /// W7: the cats as a JSON array of objects, as an API would send them.
        let json: Data
        /// W8, W8n and W8c: the pets (when one of them runs).
        let listPages: ListPageFixture?

        init(records: Int, pets: Int?) {
            listPages = pets.map { ListPageFixture(records: $0) }
            cats = Cat.workload(count: records)
            fullChecksum = cats.reduce(0) { $0 &+ checksum($1) }
            var generator = SplitMix64(seed: 2024)
            let n = UInt64(records)
            lookups = (0..<100_000).map { _ in Int64(generator.next() % n) + 1 }
            lookupChecksum = lookups.reduce(0) { [cats] in $0 &+ checksum(cats[Int($1) - 1]) }
            callLookups = (0..<10_000).map { _ in Int64(generator.next() % n) + 1 }
            callChecksum = callLookups.reduce(0) { [cats] in $0 &+ checksum(cats[Int($1) - 1]) }
            singles = Array(Cat.workload(count: 1_000, seed: 99))
            oldestByName = cats.filter { $0.age > 10 }.sorted { a, b in
                if a.name.utf8.lexicographicallyPrecedes(b.name.utf8) { return true }
                return a.name.utf8.elementsEqual(b.name.utf8) && a.id < b.id
            }.prefix(100).map(\.id)
            json = (try? JSONEncoder().encode(cats.map(CatJSON.init))) ?? Data()
        }
    }

    static let queriesPerW5Sample = 20
    /// W6's concurrent readers (a fifth task writes).
    static let w6Readers = 4

    func run() async throws -> [Measurement] {
        progress("generating \(records) cats")
        let fixture = Fixture(records: records, pets: workloads.contains(where: \.readsPets) ? pets : nil)
        var populated: [String: any BenchSubject] = [:]
        do {
            let results = try await run(fixture: fixture, populated: &populated)
            for subject in populated.values { await subject.close() }
            return results
        } catch {
            for subject in populated.values { await subject.close() }
            throw error
        }
    }

    private func run(fixture: Fixture, populated: inout [String: any BenchSubject]) async throws -> [Measurement] {
        if workloads.contains(where: \.readsPopulatedStore) {
            for kind in kinds {
                progress("populating \(kind.name) with \(records) cats")
                let (subject, _) = try await openEmpty(kind, in: "populated-\(kind.name)")
                try await subject.saveAll(fixture.cats)
                let count = try await subject.count()
                guard count == records else { throw BenchError("\(kind.name) holds \(count) cats after populating, not \(records)") }
                if let listPages = fixture.listPages {
                    progress("populating \(kind.name) with \(pets) pets")
                    try await subject.savePets(listPages.pets)
                }
                populated[kind.name] = subject
            }
        }
        var results: [Measurement] = []
        for workload in workloads {
            var measurements = kinds.map { Measurement(backend: $0.name, workload: workload.rawValue) }
            var allLatencies: [Int: [UInt64]] = [:]
            var readRates: [Int: [Double]] = [:]
            var firstPages: [Int: [UInt64]] = [:]
            var lastPages: [Int: [UInt64]] = [:]
            for run in 0...repetitions {
                // Rotate the order each run so no subject always goes first.
                for offset in 0..<kinds.count {
                    let index = (offset + run) % kinds.count
                    let kind = kinds[index]
                    if workload.isRawOnly && !kind.name.hasPrefix("raw-") { continue }
                    if workload.isDepotOnly && kind.name.hasPrefix("raw-") { continue }
                    progress("\(workload.rawValue) \(kind.name) \(run == 0 ? "warm-up" : "run \(run)/\(repetitions)")")
                    let sample = try await measure(workload, kind: kind, populated: populated[kind.name], fixture: fixture, run: run)
                    if run == 0 { continue }
                    measurements[index].samplesMs.append(sample.ms)
                    measurements[index].checksumOK = measurements[index].checksumOK && sample.checksumOK
                    for walk in sample.pageNanoseconds ?? [] {
                        guard let first = walk.first, let last = walk.last else { continue }
                        firstPages[index, default: []].append(first)
                        lastPages[index, default: []].append(last)
                        measurements[index].pagesPerWalk = max(measurements[index].pagesPerWalk ?? 0, walk.count)
                    }
                    if let latencies = sample.latencies, !latencies.isEmpty {
                        // The p99 of every read of every run together.
                        allLatencies[index, default: []] += latencies
                        // The readers' own throughput: concurrent readers over the mean read
                        // latency (Little's law). Dividing the reads by the whole mix's time
                        // would measure the writer instead whenever the readers finish first
                        // (LMDB's 1,000 durable commits outlast 10,000 lookups several times).
                        let meanNanoseconds = Double(latencies.reduce(0, &+)) / Double(latencies.count)
                        if meanNanoseconds > 0 { readRates[index, default: []].append(Double(Self.w6Readers) * 1e9 / meanNanoseconds) }
                    }
                }
            }
            for (index, latencies) in allLatencies {
                let sorted = latencies.sorted()
                let p99 = sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
                measurements[index].p99Microseconds = Double(p99) / 1000
            }
            for (index, rates) in readRates {
                measurements[index].readsPerSecond = Measurement.median(rates)
            }
            for (index, times) in firstPages {
                measurements[index].firstPageMicroseconds = Measurement.median(times.map { Double($0) / 1000 })
            }
            for (index, times) in lastPages {
                measurements[index].lastPageMicroseconds = Measurement.median(times.map { Double($0) / 1000 })
            }
            for i in measurements.indices {
                let median = measurements[i].medianMs
                switch workload {
                case .w1, .w1x, .w7: measurements[i].objectsPerSecond = Double(records) / (median / 1000)
                case .w2: measurements[i].objectsPerSecond = Double(records) / (median / 1000)
                case .w4p, .w4pe, .w4ph: measurements[i].perCallMicroseconds = median * 1000 / Double(fixture.callLookups.count)
                default: break
                }
            }
            for i in measurements.indices {
                // A workload the raw engine does not run (W6e) has no ratio.
                guard let raw = kinds[i].rawCounterpart, let j = kinds.firstIndex(where: { $0.name == raw }),
                    !measurements[i].samplesMs.isEmpty, !measurements[j].samplesMs.isEmpty
                else { continue }
                measurements[i].ratioToRaw = measurements[i].medianMs / measurements[j].medianMs
            }
            results += measurements.filter { !$0.samplesMs.isEmpty }
        }
        return results
    }

    struct Sample {
        let ms: Double
        let checksumOK: Bool
        var latencies: [UInt64]? = nil
        /// W8c: each walk's page times in nanoseconds.
        var pageNanoseconds: [[UInt64]]? = nil
    }

    private func time<T>(_ body: () async throws -> T) async rethrows -> (T, Double) {
        let start = DispatchTime.now().uptimeNanoseconds
        let value = try await body()
        return (value, Double(DispatchTime.now().uptimeNanoseconds - start) / 1_000_000)
    }

    /// A subject of `kind` opened on an empty folder `name` under the run's directory: a
    /// --directory an earlier run used still holds its stores there, and every run starts
    /// from none, as in a temporary directory (the raw engines' inserts refuse keys that
    /// exist).
    private func openEmpty(_ kind: SubjectKind, in name: String) async throws -> (any BenchSubject, URL) {
        let folder = directory.appendingPathComponent(name)
        try? FileManager.default.removeItem(at: folder)
        let subject = kind.make()
        try await subject.open(at: folder)
        return (subject, folder)
    }

    private func withFreshSubject(_ kind: SubjectKind, run: Int, _ body: (any BenchSubject) async throws -> Sample) async throws -> Sample {
        let (subject, folder) = try await openEmpty(kind, in: "fresh-\(kind.name)-\(run)")
        let sample: Sample
        do {
            sample = try await body(subject)
        } catch {
            await subject.close()
            throw error
        }
        await subject.close()
        try? FileManager.default.removeItem(at: folder)
        return sample
    }

    private func measure(_ workload: Workload, kind: SubjectKind, populated: (any BenchSubject)?, fixture: Fixture, run: Int) async throws -> Sample {
        switch workload {
        case .w1:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.saveAll(fixture.cats) }
                return Sample(ms: ms, checksumOK: try await subject.count() == fixture.cats.count)
            }
        case .w3:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.saveEach(fixture.singles) }
                return Sample(ms: ms, checksumOK: try await subject.count() == fixture.singles.count)
            }
        case .w1x, .w3x:
            let cats = (workload == .w1x ? fixture.cats : fixture.singles).map(IndexedCat.init)
            return try await withFreshSubject(kind, run: run) { subject in
                guard let depot = subject as? DepotSubject else { throw BenchError("\(workload.rawValue) is for Depot's stores") }
                let controller = try await depot.indexedCats()
                let (_, ms) = try await time {
                    if workload == .w1x {
                        try await controller.save(cats)
                    } else {
                        for cat in cats { try await controller.save(cat) }
                    }
                }
                return Sample(ms: ms, checksumOK: try await controller.count() == cats.count)
            }
        case .w3e:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.saveEachPreferringStoreExecutor(fixture.singles) }
                return Sample(ms: ms, checksumOK: try await subject.count() == fixture.singles.count)
            }
        case .w3h:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.saveEachBehindHandOff(fixture.singles) }
                return Sample(ms: ms, checksumOK: try await subject.count() == fixture.singles.count)
            }
        case .w3c:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.saveEachConcurrently(fixture.singles, writers: 8) }
                return Sample(ms: ms, checksumOK: try await subject.count() == fixture.singles.count)
            }
        case .w7:
            return try await withFreshSubject(kind, run: run) { subject in
                let (_, ms) = try await time { try await subject.importJSON(fixture.json) }
                let cats = try await subject.fetchAll()
                let sum = cats.reduce(0) { $0 &+ checksum($1) }
                return Sample(ms: ms, checksumOK: cats.count == fixture.cats.count && sum == fixture.fullChecksum)
            }
        default:
            guard let subject = populated else { throw BenchError("\(kind.name) has no populated store") }
            switch workload {
            case .w2:
                let (cats, ms) = try await time { try await subject.fetchAll() }
                let sum = cats.reduce(0) { $0 &+ checksum($1) }
                return Sample(ms: ms, checksumOK: cats.count == fixture.cats.count && sum == fixture.fullChecksum)
            case .w4:
                let (sum, ms) = try await time { try await subject.lookUpInOneRead(fixture.lookups) }
                return Sample(ms: ms, checksumOK: sum == fixture.lookupChecksum)
            case .w4p:
                let (sum, ms) = try await time { try await subject.lookUpEach(fixture.callLookups) }
                return Sample(ms: ms, checksumOK: sum == fixture.callChecksum)
            case .w4pe:
                let (sum, ms) = try await time { try await subject.lookUpEachPreferringStoreExecutor(fixture.callLookups) }
                return Sample(ms: ms, checksumOK: sum == fixture.callChecksum)
            case .w4ph:
                let (sum, ms) = try await time { try await subject.lookUpEachBehindHandOff(fixture.callLookups) }
                return Sample(ms: ms, checksumOK: sum == fixture.callChecksum)
            case .w5:
                var ok = true
                let (_, ms) = try await time {
                    for _ in 0..<Self.queriesPerW5Sample { ok = try await subject.oldestByName() == fixture.oldestByName && ok }
                }
                return Sample(ms: ms / Double(Self.queriesPerW5Sample), checksumOK: ok)
            case .w6, .w6e, .w6t:
                // The writer re-saves existing cats unchanged, so the store's content (and the
                // other workloads' checksums) stay the same.
                let writes = Array(fixture.cats.prefix(fixture.singles.count))
                let (mix, ms) = try await time {
                    switch workload {
                    case .w6: try await subject.concurrentMix(readers: Self.w6Readers, lookups: fixture.callLookups, writes: writes)
                    case .w6e:
                        try await subject.concurrentMixPreferringStoreExecutor(readers: Self.w6Readers, lookups: fixture.callLookups, writes: writes)
                    default: try await subject.concurrentMixOnThreads(readers: Self.w6Readers, lookups: fixture.callLookups, writes: writes)
                    }
                }
                let count = try await subject.count()
                return Sample(ms: ms, checksumOK: mix.checksum == fixture.callChecksum && count == fixture.cats.count, latencies: mix.latencies)
            case .w8, .w8e, .w8n:
                guard let listPages = fixture.listPages else { throw BenchError("W8 has no pets") }
                let species = workload == .w8n ? Array(listPages.querySpecies.prefix(ListPageFixture.slowQueries)) : listPages.querySpecies
                let (pages, ms) = try await subject.timedListPages(
                    species: species, indexed: workload != .w8n, preferringStoreExecutor: workload == .w8e)
                let ok = zip(species, pages).allSatisfy { name, page in page[...] == listPages.firstPage(name) }
                return Sample(ms: ms / Double(species.count), checksumOK: ok)
            case .w8c:
                guard let listPages = fixture.listPages else { throw BenchError("W8c has no pets") }
                var walks: [(pets: [BenchPet], nanoseconds: [UInt64])] = []
                let (_, ms) = try await time {
                    for name in listPages.walkSpecies {
                        walks.append(try await subject.walkPages(species: name, pages: ListPageFixture.pagesPerWalk))
                    }
                }
                let ok = zip(listPages.walkSpecies, walks).allSatisfy { name, walk in walk.pets[...] == listPages.walk(name) }
                return Sample(ms: ms / Double(walks.count), checksumOK: ok, pageNanoseconds: walks.map(\.nanoseconds))
            case .w1, .w1x, .w3, .w3x, .w3e, .w3h, .w3c, .w7:
                throw BenchError("unreachable")
            }
        }
    }
}
