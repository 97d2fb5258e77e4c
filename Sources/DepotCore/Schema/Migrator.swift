import Foundation

/// Versioned migration steps: named, run once each, in order, each in its own write
/// transaction, and recorded in the store.
///
/// ```swift
/// var migrator = Migrator()
/// migrator.registerStep("backfill-display-names") { step in
///     let people = try step.handle(for: Person.self)
///     for var person in try step.context(Person.self).fetchAll(Request(\.displayName == "")) {
///         person.displayName = person.firstName + " " + person.lastName
///         try step.context(Person.self).update(person)
///     }
/// }
/// migrator.registerStep("drop-orphan-walks") { step in
///     try step.context(Walk.self).deleteAll(where: \.dogID == 0)
/// }
/// let applied = try await migrator.migrate(store, registering: Person.self, Walk.self)
/// ```
///
/// - A step runs in one write transaction with full read and write access to every entity
///   the store holds; it is recorded in the same transaction, so it runs exactly once: a
///   step that throws rolls back (nothing of it, and no record of it, is kept) and the
///   migration stops there, at the previous version; a process that dies during a step
///   leaves the previous version too.
/// - Steps already applied are skipped, also when another process applied one meanwhile
///   (each step checks the ledger inside its own transaction). A store that records a step this migrator does not
///   know was written by a newer application: ``migrate(_:registering:)`` refuses it by name
///   with ``DepotError/Code/schemaMismatch`` before running anything.
/// - The record types given are registered first, so their automatic additive changes (new
///   entities, new optional or defaulted attributes, indexes) are in place before the
///   steps run; a destructive change without an explicit step stays a
///   ``DepotError/Code/schemaMismatch`` naming the difference.
/// - ``plan(_:registering:)`` says what would happen without writing anything.
///
/// Steps read and write data; changing a stored schema in ways the automatic migration does
/// not (renaming or retyping an attribute, dropping one) is not a step kind yet: add a new
/// attribute or entity, copy the data over in a step, and stop using the old one.
public struct Migrator: Sendable {
    /// One registered step.
    public struct Step: Sendable {
        public let name: String
        let body: @Sendable (MigrationStep) throws -> Void
    }

    public private(set) var steps: [Step] = []

    public init() {}

    /// Adds a step after the ones registered so far. Names must be unique; keep them
    /// forever (the store records the names it has applied).
    public mutating func registerStep(_ name: String, _ body: @escaping @Sendable (MigrationStep) throws -> Void) {
        steps.append(Step(name: name, body: body))
    }

    /// What ``migrate(_:registering:)`` would do.
    public struct Plan: Sendable, CustomStringConvertible {
        /// Steps the store has applied, in order.
        public let applied: [String]
        /// Steps that would run, in order.
        public let pending: [String]
        /// The automatic changes registering the record types would make, in words.
        public let automaticChanges: [String]

        public var description: String {
            var lines: [String] = []
            for change in automaticChanges { lines.append("automatic: \(change)") }
            for name in applied { lines.append("applied: \(name)") }
            for name in pending { lines.append("pending: \(name)") }
            if lines.isEmpty { lines.append("nothing to do") }
            return lines.joined(separator: "\n")
        }
    }

    /// The ledger: one record per applied step.
    static let ledger = EntityDescription(
        name: EntityDescription.migrationLedgerName,
        attributes: [
            AttributeDescription(name: "name", type: .string),
            AttributeDescription(name: "position", type: .int64, isIndexed: true),
            AttributeDescription(name: "appliedAt", type: .date),
        ],
        primaryKeyIndex: 0)

    func checkNames() throws(DepotError) {
        var seen: Set<String> = []
        for step in steps where !seen.insert(step.name).inserted {
            throw DepotError(.invalidConfiguration, "The migration step \"\(step.name)\" is registered twice; every step needs its own name.")
        }
    }

    /// The steps the store records (in its ledger entity, ``EntityDescription/migrationLedgerName``),
    /// in the order they were applied.
    public static func applied(in store: any Store, ledger: EntityHandle) async throws -> [String] {
        try await store.read { transaction in
            var names: [(Int64, String)] = []
            let query = try Query(entity: ledger, predicate: .constant(true), sortKeys: [SortKey("position")])
            try transaction.fetch(query, reserve: { _ in }) { columns in
                guard case .string(let name) = try columns.value(0), case .int(let position) = try columns.value(1) else { return }
                names.append((position, name))
            }
            return names.map(\.1)
        }
    }

    func pending(after applied: [String]) throws(DepotError) -> [Step] {
        let known = Set(steps.map(\.name))
        if let unknown = applied.first(where: { !known.contains($0) }) {
            throw DepotError(.schemaMismatch, "The store records the migration step \"\(unknown)\", which this application does not know: a newer version of it migrated the store. Run that version, or restore a backup taken before it.")
        }
        for (position, name) in applied.enumerated() where position < steps.count && steps[position].name != name {
            throw DepotError(.schemaMismatch, "The store applied the migration step \"\(name)\" as step \(position + 1), but this application registers \"\(steps[position].name)\" there. Steps must keep their order; register new ones after the others.")
        }
        return Array(steps.dropFirst(applied.count))
    }

