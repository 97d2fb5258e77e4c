import ArgumentParser
import Depot
import DepotCommands
import DepotTesting
import Foundation
import Testing

/// The `depot` command, run as a built binary against real stores of each backend on files.
/// (A `memory:` store lives in one process, so the command can only open it empty.)
@Suite("The depot command")
struct DepotCommandTests {
    static let binary = ProcessLaunch.builtProduct("depot")

    func depot(_ arguments: String...) throws -> (status: Int32, stdout: String, stderr: String) {
        try depot(arguments)
    }

    func depot(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        guard let binary = Self.binary else { throw DepotError(.invalidConfiguration, "depot was not built next to the test runner; run swift build") }
        let result = try ProcessLaunch.run(binary, arguments)
        return (result.exit.status, result.stdout, result.stderr)
    }

    /// Two dogs and three walks, in a store at `url`.
    func seed(_ url: String) async throws {
        let store = try await openStore(url: url)
        try await Controller<Dog, Dog>(store: store).save([Dog(id: 1, name: "Rex"), Dog(id: 2, name: "Fido")])
        try await Controller<Walk, Walk>(store: store).save([
            Walk(id: 10, dogID: 1, position: 0, minutes: 30), Walk(id: 11, dogID: 1, position: 1, minutes: 45),
            Walk(id: 12, dogID: 2, position: 0, minutes: 5),
        ])
        await store.close()
    }

