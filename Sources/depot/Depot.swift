import ArgumentParser
import Depot
import Foundation

/// `depot`: inspects, imports into, exports from, checks and copies any Depot store, from
/// its URL, without the application's record types (the store's catalog describes them).
@main
struct DepotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "Inspect, import into, export from, check and copy Depot stores.",
        discussion: """
            A store is named by its URL, as an application opens it: sqlite:///path/app.sqlite, \
            lmdb:///path/app, memory:. Records are described by the store's own catalog, so \
            the tool works on any store without the application's types.
            """,
        subcommands: [Info.self, Import.self, Export.self, Check.self, Copy.self, Migrate.self])
}

/// A failure to report in one line on standard error, with exit status 2 (status 1 means a
/// check found problems or a copy does not match).
struct CommandError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs a subcommand's work: a Depot error or a `CommandError` is printed on standard error
/// and ends the process with status 2. `urls` are the store URLs the command was given:
/// their passwords are taken out of whatever is printed, whoever wrote the message.
func reporting(_ urls: String..., body: () async throws -> Void) async throws {
    func redacted(_ message: String) -> String {
        var text = message
        for url in urls { if let parsed = try? StoreURL(url) { text = parsed.redacting(text) } }
        return StoreURL.redactingPasswordsInMessage(text)
    }
    do {
        try await body()
    } catch let error as ExitCode {
        throw error
    } catch let error as DepotError {
        FileHandle.standardError.write(Data("depot: \(redacted(error.message)) (\(error.code))\n".utf8))
        throw ExitCode(2)
    } catch {
        FileHandle.standardError.write(Data("depot: \(redacted("\(error)"))\n".utf8))
        throw ExitCode(2)
    }
}

/// Opens an existing store and lists what it holds. Reading commands open it read-only
/// (`readOnly=true`): every backend then refuses a store that does not exist instead of
/// creating it, and writes nothing (`import` opens it to write).
func openCatalog(_ url: String, readOnly: Bool = true) async throws -> (any CatalogStore, StoreURL) {
    let parsed = try StoreURL(url)
    if let path = parsed.path, !FileManager.default.fileExists(atPath: path) {
        throw CommandError("There is no store at \(path); check the URL (depot never creates a store it was asked to read).")
    }
    let store = try await (readOnly ? parsed.setting("readOnly", to: "true") : parsed).open()
    guard let catalog = store as? any CatalogStore else {
        await store.close()
        throw CommandError("The \(store.backendName) store at \(parsed.redacted) cannot list its entities.")
    }
    return (catalog, parsed)
}

func entity(_ name: String, in store: any CatalogStore) async throws -> EntityHandle {
    let entities = try await store.storedEntities()
    guard let handle = entities.first(where: { $0.name == name }) else {
        let known = entities.map(\.name)
        throw CommandError("The store holds no entity named \(name)\(known.isEmpty ? "; it holds none" : "; it holds: \(known.joined(separator: ", "))").")
    }
    return handle
}

/// A progress bar on standard error, only when it is a terminal.
struct Progress: Sendable {
    let enabled = isatty(2) == 1

    func show(_ text: String) {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K\(text)".utf8))
    }

    /// `label [#########...........]  45%  done/total unit`.
    func show(_ label: String, done: Int, of total: Int, unit: String) {
        show(Self.bar(label, done: done, of: total, unit: unit))
    }

    static func bar(_ label: String, done: Int, of total: Int, unit: String) -> String {
        let width = 30
        let fraction = total > 0 ? min(1, max(0, Double(done) / Double(total))) : 1
        let filled = Int(fraction * Double(width))
        let percent = Int(fraction * 100)
        return "\(label) [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(percent)% \(done)/\(total) \(unit)"
    }

    func done() {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }
}

/// Parses `attribute=key` pairs.
func keyMapping(_ pairs: [String]) throws -> [String: String] {
    var keys: [String: String] = [:]
    for pair in pairs {
        let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw CommandError("--key takes attribute=jsonKey, not '\(pair)'.")
        }
        keys[parts[0]] = parts[1]
    }
    return keys
}

