import Depot
import DepotTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Opens `url` and reads the crash workload's entities (what an application does first);
/// returns the error, or `nil` when the store opened and was usable.
func openAndUse(_ url: String) async -> (any Error)? {
    do {
        let store = try await openStore(url: url)
        do {
            _ = try await CrashWorkload.verify(store)
        } catch {
            await store.close()
            return error
        }
        await store.close()
        return nil
    } catch {
        return error
    }
}

/// The file a backend keeps its data in, for a store URL made by ``Backend/url(in:name:options:)``.
func dataFile(_ backend: Backend, in directory: TemporaryDirectory, name: String = "store") -> String {
    backend == .sqlite ? directory.file(name + ".sqlite") : directory.file(name + "/data.mdb")
}

/// Writes a small valid store named "valid" and returns its data file's bytes.
func validStoreBytes(_ backend: Backend, in directory: TemporaryDirectory) async throws -> Data {
    let store = try await openStore(url: backend.url(in: directory, name: "valid"))
    let entities = try await CrashWorkload.register(store)
    var generator = SplitMix64(seed: 7)
    for _ in 0..<6 { _ = try await CrashWorkload.commit(CrashWorkload.plan(using: &generator), to: store, entities) }
    await store.close()
    return try Data(contentsOf: URL(fileURLWithPath: dataFile(backend, in: directory, name: "valid")))
}

let corrupted: Set<String> = ["storeCorrupted"]
let writableFile: mode_t = 0o666
let writableDirectory: mode_t = 0o777
let readOnlyFile: mode_t = 0o444
let readOnlyDirectory: mode_t = 0o555

@Suite("bad files: a specific DepotError, never a crash, nothing modified")
struct BadFileTests {
    static let randomFiles = Stress.size("DEPOT_RANDOM_FILES", ci: 12, tsan: 4, full: 300)

    /// Puts `bytes` where the backend's data file goes, opens the store, and checks the
    /// outcome: a DepotError with one of `codes`, and the file left byte for byte.
    static func expectRefused(
        _ backend: Backend, _ bytes: Data, codes: Set<String>, _ context: String, orConsistent: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let directory = TemporaryDirectory("bad")
        defer { directory.remove() }
        let file = dataFile(backend, in: directory)
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try bytes.write(to: URL(fileURLWithPath: file))
        let outcome = await openAndUse(backend.url(in: directory))
        if outcome == nil && orConsistent {
            // The damage was in bytes the store does not use (a page's zero tail): it must
            // then open with every committed transaction whole.
            let store = try await openStore(url: backend.url(in: directory))
            let verdict = try await CrashWorkload.verify(store)
            await store.close()
            #expect(verdict.problems.isEmpty && verdict.lastCommitted == 6, "\(backend) \(context): opened, but \(verdict.problems)", sourceLocation: sourceLocation)
            return
        }
        guard let error = outcome as? DepotError else {
            let got = outcome.map { "\($0)" } ?? "success"
            Issue.record("\(backend) \(context): expected a DepotError \(codes.sorted()), got \(got)", sourceLocation: sourceLocation)
            return
        }
        #expect(codes.contains(error.code.name), "\(backend) \(context): \(error)", sourceLocation: sourceLocation)
        let after = try Data(contentsOf: URL(fileURLWithPath: file))
        #expect(after == bytes, "\(backend) \(context): the file was modified", sourceLocation: sourceLocation)
    }

    @Test("a truncated store is refused as corrupted and left as it was", arguments: [Backend.sqlite, .lmdb])
    func truncated(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("trunc")
        defer { directory.remove() }
        let valid = try await validStoreBytes(backend, in: directory)
        let count: Int = valid.count
        var lengths: [Int] = [1, 100, 4095, 4096, 4097, 8192]
        lengths += [count / 2, count - 4096, count - 1]
        lengths = lengths.filter { (length: Int) -> Bool in length > 0 && length < count }
        for length in lengths {
            try await Self.expectRefused(backend, valid.prefix(length), codes: corrupted, "truncated to \(length) of \(count) bytes")
        }
        report("bad files \(backend): \(lengths.count) truncations refused with storeCorrupted, files unchanged")
    }

    @Test("files of random bytes, of many sizes, are refused and left as they were", arguments: [Backend.sqlite, .lmdb])
    func randomBytes(_ backend: Backend) async throws {
        // The backends' own tests try one random file each; this tries many sizes (below a
        // page, page multiples, odd sizes) and seeds, a third of them behind a valid header.
        var generator = SplitMix64(seed: backend == .sqlite ? 11 : 12)
        let directory = TemporaryDirectory("hdr")
        defer { directory.remove() }
        let valid = try await validStoreBytes(backend, in: directory)
        let sizes: [Int] = [1, 17, 100, 512, 4096, 4097, 8192, 12_288, 65_536]
        for index in 0..<Self.randomFiles {
            let size: Int = sizes[index % sizes.count] + (index / sizes.count) * 4096
            var bytes = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
            let header: Int = Swift.min(128, size)
            if index % 3 == 2 { bytes.replaceSubrange(0..<header, with: valid.prefix(header)) }
            try await Self.expectRefused(backend, bytes, codes: corrupted, "random file #\(index) of \(size) bytes")
        }
        report("bad files \(backend): \(Self.randomFiles) random files refused with storeCorrupted, files unchanged")
    }

