import ArgumentParser
import Depot
import Foundation

@main
struct DepotBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot-bench",
        abstract: "Compares Depot's backends with each other and with the raw engines, on this machine.",
        discussion: """
            Runs the workloads described in docs/benchmarks/README.md of Depot's repository \
            through Depot's public API on each backend and through the raw engines' C APIs \
            (SQLite, LMDB, libpq), interleaved in one process. Every run checks a checksum of \
            what it read; a failed check exits non-zero. Build with -c release: a debug build \
            says nothing about speed.
            """)

    @Option(help: "Number of cats in the populated store and in W1 (and of pets, for W8, unless --pets says otherwise).")
    var records = 100_000

    @Option(help: "Number of pets W8, W8e, W8n and W8c read (default: --records).")
    var pets: Int?

    @Option(help: "Comma-separated subjects: memory, sqlite, lmdb, raw-sqlite, raw-lmdb, postgres, raw-postgres (the last two need --postgres-url).")
    var backends = "memory,sqlite,raw-sqlite,lmdb,raw-lmdb"

    @Option(help: "Comma-separated workloads: W1, W1x, W2, W3, W3x, W3e, W3h, W3c, W4, W4p, W4pe, W4ph, W5, W6, W6e, W6t, W7, W8, W8e, W8n, W8c.")
    var workloads = "W1,W1x,W2,W3,W3x,W3e,W3h,W3c,W4,W4p,W4pe,W4ph,W5,W6,W6e,W6t,W7,W8,W8e,W8n,W8c"

    @Option(help: "A PostgreSQL server for the postgres and raw-postgres subjects (a libpq URI; each run uses schemas of its own and drops them at the end). Default: DEPOT_BENCH_POSTGRES_URL.")
    var postgresURL: String?

    @Flag(help: "Open Depot's stores with metrics=true&tracing=true (into swift-metrics' and swift-distributed-tracing's no-op backends, which nothing bootstraps here): what the instrumentation itself costs, against a run without it.")
    var telemetry = false

    @Option(help: "Measured runs per workload and subject, after one warm-up run.")
    var repetitions = 5

    @Option(help: "SQLite durability for Depot and raw SQLite alike: normal (WAL, synchronous=NORMAL) or full (synchronous=FULL). LMDB always commits durably.")
    var durability = "normal"

    @Option(help: "Where stores are created (a temporary directory, removed afterwards, by default); stores an earlier run left there are replaced.")
    var directory: String?

    @Option(help: "Where to write results.json, report.md and chart.svg (make bench: a new folder under docs/benchmarks).")
    var output: String?

    @Option(help: "The commit measured, recorded in results.json and report.md (make bench passes git's short hash).")
    var commit: String?

    @Option(help: "Write report.md and chart.svg of an earlier run again from the results.json in this folder, and measure nothing.")
    var render: String?

    /// Internal: measure one subject's peak resident memory during W2 in this process (the
    /// parent starts one such process per subject; see MemoryProbe).
    @Option(help: .hidden)
    var rssProbe: String?

    func validate() throws {
        guard records >= 1_000 else { throw ValidationError("--records must be at least 1000 (W3 and W6 use 1,000 cats).") }
        if let pets, pets < 1_000 { throw ValidationError("--pets must be at least 1000.") }
        guard repetitions >= 1 else { throw ValidationError("--repetitions must be at least 1.") }
        guard ["normal", "full"].contains(durability) else { throw ValidationError("--durability is normal or full.") }
    }

    func run() async throws {
        if let render {
            try Self.render(folder: URL(fileURLWithPath: render, isDirectory: true))
            return
        }
        if let rssProbe {
            guard let directory else { throw ValidationError("--rss-probe needs --directory") }
            let kind = try subjectKind(rssProbe)
            try await MemoryProbe.probe(kind.make(), directory: URL(fileURLWithPath: directory, isDirectory: true), records: records)
            return
        }
        let selectedWorkloads = try parseList(workloads, allowed: Workload.allCases.map(\.rawValue)).compactMap(Workload.init(rawValue:))
        let selectedBackends = try parseList(backends, allowed: Report.backendOrder)
        let kinds = try selectedBackends.map(subjectKind)

        let workDirectory: URL
        let temporary = directory == nil
        if let directory {
            workDirectory = URL(fileURLWithPath: directory, isDirectory: true)
        } else {
            workDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-bench-\(UUID().uuidString)")
        }
        try FileManager.default.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        defer { if temporary { try? FileManager.default.removeItem(at: workDirectory) } }

        #if DEBUG
            let build = "debug"
            printErr("warning: this is a debug build; figures say nothing about speed. Use: make bench, or make release-build and run .build/release/depot-bench")
        #else
            let build = "release"
        #endif

        let runner = Runner(
            kinds: kinds, workloads: selectedWorkloads, records: records, pets: pets ?? records, repetitions: repetitions,
            directory: workDirectory, progress: { printErr("[depot-bench] \($0)") })
        let usesServer = selectedBackends.contains { $0.hasSuffix("postgres") }
        var results: [Measurement]
        do {
            results = try await runner.run()
        } catch {
            if usesServer { await dropSchemas() }
            throw error
        }
        if usesServer { await dropSchemas() }
        if selectedWorkloads.contains(.w2) {
            printErr("[depot-bench] peak memory during W2, one process per subject")
            // The client's memory says little for a database server, and the probe's child
            // process would need the server too: PostgreSQL is left out.
            let probed = selectedBackends.filter { !$0.hasSuffix("postgres") }
            let readings = try MemoryProbe.measure(subjects: probed, directory: workDirectory, records: records, durability: durability)
            for i in results.indices where results[i].workload == "W2" {
                guard let reading = readings[results[i].backend] else { continue }
                results[i].peakRSSKiB = reading.peakKiB
                results[i].rssBeforeKiB = reading.baselineKiB
                if let raw = kinds.first(where: { $0.name == results[i].backend })?.rawCounterpart, let rawReading = readings[raw] {
                    results[i].rssRatioToRaw = Double(reading.peakKiB) / Double(rawReading.peakKiB)
                }
            }
        }
        let durabilityText =
            "SQLite WAL + synchronous=\(durability == "full" ? "FULL" : "NORMAL") (Depot and raw); LMDB durable commits (Depot and raw)"
            + (telemetry ? "; Depot's stores with metrics and tracing on (no-op backends)" : "")
        let report = Report(
            records: records, pets: selectedWorkloads.contains(where: \.readsPets) ? (pets ?? records) : nil,
            repetitions: repetitions, build: build, commit: commit, durability: durabilityText,
            date: ISO8601DateFormatter().string(from: Date()), machine: machineDescription(),
            results: results, targets: Targets.check(results), breakdown: Breakdown.lines(results))
        print(report.table)

        if let output {
            let folder = URL(fileURLWithPath: output, isDirectory: true)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
            try encoder.encode(report).write(to: folder.appendingPathComponent("results.json"))
            try report.writePages(to: folder)
            print("\nReport written to \(folder.path)/{results.json,report.md,chart.svg}")
        }
        if results.contains(where: { !$0.checksumOK }) {
            throw BenchError("a checksum did not match: a subject read something other than what was written")
        }
    }

    /// Writes the pages of the run recorded in `folder` from its results.json, so that a
    /// change to the report's layout can be carried to the records already kept.
    private static func render(folder: URL) throws {
        let data: Data
        do {
            data = try Data(contentsOf: folder.appendingPathComponent("results.json"))
        } catch {
            throw ValidationError("--render: cannot read \(folder.path)/results.json (\(error.localizedDescription))")
        }
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        let report: Report
        do {
            report = try decoder.decode(Report.self, from: data)
        } catch {
            throw ValidationError("--render: \(folder.path)/results.json is not a depot-bench record (\(error))")
        }
        try report.writePages(to: folder)
        print("Wrote \(folder.path)/{report.md,chart.svg}")
    }

    private func parseList(_ text: String, allowed: [String]) throws -> [String] {
        let items = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        for item in items where !allowed.contains(item) {
            throw ValidationError("unknown '\(item)'; choose from \(allowed.joined(separator: ", "))")
        }
        return allowed.filter(items.contains)
    }

    private func subjectKind(_ name: String) throws -> SubjectKind {
        let synchronous = durability == "full" ? "FULL" : "NORMAL"
        switch name {
        case "raw-sqlite":
            return SubjectKind(name: name, rawCounterpart: nil) { RawSQLiteSubject(synchronous: synchronous) }
        case "raw-lmdb":
            return SubjectKind(name: name, rawCounterpart: nil) { RawLMDBSubject() }
        case "raw-postgres":
            let server = try postgresServer()
            let commit = durability == "full" ? "on" : "off"
            return SubjectKind(name: name, rawCounterpart: nil) { RawPostgresSubject(server: server, synchronousCommit: commit) }
        default:
            let url = try storeURL(for: name)
            let raw = name == "memory" ? nil : "raw-\(name)"
            return SubjectKind(name: name, rawCounterpart: raw) {
                DepotSubject(name: name, rawCounterpart: raw) { [telemetry] directory in
                    let location = url(directory)
                    guard telemetry else { return try openStoreBlocking(url: location) }
                    return try openStoreBlocking(url: location + (location.contains("?") ? "&" : "?") + "metrics=true&tracing=true")
                }
            }
        }
    }

    /// Drops the schemas the postgres subjects made; says so on standard error when one
    /// could not be dropped (the run's figures stand).
    private func dropSchemas() async {
        guard let server = try? postgresServer() else { return }
        for problem in await dropBenchSchemas(on: server) {
            printErr("[depot-bench] warning: a schema of this run was left on the server: \(problem)")
        }
    }

    /// The PostgreSQL server of the postgres subjects.
    private func postgresServer() throws -> String {
        guard let url = postgresURL ?? ProcessInfo.processInfo.environment["DEPOT_BENCH_POSTGRES_URL"], !url.isEmpty else {
            throw ValidationError("the postgres subjects need a server: --postgres-url postgresql://user@host/db (make bench-postgres starts a throwaway one)")
        }
        return url
    }

    /// The store URL for a backend in a directory: the same URL form applications use.
    private func storeURL(for backend: String) throws -> (URL) -> String {
        switch backend {
        case "memory": return { _ in "memory:" }
        case "sqlite": return { [durability] in "sqlite://\($0.appendingPathComponent("depot.sqlite").path)?durability=\(durability)" }
        case "lmdb": return { "lmdb://\($0.path)" }
        case "postgres":
            let server = try postgresServer()
            let separator = server.contains("?") ? "&" : "?"
            // Depot's `normal` is synchronous_commit=off, like raw-postgres at --durability normal.
            return { [durability] in "\(server)\(separator)schema=\(benchSchemaName($0))&durability=\(durability)" }
        default: throw ValidationError("unknown backend \(backend)")
        }
    }
}

func printErr(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

func machineDescription() -> String {
    let info = ProcessInfo.processInfo
    let memory = Double(info.physicalMemory) / 1_073_741_824
    return String(format: "%d cores, %.0f GiB, %@", info.activeProcessorCount, memory, info.operatingSystemVersionString)
}
