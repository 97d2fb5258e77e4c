/// Enforces references in one write, the same way on every backend: a write whose store
/// has references runs through a ``ReferenceEnforcement`` wrapped around the backend's
/// transaction.
///
/// - Every written reference must name an existing record when the write ends. A target
///   found at once is remembered for the rest of the write; one not found is checked again
///   at the end, so parents and children can be written in any order in one write.
/// - Deleting a record first finds every record its cascades reach and checks every deny
///   rule against them, then sets nullified references to nil and deletes the records,
///   farthest first, all in the same transaction: a refused delete changes nothing, and
///   observers see every deleted record. No action is checked at the end.
///
/// Backends call ``run(_:_:_:)`` around every write closure (each write of a group commit
/// separately, so a violation fails only its own write). A store whose entities have no
/// references pays one `isEmpty` check per write.
public final class ReferenceEnforcement: WriteTransaction {
    let base: any WriteTransaction
    let relationships: Relationships

    struct Target: Hashable {
        let slot: Int
        let key: Value
    }

    /// Records found to exist in this write (cleared for a record when it is deleted).
    private var known: Set<Target> = []
    /// References that pointed to no record when written: checked again at the end.
    private var unresolved: [(link: Link, sourceKey: Value, value: Value)] = []
    /// Deleted records with `noAction` references to them: checked at the end.
    private var orphaned: [(link: Link, key: Value)] = []

    init(_ base: any WriteTransaction, _ relationships: Relationships) {
        self.base = base
        self.relationships = relationships
    }

    /// Runs a write closure with the store's references enforced.
    ///
    /// - Throws: What `body` throws; ``DepotError/Code/missingReference`` when the write
    ///   leaves a reference to nothing; ``DepotError/Code/deleteDenied`` from a refused delete.
    @inlinable
    public static func run<T>(
        _ transaction: any WriteTransaction, _ relationships: Relationships, _ body: (any WriteTransaction) throws -> T
    ) throws -> T {
        if relationships.isEmpty { return try body(transaction) }
        return try runChecked(transaction, relationships, body)
    }

    @usableFromInline
    static func runChecked<T>(
        _ transaction: any WriteTransaction, _ relationships: Relationships, _ body: (any WriteTransaction) throws -> T
    ) throws -> T {
        let enforcement = ReferenceEnforcement(transaction, relationships)
        let result = try body(enforcement)
        try enforcement.finish()
        return result
    }

    // MARK: Reads go straight through

