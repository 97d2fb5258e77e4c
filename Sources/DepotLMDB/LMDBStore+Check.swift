public import DepotCore

extension LMDBStore: IntegrityCheckingStore {
    /// Each index against the records: for every indexed attribute, the records a query
    /// finds through the index (one query per distinct value) must be exactly those a scan
    /// of the records counts. An index entry missing, extra or pointing to the wrong record
    /// shows as a difference.
    public func checkIntegrity() async throws -> [String] {
        var problems: [String] = []
        for handle in try await storedEntities() {
            for (position, attribute) in handle.entity.attributes.enumerated() where attribute.isIndexed && position != handle.entity.primaryKeyIndex {
                let differences = try await read { transaction in
                    var differences: [String] = []
                    // LMDB aggregates by scanning the records (the reference computation);
                    // an equality count on an indexed attribute goes through the index.
                    let scanned = try transaction.aggregate(AggregateQuery(rows: Query(all: handle), groupBy: [position], functions: [.count]))
                    var total = 0
                    for group in scanned {
                        guard let value = group.keys.first, case .int(let expected)? = group.values.first else { continue }
                        total += Int(expected)
                        let predicate: PredicateExpression = .compare(attribute: attribute.name, .equal, value)
                        let found = try transaction.count(Query(entity: handle, predicate: predicate))
                        if found != Int(expected) {
                            differences.append("\(handle.name).\(attribute.name) = \(value.debugLiteral): \(expected) records, but the index finds \(found)")
                        }
                    }
                    let all = try transaction.count(Query(all: handle))
                    if total != all { differences.append("\(handle.name): \(all) records, but \(total) grouped by \(attribute.name)") }
                    return differences
                }
                problems += differences.prefix(20)
            }
        }
        return problems
    }
}
