import Depot
import DepotTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `depot-fault-writer`, found next to `depot-crash-writer` (the same products directory),
/// and the shim it runs with, compiled from `FaultShim/FaultShim.c` beside this file into a
/// temporary directory once per test process (the C compiler is `CC`, or `cc`). The shim is
/// built here rather than as a dynamic library product: SwiftPM builds a `.so` only for a
/// product, and a test-only shim must not be one of the package's public products.
private let faultTools: Result<(writer: String, shim: String), DepotError> = {
    guard let crashWriter = crashWriterPath else {
        return .failure(DepotError(.invalidConfiguration, "depot-crash-writer was not found next to the test runner (swift build)"))
    }
    let writer = URL(fileURLWithPath: crashWriter).deletingLastPathComponent().appendingPathComponent("depot-fault-writer").path
    guard FileManager.default.isExecutableFile(atPath: writer) else {
        return .failure(DepotError(.invalidConfiguration, "depot-fault-writer was not found next to the test runner (swift build)"))
    }
    let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("FaultShim/FaultShim.c").path
    let output = (NSTemporaryDirectory() as NSString).appendingPathComponent("depot-fault-shim-\(getpid())")
    do {
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let shim = (output as NSString).appendingPathComponent("libDepotFaultShim.so")
        let compiler = ProcessInfo.processInfo.environment["CC"] ?? "cc"
        let result = try ProcessLaunch.run("/usr/bin/env", [compiler, "-shared", "-fPIC", "-O1", "-o", shim, source, "-ldl"])
        guard result.exit.succeeded, FileManager.default.fileExists(atPath: shim) else {
            return .failure(DepotError(.io, "Compiling \(source) with \(compiler) failed: \(result.stderr)"))
        }
        atexit { try? FileManager.default.removeItem(atPath: (NSTemporaryDirectory() as NSString).appendingPathComponent("depot-fault-shim-\(getpid())")) }
        return .success((writer, shim))
    } catch {
        return .failure(DepotError(.io, "Compiling \(source): \(error)"))
    }
}()

/// LMDB's "the environment had a fatal error" code.
private let mdbPanic: Int32 = -30795

/// What one run of `depot-fault-writer` printed: its acknowledged transactions and its
/// failures (transaction number, or nil for the open; error code name; native code).
private struct FaultRun {
    var acknowledged: [Int] = []
    var failures: [(transaction: Int?, code: String, native: Int32)] = []
    var unreadable: [String] = []

    init(output: String) {
        for line in output.split(separator: "\n") {
            let words = line.split(separator: " ").map(String.init)
            if words.count == 2, words[0] == "ack", let i = Int(words[1]) {
                acknowledged.append(i)
            } else if words.count == 4, words[0] == "error", let native = Int32(words[3]) {
                failures.append((Int(words[1]), words[2], native))
            } else {
                unreadable.append(String(line))
            }
        }
    }
}

@Suite("LMDB when the disk fails (LD_PRELOAD shim)")
struct LMDBFaultInjectionTests {
    /// Runs `depot-fault-writer` against a fresh LMDB store with DepotFaultShim preloaded:
    /// the write or sync call number `after` on data.mdb fails once with `errno`, then the
    /// disk works again. Every call position in the first transactions is tried (opening,
    /// data pages, the sync, the meta page). Each failure must be a DepotError of the
    /// disk's kind, every acknowledged transaction must be in the store when it is opened
    /// again, nothing of a failed one may be, and the store must keep committing after
    /// the failure.
    @Test(arguments: [EIO, ENOSPC])
    func aFailedWriteIsReportedAndLosesNothingAcknowledged(errno: Int32) async throws {
        let tools = try faultTools.get()
        let expected: DepotError.Code = errno == ENOSPC ? .storeFull : .io
        let commits = 5
        var runsWithAFailure = 0
        var refusedAfterTheFault: [Int] = []
        for after in 0..<20 {
            let directory = TemporaryDirectory("fault")
            defer { directory.remove() }
            let store = directory.file("store")
            var environment: [String: String] = [:]
            environment["LD_PRELOAD"] = tools.shim
            // The shim compares with the path the kernel reports for the descriptor: no
            // doubled slashes, no symbolic links.
            let resolved = URL(fileURLWithPath: directory.path).standardizedFileURL.resolvingSymlinksInPath().path
            environment["DEPOT_FAULT_FILE"] = resolved + "/store/data.mdb"
            environment["DEPOT_FAULT_AFTER"] = "\(after)"
            environment["DEPOT_FAULT_TIMES"] = "1"
            environment["DEPOT_FAULT_ERRNO"] = "\(errno)"
            let result = try ProcessLaunch.run(tools.writer, ["lmdb://\(store)", "\(commits)"], environment: environment)
            let printed = result.stdout
            #expect(result.exit.succeeded, "fault after \(after) calls: \(result.exit) \(printed) \(result.stderr)")
            let run = FaultRun(output: printed)
            #expect(run.unreadable.isEmpty, "fault after \(after) calls: \(run.unreadable)")

            // The one failed call is reported as the disk's error. Failures after it are
            // the store refusing to work once the disk works again (checked below).
            if let first = run.failures.first {
                runsWithAFailure += 1
                #expect(first.code == expected.name && first.native == errno, "fault after \(after) calls: \(printed)")
                if first.transaction == nil { #expect(run.acknowledged.isEmpty) }
            }
            let later = run.failures.dropFirst()
            if !later.isEmpty {
                refusedAfterTheFault.append(after)
                #expect(later.allSatisfy { $0.native == mdbPanic }, "fault after \(after) calls: \(printed)")
            }
            if run.failures.first?.transaction != nil {
                #expect(run.acknowledged.count + run.failures.count == commits, "fault after \(after) calls: \(printed)")
            }

            // Opened again without the shim: exactly the acknowledged transactions, and the
            // store takes a write.
            let reopened = try await openStore(url: "lmdb://\(store)")
            let cats = Controller<Cat, CatRecord>(store: reopened)
            let found = Set(try await cats.fetchAll().map(\.id))
            let acknowledged = Set(run.acknowledged.flatMap { i in (0..<10).map { Int64(10 * i + $0) } })
            #expect(found == acknowledged, "fault after \(after) calls: \(printed)")
            try await cats.save(Cat(id: 1, name: "after the fault", weight: 1, age: 1))
            #expect(try await cats.count() == acknowledged.count + 1)
            await reopened.close()
        }
        #expect(runsWithAFailure >= 10, "the fault hit \(runsWithAFailure) of 20 runs")
        report("fault injection lmdb errno=\(errno): \(runsWithAFailure) of 20 runs had a failed call, \(refusedAfterTheFault.count) refused every later transaction")
        // A failed write of LMDB's meta page sets MDB_FATAL_ERROR on the environment: every
        // later transaction, read or write, fails with MDB_PANIC until the environment is
        // closed and opened again, although nothing is damaged (the reopen above finds
        // every acknowledged commit). The store reopens it at the next transaction, so no
        // transaction after the failed one may fail.
        #expect(refusedAfterTheFault.isEmpty, "fault positions after which every transaction failed: \(refusedAfterTheFault)")
    }
}
