/// The memory store's table: a persistent B+ tree of rows ordered by primary key.
///
/// Persistent means copy-on-write at node granularity: copying a tree is O(1), and a write
/// to a copy copies only the nodes on the path it changes, so a reader's snapshot never
/// sees a later commit and never waits for it. Nodes a writer's working copy owns alone
/// are changed in place, so a transaction that writes many rows copies each node at most
/// once.
///
/// A B+ tree rather than a hash trie because the store needs keys in order (every fetch
/// sorted by primary key, the tie-break of every sort, offsets) and because bulk writes
/// are cheap in one: keys arriving in ascending order (identifiers handed out in order, an
/// import sorted by key) go to the end of the rightmost leaf, which splits off a new leaf
/// instead of halving, so such a table fills its leaves completely.
package struct RowTree: Sendable {
    /// Entries per leaf and children per inner node. 64 keeps a leaf's keys within a few
    /// cache lines for the binary search and a 100,000-row table three levels deep.
    package static let capacity = 64
    /// Below this many entries a node is merged with, or refilled from, a neighbour.
    static let minimum = capacity / 4

    /// One node. Leaves hold keys and rows; inner nodes hold children and the separators
    /// between them: every key in `children[i]` is below `keys[i]`, and every key in
    /// `children[i + 1]` is at or above it.
    ///
    /// `@unchecked Sendable`: a node is changed only by the one writer whose working copy
    /// references it uniquely (`isKnownUniquelyReferenced`); a node reachable from a
    /// committed version, and so from readers on other threads, is copied before any change.
    ///
    /// The fields skip the runtime's exclusivity checks (they cost a fifth of an insert): a
    /// node's fields are only ever accessed by the code in this type, which never holds one
    /// field's access open across another access to the same field.
    package final class Node: @unchecked Sendable {
        @exclusivity(unchecked) var keys: ContiguousArray<Value>
        @exclusivity(unchecked) var rows: ContiguousArray<Row>
        @exclusivity(unchecked) package var children: ContiguousArray<Node>
        /// Rows in this subtree, so an offset skips whole subtrees.
        @exclusivity(unchecked) var count: Int
        package let isLeaf: Bool

        init(leafKeys keys: ContiguousArray<Value>, rows: ContiguousArray<Row>) {
            // Full capacity up front: a leaf filled one entry at a time would otherwise
            // reallocate seven times on its way to 64.
            self.keys = keys
            self.keys.reserveCapacity(RowTree.capacity + 1)
            self.rows = rows
            self.rows.reserveCapacity(RowTree.capacity + 1)
            self.children = []
            self.count = rows.count
            self.isLeaf = true
        }

        init(separators: ContiguousArray<Value>, children: ContiguousArray<Node>) {
            self.keys = separators
            self.keys.reserveCapacity(RowTree.capacity)
            self.rows = []
            self.children = children
            self.children.reserveCapacity(RowTree.capacity + 1)
            self.count = children.reduce(0) { $0 + $1.count }
            self.isLeaf = false
        }

        /// Sets ``count`` from the entries or the children's counts.
        func recount() {
            count = isLeaf ? keys.count : children.reduce(0) { $0 + $1.count }
        }

        func copy() -> Node {
            isLeaf ? Node(leafKeys: keys, rows: rows) : Node(separators: keys, children: children)
        }

        /// Entries (leaf) or children (inner node).
        var width: Int { isLeaf ? keys.count : children.count }

        /// In a leaf: the position of `key`, or where it would go.
        func position(of key: Value) -> (index: Int, found: Bool) {
            var high = keys.count
            // Keys arriving in ascending order land after the last one: one comparison.
            guard let last = keys.last else { return (0, false) }
            let beyond = RowTree.compare(last, key)
            if beyond < 0 { return (high, false) }
            if beyond == 0 { return (high - 1, true) }
            high -= 1
            var low = 0
            while low < high {
                let middle = (low + high) >> 1
                let order = RowTree.compare(keys[middle], key)
                if order == 0 { return (middle, true) }
                if order < 0 { low = middle + 1 } else { high = middle }
            }
            return (low, false)
        }

        /// In an inner node: the child whose range holds `key`.
        func child(for key: Value) -> Int {
            var high = keys.count
            // At or after the last separator (an ascending insert): one comparison.
            guard let last = keys.last else { return 0 }
            if RowTree.compare(last, key) <= 0 { return high }
            high -= 1
            var low = 0
            while low < high {
                let middle = (low + high) >> 1
                if RowTree.compare(keys[middle], key) <= 0 { low = middle + 1 } else { high = middle }
            }
            return low
        }

        /// Makes `children[index]` safe to change: copies it unless this node alone holds it.
        func uniqueChild(_ index: Int) {
            if !isKnownUniquelyReferenced(&children[index]) { children[index] = children[index].copy() }
        }

        /// Inserts or replaces; returns the replaced row and, when this node overflowed,
        /// the separator and new right sibling its parent must take. `rightEdge` says this
        /// node is on the tree's rightmost path, where an ascending insert splits off only
        /// the new entry.
        func insert(_ row: Row, forKey key: Value, rightEdge: Bool) -> (old: Row?, split: (Value, Node)?) {
            if isLeaf {
                let (index, found) = position(of: key)
                if found {
                    let old = rows[index]
                    rows[index] = row
                    return (old, nil)
                }
                if index == keys.count {
                    keys.append(key)
                    rows.append(row)
                } else {
                    keys.insert(key, at: index)
                    rows.insert(row, at: index)
                }
                count += 1
                guard keys.count > RowTree.capacity else { return (nil, nil) }
                let at = rightEdge && index == keys.count - 1 ? index : keys.count / 2
                return (nil, splitLeaf(at: at))
            }
            let index = child(for: key)
            uniqueChild(index)
            let (old, split) = children[index].insert(row, forKey: key, rightEdge: rightEdge && index == children.count - 1)
            if old == nil { count += 1 }
            guard let (separator, right) = split else { return (old, nil) }
            if index == keys.count {
                keys.append(separator)
                children.append(right)
            } else {
                keys.insert(separator, at: index)
                children.insert(right, at: index + 1)
            }
            guard children.count > RowTree.capacity else { return (old, nil) }
            let at = rightEdge && index + 1 == children.count - 1 ? index + 1 : children.count / 2
            return (old, splitInner(at: at))
        }

        /// Moves the entries from `at` on into a new right sibling.
        private func splitLeaf(at: Int) -> (Value, Node) {
            let right = Node(leafKeys: ContiguousArray(keys[at...]), rows: ContiguousArray(rows[at...]))
            keys.removeSubrange(at...)
            rows.removeSubrange(at...)
            count -= right.count
            return (right.keys[0], right)
        }

        /// Moves the children from `at` on into a new right sibling; the separator before
        /// them goes up.
        private func splitInner(at: Int) -> (Value, Node) {
            let separator = keys[at - 1]
            let right = Node(separators: ContiguousArray(keys[at...]), children: ContiguousArray(children[at...]))
            keys.removeSubrange((at - 1)...)
            children.removeSubrange(at...)
            count -= right.count
            return (separator, right)
        }

        /// Removes `key`; returns the removed row. Children left too small are merged with
        /// or refilled from a neighbour, so the tree stays balanced under deletes.
        func remove(_ key: Value) -> Row? {
            if isLeaf {
                let (index, found) = position(of: key)
                guard found else { return nil }
                keys.remove(at: index)
                count -= 1
                return rows.remove(at: index)
            }
            let index = child(for: key)
            uniqueChild(index)
            guard let old = children[index].remove(key) else { return nil }
            count -= 1
            if children[index].width < RowTree.minimum, children.count > 1 { rebalance(around: index) }
            return old
        }

        /// Merges `children[index]` with a neighbour when both fit in one node, and
        /// otherwise shares their entries evenly between the two.
        private func rebalance(around index: Int) {
            let left = index > 0 ? index - 1 : index
            let right = left + 1
            uniqueChild(left)
            uniqueChild(right)
            let l = children[left]
            let r = children[right]
            if l.isLeaf {
                var keys = l.keys
                keys.append(contentsOf: r.keys)
                var rows = l.rows
                rows.append(contentsOf: r.rows)
                if keys.count <= RowTree.capacity {
                    l.keys = keys
                    l.rows = rows
                    l.count = rows.count
                    removeChild(right)
                    return
                }
                let half = keys.count / 2
                l.keys = ContiguousArray(keys[..<half])
                l.rows = ContiguousArray(rows[..<half])
                l.count = half
                r.keys = ContiguousArray(keys[half...])
                r.rows = ContiguousArray(rows[half...])
                r.count = r.rows.count
                self.keys[left] = r.keys[0]
                return
            }
            var keys = l.keys
            keys.append(self.keys[left])
            keys.append(contentsOf: r.keys)
            var children = l.children
            children.append(contentsOf: r.children)
            if children.count <= RowTree.capacity {
                l.keys = keys
                l.children = children
                l.count += r.count
                removeChild(right)
                return
            }
            let half = children.count / 2
            l.children = ContiguousArray(children[..<half])
            l.keys = ContiguousArray(keys[..<(half - 1)])
            l.count = l.children.reduce(0) { $0 + $1.count }
            self.keys[left] = keys[half - 1]
            r.children = ContiguousArray(children[half...])
            r.keys = ContiguousArray(keys[half...])
            r.count = r.children.reduce(0) { $0 + $1.count }
        }

        /// Drops `children[index]` (merged into its left neighbour) and the separator
        /// before it.
        private func removeChild(_ index: Int) {
            children.remove(at: index)
            keys.remove(at: index - 1)
        }

        /// Calls `body` with the rows in key order from the `skipping`-th on, until it
        /// returns false; returns false when stopped.
        func forEach(skipping: Int, _ body: (Row) throws -> Bool) rethrows -> Bool {
            if isLeaf {
                // Through the buffer: a row read from the array by subscript is a copy,
                // retained before and released after the body, for every row visited.
                return try rows.withUnsafeBufferPointer { rows in
                    var index = skipping
                    while index < rows.count {
                        guard try body(rows[index]) else { return false }
                        index += 1
                    }
                    return true
                }
            }
            var skip = skipping
            for child in children {
                if skip >= child.count {
                    skip -= child.count
                    continue
                }
                guard try child.forEach(skipping: skip, body) else { return false }
                skip = 0
            }
            return true
        }
    }

    package private(set) var root = Node(leafKeys: [], rows: [])

    /// Depot's key order, with integer keys (the common case) compared inline.
    @inline(__always)
    static func compare(_ a: Value, _ b: Value) -> Int {
        if case .int(let x) = a, case .int(let y) = b { return x < y ? -1 : (x == y ? 0 : 1) }
        return Value.compare(a, b)
    }

    package init() {}

    /// The number of rows.
    package var count: Int { root.count }
    package var isEmpty: Bool { root.count == 0 }

    /// The row stored under `key`.
    package subscript(key: Value) -> Row? {
        var node = root
        while !node.isLeaf { node = node.children[node.child(for: key)] }
        let (index, found) = node.position(of: key)
        return found ? node.rows[index] : nil
    }

    /// Stores `row` under `key`; returns the row it replaced.
    @discardableResult
    package mutating func updateValue(_ row: Row, forKey key: Value) -> Row? {
        if !isKnownUniquelyReferenced(&root) { root = root.copy() }
        let (old, split) = root.insert(row, forKey: key, rightEdge: true)
        if let (separator, right) = split {
            root = Node(separators: [separator], children: [root, right])
        }
        return old
    }

    /// Removes the row stored under `key`; returns it.
    @discardableResult
    package mutating func removeValue(forKey key: Value) -> Row? {
        if !isKnownUniquelyReferenced(&root) { root = root.copy() }
        let old = root.remove(key)
        // A root left with one child hands the tree to it: the tree shrinks by a level.
        while !root.isLeaf, root.children.count == 1 { root = root.children[0] }
        return old
    }

    /// The largest key, if any.
    package var lastKey: Value? {
        var node = root
        while !node.isLeaf {
            guard let last = node.children.last else { return nil }
            node = last
        }
        return node.keys.last
    }

    /// Appends rows whose keys are ascending and all above ``lastKey`` (the caller
    /// guarantees both), in full leaves hung on the right edge (see ``appendLeaves(_:)``).
    package mutating func appendAscending(keys: ContiguousArray<Value>, rows: ContiguousArray<Row>) {
        guard keys.count == rows.count else { return }
        var leaves: [Node] = []
        var start = 0
        while start < keys.count {
            let end = min(start + RowTree.capacity, keys.count)
            leaves.append(Node(leafKeys: ContiguousArray(keys[start..<end]), rows: ContiguousArray(rows[start..<end])))
            start = end
        }
        appendLeaves(leaves)
    }

    /// Appends `count` entries, the `j`-th being `entry(j)`, whose keys are ascending and
    /// all above ``lastKey`` (the caller guarantees both): each leaf is filled straight
    /// from `entry`, without arrays of the keys and rows in between.
    mutating func appendAscending(count: Int, _ entry: (Int) -> (key: Value, row: Row)) {
        guard count > 0 else { return }
        var leaves: [Node] = []
        leaves.reserveCapacity((count + RowTree.capacity - 1) / RowTree.capacity)
        var start = 0
        while start < count {
            let end = min(start + RowTree.capacity, count)
            let leaf = Node(leafKeys: [], rows: [])
            leaf.keys.reserveCapacity(end - start)
            leaf.rows.reserveCapacity(end - start)
            for j in start..<end {
                let (key, row) = entry(j)
                leaf.keys.append(key)
                leaf.rows.append(row)
            }
            leaves.append(leaf)
            start = end
        }
        appendLeaves(leaves)
    }

    /// Hangs new, non-empty leaves, each holding ascending keys above those of the one
    /// before and of the whole tree (the caller guarantees it), on the tree's right edge,
    /// without a descent per row: edge nodes that fill up split off a new right sibling.
    /// A bulk save of ascending keys builds its leaves as it goes and costs an array append
    /// per row.
    mutating func appendLeaves(_ leaves: [Node]) {
        guard !leaves.isEmpty else { return }
        // The right edge, leaf first, each node made this tree's own.
        if !isKnownUniquelyReferenced(&root) { root = root.copy() }
        var edge: [Node] = [root]
        var node = root
        while !node.isLeaf {
            let last = node.children.count - 1
            node.uniqueChild(last)
            node = node.children[last]
            edge.append(node)
        }
        edge.reverse()
        for leaf in leaves where !leaf.keys.isEmpty {
            leaf.recount()
            if edge.count == 1 && edge[0].keys.isEmpty {
                // An empty tree: the first leaf is the root.
                root = leaf
                edge[0] = leaf
                continue
            }
            if edge[0].keys.count + leaf.keys.count <= RowTree.capacity {
                // A leaf that fits in the last one joins it, so that saves of one row
                // each, above every key (a growing sequence or timestamp), fill leaves
                // instead of hanging a leaf per save. The last leaf is this tree's own.
                edge[0].keys.append(contentsOf: leaf.keys)
                edge[0].rows.append(contentsOf: leaf.rows)
                continue
            }
            hang(leaf, separator: leaf.keys[0], level: 1, edge: &edge)
        }
        // Counts of the nodes still on the edge (those that left it were counted then).
        for node in edge { node.recount() }
    }

    /// Hangs `child` right of the edge node at `level - 1`, under the edge node at `level`;
    /// a full parent passes the child up in a new node of its own.
    private mutating func hang(_ child: Node, separator: Value, level: Int, edge: inout [Node]) {
        // The node the child follows leaves the edge: its count is final now.
        edge[level - 1].recount()
        if level == edge.count {
            let newRoot = Node(separators: [separator], children: [edge[level - 1], child])
            root = newRoot
            edge[level - 1] = child
            edge.append(newRoot)
            return
        }
        let parent = edge[level]
        edge[level - 1] = child
        if parent.children.count < RowTree.capacity {
            parent.keys.append(separator)
            parent.children.append(child)
            return
        }
        hang(Node(separators: [], children: [child]), separator: separator, level: level + 1, edge: &edge)
    }

    /// Calls `body` with the rows in key order, from the `offset`-th on (skipping whole
    /// subtrees), until it returns false.
    package func forEach(from offset: Int = 0, _ body: (Row) throws -> Bool) rethrows {
        _ = try root.forEach(skipping: max(0, offset), body)
    }

    /// The number of keys below `key`: where `key` is, or would be, in key order. With the
    /// subtree counts this costs one descent, so a range's size is two ranks apart.
    package func rank(of key: Value) -> Int {
        var node = root
        var before = 0
        while !node.isLeaf {
            let index = node.child(for: key)
            for i in 0..<index { before += node.children[i].count }
            node = node.children[index]
        }
        return before + node.position(of: key).index
    }

    /// Calls `body` with each key and row in key order from the `offset`-th on, until it
    /// returns false.
    package func forEachEntry(from offset: Int, _ body: (Value, Row) throws -> Bool) rethrows {
        func walk(_ node: Node, skipping: Int) throws -> Bool {
            if node.isLeaf {
                var index = skipping
                while index < node.keys.count {
                    guard try body(node.keys[index], node.rows[index]) else { return false }
                    index += 1
                }
                return true
            }
            var skip = skipping
            for child in node.children {
                if skip >= child.count {
                    skip -= child.count
                    continue
                }
                guard try walk(child, skipping: skip) else { return false }
                skip = 0
            }
            return true
        }
        _ = try walk(root, skipping: max(0, offset))
    }

    /// Every row, in key order.
    package var rows: [Row] {
        var all: [Row] = []
        all.reserveCapacity(count)
        forEach { all.append($0); return true }
        return all
    }
}

