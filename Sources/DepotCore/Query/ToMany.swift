import NIOConcurrencyHelpers

/// The records that refer to a record through one of their references: a to-many
/// relationship, the inverse of a to-one reference, declared once so it can be named.
///
/// ```swift
/// @Record struct Walk {
///     var id: Int64
///     @Stored(.references(Dog.self, onDelete: .cascade)) var dogID: Int64
///     var position: Int
///     var minutes: Int
/// }
///
/// extension Dog {
///     static let walks = ToMany<Dog, Walk>(\.dogID).sorted(by: \.position)
/// }
///
/// let dogsWithWalks = try await dogs.fetchAll(Request(.hasPrefix(\.name, "R")), including: Dog.walks)
/// let walksPerDog = try await dogs.countRelated(Dog.walks)
/// let walkedLong = try await dogs.fetchAll(having: Dog.walks, where: \.minutes > 60)
/// ```
///
/// Its order (``sorted(by:ascending:)``, then the child's primary key) is the order of each
/// record's related records: an ordered to-many relationship keeps its position in an
/// attribute of the child, so the order is stored data like any other.
public struct ToMany<Parent: ManagedRecord, Child: ManagedRecord>: Sendable {
    /// The child's reference attribute, read when the relationship is first used (so a
    /// declaration never builds an entity while another is being built).
    let reference: PartialKeyPath<Child> & Sendable
    /// The order of each parent's children (sort keys only).
    public private(set) var order: Request<Child>

    /// The children referring to their parent through `reference`.
    public init(_ reference: KeyPath<Child, Parent.ID> & Sendable) {
        self.reference = reference
        self.order = .all
    }

    /// The children referring to their parent through the optional `reference`.
    public init(_ reference: KeyPath<Child, Parent.ID?> & Sendable) {
        self.reference = reference
        self.order = .all
    }

    /// Orders each parent's children by another attribute first (ties by the child's
    /// primary key).
    public func sorted<V: AttributeValue>(by keyPath: KeyPath<Child, V>, ascending: Bool = true) -> ToMany {
        var copy = self
        copy.order = order.sorted(by: keyPath, ascending: ascending)
        return copy
    }

    /// The reference attribute's position and name in the child's entity.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` when the key path is not a reference to
    ///   the parent's entity.
    func resolve() throws(DepotError) -> (index: Int, name: String) {
        let child = Child.entity
        guard let name = child.attributeName(for: reference), let index = child.description.index(of: name) else {
            throw DepotError(.invalidSchema, "The ToMany from \(Parent.entityName) to \(child.name) names a key path that is not an attribute of \(child.name).")
        }
        guard child.description.attributes[index].reference?.entity == Parent.entityName else {
            throw DepotError(.invalidSchema, "The ToMany from \(Parent.entityName) to \(child.name) names \(child.name).\(name), which is not declared as a reference to \(Parent.entityName); declare it with .references(\(Parent.self).self).")
        }
        return (index, name)
    }
}

/// A record with its related records, in the relationship's order.
public struct RecordWithRelated<Object: Sendable, Related: Sendable>: Sendable {
    /// The record (as the application's value).
    public let object: Object
    /// Its related records, in the relationship's order.
    public let related: [Related]

    /// A record with its related records.
    public init(object: Object, related: [Related]) {
        self.object = object
        self.related = related
    }
}

extension RecordWithRelated: Equatable where Object: Equatable, Related: Equatable {}
extension RecordWithRelated: Hashable where Object: Hashable, Related: Hashable {}

/// How related records are loaded: in one transaction, one query for the parents and one
/// per ``keysPerQuery`` parents for their children, whatever the number of parents.
enum RelatedLoading {
    /// Parent keys per children query: SQLite binds each key as a parameter and allows
    /// 32,766 per statement.
    static let keysPerQuery = 10_000

