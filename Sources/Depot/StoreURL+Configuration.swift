public import Configuration
public import DepotCore
import Foundation
public import Logging

extension StoreURL {
    /// The environment variable that names the store: `DEPOT_STORE_URL`.
    public static let environmentVariable = "DEPOT_STORE_URL"

    /// The configuration key that names the store: `depot.store.url`. Options can be set as
    /// keys beside it (`depot.store.durability`, `depot.store.mapSize`, ...) and override the
    /// URL's query items.
    public static let configurationKey = "depot.store.url"

    /// Reads the store URL from the environment (`DEPOT_STORE_URL`).
    ///
    /// - Returns: `nil` when the variable is not set.
    /// - Throws: `DepotError.Code.invalidConfiguration` when it is set but malformed.
    public static func fromEnvironment(_ environment: [String: String]? = nil) throws(DepotError) -> StoreURL? {
        let variables = environment ?? ProcessInfo.processInfo.environment
        guard let value = variables[environmentVariable], !value.isEmpty else { return nil }
        return try StoreURL(value)
    }

    /// Reads the store URL and its options from swift-configuration: `depot.store.url`
    /// and option keys under `depot.store` (a JSON file's `{"depot": {"store": {"url": ...,
    /// "durability": "full"}}}`, or the environment variables `DEPOT_STORE_URL`,
    /// `DEPOT_STORE_DURABILITY`, `DEPOT_STORE_MAP_SIZE`, `DEPOT_STORE_BUSY_TIMEOUT`,
    /// `DEPOT_STORE_ADOPT`, ...:
    /// swift-configuration spells camel-case keys with underscores in the environment).
    ///
    /// `depot.store.url` and `depot.store.password` are read as secrets
    /// (`isSecret: true`), so an access reporter logs them redacted.
    ///
    /// - Returns: `nil` when `depot.store.url` is not set.
    /// - Throws: `DepotError.Code.invalidConfiguration` for a malformed URL or option.
    public init?(config: ConfigReader) throws(DepotError) {
        // Secret: a postgres: URL may hold a password, and an access reporter (AccessLogger,
        // FileAccessLogger) would otherwise log the value it read.
        guard let text = config.string(forKey: ConfigKey(Self.configurationKey), isSecret: true) else { return nil }
        var url = try StoreURL(text)
        for spec in Self.options(for: url.backend) {
            let key = ConfigKey("depot.store.\(spec.name)")
            let value: String?
            if case .integer = spec.kind, let number = config.int(forKey: key) {
                value = String(number)
            } else if case .choice(let choices) = spec.kind, Set(choices) == ["false", "true"], let flag = config.bool(forKey: key) {
                // A switch such as `adopt` may be a JSON boolean, not only the text "true".
                value = String(flag)
            } else {
                value = config.string(forKey: key, isSecret: spec.name == "password")
            }
            if let value { url = try url.setting(spec.name, to: value) }
        }
        self = url
    }
}

/// Opens the store named by swift-configuration's `depot.store.url` (see
/// ``StoreURL/init(config:)``), blocking the calling thread until it is ready: for code
/// that is not async. Async code uses `openStore(config:logger:)`.
///
/// - Throws: `DepotError.Code.invalidConfiguration` when the key is missing or malformed,
///   and the backend's errors when opening fails.
public func openStoreBlocking(config: ConfigReader, logger: Logger? = nil) throws(DepotError) -> any Store {
    guard let url = try StoreURL(config: config) else {
        throw DepotError(.invalidConfiguration, "No store is configured: set \(StoreURL.configurationKey) (environment variable \(StoreURL.environmentVariable)) to a store URL such as sqlite:///var/lib/app/app.sqlite.")
    }
    return try url.openBlocking(logger: logger)
}
