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
///   (a data step checks the ledger inside its own transaction, a schema step inside the
///   rewrite's). A store that records a step this migrator does not
///   know was written by a newer application: `migrate(_:registering:)` refuses it by name
///   with ``DepotError/Code/schemaMismatch`` before running anything.
/// - The record types given describe the schema after the steps. They are registered before
///   the first step after the last pending schema step (first of all when none is pending),
///   so their automatic additive changes (new entities, new optional or defaulted
///   attributes, indexes) are in place for the data steps that follow; a destructive change
///   without an explicit step stays a ``DepotError/Code/schemaMismatch`` naming the
///   difference.
/// - Schema steps (``renameAttribute(_:in:from:to:)``, ``changeType(_:of:in:to:optional:_:)``,
///   ``dropAttribute(_:_:from:)``, ``dropIndex(_:_:from:)``, ``renameEntity(_:from:to:)``,
///   ``registerSchemaStep(_:entity:describe:row:)``) rewrite one entity's stored schema and
///   every record in one transaction with their record.
/// - An index the declarations no longer name is kept, and maintained, until a
///   ``dropIndex(_:_:from:)`` step removes it.
/// - `plan(_:registering:)` says what would happen without writing anything.
///
/// An entity others refer to keeps its name and its key's type through a schema step.
public struct Migrator: Sendable {
    /// One registered step.
    public struct Step: Sendable {
        /// The step's name, recorded in the store once it ran.
        public let name: String
        let kind: Kind

        enum Kind: Sendable {
            case data(@Sendable (MigrationStep) throws -> Void)
            /// Rewrites one entity: its new description from the stored one, and each row.
            case schema(entity: String, describe: @Sendable (EntityDescription) throws -> EntityDescription,
                        row: @Sendable (Row, EntityDescription, EntityDescription) throws -> Row)
        }
    }

    /// The registered steps, in the order they run.
    public private(set) var steps: [Step] = []

    /// A migrator with no steps.
    public init() {}

    /// Adds a step after the ones registered so far. Names must be unique; keep them
    /// forever (the store records the names it has applied).
    public mutating func registerStep(_ name: String, _ body: @escaping @Sendable (MigrationStep) throws -> Void) {
        steps.append(Step(name: name, kind: .data(body)))
    }

    // MARK: Schema steps

    /// A step that rewrites one entity: `describe` turns the stored description into the new
    /// one (another name renames the entity), `row` turns each stored row (with the old and
    /// new descriptions) into the new layout. The entity's records, its stored schema and the
    /// step's record change in one transaction; the records are held in memory during the
    /// step.
    public mutating func registerSchemaStep(
        _ name: String, entity: String, describe: @escaping @Sendable (EntityDescription) throws -> EntityDescription,
        row: @escaping @Sendable (_ old: Row, _ from: EntityDescription, _ to: EntityDescription) throws -> Row
    ) {
        steps.append(Step(name: name, kind: .schema(entity: entity, describe: describe, row: row)))
    }

    /// Renames an attribute, keeping its values.
    public mutating func renameAttribute(_ name: String, in entity: String, from old: String, to new: String) {
        registerSchemaStep(name, entity: entity) { description throws(DepotError) in
            var description = description
            guard let index = description.index(of: old) else { throw Self.noAttribute(old, in: description, step: name) }
            description.attributes[index].name = new
            // The entity's indexes follow the attribute under its new name.
            for i in description.indexes.indices {
                for j in description.indexes[i].components.indices where description.indexes[i].components[j].attribute == old {
                    description.indexes[i].components[j].attribute = new
                }
            }
            return description
        } row: { row, _, _ in row }
    }

    /// Removes an attribute and its values: the one step that deletes data, so it is
    /// written out.
    public mutating func dropAttribute(_ name: String, _ attribute: String, from entity: String) {
        registerSchemaStep(name, entity: entity) { description throws(DepotError) in
            var description = description
            guard let index = description.index(of: attribute) else { throw Self.noAttribute(attribute, in: description, step: name) }
            guard index != description.primaryKeyIndex else {
                throw DepotError(.invalidSchema, "The migration step \"\(name)\" would drop \(description.name)'s primary key \(attribute).")
            }
            description.attributes.remove(at: index)
            if description.primaryKeyIndex > index { description.primaryKeyIndex -= 1 }
            // An index over the dropped attribute goes with it.
            description.indexes.removeAll { $0.components.contains { $0.attribute == attribute } }
            return description
        } row: { row, from, _ in
            var out = Row(capacity: row.count - 1)
            let index = from.index(of: attribute) ?? -1
            for i in 0..<row.count where i != index { out.append(row[value: i]) }
            return out
        }
    }

