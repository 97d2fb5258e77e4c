import DepotCore
import Foundation

/// Round trips, upsert, insert, update and delete.
enum CRUDChecks {
    static let all: [ConformanceCheck] = [
        ConformanceCheck("round trip of every attribute type, typical values") { store in
            let samples = Samples(store: store)
            let typical = Sample(
                id: 1, int: 42, int32: -7, int16: 12, double: 3.25, bool: true, string: "Tom",
                data: Data([1, 2, 3]), date: Date(timeIntervalSince1970: 1_700_000_000.5),
                uuid: UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!, optionalInt: 5,
                optionalDouble: 0.5, optionalBool: false, optionalString: "x", optionalData: Data([0]),
                optionalDate: Date(timeIntervalSinceReferenceDate: 1), optionalUUID: UUID())
            let empty = Sample(id: 2)
            try await samples.save([typical, empty])
            try await expectEqual(samples.fetchOne(id: 1)?.row, typical.row, "typical sample")
            try await expectEqual(samples.fetchOne(id: 2)?.row, empty.row, "sample with every optional nil")
        },
        ConformanceCheck("round trip of extreme values") { store in
            let samples = Samples(store: store)
            let megabyteString = String(repeating: "ab€🐈", count: 1 << 17)
            let megabyteData = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            let extremes: [Sample] = [
                Sample(id: Int64.min, int: Int.min, int32: .min, int16: .min, double: -.infinity, string: "a\0b\0"),
                Sample(id: Int64.max, int: Int.max, int32: .max, int16: .max, double: .infinity, string: megabyteString),
                Sample(id: 0, double: .nan, data: megabyteData, optionalDouble: .nan),
                Sample(id: -1, double: -0.5, string: "e\u{301} é 🐈‍⬛ ﷽ \u{FEFF}", data: Data([0, 0, 255])),
                Sample(
                    id: 3, double: .leastNonzeroMagnitude, date: Date(timeIntervalSince1970: -2_208_988_800.25),
                    optionalString: "", optionalData: Data(), optionalDate: .distantPast),
                Sample(id: 4, double: .greatestFiniteMagnitude, date: .distantFuture, optionalInt: Int64.min),
            ]
            try await samples.save(extremes)
            for sample in extremes {
                let stored = try await samples.fetchOne(id: sample.id)
                try expectEqual(stored?.row, sample.row, "sample \(sample.id)")
            }
            let nan = try await samples.fetchOne(id: 0)
            try expect(nan?.double.isNaN == true && nan?.optionalDouble?.isNaN == true, "NaN must read back as NaN")
            try await expectEqual(samples.fetchOne(id: Int64.max)?.string.utf8.count, megabyteString.utf8.count, "1 MB string")
            try await expectEqual(samples.count(), extremes.count, "count")
        },
        ConformanceCheck("fetchOne and exists for present and missing keys") { store in
            let cats = try await seededCats(store)
            try await expectEqual(cats.fetchOne(id: 5), fixtureCats[0], "fetchOne(5)")
            try await expectEqual(cats.fetchOne(id: 500), nil, "fetchOne(500)")
            try await expectEqual(cats.exists(id: 2), true, "exists(2)")
            try await expectEqual(cats.exists(id: -2), false, "exists(-2)")
        },
        ConformanceCheck("save upserts in place and keeps the count") { store in
            let cats = try await seededCats(store)
            let renamed = Cat(id: 5, name: "Thomas", weight: 4.5, age: 4)
            try await cats.save(renamed)
            try await expectEqual(cats.fetchOne(id: 5), renamed, "saved cat")
            try await expectEqual(cats.count(), fixtureCats.count, "count after upsert")
            try await cats.save([Cat(id: 100, name: "New", weight: 1, age: 1), renamed])
            try await expectEqual(cats.count(), fixtureCats.count + 1, "count after batch upsert")
        },
        ConformanceCheck("insert refuses a duplicate key and inserts nothing of a failed batch") { store in
            let cats = try await seededCats(store)
            try await expectError(.duplicateKey, "insert existing key") {
                try await cats.insert(Cat(id: 5, name: "Dup", weight: 1, age: 1))
            }
            try await expectError(.duplicateKey, "batch with a duplicate inside") {
                try await cats.insert([
                    Cat(id: 200, name: "A", weight: 1, age: 1), Cat(id: 201, name: "B", weight: 1, age: 1),
                    Cat(id: 200, name: "C", weight: 1, age: 1),
                ])
            }
            try await expectEqual(cats.exists(id: 200), false, "nothing of the failed batch")
            try await expectEqual(cats.fetchOne(id: 5)?.name, "Tom", "original kept")
            try await cats.insert(Cat(id: 300, name: "Fresh", weight: 1, age: 1))
            try await expectEqual(cats.exists(id: 300), true, "a fresh insert")
        },
        ConformanceCheck("update changes in place and refuses a missing record") { store in
            let cats = try await seededCats(store)
            let heavier = Cat(id: 2, name: "Felix", weight: 8, age: 7)
            try await cats.update(heavier)
            try await expectEqual(cats.fetchOne(id: 2), heavier, "updated")
            try await expectEqual(cats.count(), fixtureCats.count, "count after update")
            try await expectError(.notFound, "update of a missing key") {
                try await cats.update(Cat(id: 999, name: "Ghost", weight: 1, age: 1))
            }
            try await expectError(.notFound, "batch update with one missing") {
                try await cats.update([Cat(id: 3, name: "Changed", weight: 1, age: 1), Cat(id: 998, name: "G", weight: 1, age: 1)])
            }
            try await expectEqual(cats.fetchOne(id: 3)?.name, "Zed", "nothing of the failed batch")
            try await expectEqual(cats.exists(id: 999), false, "update never inserts")
        },
        ConformanceCheck("delete by object, by id and by predicate") { store in
            let cats = try await seededCats(store)
            try await expectEqual(cats.delete(fixtureCats[0]), true, "delete existing object")
            try await expectEqual(cats.delete(fixtureCats[0]), false, "delete it again")
            try await expectEqual(cats.delete(id: 2), true, "delete(id: 2)")
            try await expectEqual(cats.delete(id: 2), false, "delete(id: 2) again")
            let removed = try await cats.deleteAll(where: \.age == 7)
            try expectEqual(removed, 2, "deleteAll(age == 7)")
            let left = try await cats.fetchAll().map(\.id)
            try expectEqual(left, [1, 4, 6, 7, 8, 9], "remaining")
            let oldest = try await cats.deleteAll(where: Request().sorted(by: \.age, ascending: false).limit(2))
            try expectEqual(oldest, 2, "delete the two oldest")
            try await expectEqual(cats.fetchAll().map(\.id), [4, 6, 7, 9], "after deleting the two oldest (ties by key)")
        },
        ConformanceCheck("save of many objects is one call and keeps all of them") { store in
            let cats = Cats(store: store)
            let many = Cat.workload(count: 5_000, seed: 7)
            try await cats.save(many)
            try await expectEqual(cats.count(), 5_000, "count")
            let back = try await cats.fetchAll()
            try expectEqual(back, many, "all cats back in key order")
        },
        ConformanceCheck("a type that is its own record needs no conversion") { store in
            let accounts = Accounts(store: store)
            let account = Account(id: "acc-1", owner: "ann", nickname: nil, balance: 10)
            try await accounts.save(account)
            try await expectEqual(accounts.fetchOne(id: "acc-1"), account, "account")
        },
        ConformanceCheck("unique attributes are enforced, nil excepted") { store in
            let accounts = Accounts(store: store)
            try await accounts.insert([
                Account(id: "a", owner: "ann"), Account(id: "b", owner: "bob"),
                Account(id: "c", owner: "cy", nickname: "c"),
            ])
            // Every backend refuses with the same error, the one DepotError words for a
            // unique attribute, naming the attribute and the refused value (no engine's
            // own message besides).
            let entity = try await accounts.registeredEntity().entity.name
            let taken = DepotError.duplicateUnique(entity: entity, attribute: "owner", value: .string("ann"))
            try await expectError(taken, "insert with a taken unique value") {
                try await accounts.insert(Account(id: "d", owner: "ann"))
            }
            try await expectError(taken, "update to a taken unique value") {
                try await accounts.update(Account(id: "b", owner: "ann"))
            }
            let nicknameTaken = DepotError.duplicateUnique(entity: entity, attribute: "nickname", value: .string("c"))
            try await expectError(nicknameTaken, "optional unique taken") {
                try await accounts.save(Account(id: "e", owner: "eve", nickname: "c"))
            }
            try await accounts.save(Account(id: "a", owner: "ann", balance: 5))
            try await accounts.operation { context in
                try context.delete(id: "a")
                try context.insert(Account(id: "d", owner: "ann"))
                try context.update(Account(id: "b", owner: "bea"))
                try context.insert(Account(id: "f", owner: "bob"))
            }
            try await expectEqual(accounts.fetchAll().map(\.owner), ["bea", "cy", "ann", "bob"], "owners after the swap")
            try await expectEqual(accounts.count(.init(.isNil(\.nickname))), 3, "several nil nicknames")
        },
        ConformanceCheck("a write that catches a refused statement goes on, and the rest of it commits") { store in
            let accounts = Accounts(store: store)
            try await accounts.insert([Account(id: "a", owner: "ann"), Account(id: "b", owner: "bob")])
            let codes = try await accounts.operation { context -> [String] in
                let attempts: [() throws -> Void] = [
                    { try context.insert(Account(id: "a", owner: "zed")) },  // a taken key
                    { try context.insert(Account(id: "c", owner: "ann")) },  // a taken unique value
                    { try context.update(Account(id: "b", owner: "ann")) },  // updated to a taken one
                    { try context.update(Account(id: "zz", owner: "zz")) },  // no such record
                    { try context.save(Account(id: "d", owner: "bob")) },  // saved with a taken one
                ]
                var codes: [String] = []
                for attempt in attempts {
                    do {
                        try attempt()
                        codes.append("accepted")
                    } catch let error as DepotError {
                        codes.append(error.code.name)
                    }
                }
                try context.insert(Account(id: "e", owner: "eve"))
                try context.update(Account(id: "b", owner: "bea"))
                return codes
            }
            try expectEqual(codes, ["duplicateKey", "duplicateKey", "duplicateKey", "notFound", "duplicateKey"], "each statement refused alone")
            try await expectEqual(accounts.fetchAll().map(\.owner).sorted(), ["ann", "bea", "eve"], "what the write did besides commits")
        },
        ConformanceCheck("string primary keys are byte-exact") { store in
            let accounts = Accounts(store: store)
            let composed = "caf\u{E9}"
            let decomposed = "cafe\u{301}"
            try await accounts.insert([Account(id: composed, owner: "1"), Account(id: decomposed, owner: "2")])
            try await expectEqual(accounts.count(), 2, "two distinct keys")
            try await expectEqual(accounts.fetchOne(id: decomposed)?.owner, "2", "decomposed key")
            try await expectEqual(accounts.fetchOne(id: composed)?.owner, "1", "composed key")
        },
    ]
}
