import DepotCore
import Foundation

/// Schema registration and additive migration within one store.
enum SchemaChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("an additive change keeps every record and fills defaults") { store in
            let cats = try await seededCats(store)
            _ = try await cats.count()
            let grown = Controller<CatRecordV2, CatRecordV2>(store: store)
            let migrated = try await grown.fetchAll()
            try expectEqual(migrated.count, fixtureCats.count, "every record kept")
            try expect(migrated.allSatisfy { $0.color == nil && $0.lives == 9 }, "new attributes filled: \(migrated.prefix(2))")
            try expectEqual(migrated.map(\.name), fixtureCats.sorted { $0.id < $1.id }.map(\.name), "old values kept")
            try await grown.save(CatRecordV2(id: 100, name: "Nova", weight: 1, age: 1, color: "grey", lives: 7))
            try await expectEqual(grown.fetchAll(Request(\.color == "grey")).map(\.id), [100], "query on a new attribute")
            try await expectEqual(grown.count(Request(\.lives == 9)), fixtureCats.count, "query on a defaulted attribute")
        },
        ConformanceCheck("an incompatible change is refused and changes nothing") { store in
            let cats = try await seededCats(store)
            _ = try await cats.count()
            let retyped = Controller<CatRecordRetyped, CatRecordRetyped>(store: store)
            do {
                _ = try await retyped.fetchAll()
                throw ConformanceFailure(message: "a retyped attribute must be refused", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expectEqual(error.code, .schemaMismatch, "code")
                try expect(error.message.contains("age"), "the message names the attribute: \(error.message)")
            }
            try await expectEqual(cats.fetchAll().count, fixtureCats.count, "records untouched")
        },
    ]
}
