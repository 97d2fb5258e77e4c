import DepotCore
import DepotTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

/// The store runtime's own duties, seen from an engine: what it calls, when, and what it
/// never lets reach the engine.
@Suite("EngineStore runtime")
struct EngineStoreTests {
    /// A memory engine that counts the runtime's calls.
    final class CountingEngine: StorageEngine {
        typealias Reading = MemoryTransaction
        typealias Writing = MemoryTransaction

        struct Counts: Sendable {
            var writes = 0
            var closes = 0
            var closedOnThread: String?
        }

        let inner: MemoryEngine
        let counts = NIOLockedValueBox(Counts())
        let isReadOnly: Bool

        init(readOnly: Bool = false) {
            inner = MemoryEngine()
            isReadOnly = readOnly
        }

        var backendName: String { "counting" }
        var location: String { "counting:" }
        var storeDescription: String { "counting store" }
        var traits: EngineTraits { EngineTraits() }
        func entities() throws -> [EntityHandle] { try inner.entities() }
        func register(_ entities: [EntityDescription]) throws -> [EntityHandle] { try inner.register(entities) }
        func rewrite(
            _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
        ) throws -> EntityHandle? {
            try inner.rewrite(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
        }
        func beginRead(on connection: Never?, singleStatement: Bool) throws -> MemoryTransaction {
            try inner.beginRead(on: nil, singleStatement: singleStatement)
        }
        func beginWrite(recordingKeys: Bool) throws -> MemoryTransaction {
            counts.withLockedValue { $0.writes += 1 }
            return try inner.beginWrite(recordingKeys: recordingKeys)
        }
        func close() {
            let thread = Thread.current.name ?? ""
            counts.withLockedValue {
                $0.closes += 1
                $0.closedOnThread = thread
            }
            inner.close()
        }
    }

    @Test func closeClosesTheEngineOnceAfterTheWorkItAdmitted() async throws {
        let engine = CountingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save((1...20).map { Cat(id: Int64($0), name: "c\($0)", weight: 1, age: 1) })
        await store.close()
        await store.close()
        #expect(engine.counts.withLockedValue { $0.closes } == 1)
        await #expect(throws: DepotError.self) { try await cats.count() }
    }

    @Test func aStoreReleasedWithoutClosingClosesItsEngine() async throws {
        let engine = CountingEngine()
        do {
            let store = EngineStore(engine: engine)
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        }
        // Closing runs on the writer's lane after the last reference went: wait for it.
        _ = try await eventually { engine.counts.withLockedValue { $0.closes } != 0 }
        #expect(engine.counts.withLockedValue { $0.closes } == 1)
    }

    @Test func aReadOnlyEngineNeverSeesAWrite() async throws {
        let engine = CountingEngine(readOnly: true)
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        // Registration of a new entity is refused first.
        await #expect(throws: DepotError.self) { try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3)) }
        await #expect(throws: DepotError.self) { try await store.write { _ in 1 } }
        #expect(engine.counts.withLockedValue { $0.writes } == 0)
        await store.close()
    }
}
