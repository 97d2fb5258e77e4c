/// A transaction over a ``MemoryStore`` snapshot. Writes go to an overlay that the store
/// applies on commit; reads merge the overlay over the snapshot, so a transaction sees
/// its own writes and nobody else's.
final class MemoryTransaction: WriteTransaction {
    struct Pending {
        /// Primary key → new row, or `nil` for deleted.
        var rows: [Value: Row?] = [:]
        /// Keys in the order they were first written, so the change feed reports them so.
        var order: [Value] = []
        /// For each unique attribute position: value → primary key, for rows in `rows`.
        var unique: [Int: [Value: Value]] = [:]
        var uniquePositions: [Int] = []
    }

    let base: MemoryStore.Snapshot
    let writable: Bool
    var pending: [String: Pending] = [:]
    var isFinished = false

    init(base: MemoryStore.Snapshot, writable: Bool) {
        self.base = base
        self.writable = writable
    }

    private func table(_ entity: EntityDescription) throws(DepotError) -> MemoryStore.Table {
        if isFinished {
            throw DepotError(.closed, "This transaction has ended; use the context only inside its closure.")
        }
        guard let table = base.tables[entity.name] else {
            throw DepotError(.invalidSchema, "The entity \(entity.name) is not registered with this store; register it (a Controller does so on first use) before reading or writing it.")
        }
        guard table.entity.attributes.count == entity.attributes.count else {
            throw DepotError(.schemaMismatch, "The entity \(entity.name) is registered with \(table.entity.attributes.count) attributes, but this request describes \(entity.attributes.count); use the record type that registered it.")
        }
        return table
    }

    private func current(_ key: Value, in table: MemoryStore.Table) -> Row? {
        if let overlay = pending[table.entity.name], let entry = overlay.rows[key] { return entry }
        return table.rows[key]
    }

    /// The merged rows of a table, overlay over snapshot (unordered).
    private func rows(of table: MemoryStore.Table) -> [Row] {
        guard let overlay = pending[table.entity.name], !overlay.rows.isEmpty else {
            return Array(table.rows.values)
        }
        var out: [Row] = []
        out.reserveCapacity(table.rows.count + overlay.rows.count)
        for (key, row) in table.rows where overlay.rows[key] == nil { out.append(row) }
        for case let row? in overlay.rows.values { out.append(row) }
        return out
    }

    // MARK: ReadTransaction

