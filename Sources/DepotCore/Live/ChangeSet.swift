/// How an observed result changed between two deliveries: enough to animate a list or to
/// send a diff to a client.
///
/// Indices of ``deleted`` refer to the previous result; indices of ``inserted`` and
/// ``updated`` refer to the new one; each move goes from an index in the previous result to
/// an index in the new one. Records are matched by primary key. A record that moved and
/// changed appears in both ``moved`` and ``updated``.
public struct ChangeSet: Sendable, Hashable {
    /// A record that moved: from its index in the previous result to its index in the new one.
    public struct Move: Sendable, Hashable {
        /// Its index in the previous result.
        public let from: Int
        /// Its index in the new result.
        public let to: Int

        /// A move from `from` to `to`.
        public init(from: Int, to: Int) {
            self.from = from
            self.to = to
        }
    }

    /// Indices in the new result of records that were not in the previous one.
    public var inserted: [Int]
    /// Indices in the previous result of records that are not in the new one.
    public var deleted: [Int]
    /// Indices in the new result of records whose values changed.
    public var updated: [Int]
    /// Records whose position changed.
    public var moved: [Move]

    /// A change set; empty by default.
    public init(inserted: [Int] = [], deleted: [Int] = [], updated: [Int] = [], moved: [Move] = []) {
        self.inserted = inserted
        self.deleted = deleted
        self.updated = updated
        self.moved = moved
    }

    /// Whether nothing changed.
    public var isEmpty: Bool { inserted.isEmpty && deleted.isEmpty && updated.isEmpty && moved.isEmpty }

    /// Computes the change from `old` to `new`, matching elements by `key` and calling them
    /// updated when `same` says their contents differ.
    ///
    /// Moves are the fewest that explain the new order: the common elements whose relative
    /// order is kept form a longest increasing subsequence; every other common element moved.
    ///
    /// - Complexity: O((n + m) log(n + m)).
    public static func diff<Element, Key: Hashable>(
        from old: [Element], to new: [Element], key: (Element) -> Key, same: (Element, Element) -> Bool
    ) -> ChangeSet {
        var oldIndex: [Key: Int] = [:]
        oldIndex.reserveCapacity(old.count)
        for (i, element) in old.enumerated() { oldIndex[key(element)] = i }
        var newKeys = Set<Key>()
        newKeys.reserveCapacity(new.count)
        var change = ChangeSet()
        // For each common element in new order: its old index.
        var commonOld: [Int] = []
        var commonNew: [Int] = []
        for (j, element) in new.enumerated() {
            let k = key(element)
            newKeys.insert(k)
            if let i = oldIndex[k] {
                commonOld.append(i)
                commonNew.append(j)
                if !same(old[i], element) { change.updated.append(j) }
            } else {
                change.inserted.append(j)
            }
        }
        for (i, element) in old.enumerated() where !newKeys.contains(key(element)) {
            change.deleted.append(i)
        }
        let kept = longestIncreasingSubsequence(commonOld)
        for (position, i) in commonOld.enumerated() where !kept.contains(position) {
            change.moved.append(Move(from: i, to: commonNew[position]))
        }
        return change
    }

    /// Positions in `values` of one longest strictly increasing subsequence.
    static func longestIncreasingSubsequence(_ values: [Int]) -> Set<Int> {
        var tails: [Int] = []  // positions
        var previous = [Int](repeating: -1, count: values.count)
        for (position, value) in values.enumerated() {
            var low = 0
            var high = tails.count
            while low < high {
                let mid = (low + high) / 2
                if values[tails[mid]] < value { low = mid + 1 } else { high = mid }
            }
            if low > 0 { previous[position] = tails[low - 1] }
            if low == tails.count { tails.append(position) } else { tails[low] = position }
        }
        var result = Set<Int>()
        var cursor = tails.last ?? -1
        while cursor >= 0 {
            result.insert(cursor)
            cursor = previous[cursor]
        }
        return result
    }
}