    /// Removes one of an entity's indexes over several attributes (or one, descending),
    /// named by its components: `dropIndex("drop-species-name", .index("species", "name"),
    /// from: "Pet")`. No record changes.
    ///
    /// Opening a store with a declaration that no longer names an index keeps the index
    /// (see ``EntityDescription/keepingIndexes(of:)``), so servers of the previous version
    /// can still run beside the new one; this step is how it goes once none of them needs it.
    /// Whether the index is unique does not matter: an entity has one index per component
    /// list.
    public mutating func dropIndex(_ name: String, _ index: IndexDescription, from entity: String) {
        registerSchemaStep(name, entity: entity) { description throws(DepotError) in
            var description = description
            guard let position = description.indexes.firstIndex(where: { $0.name == index.name }) else {
                let held = description.indexes.map { "(\($0.summary))" }.joined(separator: ", ")
                throw DepotError(.invalidSchema, "The migration step \"\(name)\" drops the index (\(index.summary)) of \(description.name), but the stored \(description.name) has no such index (its indexes: \(held.isEmpty ? "none" : held)).")
            }
            description.indexes.remove(at: position)
            return description
        } row: { row, _, _ in row }
    }

    /// Changes an attribute's type (and whether it is optional), converting each value with
    /// `convert` (nil values are passed too); a value `convert` refuses fails the step.
    public mutating func changeType(
        _ name: String, of attribute: String, in entity: String, to type: AttributeType, optional: Bool? = nil,
        _ convert: @escaping @Sendable (Value) throws -> Value
    ) {
        registerSchemaStep(name, entity: entity) { description throws(DepotError) in
            var description = description
            guard let index = description.index(of: attribute) else { throw Self.noAttribute(attribute, in: description, step: name) }
            description.attributes[index].type = type
            description.attributes[index].defaultValue = nil
            if let optional { description.attributes[index].isOptional = optional }
            return description
        } row: { row, from, _ in
            var row = row
            if let index = from.index(of: attribute) { row[value: index] = try convert(row[value: index]) }
            return row
        }
    }

    /// Renames an entity, keeping its records. An entity others refer to cannot be renamed.
    public mutating func renameEntity(_ name: String, from old: String, to new: String) {
        registerSchemaStep(name, entity: old) { description in
            var description = description
            description.name = new
            return description
        } row: { row, _, _ in row }
    }

    static func noAttribute(_ attribute: String, in entity: EntityDescription, step: String) -> DepotError {
        DepotError(.invalidSchema, "The migration step \"\(step)\" names \(entity.name).\(attribute), but the stored \(entity.name) has no such attribute (its attributes: \(entity.attributes.map(\.name).joined(separator: ", "))).")
    }

    /// What `migrate(_:registering:)` would do.
    public struct Plan: Sendable, CustomStringConvertible {
        /// Steps the store has applied, in order.
        public let applied: [String]
        /// Steps that would run, in order.
        public let pending: [String]
        /// The automatic changes registering the record types would make, in words.
        public let automaticChanges: [String]

        /// One line per change and step: `automatic:`, `applied:`, `pending:`.
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
        try await migrate(store, registering: records)
    }

