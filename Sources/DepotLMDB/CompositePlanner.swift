package import DepotCore

/// Plans over composite indexes: for each index of the entity, the candidate a query's
/// filter and sort allow. The transaction chooses among them and the single-attribute plan
/// by an estimate (see ``LMDBTransaction/plan(_:_:needsOrder:)``).
///
/// An index serves a query when the filter fixes a prefix of its components by equality
/// (`==`, `isNil`, or `IN` of one value), optionally followed by `IN` or a range (`<`,
/// `<=`, `>`, `>=`, `hasPrefix`) on the next component. Its entries come in the order of
/// the remaining components, then the primary key ascending; a sort that follows it (the
/// fixed components may appear anywhere in the sort: they are constant) is read in order,
/// and a limited query stops after `offset + limit` matches. The reverse order (every
/// direction inverted, the primary key descending) is read backwards.
///
/// `IN` on the next component reads one range per value, in key order: in index order
/// when the sort starts with that component; otherwise the rows are sorted afterwards
/// (ranges are not merged).
///
/// A cursor page's keyset condition (`(sort values) > (cursor values)`, as
/// `ResultSet.page(size:after:)` writes it) on an index read in order becomes the start of
/// the range: the page seeks to the cursor's entry instead of reading the rows before it.
package enum CompositePlanner {
    /// The conjuncts of a filter, nested `and`s flattened (a page's keyset condition is
    /// added to the caller's filter with one more `and`).
    static func conjuncts(of filter: Filter) -> [Filter] {
        guard case .and(let parts) = filter else { return [filter] }
        return parts.flatMap(conjuncts(of:))
    }

    /// The candidate plan of every composite index the query can use.
    /// `describing`: whether the plans carry their ranges as conditions (``Plan/rangeText``),
    /// which only `explain` shows; a fetch skips formatting them.
    package static func candidates(_ query: Query, handles: RegisteredEntity, maxKeySize: Int, needsOrder: Bool, describing: Bool = false) -> [Plan] {
        if handles.composites.isEmpty { return [] }
        let conjuncts = conjuncts(of: query.filter)
        return handles.composites.compactMap {
            candidate(
                $0, query: query, conjuncts: conjuncts, handles: handles, maxKeySize: maxKeySize, needsOrder: needsOrder,
                describing: describing)
        }
    }

    /// The plan reading `index`, or `nil` when the index neither narrows the candidates
    /// nor gives the order. The steps share the prefix, the ranges and the conditions used,
    /// so they stay in one function.
    static func candidate(
        _ index: CompositeHandle, query: Query, conjuncts: [Filter], handles: RegisteredEntity, maxKeySize: Int,
        needsOrder: Bool, describing: Bool = false
    ) -> Plan? {
        let entity = handles.entity
        let pk = entity.primaryKeyIndex
        let components = index.description.components
        // The conjuncts the ranges express, each once: a few, searched in place.
        var consumed: [Int] = []
        var prefix: [UInt8] = []
        /// The encoding of each component fixed by equality, by attribute position.
        var fixed: [Int: [UInt8]] = [:]
        func encode(_ value: Value, _ n: Int) -> [UInt8]? {
            guard value.isNull || value.type == entity.attributes[index.positions[n]].type else { return nil }
            var out: [UInt8] = []
            KeyEncoding.appendTupleComponent(value, descending: components[n].isDescending, to: &out)
            return out
        }

        func name(_ n: Int) -> String { entity.attributes[index.positions[n]].name }
        /// The conditions of the equality prefix, for `explain`.
        var prefixTexts: [String] = []
        var rangeTexts: [String] = []

        // 1. The equality prefix.
        var e = 0
        for fixing in equalityPrefix(index, conjuncts: conjuncts, entity: entity) {
            let position = index.positions[e]
            guard let bytes = encode(fixing.value, e) else { return nil }
            prefix += bytes
            fixed[position] = bytes
            if describing { prefixTexts.append("\(name(e)) == \(fixing.value.isNull ? "nil" : fixing.value.debugLiteral)") }
            consumed.append(fixing.conjunct)
            e += 1
        }

        // 2. `IN` or a range on the next component.
        let prefixRange = KeyRange(lower: prefix.isEmpty ? nil : prefix, upper: prefix.isEmpty ? nil : KeyEncoding.successor(ofPrefix: prefix), upperInclusive: false)
        var ranges: [KeyRange]? = prefix.isEmpty ? nil : [prefixRange]
        var restricted = e > 0
        if e > 0 && describing { rangeTexts = [prefixTexts.joined(separator: " AND ")] }
        if e < components.count {
            let position = index.positions[e]
            let descending = components[e].isDescending
            var inList: (c: Int, keys: [(key: [UInt8], text: String)])?
            for (c, conjunct) in conjuncts.enumerated() where !consumed.contains(c) {
                guard case .oneOf(position, let values, let includesNil) = conjunct else { continue }
                var keys: [(key: [UInt8], text: String)] = []
                var usable = true
                for value in values + (includesNil ? [Value.null] : []) {
                    guard let bytes = encode(value, e) else { usable = false; break }
                    let text = describing ? (prefixTexts + ["\(name(e)) == \(value.isNull ? "nil" : value.debugLiteral)"]).joined(separator: " AND ") : ""
                    keys.append((prefix + bytes, text))
                }
                if usable {
                    inList = (c, keys)
                    break
                }
            }
            if let inList {
                consumed.append(inList.c)
                var seen = Set<[UInt8]>()
                let keys = inList.keys.filter { seen.insert($0.key).inserted }.sorted { $0.key.lexicographicallyPrecedes($1.key) }
                ranges = keys.map { KeyRange(lower: $0.key, upper: KeyEncoding.successor(ofPrefix: $0.key), upperInclusive: false) }
                rangeTexts = keys.map(\.text)
                restricted = true
            } else {
                var range = prefixRange
                var any = false
                var texts = prefixTexts
                // Keys of the non-null values of this component: nulls are first ascending
                // and last descending, and a comparison never matches them.
                // (LMDB refuses to seek an empty key: no prefix means no lower bound.)
                let nonNull: KeyRange = descending
                    ? KeyRange(lower: prefix.isEmpty ? nil : prefix, upper: prefix + [~KeyEncoding.nullMarker], upperInclusive: false)
                    : KeyRange(lower: prefix + [KeyEncoding.valueMarker])
                for (c, conjunct) in conjuncts.enumerated() where !consumed.contains(c) {
                    let bound: KeyRange
                    switch conjunct {
                    case .compare(position, let op, let value) where op != .equal && op != .notEqual:
                        guard let bytes = encode(value, e), !value.isNull else { continue }
                        let key = prefix + bytes
                        let after = KeyEncoding.successor(ofPrefix: key)
                        // Keys from `key` on hold this value and the larger ones ascending
                        // (the smaller ones descending); keys from `after` on, only those.
                        let atLeast = KeyRange(lower: key), beyond = KeyRange(lower: after ?? key, lowerInclusive: after != nil)
                        let below = KeyRange(upper: key, upperInclusive: false)
                        let through = after.map { KeyRange(upper: $0, upperInclusive: false) } ?? .all
                        switch (op, descending) {
                        case (.greaterOrEqual, false), (.lessOrEqual, true): bound = atLeast
                        case (.greater, false), (.less, true): bound = beyond
                        case (.less, false), (.greater, true): bound = below
                        default: bound = through
                        }
                    case .hasPrefix(position, let text):
                        let start = prefix + KeyEncoding.tuplePrefix(text, descending: descending)
                        bound = KeyRange(lower: start, upper: KeyEncoding.successor(ofPrefix: start), upperInclusive: false)
                    default:
                        continue
                    }
                    range = range.intersection(bound).intersection(nonNull)
                    consumed.append(c)
                    if describing { texts.append(describe(conjunct, entity)) }
                    any = true
                }
                if any {
                    ranges = range.isEmpty ? [] : [range]
                    if describing { rangeTexts = [texts.joined(separator: " AND ")] }
                    restricted = true
                }
            }
        }

        // 3. The order the index gives.
        let direction = needsOrder ? orderDirection(index, fixedCount: e, query: query, pk: pk) : nil
        if !restricted && direction == nil { return nil }

        // 4. A cursor page's keyset condition, as the start of the range read in order.
        var keyset = false
        if let direction, !index.positions.contains(pk) {
            for (c, conjunct) in conjuncts.enumerated() where !consumed.contains(c) {
                guard let values = keysetValues(conjunct, sort: query.sort) else { continue }
                guard var bound = keysetBound(index, values: values, sort: query.sort, fixed: fixed, encode: encode) else { break }
                guard let keyAt = query.sort.firstIndex(where: { $0.attributeIndex == pk }) else { break }
                KeyEncoding.appendPrimaryKey(values[keyAt], to: &bound)
                let after = direction ? KeyRange(upper: bound, upperInclusive: false) : KeyRange(lower: bound, lowerInclusive: false)
                ranges = (ranges ?? [.all]).map { $0.intersection(after) }.filter { !$0.isEmpty }
                consumed.append(c)
                if describing {
                    let text = describeKeyset(conjunct, sort: query.sort, entity)
                    rangeTexts = rangeTexts.isEmpty ? [text] : rangeTexts.map { $0 + " AND " + text }
                }
                keyset = true
                break
            }
        }

        // Bounds longer than LMDB's key limit cannot be sought; no entry could be that long.
        for range in ranges ?? [] {
            if (range.lower?.count ?? 0) > maxKeySize || (range.upper?.count ?? 0) > maxKeySize { return nil }
        }
        let restricting = conjuncts.reduce(0) { $1 == .constant(true) ? $0 : $0 + 1 }
        let consumedCount = consumed.count
        var plan = Plan(
            source: .composite(index), ranges: ranges, exact: consumedCount == restricting, ordered: direction != nil,
            descending: direction ?? false)
        plan.consumed = consumed.count
        plan.rangeText = rangeTexts
        plan.keyset = keyset
        return plan
    }

    /// The conjuncts that fix the leading components of `index` by equality (`==`, `isNil`,
    /// `IN` of one value of the component's type), one per component in order, each with
    /// the value it fixes: the first conjunct that fits a component fixes it.
    static func equalityPrefix(_ index: CompositeHandle, conjuncts: [Filter], entity: EntityDescription) -> [(conjunct: Int, value: Value)] {
        var out: [(conjunct: Int, value: Value)] = []
        componentLoop: for position in index.positions {
            let type = entity.attributes[position].type
            for (c, conjunct) in conjuncts.enumerated() where !out.contains(where: { $0.conjunct == c }) {
                let value: Value
                switch conjunct {
                case .compare(position, .equal, let v): value = v
                case .isNil(position): value = .null
                case .oneOf(position, let values, false) where values.count == 1: value = values[0]
                default: continue
                }
                guard value.isNull || value.type == type else { continue }
                out.append((c, value))
                continue componentLoop
            }
            break
        }
        return out
    }

    /// Whether reading `index`, with its first `fixedCount` components fixed, yields the
    /// query's order forwards (`false`) or backwards (`true`); `nil` when it does not.
    static func orderDirection(_ index: CompositeHandle, fixedCount: Int, query: Query, pk: Int) -> Bool? {
        // A few positions: searched in place rather than hashed into a set, on every fetch.
        let fixed = index.positions.prefix(fixedCount)
        // At most one record when the primary key is fixed: any order is its order.
        if fixed.contains(pk) { return false }
        var sort = query.sort.filter { !fixed.contains($0.attributeIndex) }
        if let end = sort.firstIndex(where: { $0.attributeIndex == pk }) { sort.removeSubrange((end + 1)...) }
        var order: [(position: Int, ascending: Bool)] = []
        for n in fixedCount..<index.positions.count {
            order.append((index.positions[n], !index.description.components[n].isDescending))
            if index.positions[n] == pk { break }
        }
        if order.last?.position != pk { order.append((pk, true)) }
        guard sort.count == order.count else { return nil }
        func matches(flipped: Bool) -> Bool {
            zip(sort, order).allSatisfy { $0.attributeIndex == $1.position && $0.ascending == ($1.ascending != flipped) }
        }
        if matches(flipped: false) { return false }
        if matches(flipped: true) { return true }
        return nil
    }

    /// The cursor values of a keyset condition over `sort`, one per sort key, when
    /// `conjunct` has exactly the shape `ResultSet.page(size:after:)` gives it: an `or` whose
    /// alternative `j` says the first `j` sort keys equal the cursor's and key `j` comes
    /// after it.
    static func keysetValues(_ conjunct: Filter, sort: [ResolvedSortKey]) -> [Value]? {
        guard case .or(let alternatives) = conjunct, alternatives.count == sort.count, sort.count >= 2 else { return nil }
        var values: [Value] = []
        for (j, alternative) in alternatives.enumerated() {
            let parts = conjuncts(of: alternative)
            guard parts.count == j + 1 else { return nil }
            for (n, part) in parts.dropLast().enumerated() {
                let position = sort[n].attributeIndex
                switch part {
                case .compare(position, .equal, let v) where values[n] == v: break
                case .isNil(position) where values[n].isNull: break
                default: return nil
                }
            }
            let key = sort[j]
            let position = key.attributeIndex
            switch (parts[j], key.ascending) {
            case (.compare(position, .greater, let v), true): values.append(v)
            case (.not(.isNil(position)), true): values.append(.null)
            case (.constant(false), false): values.append(.null)
            case (.or(let later), false):
                guard later.count == 2, case .compare(position, .less, let v) = later[0], later[1] == .isNil(position) else { return nil }
                values.append(v)
            default: return nil
            }
        }
        return values
    }

    /// The key of the cursor's entry in `index` without its primary key, or `nil` when the
    /// cursor's values for components the filter fixes differ from the fixed ones (then the
    /// index order and the keyset order differ, and the condition stays a filter).
    static func keysetBound(
        _ index: CompositeHandle, values: [Value], sort: [ResolvedSortKey], fixed: [Int: [UInt8]],
        encode: (Value, Int) -> [UInt8]?
    ) -> [UInt8]? {
        var bound: [UInt8] = []
        for (n, position) in index.positions.enumerated() {
            let cursor = sort.firstIndex { $0.attributeIndex == position }.map { values[$0] }
            if let fixedBytes = fixed[position] {
                if let cursor, encode(cursor, n) != fixedBytes { return nil }
                bound += fixedBytes
            } else {
                guard let cursor, let bytes = encode(cursor, n) else { return nil }
                bound += bytes
            }
        }
        return bound
    }

    // MARK: Describing plans

    /// A condition in the notation of plans (`species == "cat"`, `name hasPrefix "T"`),
    /// conditions of one range joined by `AND` as the other backends write them.
    static func describe(_ filter: Filter, _ entity: EntityDescription) -> String {
        func name(_ i: Int) -> String { entity.attributes.indices.contains(i) ? entity.attributes[i].name : "#\(i)" }
        func list(_ values: [Value]) -> String { "[" + values.map(\.debugLiteral).joined(separator: ", ") + "]" }
        switch filter {
        case .constant(let b): return b.map { String($0) } ?? "unknown"
        case .compare(let i, let op, let v): return "\(name(i)) \(op.rawValue) \(v.debugLiteral)"
        case .oneOf(let i, let values, let includesNil):
            return "\(name(i)) in " + list(values) + (includesNil ? " OR \(name(i)) == nil" : "")
        case .notOneOf(let i, let values): return "!(\(name(i)) in \(list(values)))"
        case .isNil(let i): return "\(name(i)) == nil"
        case .isNotNil(let i): return "\(name(i)) != nil"
        case .hasPrefix(let i, let s): return "\(name(i)) hasPrefix \(Value.string(s).debugLiteral)"
        case .contains(let i, let s): return "\(name(i)) contains \(Value.string(s).debugLiteral)"
        case .and(let parts): return "(" + parts.map { describe($0, entity) }.joined(separator: " AND ") + ")"
        case .or(let parts): return "(" + parts.map { describe($0, entity) }.joined(separator: " OR ") + ")"
        case .not(let inner): return "!" + describe(inner, entity)
        }
    }

    /// A keyset condition as one comparison of tuples in the sort's order:
    /// `(name, id) after ("Tom", 3)`.
    static func describeKeyset(_ conjunct: Filter, sort: [ResolvedSortKey], _ entity: EntityDescription) -> String {
        guard let values = keysetValues(conjunct, sort: sort) else { return describe(conjunct, entity) }
        let names = sort.map { entity.attributes[$0.attributeIndex].name + ($0.ascending ? "" : " DESC") }
        return "(" + names.joined(separator: ", ") + ") after (" + values.map(\.debugLiteral).joined(separator: ", ") + ")"
    }
}
