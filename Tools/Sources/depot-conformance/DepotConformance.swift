import ArgumentParser
import Depot
import DepotTesting
import Foundation

/// Runs the conformance suite outside the test runner, so that it can check the build an
/// application ships: `swift test` builds for debugging, and a release build differs in
/// what it runs (awaited calls resume through unsafe continuations there, checked ones in
/// debug builds) and in what the optimizer made of it. CI runs it on the release build.
@main
struct DepotConformance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot-conformance",
        abstract: "Runs Depot's conformance suite against each backend in this build.",
        discussion: """
            Every check runs on a fresh store, as `swift test` runs them. Prints each failed \
            check with what it found and one line per backend; exits non-zero when a check \
            failed. Build with -c release to check the release build.
            """)

    @Option(help: "Comma-separated backends: memory, sqlite, sqlite-memory, lmdb, postgres (needs --postgres-url).")
    var backends = "memory,sqlite,sqlite-memory,lmdb"

    @Option(help: "A PostgreSQL server for the postgres backend (a libpq URI; each check uses a schema of its own). Default: DEPOT_TEST_POSTGRES_URL.")
    var postgresURL: String?

    @Option(help: "Checks run at once (each on a store of its own).")
    var parallel = 4

    @Option(help: "Run only the checks whose name contains this text.")
    var filter: String?

    @Flag(help: "Print every check as it finishes, with how long it took.")
    var verbose = false

    func validate() throws {
        guard (1...64).contains(parallel) else { throw ValidationError("--parallel takes 1 to 64, not \(parallel).") }
        for backend in backendList where !Backend.allCases.map(\.rawValue).contains(backend) {
            throw ValidationError("Unknown backend '\(backend)'; use \(Backend.allCases.map(\.rawValue).joined(separator: ", ")).")
        }
        if backendList.contains(Backend.postgres.rawValue), serverURL == nil {
            throw ValidationError("The postgres backend needs --postgres-url or DEPOT_TEST_POSTGRES_URL.")
        }
    }

    enum Backend: String, CaseIterable {
        case memory, sqlite, sqliteMemory = "sqlite-memory", lmdb, postgres
    }

    var backendList: [String] {
        backends.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    var serverURL: String? { postgresURL ?? ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] }

    func run() async throws {
        let checks = ConformanceSuite.checks.filter { check in filter.map { check.name.contains($0) } ?? true }
        guard !checks.isEmpty else { throw ValidationError("No check's name contains '\(filter ?? "")'.") }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("depot-conformance-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: scratch) }
        #if DEBUG
        let build = "debug build"
        #else
        let build = "release build"
        #endif
        var failedBackends: [String] = []
        for name in backendList {
            guard let backend = Backend(rawValue: name) else { continue }
            let failures = await run(checks, on: backend, scratch: scratch)
            for (check, failure) in failures.sorted(by: { $0.0 < $1.0 }) {
                print("depot-conformance: \(name): ✘ \(check): \(failure)")
            }
            print("depot-conformance: \(name): \(checks.count - failures.count) of \(checks.count) checks passed (\(build))")
            if !failures.isEmpty { failedBackends.append(name) }
        }
        if !failedBackends.isEmpty {
            print("depot-conformance: checks failed on \(failedBackends.joined(separator: ", "))")
            throw ExitCode.failure
        }
    }

    /// Runs every check on a store of its own, `parallel` at a time; returns the failures.
    func run(_ checks: [ConformanceCheck], on backend: Backend, scratch: URL) async -> [(String, String)] {
        await withTaskGroup(of: (String, String)?.self) { group in
            var failures: [(String, String)] = []
            var next = 0
            func add(_ index: Int) {
                let check = checks[index]
                let url = storeURL(for: backend, scratch: scratch)
                let verbose = self.verbose
                group.addTask {
                    let clock = ContinuousClock()
                    let start = clock.now
                    var failure: String?
                    do {
                        let store = try await openStore(url: url)
                        try await check.runAndClose(store)
                    } catch {
                        failure = "\(error)"
                    }
                    if verbose {
                        let elapsed = (clock.now - start).formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow))
                        print("depot-conformance: \(backend.rawValue): \(failure == nil ? "✔" : "✘") \(check.name) (\(elapsed))")
                    }
                    return failure.map { (check.name, $0) }
                }
            }
            while next < min(parallel, checks.count) {
                add(next)
                next += 1
            }
            while let outcome = await group.next() {
                if let outcome { failures.append(outcome) }
                if next < checks.count {
                    add(next)
                    next += 1
                }
            }
            return failures
        }
    }

    /// A URL naming a fresh, empty store.
    func storeURL(for backend: Backend, scratch: URL) -> String {
        let unique = UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        switch backend {
        case .memory: return "memory:"
        case .sqlite: return "sqlite://" + scratch.appendingPathComponent("\(unique)/store.sqlite").path + "?createDirectories=true"
        case .sqliteMemory: return "sqlite::memory:"
        case .lmdb: return "lmdb://" + scratch.appendingPathComponent(unique).path
        case .postgres:
            let base = serverURL ?? ""
            return base + (base.contains("?") ? "&" : "?") + "schema=c_\(unique)"
        }
    }
}
