import DepotCore
import Foundation

/// Error codes reachable from the public API on every backend.
enum ErrorChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("conversion failures name the entity and key and skip nothing") { store in
            let fragile = Controller<Fragile, FragileRecord>(store: store)
            try await fragile.save([Fragile(id: 1, label: "fine"), Fragile(id: 2, label: "refuse-to-load")])
            do {
                _ = try await fragile.fetchAll()
                throw ConformanceFailure(message: "fetchAll must not skip a record it cannot convert", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expectEqual(error.code, .conversionFailed, "code")
                try expect(error.message.contains("Fragile") && error.message.contains("2"), "message names entity and key: \(error.message)")
            }
            try await expectEqual(fragile.fetchOne(id: 1)?.label, "fine", "a convertible record still loads")
            try await expectError(.conversionFailed, "toManaged throws") {
                try await fragile.save([Fragile(id: 3, label: "ok"), Fragile(id: 4, label: "refuse-to-store")])
            }
            try await expectEqual(fragile.exists(id: 3), false, "nothing of the failed batch")
        },
        ConformanceCheck("an invalid entity is refused when the store first sees it") { store in
            let broken = Controller<BrokenRecord, BrokenRecord>(store: store)
            try await expectError(.invalidSchema, "duplicate attribute names") {
                try await broken.save(BrokenRecord(id: 1, value: 1))
            }
            let bad = [
                EntityDescription(name: "NoKey", attributes: [.init(name: "a", type: .int64)], primaryKeyIndex: 3),
                EntityDescription(name: "1st", attributes: [.init(name: "a", type: .int64)], primaryKeyIndex: 0),
                EntityDescription(name: "Quote\"d", attributes: [.init(name: "a", type: .int64)], primaryKeyIndex: 0),
                EntityDescription(name: "OptionalKey", attributes: [.init(name: "a", type: .int64, isOptional: true)], primaryKeyIndex: 0),
                EntityDescription(name: "DoubleKey", attributes: [.init(name: "a", type: .double)], primaryKeyIndex: 0),
                EntityDescription(
                    name: "BadDefault",
                    attributes: [.init(name: "a", type: .int64), .init(name: "b", type: .string, defaultValue: .int(1))],
                    primaryKeyIndex: 0),
                EntityDescription(name: "depot_meta", attributes: [.init(name: "a", type: .int64)], primaryKeyIndex: 0),
                EntityDescription(name: "Empty", attributes: [], primaryKeyIndex: 0),
            ]
            for entity in bad {
                try await expectError(.invalidSchema, "entity \(entity.name)") { try await store.register([entity]) }
            }
        },
        ConformanceCheck("an unregistered entity is refused inside a transaction") { store in
            try await expectError(.invalidSchema, "read of an unregistered entity") {
                try await store.read { try $0.count(Query(all: CatRecord.entity.description)) }
            }
        },
        ConformanceCheck("a closed store refuses new work") { store in
            let cats = try await seededCats(store)
            await store.close()
            try await expectError(.closed, "fetch after close") { try await cats.fetchAll() }
            try await expectError(.closed, "save after close") { try await cats.save(Cat(id: 1, name: "x", weight: 1, age: 1)) }
            await store.close()
        },
    ]
}
