public import DepotCore
public import ServiceLifecycle

/// Runs a store inside a swift-service-lifecycle `ServiceGroup`, so a Hummingbird or Vapor
/// application shuts it down with everything else.
///
/// ```swift
/// let store = try await openStore(url: "sqlite:///var/lib/app/app.sqlite")
/// let group = ServiceGroup(services: [StoreService(store), httpServer], logger: logger)
/// try await group.run()
/// ```
///
/// On graceful shutdown (or cancellation) the service closes the store: running work
/// finishes, later calls fail with `DepotError.Code.closed`, files and threads are
/// released. A `ServiceGroup` stops its services in reverse order, so list it *before* the
/// services that use the store: they stop first (an HTTP server finishes its requests in
/// flight, writes included), then the store closes. Hummingbird's `Application` runs its
/// server after the `services:` it is given, so passing `StoreService` there orders it right.
public struct StoreService: Service {
    /// The store the service closes.
    public let store: any Store

    /// A service that closes `store` when the group shuts down.
    public init(_ store: any Store) { self.store = store }

    /// Waits for the group's graceful shutdown or for cancellation, then closes the store.
    public func run() async throws {
        // Waits for the group's graceful shutdown; throws CancellationError when the task is
        // cancelled instead. Either way the store is closed before returning.
        try? await gracefulShutdown()
        await store.close()
    }
}
