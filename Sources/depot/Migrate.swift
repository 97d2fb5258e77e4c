import ArgumentParser
import Depot
import Foundation

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
