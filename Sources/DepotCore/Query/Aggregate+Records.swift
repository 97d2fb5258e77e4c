/// An aggregate over a record type's attribute: a count, sum, average, minimum or maximum.
///
/// ```swift
/// let heaviest = try await cats.maximum(\.weight)
/// let perAge = try await cats.aggregate([.count, .average(\.weight)], groupedBy: [\.age])
/// for group in perAge {
///     print(try group.key(\.age), try group[.count, as: Int.self], try group[.average(\.weight), as: Double?.self])
/// }
/// ```
///
/// Nil values are skipped: a sum, average, minimum or maximum over no non-nil values is
/// nil, and `count(_:)` counts only non-nil values (`count` counts records). Integer
/// sums are exact (a sum beyond `Int64` is ``DepotError/Code/invalidValue``); double sums
/// are the exact sum rounded once, so every backend returns the same double.
public struct Aggregate<Record: ManagedRecord>: Sendable, Hashable {
    enum Kind: String, Sendable, Hashable {
        case count, countValues = "count of", sum, average, minimum, maximum
    }

    let kind: Kind
    let attribute: String?
    /// A problem found while building (a key path that is not an attribute).
    let problem: String?

    init(_ kind: Kind, attribute: String?, problem: String? = nil) {
        self.kind = kind
        self.attribute = attribute
        self.problem = problem
    }

    init<V: AttributeValue>(_ kind: Kind, _ keyPath: KeyPath<Record, V>) {
        if let name = Record.entity.attributeName(for: keyPath) {
            self.init(kind, attribute: name)
        } else {
            self.init(kind, attribute: nil, problem: "A key path aggregated over \(Record.entity.name) is not one of its declared attributes.")
        }
    }

    /// The number of records.
    public static var count: Aggregate { Aggregate(.count, attribute: nil) }
    /// The number of records whose attribute is not nil.
    public static func count<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Aggregate { Aggregate(.countValues, keyPath) }
    /// The sum of an integer or double attribute.
    public static func sum<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Aggregate { Aggregate(.sum, keyPath) }
    /// The mean of an integer or double attribute, as a `Double`.
    public static func average<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Aggregate { Aggregate(.average, keyPath) }
    /// The smallest value, in Depot's order.
    public static func minimum<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Aggregate { Aggregate(.minimum, keyPath) }
    /// The largest value, in Depot's order.
    public static func maximum<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Aggregate { Aggregate(.maximum, keyPath) }

    /// The same aggregates by attribute name, for dynamic use (an unknown name is
    /// ``DepotError/Code/invalidPredicate`` when the aggregate runs).
    public static func count(_ attribute: String) -> Aggregate { Aggregate(.countValues, attribute: attribute) }
    /// The sum of the named attribute's non-nil values.
    public static func sum(_ attribute: String) -> Aggregate { Aggregate(.sum, attribute: attribute) }
    /// The mean of the named attribute's non-nil values.
    public static func average(_ attribute: String) -> Aggregate { Aggregate(.average, attribute: attribute) }
    /// The smallest non-nil value of the named attribute.
    public static func minimum(_ attribute: String) -> Aggregate { Aggregate(.minimum, attribute: attribute) }
    /// The largest non-nil value of the named attribute.
    public static func maximum(_ attribute: String) -> Aggregate { Aggregate(.maximum, attribute: attribute) }

    func resolved(in entity: EntityDescription) throws(DepotError) -> AggregateFunction {
        if let problem { throw DepotError(.invalidPredicate, problem) }
        guard let attribute else { return .count }
        let index = try Query.attributeIndex(attribute, in: entity, for: "aggregate")
        if (kind == .minimum || kind == .maximum), Record.entity.jsonAttributes.contains(attribute) {
            throw DepotError(.invalidPredicate, "\(entity.name).\(attribute) is a Codable attribute stored as JSON; its minimum and maximum have no meaning. Aggregate a plain attribute.")
        }
        switch kind {
        case .count: return .count
        case .countValues: return .countValues(index)
        case .sum: return .sum(index)
        case .average: return .average(index)
        case .minimum: return .minimum(index)
        case .maximum: return .maximum(index)
        }
    }
}

