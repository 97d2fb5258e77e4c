/// Copies every entity of one store into another (SQLite to LMDB, memory to SQLite, ...),
/// then verifies the copy by counts and checksums. What `depot copy` runs.
public enum StoreCopy {
    /// One entity's copy.
    public struct EntityReport: Sendable, Hashable {
        /// The entity's name.
        public let entity: String
        /// The records the source holds.
        public let sourceRecords: Int
        /// The records the target holds after the copy.
        public let targetRecords: Int
        /// The source records' ``StoreCopy/checksum(of:in:)``.
        public let sourceChecksum: UInt64
        /// The target records' ``StoreCopy/checksum(of:in:)``.
        public let targetChecksum: UInt64

        /// Whether the target holds exactly the source's records.
        public var verified: Bool { sourceRecords == targetRecords && sourceChecksum == targetChecksum }
    }

    /// Records per transaction.
    public static let pageSize = 1_000

    /// Registers every entity `source` lists in `target` (created, or migrated by the usual
    /// additive rules), then upserts every record in pages, each page one transaction
    /// in the target; records whose references name records of a later page wait for a
    /// last transaction. Entities go in reference order (referenced ones first).
    ///
    /// - Parameters:
    ///   - source: The store to copy from; it lists its entities itself.
    ///   - target: The store to copy into.
    ///   - progress: Called after each page with the entity and the records copied.
    public static func run(
        from source: any Store, to target: any Store, progress: (@Sendable (_ entity: String, _ records: Int) -> Void)? = nil
    ) async throws -> [EntityReport] {
        let entities = ordered(try await source.storedEntities())
        let handles = try await target.register(entities.map(\.entity))
        // Records whose references name records not copied yet, of any entity: written
        // together in a last transaction, so records that refer to each other across
        // entities (a cycle) are copied too.
        var waiting: [ConvertedElement] = []
        for (from, to) in zip(entities, handles) {
            let options = JSONImportOptions(commit: .everyBatch(pageSize))
            var session = try await JSONImportSession(entity: to, store: target, options: options)
            var last: Value?
            var copied = 0
            let all = Query(all: from)
            let keyIndex = from.entity.primaryKeyIndex
            while true {
                let after = last
                let rows = try await source.read { transaction in
                    var rows: [Row] = []
                    try transaction.fetch(all.page(after: after, size: pageSize), reserve: { rows.reserveCapacity($0) }) { rows.append(try $0.row()) }
                    return rows
                }
                session.pending = rows.enumerated().map { offset, row in
                    ConvertedElement(index: copied + offset, entity: to, values: row.allValues.map { Optional($0) }, nested: [])
                }
                try await session.writeBatch()
                copied += rows.count
                progress?(from.name, copied)
                guard rows.count == pageSize, let final = rows.last else { break }
                last = final[value: keyIndex]
            }
            waiting += session.deferred
        }
        if let first = handles.first, !waiting.isEmpty {
            var session = try await JSONImportSession(entity: first, store: target, options: JSONImportOptions(commit: .everyBatch(pageSize)))
            session.pending = waiting
            try await session.writeBatch(last: true)
        }
        var reports: [EntityReport] = []
        for (from, to) in zip(entities, handles) {
            let (sourceCount, sourceSum) = try await checksum(of: from, in: source)
            let (targetCount, targetSum) = try await checksum(of: to, in: target)
            reports.append(EntityReport(entity: from.name, sourceRecords: sourceCount, targetRecords: targetCount, sourceChecksum: sourceSum, targetChecksum: targetSum))
        }
        return reports
    }

