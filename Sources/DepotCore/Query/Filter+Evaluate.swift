/// Evaluation of filters and sort order in Swift, for backends that do not compile
/// queries to another language (memory, LMDB). SQLite compiles the same ``Filter`` to SQL
/// with the same meaning; the conformance suite holds them to it.
extension Filter {
    /// Whether a row matches: `true`, `false`, or `nil` for unknown (which does not match).
    public func evaluate(_ row: Row) -> Bool? {
        switch self {
        case .constant(let b):
            return b
        case .compare(let index, let op, let value):
            let field = row[value: index]
            if field.isNull { return nil }
            // Integers, the commonest comparison, without the general switch.
            let c: Int
            if case .int(let x) = field, case .int(let y) = value {
                c = x < y ? -1 : (x == y ? 0 : 1)
            } else {
                c = Value.compare(field, value)
            }
            switch op {
            case .equal: return c == 0
            case .notEqual: return c != 0
            case .less: return c < 0
            case .lessOrEqual: return c <= 0
            case .greater: return c > 0
            case .greaterOrEqual: return c >= 0
            }
        case .oneOf(let index, let values, let includesNil):
            let field = row[value: index]
            if field.isNull { return includesNil ? true : nil }
            // Means `x IN (non-nil values) OR x IS NULL`, so a non-null miss is false.
            return values.contains(field)
        case .notOneOf(let index, let values):
            let field = row[value: index]
            if field.isNull { return nil }
            return !values.contains(field)
        case .isNil(let index):
            return row[value: index].isNull
        case .isNotNil(let index):
            return !row[value: index].isNull
        case .hasPrefix(let index, let prefix):
            guard case .string(let s) = row[value: index] else { return nil }
            return s.utf8.starts(with: prefix.utf8)
        case .contains(let index, let needle):
            guard case .string(let s) = row[value: index] else { return nil }
            return Self.utf8Contains(s, needle)
        case .and(let parts):
            var result: Bool? = true
            for part in parts {
                switch part.evaluate(row) {
                case .some(false): return false
                case .none: result = nil
                case .some(true): break
                }
            }
            return result
        case .or(let parts):
            var result: Bool? = false
            for part in parts {
                switch part.evaluate(row) {
                case .some(true): return true
                case .none: result = nil
                case .some(false): break
                }
            }
            return result
        case .not(let inner):
            return inner.evaluate(row).map { !$0 }
        }
    }

    /// Whether a row matches (unknown counts as no).
    @inlinable
    public func matches(_ row: Row) -> Bool {
        evaluate(row) == true
    }

    static func utf8Contains(_ haystack: String, _ needle: String) -> Bool {
        var h = haystack
        var n = needle
        return h.withUTF8 { hb in
            n.withUTF8 { nb in
                if nb.isEmpty { return true }
                if nb.count > hb.count { return false }
                let first = nb[0]
                var i = 0
                let last = hb.count - nb.count
                while i <= last {
                    if hb[i] == first {
                        var j = 1
                        while j < nb.count && hb[i + j] == nb[j] { j += 1 }
                        if j == nb.count { return true }
                    }
                    i += 1
                }
                return false
            }
        }
    }
}

extension Query {
    /// Whether `a` comes before `b` in the query's order (sort keys, then primary key).
    /// Nulls sort before every value in ascending order and after in descending order.
    public func areInIncreasingOrder(_ a: Row, _ b: Row) -> Bool {
        for key in sort {
            let c = Value.compare(a[value: key.attributeIndex], b[value: key.attributeIndex])
            if c != 0 { return key.ascending ? c < 0 : c > 0 }
        }
        return false
    }

    /// The largest `offset + limit` kept as a bounded heap while scanning; past it, every
    /// matching row is kept and sorted once (the heap would hold almost as much).
    public static let largestTopNWindow = 4_096

    /// Applies filter, order, offset and limit to rows in memory, keeping at most
    /// `offset + limit` rows while scanning when that is small.
    public func apply(to rows: some Sequence<Row>) -> [Row] {
        var page = Page(self)
        for row in rows where filter.matches(row) { page.add(row) }
        return Array(page.rows())
    }

    /// How many rows the query returns when `matched` rows match its filter: its offset
    /// and limit applied to a count, for backends that count matches themselves.
    @inlinable
    public func count(ofMatching matched: Int) -> Int {
        let afterOffset = Swift.max(0, matched - offset)
        return limit.map { Swift.min($0, afterOffset) } ?? afterOffset
    }

    /// Collects the rows that match a query, in any order, and gives back the ones its
    /// order, offset and limit select: the top-N every backend that sorts in memory needs.
    ///
    /// A small `offset + limit` (k) keeps only k rows while scanning, in a binary heap whose
    /// top is the last of them, so n rows cost O(n log k); otherwise every row is kept and
    /// sorted once.
    public struct Page {
        /// The query whose rows the page selects.
        public let query: Query
        private let window: Int?
        private var kept: [Row] = []

        /// An empty page for `query`.
        public init(_ query: Query) {
            self.query = query
            self.window = query.end.flatMap { $0 <= Query.largestTopNWindow ? $0 : nil }
        }

        /// Makes room for `count` rows when every row is kept (no small window).
        public mutating func reserveCapacity(_ count: Int) {
            if window == nil { kept.reserveCapacity(count) }
        }

        /// The row a new one must come before to be kept, once the window is full; `nil`
        /// while every matching row is kept. Lets a backend skip, without decoding it, a
        /// candidate that ranks below it.
        public var threshold: Row? {
            guard let window, window > 0, kept.count == window else { return nil }
            return kept.first
        }

        /// Adds a row that matches the query's filter.
        public mutating func add(_ row: Row) {
            guard let window else { return kept.append(row) }
            if kept.count < window {
                kept.append(row)
                siftUp(kept.count - 1)
            } else if let last = kept.first, query.areInIncreasingOrder(row, last) {
                kept[0] = row
                siftDown(0)
            }
        }

        /// The selected rows, in the query's order.
        public mutating func rows() -> ArraySlice<Row> {
            kept.sort(by: query.areInIncreasingOrder)
            if query.offset >= kept.count { return [] }
            let end = query.end.map { Swift.min(kept.count, $0) } ?? kept.count
            return kept[query.offset..<end]
        }

        /// Whether `a` belongs nearer the heap's top: later in the query's order.
        @inline(__always)
        private func above(_ a: Int, _ b: Int) -> Bool { query.areInIncreasingOrder(kept[b], kept[a]) }

        private mutating func siftUp(_ start: Int) {
            var child = start
            while child > 0 {
                let parent = (child - 1) / 2
                guard above(child, parent) else { return }
                kept.swapAt(child, parent)
                child = parent
            }
        }

        private mutating func siftDown(_ start: Int) {
            var parent = start
            while true {
                let left = 2 * parent + 1
                guard left < kept.count else { return }
                var largest = above(left, parent) ? left : parent
                let right = left + 1
                if right < kept.count, above(right, largest) { largest = right }
                if largest == parent { return }
                kept.swapAt(parent, largest)
                parent = largest
            }
        }
    }
}
