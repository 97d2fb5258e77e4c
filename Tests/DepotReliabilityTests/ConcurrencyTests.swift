import Depot
import DepotTesting
import Dispatch
import Foundation
import Testing

/// Thrown on purpose after a transfer's first half, so the transaction must roll back.
struct AbortedTransfer: Error {}

@Suite("concurrency: invariants hold under many readers and writers")
struct ConcurrencyTests {
    /// Transfers per writer: `DEPOT_CONCURRENCY_OPS`, or 5,000 in the full run.
    static let transfersPerWriter = Stress.size("DEPOT_CONCURRENCY_OPS", ci: 150, tsan: 40, full: 5_000)
    /// Snapshot reads the readers make, in all, while the writers write: the writers wait
    /// for the readers to keep up with their share of it. Without that, a store whose
    /// writes got faster (the memory store's, when awaited writes began running on the
    /// calling task) finished its transfers with ten times fewer reads interleaved.
    static var minimumReads: Int { 4 * transfersPerWriter }
    static let accountCount = 12
    static let initial: Int64 = 1_000

    static func stores(_ backend: Backend, in directory: TemporaryDirectory) throws -> [(String, any Store)] {
        switch backend {
        case .memory: return [("memory", MemoryStore())]
        case .sqlite: return [("sqlite", try openStoreBlocking(url: backend.url(in: directory))), ("sqlite::memory:", try openStoreBlocking(url: "sqlite::memory:"))]
        case .lmdb: return [("lmdb", try openStoreBlocking(url: backend.url(in: directory)))]
        }
    }

    @Test("transfers keep the total; no reader ever sees a half-done transfer", arguments: Backend.allCases)
    func transfers(_ backend: Backend) async throws {
        let directory = TemporaryDirectory("conc")
        defer { directory.remove() }
        for (name, store) in try Self.stores(backend, in: directory) {
            try await Self.run(name: name, store: store)
            await store.close()
        }
    }

    /// The same on a PostgreSQL server (`make test` and `make stress` start one): the
    /// writers' operations are SERIALIZABLE transactions on the store's writer connection,
    /// the readers' REPEATABLE READ snapshots on its reader connections.
    @Test(
        "transfers keep the total on PostgreSQL; no reader ever sees a half-done transfer",
        .enabled(if: Stress.postgresURL != nil || Stress.postgresRequired))
    func transfersOnPostgres() async throws {
        guard let url = Stress.postgresURL else {
            Issue.record("DEPOT_REQUIRE_POSTGRES=1 but DEPOT_TEST_POSTGRES_URL is not set: start a server with scripts/postgres-test-server.sh (make test does).")
            return
        }
        let schema = "conc_\(UUID().uuidString.prefix(8).lowercased())"
        let store = try await openStore(url: "\(url)&schema=\(schema)&readers=3")
        try await Self.run(name: "postgres", store: store)
        await store.close()
    }

    static func run(name: String, store: any Store) async throws {
        let total = Int64(accountCount) * initial
        // Several controllers over one store, each with its own registration and queue.
        let setup = Controller<Account, Account>(store: store)
        try await setup.save((0..<accountCount).map { Account(id: "a\($0)", owner: "o\($0)", balance: initial) })
        let reads = Counter()
        let writes = Counter()
        let violations = Counter()
        let done = Counter()
        let writers = 4
        let callbackQueue = DispatchQueue(label: "depot.reliability.callbacks")

        func check(_ accounts: [Account], _ how: String) {
            let sum = accounts.reduce(0) { $0 + $1.balance }
            if accounts.count != accountCount || sum != total {
                violations.increment()
                Issue.record("\(name) \(how): \(accounts.count) accounts holding \(sum), expected \(accountCount) holding \(total)")
            }
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    // Counted even when the writer fails, so the readers stop.
                    defer { done.increment() }
                    var generator = SplitMix64(seed: UInt64(writer) + 1)
                    let accounts = Controller<Account, Account>(store: store)
                    for step in 0..<transfersPerWriter {
                        // Paced by the readers (see `minimumReads`).
                        while reads.value < minimumReads * step / transfersPerWriter && !Task.isCancelled {
                            await Task.yield()
                        }
                        let from = "a\(Int(generator.next() % UInt64(accountCount)))"
                        let to = "a\(Int(generator.next() % UInt64(accountCount)))"
                        let amount = Int64(generator.next() % 50) + 1
                        let abort = step % 7 == 3
                        do {
                            try await accounts.operation { context in
                                guard var source = try context.fetchOne(id: from) else { throw DepotError(.notFound, from) }
                                source.balance -= amount
                                try context.update(source)
                                // Reads inside the transaction see its own write.
                                if try context.fetchOne(id: from)?.balance != source.balance { throw DepotError(.backend, "own write not visible") }
                                if abort { throw AbortedTransfer() }
                                guard var target = try context.fetchOne(id: to) else { throw DepotError(.notFound, to) }
                                target.balance += amount
                                try context.update(target)
                            }
                            writes.increment()
                        } catch is AbortedTransfer {
                            writes.increment()
                        }
                        // Every few steps, a transfer through the completion-handler API.
                        if step % 5 == 0 && from != to {
                            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                                let viaCallbacks = Controller<Account, Account>(store: store, operatingQueue: .custom(callbackQueue))
                                viaCallbacks.callbacks.operation({ context in
                                    guard var a = try context.fetchOne(id: from), var b = try context.fetchOne(id: to) else { return }
                                    a.balance += 1
                                    b.balance -= 1
                                    try context.update([a, b])
                                }, completion: { result in continuation.resume(with: result.mapError { $0 as any Error }) })
                            }
                            writes.increment()
                        }
                    }
                }
            }
            // Readers: a snapshot read of everything, a sorted fetch, a count with a filter,
            // each one snapshot; they run until every writer is done.
            for reader in 0..<3 {
                group.addTask {
                    let accounts = Controller<Account, Account>(store: store)
                    repeat {
                        switch reader {
                        case 0:
                            let snapshot = try await accounts.read { context in try context.fetchAll() }
                            check(snapshot, "read context")
                        case 1:
                            check(try await accounts.fetchAll(Request<Account>().sorted(by: \.balance, ascending: false)), "sorted fetch")
                        default:
                            let (rich, poor, all) = try await accounts.read { context in
                                (try context.count(Request<Account>(\Account.balance >= 1_000)),
                                 try context.count(Request<Account>(\Account.balance < 1_000)), try context.count())
                            }
                            if rich + poor != all || all != accountCount {
                                violations.increment()
                                Issue.record("\(name) counts: \(rich) + \(poor) != \(all)")
                            }
                        }
                        reads.increment()
                        // The memory store answers reads without suspending; yield so that
                        // busy readers cannot keep the writers off a 2-thread pool.
                        await Task.yield()
                    } while done.value < writers && !Task.isCancelled
                }
            }
            try await group.waitForAll()
        }
        check(try await setup.fetchAll(), "after the run")
        #expect(violations.value == 0)
        #expect(reads.value >= minimumReads * (transfersPerWriter - 1) / transfersPerWriter, "the readers kept up with the writers")
        report("concurrency \(name): \(writes.value) transfers (1 in 7 rolled back) by 4 writers, \(reads.value) snapshot reads by 3 readers, \(violations.value) invariant violations")
    }
}
