import DepotCore
import DepotTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The calling thread, to compare.
func currentThread() -> UInt { UInt(pthread_self()) }

/// An engine's request to run a transaction again (``EngineRetry``): what the runtime runs
/// again, where it has the engine prepare, and what the caller sees.
@Suite("EngineStore runs a transaction again when the engine asks")
struct EngineRetryTests {
    struct Log: Sendable {
        /// How many more transactions ask for a retry.
        var asks = 0
        /// Make `prepareRetry` throw instead of preparing.
        var giveUp = false
        var prepared: [(reason: String, attempt: Int, thread: UInt)] = []
        /// The threads the bodies ran on.
        var bodyThreads: [UInt] = []
        var reads = 0
        var writes = 0
        /// `singleStatement` of each read begun.
        var singleStatements: [Bool] = []
        /// Ask with `needsPreparation` false.
        var unprepared = false
    }

    /// A memory engine whose transactions ask for a retry while `log.asks` is positive.
    final class RetryingEngine: StorageEngine {
        let inner = MemoryEngine()
        let log = NIOLockedValueBox(Log())

        var backendName: String { "retrying" }
        var location: String { "retrying:" }
        var storeDescription: String { "retrying store" }
        var isReadOnly: Bool { false }
        // Blocking, so reads and writes leave the calling task as on a store on files.
        var traits: EngineTraits { EngineTraits() }
        func entities() throws -> [EntityHandle] { try inner.entities() }
        func register(_ entities: [EntityDescription]) throws -> [EntityHandle] { try inner.register(entities) }
        func rewrite(
            _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
        ) throws -> EntityHandle? {
            try inner.rewrite(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
        }

        /// Takes one ask, when there is one left.
        private func takeAsk() -> EngineRetry? {
            log.withLockedValue { log in
                guard log.asks > 0 else { return nil }
                log.asks -= 1
                return EngineRetry(reason: "a test asked", needsPreparation: !log.unprepared)
            }
        }

        func beginRead(on connection: Never?, singleStatement: Bool) throws -> Transaction {
            log.withLockedValue {
                $0.reads += 1
                $0.singleStatements.append(singleStatement)
            }
            let transaction = Transaction(try inner.beginRead(on: nil, singleStatement: singleStatement), retry: takeAsk())
            transaction.single.isOn = singleStatement
            return transaction
        }
        func beginWrite(recordingKeys: Bool) throws -> Transaction {
            log.withLockedValue { $0.writes += 1 }
            return Transaction(try inner.beginWrite(recordingKeys: recordingKeys), retry: takeAsk())
        }
        func prepareRetry(_ retry: EngineRetry, attempt: Int) throws {
            let thread = currentThread()
            let giveUp = log.withLockedValue { log in
                log.prepared.append((retry.reason, attempt, thread))
                return log.giveUp
            }
            if giveUp { throw DepotError(.busy, "The test engine gave up.") }
        }
        func close() { inner.close() }
    }