extension RowTree {
    /// Checks the tree's shape, for tests: keys strictly ascending across leaves and within
    /// the separators' ranges, every leaf at the same depth, counts that add up, and no node
    /// over capacity or (below the root) empty. Returns the first problem found.
    package func structuralProblem() -> String? {
        var leafDepth: Int?
        var previous: Value?
        func check(_ node: Node, depth: Int, low: Value?, high: Value?) -> String? {
            if node.width > RowTree.capacity { return "a node holds \(node.width) entries, over \(RowTree.capacity)" }
            if node !== root && node.width == 0 { return "an empty node below the root" }
            if node.isLeaf {
                if let leafDepth, leafDepth != depth { return "leaves at depths \(leafDepth) and \(depth)" }
                leafDepth = depth
                guard node.keys.count == node.rows.count, node.count == node.rows.count else { return "a leaf's keys, rows and count disagree" }
                for key in node.keys {
                    if let previous, Value.compare(previous, key) >= 0 { return "keys out of order at \(key.debugLiteral)" }
                    if let low, Value.compare(key, low) < 0 { return "\(key.debugLiteral) below its separator \(low.debugLiteral)" }
                    if let high, Value.compare(key, high) >= 0 { return "\(key.debugLiteral) at or above its separator \(high.debugLiteral)" }
                    previous = key
                }
                return nil
            }
            guard node.keys.count == node.children.count - 1 else { return "an inner node with \(node.children.count) children and \(node.keys.count) separators" }
            guard node.count == node.children.reduce(0, { $0 + $1.count }) else { return "an inner node's count is not its children's" }
            for (index, child) in node.children.enumerated() {
                let childLow = index == 0 ? low : node.keys[index - 1]
                let childHigh = index == node.keys.count ? high : node.keys[index]
                if let problem = check(child, depth: depth + 1, low: childLow, high: childHigh) { return problem }
            }
            return nil
        }
        return check(root, depth: 0, low: nil, high: nil)
    }
}

extension RowTree {
    /// Every (key, row) pair as the leaves store them, in key order; for invariant checks.
    var entries: [(key: Value, row: Row)] {
        var all: [(key: Value, row: Row)] = []
        func walk(_ node: Node) {
            if node.isLeaf {
                for index in node.keys.indices { all.append((node.keys[index], node.rows[index])) }
            } else {
                for child in node.children { walk(child) }
            }
        }
        walk(root)
        return all
    }
}