    /// The children of `keys`, grouped by parent key, in the relationship's order.
    static func children<Element>(
        of keys: [Value], through handle: EntityHandle, attribute: (index: Int, name: String), sortKeys: [SortKey],
        in transaction: any ReadTransaction, _ element: (any ColumnReader) throws -> Element
    ) throws -> [Value: [Element]] {
        var byParent: [Value: [Element]] = [:]
        var start = 0
        while start < keys.count {
            let end = min(start + keysPerQuery, keys.count)
            let query = try Query(entity: handle, predicate: .oneOf(attribute: attribute.name, Array(keys[start..<end])), sortKeys: sortKeys)
            try transaction.fetch(query, reserve: { _ in }) { columns in
                let parent = try columns.value(attribute.index)
                byParent[parent, default: []].append(try element(columns))
            }
            start = end
        }
        return byParent
    }

    /// The number of children of each of `keys` (zero included).
    static func counts(
        of keys: [Value], through handle: EntityHandle, attribute: (index: Int, name: String), in transaction: any ReadTransaction
    ) throws -> [Value: Int] {
        var counts: [Value: Int] = [:]
        for key in keys { counts[key] = 0 }
        var start = 0
        while start < keys.count {
            let end = min(start + keysPerQuery, keys.count)
            let rows = try Query(entity: handle, predicate: .oneOf(attribute: attribute.name, Array(keys[start..<end])))
            for row in try transaction.aggregate(AggregateQuery(rows: rows, groupBy: [attribute.index], functions: [.count])) {
                if let key = row.keys.first, case .int(let count)? = row.values.first { counts[key] = Int(count) }
            }
            start = end
        }
        return counts
    }
}

/// The handles of record types a controller reads besides its own (related records), per
/// store: registered on first use, like a controller's own entity.
enum RelatedHandles {
    final class Entry: Sendable {
        weak let store: (any Store)?
        let handle: EntityHandle
        init(store: any Store, handle: EntityHandle) {
            self.store = store
            self.handle = handle
        }
    }

    struct Key: Hashable {
        let store: ObjectIdentifier
        let entity: String
    }

    // A pthread lock, not `Synchronization.Mutex`: Mutex's contended path waits and takes
    // the lock inside the standard library, which Thread Sanitizer does not see, so it
    // reported the dictionary as raced between two contended callers (CI runs TSan).
    static let entries = NIOLockedValueBox<[Key: Entry]>([:])

    static func handle<Record: ManagedRecord>(for record: Record.Type, in store: any Store) async throws -> EntityHandle {
        let key = Key(store: ObjectIdentifier(store), entity: Record.entityName)
        if let entry = entries.withLockedValue({ $0[key] }), entry.store === store { return entry.handle }
        try Record.entity.validate()
        let handles = try await store.register(Record.self)
        guard let handle = handles.first else {
            throw DepotError(.invalidSchema, "The \(store.backendName) store returned no handle for \(Record.entityName); the backend breaks the Store contract.")
        }
        entries.withLockedValue { entries in
            // Entries of released stores go as new ones come.
            entries = entries.filter { $0.value.store != nil }
            entries[key] = Entry(store: store, handle: handle)
        }
        return handle
    }
}

extension Controller {
    /// The objects matching `request`, each with its related records, in one transaction:
    /// one query for the objects and one for the related records of every 10,000 of them,
    /// never one per object.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` when `relation` names an attribute that
    ///   is not a reference to this record type; what ``fetchAll(_:)`` throws.
    public func fetchAll<Child>(
        _ request: Request<Managed> = .all, including relation: ToMany<Managed, Child>
    ) async throws -> [RecordWithRelated<Object, Child.Object>]
    where Child: ObjectConvertible, Child.Object: ManagedConvertible & Sendable, Child.Object.Managed == Child {
        let entity = try await registeredEntity()
        let childEntity = try await RelatedHandles.handle(for: Child.self, in: store)
        let attribute = try relation.resolve()
        let query = try request.resolved(for: entity)
        let childOrder = relation.order.sortKeys
        if let problem = relation.order.problem { throw DepotError(.invalidPredicate, problem) }
        let keyIndex = entity.entity.primaryKeyIndex
        return try await store.read { transaction in
            var parents: [(key: Value, object: Object)] = []
            try transaction.fetch(query, reserve: { parents.reserveCapacity($0) }) { columns in
                parents.append((try columns.value(keyIndex), try Conversion<Object, Managed>.object(from: columns)))
            }
            let children = try RelatedLoading.children(
                of: parents.map(\.key), through: childEntity, attribute: attribute, sortKeys: childOrder, in: transaction
            ) { columns in try Conversion<Child.Object, Child>.object(from: columns) }
            return parents.map { RecordWithRelated(object: $0.object, related: children[$0.key] ?? []) }
        }
    }

