import DepotCore
import DepotTesting
import Foundation
import Testing

@testable import DepotLMDB

/// Rewrites the stored schema of `Cat` in a closed store through LMDB itself.
func rewriteStoredCat(_ directory: String, _ change: @escaping @Sendable (inout StoredEntity) -> Void) async throws {
    let store = try LMDBStore(directory: directory)
    try await Controller<Cat, CatRecord>(store: store).save(Cat.fixtures)
    try await store.write { transaction in
        guard let t = transaction as? LMDBTransaction, var stored = try t.readStoredEntity("Cat") else {
            Issue.record("no stored Cat schema")
            return
        }
        change(&stored)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try t.put(t.metaDBI, Catalog.entityKey("Cat"), Array(try encoder.encode(stored)), context: "test")
    }
    await store.close()
}

@Suite("LMDB catalog: stored schemas are checked and followed")
struct LMDBCatalogTests {
    @Test("a stored schema that decodes but is invalid is refused with storeCorrupted", arguments: [0, 1, 2, 3, 4])
    func invalidStoredSchema(_ kind: Int) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        try await rewriteStoredCat(directory.path) { stored in
            switch kind {
            case 0: stored.entity.primaryKeyIndex = 99
            case 1: stored.entity.primaryKeyIndex = -1
            case 2: stored.entity.attributes = []
            case 3: stored.entity.attributes.append(stored.entity.attributes[0])
            default: stored.schemaVersion = Int.max
            }
        }
        let store = try LMDBStore(directory: directory.path)
        await expectDepotError(.storeCorrupted) { try await Controller<Cat, CatRecord>(store: store).fetchAll() }
        await store.close()
    }
}
