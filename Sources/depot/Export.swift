import ArgumentParser
import Depot
import Foundation

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