    func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (Row) throws -> Void) throws {
        let table = try table(query.entity)
        let overlay = pending[table.entity.name]
        let inKeyOrder = query.sort.count == 1 && query.sort[0].attributeIndex == query.entity.primaryKeyIndex && query.sort[0].ascending
        if inKeyOrder && (overlay?.rows.isEmpty ?? true) {
            // Stream the cached key order: no sort, and a limit stops the scan early.
            let ordered = table.rowsInKeyOrder()
            if query.filter == .constant(true) {
                let start = min(query.offset, ordered.count)
                let end = query.limit.map { min(ordered.count, start + $0) } ?? ordered.count
                reserve(end - start)
                for row in ordered[start..<end] { try body(row) }
                return
            }
            var skipped = 0
            var delivered = 0
            for row in ordered where query.filter.matches(row) {
                if let limit = query.limit, delivered >= limit { break }
                if skipped < query.offset {
                    skipped += 1
                    continue
                }
                try body(row)
                delivered += 1
            }
            return
        }
        let result = query.apply(to: rows(of: table))
        reserve(result.count)
        for row in result { try body(row) }
    }

    func fetchRow(_ entity: EntityDescription, key: Value, into row: inout Row) throws -> Bool {
        let table = try table(entity)
        guard let found = current(key, in: table) else { return false }
        row = found
        return true
    }

    func count(_ query: Query) throws -> Int {
        let table = try table(query.entity)
        var matched = 0
        if query.filter == .constant(true) {
            matched = table.rows.count
            if let overlay = pending[table.entity.name] {
                for (key, row) in overlay.rows {
                    let existed = table.rows[key] != nil
                    if existed && row == nil { matched -= 1 }
                    if !existed && row != nil { matched += 1 }
                }
            }
        } else {
            for row in rows(of: table) where query.filter.matches(row) { matched += 1 }
        }
        let afterOffset = max(0, matched - query.offset)
        return query.limit.map { min($0, afterOffset) } ?? afterOffset
    }

    // MARK: WriteTransaction

    private func checkWritable() throws(DepotError) {
        if !writable {
            throw DepotError(.invalidConfiguration, "This is a read transaction; write inside a write operation.")
        }
    }

    private func validate(_ row: Row, for entity: EntityDescription) throws(DepotError) -> Value {
        guard row.count == entity.attributes.count else {
            throw DepotError(.conversionFailed, "A \(entity.name) row has \(row.count) values, but the entity declares \(entity.attributes.count) attributes.")
        }
        for (i, attribute) in entity.attributes.enumerated() {
            let value = row[value: i]
            if value.isNull {
                if !attribute.isOptional {
                    throw DepotError(.conversionFailed, "\(entity.name).\(attribute.name) is not optional but the row has nil for it.")
                }
            } else if value.type != attribute.type {
                throw DepotError(.conversionFailed, "\(entity.name).\(attribute.name) has type \(attribute.type.rawValue), but the row holds \(value.debugLiteral).")
            }
        }
        return row[value: entity.primaryKeyIndex]
    }

    /// Checks that no other row holds one of `row`'s unique values.
    private func checkUnique(_ row: Row, key: Value, table: MemoryStore.Table) throws(DepotError) {
        let overlay = pending[table.entity.name]
        for (position, committed) in table.unique {
            let value = row[value: position]
            if value.isNull { continue }
            if let owner = overlay?.unique[position]?[value], owner != key {
                if let ownerRow = current(owner, in: table), ownerRow[value: position] == value {
                    throw DepotError.duplicateUnique(entity: table.entity.name, attribute: table.entity.attributes[position].name, value: value)
                }
            }
            if let owner = committed[value], owner != key {
                if let ownerRow = current(owner, in: table), ownerRow[value: position] == value {
                    throw DepotError.duplicateUnique(entity: table.entity.name, attribute: table.entity.attributes[position].name, value: value)
                }
            }
        }
    }

    private func put(_ row: Row?, key: Value, table: MemoryStore.Table) {
        let name = table.entity.name
        if pending[name] == nil {
            var fresh = Pending()
            fresh.uniquePositions = Array(table.unique.keys)
            pending[name] = fresh
        }
        if pending[name]!.rows.updateValue(row, forKey: key) == nil { pending[name]!.order.append(key) }
        if let row {
            for position in pending[name]!.uniquePositions where !row[value: position].isNull {
                pending[name]!.unique[position, default: [:]][row[value: position]] = key
            }
        }
    }

    func insert(_ row: Row, into entity: EntityDescription) throws {
        try checkWritable()
        let table = try table(entity)
        let key = try validate(row, for: entity)
        if current(key, in: table) != nil { throw DepotError.duplicateKey(entity: entity.name, key: key) }
        try checkUnique(row, key: key, table: table)
        put(row, key: key, table: table)
    }

    func upsert(_ row: Row, into entity: EntityDescription) throws -> Bool {
        try checkWritable()
        let table = try table(entity)
        let key = try validate(row, for: entity)
        try checkUnique(row, key: key, table: table)
        let existed = current(key, in: table) != nil
        put(row, key: key, table: table)
        return !existed
    }

    func update(_ row: Row, in entity: EntityDescription) throws {
        try checkWritable()
        let table = try table(entity)
        let key = try validate(row, for: entity)
        guard current(key, in: table) != nil else { throw DepotError.notFound(entity: entity.name, key: key) }
        try checkUnique(row, key: key, table: table)
        put(row, key: key, table: table)
    }

    func delete(key: Value, from entity: EntityDescription) throws -> Bool {
        try checkWritable()
        let table = try table(entity)
        guard current(key, in: table) != nil else { return false }
        put(nil, key: key, table: table)
        return true
    }

    func delete(_ query: Query) throws -> Int {
        try checkWritable()
        let table = try table(query.entity)
        let doomed = query.apply(to: rows(of: table))
        for row in doomed { put(nil, key: row[value: query.entity.primaryKeyIndex], table: table) }
        return doomed.count
    }
}