/// One group of an aggregate request: the values of the attributes it was grouped by, and
/// the aggregates' results.
public struct AggregateGroup<Record: ManagedRecord>: Sendable {
    /// The group's attribute values, in the order of `groupedBy`.
    public let keys: [Value]
    /// The results, in the order of the aggregates asked for.
    public let values: [Value]
    let keyNames: [String]
    let aggregates: [Aggregate<Record>]

    /// The group's value of an attribute it was grouped by.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` when the request was not grouped by
    ///   `keyPath`.
    public func key<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) throws(DepotError) -> V {
        guard let name = Record.entity.attributeName(for: keyPath), let index = keyNames.firstIndex(of: name) else {
            throw DepotError(.invalidPredicate, "This aggregate of \(Record.entity.name) was not grouped by that key path; group by it to read it.")
        }
        return try V(value: keys[index])
    }

    /// An aggregate's result as `V` (`Int` for counts; the attribute's type, optional, for
    /// sums, minimums and maximums; `Double?` for averages).
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` when `aggregate` was not asked for;
    ///   ``DepotError/Code/conversionFailed`` when the value does not fit `V`.
    public subscript<V: AttributeValue>(_ aggregate: Aggregate<Record>, as type: V.Type) -> V {
        get throws(DepotError) {
            guard let index = aggregates.firstIndex(of: aggregate) else {
                throw DepotError(.invalidPredicate, "This aggregate of \(Record.entity.name) did not compute \(aggregate.kind.rawValue) \(aggregate.attribute ?? "records"); add it to the aggregates asked for.")
            }
            return try V(value: values[index])
        }
    }
}

extension RecordContext {
    /// Computes `aggregates` over the records `request` selects (its offset and limit
    /// included), per group of equal values of `groupedBy`; groups are ordered by those
    /// values (nil first). Without grouping there is one group, also for no records.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` for an attribute that is not declared,
    ///   a sum or average of a non-numeric attribute, or a minimum, maximum or grouping over a
    ///   Codable (JSON) attribute; ``DepotError/Code/invalidValue`` for an integer sum
    ///   beyond `Int64`.
    public func aggregate(
        _ aggregates: [Aggregate<Managed>], groupedBy: [PartialKeyPath<Managed>] = [], _ request: Request<Managed> = .all
    ) throws -> [AggregateGroup<Managed>] {
        var names: [String] = []
        for keyPath in groupedBy {
            guard let name = Managed.entity.attributeName(for: keyPath) else {
                throw DepotError(.invalidPredicate, "A key path \(Managed.entity.name) is grouped by is not one of its declared attributes.")
            }
            names.append(name)
        }
        return try aggregate(aggregates, groupedBy: names, request)
    }

    /// ``aggregate(_:groupedBy:_:)`` with the grouping attributes by name, for dynamic use.
    public func aggregate(
        _ aggregates: [Aggregate<Managed>], groupedBy names: [String], _ request: Request<Managed> = .all
    ) throws -> [AggregateGroup<Managed>] {
        let rows = try request.resolved(for: entity)
        let description = rows.entity
        var positions: [Int] = []
        for name in names {
            if Managed.entity.jsonAttributes.contains(name) {
                throw DepotError(.invalidPredicate, "\(description.name).\(name) is a Codable attribute stored as JSON; group by a plain attribute.")
            }
            positions.append(try Query.attributeIndex(name, in: description, for: "group by"))
        }
        var functions: [AggregateFunction] = []
        for aggregate in aggregates { functions.append(try aggregate.resolved(in: description)) }
        let query = try AggregateQuery(rows: rows, groupBy: positions, functions: functions)
        return try readTransaction.aggregate(query).map {
            AggregateGroup(keys: $0.keys, values: $0.values, keyNames: names, aggregates: aggregates)
        }
    }

    /// The one value of an ungrouped aggregate.
    func single<V: AttributeValue>(_ aggregate: Aggregate<Managed>, _ request: Request<Managed>, as type: V.Type) throws -> V {
        guard let group = try self.aggregate([aggregate], groupedBy: [String](), request).first else {
            throw DepotError(.backend, "The store returned no row for an ungrouped aggregate of \(Managed.entity.name); the backend breaks the Store contract.")
        }
        return try group[aggregate, as: V.self]
    }

    /// The sum of an integer or double attribute over `request`; nil when no record has a
    /// value.
    public func sum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.sum(keyPath), request, as: V?.self)
    }

    /// The sum of an optional attribute's non-nil values; nil when there are none.
    public func sum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.sum(keyPath), request, as: V?.self)
    }

    /// The mean of an integer or double attribute over `request`; nil when no record has a
    /// value.
    public func average<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) throws -> Double? {
        try single(.average(keyPath), request, as: Double?.self)
    }

    /// The smallest value of an attribute over `request`; nil when no record has a value.
    public func minimum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.minimum(keyPath), request, as: V?.self)
    }

    /// The smallest non-nil value of an optional attribute; nil when no record has one.
    public func minimum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.minimum(keyPath), request, as: V?.self)
    }

    /// The largest value of an attribute over `request`; nil when no record has a value.
    public func maximum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.maximum(keyPath), request, as: V?.self)
    }

    /// The largest non-nil value of an optional attribute; nil when no record has one.
    public func maximum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) throws -> V? {
        try single(.maximum(keyPath), request, as: V?.self)
    }

    /// The number of records per value of `keyPath` among those `request` selects, ordered
    /// by value (nil first).
    public func count<K: AttributeValue>(groupedBy keyPath: KeyPath<Managed, K>, _ request: Request<Managed> = .all) throws -> [(key: K, count: Int)] {
        try aggregate([.count], groupedBy: [keyPath], request).map { (try $0.key(keyPath), try $0[.count, as: Int.self]) }
    }
}

