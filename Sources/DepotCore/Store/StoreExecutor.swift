import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The threads Depot's stores do blocking work on, as a task executor: run a request's
/// task with `withTaskExecutorPreference(store.executor)` and its calls into an SQLite or
/// LMDB store do their work right on the thread the task is running on, with no hop to
/// another thread and back.
///
/// Without a preference, a read awaited from a task hands its work to one of the store's
/// threads and resumes the task when that thread is done: that hand-off and what it
/// allocates cost more than a lookup by key itself. A task that prefers this executor already runs on a thread where the
/// store's short blocking work is allowed (a dispatch worker, as the store's own reads use;
/// on Linux these are the workers Swift's tasks run on too), so the store runs the read
/// there and the task goes on at once.
///
/// ```swift
/// try await withTaskExecutorPreference(store.executor) {
///     let cat = try await cats.fetchOne(id: 7)   // read on this thread, no hop
/// }
/// ```
///
/// Writes run right there too when the store's single writer is idle; a write that finds
/// it busy queues behind it (and may share its successor's commit), and a read that finds
/// every SQLite reader connection busy waits for one without holding the thread.
/// Nonisolated async code of such a task runs on dispatch worker threads, which libdispatch
/// adds when some of them block, but only about a second later: prefer the executor for
/// request handling that mostly talks to the store, not for long computations. A
/// PostgreSQL store runs such a task's calls on its thread too, which then waits for the
/// server: worth it where the server answers within microseconds to a millisecond, not
/// across a slow network (without the preference each connection has a thread of its own).
public final class StoreExecutor: TaskExecutor {
    /// The executor every store hands out: any thread of it may run any store's reads.
    public static let shared = StoreExecutor(label: "depot.executor")

    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label, attributes: .concurrent)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async {
            let previous = pthread_getspecific(storeExecutorKey)
            // Any non-null value marks the thread.
            pthread_setspecific(storeExecutorKey, UnsafeRawPointer(bitPattern: 1))
            job.runSynchronously(on: executor)
            pthread_setspecific(storeExecutorKey, previous)
        }
    }

    /// Whether the calling thread is running a job of a ``StoreExecutor``: a thread where
    /// a store may do blocking work in place instead of handing it to its own threads.
    public static var isCurrent: Bool { pthread_getspecific(storeExecutorKey) != nil }
}

extension Store {
    /// The task executor whose threads this store's reads may run on without a hop (see
    /// ``StoreExecutor``).
    public var executor: StoreExecutor { .shared }
}

/// Marks the threads running a ``StoreExecutor`` job (thread-specific data: one load to
/// test).
private let storeExecutorKey: pthread_key_t = {
    var key = pthread_key_t()
    pthread_key_create(&key, nil)
    return key
}()
