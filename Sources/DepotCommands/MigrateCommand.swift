public import ArgumentParser
public import Depot
import Foundation

/// The arguments of a `migrate` command: the store's URL and `--dry-run`.
public struct MigrateOptions: ParsableArguments {
    /// The store's URL, as `openStore(url:)` reads it.
    @Argument(help: "The store's URL (sqlite:///path, lmdb:///path, or the DEPOT_STORE_URL the app uses).")
    public var url: String

    /// Whether to print the plan and write nothing.
    @Flag(help: "Print what would run (the pending steps and the automatic changes) and write nothing.")
    public var dryRun = false

    /// Options as the argument parser fills them in.
    public init() {}
}

/// A `migrate` subcommand for an application's own executable, which knows its
/// `Migrator`'s steps and its record types (the `depot` tool does not: steps are code).
///
/// ```swift
/// struct Migrate: MigrateCommand {
///     static let migrator = AppMigrations.migrator
///     static let records: [any ManagedRecord.Type] = [Owner.self, Pet.self, Visit.self]
///     @OptionGroup var options: MigrateOptions
/// }
/// ```
///
/// `app migrate sqlite:///var/lib/app.sqlite --dry-run` prints the plan; without
/// `--dry-run` it runs the pending steps and prints their names. A failure prints the
/// `DepotError` on standard error and exits with status 2.
public protocol MigrateCommand: AsyncParsableCommand {
    /// The application's steps, in order.
    static var migrator: Migrator { get }
    /// The record types the application registers after the steps.
    static var records: [any ManagedRecord.Type] { get }
    /// Declare it as `@OptionGroup var options: MigrateOptions`.
    var options: MigrateOptions { get }
}

extension MigrateCommand {
    /// The subcommand's name, `migrate`, and its abstract.
    public static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "migrate",
            abstract: "Run the pending migration steps of a store, or print them with --dry-run.")
    }

    /// Migrates (or plans) and prints the result; a `DepotError` exits with status 2.
    public func run() async throws {
        do {
            print(try await Self.perform(options))
        } catch let error as DepotError {
            let message = (try? StoreURL(options.url))?.redacting(error.message) ?? StoreURL.redactingPasswordsInMessage(error.message)
            FileHandle.standardError.write(Data("migrate: \(message) (\(error.code))\n".utf8))
            throw ExitCode(2)
        }
    }

    /// Opens the store (read-only for `--dry-run`: nothing is created or changed), plans or
    /// migrates, closes it, and returns what to print.
    public static func perform(_ options: MigrateOptions) async throws -> String {
        let url = try StoreURL(options.url)
        let store = try await (options.dryRun ? url.setting("readOnly", to: "true") : url).open()
        do {
            let text: String
            if options.dryRun {
                text = "dry run, nothing written\n" + (try await migrator.plan(store, registering: records)).description
            } else {
                let ran = try await migrator.migrate(store, registering: records)
                text = ran.isEmpty ? "nothing to do: every step is applied" : ran.map { "applied: \($0)" }.joined(separator: "\n")
            }
            await store.close()
            return text
        } catch {
            await store.close()
            throw error
        }
    }
}