    /// A memory transaction that asks for a retry (once the body has run: the runtime reads
    /// it afterwards) when made with one.
    final class Transaction: EngineReadTransaction, EngineWriteTransaction {
        let inner: MemoryTransaction
        let asked: EngineRetry?
        /// Refuse a second statement, as an SQL engine's read in autocommit mode must.
        var single = SingleStatementRead()
        var retry: EngineRetry? { single.retry ?? asked }
        init(_ inner: MemoryTransaction, retry: EngineRetry?) {
            self.inner = inner
            self.asked = retry
        }
        private func statement() throws {
            try single.countStatement()
        }
        var relationships: Relationships { inner.relationships }
        func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
            try statement()
            try inner.fetch(query, reserve: reserve, body)
        }
        func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
            try statement()
            return try inner.fetchRow(entity, key: key, body)
        }
        func count(_ query: Query) throws -> Int {
            try statement()
            return try inner.count(query)
        }
        func insert(_ row: Row, into entity: EntityHandle) throws { try inner.insert(row, into: entity) }
        func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool { try inner.upsert(row, into: entity) }
        func update(_ row: Row, in entity: EntityHandle) throws { try inner.update(row, in: entity) }
        func delete(key: Value, from entity: EntityHandle) throws -> Bool { try inner.delete(key: key, from: entity) }
        func delete(_ query: Query) throws -> Int { try inner.delete(query) }
        func end() { inner.end() }
        func commit() throws -> ChangeRecorder { try inner.commit() }
        func rollback() { inner.rollback() }
    }

    @Test func aWriteThatAsksRunsAgainAndCommitsOnce() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        _ = try await cats.registeredEntity()
        let runs = NIOLockedValueBox(0)
        let published = NIOLockedValueBox(0)
        let subscription = store.changes.observe(entities: nil, onFinish: {}) { _ in published.withLockedValue { $0 += 1 } }
        defer { subscription.cancel() }
        engine.log.withLockedValue { $0.asks = 1 }
        try await cats.operation { context in
            runs.withLockedValue { $0 += 1 }
            engine.log.withLockedValue { $0.bodyThreads.append(currentThread()) }
            try context.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        }
        #expect(runs.withLockedValue { $0 } == 2, "the body ran again")
        let log = engine.log.withLockedValue { $0 }
        #expect(log.prepared.map(\.attempt) == [1])
        // A write is on the writer's lane already: the engine prepares right there.
        #expect(log.prepared.first?.thread == log.bodyThreads.first, "prepared where the write ran")
        #expect(try await cats.fetchAll().map(\.name) == ["Tom"])
        #expect(published.withLockedValue { $0 } == 1, "one change set for the one commit")
        await store.close()
    }

    @Test func aWriteAskedTwiceRunsThreeTimesAndKeepsOnlyTheLast() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        _ = try await cats.registeredEntity()
        engine.log.withLockedValue { $0.asks = 2 }
        let runs = NIOLockedValueBox(0)
        try await cats.operation { context in
            let run = runs.withLockedValue { $0 += 1; return $0 }
            // What the first two runs write is rolled back with them.
            try context.save(Cat(id: Int64(run), name: "run \(run)", weight: 1, age: 1))
        }
        #expect(runs.withLockedValue { $0 } == 3)
        #expect(try await cats.fetchAll().map(\.name) == ["run 3"])
        #expect(engine.log.withLockedValue { $0.prepared.map(\.attempt) } == [1, 2])
        await store.close()
    }

    @Test func aReadThatAsksWaitsForTheWriterLaneAndReadsAgain() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        let readsBefore = engine.log.withLockedValue { $0.reads }
        engine.log.withLockedValue { $0.asks = 1 }
        let runs = NIOLockedValueBox(0)
        let names = try await cats.read { context in
            runs.withLockedValue { $0 += 1 }
            engine.log.withLockedValue { $0.bodyThreads.append(currentThread()) }
            return try context.fetchAll().map(\.name)
        }
        #expect(names == ["Tom"])
        #expect(runs.withLockedValue { $0 } == 2)
        let log = engine.log.withLockedValue { $0 }
        #expect(log.reads - readsBefore == 2)
        #expect(log.prepared.count == 1)
        // The reader waits while the writer's lane prepares: another thread.
        #expect(log.prepared.first.map { prepared in !log.bodyThreads.contains(prepared.thread) } == true, "prepared on the writer's lane")
        await store.close()
    }

    @Test func aReadThatNeedsNoPreparationRunsAgainWithoutWaitingForTheWriter() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        let readsBefore = engine.log.withLockedValue { $0.reads }
        // The writer's lane stays busy with a write that waits for the read below.
        let release = DispatchSemaphore(value: 0)
        let writeRunning = DispatchSemaphore(value: 0)
        store.submitWrite({ _ in
            writeRunning.signal()
            release.wait()
        }, completion: { _ in })
        writeRunning.wait()
        engine.log.withLockedValue {
            $0.asks = 1
            $0.unprepared = true
        }
        let read = Task { try await cats.count() }
        // The read finishes while the lane is still held, or the wait gives up.
        let lastRunBeganBeforeRelease = try await eventually { engine.log.withLockedValue { $0.reads - readsBefore == 2 } }
        release.signal()
        #expect(try await read.value == 1)
        #expect(lastRunBeganBeforeRelease, "the second run did not wait for the writer's lane")
        let log = engine.log.withLockedValue { $0 }
        #expect(log.reads - readsBefore == 2, "ran twice")
        #expect(log.prepared.isEmpty, "prepareRetry is not called for a retry that needs no preparation")
        await store.close()
    }

    @Test func anEngineThatGivesUpFailsTheWorkWithItsErrorAndKeepsNothing() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        _ = try await cats.registeredEntity()
        engine.log.withLockedValue {
            $0.asks = 2
            $0.giveUp = true
        }
        await #expect(throws: DepotError.self) { try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3)) }
        await #expect(throws: DepotError.self) { try await cats.count() }
        engine.log.withLockedValue { $0.giveUp = false }
        #expect(try await cats.count() == 0, "the write kept nothing")
        await store.close()
    }

    @Test func aReadOfOneStatementThatGoesOnRunsAgainAsATransaction() async throws {
        let engine = RetryingEngine()
        let store = EngineStore(engine: engine)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 4, age: 3))
        let entity = try await cats.registeredEntity()
        engine.log.withLockedValue { $0.singleStatements = [] }
        // One statement: begun as a read of one statement, and nothing more.
        #expect(try await cats.count() == 1)
        #expect(engine.log.withLockedValue { $0.singleStatements } == [true])
        engine.log.withLockedValue { $0.singleStatements = [] }
        let runs = NIOLockedValueBox(0)
        let total = try await withCheckedThrowingContinuation { continuation in
            store.submitSingleStatementRead({ transaction in
                runs.withLockedValue { $0 += 1 }
                return try transaction.count(Query(all: entity)) + transaction.count(Query(all: entity))
            }, completion: { continuation.resume(with: $0) })
        }
        #expect(total == 2)
        #expect(runs.withLockedValue { $0 } == 2, "refused at its second statement, then run again")
        let log = engine.log.withLockedValue { $0 }
        #expect(log.singleStatements == [true, false], "again as a transaction")
        #expect(log.prepared.isEmpty, "nothing to prepare for a read run as a transaction")
        await store.close()
    }
}
