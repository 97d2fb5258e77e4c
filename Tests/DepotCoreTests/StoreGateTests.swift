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
        let released = Atomic<Int>(0)
        let closing = Task {
            await gate.close { released.add(1, ordering: .relaxed) }
            closed.store(true, ordering: .releasing)
        }
        // close() must not return while two units are admitted.
        while !gate.isClosed { await Task.yield() }
        #expect(throws: DepotError.self) { try gate.enter() }
        gate.leave()
        try await Task.sleep(for: .milliseconds(20))
        let closedEarly = closed.load(ordering: .acquiring)
        #expect(!closedEarly, "one admitted unit is still running")
        gate.leave()
        await closing.value
        await gate.close { released.add(1, ordering: .relaxed) }
        #expect(released.load(ordering: .relaxed) == 1, "only the call that closed the gate releases")
        do {
            try gate.enter()
            Issue.record("entering a closed gate must throw")
        } catch {
            #expect(error.code == .closed)
            #expect(error.message.contains("test store"))
        }
    }

    /// A close() called while the first is still releasing returns only after the release:
    /// its caller may reuse what the store held (reopen its files) at once.
    @Test func laterCloseWaitsForTheFirstRelease() async throws {
        let gate = StoreGate(store: "test store")
        let releasing = AsyncStream<Void>.makeStream()
        let finishRelease = AsyncStream<Void>.makeStream()
        // 0: not yet, 1: the first call released; then what the second found on returning.
        let released = Flag()
        let secondFound = Flag()
        let first = Task {
            await gate.close {
                releasing.continuation.yield()
                for await _ in finishRelease.stream { break }
                released.value.store(1, ordering: .releasing)
            }
        }
        for await _ in releasing.stream { break }
        let second = Task {
            await gate.close { Issue.record("a later close() must not release again") }
            // 1: returned after the release, 2: before it.
            secondFound.value.store(released.value.load(ordering: .acquiring) == 1 ? 1 : 2, ordering: .releasing)
        }
        // A second call that does not wait returns in this time; one that waits passes
        // whatever the time.
        for _ in 0..<200 where secondFound.value.load(ordering: .acquiring) == 0 {
            try await Task.sleep(for: .milliseconds(1))
        }
        finishRelease.continuation.yield()
        await first.value
        await second.value
        #expect(secondFound.value.load(ordering: .acquiring) == 1, "the second close() returned before the first released")
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

/// An atomic shared between tasks.
private final class Flag: Sendable {
    let value = Atomic<Int>(0)
}
