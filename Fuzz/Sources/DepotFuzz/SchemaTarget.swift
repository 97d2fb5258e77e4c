import DepotCore
@testable import DepotLMDB
import DepotTesting
import Foundation

/// Stored-schema JSON, the one piece of a store file that is parsed rather than read as
/// bytes. As an `EntityDescription` it must decode and validate or be refused; a valid one
/// must plan migrations to and from `Sample` and register in a memory store without a trap.
/// As the LMDB catalog's `StoredEntity` it is written under `entity:Sample` in a write
/// transaction that is then rolled back, and the catalog registers `Sample` against it:
/// reading, comparing and migrating the rows written under the real schema must give a
/// `DepotError` (`storeCorrupted`, `schemaMismatch`) or succeed.
enum SchemaTarget {
    struct Rollback: Error {}

    static func run(_ bytes: UnsafeRawBufferPointer) {
        let json = Data(bytes)
        if let description = try? JSONDecoder().decode(EntityDescription.self, from: json) {
            checkDescription(description)
        }
        if (try? JSONDecoder().decode(StoredEntity.self, from: json)) != nil {
            registerAgainst(Array(json))
        }
    }

    static func checkDescription(_ description: EntityDescription) {
        do {
            try description.validate()
        } catch {
            return
        }
        _ = description.primaryKey
        var registry = EntityRegistry<Void>()
        _ = Query(all: registry.set(description, ()))
        let sample = Sample.entity.description
        _ = try? SchemaMigration.plan(from: description, to: sample)
        _ = try? SchemaMigration.plan(from: sample, to: description)
        let store = MemoryStore()
        if case .failure(let error) = blocking({ store.submitRegistration([description], completion: $0) }) {
            expectDepotError(error, "registering \(description)")
        }
    }

    static func registerAgainst(_ json: [UInt8]) {
        let entity = Sample.entity.description
        let result = blocking { completion in
            Stores.lmdb.submitWrite({ transaction in
                guard let t = transaction as? LMDBTransaction else { return }
                try t.put(t.metaDBI, Catalog.entityKey(entity.name), json, context: "fuzz")
                _ = try t.register(entity, current: nil)
                throw Rollback()
            }, completion: completion)
        }
        if case .failure(let error) = result, !(error is Rollback) {
            expectDepotError(error, "registering Sample against the stored schema \(String(decoding: json, as: UTF8.self))")
        }
    }
}
