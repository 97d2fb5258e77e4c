import Foundation

/// How a memory read finds its rows: the table in key order, or ranges of one index.
///
/// The filter is spread into alternatives (an `OR` of `AND`s; `IN` is an `OR` of
/// equalities). For each index, each alternative becomes one range of entries: equalities
/// on the leading components (the primary key is the last, implicit one) extend a prefix,
/// and the first component without one may narrow it by a comparison, `isNotNil` or a
/// string prefix. The ranges are merged and read in index order. Conditions a range does
/// not express are checked on each row, which each entry holds.
///
/// The cost of a plan is the rows it reads, an index entry counting twice (its key is
/// longer to compare than a table's and its tree is walked by ranges): every entry in its
/// ranges (exactly, from the tree's counts), or only `offset + limit` of them when the
/// entries come in the request's order and the ranges say all the filter does. The
/// cheapest plan wins; a scan wins a tie.
///
/// Counting a range's entries costs two descents of the index's tree, more than reading a
/// list page from it. A fetch skips the count when it cannot change the choice: the table
/// has one usable index, its entries come in order, its ranges say all the filter does and
/// `offset + limit` of them cost less than a scan, so it wins whatever the count.
struct MemoryPlan {
    /// What the plan is for, which decides what it must work out beyond the choice.
    enum Purpose {
        /// Rows: the entries' count only where it decides between plans.
        case fetch
        /// A count: the entries of an exact plan are the answer.
        case count
        /// `explain`: the count and each range's conditions as text.
        case explain
    }

    enum Access {
        /// The table in key order.
        case scan
        /// Ranges `[lower, upper)` of the index at this position of the table's indexes.
        case index(Int, [(lower: [UInt8], upper: [UInt8]?)])
    }

    var access: Access
    /// Whether rows come in the query's order (no sort afterwards).
    var inOrder: Bool
    /// Whether the ranges say everything the filter does (no check per row).
    var exact: Bool
    /// Rows (scan) or entries (index) the ranges hold; nil when a fetch's plan skipped
    /// counting them.
    var estimatedRows: Int?
    /// Each alternative's conditions that became its range, for `explain`.
    var rangeText: [String]
    var cost: Int

    /// Conjunctions beyond this many make the filter a scan: the alternatives of a filter
    /// grow as the product of its `OR`s.
    static let maximumAlternatives = 64

    static func plan(_ query: Query, in table: MemoryEngine.RegisteredEntity, for purpose: Purpose = .fetch) -> MemoryPlan {
        let entity = query.entity
        let rowCount = table.rows.count
        let inKeyOrder = query.sort.count == 1 && query.sort[0].attributeIndex == entity.primaryKeyIndex && query.sort[0].ascending
        let unfiltered = query.filter == .constant(true)
        var best = MemoryPlan(
            access: .scan, inOrder: inKeyOrder, exact: unfiltered, estimatedRows: rowCount, rangeText: [],
            cost: inKeyOrder && unfiltered ? min(rowCount, query.end ?? rowCount) : rowCount)
        guard !table.indexes.isEmpty, let alternatives = disjuncts(query.filter) else { return best }
        let fixed = fixedAttributes(alternatives)
        let describing = purpose == .explain
        var candidates: [(number: Int, ranges: [(lower: [UInt8], upper: [UInt8]?)], inOrder: Bool, exact: Bool, texts: [String])] = []
        for (number, index) in table.indexes.enumerated() {
            var ranges: [(lower: [UInt8], upper: [UInt8]?)] = []
            var exact = true
            var texts: [String] = []
            for atoms in alternatives {
                let range = self.range(for: atoms, in: index, entity: entity, describing: describing)
                ranges.append((range.lower, range.upper))
                exact = exact && range.consumedAll
                if describing, !range.text.isEmpty { texts.append(range.text) }
            }
            ranges = merge(ranges)
            let inOrder = followsSort(index, query: query, fixed: fixed)
            let narrows = ranges.count != 1 || !ranges[0].lower.isEmpty || ranges[0].upper != nil
            // An index that neither narrows nor orders reads everything, and more slowly.
            guard narrows || inOrder else { continue }
            candidates.append((number, ranges, inOrder, exact, texts))
        }
        // `2 * end < best.cost`, written so that an end near Int.max cannot overflow.
        if purpose == .fetch, candidates.count == 1, let only = candidates.first, only.inOrder, only.exact, let end = query.end,
            best.cost > 0, end <= (best.cost - 1) / 2
        {
            return MemoryPlan(
                access: .index(only.number, only.ranges), inOrder: true, exact: true, estimatedRows: nil, rangeText: only.texts, cost: 2 * end)
        }
        for candidate in candidates {
            let index = table.indexes[candidate.number]
            var entries = 0
            for range in candidate.ranges {
                let lower = index.entries.rank(of: index.key(range.lower))
                let upper = range.upper.map { index.entries.rank(of: index.key($0)) } ?? index.entries.count
                entries += max(0, upper - lower)
            }
            let read = candidate.inOrder && candidate.exact ? min(entries, query.end ?? entries) : entries
            let cost = 2 * read
            if cost < best.cost || (cost == best.cost && candidate.inOrder && !best.inOrder) {
                best = MemoryPlan(
                    access: .index(candidate.number, candidate.ranges), inOrder: candidate.inOrder, exact: candidate.exact,
                    estimatedRows: entries, rangeText: candidate.texts, cost: cost)
            }
        }
        return best
    }

