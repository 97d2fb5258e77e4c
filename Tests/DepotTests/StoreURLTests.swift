import Configuration
import Depot
import DepotTesting
import Foundation
import Testing

@Suite("Choosing a backend by URL")
struct StoreURLTests {
    @Test(arguments: [
        ("memory:", StoreURL.Backend.memory, nil as String?),
        ("sqlite:///var/lib/app/app.sqlite", .sqlite, "/var/lib/app/app.sqlite"),
        ("sqlite:relative/app.sqlite", .sqlite, "relative/app.sqlite"),
        ("sqlite::memory:", .sqlite, nil),
        ("lmdb:///srv/db", .lmdb, "/srv/db"),
        ("lmdb:data/db", .lmdb, "data/db"),
        ("SQLite:///with%20space/a.sqlite", .sqlite, "/with space/a.sqlite"),
    ])
    func schemesAndPaths(url: String, backend: StoreURL.Backend, path: String?) throws {
        let parsed = try StoreURL(url)
        #expect(parsed.backend == backend)
        #expect(parsed.path == path)
    }

    @Test func postgresURLsKeepTheServerPart() throws {
        let url = try StoreURL("postgresql://app:s3cret@db.internal:5432/shop?schema=tenant_1&readers=8&sslmode=require&statementTimeout=30s")
        #expect(url.backend == .postgres)
        #expect(url.path == nil)
        #expect(url.server == "//app:s3cret@db.internal:5432/shop")
        #expect(url[option: "schema"] == "tenant_1" && url[option: "sslmode"] == "require" && url[option: "readers"] == "8")
        #expect(try StoreURL(url.unredacted) == url, "the unredacted text parses back: \(url.unredacted)")
        #expect(url.description == url.redacted && !url.description.contains("s3cret"), "\(url.description)")
        #expect(try StoreURL("postgres:///app?host=/run/postgresql&port=5433").server == "///app")
        // A primary and its standbys: one port per host.
        #expect(try StoreURL("postgres:///app?host=/run/pg1,/run/pg2&port=5432,5433")[option: "port"] == "5432,5433")
        #expect(url.redacted == url.unredacted.replacingOccurrences(of: "s3cret", with: "***"), "\(url.redacted)")
        #expect(try StoreURL("postgres://db/app?password=hunter2").redacted.contains("password=***"))
    }