    @Test(arguments: [("sqlite://DIR/a.sqlite", "lmdb://DIR/b"), ("lmdb://DIR/a", "sqlite://DIR/b.sqlite")])
    func everySubcommandOnRealStores(source template: String, target targetTemplate: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-command-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = template.replacingOccurrences(of: "DIR", with: directory.path)
        let target = targetTemplate.replacingOccurrences(of: "DIR", with: directory.path)
        try await seed(source)

        let info = try depot("info", source)
        #expect(info.status == 0, "\(info.stderr)")
        #expect(info.stdout.contains("entity Dog: 2 records"), "\(info.stdout)")
        #expect(info.stdout.contains("entity Walk: 3 records"), "\(info.stdout)")
        #expect(info.stdout.contains("dogID: int64, indexed, references Dog (on delete cascade)"), "\(info.stdout)")
        #expect(info.stdout.contains("file: "), "\(info.stdout)")

        let check = try depot("check", source)
        #expect(check.status == 0 && check.stdout.contains("ok: 2 entities checked"), "\(check.stdout)\(check.stderr)")

        let copy = try depot("copy", source, target)
        #expect(copy.status == 0, "\(copy.stdout)\(copy.stderr)")
        #expect(copy.stdout.contains("Dog: 2 records → 2") && copy.stdout.contains("Walk: 3 records → 3"), "\(copy.stdout)")
        #expect(copy.stdout.components(separatedBy: ": verified").count == 3, "\(copy.stdout)")
        let copied = try await openStore(url: target)
        #expect(try await Controller<Walk, Walk>(store: copied).fetchAll().map(\.minutes) == [30, 45, 5])
        await copied.close()

        let exportFile = directory.appendingPathComponent("walks.json").path
        let export = try depot("export", target, "Walk", "--output", exportFile, "--key", "minutes=duration")
        #expect(export.status == 0 && export.stderr.contains("3 records written"), "\(export.stderr)")
        let exported = try String(contentsOfFile: exportFile, encoding: .utf8)
        #expect(exported.contains("\"duration\":45"), "\(exported)")
        let stdout = try depot("export", source, "Dog")
        let dogs = try JSONSerialization.jsonObject(with: Data(stdout.stdout.utf8)) as? [[String: Any]]
        #expect(dogs?.count == 2 && dogs?.first?["name"] as? String == "Rex", "\(stdout.stdout)")

        let importFile = directory.appendingPathComponent("more.json")
        try Data(#"[{"id": 13, "dogID": 2, "position": "1", "minutes": 20}, {"id": 14, "dogID": {"id": 3, "name": "Nova"}, "position": 0, "minutes": "long"}]"#.utf8).write(to: importFile)
        let refused = try depot("import", source, "Walk", importFile.path)
        #expect(refused.status != 0 && refused.stderr.contains("Element 1") && refused.stderr.contains("\"long\""), "\(refused.stderr)")
        let skipped = try depot("import", source, "Walk", importFile.path, "--skip-invalid")
        #expect(skipped.status == 0 && skipped.stdout.contains("1 inserted, 0 updated, 0 related records, 1 skipped"), "\(skipped.stdout)\(skipped.stderr)")
        let missing = directory.appendingPathComponent("typo.sqlite").path
        let absent = try depot("info", "sqlite://\(missing)")
        #expect(absent.status == 2 && absent.stderr.contains("There is no store at"), "\(absent.stderr)")
        #expect(!FileManager.default.fileExists(atPath: missing), "nothing was created")
        let unknown = try depot("import", source, "Cat", importFile.path)
        #expect(unknown.status != 0 && unknown.stderr.contains("no entity named Cat"), "\(unknown.stderr)")
        let reimport = try depot("import", source, "Walk", exportFile, "--key", "minutes=duration", "--batch", "2")
        #expect(reimport.status == 0 && reimport.stdout.contains("0 inserted, 3 updated"), "\(reimport.stdout)\(reimport.stderr)")
    }

    /// `depot copy` moves a store from SQLite to PostgreSQL and back, verified, and `info` and
    /// `check` work on the PostgreSQL store (with the server `make test` starts).
    @Test(.enabled(if: ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] != nil))
    func copyBetweenSQLiteAndPostgreSQL() async throws {
        let server = try #require(ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-pg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = "sqlite://\(directory.path)/a.sqlite"
        let postgres = "\(server)&schema=copy_\(UUID().uuidString.prefix(8).lowercased())"
        let back = "sqlite://\(directory.path)/back.sqlite"
        try await seed(source)
        let there = try depot("copy", source, postgres)
        #expect(there.status == 0 && there.stdout.components(separatedBy: ": verified").count == 3, "\(there.stdout)\(there.stderr)")
        let info = try depot("info", postgres)
        #expect(info.status == 0 && info.stdout.contains("backend: postgres") && info.stdout.contains("entity Walk: 3 records"), "\(info.stdout)\(info.stderr)")
        let check = try depot("check", postgres)
        #expect(check.status == 0 && check.stdout.contains("ok: 2 entities checked"), "\(check.stdout)\(check.stderr)")
        let home = try depot("copy", postgres, back)
        #expect(home.status == 0 && home.stdout.components(separatedBy: ": verified").count == 3, "\(home.stdout)\(home.stderr)")
        let store = try await openStore(url: back)
        #expect(try await Controller<Walk, Walk>(store: store).fetchAll().map(\.minutes) == [30, 45, 5])
        await store.close()
    }

    /// Issue #35, item 9: the reading commands open stores read-only, so a mistyped URL
    /// creates nothing: an empty SQLite file stays empty, an empty directory gets no LMDB
    /// environment, and a mistyped PostgreSQL schema is not created.
    @Test(arguments: ["sqlite://DIR/e.sqlite"])
    func explainShowsTheIndexARequestReads(_ template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-explain-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = template.replacingOccurrences(of: "DIR", with: directory.path)
        try await seed(url)
        let plan = try depot("explain", url, "Walk", "dogID == 1 && minutes > 10", "--sort=-minutes", "--limit", "5", "--analyze")
        #expect(plan.status == 0, "\(plan.stderr)")
        #expect(plan.stdout.hasPrefix("Walk: index (dogID)"), "\(plan.stdout)")
        #expect(plan.stdout.contains("sorted afterwards") && plan.stdout.contains("read 2 rows"), "\(plan.stdout)")
        let json = try depot("explain", url, "Walk", "--json")
        #expect(json.status == 0 && json.stdout.contains("\"access\" : \"scan\""), "\(json.stdout)\(json.stderr)")
        let typo = try depot("explain", url, "Walk", "dogId == 1")
        #expect(typo.status == 2 && typo.stderr.contains("Walk has no attribute 'dogId'"), "\(typo.stderr)")
        let badValue = try depot("explain", url, "Walk", "minutes == \"ten\"")
        #expect(badValue.status == 2 && badValue.stderr.contains("expected an integer"), "\(badValue.stderr)")
    }