    /// The filter as alternatives of conditions; nil when there are too many. No
    /// alternative means nothing matches.
    static func disjuncts(_ filter: Filter) -> [[Filter]]? {
        switch filter {
        case .constant(true): return [[]]
        case .constant: return []
        case .oneOf(let position, let values, let includesNil):
            var out = values.map { [Filter.compare(position, .equal, $0)] }
            if includesNil { out.append([.isNil(position)]) }
            return out.count <= maximumAlternatives ? out : nil
        case .or(let parts):
            var out: [[Filter]] = []
            for part in parts {
                guard let more = disjuncts(part) else { return nil }
                out += more
                if out.count > maximumAlternatives { return nil }
            }
            return out
        case .and(let parts):
            var out: [[Filter]] = [[]]
            for part in parts {
                guard let more = disjuncts(part) else { return nil }
                var product: [[Filter]] = []
                for left in out {
                    for right in more { product.append(left + right) }
                }
                if product.count > maximumAlternatives { return nil }
                out = product
            }
            return out
        default:
            return [[filter]]
        }
    }

    /// Attributes every alternative fixes to one and the same value: the order of results
    /// does not depend on them.
    static func fixedAttributes(_ alternatives: [[Filter]]) -> Set<Int> {
        var fixed: [Int: Value]?
        for atoms in alternatives {
            var mine: [Int: Value] = [:]
            for atom in atoms {
                switch atom {
                case .compare(let position, .equal, let value): mine[position] = value
                case .isNil(let position): mine[position] = .null
                default: continue
                }
            }
            if let current = fixed {
                fixed = current.filter { mine[$0.key] == $0.value }
            } else {
                fixed = mine
            }
        }
        return Set(fixed?.keys ?? [:].keys)
    }

    /// Whether the index's order (components, then the key ascending) is the query's order
    /// once the attributes fixed to one value are left out of both.
    static func followsSort(_ index: MemoryIndex, query: Query, fixed: Set<Int>) -> Bool {
        var indexOrder = zip(index.positions, index.components).map { ResolvedSortKey(attributeIndex: $0, ascending: !$1.isDescending) }
        indexOrder.append(ResolvedSortKey(attributeIndex: index.keyPosition, ascending: true))
        indexOrder.removeAll { fixed.contains($0.attributeIndex) }
        var sort = query.sort
        sort.removeAll { fixed.contains($0.attributeIndex) }
        // The key is unique: once it is in order, later sort keys change nothing.
        if let key = sort.firstIndex(where: { $0.attributeIndex == index.keyPosition }) { sort.removeSubrange((key + 1)...) }
        if let key = indexOrder.firstIndex(where: { $0.attributeIndex == index.keyPosition }) { indexOrder.removeSubrange((key + 1)...) }
        return sort == indexOrder
    }

    /// The range of entries one alternative can be, whether it says all the alternative
    /// does, and the conditions it used.
    static func range(
        for atoms: [Filter], in index: MemoryIndex, entity: EntityDescription, describing: Bool
    ) -> (lower: [UInt8], upper: [UInt8]?, consumedAll: Bool, text: String) {
        var prefix: [UInt8] = []
        var used = Set<Int>()
        var texts: [String] = []
        var lower: [UInt8]?
        var upper: [UInt8]??
        var components: [(position: Int, descending: Bool, tagged: Bool)] = []
        for (i, position) in index.positions.enumerated() {
            components.append((position, index.components[i].isDescending, index.tagged[i]))
        }
        components.append((index.keyPosition, false, false))
        componentLoop: for (position, descending, tagged) in components {
            // Only `explain` shows the conditions: a fetch does not build their text.
            let name = describing ? entity.attributes[position].name : ""
            if let (at, atom) = atoms.enumerated().first(where: { !used.contains($0.offset) && isEquality($0.element, on: position) }) {
                used.insert(at)
                if case .compare(_, _, let value) = atom {
                    IndexKeyEncoding.append(value, descending: descending, tagged: tagged, to: &prefix)
                    if describing { texts.append("\(name) == \(value.debugLiteral)") }
                } else if tagged {
                    IndexKeyEncoding.append(.null, descending: descending, to: &prefix)
                    if describing { texts.append("\(name) == nil") }
                } else {
                    // Nil in a component that is never nil: no entry.
                    return (prefix, prefix, used.count == atoms.count, describing ? "\(name) == nil" : "")
                }
                continue
            }
            // The first component without an equality: its comparisons bound the range.
            var low = prefix
            var high = IndexKeyEncoding.successor(prefix)
            var bounded = false
            for (at, atom) in atoms.enumerated() where !used.contains(at) {
                guard let bound = bounds(atom, on: position, descending: descending, tagged: tagged, after: prefix) else { continue }
                used.insert(at)
                bounded = true
                if bound.lower.lexicographicallyPrecedes(low) == false { low = bound.lower }
                if let candidate = bound.upper, high.map({ candidate.lexicographicallyPrecedes($0) }) ?? true { high = candidate }
                if describing { texts.append(describe(atom, name: name)) }
            }
            if bounded {
                lower = low
                upper = .some(high)
            }
            break componentLoop
        }
        let finalLower = lower ?? prefix
        let finalUpper: [UInt8]? = upper ?? IndexKeyEncoding.successor(prefix)
        return (finalLower, prefix.isEmpty && lower == nil ? nil : finalUpper, used.count == atoms.count, texts.joined(separator: " AND "))
    }