    #if PostgreSQL
    /// A real server (started by `make test`): the URL's options reach the store.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] != nil))
    func postgresOptionsReachTheStore() async throws {
        let base = try #require(ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"])
        let schema = "url_\(UUID().uuidString.prefix(8).lowercased())"
        let store = try #require(try await openStore(url: "\(base)&schema=\(schema)&readers=3&durability=normal&statementTimeout=5s&retries=4") as? PostgresStore)
        #expect(store.options == PostgresStore.Options(schema: schema, readers: 3, durability: .normal, statementTimeout: .seconds(5), retries: 4))
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 500))
        #expect(try await cats.count(Request(\.age > 10)) == Cat.workload(count: 500).filter { $0.age > 10 }.count)
        await store.close()
        let tuned = try #require(try await openStore(url: "\(base)&schema=\(schema)&consistency=eventual&standbyWait=250ms") as? PostgresStore)
        #expect(tuned.options.consistency == .eventual && tuned.options.standbyWait == .milliseconds(250))
        await tuned.close()
        let unprepared = try #require(try await openStore(url: "\(base)&schema=\(schema)&preparedStatements=false") as? PostgresStore)
        #expect(unprepared.options.preparedStatements == false)
        #expect(try await Controller<Cat, CatRecord>(store: unprepared).count() == 500)
        await unprepared.close()
        await #expect(throws: DepotError.self) { try await openStore(url: "\(base)&schema=\(schema)&consistency=strong") }
        await #expect(throws: DepotError.self) { try await openStore(url: "\(base)&schema=\(schema)&preparedStatements=no") }
    }
    #else
    /// Without the trait, a postgres: URL is refused before any connection, saying how to
    /// turn the backend on.
    @Test func postgresNeedsTheTrait() async throws {
        let error = await #expect(throws: DepotError.self) { try await openStore(url: "postgres://app:s3cret@db.invalid/app") }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains("PostgreSQL trait") == true, "\(String(describing: error))")
        #expect(error?.message.contains("s3cret") == false)
    }
    #endif

    @Test func optionsAreTypedAndValidated() throws {
        let sqlite = try StoreURL("sqlite:///x.sqlite?durability=full&readers=8&busyTimeout=250ms")
        #expect(sqlite[option: "durability"] == "full")
        #expect(sqlite[option: "readers"] == "8")
        let lmdb = try StoreURL("lmdb:///d?mapSize=1GiB&maxReaders=16&durability=relaxed")
        #expect(lmdb[option: "mapSize"] == "1GiB")
        #expect(StoreURL.parseSize("1GiB") == 1 << 30)
        #expect(StoreURL.parseSize("64KiB") == 65_536)
        #expect(StoreURL.parseSize("10MB") == 10_000_000)
        #expect(StoreURL.parseSize("12") == 12)
        #expect(StoreURL.parseDuration("5s") == .seconds(5))
        #expect(StoreURL.parseDuration("250ms") == .milliseconds(250))
        #expect(StoreURL.parseDuration("2m") == .seconds(120))
    }

    @Test(arguments: [
        ("mysql://db/app", "Unknown store scheme"),
        ("postgres:app", "not a PostgreSQL URL"),
        ("postgres://db/app?sslmode=maybe", "use one of: disable, allow"),
        ("postgres://db/app?readers=0", "whole number from 1 to 64"),
        ("postgres://db/app?mapSize=1GiB", "Unknown option 'mapSize'"),
        ("postgres://db/app?schema=", "without NUL"),
        ("nothing", "no scheme"),
        ("memory:/x", "takes no path"),
        ("sqlite:", "no path"),
        ("sqlite://host/app.sqlite", "names a host"),
        ("sqlite:///a.sqlite?durabilty=full", "Unknown option 'durabilty'"),
        ("sqlite:///a.sqlite?durability=sometimes", "use one of: normal, full"),
        ("sqlite:///a.sqlite?readers=0", "whole number from 1 to 64"),
        ("sqlite:///a.sqlite?readers=lots", "whole number"),
        ("sqlite:///a.sqlite?busyTimeout=soon", "not a duration"),
        ("lmdb:///d?mapSize=huge", "not a size"),
        ("lmdb:///d?mapSize=99999999999TiB", "not a size"),
        ("lmdb:///d?readers=4", "Accepted options: mapSize"),
        ("memory:?durability=full", "Accepted options: slowThreshold"),
        ("sqlite:///a.sqlite?readers=2&readers=3", "given twice"),
        ("sqlite:///a.sqlite?adopt=yes", "use one of: false, true"),
        ("sqlite:///a.sqlite?adopt", "use one of: false, true"),
        ("lmdb:///d?adopt=true", "Unknown option 'adopt'"),
    ])
    func malformedURLsNameTheProblem(url: String, fragment: String) {
        do {
            _ = try StoreURL(url)
            Issue.record("\(url) should be refused")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains(fragment), "\(error.message)")
        }
    }

    /// The same body against every backend, chosen only by URL.
    @Test(arguments: ["memory:", "sqlite:DIR/app.sqlite?durability=full&readers=2", "sqlite::memory:", "lmdb:DIR/db?mapSize=64KiB"])
    func sameCodeEveryBackend(template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-url-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await openStore(url: template.replacingOccurrences(of: "DIR", with: directory.path))
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 2_000))
        #expect(try await cats.count(Request(\.age > 10)) == Cat.workload(count: 2_000).filter { $0.age > 10 }.count)
        await store.close()
    }

    @Test func optionsReachTheBackend() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-url-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let sqlite = try #require(
            try await openStore(url: "sqlite://\(directory.path)/a.sqlite?durability=full&readers=3&busyTimeout=2s&createDirectories=true") as? SQLiteStore)
        #expect(sqlite.options == SQLiteStore.Options(durability: .full, readers: 3, busyTimeout: .seconds(2), createDirectories: true))
        await sqlite.close()
        let lmdb = try #require(try await openStore(url: "lmdb://\(directory.path)/db?mapSize=1MiB&maxReaders=9&durability=relaxed") as? LMDBStore)
        #expect(!lmdb.options.createDirectories)
        #expect(lmdb.options.mapSize == 1 << 20)
        #expect(lmdb.options.maxReaders == 9)
        #expect(lmdb.options.durability == .relaxed)
        await lmdb.close()
        #expect(try await openStore(url: "memory:") is MemoryStore)
    }

    /// Issue #40: `sqlite:/nonexistent/dir/x.sqlite` created `/nonexistent/dir/`. A store
    /// URL under a missing directory is refused, naming it, with nothing created, unless it
    /// says `createDirectories=true`.
    @Test(arguments: ["sqlite://DIR/x.sqlite", "lmdb://DIR/db"])
    func aMissingDirectoryIsRefusedUnlessTheURLAsksForIt(template: String) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("depot-url-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let missing = root.appendingPathComponent("nonexistent/dir").path
        let url = template.replacingOccurrences(of: "DIR", with: missing)
        do {
            let store = try await openStore(url: url)
            await store.close()
            Issue.record("\(url) was opened under a missing directory")
        } catch {
            #expect(error.code == .io && error.message.contains(missing), "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty, "nothing was created")

        let store = try await openStore(url: url + "?createDirectories=true")
        await store.close()
        #expect(FileManager.default.fileExists(atPath: missing))
        #expect(throws: DepotError.self) { try StoreURL(url + "?createDirectories=yes") }
    }

    /// Issue #11, item 4: another program's SQLite database is refused untouched unless the
    /// URL (or the configuration) says `adopt=true`.
    @Test func adoptOpensAnotherProgramsDatabaseOnlyWhenAskedTo() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-url-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("theirs.sqlite").path
        let created = try ProcessLaunch.run("/usr/bin/sqlite3", [path, "CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL)"])
        #expect(created.exit.succeeded, "\(created.stderr)")
        let before = try Data(contentsOf: URL(fileURLWithPath: path))

        for url in ["sqlite://\(path)", "sqlite://\(path)?adopt=false"] {
            do {
                let store = try await openStore(url: url)
                await store.close()
                Issue.record("\(url) opened another program's database")
            } catch {
                #expect(error.code == .storeCorrupted && error.message.contains("adopt=true"), "\(error)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "the file is left as it was")
        }

        let config = ConfigReader(provider: InMemoryProvider(values: ["depot.store.url": .init(.string("sqlite://\(path)"), isSecret: false), "depot.store.adopt": true]))
        #expect(try StoreURL(config: config)?[option: "adopt"] == "true", "a JSON-style boolean is accepted")
        let environment = ConfigReader(provider: EnvironmentVariablesProvider(environmentVariables: ["DEPOT_STORE_URL": "sqlite://\(path)", "DEPOT_STORE_ADOPT": "true"]))
        #expect(try StoreURL(config: environment)?[option: "adopt"] == "true")

        let store = try #require(try await openStore(url: "sqlite://\(path)?adopt=true") as? SQLiteStore)
        #expect(store.options.adoptForeignDatabase)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4.5, age: 3))
        await store.close()
    }
}
