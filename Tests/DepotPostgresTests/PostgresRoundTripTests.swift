import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A call that is one statement costs one exchange with the server, counted on the
/// connection (every statement, pipeline, DEALLOCATE and ROLLBACK sent counts one; a
/// statement prepared for the cache is prepared in its own round trip): the
/// semantics of those calls are the conformance suite's.
@Suite("PostgresStore round trips", .enabled(if: TestServer.available), .serialized)
struct PostgresRoundTripTests {
    /// The writer's exchanges during `body`.
    func writerTrips(_ store: PostgresStore, _ body: () async throws -> Void) async throws -> Int {
        let before = store.writerRoundTrips
        try await body()
        return store.writerRoundTrips - before
    }

    @Test("a save, an insert, an update and a delete by key are one autocommit statement each, notification included")
    func singleWrites() async throws {
        let store = try TestServer.makeStore()
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        let collector = Collected()
        let subscription = store.changes.observe(entities: ["Cat"]) { collector.add($0) }
        defer { subscription.cancel() }
        // Every statement used once, so that each is prepared.
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 4))
        try await cats.insert(Cat(id: 2, name: "Felix", weight: 3, age: 2))
        try await cats.update(Cat(id: 2, name: "Felix", weight: 3, age: 5))
        try await cats.delete(id: 2)
        try await cats.save([Cat(id: 20, name: "C", weight: 1, age: 1), Cat(id: 21, name: "D", weight: 1, age: 1)])
        try await cats.delete(id: 20)
        try await cats.delete(id: 21)

        // A save is answered as the entity's last save went: the same way, one exchange;
        // the other way, the statement takes no effect and the save runs again, two.
        #expect(try await writerTrips(store) { try await cats.save(Cat(id: 3, name: "New", weight: 1, age: 1)) } == 1)
        #expect(try await writerTrips(store) { try await cats.save(Cat(id: 7, name: "Seven", weight: 1, age: 1)) } == 1)
        #expect(try await writerTrips(store) { try await cats.save(Cat(id: 3, name: "Again", weight: 1, age: 1)) } == 2)
        #expect(try await writerTrips(store) { try await cats.save(Cat(id: 3, name: "Third", weight: 1, age: 1)) } == 1)
        #expect(try await writerTrips(store) { try await cats.insert(Cat(id: 4, name: "Four", weight: 1, age: 1)) } == 1)
        // A duplicate insert: the statement takes no effect, and a transaction (BEGIN with
        // the insert, then ROLLBACK) gives the error, as before; preparing the transaction's
        // insert goes in the same exchange.
        for expected in [3, 3] {
            #expect(
                try await writerTrips(store) {
                    do {
                        try await cats.insert(Cat(id: 4, name: "Again", weight: 1, age: 1))
                        Issue.record("a duplicate insert succeeded")
                    } catch let error as DepotError where error.code == .duplicateKey {}
                } == expected)
        }
        #expect(try await writerTrips(store) { try await cats.update(Cat(id: 4, name: "Four", weight: 2, age: 1)) } == 1)
        let deleted = NSLock()
        nonisolated(unsafe) var wasThere = false
        #expect(try await writerTrips(store) { let d = try await cats.delete(id: 4); deleted.withLock { wasThere = d } } == 1)
        #expect(wasThere)
        // Several statements: BEGIN with the first, the second, the notification with COMMIT.
        try await cats.save(Cat(id: 8, name: "Eight", weight: 1, age: 1))
        #expect(try await writerTrips(store) { try await cats.save([Cat(id: 5, name: "A", weight: 1, age: 1), Cat(id: 6, name: "B", weight: 1, age: 1)]) } == 3)

        #expect(try await cats.fetchOne(id: 3)?.name == "Third")
        #expect(try await cats.exists(id: 4) == false)
        #expect(try await cats.count() == 6)
        // Each write was heard once, as what it did.
        let kinds = collector.changes.filter { [.int(3), .int(4), .int(7)].contains($0.key) }.map { "\($0.key.debugLiteral) \($0.kind)" }
        #expect(kinds == ["3 insert", "7 insert", "3 update", "3 update", "4 insert", "4 update", "4 delete"])
    }

    @Test("a write that does not go as answered runs again in a transaction, with the same errors")
    func misansweredWrites() async throws {
        let store = try TestServer.makeStore()
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        do {
            try await cats.insert(Cat(id: 1, name: "Dup", weight: 1, age: 1))
            Issue.record("a duplicate insert succeeded")
        } catch let error as DepotError {
            #expect(error.code == .duplicateKey)
        }
        do {
            try await cats.update(Cat(id: 9, name: "None", weight: 1, age: 1))
            Issue.record("an update of nothing succeeded")
        } catch let error as DepotError {
            #expect(error.code == .notFound)
        }
        #expect(try await cats.delete(id: 9) == false)
        // A closure that goes on after a write that did not go as answered sees the truth.
        let outcome = try await cats.operation { context -> String in
            do {
                try context.insert(Cat(id: 1, name: "Dup", weight: 1, age: 1))
                return "inserted"
            } catch let error as DepotError where error.code == .duplicateKey {
                try context.update(Cat(id: 1, name: "Updated", weight: 1, age: 1))
                return "updated"
            }
        }
        #expect(outcome == "updated")
        #expect(try await cats.fetchOne(id: 1)?.name == "Updated")
        // Upserts answered both ways, alternating.
        let entity = try await cats.registeredEntity()
        for round in 0..<4 {
            let id = Int64(100 + round / 2)
            let inserted = try await store.write { try $0.upsert(Row([.int(id), .string("x"), .double(1), .int(Int64(round))]), into: entity) }
            #expect(inserted == (round % 2 == 0), "round \(round)")
        }
    }
}

