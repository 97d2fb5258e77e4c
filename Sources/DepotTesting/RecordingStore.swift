public import DepotCore
import NIOConcurrencyHelpers

/// A store that forwards to another and records how reads use it: how many fetches ran and
/// the most rows any one fetch delivered. Tests use it to show that streaming reads stay
/// within their batch size, whatever the backend.
public final class RecordingStore: RowReadingStore {
    /// The store every call is forwarded to.
    public let base: any Store
    private let stats = NIOLockedValueBox((fetches: 0, largestFetch: 0, aggregates: 0))

    /// A store that forwards to `base` and records its reads.
    public init(_ base: any Store) { self.base = base }

    /// The number of fetches run through this store.
    public var fetchCount: Int { stats.withLockedValue { $0.fetches } }
    /// The most rows one fetch delivered.
    public var largestFetch: Int { stats.withLockedValue { $0.largestFetch } }
    /// The number of aggregate queries run through this store.
    public var aggregateCount: Int { stats.withLockedValue { $0.aggregates } }
    /// Every query that reads many rows: fetches and aggregates.
    public var queryCount: Int { stats.withLockedValue { $0.fetches + $0.aggregates } }

    func recordAggregate() {
        stats.withLockedValue { $0.aggregates += 1 }
    }

    func record(rows: Int) {
        stats.withLockedValue {
            $0.fetches += 1
            $0.largestFetch = max($0.largestFetch, rows)
        }
    }

    /// The base store's name.
    public var backendName: String { base.backendName }
    /// The base store's change feed.
    public var changes: ChangeFeed { base.changes }

    /// Forwards the registration to the base store.
    public func submitRegistration(_ entities: [EntityDescription], completion: @escaping @Sendable (Result<[EntityHandle], any Error>) -> Void) {
        base.submitRegistration(entities, completion: completion)
    }

    /// Runs `body` in a read of the base store, through a transaction that records its fetches.
    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T, completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        base.submitRead({ try body(Recording(base: $0, store: self)) }, completion: completion)
    }

    /// Runs `body` in a write of the base store, through a transaction that records its fetches.
    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T, completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        base.submitWrite({ try body(RecordingWrite(base: $0, store: self)) }, completion: completion)
    }

    /// Forwards the lookup to the base store.
    public func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        base.readRow(entity, key: key, visit: visit, completion: completion)
    }

    /// The base store's entities.
    public func storedEntities() async throws -> [EntityHandle] { try await base.storedEntities() }

    /// The base store's own check.
    public func checkIntegrity() async throws -> [String] { try await base.checkIntegrity() }

    /// Closes the base store.
    public func close() async { await base.close() }

    struct Recording: ReadTransaction {
        let base: any ReadTransaction
        let store: RecordingStore

        func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
            var rows = 0
            defer { store.record(rows: rows) }
            try base.fetch(query, reserve: reserve) { row in
                rows += 1
                try body(row)
            }
        }

        func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
            try base.fetchRow(entity, key: key, body)
        }

        func count(_ query: Query) throws -> Int { try base.count(query) }

        func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
            store.recordAggregate()
            return try base.aggregate(query)
        }
    }

    struct RecordingWrite: WriteTransaction {
        let base: any WriteTransaction
        let store: RecordingStore

        func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
            try Recording(base: base, store: store).fetch(query, reserve: reserve, body)
        }

        func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
            try base.fetchRow(entity, key: key, body)
        }

        func count(_ query: Query) throws -> Int { try base.count(query) }

        func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
            store.recordAggregate()
            return try base.aggregate(query)
        }

        func insert(_ row: Row, into entity: EntityHandle) throws { try base.insert(row, into: entity) }
        func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool { try base.upsert(row, into: entity) }
        func update(_ row: Row, in entity: EntityHandle) throws { try base.update(row, in: entity) }
        func delete(key: Value, from entity: EntityHandle) throws -> Bool { try base.delete(key: key, from: entity) }
        func delete(_ query: Query) throws -> Int { try base.delete(query) }
    }
}
