import Depot
import Foundation
import Hummingbird
import Logging
import Metrics
import PetClinic
import Prometheus

// pet-clinic: the example service. DEPOT_STORE_URL picks the store (sqlite:, lmdb:, memory:,
// postgres://...), HOST and PORT the address; SIGTERM or SIGINT shuts it down gracefully.
// Metrics (requests from Hummingbird, transactions from Depot) are at GET /metrics.

var logger = Logger(label: "pet-clinic")
logger.logLevel = ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info

let settings: ClinicSettings
do {
    settings = try ClinicSettings(environment: ProcessInfo.processInfo.environment)
} catch {
    FileHandle.standardError.write(Data("pet-clinic: \(error.message)\n".utf8))
    exit(2)
}

let registry = PrometheusCollectorRegistry()
MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))

let clinic: Clinic
do {
    // Depot's metrics go to the registry bootstrapped above.
    let url = try settings.storeURL.setting("metrics", to: "true")
    logger.info("Opening the store", metadata: ["url": "\(url.redacted)"])
    clinic = Clinic(store: try await url.open(logger: logger))
    try await clinic.prepare()
} catch {
    FileHandle.standardError.write(Data("pet-clinic: cannot open the store: \(error)\n".utf8))
    exit(2)
}

let app = buildApplication(clinic: clinic, settings: settings, metrics: registry, logger: logger) { port in
    // One line on standard output that scripts and tests wait for (the port, also when
    // PORT=0 picked one).
    FileHandle.standardOutput.write(Data("pet-clinic listening on \(settings.host):\(port)\n".utf8))
}
do {
    try await app.runService()
} catch {
    FileHandle.standardError.write(Data("pet-clinic: \(error)\n".utf8))
    exit(1)
}
