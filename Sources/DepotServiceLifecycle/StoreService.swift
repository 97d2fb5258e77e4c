public import DepotCore
public import ServiceLifecycle

/// Runs a store inside a swift-service-lifecycle `ServiceGroup`, so a Hummingbird or Vapor
/// application shuts it down with everything else.
///
/// ```swift
/// let store = try openStore(url: "sqlite:///var/lib/app/app.sqlite")
/// let group = ServiceGroup(services: [httpServer, StoreService(store)], logger: logger)
/// try await group.run()
/// ```
///
/// On graceful shutdown (or cancellation) the service closes the store: running work
/// finishes, later calls fail with ``DepotError/Code/closed``, files and threads are
/// released. Put it after the services that use the store, so the group stops them first.
public struct StoreService: Service {
    public let store: any Store

    public init(_ store: any Store) { self.store = store }

    public func run() async throws {
        // Waits for the group's graceful shutdown; throws CancellationError when the task is
        // cancelled instead. Either way the store is closed before returning.
        try? await gracefulShutdown()
        await store.close()
    }
}
