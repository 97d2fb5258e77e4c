import DepotCore
import Foundation

/// What a write closure learns from each of its writes, and what it does with it: the
/// closure's next step depends on the answer, so a store that answers before the write
/// has run (PostgreSQL holds back a closure's first write to send it as one statement)
/// must never let a closure act on a wrong answer.
enum WriteAnswerChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("a save answers whether it inserted, alternating inserts and updates") { store in
            let cats = Cats(store: store)
            let entity = try await cats.registeredEntity()
            var answers: [Bool] = []
            for (id, name) in [(1, "a"), (1, "b"), (2, "c"), (2, "d"), (2, "e"), (3, "f"), (4, "g"), (3, "h")] as [(Int64, String)] {
                let row = Row([.int(id), .string(name), .double(1), .int(1)])
                answers.append(try await store.write { try $0.upsert(row, into: entity) })
            }
            try expectEqual(answers, [true, false, true, false, false, true, true, false], "what each save answered")
            try await expectEqual(cats.fetchAll().map(\.name), ["b", "e", "h", "g"], "what the saves left")
        },
        ConformanceCheck("a closure acts on what its first write answered") { store in
            let cats = try await seededCats(store)
            // Caught duplicate: the closure goes on to update instead.
            let outcome = try await cats.operation { context -> String in
                do {
                    try context.insert(Cat(id: 5, name: "Dup", weight: 1, age: 1))
                    return "inserted"
                } catch let error as DepotError where error.code == .duplicateKey {
                    try context.update(Cat(id: 5, name: "Instead", weight: 1, age: 1))
                    return "updated"
                }
            }
            try expectEqual(outcome, "updated", "the closure saw the duplicate")
            try await expectEqual(cats.fetchOne(id: 5)?.name, "Instead", "the update it made instead")
            // A delete of nothing answers false; the closure inserts in its place.
            let deleted = try await cats.operation { context -> Bool in
                let deleted = try context.delete(id: 404)
                if !deleted { try context.insert(Cat(id: 404, name: "Placeholder", weight: 1, age: 1)) }
                return deleted
            }
            try expectEqual(deleted, false, "a delete of a missing record")
            try await expectEqual(cats.fetchOne(id: 404)?.name, "Placeholder", "the insert made in its place")
            // An update of nothing throws notFound; caught, the closure saves instead.
            try await cats.operation { context in
                do { try context.update(Cat(id: 405, name: "Missing", weight: 1, age: 1)) } catch let error as DepotError where error.code == .notFound {
                    try context.save(Cat(id: 405, name: "Saved", weight: 1, age: 1))
                }
            }
            try await expectEqual(cats.fetchOne(id: 405)?.name, "Saved", "the save made instead of the update")
        },
        ConformanceCheck("a closure's reads after its first write see that write") { store in
            let cats = try await seededCats(store)
            let seen = try await cats.operation { context -> [Int] in
                try context.insert(Cat(id: 77, name: "New", weight: 1, age: 99))
                let count = try context.count()
                let found = try context.fetchOne(id: 77) == nil ? 0 : 1
                let matching = try context.fetchAll(Request(\.age == 99)).count
                return [count, found, matching]
            }
            try expectEqual(seen, [fixtureCats.count + 1, 1, 1], "reads inside the closure")
            // A closure that throws after its first write keeps nothing of it.
            do {
                try await cats.operation { context in
                    try context.save(Cat(id: 78, name: "Doomed", weight: 1, age: 1))
                    throw TransactionChecks.Abort()
                }
            } catch is TransactionChecks.Abort {}
            try await expectEqual(cats.exists(id: 78), false, "a write whose closure threw")
        },
    ]
}
