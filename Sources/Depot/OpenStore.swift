public import DepotCore
import DepotLMDB
import DepotSQLite
import Foundation
public import Logging

extension StoreURL {
    /// Opens the store this URL names.
    ///
    /// - Parameter logger: Where the store logs (nothing by default). The URL's
    ///   `slowThreshold` option sets when a transaction is logged as slow.
    /// - Throws: ``DepotError`` from the backend: ``DepotError/Code/storeCorrupted`` for a
    ///   file that is not a store of that kind, ``DepotError/Code/permissionDenied`` or
    ///   ``DepotError/Code/io`` when the path cannot be used.
    public func open(logger: Logger? = nil) throws(DepotError) -> any Store {
        var log = logger.map { StoreLog(logger: $0) } ?? .disabled
        if let value = self[option: "slowThreshold"], let threshold = Self.parseDuration(value) { log.slowThreshold = threshold }
        switch backend {
        case .memory:
            return MemoryStore(log: log)
        case .sqlite:
            var options = SQLiteStore.Options()
            if let value = self[option: "durability"] { options.durability = value == "full" ? .full : .normal }
            if let value = self[option: "readers"], let readers = Int(value) { options.readers = readers }
            if let value = self[option: "busyTimeout"], let timeout = Self.parseDuration(value) { options.busyTimeout = timeout }
            if let value = self[option: "adopt"] { options.adoptForeignDatabase = value == "true" }
            guard let path else { return try SQLiteStore.inMemory(options: options, log: log) }
            return try SQLiteStore(path: path, options: options, log: log)
        case .lmdb:
            var options = LMDBStore.Options()
            if let value = self[option: "mapSize"], let size = Self.parseSize(value) { options.mapSize = size }
            if let value = self[option: "maxReaders"], let readers = Int(value) { options.maxReaders = readers }
            if let value = self[option: "durability"] {
                options.durability = value == "relaxed" ? .relaxed : (value == "unsafe" ? .unsafe : .full)
            }
            guard let path else {
                throw DepotError(.invalidConfiguration, "An lmdb: URL needs a directory: lmdb:///absolute/dir or lmdb:relative/dir.")
            }
            do {
                return try LMDBStore(directory: path, options: options, log: log)
            } catch let error as DepotError {
                throw error
            } catch {
                throw DepotError(.io, "Cannot open the LMDB store at \(path): \(error)")
            }
        }
    }
}

/// Opens the store a URL string names, e.g. `sqlite:///var/lib/app/app.sqlite?durability=full`
/// (see ``StoreURL`` for every scheme and option).
///
/// - Throws: ``DepotError/Code/invalidConfiguration`` for a malformed URL or option, and
///   the backend's errors when opening fails.
public func openStore(url: String, logger: Logger? = nil) throws(DepotError) -> any Store {
    try StoreURL(url).open(logger: logger)
}
