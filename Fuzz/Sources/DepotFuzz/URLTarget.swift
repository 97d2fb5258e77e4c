import Depot
import DepotCore
import Foundation
import DepotTesting
import Logging

/// The store URL parser: every string gets a `StoreURL` or a `DepotError`. A parsed URL
/// must print as a string that parses back to itself, and the store it names must open
/// (in a scratch folder, never at the fuzzed path) or fail with a `DepotError`: that is
/// where options become page sizes, reader counts and thresholds.
enum URLTarget {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        let text = String(decoding: bytes, as: UTF8.self)
        let url: StoreURL
        do {
            url = try StoreURL(text)
        } catch {
            return
        }
        do {
            let again = try StoreURL(url.unredacted)
            guard again == url else { violated("'\(text)' parses to \(url), whose unredacted text parses to \(again)") }
        } catch {
            violated("'\(text)' parses, but its unredacted text '\(url.unredacted)' does not: \(error)")
        }
        open(url)
    }

    /// Opens the store with the URL's options but a scratch location, writes once so the
    /// slow-transaction threshold is used, and closes it.
    static func open(_ url: StoreURL) {
        var scratch = "\(url.backend.rawValue):"
        switch url.backend {
        case .memory: break
        case .postgres:
            // A fuzzed URL names any host: the fuzzer never connects anywhere. The parse and
            // round trip above are what it checks for this scheme.
            return
        case .sqlite, .lmdb:
            let folder = Scratch.path("url")
            try? FileManager.default.removeItem(atPath: folder)
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            scratch += "//" + (folder as NSString).appendingPathComponent(url.backend == .sqlite ? "store.sqlite" : "store")
        }
        var located: StoreURL
        do {
            located = try StoreURL(scratch)
            for (name, value) in url.options { located = try located.setting(name, to: value) }
        } catch {
            violated("options of \(url) are refused on a scratch path: \(error)")
        }
        var logger = Logger(label: "depot-fuzz", factory: { _ in SwiftLogNoOpLogHandler() })
        logger.logLevel = .trace
        let store: any Store
        do {
            store = try located.openBlocking(logger: logger)
        } catch {
            return
        }
        let entity = Sample.entity.description
        let written = blocking { (completion: @escaping @Sendable (Result<Void, any Error>) -> Void) in
            store.submitRegistration([entity]) { registered in
                switch registered {
                case .failure(let error):
                    completion(.failure(error))
                case .success(let handles):
                    guard let handle = handles.first else { violated("registration of \(entity.name) returned no handle") }
                    store.submitWrite({ try $0.insert(try Sample(id: 1).row, into: handle) }, completion: completion)
                }
            }
        }
        if case .failure(let error) = written { expectDepotError(error, "a write to \(located)") }
        _ = blockingAsync { await store.close() }
    }
}