    @Test func readingCommandsCreateNothing() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-readonly-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let empty = directory.appendingPathComponent("empty.sqlite").path
        #expect(FileManager.default.createFile(atPath: empty, contents: Data()))
        let emptyDirectory = directory.appendingPathComponent("lmdb")
        try FileManager.default.createDirectory(at: emptyDirectory, withIntermediateDirectories: true)
        var urls = ["sqlite://\(empty)", "lmdb://\(emptyDirectory.path)"]
        var schema: String?
        if let server = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] {
            schema = "typo_\(UUID().uuidString.prefix(8).lowercased())"
            urls.append("\(server)&schema=\(schema ?? "")")
        }
        let target = "sqlite://\(directory.path)/target.sqlite"
        for url in urls {
            for arguments in [["info", url], ["check", url], ["export", url, "Dog"], ["migrate", url, "--dry-run"], ["copy", url, target]] {
                let result = try depot(arguments)
                #expect(result.status == 2, "\(arguments): \(result.stdout)\(result.stderr)")
                #expect(result.stderr.contains("never created"), "\(arguments): \(result.stderr)")
            }
            let plan = try MigrateOptions.parse([url, "--dry-run"])
            await #expect(throws: DepotError.self) { try await AppMigrate.perform(plan) }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: empty)).isEmpty, "the empty file stays empty")
        #expect(try FileManager.default.contentsOfDirectory(atPath: emptyDirectory.path).isEmpty, "no LMDB files")
        #expect(!FileManager.default.fileExists(atPath: "\(directory.path)/target.sqlite"), "copy stopped before opening its target")
        if let schema, let server = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] {
            do {
                let store = try await openStore(url: "\(server)&schema=\(schema)&readOnly=true")
                await store.close()
                Issue.record("the schema \(schema) was created")
            } catch {
                #expect(error.message.contains("has no schema \(schema)"), "\(error)")
            }
        }
    }

    /// Issue #35, item 13: LMDB records another program overwrote are findings of `check`
    /// (status 1, each named by entity and key), not a failure to check (status 2).
    @Test func checkReportsEveryDamagedLMDBRecord() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-damage-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("db").path
        try await seed("lmdb://\(path)")
        // Dogs 1 and 2 (keys: the id's big-endian bits with the sign flipped) get a value
        // that is no record: mdb_load overwrites existing keys.
        let dump = try ProcessLaunch.run("/usr/bin/mdb_dump", ["-s", "Dog", path])
        #expect(dump.exit.status == 0, "\(dump.stderr)")
        var lines = dump.stdout.components(separatedBy: "\n")
        for key in [" 8000000000000001", " 8000000000000002"] {
            let at = try #require(lines.firstIndex(of: key), "\(dump.stdout)")
            lines[at + 1] = " ff00"
        }
        let damaged = directory.appendingPathComponent("damaged.txt")
        try Data(lines.joined(separator: "\n").utf8).write(to: damaged)
        let load = try ProcessLaunch.run("/usr/bin/mdb_load", ["-s", "Dog", "-f", damaged.path, path])
        #expect(load.exit.status == 0, "\(load.stderr)")

        let check = try depot("check", "lmdb://\(path)")
        #expect(check.status == 1, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("problem: Dog record with key 1 is damaged"), "\(check.stdout)")
        #expect(check.stdout.contains("problem: Dog record with key 2 is damaged"), "\(check.stdout)")
        #expect(check.stderr.isEmpty, "\(check.stderr)")
    }

    @Test func checkFindsWhatAnotherProgramBroke() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("broken.sqlite").path
        try await seed("sqlite://\(path)")
        // The sqlite3 shell leaves foreign keys off, so it can leave a walk without its dog.
        let shell = try ProcessLaunch.run("/usr/bin/sqlite3", [path, "INSERT INTO Walk (id, dogID, position, minutes) VALUES (99, 42, 0, 1);"])
        #expect(shell.exit.status == 0, "\(shell.stderr)")
        let check = try depot("check", "sqlite://\(path)")
        #expect(check.status == 1, "\(check.stdout)")
        #expect(check.stdout.contains("Walk.dogID refers to 1 Dog key(s) that do not exist: 42"), "\(check.stdout)")
        #expect(check.stdout.contains("SQLite foreign_key_check"), "\(check.stdout)")
    }

    @Test(arguments: ["sqlite://DIR/m.sqlite", "lmdb://DIR/m"])
    func migrateDryRunListsAppliedSteps(template: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-migrate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = template.replacingOccurrences(of: "DIR", with: directory.path)
        try await seed(url)
        let none = try depot("migrate", url, "--dry-run")
        #expect(none.status == 0 && none.stdout.contains("no migration steps applied"), "\(none.stdout)\(none.stderr)")
        #expect(none.stdout.contains("entities: Dog, Walk"), "\(none.stdout)")

        #expect(try await AppMigrate.perform(try MigrateOptions.parse([url])).contains("applied: longer walks"))
        let after = try depot("migrate", url, "--dry-run")
        #expect(after.status == 0 && after.stdout.contains("applied: longer walks (step 1, 20"), "\(after.stdout)\(after.stderr)")
        #expect(!after.stdout.contains("depot_migrations,") && after.stdout.contains("dry run, nothing written"), "\(after.stdout)")
        let refused = try depot("migrate", url)
        #expect(refused.status == 2 && refused.stderr.contains("the application's code"), "\(refused.stderr)")
    }

    /// An application's own `migrate` command: plans without writing, then migrates once.
    @Test func applicationMigrateCommand() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-app-migrate-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = "sqlite://\(directory.path)/app.sqlite"
        try await seed(url)
        let parsed = try #require(try AppMigrate.parseAsRoot([url, "--dry-run"]) as? AppMigrate)
        #expect(parsed.options.dryRun && parsed.options.url == url)
        let plan = try await AppMigrate.perform(parsed.options)
        #expect(plan.contains("dry run, nothing written") && plan.contains("pending: longer walks"), "\(plan)")
        let store = try await openStore(url: url)
        #expect(try await Controller<Walk, Walk>(store: store).fetchAll().map(\.minutes) == [30, 45, 5], "the dry run wrote nothing")
        await store.close()
        #expect(try await AppMigrate.perform(MigrateOptions.parse([url])) == "applied: longer walks")
        #expect(try await AppMigrate.perform(MigrateOptions.parse([url])) == "nothing to do: every step is applied")
        let migrated = try await openStore(url: url)
        #expect(try await Controller<Walk, Walk>(store: migrated).fetchAll().map(\.minutes) == [40, 55, 15])
        await migrated.close()
        let replan = try await AppMigrate.perform(MigrateOptions.parse([url, "--dry-run"]))
        #expect(replan.contains("applied: longer walks") && !replan.contains("pending:"), "\(replan)")
        await #expect(throws: DepotError.self) { try await AppMigrate.perform(MigrateOptions.parse(["nosuch://x"])) }
    }
}

/// What an application's executable declares to offer `app migrate URL [--dry-run]`.
struct AppMigrate: MigrateCommand {
    static var migrator: Migrator {
        var migrator = Migrator()
        migrator.registerStep("longer walks") { step in
            let walks = try step.context(Walk.self)
            for walk in try walks.fetchAll() {
                try walks.save(Walk(id: walk.id, dogID: walk.dogID, position: walk.position, minutes: walk.minutes + 10))
            }
        }
        return migrator
    }
    static var records: [any ManagedRecord.Type] { [Dog.self, Walk.self] }
    @OptionGroup var options: MigrateOptions
}
