import Configuration
import Depot
import Logging
import Metrics
import OTel
import Prometheus
import ServiceLifecycle
import Tracing

/// Where traces and metrics go besides `/metrics`: nowhere by default, so the server, its
/// tests and `make load` need no collector.
public struct TelemetrySettings: Sendable {
    /// An OpenTelemetry exporter, named as `OTEL_TRACES_EXPORTER` names it.
    public enum Exporter: String, Sendable, CaseIterable {
        /// Nothing is exported (the default).
        case none
        /// OTLP over HTTP (protobuf), to `otel.exporter.otlp.endpoint`. (swift-otel 1.6
        /// has no console exporter for traces or metrics.)
        case otlp
    }

    public var traces: Exporter
    public var metrics: Exporter
    /// The OTLP/HTTP collector's base URL; signals go to its `/v1/traces` and `/v1/metrics`.
    public var otlpEndpoint: String?
    public var serviceName: String

    public init(traces: Exporter = .none, metrics: Exporter = .none, otlpEndpoint: String? = nil, serviceName: String = "pet-clinic") {
        self.traces = traces
        self.metrics = metrics
        self.otlpEndpoint = otlpEndpoint
        self.serviceName = serviceName
    }

    /// Reads the `otel.*` keys (see ``ClinicSettings``). They are the OpenTelemetry
    /// specification's environment variables, which swift-otel also reads itself: its other
    /// `OTEL_*` variables (headers, timeouts, sampler, ...) apply as the specification says.
    public init(config: ConfigReader) throws(DepotError) {
        func exporter(_ key: String, _ variable: String) throws(DepotError) -> Exporter {
            let text = config.string(forKey: ConfigKey(key), default: "none")
            guard let exporter = Exporter(rawValue: text.lowercased()) else {
                throw DepotError(.invalidConfiguration, "\(variable) must be one of \(Exporter.allCases.map(\.rawValue).joined(separator: ", ")), not '\(text)'.")
            }
            return exporter
        }
        traces = try exporter("otel.traces.exporter", "OTEL_TRACES_EXPORTER")
        metrics = try exporter("otel.metrics.exporter", "OTEL_METRICS_EXPORTER")
        otlpEndpoint = config.string(forKey: "otel.exporter.otlp.endpoint")
        serviceName = config.string(forKey: "otel.service.name", default: "pet-clinic")
        // swift-otel is built with its OTLP/HTTP exporter only (the example's Package.swift
        // enables that trait alone): gRPC would stop the process where swift-otel reads it.
        if let transport = config.string(forKey: "otel.exporter.otlp.protocol"), !transport.hasPrefix("http/") {
            throw DepotError(.invalidConfiguration, "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or http/json (this server exports OTLP over HTTP only), not '\(transport)'.")
        }
    }

    /// Whether requests and the store report spans.
    public var tracing: Bool { traces != .none }

    /// swift-otel's configuration for these settings.
    func openTelemetry(logger: Logger) -> OTel.Configuration {
        var configuration = OTel.Configuration.default
        configuration.serviceName = serviceName
        configuration.diagnosticLogger = .custom(logger)
        configuration.logs.enabled = false
        configuration.traces.enabled = traces != .none
        configuration.metrics.enabled = metrics != .none
        configuration.traces.exporter = .otlp
        configuration.metrics.exporter = .otlp
        if let otlpEndpoint {
            // A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is; an endpoint set in code is used
            // as it is, so the signal's path is added here.
            let base = otlpEndpoint.hasSuffix("/") ? otlpEndpoint : otlpEndpoint + "/"
            configuration.traces.otlpExporter.endpoint = base + "v1/traces"
            configuration.metrics.otlpExporter.endpoint = base + "v1/metrics"
        }
        return configuration
    }

    /// Bootstraps swift-metrics (Prometheus for `/metrics`, and OpenTelemetry when its
    /// exporter is on) and, when traces are on, swift-distributed-tracing with swift-otel's
    /// tracer. Returns the services that export in the background: run them with the
    /// application (they flush when it stops).
    public func bootstrap(prometheus registry: PrometheusCollectorRegistry, logger: Logger) throws -> [any Service] {
        var services: [any Service] = []
        let prometheus = PrometheusMetricsFactory(registry: registry)
        if metrics != .none {
            let backend = try OTel.makeMetricsBackend(configuration: openTelemetry(logger: logger))
            MetricsSystem.bootstrap(MultiplexMetricsHandler(factories: [prometheus, backend.factory]))
            services.append(backend.service)
        } else {
            MetricsSystem.bootstrap(prometheus)
        }
        if traces != .none {
            let backend = try OTel.makeTracingBackend(configuration: openTelemetry(logger: logger))
            InstrumentationSystem.bootstrap(backend.factory)
            services.append(backend.service)
        }
        return services
    }
}
