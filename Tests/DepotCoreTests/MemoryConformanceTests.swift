import DepotCore
import DepotTesting
import Testing

/// The shared conformance suite against the reference backend.
@Suite("MemoryStore conformance")
struct MemoryConformanceTests {
    @Test(arguments: ConformanceSuite.checks)
    func conformance(_ check: ConformanceCheck) async throws {
        try await check.runAndClose(MemoryStore())
    }
}

@Suite("MemoryStore invariants")
struct MemoryInvariantTests {
    /// Random writes, reads and rollbacks; the store's internal maps stay consistent.
    @Test func invariantsHoldUnderRandomWork() async throws {
        let store = MemoryStore()
        let accounts = Controller<Account, Account>(store: store)
        var generator = SplitMix64(seed: 11)
        for round in 0..<300 {
            let id = "a\(generator.next() % 40)"
            let owner = "o\(generator.next() % 60)"
            let nickname: String? = generator.next() % 3 == 0 ? nil : "n\(generator.next() % 50)"
            switch generator.next() % 5 {
            case 0: try? await accounts.insert(Account(id: id, owner: owner, nickname: nickname))
            case 1: try? await accounts.update(Account(id: id, owner: owner, nickname: nickname, balance: Int64(round)))
            case 2: try await accounts.delete(id: id)
            case 3:
                _ = try? await accounts.operation { context in
                    try context.save(Account(id: id, owner: owner, nickname: nickname))
                    if round % 2 == 0 { throw DepotError(.backend, "roll back on purpose") }
                }
            default: _ = try await accounts.fetchAll(Request().sorted(by: \.owner))
            }
            try store.checkInvariants()
        }
        #expect(try await accounts.count() > 0)
    }

    /// Ascending saves wait in the working table and enter the tree together; every read,
    /// removal, write below the largest key and unique check in between must see them.
    @Test func ascendingSavesMixedWithOtherWorkInOneOperation() async throws {
        let store = MemoryStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.workload(count: 10, seed: 1).map { Cat(id: $0.id + 100, name: $0.name, weight: $0.weight, age: $0.age) })
        let seen = try await cats.operation { context -> [Int] in
            try context.save((1_000..<3_000).map { Cat(id: Int64($0), name: "n\($0)", weight: 1, age: $0 % 16) })
            let count = try context.count()
            let found = try context.fetchOne(id: 2_500) != nil ? 1 : 0
            try context.insert(Cat(id: 3_000, name: "next", weight: 1, age: 1))
            let duplicate: Int
            do {
                try context.insert(Cat(id: 2_999, name: "dup", weight: 1, age: 1))
                duplicate = 0
            } catch let error as DepotError where error.code == .duplicateKey {
                duplicate = 1
            }
            _ = try context.delete(id: 3_000)
            try context.save(Cat(id: 3_000, name: "again", weight: 1, age: 2))
            try context.save(Cat(id: 5, name: "below", weight: 1, age: 3))
            let sorted = try context.fetchAll(Request().sorted(by: \.id, ascending: false).limit(1)).first?.id
            return [count, found, duplicate, Int(sorted ?? -1)]
        }
        #expect(seen == [2_010, 1, 1, 3_000])
        try store.checkInvariants()
        #expect(try await cats.count() == 2_012)
        #expect(try await cats.fetchOne(id: 3_000)?.name == "again")

        // Unique values of rows still waiting are checked like any others.
        let accounts = Controller<Account, Account>(store: store)
        await #expect(throws: DepotError.self) {
            try await accounts.operation { context in
                try context.save(Account(id: "a1", owner: "same"))
                try context.save(Account(id: "a2", owner: "same"))
            }
        }
        #expect(try await accounts.count() == 0)
        try await accounts.save([Account(id: "b1", owner: "x"), Account(id: "b2", owner: "y")])
        try store.checkInvariants()
        #expect(try await accounts.fetchAll().map(\.owner) == ["x", "y"])
    }
}
