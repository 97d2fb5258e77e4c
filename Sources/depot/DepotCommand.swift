import ArgumentParser
import Depot
import Foundation

/// `depot`: inspects, imports into, exports from, checks and copies any Depot store, from
/// its URL, without the application's record types (the store's catalog describes them).
@main
struct DepotCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "depot",
        abstract: "Inspect, explain, import into, export from, check and copy Depot stores.",
        discussion: """
            A store is named by its URL, as an application opens it: sqlite:///path/app.sqlite, \
            lmdb:///path/app, memory:. Records are described by the store's own catalog, so \
            the tool works on any store without the application's types.
            """,
        subcommands: [Info.self, Explain.self, Import.self, Export.self, Check.self, Copy.self, Migrate.self])
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
func openCatalog(_ url: String, readOnly: Bool = true) async throws -> (any Store, StoreURL) {
    let parsed = try StoreURL(url)
    if let path = parsed.path, !FileManager.default.fileExists(atPath: path) {
        throw CommandError("There is no store at \(path); check the URL (depot never creates a store it was asked to read).")
    }
    let store = try await (readOnly ? parsed.setting("readOnly", to: "true") : parsed).open()
    return (store, parsed)
}

func entity(_ name: String, in store: any Store) async throws -> EntityHandle {
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
