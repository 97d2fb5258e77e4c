import CLMDB
package import DepotCore

/// A range of encoded keys; `nil` bounds are open.
package struct KeyRange: Sendable, Equatable {
    var lower: [UInt8]?
    var lowerInclusive = true
    var upper: [UInt8]?
    var upperInclusive = true

    static let all = KeyRange()

    static func point(_ key: [UInt8]) -> KeyRange {
        KeyRange(lower: key, lowerInclusive: true, upper: key, upperInclusive: true)
    }

    /// Whether the range certainly holds no key.
    var isEmpty: Bool {
        guard let lower, let upper else { return false }
        if lower == upper { return !(lowerInclusive && upperInclusive) }
        return !lower.lexicographicallyPrecedes(upper)
    }

    /// The keys in both ranges.
    func intersection(_ other: KeyRange) -> KeyRange {
        var out = self
        if let l = other.lower {
            if let mine = out.lower {
                if l == mine {
                    out.lowerInclusive = out.lowerInclusive && other.lowerInclusive
                } else if mine.lexicographicallyPrecedes(l) {
                    out.lower = l
                    out.lowerInclusive = other.lowerInclusive
                }
            } else {
                out.lower = l
                out.lowerInclusive = other.lowerInclusive
            }
        }
        if let u = other.upper {
            if let mine = out.upper {
                if u == mine {
                    out.upperInclusive = out.upperInclusive && other.upperInclusive
                } else if u.lexicographicallyPrecedes(mine) {
                    out.upper = u
                    out.upperInclusive = other.upperInclusive
                }
            } else {
                out.upper = u
                out.upperInclusive = other.upperInclusive
            }
        }
        return out
    }
}

/// How a query reads its candidate rows.
package struct Plan: Equatable, Sendable {
    package enum Source: Equatable, Sendable {
        /// The entity's database, by primary key.
        case primary
        /// An index database: each entry is (index key, primary key).
        case index(IndexHandle)
        /// A composite index database: each entry is (components and primary key, primary
        /// key).
        case composite(CompositeHandle)
        /// The records of several plans, one per alternative of an `OR`, each read once,
        /// in primary key order (see ``LMDBTransaction/unionPlan(_:_:needsOrder:describing:rival:)``).
        /// The plan's own ``Plan/ranges`` are `nil`: each alternative has its own.
        case union([Plan])
    }

    package var source: Source
    /// Ascending, disjoint ranges of keys in `source`; `nil` reads everything.
    package var ranges: [KeyRange]?
    /// Whether every candidate matches the filter, so no row needs evaluating.
    package var exact: Bool
    /// Whether candidates come in the query's order (then offset and limit apply while
    /// scanning).
    package var ordered: Bool
    /// Whether to scan keys from the last to the first (duplicates still ascend, which is
    /// the primary key tie-break).
    package var descending: Bool
    /// How many conjuncts of the filter the ranges express (composite plans).
    package var consumed = 0
    /// The ranges as conditions, one line each (composite plans; for `explain`).
    package var rangeText: [String] = []
    /// Whether the ranges start at a cursor page's position (a keyset condition).
    package var keyset = false
    /// The entries of the ranges, when the planner counted them all.
    package var entries: Int?
}

