/// A store that replaces an entity's stored schema and all its records in one transaction:
/// what ``Migrator``'s schema steps (rename, retype or drop an attribute, rename an entity,
/// split or merge attributes) run on. ``EngineStore`` adopts it over every engine's
/// ``StorageEngine/rewrite(_:as:transform:ledgerRow:ledger:)``, whose contract this is;
/// applications run the steps through ``Migrator``.
package protocol SchemaRewritingStore: Store {
    /// The engine's rewrite, on the writer's lane, with the touched entities published.
    func rewrite(
        _ name: String, as entity: EntityDescription, transform: @escaping @Sendable (Row) throws -> Row,
        ledgerRow: Row, ledger: EntityHandle
    ) async throws -> EntityHandle?
}

/// The rules every engine's ``StorageEngine/rewrite(_:as:transform:ledgerRow:ledger:)``
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
