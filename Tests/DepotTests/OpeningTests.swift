import Depot
import DepotTesting
import Foundation
import Logging
import Testing

/// Log entries with the name of the thread that logged each.
final class Entries: @unchecked Sendable {
    typealias Entry = (message: String, level: Logger.Level, blockingThread: Bool)
    private let lock = NSLock()
    private var all: [Entry] = []  // guarded by lock

    func append(_ entry: Entry) { lock.withLock { all.append(entry) } }
    var snapshot: [Entry] { lock.withLock { all } }
}

/// Records each message with the name of the thread that logged it.
struct ThreadRecordingHandler: LogHandler {
    let entries: Entries
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        entries.append(("\(event.message)", event.level, Thread.current.threadDictionary[BlockingWork.marker] as? Bool == true))
    }
}

@Suite("Opening stores and numbers from callers")
struct OpeningTests {
    func recordingLogger() -> (Logger, Entries) {
        let entries = Entries()
        return (Logger(label: "test") { _ in ThreadRecordingHandler(entries: entries) }, entries)
    }

    /// Opening reads files and may wait for locks: from async code it must run on a thread
    /// of its own, never on the cooperative pool that called it.
    @Test(arguments: ["sqlite", "lmdb", "sqlite::memory:"])
    func asyncOpenRunsOffThePool(_ backend: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-open-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let url = switch backend {
        case "sqlite": "sqlite://\(directory)/a.sqlite"
        case "lmdb": "lmdb://\(directory)/db"
        default: backend
        }
        let (logger, entries) = recordingLogger()
        let store = try await openStore(url: url, logger: logger)
        let opened = entries.snapshot.first { $0.message == "Depot store opened" }
        #expect(opened?.blockingThread == true, "opened on a thread of its own: \(entries.snapshot)")
        await store.close()
    }

    @Test func asyncOpenReportsErrors() async throws {
        await #expect(throws: DepotError.self) { try await openStore(url: "lmdb:") }
        await #expect(throws: DepotError.self) { try await openStore(url: "redis://x") }
    }

    /// A threshold from a caller or a URL is any Duration; checking a transaction against it
    /// must not overflow.
    @Test(arguments: [Duration.seconds(Int64.max), .seconds(Int64.min), .seconds(-1), .zero, .milliseconds(Int64.max)])
    func slowThresholdsAtTheEdges(_ threshold: Duration) async throws {
        let (logger, entries) = recordingLogger()
        let store = MemoryStore(log: StoreLog(logger: logger, slowThreshold: threshold))
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1))
        let slow = entries.snapshot.contains { $0.message.hasSuffix("was slow") }
        #expect(slow == (threshold <= .zero), "a threshold of \(threshold) logs slow transactions: \(slow)")
        await store.close()
    }
}
