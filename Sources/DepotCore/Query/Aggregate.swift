/// One aggregate of a resolved ``AggregateQuery``: what to compute, and over which
/// attribute (by position in the entity).
public enum AggregateFunction: Sendable, Hashable {
    /// The number of rows.
    case count
    /// The number of rows whose attribute is not nil.
    case countValues(Int)
    /// The sum of the attribute's non-nil values (integers and doubles); nil when there are
    /// none.
    case sum(Int)
    /// The mean of the attribute's non-nil values, as a double; nil when there are none.
    case average(Int)
    /// The smallest non-nil value in Depot's order; nil when there are none.
    case minimum(Int)
    /// The largest non-nil value in Depot's order; nil when there are none.
    case maximum(Int)

    /// The attribute the function reads, if any.
    public var attributeIndex: Int? {
        switch self {
        case .count: nil
        case .countValues(let i), .sum(let i), .average(let i), .minimum(let i), .maximum(let i): i
        }
    }
}

/// Aggregates over the rows a query selects, optionally per group of equal attribute
/// values: what ``ReadTransaction/aggregate(_:)`` computes.
///
/// The rows are those of ``rows``, its sort, offset and limit included (the sum of the ten
/// heaviest cats is a query sorted by weight, limited to ten). Groups come back ordered
/// by their key values in Depot's order (nil first); without grouping there is exactly one
/// row, also for no rows at all (counts 0, everything else nil).
public struct AggregateQuery: Sendable, Hashable {
    /// Which rows.
    public let rows: Query
    /// The attributes (positions) whose values form a group's key, most significant first.
    public let groupBy: [Int]
    /// What to compute for each group.
    public let functions: [AggregateFunction]

    /// The entity whose records are aggregated.
    public var entity: EntityDescription { rows.entity }

    /// Checks the positions and types against the query's entity.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` for a position out of range, a sum or
    ///   average over an attribute that is not a number, or no function at all.
    public init(rows: Query, groupBy: [Int] = [], functions: [AggregateFunction]) throws(DepotError) {
        let entity = rows.entity
        guard !functions.isEmpty else {
            throw DepotError(.invalidPredicate, "An aggregate over \(entity.name) names no function; ask for a count, sum, average, minimum or maximum.")
        }
        for index in groupBy where !entity.attributes.indices.contains(index) {
            throw DepotError(.invalidPredicate, "An aggregate over \(entity.name) groups by attribute position \(index), which \(entity.name) does not have.")
        }
        for function in functions {
            guard let index = function.attributeIndex else { continue }
            guard entity.attributes.indices.contains(index) else {
                throw DepotError(.invalidPredicate, "An aggregate over \(entity.name) reads attribute position \(index), which \(entity.name) does not have.")
            }
            let attribute = entity.attributes[index]
            switch function {
            case .sum, .average:
                guard attribute.type == .int64 || attribute.type == .double else {
                    throw DepotError(.invalidPredicate, "\(entity.name).\(attribute.name) is \(attribute.type.rawValue); sums and averages need an integer or double attribute.")
                }
            default: break
            }
        }
        self.rows = rows
        self.groupBy = groupBy
        self.functions = functions
    }
}

/// One group's result: its key values (in ``AggregateQuery/groupBy`` order) and one value
/// per function (in ``AggregateQuery/functions`` order).
public struct AggregateRow: Sendable, Hashable {
    /// The group's key values, in ``AggregateQuery/groupBy`` order.
    public var keys: [Value]
    /// One result per function, in ``AggregateQuery/functions`` order.
    public var values: [Value]

    /// A group's result.
    public init(keys: [Value], values: [Value]) {
        self.keys = keys
        self.values = values
    }
}

// MARK: - The reference computation

extension AggregateQuery {
    /// Computes the aggregates over `rows` (the rows the query selects, in any order): the
    /// reference every backend's answer must equal. Backends without a faster way use it
    /// through the default ``ReadTransaction/aggregate(_:)``.
    public func evaluate(_ rows: some Sequence<Row>) throws(DepotError) -> [AggregateRow] {
        var groups: [[Value]: [AggregateAccumulator]] = [:]
        let fresh = functions.map { AggregateAccumulator($0, in: entity) }
        for row in rows {
            let key = groupBy.map { row[value: $0] }
            var accumulators = groups.removeValue(forKey: key) ?? fresh
            for index in accumulators.indices { accumulators[index].add(row) }
            groups[key] = accumulators
        }
        if groupBy.isEmpty && groups.isEmpty { groups[[]] = fresh }
        var result: [AggregateRow] = []
        result.reserveCapacity(groups.count)
        for (key, accumulators) in groups {
            var values: [Value] = []
            values.reserveCapacity(accumulators.count)
            for accumulator in accumulators { values.append(try accumulator.result()) }
            result.append(AggregateRow(keys: key, values: values))
        }
        result.sort { Self.keyOrder($0.keys, $1.keys) }
        return result
    }

