import DepotCore
import Foundation
import NIOConcurrencyHelpers

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
        ConformanceCheck("work submitted before close() runs to its end, and observers hear every commit before their feed ends") { store in
            // Submitted back to back and then closed: most of this work is still queued when
            // close() begins. A store admits work when it is submitted, so close() waits for
            // all of it; none is refused for having been queued.
            let cats = try await seededCats(store)
            let handle = try await cats.registeredEntity()
            let count = 40
            let failures = NIOLockedValueBox<[String]>([])
            let heard = NIOLockedValueBox<Set<Value>>([])
            let feedEnded = NIOLockedValueBox(false)
            let subscription = store.changes.observe(entities: ["Cat"], onFinish: { feedEnded.withLockedValue { $0 = true } }) { batch in
                heard.withLockedValue { keys in for change in batch.changes { keys.insert(change.key) } }
            }
            let finished = DispatchGroup()
            for n in 0..<count {
                var row = Row()
                try CatRecord(id: 1000 + Int64(n), name: "Queued \(n)", weight: 1, age: 1).encode(into: &row)
                let frozen = row
                finished.enter()
                store.submitWrite({ try $0.insert(frozen, into: handle) }) { result in
                    if case .failure(let error) = result { failures.withLockedValue { $0.append("write \(n): \(error)") } }
                    finished.leave()
                }
                finished.enter()
                store.submitRead({ try $0.count(Query(all: handle)) }) { result in
                    if case .failure(let error) = result { failures.withLockedValue { $0.append("read \(n): \(error)") } }
                    finished.leave()
                }
            }
            await store.close()
            try expect(feedEnded.withLockedValue { $0 }, "the change feed has ended when close() returns")
            let all = DispatchSemaphore(value: 0)
            finished.notify(queue: .global()) { all.signal() }
            try expect(await signalled(all, within: 120), "every submitted read and write completes")
            try expectEqual(failures.withLockedValue { $0 }, [], "work submitted before close()")
            let written = Set((0..<count).map { Value.int(1000 + Int64($0)) })
            try expect(written.isSubset(of: heard.withLockedValue { $0 }), "observers heard every write committed before close()")
            subscription.cancel()
        },
    ]
}
