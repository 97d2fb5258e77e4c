@testable import DepotLMDB
import DepotCore
import DepotTesting
import Foundation

/// Writes the committed seed corpus (`DepotFuzz seeds Fuzz/Corpus`): a few valid inputs
/// per target, so the fuzzer starts from the formats' real shapes.
enum Seeds {
    static func write(to folder: String) -> CInt {
        var seeds: [String: [String: [UInt8]]] = [:]
        seeds["url"] = Dictionary(uniqueKeysWithValues: [
            "memory:", "sqlite::memory:", "sqlite:///srv/app.sqlite?durability=full&readers=8&busyTimeout=2s",
            "sqlite:data/app.sqlite?slowThreshold=250ms", "lmdb:///var/lib/app/db?mapSize=64MiB&maxReaders=126&durability=relaxed",
            "lmdb:db?mapSize=1GB&slowThreshold=2m", "lmdb:///a%20b?durability=unsafe",
        ].enumerated().map { ("seed-\($0.offset)", Array($0.element.utf8)) })
        seeds["request"] = [
            "compare": [1, 1, 0, 250, 5, 1, 0, 1, 3],
            "and-or": [7, 3, 1, 6, 2, 200, 30, 5, 13, 1, 84, 9, 4, 14, 1, 0, 7, 1, 1, 1, 2],
            "chain": [10, 0, 40, 1, 4, 13],
            "limits": [2, 0, 3, 1, 1, 2, 0, 1, 7, 1, 1],
        ]
        var records: [String: [UInt8]] = [:]
        let types = Sample.entity.description.attributes.map(\.type)
        for (i, row) in SampleRows.rows.enumerated() {
            var encoded: [UInt8] = []
            RecordFormat.encode(row, into: &encoded)
            let typeBytes = types.map { UInt8(AttributeType.allCases.firstIndex(of: $0)!) }
            records["sample-\(i)"] = [UInt8(types.count)] + typeBytes + encoded
        }
        seeds["record"] = records
        seeds["keys"] = ["int": [0, 1, 0, 5, 1, 1, 3], "string": [3, 1, 3, 84, 111, 109, 0, 1, 2, 84, 111, 2], "double": [1, 1, 4, 0, 1, 5]]
        seeds["cursor"] = cursorSeeds()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var schemas: [String: [UInt8]] = [:]
        for description in [Sample.entity.description, CatRecord.entity.description, Account.entity.description] {
            schemas["stored-\(description.name)"] = Array(try! encoder.encode(StoredEntity(schemaVersion: 1, recordFormat: 1, entity: description)))
            schemas["entity-\(description.name)"] = Array(try! encoder.encode(description))
        }
        seeds["schema"] = schemas
        for (target, files) in seeds {
            let directory = (folder as NSString).appendingPathComponent(target)
            try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            for (name, bytes) in files {
                FileManager.default.createFile(atPath: (directory as NSString).appendingPathComponent(name), contents: Data(bytes))
            }
        }
        return 0
    }

    /// Real cursors' tokens: the pages of `Sample` records in an order over every attribute
    /// type, nil among the values, read from a memory store.
    private static func cursorSeeds() -> [String: [UInt8]] {
        let tokens = blockingAsync { () async throws -> [String] in
            let store = MemoryStore()
            let samples = Controller<Sample, Sample>(store: store)
            try await samples.save(SampleRows.samples)
            let set = samples.results.sorted(by: \.optionalString, ascending: false).sorted(by: \.data).sorted(by: \.uuid)
                .sorted(by: \.date).sorted(by: \.double).sorted(by: \.bool).sorted(by: \.int).sorted(by: \.string)
            var tokens: [String] = []
            var next = try await set.page(size: 1).next
            while let cursor = next, tokens.count < 4 {
                tokens.append(cursor.description)
                next = try await set.page(size: 1, after: cursor).next
            }
            await store.close()
            return tokens
        }
        guard case .success(let found) = tokens else { return [:] }
        return Dictionary(uniqueKeysWithValues: found.enumerated().map { ("page-\($0.offset)", Array($0.element.utf8)) })
    }
}
