package import Dispatch
import Foundation

/// Waits for `semaphore` on a thread of its own and reports whether it was signalled
/// within `seconds`.
///
/// Checks that hold a store's thread inside a transaction wait for it from here rather than
/// from a `DispatchQueue.global()` block: the global queue's few threads (one per core) are
/// the ones the stores' readers and SQLite's and PostgreSQL's writer lanes run on, so while
/// the four backends' suites run at once, a waiting block there could take the thread the
/// awaited transaction needs, and the check would wait out its timeout.
package func signalled(_ semaphore: DispatchSemaphore, within seconds: Int) async -> Bool {
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
/// On Linux, Swift's tasks run on the same global-queue threads (one per core) as the
/// SQLite and PostgreSQL writer lanes and every store's readers, and libdispatch replaces a
/// blocked one only after about a second (measured on this toolchain: each further blocked
/// block delays queued work by another second). A check that holds one of those threads
/// inside a transaction is harmless alone; several at once, in every backend's suite, add up.
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