    /// The base transaction's ``ReadTransaction/fetch(_:reserve:_:)``.
    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        try base.fetch(query, reserve: reserve, body)
    }

    /// The base transaction's ``ReadTransaction/fetchRow(_:key:_:)``.
    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        try base.fetchRow(entity, key: key, body)
    }

    /// The base transaction's ``ReadTransaction/count(_:)``.
    public func count(_ query: Query) throws -> Int { try base.count(query) }

    /// The base transaction's ``ReadTransaction/aggregate(_:)``.
    public func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] { try base.aggregate(query) }

    // MARK: Writes

    /// Inserts `row`, then checks that each record it refers to exists.
    public func insert(_ row: Row, into entity: EntityHandle) throws {
        try base.insert(row, into: entity)
        try checkReferences(of: row, in: entity)
    }

    /// Inserts or replaces `row`, then checks that each record it refers to exists.
    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        let inserted = try base.upsert(row, into: entity)
        try checkReferences(of: row, in: entity)
        return inserted
    }

    /// Replaces the row, then checks that each record it refers to exists.
    public func update(_ row: Row, in entity: EntityHandle) throws {
        try base.update(row, in: entity)
        try checkReferences(of: row, in: entity)
    }

    /// Deletes the record, applying the ``DeleteRule`` of each reference to it; a refusal is
    /// found before anything is written.
    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        let target = Target(slot: entity.slot, key: key)
        guard relationships.incoming[entity.slot] != nil else {
            known.remove(target)
            return try base.delete(key: key, from: entity)
        }
        guard try base.fetchRow(entity, key: key, { _ in }) else { return false }
        // Plan, then act: find every record the cascades reach (without recursion, so a long
        // chain cannot exhaust the writer's stack) and check every deny rule against that
        // set before anything is written, so a refused delete changes nothing, whatever
        // order the references were registered in.
        var doomed: [(handle: EntityHandle, key: Value)] = [(entity, key)]
        var seen: Set<Target> = [target]
        var next = 0
        while next < doomed.count {
            let (handle, doomedKey) = doomed[next]
            next += 1
            for link in relationships.incoming[handle.slot] ?? [] where link.onDelete == .cascade {
                for referencing in try keys(referencing: link, key: doomedKey) where seen.insert(Target(slot: link.source.slot, key: referencing)).inserted {
                    doomed.append((link.source, referencing))
                }
            }
        }
        var nullified: [(link: Link, row: Row)] = []
        for (handle, doomedKey) in doomed {
            for link in relationships.incoming[handle.slot] ?? [] {
                switch link.onDelete {
                case .cascade:
                    break
                case .deny:
                    let blocking = try keys(referencing: link, key: doomedKey).filter { !seen.contains(Target(slot: link.source.slot, key: $0)) }
                    if !blocking.isEmpty {
                        let named = blocking.prefix(5).map(\.debugLiteral).joined(separator: ", ")
                        let more = blocking.count > 5 ? " and \(blocking.count - 5) more" : ""
                        let reason = handle == entity && doomedKey == key ? "" : " (reached by a cascade from \(entity.name) \(key.debugLiteral))"
                        throw DepotError(.deleteDenied, "Cannot delete \(link.target.name) \(doomedKey.debugLiteral)\(reason): \(link.source.name) \(named)\(more) refer to it through \(link.attributeName), whose delete rule is deny. Delete or change those records first.")
                    }
                case .nullify:
                    let keyIndex = link.source.entity.primaryKeyIndex
                    try base.fetch(referencing(link, key: doomedKey), reserve: { _ in }) { columns in
                        let row = try columns.row()
                        if !seen.contains(Target(slot: link.source.slot, key: row[value: keyIndex])) { nullified.append((link, row)) }
                    }
                case .noAction:
                    orphaned.append((link, doomedKey))
                }
            }
        }
        for (link, original) in nullified {
            // Read again: another nullify in this delete may have changed the same row.
            var row = original
            let keyIndex = link.source.entity.primaryKeyIndex
            _ = try base.fetchRow(link.source, key: original[value: keyIndex]) { row = try $0.row() }
            row[value: link.attribute] = .null
            try base.update(row, in: link.source)
        }
        // The farthest records first, the one asked for last.
        for (handle, doomedKey) in doomed.dropFirst().reversed() {
            known.remove(Target(slot: handle.slot, key: doomedKey))
            _ = try base.delete(key: doomedKey, from: handle)
        }
        known.remove(target)
        return try base.delete(key: key, from: entity)
    }

    /// Deletes the matching records one by one, so that each applies its delete rules.
    public func delete(_ query: Query) throws -> Int {
        guard relationships.incoming[query.handle.slot] != nil else { return try base.delete(query) }
        // One by one, so each delete applies its rules; the keys are read first, in the
        // query's order, offset and limit.
        let keyIndex = query.entity.primaryKeyIndex
        var keys: [Value] = []
        try base.fetch(query, reserve: { keys.reserveCapacity($0) }) { keys.append(try $0.value(keyIndex)) }
        for key in keys { _ = try delete(key: key, from: query.handle) }
        // Counted afterwards: a record the query selected may have gone already with an
        // earlier one's cascade, and it was deleted all the same.
        var deleted = 0
        for key in keys where try !base.fetchRow(query.handle, key: key, { _ in }) { deleted += 1 }
        return deleted
    }

    private func keys(referencing link: Link, key: Value) throws -> [Value] {
        let keyIndex = link.source.entity.primaryKeyIndex
        var keys: [Value] = []
        try base.fetch(referencing(link, key: key), reserve: { _ in }) { keys.append(try $0.value(keyIndex)) }
        return keys
    }

    // MARK: Rules

    private func checkReferences(of row: Row, in entity: EntityHandle) throws {
        guard let links = relationships.outgoing[entity.slot] else { return }
        for link in links {
            let value = row[value: link.attribute]
            if value.isNull { continue }
            let target = Target(slot: link.target.slot, key: value)
            if known.contains(target) { continue }
            let sourceKey = row[value: entity.entity.primaryKeyIndex]
            if link.target.slot == entity.slot && value == sourceKey { continue }
            // Listed before the lookup: if the lookup throws and the closure carries on, the
            // reference is still checked at the end.
            unresolved.append((link, sourceKey, value))
            if try base.fetchRow(link.target, key: value, { _ in }) {
                unresolved.removeLast()
                known.insert(target)
            }
        }
    }

    private func referencing(_ link: Link, key: Value, limit: Int? = nil) throws -> Query {
        try Query(entity: link.source, predicate: .compare(attribute: link.attributeName, .equal, key), limit: limit)
    }

    /// The checks left for the end of the write.
    func finish() throws {
        for (link, sourceKey, value) in unresolved {
            // Only if the record still refers there: a later write in the same closure may
            // have deleted it or pointed it elsewhere (and was checked itself).
            var current: Value?
            _ = try base.fetchRow(link.source, key: sourceKey) { current = try $0.value(link.attribute) }
            guard current == value else { continue }
            if try !base.fetchRow(link.target, key: value, { _ in }) {
                throw DepotError(.missingReference, "\(link.source.name) \(sourceKey.debugLiteral) refers to \(link.target.name) \(value.debugLiteral) through \(link.attributeName), but no \(link.target.name) has that primary key. Insert it in the same write or before, or change the reference\(link.source.entity.attributes[link.attribute].isOptional ? " (or set it to nil)" : "").")
            }
        }
        for (link, key) in orphaned {
            if try base.fetchRow(link.target, key: key, { _ in }) { continue }
            var left: Value?
            let keyIndex = link.source.entity.primaryKeyIndex
            try base.fetch(referencing(link, key: key, limit: 1), reserve: { _ in }) { left = try $0.value(keyIndex) }
            if let left {
                throw DepotError(.missingReference, "Deleting \(link.target.name) \(key.debugLiteral) left \(link.source.name) \(left.debugLiteral) referring to it through \(link.attributeName), whose delete rule is noAction. Delete or change the referencing records in the same write, or declare another rule.")
            }
        }
    }
}
