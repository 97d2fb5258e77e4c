/// One sort key: an attribute and a direction.
public struct SortKey: Sendable, Hashable {
    /// The attribute's name.
    public var attribute: String
    /// Whether smaller values come first.
    public var ascending: Bool

    /// A key sorting by the named attribute.
    public init(_ attribute: String, ascending: Bool = true) {
        self.attribute = attribute
        self.ascending = ascending
    }
}

/// What to fetch: a predicate, any number of sort keys, a limit and an offset.
///
/// Every builder returns a new request; chained filters AND together, and ``or(_:)``
/// widens the request instead.
///
/// ```swift
/// let request = Request<CatRecord>()
///     .filter(\.age > 3)
///     .filter(.hasPrefix(\.name, "T"))
///     .sorted(by: \.age, ascending: false)
///     .sorted(by: \.name)
///     .limit(20)
/// ```
///
/// Results are ordered by the sort keys, then by primary key, so ties come back in the
/// same order from every backend. Without sort keys the order is by primary key.
public struct Request<Record: ManagedRecord>: Sendable, Hashable {
    /// The filter; `.constant(true)` matches everything.
    public var predicate: PredicateExpression
    /// Sort keys, most significant first.
    public var sortKeys: [SortKey]
    /// The maximum number of records, or `nil` for all.
    public var limit: Int?
    /// How many matching records to skip.
    public var offset: Int
    /// A problem found while building (a sort key path that is not an attribute).
    var problem: String?

    /// A request for every record, ordered by primary key.
    public init() {
        predicate = .constant(true)
        sortKeys = []
        limit = nil
        offset = 0
    }

    /// A request for the records matching `predicate`.
    public init(_ predicate: Condition<Record>) {
        self.init()
        self.predicate = predicate.expression
    }

    /// Every record, ordered by primary key.
    public static var all: Request { Request() }

    /// Narrows the request: the result must also match `predicate`.
    public func filter(_ predicate: Condition<Record>) -> Request {
        var copy = self
        copy.predicate = copy.predicate.and(predicate.expression)
        return copy
    }

    /// Narrows the request by an attribute name and value (`nil` means "is nil").
    public func filter(_ attribute: String, equalTo value: some AttributeValue) -> Request {
        filter(.where(attribute, equalTo: value))
    }

    /// Widens the request: a record matches if it matches what came before or `predicate`.
    public func or(_ predicate: Condition<Record>) -> Request {
        var copy = self
        copy.predicate = copy.predicate.or(predicate.expression)
        return copy
    }

    /// Adds a sort key after the existing ones.
    public func sorted<V: AttributeValue>(by keyPath: KeyPath<Record, V>, ascending: Bool = true) -> Request {
        var copy = self
        if V.isJSON {
            copy.problem = jsonOrderingProblem
        } else if let name = Record.entity.attributeName(for: keyPath) {
            copy.sortKeys.append(SortKey(name, ascending: ascending))
        } else {
            copy.problem = "A key path used to sort \(Record.entity.name) is not one of its declared attributes."
        }
        return copy
    }

    /// Adds a sort key by attribute name.
    public func sorted(by attribute: String, ascending: Bool = true) -> Request {
        var copy = self
        copy.sortKeys.append(SortKey(attribute, ascending: ascending))
        return copy
    }

    /// Returns at most `count` records.
    public func limit(_ count: Int) -> Request {
        var copy = self
        copy.limit = count
        return copy
    }

    /// The request limited to its first record, keeping a smaller limit the caller set
    /// (`limit(0)` still means no record).
    @usableFromInline var atMostOne: Request {
        limit.map { $0 < 1 ? self : self.limit(1) } ?? self.limit(1)
    }

    /// Skips the first `count` matching records.
    public func offset(_ count: Int) -> Request {
        var copy = self
        copy.offset = count
        return copy
    }

    /// Checks the request against the registered entity and resolves it for its store.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` for an unknown attribute, a value
    ///   of the wrong type, or a negative limit or offset.
    public func resolved(for entity: EntityHandle) throws(DepotError) -> Query {
        if let problem { throw DepotError(.invalidPredicate, problem) }
        if let misuse = Record.entity.jsonMisuse(in: predicate, sortKeys: sortKeys) { throw DepotError(.invalidPredicate, misuse) }
        return try Query(entity: entity, predicate: predicate, sortKeys: sortKeys, limit: limit, offset: offset)
    }
}
