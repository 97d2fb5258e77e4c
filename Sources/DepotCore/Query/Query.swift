/// A predicate checked against its entity: attributes by position, values coerced to the
/// attribute's type, `nil` comparisons rewritten into their meaning.
///
/// Backends compile or evaluate this form; it never contains an unknown attribute or a
/// value of the wrong type.
public indirect enum Filter: Sendable, Hashable {
    /// `true` matches every record, `false` none, `nil` is unknown (a comparison with nil):
    /// it matches nothing, and neither does its negation.
    case constant(Bool?)
    /// Compares the attribute at a position with a non-null value. Never matches a null.
    case compare(Int, ComparisonOperator, Value)
    /// The attribute is one of the non-null values, or null when `includesNil`
    /// (`x IN (values) OR x IS NULL`).
    case oneOf(Int, [Value], includesNil: Bool)
    /// The attribute is non-null and none of the values.
    case notOneOf(Int, [Value])
    /// The attribute at a position is null.
    case isNil(Int)
    /// The attribute at a position is not null.
    case isNotNil(Int)
    /// UTF-8 byte prefix of a string attribute.
    case hasPrefix(Int, String)
    /// UTF-8 byte substring of a string attribute.
    case contains(Int, String)
    /// Every operand matches.
    case and([Filter])
    /// At least one operand matches.
    case or([Filter])
    /// The operand does not match; an unknown operand stays unknown.
    case not(Filter)
}

extension Filter {
    /// The positions of the attributes the filter reads.
    public var attributeIndices: Set<Int> {
        switch self {
        case .constant: []
        case .compare(let i, _, _), .oneOf(let i, _, _), .notOneOf(let i, _), .isNil(let i), .isNotNil(let i),
            .hasPrefix(let i, _), .contains(let i, _):
            [i]
        case .and(let filters), .or(let filters): filters.reduce(into: Set<Int>()) { $0.formUnion($1.attributeIndices) }
        case .not(let filter): filter.attributeIndices
        }
    }
}

/// A sort key resolved to an attribute position.
public struct ResolvedSortKey: Sendable, Hashable {
    /// The position of the attribute in the entity.
    public let attributeIndex: Int
    /// Whether smaller values come first.
    public let ascending: Bool

    /// A key sorting by the attribute at `attributeIndex`.
    public init(attributeIndex: Int, ascending: Bool) {
        self.attributeIndex = attributeIndex
        self.ascending = ascending
    }
}

/// A request resolved against its entity: what a ``Store`` executes.
public struct Query: Sendable, Hashable {
    /// The entity the query reads, as registered with the store that runs it.
    public let handle: EntityHandle
    /// The description of the entity (the handle's).
    public var entity: EntityDescription { handle.entity }
    /// Which records the query selects.
    public let filter: Filter
    /// Sort keys in significance order; always ends with the primary key (ascending) unless
    /// the primary key already appears, so every backend breaks ties the same way.
    public let sort: [ResolvedSortKey]
    /// At most this many records, after `offset`; `nil` for no limit.
    public let limit: Int?
    /// How many records, in the query's order, to skip.
    public let offset: Int

    /// A query for every record of an entity, in primary key order.
    public init(all handle: EntityHandle) {
        self.handle = handle
        let entity = handle.entity
        self.filter = .constant(true)
        self.sort = [ResolvedSortKey(attributeIndex: entity.primaryKeyIndex, ascending: true)]
        self.limit = nil
        self.offset = 0
    }

    /// Resolves an untyped predicate and sort keys against the registered entity.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` naming the problem.
    public init(
        entity handle: EntityHandle, predicate: PredicateExpression, sortKeys: [SortKey] = [], limit: Int? = nil,
        offset: Int = 0
    ) throws(DepotError) {
        try self.init(entity: handle, predicate: predicate, sortKeys: sortKeys, limit: limit, offset: offset, extraDepth: 0)
    }

