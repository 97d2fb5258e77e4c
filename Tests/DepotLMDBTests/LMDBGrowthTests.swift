import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Testing

@testable import DepotLMDB

/// Waits for `semaphore` on a dispatch thread, not on the cooperative pool.
func waitOff(_ semaphore: DispatchSemaphore) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        DispatchQueue.global().async {
            semaphore.wait()
            continuation.resume()
        }
    }
}

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
            await waitOff(holding)
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
}
