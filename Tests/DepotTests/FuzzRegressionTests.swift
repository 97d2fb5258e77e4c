import Depot
import DepotCore
import DepotLMDB
import DepotSQLite
import DepotTesting
import Foundation
import Testing

/// Inputs the fuzz targets (Fuzz/, `make fuzz`) found to crash or to break a property,
/// replayed through the same public or testable path. Each input is also kept under
/// `Fuzz/Corpus/<target>/regressions/`, so every fuzz run starts by replaying it.
@Suite("Fuzzing regressions")
struct FuzzRegressionTests {
    /// One store of each backend with `Sample` records at the edges of their types.
    static func withStores(_ body: ([(String, any Store)]) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-fuzz-regression-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let stores: [(String, any Store)] = [
            ("memory", MemoryStore()), ("sqlite", try SQLiteStore.inMemory()), ("lmdb", try LMDBStore(directory: directory)),
        ]
        for (_, store) in stores {
            try await Controller<Sample, Sample>(store: store).save(samples)
        }
        do {
            try await body(stores)
        } catch {
            for (_, store) in stores { await store.close() }
            throw error
        }
        for (_, store) in stores { await store.close() }
    }

    static let samples: [Sample] = [
        Sample(id: 1), Sample(id: -1, int: Int.max, string: "Tom"), Sample(id: Int64.max, int: Int.min, optionalInt: 3),
        Sample(id: Int64.min, int: 3, optionalString: "T"), Sample(id: 0),
    ]
    static let idsInKeyOrder: [Int64] = samples.map(\.id).sorted()

    /// Fuzz/Corpus/request/regressions/deep-not-chain: `!` applied 15,337 times to `false`.
    /// Resolving recursed once per level and overflowed an 8 MiB stack (issue #11, item 12).
    /// not-chain-256-store-worker: 256 levels resolved, then SQLite's query compiler
    /// overflowed its worker thread's stack under ASan; 2,000 levels do without ASan.
    /// A predicate this deep must give a result (every backend alike) or a DepotError.
    @Test("a deeply nested predicate gives a result or a DepotError, never a stack overflow", arguments: [2_000, 15_337])
    func deepPredicate(_ depth: Int) async throws {
        try await Self.withStores { stores in
            for shape in 0..<3 {
                var tree = PredicateExpression.constant(false)
                for _ in 0..<depth {
                    switch shape {
                    case 0: tree = .not(tree)
                    case 1: tree = .and([tree, .constant(true)])
                    default: tree = .or([.constant(false), tree])
                    }
                }
                let request = Request<Sample>(Condition(tree))
                var answers: [[Int64]] = []
                for (name, store) in stores {
                    do {
                        answers.append(try await Controller<Sample, Sample>(store: store).fetchAll(request).map(\.id))
                    } catch let error as DepotError {
                        #expect(error.code == .invalidPredicate, "\(name): \(error)")
                    }
                }
                // An odd number of negations of false is true: every record, when answered.
                #expect(answers.allSatisfy { $0 == (shape == 0 && depth % 2 == 1 ? Self.idsInKeyOrder : []) })
            }
        }
    }

    /// Fuzz/Corpus/request/regressions/resultset-offset-plus-limit-overflow: a ResultSet
    /// position added to an offset, and an offset added to a limit, overflowed (issue #11,
    /// item 3). Every combination of extreme numbers gives a result or a DepotError, and
    /// every backend gives the same one.
    @Test("offsets, limits and ResultSet positions at Int.max give a result or a DepotError on every backend")
    func extremeNumbers() async throws {
        try await Self.withStores { stores in
            let numbers = [0, 1, 2, Int.max - 1, Int.max]
            for offset in numbers {
                for limit in [nil] + numbers {
                    var request = Request<Sample>().offset(offset)
                    if let limit { request = request.limit(limit) }
                    let expected = Array(Self.idsInKeyOrder.dropFirst(min(offset, Self.idsInKeyOrder.count)).prefix(limit ?? Int.max))
                    for (name, store) in stores {
                        let set = Controller<Sample, Sample>(store: store).results(request)
                        do {
                            #expect(try await set.fetchAll().map(\.id) == expected, "\(name) offset \(offset) limit \(String(describing: limit))")
                            #expect(try await set.count() == expected.count, "\(name) offset \(offset) limit \(String(describing: limit))")
                            for position in numbers {
                                let record = try await set[position]
                                #expect(record?.id == (position < expected.count ? expected[position] : nil), "\(name) offset \(offset) limit \(String(describing: limit)) position \(position)")
                            }
                        } catch let error as DepotError {
                            Issue.record("\(name) offset \(offset) limit \(String(describing: limit)): \(error)")
                        }
                    }
                }
            }
        }
    }

    /// Fuzz/Corpus/schema/regressions/stored-primary-key-index-out-of-range: a stored LMDB
    /// schema that decodes but names a primary key position past its attributes trapped
    /// (index out of range) when the entity was registered (issue #11, item 8). It must be
    /// refused as `storeCorrupted`.
    @Test(
        "an LMDB stored schema with a bad primary key index is refused as storeCorrupted",
        arguments: ["fuzz-input", "primaryKeyIndex=99", "primaryKeyIndex=-1"])
    func storedSchemaWithBadPrimaryKey(_ variant: String) async throws {
        let json: [UInt8]
        if variant == "fuzz-input" {
            let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Fuzz/Corpus/schema/regressions/stored-primary-key-index-out-of-range")
            json = Array(try Data(contentsOf: file))
        } else {
            var entity = Sample.entity.description
            entity.primaryKeyIndex = variant.hasSuffix("-1") ? -1 : 99
            json = Array(try JSONEncoder().encode(StoredEntity(schemaVersion: 1, recordFormat: 1, entity: entity)))
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-fuzz-regression-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try LMDBStore(directory: directory)
        try await Controller<Sample, Sample>(store: store).save(Self.samples)
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction else { return }
            try t.put(t.metaDBI, Catalog.entityKey("Sample"), json, context: "test")
        }
        await store.close()

        let reopened = try LMDBStore(directory: directory)
        do {
            _ = try await Controller<Sample, Sample>(store: reopened).fetchAll()
            Issue.record("a stored schema with a bad primary key index was accepted")
        } catch let error as DepotError {
            #expect(error.code == .storeCorrupted, "\(error)")
        }
        await reopened.close()
    }

    /// Fuzz/Corpus/url/regressions/lmdb-map-size-int-max: `mapSize=9223372036854775807`
    /// passes URL validation and overflowed while being rounded to whole pages at open
    /// (issue #11, item 3). It must open or be refused with a DepotError.
    @Test("an LMDB URL with mapSize=Int.max opens or is refused with a DepotError")
    func hugeMapSize() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-fuzz-regression-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            let store = try await openStore(url: "lmdb://\(directory)?mapSize=9223372036854775807")
            await store.close()
        } catch {
            #expect([.invalidConfiguration, .storeFull, .io, .backend].contains(error.code), "\(error)")
        }
    }

    /// Found by the url target: a path holding `%`, `?` or a trailing space (written `%25`,
    /// `%3F`, `%20`) parses, but `description` prints it unescaped, and that string either
    /// fails to parse or names another path. A URL's description must parse back to it.
    @Test("a StoreURL's description parses back to the same URL", arguments: [
        "lmdb:///a%25b?durability=unsafe", "sqlite:///dir/what%3F.sqlite", "lmdb:data%20",
    ])
    func descriptionRoundTrip(_ text: String) throws {
        let url = try StoreURL(text)
        #expect(try StoreURL(url.unredacted) == url, "\(text) prints as \(url.unredacted)")
    }
}
