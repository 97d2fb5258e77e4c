import Dispatch
import Foundation

/// Waits for `semaphore` on a thread of its own and reports whether it was signalled
/// within `seconds`.
///
/// Checks that hold a store's thread inside a transaction wait for it from here rather than
/// from a `DispatchQueue.global()` block: the global queue's few threads (one per core) are
/// the ones the stores' readers and SQLite's and PostgreSQL's writer lanes run on, so while
/// the four backends' suites run at once, a waiting block there could take the thread the
/// awaited transaction needs, and the check would wait out its timeout.
func signalled(_ semaphore: DispatchSemaphore, within seconds: Int) async -> Bool {
    await withCheckedContinuation { continuation in
        let thread = Thread {
            continuation.resume(returning: semaphore.wait(timeout: .now() + .seconds(seconds)) == .success)
        }
        thread.name = "depot.conformance.wait"
        thread.start()
    }
}

/// Runs `body` while no other check that holds a store's thread runs in this process.
///
/// On Linux, Swift's tasks run on the same few global-queue threads as the SQLite and
/// PostgreSQL writer lanes and every store's readers. A check that holds one of those
/// inside a transaction (for up to a minute when something is wrong) is harmless alone; the
/// four backends' suites running it at once could hold them all, and then no task of any
/// check could run (seen under Thread Sanitizer: "the write starts: nothing after 60 s" on
/// every backend at once).
func holdingAStoreThread<T: Sendable>(_ body: () async throws -> T) async throws -> T {
    await heldChecks.acquire()
    do {
        let value = try await body()
        await heldChecks.release()
        return value
    } catch {
        await heldChecks.release()
        throw error
    }
}

private let heldChecks = CheckTurns()

/// One turn at a time, in arrival order.
private actor CheckTurns {
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}
