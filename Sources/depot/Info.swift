import ArgumentParser
import Depot
import Foundation

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

    func show(_ store: any Store, _ parsed: StoreURL) async throws {
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
            for index in handle.entity.indexes {
                text += "  \(index.isUnique ? "unique index" : "index") (\(index.summary))\n"
            }
            entities.append([
                "name": handle.name, "records": count, "attributes": attributes,
                "indexes": handle.entity.indexes.map { ["components": $0.summary, "unique": $0.isUnique] as [String: Any] },
            ])
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
