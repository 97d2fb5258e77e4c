import Configuration
import Depot
import Foundation
import Logging

/// What the server reads from its configuration (swift-configuration): the command line
/// first, then the environment. Each key, its environment variable and its option:
///
/// | key | environment | command line | default |
/// |---|---|---|---|
/// | `depot.store.url` | `DEPOT_STORE_URL` | `--store-url` | `sqlite:pet-clinic.sqlite` |
/// | `depot.store.<option>` | `DEPOT_STORE_<OPTION>` | `--store-<option>` | the URL's own |
/// | `host` | `HOST` | `--host` | `127.0.0.1` |
/// | `port` | `PORT` | `--port` | `8080` (0: a free port) |
/// | `log.level` | `LOG_LEVEL` | `--log-level` | `info` |
/// | `otel.traces.exporter` | `OTEL_TRACES_EXPORTER` | `--otel-traces-exporter` | `none` |
/// | `otel.metrics.exporter` | `OTEL_METRICS_EXPORTER` | `--otel-metrics-exporter` | `none` |
/// | `otel.exporter.otlp.endpoint` | `OTEL_EXPORTER_OTLP_ENDPOINT` | `--otel-exporter-otlp-endpoint` | `http://localhost:4318` |
/// | `otel.service.name` | `OTEL_SERVICE_NAME` | `--otel-service-name` | `pet-clinic` |
///
/// `host` and `port` are the keys Hummingbird's `ApplicationConfiguration(reader:)` reads;
/// `depot.store.*` are Depot's (`StoreURL(config:)`), with the command line's spelling
/// shortened from `--depot-store-url` to `--store-url`.
public struct ClinicSettings: Sendable {
    public var storeURL: StoreURL
    public var host: String
    /// 0 picks a free port, which the server prints.
    public var port: Int
    public var logLevel: Logger.Level
    public var telemetry: TelemetrySettings

    public init(storeURL: StoreURL, host: String = "127.0.0.1", port: Int = 8080, logLevel: Logger.Level = .info, telemetry: TelemetrySettings = .init()) {
        self.storeURL = storeURL
        self.host = host
        self.port = port
        self.logLevel = logLevel
        self.telemetry = telemetry
    }

    /// Reads the settings; a bad value is a `DepotError.invalidConfiguration` naming the
    /// key as the environment spells it (the server prints it and exits with status 2).
    public init(config: ConfigReader) throws(DepotError) {
        if let url = try StoreURL(config: config) {
            storeURL = url
        } else {
            storeURL = try StoreURL("sqlite:pet-clinic.sqlite")
        }
        host = config.string(forKey: "host", default: "127.0.0.1")
        // Read as text and checked here: swift-configuration's `int` answers nil for a value
        // that is not a number, which would quietly be the default port.
        if let text = config.string(forKey: "port") {
            guard let port = Int(text), (0...65_535).contains(port) else {
                throw DepotError(.invalidConfiguration, "PORT must be a port number from 0 to 65535, not '\(text)'.")
            }
            self.port = port
        } else {
            port = 8080
        }
        let level = config.string(forKey: "log.level", default: "info")
        guard let logLevel = Logger.Level(rawValue: level.lowercased()) else {
            throw DepotError(.invalidConfiguration, "LOG_LEVEL must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(level)'.")
        }
        self.logLevel = logLevel
        telemetry = try TelemetrySettings(config: config)
    }

    /// The configuration the server reads: `arguments` (its command line, `--key value`),
    /// then `environment`.
    public static func reader(
        arguments: [String] = CommandLine.arguments, environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> ConfigReader {
        let commandLine = CommandLineArgumentsProvider(arguments: arguments).mapKeys { key in
            // --store-url, --store-durability, ... for Depot's depot.store.* keys.
            guard key.components.starts(with: ["depot", "store"]) else { return key }
            return AbsoluteConfigKey(Array(key.components.dropFirst()), context: key.context)
        }
        return ConfigReader(providers: [commandLine, EnvironmentVariablesProvider(environmentVariables: environment)])
    }
}