extension Controller {
    /// Computes `aggregates` over the records `request` selects, per group of equal values of
    /// `groupedBy`, in one read; see `RecordContext.aggregate(_:groupedBy:_:)`.
    public func aggregate(
        _ aggregates: [Aggregate<Managed>], groupedBy: [PartialKeyPath<Managed>] = [], _ request: Request<Managed> = .all
    ) async throws -> [AggregateGroup<Managed>] {
        var names: [String] = []
        for keyPath in groupedBy {
            guard let name = Managed.entity.attributeName(for: keyPath) else {
                throw DepotError(.invalidPredicate, "A key path \(Managed.entity.name) is grouped by is not one of its declared attributes.")
            }
            names.append(name)
        }
        let keys = names
        return try await read { try $0.aggregate(aggregates, groupedBy: keys, request) }
    }

    /// The sum of an integer or double attribute; nil when no record has a value.
    public func sum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.sum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The sum of an optional attribute's non-nil values; nil when there are none.
    public func sum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.sum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The mean of an integer or double attribute; nil when no record has a value.
    public func average<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) async throws -> Double? {
        let aggregate = Aggregate<Managed>.average(keyPath)
        return try await read { try $0.single(aggregate, request, as: Double?.self) }
    }

    /// The smallest value of an attribute; nil when no record has a value.
    public func minimum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.minimum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The smallest non-nil value of an optional attribute; nil when no record has one.
    public func minimum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.minimum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The largest value of an attribute; nil when no record has a value.
    public func maximum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.maximum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The largest non-nil value of an optional attribute; nil when no record has one.
    public func maximum<V: AttributeValue>(_ keyPath: KeyPath<Managed, V?>, _ request: Request<Managed> = .all) async throws -> V? {
        let aggregate = Aggregate<Managed>.maximum(keyPath)
        return try await read { try $0.single(aggregate, request, as: V?.self) }
    }

    /// The number of records per value of `keyPath`, ordered by value (nil first).
    public func count<K: AttributeValue & Sendable>(groupedBy keyPath: KeyPath<Managed, K>, _ request: Request<Managed> = .all) async throws -> [(key: K, count: Int)] {
        guard let name = Managed.entity.attributeName(for: keyPath) else {
            throw DepotError(.invalidPredicate, "A key path \(Managed.entity.name) is grouped by is not one of its declared attributes.")
        }
        let groups = try await read { try $0.aggregate([.count], groupedBy: [name], request) }
        return try groups.map { (try K(value: $0.keys[0]), try $0[.count, as: Int.self]) }
    }
}
