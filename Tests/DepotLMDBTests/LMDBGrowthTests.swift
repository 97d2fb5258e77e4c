import NIOConcurrencyHelpers
import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Testing

import DepotLMDB

@Suite("LMDB map growth")
struct LMDBGrowthTests {
    @Test("a write that needs the map to grow waits for a held reader, other reads go on, and the write succeeds")
    func growthWhileAReaderIsHeld() async throws {
        try await withStore(options: .init(mapSize: 64 << 10)) { store, _ in
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.fixtures)
            let initial = store.environment.mapSize
            let holding = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            // A read transaction held open (a slow reader).
            let reader = Task {
                try await store.read { _ -> Int in
                    holding.signal()
                    // Only keeps a broken store from hanging the run.
                    _ = release.wait(timeout: .now() + 300)
                    return 0
                }
            }
            // Bounded (off the pool, see `signalled`) so that a broken store fails the test
            // rather than hanging the run.
            try #require(await signalled(holding, within: 300), "the reader started")
            let batch = Cat.workload(count: 20_000, seed: 3)
            let writer = Task { try await cats.save(batch) }
            // Wait until the write has filled the map and waits to grow it (a sync point,
            // not a timing assertion; bounded so a broken store cannot hang the run).
            var spins = 0
            while !store.environment.gate.isResizing && spins < 20_000 {
                try await Task.sleep(for: .milliseconds(5))
                spins += 1
            }
            #expect(store.environment.gate.isResizing, "the write waits for the map to grow")
            // Other reads are admitted while the reader is held and the write waits.
            for _ in 0..<50 {
                #expect(try await cats.count() == Cat.fixtures.count)
            }
            #expect(store.environment.gate.isResizing, "the reads ran while the write was still waiting for the held reader")
            release.signal()
            _ = try await reader.value
            try await writer.value
            #expect(store.environment.mapSize > initial)
            #expect(try await cats.count() == Set(batch.map(\.id) + Cat.fixtures.map(\.id)).count)
        }
    }

    /// Readers that each take longer than one attempt's wait, and always overlap, left a
    /// resize waiting out its whole patience when every attempt held new readers back for
    /// the same 50 ms: there was always a reader admitted in the last open window.
    @Test("a resize is not starved by reads that keep overlapping each other")
    func overlappingReadersDoNotStarveAResize() async throws {
        let gate = TransactionGate()
        let running = NIOLockedValueBox<Bool>(true)
        let group = DispatchGroup()
        for reader in 0..<3 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                // Staggered, so a reader is open at every instant.
                Thread.sleep(forTimeInterval: Double(reader) * 0.03)
                while running.withLockedValue({ $0 }) {
                    let ticket = gate.enter()
                    Thread.sleep(forTimeInterval: 0.09)
                    gate.leave(ticket)
                }
            }
        }
        let resized = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: 0.2)
                continuation.resume(returning: gate.whenIdle(patience: 30) { true } ?? false)
            }
        }
        running.withLockedValue { $0 = false }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            group.notify(queue: .global()) { continuation.resume() }
        }
        #expect(resized, "the resize ran while reads kept overlapping")
    }

    /// Transactions are counted without the lock while no resize runs; a resize must still
    /// wait for them, admit newcomers under the lock while it waits, and wait for those too.
    @Test("a resize waits for transactions admitted without the lock, and admits under the lock while it runs")
    func resizeWaitsForFastTransactions() async throws {
        let gate = TransactionGate()
        let held = gate.enter()
        #expect(held == TransactionGate.fastTicket, "with no resize running, a transaction enters without the lock")
        let impatient = await onThread { gate.whenIdle(patience: 0.2) { true } }
        #expect(impatient == nil, "a resize does not run while a transaction admitted without the lock is open")
        let between = gate.enter()
        #expect(between == TransactionGate.fastTicket, "after a resize gave up, transactions enter without the lock again")
        gate.leave(between)

        let ran = NIOLockedValueBox(false)
        // Patient far beyond the test's own steps: under Thread Sanitizer, with every suite
        // running at once, the test's task was once held back past a 30 s patience, and
        // the resize gave up before the newcomer left.
        let resize = Task { await onThread { gate.whenIdle(patience: 300) { ran.withLockedValue { $0 = true }; return true } } }
        while !gate.isResizing { try await Task.sleep(for: .milliseconds(5)) }
        // Past the first attempt's admission wait: newcomers are admitted again, under the lock.
        try await Task.sleep(for: .milliseconds(150))
        let newcomer = await onThread { gate.enter() }
        #expect(newcomer != TransactionGate.fastTicket, "while a resize runs, a transaction enters under the lock")
        gate.leave(held)
        try await Task.sleep(for: .milliseconds(150))
        #expect(!ran.withLockedValue { $0 }, "the resize waits for the transaction admitted while it ran")
        gate.leave(newcomer)
        #expect(await resize.value == true, "the resize runs once both have left")
        let after = gate.enter()
        #expect(after == TransactionGate.fastTicket, "after the resize, transactions enter without the lock again")
        gate.leave(after)
    }
}

/// Runs blocking `body` on a thread of its own, not on the cooperative pool.
func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}
