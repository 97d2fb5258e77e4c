import ArgumentParser
import Depot
import Foundation

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
