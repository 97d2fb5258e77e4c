import Depot
import Foundation
import Testing

@testable import PetClinic

/// The server's configuration through swift-configuration: the environment's names the
/// server has always read, the command line's options before them, and a bad value refused
/// with the name the operator typed.
@Suite("PetClinic settings")
struct SettingsTests {
    func settings(_ arguments: [String] = [], _ environment: [String: String] = [:]) throws(DepotError) -> ClinicSettings {
        try ClinicSettings(config: ClinicSettings.reader(arguments: ["pet-clinic"] + arguments, environment: environment))
    }

    @Test("defaults: a SQLite file, loopback:8080, info, no exporter")
    func defaults() throws {
        let settings = try settings()
        #expect(settings.storeURL.backend == .sqlite)
        #expect(settings.storeURL.path == "pet-clinic.sqlite")
        #expect(settings.host == "127.0.0.1")
        #expect(settings.port == 8080)
        #expect(settings.logLevel == .info)
        #expect(settings.telemetry.traces == .none)
        #expect(settings.telemetry.metrics == .none)
        #expect(!settings.telemetry.tracing)
    }

    @Test("the environment: DEPOT_STORE_URL and its options, HOST, PORT, LOG_LEVEL, OTEL_*")
    func environment() throws {
        let settings = try settings([], [
            "DEPOT_STORE_URL": "lmdb:/tmp/clinic.lmdb", "DEPOT_STORE_DURABILITY": "relaxed", "HOST": "0.0.0.0", "PORT": "9000",
            "LOG_LEVEL": "debug", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            "OTEL_SERVICE_NAME": "clinic-1",
        ])
        #expect(settings.storeURL.backend == .lmdb)
        #expect(settings.storeURL.options["durability"] == "relaxed")
        #expect(settings.host == "0.0.0.0")
        #expect(settings.port == 9000)
        #expect(settings.logLevel == .debug)
        #expect(settings.telemetry.traces == .otlp)
        #expect(settings.telemetry.metrics == .none)
        #expect(settings.telemetry.otlpEndpoint == "http://collector:4318")
        #expect(settings.telemetry.serviceName == "clinic-1")
        let otel = settings.telemetry.openTelemetry(logger: .init(label: "test"))
        #expect(otel.traces.enabled && !otel.metrics.enabled && !otel.logs.enabled)
        #expect(otel.traces.otlpExporter.endpoint == "http://collector:4318/v1/traces")
    }

    @Test("the command line comes before the environment")
    func commandLine() throws {
        let settings = try settings(
            ["--store-url", "memory:", "--host", "::1", "--port", "0", "--log-level", "warning", "--otel-metrics-exporter", "otlp"],
            ["DEPOT_STORE_URL": "sqlite:other.sqlite", "PORT": "9000", "LOG_LEVEL": "debug"])
        #expect(settings.storeURL.backend == .memory)
        #expect(settings.host == "::1")
        #expect(settings.port == 0)
        #expect(settings.logLevel == .warning)
        #expect(settings.telemetry.metrics == .otlp)
        #expect(settings.telemetry.traces == .none)
    }

    @Test("a bad value is refused, naming the key")
    func badValues() {
        let cases: [([String], [String: String], String)] = [
            (["--port", "99999"], [:], "PORT must be a port number from 0 to 65535, not '99999'"),
            ([], ["PORT": "http"], "PORT must be a port number"),
            (["--log-level", "loud"], [:], "LOG_LEVEL must be one of"),
            ([], ["OTEL_TRACES_EXPORTER": "jaeger"], "OTEL_TRACES_EXPORTER must be one of none, otlp, not 'jaeger'"),
            ([], ["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"], "OTLP over HTTP only"),
            (["--store-url", "sqlite:x.sqlite?durability=sometimes"], [:], "durability"),
        ]
        for (arguments, environment, phrase) in cases {
            do {
                _ = try settings(arguments, environment)
                Issue.record("\(arguments) \(environment) was accepted")
            } catch {
                #expect(error.code == .invalidConfiguration)
                #expect(error.message.contains(phrase), "\(error.message)")
            }
        }
    }
}
