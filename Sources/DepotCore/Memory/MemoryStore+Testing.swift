extension MemoryStore {
    /// Checks the committed state's internal consistency, for tests (see
    /// `MemoryEngine.checkInvariants()`).
    package func checkInvariants() throws(DepotError) { try engine.checkInvariants() }
}

extension MemoryEngine {
    /// Checks the committed state's internal consistency, for tests: every row fits its
    /// entity and is stored under its own primary key, each unique map holds exactly the
    /// rows' non-nil unique values, each secondary index has exactly one entry per row, and
    /// each table's B+ tree is well formed (keys ascending,
    /// balanced, counts adding up, no node over capacity).
    ///
    /// - Throws: ``DepotError/Code/storeCorrupted`` naming the first inconsistency.
    func checkInvariants() throws(DepotError) {
        let snapshot = state.withLockedValue { $0.snapshot }
        for (handle, table) in snapshot.tables.all {
            let name = handle.name
            func broken(_ what: String) -> DepotError {
                DepotError(.storeCorrupted, "MemoryStore invariant broken in \(name): \(what)")
            }
            guard table.entity.name == name else { throw broken("stored under another name") }
            var expectedUnique: [Int: [Value: Value]] = [:]
            for position in table.unique.keys { expectedUnique[position] = [:] }
            if let problem = table.rows.structuralProblem() { throw broken("the row tree is malformed: \(problem)") }
            for (key, row) in table.rows.entries {
                let rowKey = try table.entity.check(row)
                guard rowKey == key else { throw broken("row stored under \(key.debugLiteral) has key \(rowKey.debugLiteral)") }
                for position in table.unique.keys where !row[value: position].isNull {
                    guard expectedUnique[position]?.updateValue(key, forKey: row[value: position]) == nil else {
                        throw broken("two rows share the unique value \(row[value: position].debugLiteral)")
                    }
                }
            }
            for index in table.indexes {
                let name = index.components.map(\.attribute).joined(separator: ", ")
                if let problem = index.entries.structuralProblem() { throw broken("the tree of index (\(name)) is malformed: \(problem)") }
                guard index.entries.count == table.rows.count else {
                    throw broken("index (\(name)) has \(index.entries.count) entries for \(table.rows.count) rows")
                }
                for (key, row) in table.rows.entries {
                    guard index.entries[index.entryKey(of: row)] == row else {
                        throw broken("index (\(name)) has no entry holding the row with key \(key.debugLiteral)")
                    }
                }
            }
            for (position, map) in table.unique {
                guard map.count == expectedUnique[position]?.count,
                    map.allSatisfy({ expectedUnique[position]?[$0.key] == $0.value })
                else { throw broken("the unique map of \(table.entity.attributes[position].name) does not match the rows") }
            }
        }
    }
}
