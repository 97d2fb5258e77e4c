import DepotCore
import Dispatch
import Synchronization
import Testing

/// The gate every backend admits its transactions through: closing refuses new work at
/// once and waits for the work already admitted, however enter, leave and close interleave.
@Suite("Store gate")
struct StoreGateTests {
    @Test func closeWaitsForAdmittedWorkAndRefusesNewWork() async throws {
        let gate = StoreGate(store: "test store")
        try gate.enter()
        try gate.enter()
        let closed = Atomic<Bool>(false)
        let closing = Task {
            let first = await gate.close()
            closed.store(true, ordering: .releasing)
            return first
        }
        // close() must not return while two units are admitted.
        while !gate.isClosed { await Task.yield() }
        #expect(throws: DepotError.self) { try gate.enter() }
        gate.leave()
        try await Task.sleep(for: .milliseconds(20))
        let closedEarly = closed.load(ordering: .acquiring)
        #expect(!closedEarly, "one admitted unit is still running")
        gate.leave()
        #expect(await closing.value == true, "the first close() reports that it closed the gate")
        #expect(await gate.close() == false, "a second close() returns at once and says so")
        do {
            try gate.enter()
            Issue.record("entering a closed gate must throw")
        } catch {
            #expect(error.code == .closed)
            #expect(error.message.contains("test store"))
        }
    }

    /// Threads entering and leaving while the gate closes: close() returns only once every
    /// admitted unit has left, and no unit is admitted after it returned.
    @Test func closeUnderConcurrentEnterAndLeave() async throws {
        for _ in 0..<20 {
            let gate = StoreGate(store: "busy store")
            let inside = Atomic<Int>(0)
            let admittedAfterClose = Atomic<Int>(0)
            let closeReturned = Atomic<Bool>(false)
            let workers = DispatchGroup()
            for _ in 0..<4 {
                DispatchQueue.global().async(group: workers) {
                    for _ in 0..<2_000 {
                        guard (try? gate.enter()) != nil else { continue }
                        if closeReturned.load(ordering: .acquiring) { admittedAfterClose.add(1, ordering: .relaxed) }
                        inside.add(1, ordering: .relaxed)
                        inside.subtract(1, ordering: .relaxed)
                        gate.leave()
                    }
                }
            }
            try await Task.sleep(for: .microseconds(200))
            await gate.close()
            closeReturned.store(true, ordering: .releasing)
            let stillInside = inside.load(ordering: .relaxed)
            #expect(stillInside == 0, "close() returned while a unit was inside")
            await withCheckedContinuation { continuation in
                workers.notify(queue: .global()) { continuation.resume() }
            }
            let lateAdmissions = admittedAfterClose.load(ordering: .relaxed)
            #expect(lateAdmissions == 0, "a unit was admitted after close() returned")
        }
    }
}