    static func isEquality(_ atom: Filter, on position: Int) -> Bool {
        switch atom {
        case .compare(position, .equal, _), .isNil(position): true
        default: false
        }
    }

    /// The range `[lower, upper)` of entries (after `prefix`) whose component at `position`
    /// satisfies `atom`, or nil when the atom says nothing about it as a range.
    static func bounds(_ atom: Filter, on position: Int, descending: Bool, tagged: Bool, after prefix: [UInt8]) -> (lower: [UInt8], upper: [UInt8]?)? {
        func encoded(_ value: Value) -> [UInt8] {
            var bytes = prefix
            IndexKeyEncoding.append(value, descending: descending, tagged: tagged, to: &bytes)
            return bytes
        }
        // Present values start with the present tag (inverted when descending); nil
        // values with the absent tag, first ascending and last descending. A component
        // that is never nil has no tag: all of its values are present.
        let presentTag = descending ? ~IndexKeyEncoding.present : IndexKeyEncoding.present
        let presentStart = tagged ? prefix + [presentTag] : prefix
        let presentEnd = IndexKeyEncoding.successor(presentStart)
        switch atom {
        case .isNotNil(position):
            return (presentStart, presentEnd)
        case .hasPrefix(position, let text):
            var bytes = prefix
            IndexKeyEncoding.appendStringPrefix(text, descending: descending, tagged: tagged, to: &bytes)
            return (bytes, IndexKeyEncoding.successor(bytes))
        case .compare(position, let op, let value):
            let at = encoded(value)
            let after = IndexKeyEncoding.successor(at)
            // Ascending, larger values come later; descending, earlier.
            switch (op, descending) {
            case (.greater, false), (.less, true):
                // No key follows every key that starts with `at` (its bytes are all 0xFF, as
                // Int64.max's are): no range says "after it", and `at` itself must not be in
                // it, so this comparison is left to the filter.
                guard let after else { return nil }
                return (after, presentEnd)
            case (.greaterOrEqual, false), (.lessOrEqual, true): return (at, presentEnd)
            case (.less, false), (.greater, true): return (presentStart, at)
            case (.lessOrEqual, false), (.greaterOrEqual, true): return (presentStart, after)
            default: return nil
            }
        default:
            return nil
        }
    }

    static func describe(_ atom: Filter, name: String) -> String {
        switch atom {
        case .isNotNil: return "\(name) != nil"
        case .hasPrefix(_, let text): return "\(name) starts with \(Value.string(text).debugLiteral)"
        case .compare(_, let op, let value): return "\(name) \(op.rawValue) \(value.debugLiteral)"
        default: return ""
        }
    }

    /// Ranges sorted by their start, overlapping or touching ones joined.
    static func merge(_ ranges: [(lower: [UInt8], upper: [UInt8]?)]) -> [(lower: [UInt8], upper: [UInt8]?)] {
        if ranges.count == 1, let range = ranges.first {
            return range.upper.map { range.lower.lexicographicallyPrecedes($0) } ?? true ? ranges : []
        }
        let sorted = ranges.filter { range in range.upper.map { range.lower.lexicographicallyPrecedes($0) } ?? true }
            .sorted { $0.lower.lexicographicallyPrecedes($1.lower) }
        var out: [(lower: [UInt8], upper: [UInt8]?)] = []
        for range in sorted {
            if let last = out.last, last.upper.map({ !$0.lexicographicallyPrecedes(range.lower) }) ?? true {
                let upper: [UInt8]? =
                    switch (last.upper, range.upper) {
                    case (nil, _), (_, nil): nil
                    case (let a?, let b?): a.lexicographicallyPrecedes(b) ? b : a
                    }
                out[out.count - 1].upper = upper
            } else {
                out.append(range)
            }
        }
        return out
    }
}