struct Info: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a store's backend, files, entities, attributes, indexes, references and record counts.")

    @Argument(help: "The store's URL.") var url: String
    @Flag(help: "Print JSON instead of text.") var json = false

    func run() async throws {
        try await reporting(url) {
            let (store, parsed) = try await openCatalog(url)
            do {
                try await show(store, parsed)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        }
    }

    func show(_ store: any CatalogStore, _ parsed: StoreURL) async throws {
        var entities: [[String: Any]] = []
        var text = "backend: \(store.backendName)\n"
        for (file, size) in files(of: parsed) {
            text += "file: \(file) (\(size) bytes)\n"
        }
        for handle in try await store.storedEntities() {
            let count = try await store.read { try $0.count(Query(all: handle)) }
            text += "\nentity \(handle.name): \(count) records\n"
            var attributes: [[String: Any]] = []
            for (i, attribute) in handle.entity.attributes.enumerated() {
                var traits: [String] = [attribute.type.rawValue]
                if i == handle.entity.primaryKeyIndex { traits.append("primary key") }
                if attribute.isOptional { traits.append("optional") }
                if attribute.isUnique { traits.append("unique") } else if attribute.isIndexed { traits.append("indexed") }
                if let reference = attribute.reference { traits.append("references \(reference.entity) (on delete \(reference.onDelete.rawValue))") }
                if let value = attribute.defaultValue { traits.append("default \(value.debugLiteral)") }
                text += "  \(attribute.name): \(traits.joined(separator: ", "))\n"
                attributes.append(["name": attribute.name, "traits": traits])
            }
            entities.append(["name": handle.name, "records": count, "attributes": attributes])
        }
        if json {
            let object: [String: Any] = ["backend": store.backendName, "entities": entities]
            let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(text, terminator: "")
        }
    }

    func files(of url: StoreURL) -> [(String, Int)] {
        guard let path = url.path else { return [] }
        var candidates: [String] = []
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            candidates = ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
        } else {
            candidates = [path, path + "-wal", path + "-shm"]
        }
        return candidates.compactMap { file in
            guard let size = (try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? Int else { return nil }
            return (file, size)
        }
    }
}

struct Import: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upsert a JSON array of objects into an entity.",
        discussion: "Errors name the element, the key, the value and the expected type. By default one transaction: nothing is written unless every element is.")

    @Argument(help: "The store's URL.") var url: String
    @Argument(help: "The entity to import into.") var entityName: String
    @Argument(help: "The JSON file (an array of objects).") var file: String
    @Option(name: .customLong("key"), help: "attribute=jsonKey, for a JSON key other than the attribute's name (repeatable).")
    var keys: [String] = []
    @Option(help: "Commit every N elements instead of once at the end.") var batch: Int?
    @Flag(help: "Leave out elements that cannot be converted and list them, instead of failing.") var skipInvalid = false
    @Flag(help: "Treat a member that names no attribute as an error.") var refuseUnknownKeys = false
    @Option(name: .customLong("date-format"), help: "A DateFormatter pattern to read dates with, after ISO 8601 and seconds since 1970 (repeatable).")
    var dateFormats: [String] = []

    func run() async throws {
        try await reporting(url) {
            let (store, _) = try await openCatalog(url, readOnly: false)
            do {
                let handle = try await entity(entityName, in: store)
                var options = JSONImportOptions(
                    keys: try keyMapping(keys), unknownKeys: refuseUnknownKeys ? .refuse : .ignore,
                    invalidElements: skipInvalid ? .skip : .failImport, commit: batch.map { .everyBatch($0) } ?? .atEnd)
                options.dateFormats += dateFormats.map { .formatted($0) }
                let progress = Progress()
                let size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
                let name = entityName
                options.progress = { step in
                    progress.show(name, done: step.bytesRead, of: size, unit: "bytes, \(step.elementsRead) elements")
                }
                let report = try await JSONImport.run(contentsOf: URL(fileURLWithPath: file), into: handle, of: store, options: options)
                progress.done()
                print("\(entityName): \(report.inserted) inserted, \(report.updated) updated, \(report.related) related records, \(report.skipped.count) skipped")
                for problem in report.skipped { print("skipped: \(problem.message)") }
                await store.close()
            } catch {
                await store.close()
                throw error
            }
        }
    }
}

struct Export: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write an entity's records as a JSON array (that `depot import` reads back exactly).")

    @Argument(help: "The store's URL.") var url: String
    @Argument(help: "The entity to export.") var entityName: String
    @Option(name: .shortAndLong, help: "The file to write; standard output when omitted.") var output: String?
    @Option(name: .customLong("key"), help: "attribute=jsonKey, to write an attribute under another key (repeatable).")
    var keys: [String] = []

    func run() async throws {
        try await reporting(url) {
            let (store, _) = try await openCatalog(url)
            do {
                let handle = try await entity(entityName, in: store)
                let mapping = try keyMapping(keys)
                let count: Int
                if let output {
                    let total = try await store.read { try $0.count(Query(all: handle)) }
                    let progress = Progress()
                    let name = entityName
                    count = try await JSONExport.write(
                        Query(all: handle), of: store, keys: mapping,
                        progress: { progress.show(name, done: $0, of: total, unit: "records") },
                        to: URL(fileURLWithPath: output))
                    progress.done()
                    FileHandle.standardError.write(Data("\(entityName): \(count) records written to \(output)\n".utf8))
                } else {
                    count = try await JSONExport.run(Query(all: handle), of: store, keys: mapping) { data in
                        try await StandardOutput.shared.write(data)
                    }
                }
                await store.close()
            } catch {
                await store.close()
                throw error
            }
        }
    }
}

