import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The threads Depot's stores do blocking work on, as a task executor.
///
/// Run a request's task with `withTaskExecutorPreference(store.executor)` and its calls into
/// a store do their work on the thread the task runs on, instead of handing it to a store
/// thread and resuming the task afterwards: for a lookup by key that hand-off is most of
/// the cost. The executor's threads are dispatch workers, where a store's short blocking
/// work is allowed.
///
/// ```swift
/// try await withTaskExecutorPreference(store.executor) {
///     let cat = try await cats.fetchOne(id: 7)   // read on this thread, no hop
/// }
/// ```
///
/// A write runs there too when the store's writer is idle, and otherwise queues behind it;
/// a read that finds every SQLite reader busy waits without holding the thread. Prefer the
/// executor for request handling that mostly talks to the store, not for long
/// computations: libdispatch adds workers only some time after others block. A PostgreSQL
/// store's calls then wait for the server on this thread, which suits a nearby server, not
/// a slow network.
public final class StoreExecutor: TaskExecutor {
    /// The executor every store hands out: any thread of it may run any store's reads.
    public static let shared = StoreExecutor(label: "depot.executor")

    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label, attributes: .concurrent)
    }

    /// Runs `job` on a thread of the executor's concurrent queue, marked as a store executor's
    /// thread for the job's duration (see ``isCurrent``).
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