    /// Group keys in Depot's order, attribute by attribute.
    public static func keyOrder(_ a: [Value], _ b: [Value]) -> Bool {
        for (x, y) in zip(a, b) {
            let order = Value.compare(x, y)
            if order != 0 { return order < 0 }
        }
        return a.count < b.count
    }
}

extension ReadTransaction {
    /// Computes `query` by reading the rows it selects (``AggregateQuery/evaluate(_:)``).
    /// Backends that can do better (SQL's `GROUP BY`) implement
    /// ``ReadTransaction/aggregate(_:)`` themselves, with the same answers.
    public func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        var rows: [Row] = []
        try fetchRows(query.rows) { rows.append($0) }
        return try query.evaluate(rows)
    }
}

/// The running state of one aggregate function: exact integer sums (128-bit, so only a
/// final sum outside `Int64` fails), exactly rounded double sums (``ExactSum``, the same
/// whatever the order of the values), the count of values and the extremes.
///
/// Backends that aggregate natively keep this same state (SQLite hands it back from its
/// aggregate function), so every backend
/// finishes with the same arithmetic.
public struct AggregateAccumulator: Sendable {
    /// What the accumulator computes.
    public let function: AggregateFunction
    let type: AttributeType?
    let entity: String
    let attribute: String
    /// Rows (``AggregateFunction/count``) or non-nil values seen.
    public private(set) var count: Int64 = 0
    /// The exact sum of the integer values seen (wider than `Int64`, so that only a final sum outside it fails).
    public private(set) var integerSum: Int128 = 0
    /// The exactly rounded sum of the double values seen.
    public private(set) var doubleSum = ExactSum()
    var extreme: Value = .null

    /// An empty accumulator for `function` over `entity`'s records.
    public init(_ function: AggregateFunction, in entity: EntityDescription) {
        self.function = function
        let attribute = function.attributeIndex.map { entity.attributes[$0] }
        self.type = attribute?.type
        self.entity = entity.name
        self.attribute = attribute?.name ?? ""
    }

    /// Adds one row.
    public mutating func add(_ row: Row) {
        guard let index = function.attributeIndex else {
            count += 1
            return
        }
        add(value: row[value: index])
    }

    /// Adds one value of the function's attribute (nil is skipped).
    public mutating func add(value: Value) {
        if value.isNull { return }
        count += 1
        switch function {
        case .count, .countValues: break
        case .sum, .average:
            switch value {
            case .int(let v): integerSum += Int128(v)
            case .double(let v): doubleSum.add(v)
            default: break
            }
        case .minimum:
            if extreme.isNull || Value.compare(value, extreme) < 0 { extreme = value }
        case .maximum:
            if extreme.isNull || Value.compare(value, extreme) > 0 { extreme = value }
        }
    }

    /// Merges the state another backend kept for the same function: its count, integer
    /// sum and double partials.
    public mutating func merge(count: Int64, integerSum: Int128, doubleSum: ExactSum) {
        self.count += count
        self.integerSum += integerSum
        self.doubleSum.add(doubleSum)
    }

    /// The function's value.
    ///
    /// - Throws: ``DepotError/Code/invalidValue`` for an integer sum outside `Int64`.
    public func result() throws(DepotError) -> Value {
        switch function {
        case .count, .countValues:
            return .int(count)
        case .sum:
            guard count > 0 else { return .null }
            if type == .double { return .double(doubleSum.value) }
            guard let sum = Int64(exactly: integerSum) else {
                throw DepotError(.invalidValue, "The sum of \(entity).\(attribute) is \(integerSum), beyond a 64-bit integer; sum fewer records, or average them.")
            }
            return .int(sum)
        case .average:
            guard count > 0 else { return .null }
            if type == .double { return .double(doubleSum.value / Double(count)) }
            return .double(Double(integerSum) / Double(count))
        case .minimum, .maximum:
            return extreme
        }
    }
}