/// The planner: predicates on the primary key or an indexed attribute inside a top-level
/// AND become key ranges or point lookups; the rest is evaluated in Swift over the
/// candidates; an index or the primary key gives the order when it matches the sort.
package enum QueryPlanner {
    private struct Access {
        var points: [[UInt8]]?
        var range: KeyRange?
        var pointConjuncts = 0
        var rangeConjuncts = 0
    }

    /// Plans `query`; `needsOrder` is false for counts, which only need the candidates.
    package static func plan(_ query: Query, handles: RegisteredEntity, maxKeySize: Int, needsOrder: Bool) -> Plan {
        let entity = handles.entity
        let pk = entity.primaryKeyIndex
        let conjuncts: [Filter]
        if case .and(let parts) = query.filter { conjuncts = parts } else { conjuncts = [query.filter] }

        var access: [Int: Access] = [:]
        var alwaysTrue = 0
        func isAccessible(_ i: Int) -> Bool { i == pk || handles.index(at: i) != nil }
        func key(_ i: Int, _ value: Value) -> [UInt8]? {
            guard value.type == entity.attributes[i].type else { return nil }
            let k = i == pk ? KeyEncoding.primaryKey(value) : KeyEncoding.indexKey(value)
            return k.count <= maxKeySize ? k : nil
        }
        /// Index keys of non-null values start at the value marker; nulls sort below it.
        func nonNullFloor(_ i: Int) -> [UInt8]? { i == pk ? nil : [KeyEncoding.valueMarker] }

        for conjunct in conjuncts {
            switch conjunct {
            case .constant(true):
                alwaysTrue += 1
            case .compare(let i, .equal, let value) where isAccessible(i):
                // Equality is a one-point lookup, the most selective access.
                guard let k = key(i, value), access[i]?.points == nil else { continue }
                access[i, default: Access()].points = [k]
                access[i, default: Access()].pointConjuncts += 1
            case .compare(let i, let op, let value) where isAccessible(i) && op != .notEqual:
                guard let k = key(i, value) else { continue }
                let range: KeyRange
                switch op {
                case .equal: range = .point(k)
                case .less: range = KeyRange(lower: nonNullFloor(i), upper: k, upperInclusive: false)
                case .lessOrEqual: range = KeyRange(lower: nonNullFloor(i), upper: k)
                case .greater: range = KeyRange(lower: k, lowerInclusive: false)
                case .greaterOrEqual: range = KeyRange(lower: k)
                case .notEqual: continue
                }
                var a = access[i, default: Access()]
                a.range = a.range.map { $0.intersection(range) } ?? range
                a.rangeConjuncts += 1
                access[i] = a
            case .oneOf(let i, let values, let includesNil) where isAccessible(i):
                var keys: [[UInt8]] = []
                var usable = true
                for value in values {
                    guard let k = key(i, value) else { usable = false; break }
                    keys.append(k)
                }
                guard usable, access[i]?.points == nil else { continue }
                if includesNil && i != pk { keys.append([KeyEncoding.nullMarker]) }
                keys = Array(Set(keys)).sorted { $0.lexicographicallyPrecedes($1) }
                access[i, default: Access()].points = keys
                access[i, default: Access()].pointConjuncts += 1
            case .isNil(let i) where i != pk && handles.index(at: i) != nil:
                guard access[i]?.points == nil else { continue }
                access[i, default: Access()].points = [[KeyEncoding.nullMarker]]
                access[i, default: Access()].pointConjuncts += 1
            case .hasPrefix(let i, let prefix) where isAccessible(i):
                guard let lower = key(i, .string(prefix)) else { continue }
                let range = KeyRange(lower: lower, upper: KeyEncoding.successor(ofPrefix: lower), upperInclusive: false)
                var a = access[i, default: Access()]
                a.range = a.range.map { $0.intersection(range) } ?? range
                a.rangeConjuncts += 1
                access[i] = a
            default:
                continue
            }
        }

        let restricting = conjuncts.count - alwaysTrue
        func source(_ i: Int) -> Plan.Source {
            if i == pk { return .primary }
            // isAccessible guaranteed an index for every other position in `access`.
            return handles.index(at: i).map { .index($0) } ?? .primary
        }
        func usingPoints(_ i: Int) -> (ranges: [KeyRange], exact: Bool) {
            let a = access[i] ?? Access()
            let exact = a.rangeConjuncts == 0 && a.pointConjuncts == restricting
            return ((a.points ?? []).map(KeyRange.point), exact)
        }
        func usingRange(_ i: Int) -> (ranges: [KeyRange], exact: Bool) {
            let a = access[i] ?? Access()
            let exact = a.pointConjuncts == 0 && a.rangeConjuncts == restricting
            let range = a.range ?? .all
            return (range.isEmpty ? [] : [range], exact)
        }
        /// The direction in which scanning attribute `i`'s keys yields the query's order.
        func orderDirection(_ i: Int) -> Bool? {
            guard needsOrder else { return nil }
            let sort = query.sort
            if i == pk {
                return sort.count == 1 && sort[0].attributeIndex == pk ? !sort[0].ascending : nil
            }
            guard handles.index(at: i) != nil, sort.count == 2, sort[0].attributeIndex == i,
                sort[1].attributeIndex == pk, sort[1].ascending
            else { return nil }
            return !sort[0].ascending
        }
        func plan(_ i: Int, _ chosen: (ranges: [KeyRange], exact: Bool)) -> Plan {
            let direction = orderDirection(i)
            return Plan(
                source: source(i), ranges: chosen.ranges, exact: chosen.exact, ordered: direction != nil,
                descending: direction ?? false)
        }

        let positions = access.keys.sorted { a, b in (a == pk ? -1 : a) < (b == pk ? -1 : b) }
        // 1. Point lookups (equality, in, is-nil) are the most selective access.
        if let i = positions.first(where: { access[$0]?.points != nil }) {
            return plan(i, usingPoints(i))
        }
        // 2. An order the primary key or an index gives for free, restricted by a range on
        //    the same attribute when there is one. Without a limit, a range on another
        //    attribute plus a sort beats scanning everything in order.
        let orderingAttribute: Int? =
            orderDirection(pk) != nil ? pk : entity.attributes.indices.first { orderDirection($0) != nil }
        let rangePosition = positions.first { access[$0]?.range != nil }
        if let o = orderingAttribute {
            if access[o]?.range != nil { return plan(o, usingRange(o)) }
            if query.limit != nil || rangePosition == nil {
                var p = plan(o, (ranges: [KeyRange.all], exact: restricting == 0))
                p.ranges = nil
                return p
            }
        }
        // 3. A range on the primary key or an index, sorted afterwards.
        if let i = rangePosition { return plan(i, usingRange(i)) }
        // 4. Everything, in key order.
        return Plan(
            source: .primary, ranges: nil, exact: restricting == 0, ordered: orderDirection(pk) != nil,
            descending: orderDirection(pk) ?? false)
    }

    /// Every record in primary key order, the filter evaluated on each: what a query falls
    /// back to when an index range would select too large a share to pay its lookups.
    static func fullScan(_ query: Query, handles: RegisteredEntity, needsOrder: Bool) -> Plan {
        let pk = handles.entity.primaryKeyIndex
        let inKeyOrder = needsOrder && query.sort.count == 1 && query.sort[0].attributeIndex == pk
        return Plan(
            source: .primary, ranges: nil, exact: query.filter == .constant(true), ordered: inKeyOrder,
            descending: inKeyOrder && !query.sort[0].ascending)
    }
}