    /// The number of related records of each record matching `request`, by primary key
    /// (records without related records count 0), counted by the backend.
    public func countRelated<Child>(
        _ relation: ToMany<Managed, Child>, _ request: Request<Managed> = .all
    ) async throws -> [Managed.ID: Int] {
        let entity = try await registeredEntity()
        let childEntity = try await RelatedHandles.handle(for: Child.self, in: store)
        let attribute = try relation.resolve()
        let query = try request.resolved(for: entity)
        let keyIndex = entity.entity.primaryKeyIndex
        let counts = try await store.read { transaction in
            var keys: [Value] = []
            try transaction.fetch(query, reserve: { keys.reserveCapacity($0) }) { keys.append(try $0.value(keyIndex)) }
            return try RelatedLoading.counts(of: keys, through: childEntity, attribute: attribute, in: transaction)
        }
        var result: [Managed.ID: Int] = [:]
        for (key, count) in counts { result[try Managed.ID(value: key)] = count }
        return result
    }

    /// The objects matching `request` that have at least one related record matching
    /// `condition` (any related record when it is `nil`), in the request's order, offset and
    /// limit. Two queries in one transaction: the related records' distinct references, then
    /// the objects among them.
    public func fetchAll<Child>(
        _ request: Request<Managed> = .all, having relation: ToMany<Managed, Child>, where condition: Condition<Child>? = nil
    ) async throws -> [Object] {
        try await fetchAll(request, relatedThrough: relation, where: condition, present: true)
    }

    /// The objects matching `request` that have no related record matching `condition`
    /// (none at all when it is `nil`), in the request's order, offset and limit.
    public func fetchAll<Child>(
        _ request: Request<Managed> = .all, lacking relation: ToMany<Managed, Child>, where condition: Condition<Child>? = nil
    ) async throws -> [Object] {
        try await fetchAll(request, relatedThrough: relation, where: condition, present: false)
    }

    private func fetchAll<Child>(
        _ request: Request<Managed>, relatedThrough relation: ToMany<Managed, Child>, where condition: Condition<Child>?, present: Bool
    ) async throws -> [Object] {
        let entity = try await registeredEntity()
        let childEntity = try await RelatedHandles.handle(for: Child.self, in: store)
        let attribute = try relation.resolve()
        let childQuery = try (condition.map { Request<Child>($0) } ?? Request<Child>.all).resolved(for: childEntity)
        let base = try request.resolved(for: entity)
        let keyName = entity.entity.primaryKey.name
        return try await store.read { transaction in
            // The distinct parents of the matching children, grouped by the backend.
            let groups = try transaction.aggregate(AggregateQuery(rows: childQuery, groupBy: [attribute.index], functions: [.count]))
            let keys = groups.compactMap { $0.keys.first }.filter { !$0.isNull }
            let narrowed: PredicateExpression = present ? .oneOf(attribute: keyName, keys) : .notOneOf(attribute: keyName, keys)
            if keys.count <= RelatedLoading.keysPerQuery {
                // One level more than the caller's predicate, which was allowed its full depth.
                let query = try Query(
                    entity: entity, predicate: request.predicate.and(narrowed), sortKeys: request.sortKeys,
                    limit: request.limit, offset: request.offset, extraDepth: 1)
                return try ReadContext<Object, Managed>(transaction, entity: entity).fetchAll(query)
            }
            // Too many keys for one statement: filter the request's records here, then apply
            // its offset and limit, which is the same result.
            let wanted = Set(keys)
            let all = try Query(entity: entity, predicate: request.predicate, sortKeys: request.sortKeys, limit: nil, offset: 0, extraDepth: 0)
            var result: [Object] = []
            var skipped = 0
            let keyIndex = entity.entity.primaryKeyIndex
            try transaction.fetch(all, reserve: { _ in }) { columns in
                guard wanted.contains(try columns.value(keyIndex)) == present else { return }
                if skipped < base.offset {
                    skipped += 1
                    return
                }
                if let limit = base.limit, result.count >= limit { return }
                result.append(try Conversion<Object, Managed>.object(from: columns))
            }
            return result
        }
    }
}