    /// Registers the record types, then runs every pending step, in order, each in its own
    /// write transaction; returns the names of the steps it ran.
    ///
    /// - Throws: ``DepotError/Code/schemaMismatch`` for a step the store knows and this
    ///   migrator does not, or for a change the automatic migration refuses; the error of a
    ///   step that threw (wrapped in a ``DepotError`` naming the step), after which the store
    ///   is at the version before that step.
    @discardableResult
    public func migrate(_ store: any Store, registering records: any ManagedRecord.Type...) async throws -> [String] {
        try checkNames()
        let ledger = try await store.register(Self.ledger)
        let pending = try pending(after: try await Self.applied(in: store, ledger: ledger))
        if !records.isEmpty {
            var descriptions: [EntityDescription] = []
            for record in records {
                try record.validatedEntity()
                descriptions += record.descriptionsForRegistration
            }
            _ = try await store.register(descriptions)
        }
        var ran: [String] = []
        for step in pending {
            let position = Int64(steps.firstIndex { $0.name == step.name } ?? 0)
            let catalog = try await (store as? any CatalogStore)?.storedEntities() ?? []
            let ranHere: Bool
            do {
                ranHere = try await store.write { transaction in
                    // Another process migrating the same store may have run the step since
                    // the ledger was read: then it is done, and runs nowhere twice.
                    if try transaction.fetchRow(ledger, key: .string(step.name), { _ in }) { return false }
                    let context = MigrationStep(name: step.name, transaction: transaction, entities: catalog)
                    try step.body(context)
                    var record = Row()
                    record.append(.string(step.name))
                    record.append(.int(position))
                    record.append(.date(Date()))
                    try transaction.insert(record, into: ledger)
                    return true
                }
            } catch {
                let cause = (error as? DepotError).map { "\($0.code): \($0.message)" } ?? "\(error)"
                throw DepotError(
                    (error as? DepotError)?.code ?? .backend,
                    "The migration step \"\(step.name)\" failed and was rolled back; the store is at the version before it\(ran.isEmpty ? "" : " (after \(ran.joined(separator: ", ")))"). \(cause)")
            }
            if ranHere { ran.append(step.name) }
        }
        return ran
    }

    /// What ``migrate(_:registering:)`` would do, without writing anything: the steps applied
    /// and pending, and the automatic changes registering the record types would make.
    ///
    /// - Throws: what `migrate` would refuse before running anything.
    public func plan(_ store: any Store, registering records: any ManagedRecord.Type...) async throws -> Plan {
        try checkNames()
        let stored = try await (store as? any CatalogStore)?.storedEntities() ?? []
        var applied: [String] = []
        if let ledger = stored.first(where: { $0.name == EntityDescription.migrationLedgerName }) {
            applied = try await Self.applied(in: store, ledger: ledger)
        }
        let pending = try pending(after: applied)
        var changes: [String] = []
        var seen: Set<String> = []
        for record in records {
            try record.validatedEntity()
            for declared in record.descriptionsForRegistration where seen.insert(declared.name).inserted {
                guard let current = stored.first(where: { $0.name == declared.name })?.entity else {
                    changes.append("create entity \(declared.name) (\(declared.attributes.map(\.name).joined(separator: ", ")))")
                    continue
                }
                if current == declared { continue }
                let migration = try SchemaMigration.plan(from: current, to: declared)
                for attribute in migration.addedAttributes {
                    let fill = SchemaMigration.fillValue(for: attribute)
                    changes.append("add \(declared.name).\(attribute.name) (\(attribute.type.rawValue)\(attribute.isOptional ? ", optional" : "")), existing records get \(fill.debugLiteral)")
                }
                for attribute in migration.addedIndexes { changes.append("index \(declared.name).\(attribute.name)") }
                for attribute in migration.droppedIndexes { changes.append("drop the index of \(declared.name).\(attribute.name)") }
            }
        }
        return Plan(applied: applied, pending: pending.map(\.name), automaticChanges: changes)
    }
}

/// What a step works with: the write transaction, and the handles of every entity the store
/// holds.
public struct MigrationStep {
    /// The step's name.
    public let name: String
    /// The step's write transaction: reads see its writes.
    public let transaction: any WriteTransaction
    let entities: [EntityHandle]

    init(name: String, transaction: any WriteTransaction, entities: [EntityHandle]) {
        self.name = name
        self.transaction = transaction
        self.entities = entities
    }

    /// The handle of the entity named `name`, as stored.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` when the store holds no such entity.
    public func handle(named name: String) throws(DepotError) -> EntityHandle {
        guard let handle = entities.first(where: { $0.name == name }) else {
            throw DepotError(.invalidSchema, "The migration step \"\(self.name)\" names the entity \(name), which the store does not hold; register its record type with migrate(_:registering:).")
        }
        return handle
    }

    /// The handle of a record type's entity.
    public func handle<Record: ManagedRecord>(for record: Record.Type) throws(DepotError) -> EntityHandle {
        try handle(named: Record.entityName)
    }

    /// A context for a record type inside the step (its objects are the records themselves
    /// or the application type they convert to).
    public func context<Record: ManagedRecord & ObjectConvertible>(_ record: Record.Type) throws(DepotError) -> Context<Record.Object, Record>
    where Record.Object: ManagedConvertible & Sendable, Record.Object.Managed == Record {
        Context(transaction, entity: try handle(for: record))
    }
}

extension EntityDescription {
    /// The entity in which ``Migrator`` records the steps it has applied. Its name takes the
    /// prefix reserved for Depot: declare no entity of that name.
    public static let migrationLedgerName = "depot_migrations"
}
