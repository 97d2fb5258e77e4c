import DepotCore
import PropertyBased
import Testing

/// The memory store's B+ tree against a dictionary model: random inserts, replacements
/// and removals (ascending runs included, which take the append split), with snapshots
/// taken along the way that must never change.
@Suite("Memory store row tree")
struct RowTreeTests {
    static func row(_ key: Int64, _ version: Int) -> Row { Row([.int(key), .int(Int64(version))]) }

    /// Applies `operations` (key, action) to a tree and to a model, checking shape, order
    /// and contents after every step, and that a snapshot taken halfway is unchanged.
    static func check(_ operations: [(key: Int64, action: Int)]) {
        var tree = RowTree()
        var model: [Int64: Row] = [:]
        var snapshot: (tree: RowTree, model: [Int64: Row])?
        for (step, operation) in operations.enumerated() {
            let key = Value.int(operation.key)
            if operation.action < 3 {
                let row = row(operation.key, step)
                #expect(tree.updateValue(row, forKey: key) == model.updateValue(row, forKey: operation.key))
            } else {
                #expect(tree.removeValue(forKey: key) == model.removeValue(forKey: operation.key))
            }
            if step == operations.count / 2 { snapshot = (tree, model) }
        }
        #expect(tree.structuralProblem() == nil)
        #expect(tree.count == model.count)
        #expect(tree.rows == model.keys.sorted().map { model[$0]! })
        for key in Set(operations.map(\.key)) { #expect(tree[.int(key)] == model[key]) }
        if let snapshot {
            #expect(snapshot.tree.structuralProblem() == nil)
            #expect(snapshot.tree.rows == snapshot.model.keys.sorted().map { snapshot.model[$0]! })
        }
        // Every offset reaches the same row as indexing the sorted rows.
        let all = tree.rows
        for offset in stride(from: 0, through: all.count, by: max(1, all.count / 17)) {
            var first: Row?
            tree.forEach(from: offset) { first = $0; return false }
            #expect(first == (offset < all.count ? all[offset] : nil))
        }
    }

    /// The number of leaves in `tree`.
    static func leaves(of tree: RowTree) -> Int {
        func count(_ node: RowTree.Node) -> Int {
            node.isLeaf ? 1 : node.children.reduce(0) { $0 + count($1) }
        }
        return count(tree.root)
    }

    @Test func randomOperationsMatchADictionary() async {
        // Each number is one operation: a key below 2,000 and one of five actions (three
        // writes, two removals), so trees grow, shrink and rebalance.
        await propertyCheck(count: 60, input: Gen.int(in: 0...9_999).array(of: 0...3_000)) { numbers in
            Self.check(numbers.map { (key: Int64($0 / 5), action: $0 % 5) })
        }
    }

    @Test func ascendingInsertsFillLeavesAndDeletesRebalance() {
        var tree = RowTree()
        for key in Int64(0)..<20_000 { tree.updateValue(Self.row(key, 0), forKey: .int(key)) }
        #expect(tree.structuralProblem() == nil)
        // Ascending inserts split off the new entry, so leaves stay full: 20,000 rows in
        // ceil(20,000 / 64) leaves.
        #expect(Self.leaves(of: tree) == (20_000 + RowTree.capacity - 1) / RowTree.capacity)
        let before = tree
        for key in stride(from: Int64(0), to: 20_000, by: 1) where key % 10 != 3 { tree.removeValue(forKey: .int(key)) }
        #expect(tree.structuralProblem() == nil)
        #expect(tree.rows.map { $0[value: 0] } == stride(from: Int64(3), to: 20_000, by: 10).map { Value.int($0) })
        // The copy taken before the removals still holds every row.
        #expect(before.structuralProblem() == nil)
        #expect(before.rows.map { $0[value: 0] } == (Int64(0)..<20_000).map { Value.int($0) })
        for key in stride(from: Int64(3), to: 20_000, by: 10) { tree.removeValue(forKey: .int(key)) }
        #expect(tree.isEmpty && tree.root.isLeaf && tree.structuralProblem() == nil)
    }

    /// Rows appended above every key one at a time (a save per transaction of a growing
    /// key) join the last leaf while it has room, so leaves stay full; a snapshot taken
    /// between appends keeps its rows.
    @Test func appendsOfOneRowFillTheLastLeaf() {
        var tree = RowTree()
        var snapshots: [RowTree] = []
        for key in Int64(0)..<2_000 {
            tree.appendAscending(keys: [.int(key)], rows: [Self.row(key, 0)])
            if key % 97 == 0 { snapshots.append(tree) }
        }
        #expect(tree.structuralProblem() == nil)
        #expect(Self.leaves(of: tree) == (2_000 + RowTree.capacity - 1) / RowTree.capacity)
        #expect(tree.rows.map { $0[value: 0] } == (Int64(0)..<2_000).map { Value.int($0) })
        for (i, snapshot) in snapshots.enumerated() {
            #expect(snapshot.structuralProblem() == nil)
            #expect(snapshot.count == i * 97 + 1)
            #expect(snapshot.rows.map { $0[value: 0] } == (Int64(0)...Int64(i * 97)).map { Value.int($0) })
        }
    }

    @Test func ascendingAppendsMatchInsertsWithSnapshotsUnchanged() async {
        // Each number: a batch size (up to 5,000, past two levels of splits) appended above
        // the largest key, or an ordinary write or removal below it, interleaved.
        await propertyCheck(count: 25, input: Gen.int(in: 0...99_999).array(of: 0...12)) { numbers in
            var tree = RowTree()
            var model: [Int64: Row] = [:]
            var snapshots: [(RowTree, [Int64: Row])] = []
            var next: Int64 = 0
            for (step, number) in numbers.enumerated() {
                snapshots.append((tree, model))
                if number % 3 == 0, next > 0 {
                    let key = Int64(number / 3) % next
                    #expect(tree.removeValue(forKey: .int(key)) == model.removeValue(forKey: key))
                    continue
                }
                let count = number % 5_001
                var keys = ContiguousArray<Value>()
                var rows = ContiguousArray<Row>()
                for _ in 0..<count {
                    next += 1 + Int64(number % 3)
                    keys.append(.int(next))
                    rows.append(Self.row(next, step))
                    model[next] = Self.row(next, step)
                }
                tree.appendAscending(keys: keys, rows: rows)
                #expect(tree.lastKey == model.keys.max().map { Value.int($0) })
            }
            #expect(tree.structuralProblem() == nil, "\(tree.structuralProblem() ?? "")")
            #expect(tree.count == model.count)
            #expect(tree.rows == model.keys.sorted().map { model[$0]! })
            for (snapshot, expected) in snapshots {
                #expect(snapshot.structuralProblem() == nil)
                #expect(snapshot.rows == expected.keys.sorted().map { expected[$0]! })
            }
        }
    }
}
