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
            try store._checkInvariants()
        }
        #expect(try await accounts.count() > 0)
    }
}