    @Test("a file written by another program is refused and left as it was", arguments: [Backend.sqlite, .lmdb])
    func foreignFile(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("foreign")
        defer { directory.remove() }
        let other = try await validStoreBytes(backend == .sqlite ? .lmdb : .sqlite, in: directory)
        let executable = try Data(contentsOf: URL(fileURLWithPath: "/bin/sh"))
        let line: String = "name,age\nTom,3\n"
        let text = Data(String(repeating: line, count: 500).utf8)
        let files: [(String, Data)] = [("another backend's store", other), ("/bin/sh", executable), ("a CSV file", text)]
        for (name, bytes) in files {
            try await Self.expectRefused(backend, bytes, codes: corrupted, name)
        }
        report("bad files \(backend): \(files.count) files of other programs refused with storeCorrupted, files unchanged")
    }

    /// An empty data file is what a crash during the store's creation leaves behind (the
    /// file exists, nothing was written yet), so refusing it would make such a store
    /// unopenable: both backends treat it as a new, empty store, as SQLite and LMDB do.
    @Test("an empty file opens as a new, empty store (what a crash during creation leaves)", arguments: [Backend.sqlite, .lmdb])
    func emptyFile(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("empty")
        defer { directory.remove() }
        let file = dataFile(backend, in: directory)
        try FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: file))
        let store = try await openStore(url: backend.url(in: directory))
        let verdict = try await CrashWorkload.verify(store)
        #expect(verdict.lastCommitted == 0 && verdict.problems.isEmpty)
        var generator = SplitMix64(seed: 1)
        let txn = try await CrashWorkload.commit(CrashWorkload.plan(using: &generator), to: store, CrashWorkload.register(store))
        #expect(txn == 1)
        await store.close()
    }

    @Test("a path that does not exist and cannot be created gives a clear error", arguments: [Backend.sqlite, .lmdb])
    func uncreatablePath(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("nopath")
        defer { directory.remove() }
        let blocker = directory.file("a-file")
        let content = Data("x".utf8)
        try content.write(to: URL(fileURLWithPath: blocker))
        let name = backend == .sqlite ? "store.sqlite" : "store"
        let scheme = backend.rawValue
        // A regular file in the way, and a file system that refuses new entries.
        let urls: [String] = ["\(scheme)://\(blocker)/sub/\(name)", "\(scheme):///proc/depot-no-such-dir/\(name)"]
        let accepted: Set<String> = ["io", "permissionDenied", "invalidConfiguration"]
        for url in urls {
            let outcome = await openAndUse(url)
            guard let error = outcome as? DepotError else {
                let got = outcome.map { "\($0)" } ?? "success"
                Issue.record("\(url): expected a DepotError, got \(got)")
                continue
            }
            #expect(accepted.contains(error.code.name), "\(url): \(error)")
            let namesPath: Bool = error.message.contains("/proc/depot-no-such-dir") || error.message.contains(blocker)
            #expect(namesPath, "the message names the path: \(error)")
        }
        let after = try Data(contentsOf: URL(fileURLWithPath: blocker))
        #expect(after == content)
    }

    @Test("a read-only file or directory is refused with permissionDenied and left as it was", arguments: [Backend.sqlite, .lmdb])
    func readOnly(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("ro")
        defer { directory.remove() }
        _ = try await validStoreBytes(backend, in: directory)
        let url = backend.url(in: directory, name: "valid")
        let file = dataFile(backend, in: directory, name: "valid")
        let storeDirectory = (file as NSString).deletingLastPathComponent
        // The helper drops root rights, so that permissions apply in containers too. The
        // store is first made writable by anyone, then the file, the directory, or both lose
        // their write permission.
        let everyone: [String] = [directory.path, storeDirectory, file]
        let cases: [(String, [String])] = [("file", [file]), ("directory", [storeDirectory]), ("file and directory", [file, storeDirectory])]
        for (label, paths) in cases {
            for path in everyone { _ = chmod(path, path == file ? writableFile : writableDirectory) }
            for path in paths { _ = chmod(path, path == file ? readOnlyFile : readOnlyDirectory) }
            let before = snapshot(storeDirectory)
            let result = try runHelper(["open", url, "--nobody"], in: directory)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.output.hasPrefix("error permissionDenied"), "\(backend) read-only \(label): \(result.output)")
            // Files that existed are unchanged (SQLite may leave empty -wal/-shm companions).
            let after = snapshot(storeDirectory)
            let changed = before.filter { after[$0.key] != $0.value }.map(\.key)
            #expect(changed.isEmpty, "\(backend) read-only \(label): changed \(changed)")
        }
        for path in everyone { _ = chmod(path, writableDirectory) }
        report("bad files \(backend): read-only file, directory, both: refused with permissionDenied, files unchanged")
    }
}
