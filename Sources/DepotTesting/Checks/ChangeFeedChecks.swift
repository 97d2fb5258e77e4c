import DepotCore
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// The feed of committed changes.
enum ChangeFeedChecks {
    final class Collector: Sendable {
        let batches = NIOLockedValueBox<[CommittedChanges]>([])
        func add(_ batch: CommittedChanges) { batches.withLockedValue { $0.append(batch) } }
        var all: [CommittedChanges] { batches.withLockedValue { $0 } }
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("committed writes appear in the change feed, net per record") { store in
            let cats = try await seededCats(store)
            let accounts = Accounts(store: store)
            _ = try await accounts.count()
            let collector = Collector()
            let subscription = store.changes.observe(entities: ["Cat"]) { collector.add($0) }
            try await cats.save(Cat(id: 100, name: "New", weight: 1, age: 1))
            try await cats.update(Cat(id: 1, name: "Changed", weight: 1, age: 1))
            try await cats.delete(id: 2)
            try await cats.operation { context in
                try context.insert(Cat(id: 101, name: "Brief", weight: 1, age: 1))
                try context.delete(id: 101)
                try context.delete(id: 3)
                try context.insert(Cat(id: 3, name: "Reborn", weight: 1, age: 1))
                try context.save(Cat(id: 102, name: "Kept", weight: 1, age: 1))
            }
            do {
                try await cats.operation { context in
                    try context.insert(Cat(id: 103, name: "Rolled back", weight: 1, age: 1))
                    throw TransactionChecks.Abort()
                }
            } catch is TransactionChecks.Abort {}
            try await accounts.save(Account(id: "x", owner: "y"))
            try await cats.save(Cat(id: 104, name: "Last", weight: 1, age: 1))
            let batches = collector.all
            let kinds = batches.map { $0.changes.map { "\($0.kind.rawValue) \($0.key)" } }
            try expectEqual(
                kinds,
                [["insert 100"], ["update 1"], ["delete 2"], ["update 3", "insert 102"], ["insert 104"]],
                "changes per commit")
            try expect(zip(batches, batches.dropFirst()).allSatisfy { $0.sequence < $1.sequence }, "sequence increases")
            subscription.cancel()
            try await cats.save(Cat(id: 105, name: "Unseen", weight: 1, age: 1))
            try expectEqual(collector.all.count, batches.count, "nothing after cancel")
        }
    ]
}