/// Standard output written on a dispatch queue: a pipe's writes block.
actor StandardOutput {
    static let shared = StandardOutput()
    private let queue = DispatchQueue(label: "depot.stdout")

    func write(_ data: Data) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            queue.async {
                do {
                    try FileHandle.standardOutput.write(contentsOf: data)
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}

struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a store: its catalog, references and unique values, and the backend's own files.",
        discussion: "SQLite: integrity_check and foreign_key_check. LMDB: every index against the records. Memory: its trees. Exits with status 1 when a problem is found, 2 when the check itself fails.")

    @Argument(help: "The store's URL.") var url: String

    func run() async throws {
        try await reporting(url) {
            let (store, _) = try await openCatalog(url)
            var problems: [String] = []
            let entities: Int
            do {
                entities = try await store.storedEntities().count
                // The backend's own check first: it names every damaged record, where the
                // checks below stop at the first one they read.
                if let checking = store as? any IntegrityCheckingStore {
                    problems += try await checking.checkIntegrity()
                }
                problems += try await StoreChecks.run(store)
            } catch let error as DepotError where error.code == .storeCorrupted {
                // Damage found while checking is a finding (status 1), not a failure to check.
                await store.close()
                for problem in problems { print("problem: \(problem)") }
                print("problem: \(error.message) (checking stopped there)")
                throw ExitCode(1)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
            if problems.isEmpty {
                print("ok: \(entities) entities checked")
            } else {
                for problem in problems { print("problem: \(problem)") }
                throw ExitCode(1)
            }
        }
    }
}

struct Copy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy every entity of one store into another (for example SQLite to LMDB), then verify counts and checksums.",
        discussion: "Exits with status 1 when an entity's copy does not match its source.")

    @Argument(help: "The source store's URL.") var from: String
    @Argument(help: "The target store's URL (created when missing).") var to: String

    func run() async throws {
        try await reporting(from, to) {
            let (source, _) = try await openCatalog(from)
            let target: any Store
            do {
                target = try await openStore(url: to)
            } catch {
                await source.close()
                throw error
            }
            let progress = Progress()
            let reports: [StoreCopy.EntityReport]
            do {
                var totals: [String: Int] = [:]
                for handle in try await source.storedEntities() {
                    totals[handle.name] = try await source.read { try $0.count(Query(all: handle)) }
                }
                let known = totals
                reports = try await StoreCopy.run(from: source, to: target) { entity, records in
                    progress.show(entity, done: records, of: known[entity] ?? records, unit: "records")
                }
            } catch {
                await source.close()
                await target.close()
                throw error
            }
            progress.done()
            await source.close()
            await target.close()
            var failed = false
            for report in reports {
                let verdict = report.verified ? "verified" : "MISMATCH"
                print("\(report.entity): \(report.sourceRecords) records → \(report.targetRecords), checksum \(String(report.sourceChecksum, radix: 16)) → \(String(report.targetChecksum, radix: 16)): \(verdict)")
                failed = failed || !report.verified
            }
            if failed { throw ExitCode(1) }
        }
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the migration steps a store has applied (--dry-run).",
        discussion: """
            Migration steps are the application's code, so this tool cannot know which are \
            pending: it lists the steps the store records, with their order and time, and the \
            stored entities. To plan and run pending steps, add DepotCommands' MigrateCommand \
            to the application's executable (`app migrate URL --dry-run`), or call \
            Migrator.plan and Migrator.migrate.
            """)

    @Argument(help: "The store's URL.") var url: String
    @Flag(help: "Print the store's migration state and write nothing (required: the steps are the application's).")
    var dryRun = false

    func run() async throws {
        try await reporting(url) {
            guard dryRun else {
                throw CommandError("depot cannot run migration steps: they are the application's code. Run `depot migrate \((try? StoreURL(url))?.redacted ?? "URL") --dry-run` to see what the store has applied, and migrate from the application (Migrator.migrate, or DepotCommands' MigrateCommand in its executable).")
            }
            let (store, _) = try await openCatalog(url)
            do {
                let entities = try await store.storedEntities()
                var text = "dry run, nothing written\n"
                if let ledger = entities.first(where: { $0.name == EntityDescription.migrationLedgerName }) {
                    let steps = try await store.read { transaction in
                        var steps: [(position: Int64, name: String, at: Date?)] = []
                        try transaction.fetch(Query(all: ledger), reserve: { _ in }) { columns in
                            guard case .string(let name) = try columns.value(0), case .int(let position) = try columns.value(1) else { return }
                            let at: Date? = if case .date(let date) = try columns.value(2) { date } else { nil }
                            steps.append((position, name, at))
                        }
                        return steps.sorted { $0.position < $1.position }
                    }
                    for step in steps {
                        text += "applied: \(step.name) (step \(step.position + 1)\(step.at.map { ", \($0.formatted(.iso8601))" } ?? ""))\n"
                    }
                    if steps.isEmpty { text += "no migration steps applied\n" }
                } else {
                    text += "no migration steps applied (the store has no \(EntityDescription.migrationLedgerName) ledger)\n"
                }
                let names = entities.map(\.name).filter { $0 != EntityDescription.migrationLedgerName }.sorted()
                text += "entities: \(names.isEmpty ? "none" : names.joined(separator: ", "))\n"
                text += "pending steps are the application's: run its `migrate --dry-run` (DepotCommands.MigrateCommand) or Migrator.plan\n"
                print(text, terminator: "")
                await store.close()
            } catch {
                await store.close()
                throw error
            }
        }
    }
}