extension PostgresRoundTripTests {
    /// The readers' exchanges during `body`.
    func readerTrips(_ store: PostgresStore, _ body: () async throws -> Void) async throws -> Int {
        let before = store.readerRoundTrips
        try await body()
        return store.readerRoundTrips - before
    }

    @Test("a fetch, a first, a count and a page are one autocommit statement each, with no BEGIN or ROLLBACK")
    func singleReads() async throws {
        let store = try TestServer.makeStore(readers: 1)
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save((1...30).map { Cat(id: $0, name: "Cat \($0)", weight: 1, age: Int($0 % 5)) })
        let young = Request<CatRecord>(\.age < 2).sorted(by: \.name)
        let set = cats.results.filter(\.age < 2).sorted(by: \.name)
        // Every statement used once, so that each is prepared.
        _ = try await cats.fetchAll(young)
        _ = try await cats.fetchFirst(young)
        _ = try await cats.count(young)
        let first = try await set.page(size: 5)
        _ = try await set.page(size: 5, after: first.next)

        var fetched: [Cat] = []
        #expect(try await readerTrips(store) { fetched = try await cats.fetchAll(young) } == 1)
        #expect(fetched.map(\.id) == (1...30).filter { $0 % 5 < 2 }.sorted { "Cat \($0)".utf8.lexicographicallyPrecedes("Cat \($1)".utf8) })
        var firstID: Int64?
        var counted = 0
        #expect(try await readerTrips(store) { firstID = try await cats.fetchFirst(young)?.id } == 1)
        #expect(firstID == fetched.first?.id)
        #expect(try await readerTrips(store) { counted = try await cats.count(young) } == 1)
        #expect(counted == fetched.count)
        var page = Page<Cat>(items: [], next: nil)
        #expect(try await readerTrips(store) { page = try await set.page(size: 5) } == 1)
        #expect(page.items.map(\.id) == Array(fetched.prefix(5).map(\.id)))
        #expect(try await readerTrips(store) { page = try await set.page(size: 5, after: page.next) } == 1)
        #expect(page.items.map(\.id) == Array(fetched.dropFirst(5).prefix(5).map(\.id)))
        // No reader was left inside a transaction, nor with an answer to read.
        #expect(!store.readersInTransaction.contains(true))
        // A read closure still runs in a transaction: BEGIN with its statement, then ROLLBACK.
        #expect(try await readerTrips(store) { _ = try await cats.read { try $0.count() } } == 2)
    }

    @Test("a read sent as one statement that goes on to a second runs again in one transaction")
    func singleReadThatIsNot() async throws {
        let store = try TestServer.makeStore(readers: 1)
        defer { Task { await store.close() } }
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save((1...10).map { Cat(id: $0, name: "Cat \($0)", weight: 1, age: 1) })
        let entity = try await cats.registeredEntity()
        let query = Query(all: entity)
        let runs = Counter()
        let counts: [Int] = try await withCheckedThrowingContinuation { continuation in
            store.submitSingleStatementRead({ transaction -> [Int] in
                runs.increment()
                return [try transaction.count(query), try transaction.count(query)]
            }, completion: { continuation.resume(with: $0) })
        }
        #expect(counts == [10, 10])
        #expect(runs.value == 2)
        #expect(!store.readersInTransaction.contains(true))
    }
}

/// How many times something ran.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}

/// The changes a subscription delivered, in order.
final class Collected: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [Change] = []
    func add(_ committed: CommittedChanges) {
        lock.withLock { list += committed.changes }
    }
    var changes: [Change] { lock.withLock { list } }
}