    /// Registers the record types and runs the pending steps, like the variadic form; the
    /// record types in an array (a command that an application configures, for one).
    @discardableResult
    public func migrate(_ store: any Store, registering records: [any ManagedRecord.Type]) async throws -> [String] {
        try checkNames()
        let ledger = try await store.register(Self.ledger)
        let pending = try pending(after: try await Self.applied(in: store, ledger: ledger))
        var descriptions: [EntityDescription] = []
        for record in records {
            try record.validatedEntity()
            descriptions += record.descriptionsForRegistration
        }
        // The record types describe the schema after the steps: they are registered after the
        // last pending schema step (which may rename or retype what they describe), so data
        // steps after it see their additive changes, and data steps before it the stored
        // schema. Without schema steps pending, they are registered first.
        let lastSchemaStep = pending.lastIndex { if case .schema = $0.kind { true } else { false } } ?? -1
        var registered = descriptions.isEmpty
        func register() async throws {
            guard !registered else { return }
            _ = try await store.register(descriptions)
            registered = true
        }
        if lastSchemaStep < 0 { try await register() }
        var ran: [String] = []
        for (index, step) in pending.enumerated() {
            if index > lastSchemaStep { try await register() }
            let position = Int64(steps.firstIndex { $0.name == step.name } ?? 0)
            let catalog = try await store.storedEntities()
            let ranHere: Bool
            do {
                switch step.kind {
                case .schema(let entity, let describe, let transform):
                    ranHere = try await runSchemaStep(step.name, position: position, entity: entity, describe: describe, transform: transform, store: store, ledger: ledger, catalog: catalog)
                case .data(let body):
                ranHere = try await store.write { transaction in
                    // Another process migrating the same store may have run the step since
                    // the ledger was read: then it is done, and runs nowhere twice.
                    if try transaction.fetchRow(ledger, key: .string(step.name), { _ in }) { return false }
                    let context = MigrationStep(name: step.name, transaction: transaction, entities: catalog)
                    try body(context)
                    var record = Row()
                    record.append(.string(step.name))
                    record.append(.int(position))
                    record.append(.date(Date()))
                    try transaction.insert(record, into: ledger)
                    return true
                }
                }
            } catch {
                // Another process running the same migration may have applied the step
                // between this one's reading of the ledger and its own attempt, which then
                // failed on the changed schema (an attribute renamed meanwhile): the step
                // is done, once, and this process goes on.
                if let applied = try? await Self.applied(in: store, ledger: ledger), applied.contains(step.name) { continue }
                let cause = (error as? DepotError).map { "\($0.code): \($0.message)" } ?? "\(error)"
                throw DepotError(
                    (error as? DepotError)?.code ?? .backend,
                    "The migration step \"\(step.name)\" failed and was rolled back; the store is at the version before it\(ran.isEmpty ? "" : " (after \(ran.joined(separator: ", ")))"). \(cause)")
            }
            if ranHere { ran.append(step.name) }
        }
        try await register()
        return ran
    }

    func runSchemaStep(
        _ name: String, position: Int64, entity: String, describe: @Sendable (EntityDescription) throws -> EntityDescription,
        transform: @escaping @Sendable (Row, EntityDescription, EntityDescription) throws -> Row, store: any Store,
        ledger: EntityHandle, catalog: [EntityHandle]
    ) async throws -> Bool {
        guard let rewriting = store as? any SchemaRewritingStore else {
            throw DepotError(.invalidConfiguration, "The \(store.backendName) store cannot rewrite an entity's schema, which the migration step \"\(name)\" needs.")
        }
        guard let stored = catalog.first(where: { $0.name == entity })?.entity else {
            // Renamed by this step in an earlier run that was recorded: the ledger says so.
            throw DepotError(.invalidSchema, "The migration step \"\(name)\" rewrites \(entity), which the store does not hold.")
        }
        let declared = try describe(stored)
        var record = Row()
        record.append(.string(name))
        record.append(.int(position))
        record.append(.date(Date()))
        let rewritten = try await rewriting.rewrite(entity, as: declared, transform: { try transform($0, stored, declared) }, ledgerRow: record, ledger: ledger)
        // nil: another process applied the step since the ledger was read.
        return rewritten != nil
    }

    /// What `migrate(_:registering:)` would do, without writing anything: the steps applied
    /// and pending, and the automatic changes registering the record types would make.
    ///
    /// - Throws: what `migrate` would refuse before running anything.
    public func plan(_ store: any Store, registering records: any ManagedRecord.Type...) async throws -> Plan {
        try await plan(store, registering: records)
    }

    /// What the array form of `migrate` would do, without writing anything.
    public func plan(_ store: any Store, registering records: [any ManagedRecord.Type]) async throws -> Plan {
        try checkNames()
        let stored = try await store.storedEntities()
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
                let kept = declared.keepingIndexes(of: current)
                for index in kept.indexes where !declared.indexes.contains(where: { $0.name == index.name }) {
                    changes.append("keep the index \(declared.name) (\(index.summary)), no longer declared: a dropIndex step removes it")
                }
                if current == kept { continue }
                let migration = try SchemaMigration.plan(from: current, to: kept)
                for attribute in migration.addedAttributes {
                    let fill = SchemaMigration.fillValue(for: attribute)
                    changes.append("add \(declared.name).\(attribute.name) (\(attribute.type.rawValue)\(attribute.isOptional ? ", optional" : "")), existing records get \(fill.debugLiteral)")
                }
                for attribute in migration.addedIndexes { changes.append("index \(declared.name).\(attribute.name)") }
                for attribute in migration.droppedIndexes { changes.append("drop the index of \(declared.name).\(attribute.name)") }
                for index in migration.addedCompositeIndexes {
                    changes.append("\(index.isUnique ? "unique index" : "index") \(declared.name) (\(index.summary))")
                }
                for index in migration.droppedCompositeIndexes { changes.append("drop the index \(declared.name) (\(index.summary))") }
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