    /// `extraDepth` lets Depot itself wrap a caller's predicate, already checked, in one
    /// more level (the keyset condition of a streamed result set) without refusing a
    /// predicate the caller was allowed to write.
    init(
        entity handle: EntityHandle, predicate: PredicateExpression, sortKeys: [SortKey], limit: Int?, offset: Int,
        extraDepth: Int
    ) throws(DepotError) {
        let entity = handle.entity
        if let limit, limit < 0 {
            throw DepotError(.invalidPredicate, "The limit \(limit) is negative; use a limit of 0 or more, or none.")
        }
        if offset < 0 {
            throw DepotError(.invalidPredicate, "The offset \(offset) is negative; use an offset of 0 or more.")
        }
        try Self.checkDepth(of: predicate, in: entity, allowing: Self.maximumPredicateDepth + extraDepth)
        self.handle = handle
        self.filter = try Self.resolve(predicate, in: entity)
        var sort: [ResolvedSortKey] = []
        // Room for the primary key the order ends with.
        sort.reserveCapacity(sortKeys.count + 1)
        for key in sortKeys {
            let index = try Self.attributeIndex(key.attribute, in: entity, for: "sort by")
            sort.append(ResolvedSortKey(attributeIndex: index, ascending: key.ascending))
        }
        if !sort.contains(where: { $0.attributeIndex == entity.primaryKeyIndex }) {
            sort.append(ResolvedSortKey(attributeIndex: entity.primaryKeyIndex, ascending: true))
        }
        self.sort = sort
        // No store holds more than Int.max records, so a limit reaching past Int.max is
        // the same as one ending there; clamping it here means `offset + limit` cannot
        // overflow in any backend (`?offset=1&limit=9223372036854775807` is a valid request).
        if let limit, limit > Int.max - offset {
            self.limit = Int.max - offset
        } else {
            self.limit = limit
        }
        self.offset = offset
    }

    /// The same query with another filter or limit: Depot's own paging of a query already
    /// checked (`filter` must be resolved against the same entity).
    init(copying other: Query, filter: Filter? = nil, limit: Int? = nil) {
        self.handle = other.handle
        self.filter = filter ?? other.filter
        self.sort = other.sort
        self.limit = limit ?? other.limit
        self.offset = other.offset
    }

    /// The same entity and order with another filter (resolved against the same entity),
    /// every match asked for: a backend's planner weighing one alternative of an `OR` on its
    /// own.
    package init(unlimited other: Query, filter: Filter) {
        self.handle = other.handle
        self.filter = filter
        self.sort = other.sort
        self.limit = nil
        self.offset = 0
    }

    /// How deeply `&&`, `||` and `!` may nest in one predicate. Backends evaluate and
    /// compile predicates recursively on their own threads, whose stacks are small, and
    /// SQLite's parser refuses SQL nested past about 50 parentheses; a deeper tree (which
    /// no hand-written query needs: `&&` and `||` chains are flattened) is refused on every
    /// backend alike rather than risking a stack overflow or answering differently.
    public static let maximumPredicateDepth = 32

    /// The end of the rows the query asks for (`offset + limit`), or `nil` without a limit.
    /// Never overflows: the initialiser clamps the limit.
    public var end: Int? { limit.map { offset + $0 } }

    /// Measures the nesting without recursion, so even a tree far too deep is measured
    /// safely.
    static func checkDepth(of predicate: PredicateExpression, in entity: EntityDescription, allowing maximum: Int) throws(DepotError) {
        switch predicate {
        case .and, .or, .not: break
        // One condition (most requests) nests nothing: no list to walk.
        default: return
        }
        var pending: [(PredicateExpression, Int)] = [(predicate, 1)]
        while let (expression, depth) = pending.popLast() {
            guard depth <= maximum else {
                throw DepotError(.invalidPredicate, "The predicate on \(entity.name) nests &&, || and ! more than \(maximumPredicateDepth) levels deep; flatten it (a list of conditions joined by && or || counts as one level).")
            }
            switch expression {
            case .and(let parts), .or(let parts):
                for part in parts { pending.append((part, depth + 1)) }
            case .not(let inner):
                pending.append((inner, depth + 1))
            default:
                break
            }
        }
    }

