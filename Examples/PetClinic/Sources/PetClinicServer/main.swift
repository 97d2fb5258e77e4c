import Depot
import Foundation
import Hummingbird
import Logging
import PetClinic
import Prometheus
import ServiceLifecycle

// pet-clinic: the example service. Its configuration comes from the command line and the
// environment through swift-configuration (ClinicSettings lists the keys: --store-url or
// DEPOT_STORE_URL picks the store, --host/HOST and --port/PORT the address); SIGTERM or
// SIGINT shuts it down gracefully. Metrics (requests from Hummingbird, transactions from
// Depot) are at GET /metrics; traces and metrics go to an OpenTelemetry collector when
// --otel-traces-exporter / --otel-metrics-exporter (OTEL_TRACES_EXPORTER, ...) say so.

let settings: ClinicSettings
do {
    settings = try ClinicSettings(config: ClinicSettings.reader())
} catch {
    FileHandle.standardError.write(Data("pet-clinic: \(error.message)\n".utf8))
    exit(2)
}

var logger = Logger(label: "pet-clinic")
logger.logLevel = settings.logLevel

let registry = PrometheusCollectorRegistry()
let telemetry: [any Service]
do {
    telemetry = try settings.telemetry.bootstrap(prometheus: registry, logger: logger)
} catch {
    FileHandle.standardError.write(Data("pet-clinic: cannot set up OpenTelemetry: \(error)\n".utf8))
    exit(2)
}

let clinic: Clinic
do {
    // Depot's metrics go to the registry bootstrapped above, its spans (when traces are
    // exported) to the tracer, as children of the request's span.
    var url = try settings.storeURL.setting("metrics", to: "true")
    if settings.telemetry.tracing { url = try url.setting("tracing", to: "true") }
    logger.info("Opening the store", metadata: ["url": "\(url.redacted)"])
    clinic = Clinic(store: try await url.open(logger: logger))
    try await clinic.prepare()
} catch {
    FileHandle.standardError.write(Data("pet-clinic: cannot open the store: \(error)\n".utf8))
    exit(2)
}

let app = buildApplication(clinic: clinic, settings: settings, metrics: registry, telemetry: telemetry, logger: logger) { port in
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
