import DepotCore
import DepotTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How big the reliability runs are: `DEPOT_STRESS=full` for the documented full sizes
/// (`make stress`), otherwise a CI size, smaller again under Thread Sanitizer, which makes
/// everything many times slower (``TestScale``, shared with the other test targets).
enum Stress {
    static let isFull = TestScale.isFull
    static let underTSan = TestScale.underThreadSanitizer

    /// The PostgreSQL server `make test` and `make stress` start (a libpq URL with a
    /// query part), and whether its absence fails the run rather than skipping.
    static let postgresURL = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"]
    static let postgresRequired = ProcessInfo.processInfo.environment["DEPOT_REQUIRE_POSTGRES"] == "1"

    /// The size for this run; an environment variable `name` overrides it.
    static func size(_ name: String, ci: Int, tsan: Int, full: Int) -> Int {
        TestScale.size(name, ci: ci, tsan: tsan, full: full)
    }
}

/// One summary line per area, in a fixed format `make stress` collects.
func report(_ line: String) {
    print("depot-reliability: \(line)")
}

/// A fresh directory under the system's temporary directory, removed by ``remove()``.
struct TemporaryDirectory: Sendable {
    let path: String

    init(_ label: String = "rel") {
        path = NSTemporaryDirectory() + "/depot-\(label)-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func file(_ name: String) -> String { path + "/" + name }

    func remove() {
        // Read-only modes set by a test must not stop the cleanup.
        _ = chmod(path, 0o755)
        if let names = try? FileManager.default.subpathsOfDirectory(atPath: path) {
            for name in names { _ = chmod(path + "/" + name, 0o755) }
        }
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// The store URLs of each backend for a location in `directory`.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, sqlite, lmdb

    var testDescription: String { rawValue }

    func url(in directory: TemporaryDirectory, name: String = "store", options: String = "") -> String {
        let query = options.isEmpty ? "" : "?" + options
        switch self {
        case .memory: return "memory:"
        case .sqlite: return "sqlite://\(directory.file(name + ".sqlite"))\(query)"
        case .lmdb: return "lmdb://\(directory.file(name))\(query)"
        }
    }
}

/// Expects `body` to throw a DepotError with `code`; returns it.
@discardableResult
func expectDepotError<T>(
    _ code: DepotError.Code, _ context: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> T
) async -> DepotError? {
    do {
        _ = try await body()
        Issue.record("\(context): expected DepotError.\(code.name), but it succeeded", sourceLocation: sourceLocation)
    } catch let error as DepotError {
        #expect(error.code == code, "\(context): \(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("\(context): expected DepotError.\(code.name), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// The `depot-crash-writer` executable of this build: in the same products directory as
/// the test runner, whatever the scratch path (`.build`, `.build-tsan`). On Linux the
/// runner is `<products>/DepotPackageTests.xctest`; on macOS it is inside that bundle, so
/// every ancestor directory of the running executable is tried. `DEPOT_CRASH_WRITER`
/// overrides the search.
let crashWriterPath: String? = ProcessInfo.processInfo.environment["DEPOT_CRASH_WRITER"] ?? ProcessLaunch.builtProduct("depot-crash-writer")

/// A running `depot-crash-writer`.
final class Helper {
    let child: ProcessLaunch.Child
    let stderrPath: String

    init(_ arguments: [String], stderrPath: String) throws {
        guard let path = crashWriterPath else {
            throw DepotError(.invalidConfiguration, "depot-crash-writer was not found next to the test runner; build it (swift build) or set DEPOT_CRASH_WRITER")
        }
        self.stderrPath = stderrPath
        child = try ProcessLaunch.spawn(path, arguments, stdout: .discard, stderr: .file(stderrPath))
    }

    /// Kills the process with SIGKILL and waits for it; returns `nil` when it was killed,
    /// or a description of how it ended by itself (which a kill test must report).
    func killNow() -> String? {
        let pid = child.pid
        _ = kill(pid, SIGKILL)
        // A bounded wait: a kill test must not hang if the child cannot be reaped.
        guard let exit = ProcessLaunch.wait(pid, seconds: 120) else {
            return "the killed writer \(pid) was not seen to exit within 120 s"
        }
        if exit.signal == SIGKILL { return nil }
        let stderr = (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
        return "the writer ended by itself (\(exit)): \(stderr)"
    }

    func wait() -> (status: Int32, stderr: String) {
        let exit = ProcessLaunch.wait(child.pid)
        return (exit.status, (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "")
    }
}

/// Runs `depot-crash-writer` with these arguments to completion; returns what it printed.
func runHelper(_ arguments: [String], in directory: TemporaryDirectory) throws -> (status: Int32, output: String, stderr: String) {
    guard let path = crashWriterPath else {
        throw DepotError(.invalidConfiguration, "depot-crash-writer was not found next to the test runner")
    }
    let result = try ProcessLaunch.run(path, arguments)
    return (result.exit.status, result.stdout, result.stderr)
}

/// The bytes of every file under `path` (a file or a directory), to prove nothing changed.
func snapshot(_ path: String) -> [String: Data] {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return [:] }
    if !isDirectory.boolValue { return [path: (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()] }
    var result: [String: Data] = [:]
    for name in (try? FileManager.default.subpathsOfDirectory(atPath: path)) ?? [] {
        let full = path + "/" + name
        result[full] = (try? Data(contentsOf: URL(fileURLWithPath: full))) ?? Data()
    }
    return result
}
