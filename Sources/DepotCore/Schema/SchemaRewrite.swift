/// A store that replaces an entity's stored schema and all its records in one transaction:
/// what ``Migrator``'s schema steps (rename, retype or drop an attribute, rename an entity,
/// split or merge attributes) run on. Memory, SQLite and LMDB adopt it.
public protocol SchemaRewritingStore: Store {
    /// In one write transaction: reads every record of the entity `name`, passes each
    /// through `transform` (the old row in, the row in `entity`'s layout out), replaces the
    /// entity's stored description and records with `entity` and the new rows (another name
    /// renames the entity), and inserts `ledgerRow` into `ledger`. Nothing changes when any
    /// part fails. When `ledger` already holds `ledgerRow`'s key as the transaction begins
    /// (another process running the same migration applied the step meanwhile), nothing
    /// is rewritten and the result is nil.
    ///
    /// - Returns: The handle of the rewritten entity, or nil when the step was applied
    ///   meanwhile.
    /// - Throws: What ``SchemaRewrite/check(renaming:to:registered:relationships:)`` refuses;
    ///   ``DepotError/Code/duplicateKey`` when two new rows share a key or a unique value;
    ///   ``DepotError/Code/missingReference`` when a new row refers to no record; what
    ///   `transform` throws.
    func rewrite(
        _ name: String, as entity: EntityDescription, transform: @escaping @Sendable (Row) throws -> Row,
        ledgerRow: Row, ledger: EntityHandle
    ) async throws -> EntityHandle?
}

/// The rules every backend's ``SchemaRewritingStore/rewrite(_:as:transform:ledgerRow:ledger:)``
/// applies before it writes.
public enum SchemaRewrite {
    /// Checks that `old` may become `new`: `new` is valid, a new name is free, and an entity
    /// others refer to keeps its name and its key's type (their references would point to
    /// nothing otherwise); `new`'s own references name registered entities of the right
    /// key type.
    public static func check(
        renaming old: EntityDescription, to new: EntityDescription, registered: (String) -> EntityDescription?,
        relationships: [Link]
    ) throws(DepotError) {
        try new.validate()
        let referencing = relationships.filter { $0.target.name == old.name && $0.source.name != old.name }
        if new.name != old.name {
            if registered(new.name) != nil {
                throw DepotError(.schemaMismatch, "Cannot rename \(old.name) to \(new.name): the store already holds an entity named \(new.name).")
            }
            if let link = referencing.first {
                throw DepotError(.schemaMismatch, "Cannot rename \(old.name) to \(new.name): \(link.source.name).\(link.attributeName) refers to it. Add a new reference to the new entity first, and remove the old one.")
            }
        }
        if new.primaryKey.type != old.primaryKey.type, let link = referencing.first {
            throw DepotError(.schemaMismatch, "Cannot change the type of \(old.name)'s primary key: \(link.source.name).\(link.attributeName) refers to it.")
        }
        try Relationships.validate([new], registered: { $0 == old.name && new.name != old.name ? nil : registered($0) })
    }

    /// The error for a rewritten record whose reference names no record.
    public static func missingTarget(_ entity: EntityDescription, key: Value, attribute: Int, value: Value) -> DepotError {
        let target = entity.attributes[attribute].reference?.entity ?? "?"
        return DepotError(.missingReference, "After the rewrite, \(entity.name) \(key.debugLiteral) would refer to \(target) \(value.debugLiteral) through \(entity.attributes[attribute].name), which does not exist; nothing was changed.")
    }
}