    static func attributeIndex(_ name: String, in entity: EntityDescription, for use: String) throws(DepotError) -> Int {
        guard let index = entity.index(of: name) else {
            let known = entity.attributes.map(\.name).joined(separator: ", ")
            throw DepotError(.invalidPredicate, "\(entity.name) has no attribute '\(name)' to \(use); its attributes are: \(known).")
        }
        return index
    }

    /// `value` as the attribute at `index` stores it. Takes the position, not the
    /// attribute, so that a condition that passes the check copies no attribute
    /// description (its name, and more); only the error reads the rest.
    static func coerce(_ value: Value, toAttributeAt index: Int, of entity: EntityDescription) throws(DepotError) -> Value {
        let type = entity.attributes[index].type
        if value.isNull || value.type == type { return value }
        if type == .double, case .int(let i) = value { return .double(Double(i)) }
        throw coercionFailure(value, toAttributeAt: index, of: entity)
    }

    @inline(never)
    static func coercionFailure(_ value: Value, toAttributeAt index: Int, of entity: EntityDescription) -> DepotError {
        let attribute = entity.attributes[index]
        return DepotError(.invalidPredicate, "\(entity.name).\(attribute.name) has type \(attribute.type.rawValue), but the predicate compares it with \(value.debugLiteral), of type \(value.type?.rawValue ?? "nil"). Use a value of the attribute's type.")
    }

    static func resolve(_ expression: PredicateExpression, in entity: EntityDescription) throws(DepotError) -> Filter {
        switch expression {
        case .constant(let b):
            return .constant(b)
        case .invalid(let message):
            throw DepotError(.invalidPredicate, message)
        case .compare(let name, let op, let raw):
            let index = try attributeIndex(name, in: entity, for: "compare")
            let value = try coerce(raw, toAttributeAt: index, of: entity)
            if value.isNull {
                switch op {
                case .equal: return .isNil(index)
                case .notEqual: return .isNotNil(index)
                default: return .constant(nil)
                }
            }
            return .compare(index, op, value)
        case .oneOf(let name, let raws):
            let index = try attributeIndex(name, in: entity, for: "match against a list")
            var values: [Value] = []
            var includesNil = false
            for raw in raws {
                let value = try coerce(raw, toAttributeAt: index, of: entity)
                if value.isNull { includesNil = true } else { values.append(value) }
            }
            if values.isEmpty { return includesNil ? .isNil(index) : .constant(false) }
            return .oneOf(index, values, includesNil: includesNil)
        case .notOneOf(let name, let raws):
            let index = try attributeIndex(name, in: entity, for: "match against a list")
            var values: [Value] = []
            for raw in raws {
                let value = try coerce(raw, toAttributeAt: index, of: entity)
                if !value.isNull { values.append(value) }
            }
            return values.isEmpty ? .isNotNil(index) : .notOneOf(index, values)
        case .isNil(let name):
            return .isNil(try attributeIndex(name, in: entity, for: "test for nil"))
        case .hasPrefix(let name, let prefix):
            let index = try stringAttribute(name, in: entity, for: "hasPrefix")
            return .hasPrefix(index, prefix)
        case .contains(let name, let substring):
            let index = try stringAttribute(name, in: entity, for: "contains")
            return .contains(index, substring)
        case .and(let parts):
            var out: [Filter] = []
            for part in parts { out.append(try resolve(part, in: entity)) }
            return out.count == 1 ? out[0] : .and(out)
        case .or(let parts):
            var out: [Filter] = []
            for part in parts { out.append(try resolve(part, in: entity)) }
            return out.count == 1 ? out[0] : .or(out)
        case .not(let inner):
            return .not(try resolve(inner, in: entity))
        }
    }

    static func stringAttribute(_ name: String, in entity: EntityDescription, for use: String) throws(DepotError) -> Int {
        let index = try attributeIndex(name, in: entity, for: use)
        guard entity.attributes[index].type == .string else {
            throw DepotError(.invalidPredicate, "\(use) works on string attributes; \(entity.name).\(name) has type \(entity.attributes[index].type.rawValue).")
        }
        return index
    }
}
