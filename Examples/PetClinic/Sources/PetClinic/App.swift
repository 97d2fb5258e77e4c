import Depot
import DepotServiceLifecycle
import Foundation
import Hummingbird
import Logging
import Prometheus
import ServiceLifecycle

/// The Hummingbird application serving `clinic`.
///
/// The store's `StoreService` is one of the application's services, so a graceful shutdown
/// (SIGTERM, SIGINT) stops the HTTP server first — it stops accepting connections and
/// finishes the requests in flight, whose writes have committed by the time they answer —
/// and closes the store after it. (swift-service-lifecycle stops services in reverse order,
/// and Hummingbird runs its server after the services it is given.)
///
/// `telemetry` are the exporters' services (``TelemetrySettings/bootstrap(prometheus:logger:)``):
/// first, so they stop last and flush what the server and the store reported.
public func buildApplication(
    clinic: Clinic, settings: ClinicSettings, metrics: PrometheusCollectorRegistry? = nil, telemetry: [any Service] = [],
    logger: Logger, onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) -> some ApplicationProtocol {
    Application(
        router: buildRouter(clinic: clinic, metrics: metrics, tracing: settings.telemetry.tracing),
        configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: "PetClinic"),
        services: telemetry + [StoreService(clinic.store)],
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? settings.port) },
        logger: logger)
}
