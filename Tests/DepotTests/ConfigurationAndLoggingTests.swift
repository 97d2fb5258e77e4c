import Configuration
import Depot
import DepotTesting
import Foundation
import InMemoryLogging
import Logging
import Testing

import DepotSQLite

@Suite("Configuration, logging and lifecycle")
struct ConfigurationAndLoggingTests {
    /// A fresh, existing directory (a store's directory must exist; see createDirectories).
    func temporaryDirectory() -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-config-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    @Test func environmentNamesTheStore() throws {
        #expect(try StoreURL.fromEnvironment([:]) == nil)
        let url = try #require(try StoreURL.fromEnvironment(["DEPOT_STORE_URL": "lmdb:///srv/db?mapSize=1GiB"]))
        #expect(url.backend == .lmdb)
        #expect(url[option: "mapSize"] == "1GiB")
        #expect(throws: DepotError.self) { try StoreURL.fromEnvironment(["DEPOT_STORE_URL": "redis://x"]) }
    }

    @Test func configReaderChoosesTheBackendAndItsOptions() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = ConfigReader(
            provider: EnvironmentVariablesProvider(environmentVariables: [
                "DEPOT_STORE_URL": "sqlite://\(directory.path)/app.sqlite?durability=normal",
                "DEPOT_STORE_DURABILITY": "full",
                "DEPOT_STORE_READERS": "3",
                "DEPOT_STORE_BUSY_TIMEOUT": "2s",
            ]))
        let store = try #require(try await openStore(config: config) as? SQLiteStore)
        #expect(store.options == SQLiteStore.Options(durability: .full, readers: 3, busyTimeout: .seconds(2)))
        // The settings reach SQLite itself: read them back from the connection.
        let settings = try await store.pragmaSettings()
        #expect(settings.journalMode == "wal")
        #expect(settings.synchronous == 2)
        await store.close()
    }

    @Test func configReaderRefusesBadOptionsAndMissingURLs() throws {
        let bad = ConfigReader(provider: InMemoryProvider(values: ["depot.store.url": "lmdb:///tmp/x", "depot.store.mapSize": "lots"]))
        #expect(throws: DepotError.self) { try StoreURL(config: bad) }
        let none = ConfigReader(provider: InMemoryProvider(values: [:]))
        #expect(try StoreURL(config: none) == nil)
        do {
            _ = try openStoreBlocking(config: none)
            Issue.record("opening without a URL should fail")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains("depot.store.url"))
        }
    }

    @Test func lmdbMapSizeReachesTheEnvironment() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await openStore(url: "lmdb://\(directory.path)?mapSize=8MiB")
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 100))
        await store.close()
        let output = try ProcessLaunch.run("/usr/bin/mdb_stat", ["-e", directory.path]).stdout
        #expect(output.contains("Map size: \(8 << 20)"), "\(output)")
    }

    /// Every level the store promises, captured in memory, for each backend.
    @Test(arguments: ["memory:", "sqlite:DIR/log.sqlite", "lmdb:DIR/db"])
    func logsAtEveryLevel(template: String) async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "depot.test") { _ in handler }
        logger.logLevel = .trace
        let store = try await openStore(url: template.replacingOccurrences(of: "DIR", with: directory.path) + "?slowThreshold=0ms", logger: logger)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1))
        _ = try await cats.fetchAll()
        await #expect(throws: DepotError.self) { try await cats.insert(Cat(id: 1, name: "Tom", weight: 1, age: 1)) }
        await store.close()
        let entries = handler.entries
        func has(_ level: Logger.Level, _ fragment: String) -> Bool {
            entries.contains { $0.level == level && "\($0.message)".contains(fragment) }
        }
        #expect(has(.info, "opened"), "\(entries.map { "\($0.level) \($0.message)" })")
        #expect(has(.info, "entity created"))
        #expect(has(.info, "closed"))
        #expect(has(.warning, "slow"), "a zero threshold makes every transaction slow")
        let failure = entries.first { "\($0.message)".contains("failed") }
        #expect(failure?.level == .debug, "a duplicate key is the caller's failure: debug, not error")
        #expect(failure?.metadata["depot.code"] == .string("duplicateKey"))
        #expect(!entries.contains { $0.level >= .error })
        if template.hasPrefix("sqlite") { #expect(has(.trace, "SQL")) }
        if template.hasPrefix("lmdb") { #expect(has(.trace, "LMDB write transaction committed")) }
    }

    @Test func transactionsAtDebug() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "depot.test") { _ in handler }
        logger.logLevel = .debug
        let store = try await openStore(url: "memory:?slowThreshold=1m", logger: logger)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1))
        #expect(try await cats.count() == 1)
        await store.close()
        let debug = handler.entries.filter { $0.level == .debug }.map { "\($0.message)" }
        #expect(debug.contains("Depot write transaction"), "\(debug)")
        #expect(debug.contains("Depot read transaction"), "\(debug)")
        #expect(!handler.entries.contains { $0.level == .trace }, "trace is off at debug level")
    }

    @Test func quietByDefault() async throws {
        let store = try await openStore(url: "memory:")
        #expect(store is MemoryStore)
        #expect((store as? MemoryStore)?.log.logger.logLevel == StoreLog.disabled.logger.logLevel)
    }
}