    /// The number of records of an entity and a checksum of their values (FNV-1a over the
    /// JSON text of each value, in primary-key order): equal on two stores exactly when
    /// they hold the same records.
    public static func checksum(of entity: EntityHandle, in store: any Store) async throws -> (count: Int, checksum: UInt64) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var count = 0
        var last: Value?
        let all = Query(all: entity)
        let keyIndex = entity.entity.primaryKeyIndex
        while true {
            let after = last
            let (rows, lastKey, pageHash) = try await store.read { transaction in
                var rows = 0
                var lastKey: Value?
                var hash: UInt64 = 0
                try transaction.fetch(all.page(after: after, size: pageSize), reserve: { _ in }) { columns in
                    let row = try columns.row()
                    for value in row.allValues {
                        for byte in JSONValueConverter.text(value).utf8 {
                            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
                        }
                        hash = (hash ^ 0x1F) &* 0x100_0000_01b3
                    }
                    rows += 1
                    lastKey = row[value: keyIndex]
                }
                return (rows, lastKey, hash)
            }
            hash = (hash ^ pageHash) &* 0x100_0000_01b3
            count += rows
            guard rows == pageSize, let lastKey else { break }
            last = lastKey
        }
        return (count, hash)
    }

    /// Referenced entities before the entities referring to them, where there is an order;
    /// otherwise (a cycle) in slot order.
    static func ordered(_ handles: [EntityHandle]) -> [EntityHandle] {
        var result: [EntityHandle] = []
        var placed: Set<String> = []
        var remaining = handles
        while !remaining.isEmpty {
            let ready = remaining.filter { handle in
                handle.entity.attributes.allSatisfy { attribute in
                    guard let target = attribute.reference?.entity, target != handle.name else { return true }
                    return placed.contains(target) || !remaining.contains { $0.name == target }
                }
            }
            let next = ready.isEmpty ? [remaining[0]] : ready
            for handle in next {
                result.append(handle)
                placed.insert(handle.name)
            }
            remaining.removeAll { handle in next.contains { $0.name == handle.name } }
        }
        return result
    }
}

/// The checks `depot check` runs on any store, through transactions: every reference names
/// a record, and no two records share a unique value.
public enum StoreChecks {
    /// Runs the checks on every entity `store` holds; returns each problem found, in words.
    public static func run(_ store: any Store) async throws -> [String] {
        var problems: [String] = []
        let handles = try await store.storedEntities()
        var byName: [String: EntityHandle] = [:]
        for handle in handles { byName[handle.name] = handle }
        for handle in handles {
            do {
                try handle.entity.validate()
            } catch {
                problems.append("The stored description of \(handle.name) is not valid: \(error.message)")
                continue
            }
            for (position, attribute) in handle.entity.attributes.enumerated() {
                let notNil = try Query(entity: handle, predicate: .not(.compare(attribute: attribute.name, .equal, .null)))
                if attribute.isUnique {
                    let groups = try await store.read { try $0.aggregate(AggregateQuery(rows: notNil, groupBy: [position], functions: [.count])) }
                    for group in groups where (group.values.first.flatMap { if case .int(let n) = $0 { n } else { nil } } ?? 0) > 1 {
                        problems.append("\(handle.name).\(attribute.name) is unique, but \(group.values[0].debugLiteral) records share \(group.keys.first?.debugLiteral ?? "?").")
                    }
                }
                guard let reference = attribute.reference else { continue }
                guard let target = byName[reference.entity] else {
                    problems.append("\(handle.name).\(attribute.name) refers to \(reference.entity), which the store does not hold.")
                    continue
                }
                let missing = try await store.read { transaction in
                    var missing: [Value] = []
                    for group in try transaction.aggregate(AggregateQuery(rows: notNil, groupBy: [position], functions: [.count])) {
                        guard let key = group.keys.first, !key.isNull else { continue }
                        if try !transaction.fetchRow(target, key: key, { _ in }) { missing.append(key) }
                    }
                    return missing
                }
                if !missing.isEmpty {
                    problems.append("\(handle.name).\(attribute.name) refers to \(missing.count) \(reference.entity) key(s) that do not exist: \(missing.prefix(5).map(\.debugLiteral).joined(separator: ", "))\(missing.count > 5 ? ", ..." : "").")
                }
            }
        }
        return problems
    }
}
