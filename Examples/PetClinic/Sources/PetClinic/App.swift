import Depot
import DepotServiceLifecycle
import Foundation
import Hummingbird
import Logging
import Prometheus

/// What the server reads from its environment.
public struct ClinicSettings: Sendable {
    /// `DEPOT_STORE_URL`; a SQLite file in the working directory when unset.
    public var storeURL: StoreURL
    /// `HOST` (default 127.0.0.1: loopback until someone decides otherwise).
    public var host: String
    /// `PORT` (default 8080; 0 picks a free port, which the server prints).
    public var port: Int

    public init(storeURL: StoreURL, host: String = "127.0.0.1", port: Int = 8080) {
        self.storeURL = storeURL
        self.host = host
        self.port = port
    }

    /// Reads the settings; a bad value is a `DepotError.invalidConfiguration` naming it.
    public init(environment: [String: String]) throws(DepotError) {
        storeURL = try StoreURL(environment["DEPOT_STORE_URL"] ?? "sqlite:pet-clinic.sqlite")
        host = environment["HOST"] ?? "127.0.0.1"
        if let text = environment["PORT"] {
            guard let port = Int(text), (0...65_535).contains(port) else {
                throw DepotError(.invalidConfiguration, "PORT must be a port number from 0 to 65535, not '\(text)'.")
            }
            self.port = port
        } else {
            port = 8080
        }
    }
}

/// The Hummingbird application serving `clinic`.
///
/// The store's `StoreService` is one of the application's services, so a graceful shutdown
/// (SIGTERM, SIGINT) stops the HTTP server first — it stops accepting connections and
/// finishes the requests in flight, whose writes have committed by the time they answer —
/// and closes the store after it. (swift-service-lifecycle stops services in reverse order,
/// and Hummingbird runs its server after the services it is given.)
public func buildApplication(
    clinic: Clinic, settings: ClinicSettings, metrics: PrometheusCollectorRegistry? = nil, logger: Logger,
    onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) -> some ApplicationProtocol {
    Application(
        router: buildRouter(clinic: clinic, metrics: metrics),
        configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: "PetClinic"),
        services: [StoreService(clinic.store)],
        onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? settings.port) },
        logger: logger)
}
