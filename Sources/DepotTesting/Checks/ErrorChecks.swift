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
        ConformanceCheck("a handle another store issued is refused inside a transaction") { store in
            let other = MemoryStore()
            let foreign = try await other.register(CatRecord.entity.description)
            await other.close()
            try await expectError(.invalidSchema, "read through another store's handle") {
                try await store.read { try $0.count(Query(all: foreign)) }
            }
            try await expectError(.invalidSchema, "write through another store's handle") {
                var row = Row()
                try CatRecord(id: 1, name: "Tom", weight: 1, age: 1).encode(into: &row)
                let frozen = row
                try await store.write { try $0.insert(frozen, into: foreign) }
            }
        },
        ConformanceCheck("registering again returns the same handle; a migration makes a new one and refuses the old layout") { store in
            let v1 = EntityDescription(name: "Versioned", attributes: [.init(name: "id", type: .int64), .init(name: "name", type: .string)], primaryKeyIndex: 0)
            let first = try await store.register(v1)
            let again = try await store.register(v1)
            try expectEqual(first, again, "registering an unchanged entity again")
            try expectEqual(first.name, "Versioned", "the handle names its entity")
            try await store.write { try $0.insert(Row([.int(1), .string("a")]), into: first) }
            var v2 = v1
            v2.attributes.append(.init(name: "rank", type: .int64, defaultValue: .int(7)))
            let second = try await store.register(v2)
            try expect(second != first, "a migration issues a new handle")
            try expectEqual(second.slot, first.slot, "a migration keeps the slot")
            try await expectError(.schemaMismatch, "writing the old layout through the old handle") {
                try await store.write { try $0.insert(Row([.int(2), .string("b")]), into: first) }
            }
            try await store.write { try $0.insert(Row([.int(2), .string("b"), .int(1)]), into: second) }
            let rows = try await store.read { transaction in
                var rows: [Row] = []
                try transaction.fetchRows(Query(all: second)) { rows.append($0) }
                return rows
            }
            try expectEqual(rows, [Row([.int(1), .string("a"), .int(7)]), Row([.int(2), .string("b"), .int(1)])], "rows after the migration")
        },
        ConformanceCheck("a closed store refuses new work") { store in
            let cats = try await seededCats(store)
            await store.close()
            try await expectError(.closed, "fetch after close") { try await cats.fetchAll() }
            try await expectError(.closed, "lookup by key after close") { try await cats.fetchOne(id: 1) }
            try await expectError(.closed, "save after close") { try await cats.save(Cat(id: 1, name: "x", weight: 1, age: 1)) }
            await store.close()
        },
    ]
}