/// A live query of records with their related records: the current result, then a new one
/// after every commit that changes a record or one of its related records (see
/// ``Observation``, whose rules it follows).
public struct RelatedObservation<Object, Managed, Child>: AsyncSequence, Sendable
where
    Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object,
    Child: ObjectConvertible, Child.Object: ManagedConvertible & Sendable, Child.Object.Managed == Child
{
    /// Each delivery: the records with their related records, and how the result changed.
    public typealias Element = ObservedResult<RecordWithRelated<Object, Child.Object>>
    /// Iteration throws a `DepotError`, or the task's cancellation.
    public typealias Failure = any Error

    /// The controller whose records are observed.
    public let controller: Controller<Object, Managed>
    /// Which records, in which order.
    public let request: Request<Managed>
    /// The relationship whose records come with each.
    public let relation: ToMany<Managed, Child>

    /// Starts the observation: the first element is the current result.
    public func makeAsyncIterator() -> Iterator {
        let controller = self.controller
        let request = self.request
        let relation = self.relation
        let store = controller.store
        return Iterator(
            core: LiveQuery(
                store: store, entities: [Managed.entityName, Child.entityName],
                register: {
                    _ = try await controller.registeredEntity()
                    _ = try await RelatedHandles.handle(for: Child.self, in: store)
                }
            ) {
                let entity = try await controller.registeredEntity()
                let childEntity = try await RelatedHandles.handle(for: Child.self, in: store)
                let attribute = try relation.resolve()
                if let problem = relation.order.problem { throw DepotError(.invalidPredicate, problem) }
                let childOrder = relation.order.sortKeys
                let query = try request.resolved(for: entity)
                let keyIndex = entity.entity.primaryKeyIndex
                return try await store.read { transaction in
                    var parents: [(row: Row, object: Object)] = []
                    try transaction.fetch(query, reserve: { parents.reserveCapacity($0) }) { columns in
                        parents.append((try columns.row(), try Conversion<Object, Managed>.object(from: columns)))
                    }
                    let children = try RelatedLoading.children(
                        of: parents.map { $0.row[value: keyIndex] }, through: childEntity, attribute: attribute, sortKeys: childOrder,
                        in: transaction
                    ) { columns in (row: try columns.row(), object: try Conversion<Child.Object, Child>.object(from: columns)) }
                    return parents.map { parent in
                        let key = parent.row[value: keyIndex]
                        let related = children[key] ?? []
                        return .init(
                            key: key, fingerprint: [parent.row] + related.map(\.row),
                            element: RecordWithRelated(object: parent.object, related: related.map(\.object)))
                    }
                }
            })
    }

    /// Delivers the elements one after another.
    public struct Iterator: AsyncIteratorProtocol {
        var core: LiveQuery<RecordWithRelated<Object, Child.Object>, [Row]>

        /// The next result: the current one first, then one after each commit that changes it.
        public mutating func next() async throws -> Element? {
            try await core.next()
        }
    }
}

extension Controller {
    /// Observes `request` with each record's related records: the current result first,
    /// then a new result after every commit that changes a matching record or one of their
    /// related records (a changed, added or removed walk updates its dog's entry).
    public func observe<Child>(
        _ request: Request<Managed> = .all, including relation: ToMany<Managed, Child>
    ) -> RelatedObservation<Object, Managed, Child> {
        RelatedObservation(controller: self, request: request, relation: relation)
    }
}
