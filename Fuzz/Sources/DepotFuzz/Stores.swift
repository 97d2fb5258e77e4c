import DepotCore
import DepotLMDB
import DepotSQLite
import DepotTesting
import Foundation
import Synchronization

/// Waits on this (non-pool) thread for a completion-handler call: libFuzzer calls targets
/// synchronously, and the stores answer on their own queues.
func blocking<T: Sendable>(_ submit: (@escaping @Sendable (Result<T, any Error>) -> Void) -> Void) -> Result<T, any Error> {
    let box = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    submit { result in
        box.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return box.withLock { $0! }
}

/// Runs async code to completion from the fuzzing thread.
func blockingAsync<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) -> Result<T, any Error> {
    blocking { completion in
        Task { completion(await Result { () async throws -> T in try await body() }) }
    }
}

extension Result where Failure == any Error {
    init(_ body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}

/// A scratch folder for this process, removed at exit.
enum Scratch {
    static let root: String = {
        let path = (NSTemporaryDirectory() as NSString).appendingPathComponent("depot-fuzz-\(getpid())")
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: Scratch.root) }
        return path
    }()

    static func path(_ name: String) -> String { (root as NSString).appendingPathComponent(name) }
}

/// The records every store holds for the request target: values at the edges of every type.
enum SampleRows {
    static let samples: [Sample] = [
        Sample(id: 1),
        Sample(id: -1, int: Int.max, int32: Int32.max, int16: Int16.max, double: .nan, bool: true, string: "Tom", data: Data([0, 255]),
               optionalInt: 0, optionalDouble: -0.0, optionalBool: false, optionalString: "", optionalData: Data()),
        Sample(id: Int64.max, int: Int.min, int32: Int32.min, int16: Int16.min, double: -.infinity, string: "tom",
               date: Date(timeIntervalSinceReferenceDate: -1e12), optionalInt: Int64.min, optionalDouble: .nan, optionalString: "Tom"),
        Sample(id: Int64.min, int: 3, double: .infinity, string: "Tömmy 🐈", data: Data([1]), optionalInt: Int64.max,
               optionalDouble: 2.5, optionalBool: true, optionalString: "T", optionalDate: Date(timeIntervalSinceReferenceDate: 0),
               optionalUUID: UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255))),
        Sample(id: 0, int: -3, double: -0.0, string: "", optionalDouble: .infinity, optionalString: "\u{0}x"),
        Sample(id: 7, int: 7, double: 1e-300, string: "a\u{0}b", data: Data(repeating: 7, count: 40), optionalInt: 7, optionalString: "Tommy"),
    ]
    static let rows: [Row] = samples.compactMap { try? $0.row }
}

/// One store of each backend, opened once per process, with `Sample` registered and
/// ``SampleRows`` written.
enum Stores {
    static let memory: any Store = prepare(MemoryStore())
    static let sqlite: any Store = prepare(try! SQLiteStore.inMemory())
    static let lmdb: LMDBStore = prepare(try! LMDBStore(directory: Scratch.path("lmdb"), options: .init(mapSize: 8 << 20, durability: .unsafe)))
    /// Each store with the handle `Sample` has in it.
    static let all: [(name: String, store: any Store, entity: EntityHandle)] = [("memory", memory), ("sqlite", sqlite), ("lmdb", lmdb)].map {
        ($0.0, $0.1, handle(in: $0.1))
    }

    /// Each store with the handle of ``indexed``, which holds the same rows.
    static let allIndexed: [(name: String, store: any Store, entity: EntityHandle)] = all.map {
        ($0.name, $0.store, handle(in: $0.store, indexed))
    }

    /// `Sample` under another name, with composite indexes of every shape the planners
    /// know: a string and an integer, a descending optional before a double (nil and NaN in
    /// the keys), three optionals, a bool before a descending date, and a unique one over
    /// the key and a UUID. Requests on it go through each backend's planner, and must
    /// answer as requests on `Sample`, which are scans.
    static let indexed: EntityDescription = {
        var description = Sample.entity.description
        description.name = "IndexedSample"
        description.indexes = [
            .index("string", "int"),
            .index(.descending("optionalInt"), "optionalDouble"),
            .index("optionalString", "optionalDate", "uuid"),
            .index("bool", .descending("date")),
            .unique("id", "uuid"),
        ]
        return description
    }()

    /// The handle of `entity` in `store` (registering an unchanged entity returns its handle).
    static func handle(in store: any Store, _ entity: EntityDescription = Sample.entity.description) -> EntityHandle {
        try! blocking { store.submitRegistration([entity], completion: $0) }.get()[0]
    }

    private static func prepare<S: Store>(_ store: S) -> S {
        for entity in [handle(in: store), handle(in: store, indexed)] {
            _ = try! blocking { completion in
                store.submitWrite({ transaction in
                    for row in SampleRows.rows { _ = try transaction.upsert(row, into: entity) }
                }, completion: completion)
            }.get()
        }
        return store
    }
}
