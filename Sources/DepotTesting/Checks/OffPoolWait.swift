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
