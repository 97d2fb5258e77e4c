/// What changes when a store that already holds an entity is opened with a newer
/// declaration of it.
///
/// Depot applies additive changes on its own and refuses everything else, so a store is
/// never changed in a way that could lose data. Every backend plans with this one type, so
/// every backend accepts and refuses exactly the same changes.
public struct SchemaMigration: Sendable, Hashable {
    /// The stored description.
    public let stored: EntityDescription
    /// The declared description, which the store will hold after the migration.
    public let declared: EntityDescription
    /// For each declared attribute, its position in the stored description, or `nil` when
    /// the attribute is new and existing records take its default value (or `nil`).
    public let sourceIndex: [Int?]
    /// Declared attributes that are new.
    public let addedAttributes: [AttributeDescription]
    /// Attributes that gained an index.
    public let addedIndexes: [AttributeDescription]
    /// Attributes that lost their index (the index is dropped; no record is touched).
    public let droppedIndexes: [AttributeDescription]
    /// Declared indexes over several attributes (or one, descending) that the store does
    /// not have yet: built from the existing records. A new unique index is refused with
    /// ``DepotError/Code/schemaMismatch`` when existing records already share its values.
    public let addedCompositeIndexes: [IndexDescription]
    /// Stored indexes the declaration no longer has (dropped before any is added, so an
    /// index that changes only whether it is unique is rebuilt; no record is touched).
    /// Stores plan with the declaration after ``EntityDescription/keepingIndexes(of:)``,
    /// so on open this holds only indexes whose uniqueness changed; a
    /// ``Migrator/dropIndex(_:_:from:)`` step is how an index leaves a store.
    public let droppedCompositeIndexes: [IndexDescription]

    /// Whether there is nothing to do.
    public var isEmpty: Bool {
        addedAttributes.isEmpty && addedIndexes.isEmpty && droppedIndexes.isEmpty
            && addedCompositeIndexes.isEmpty && droppedCompositeIndexes.isEmpty
            && sourceIndex.enumerated().allSatisfy { $0.element == $0.offset }
            && stored.attributes.count == declared.attributes.count
    }

    /// The value a new attribute takes in records that existed before it.
    public static func fillValue(for attribute: AttributeDescription) -> Value {
        attribute.defaultValue ?? .null
    }

    /// Plans the change from `stored` to `declared`.
    ///
    /// - Throws: ``DepotError/Code/schemaMismatch`` naming the first difference Depot will
    ///   not apply on its own: a removed, retyped or re-nulled attribute, a changed primary
    ///   key, a changed unique constraint, or a new non-optional attribute without a default.
    public static func plan(from stored: EntityDescription, to declared: EntityDescription) throws(DepotError) -> SchemaMigration {
        let entity = declared.name
        func refuse(_ what: String) -> DepotError {
            DepotError(.schemaMismatch, "The stored schema of \(entity) differs from the declared one: \(what). Depot applies only additive changes (new entities, new optional or defaulted attributes, new or removed indexes); migrate the data explicitly or use a new entity name.")
        }
        if stored.primaryKey.name != declared.primaryKey.name || stored.primaryKey.type != declared.primaryKey.type {
            throw refuse("the primary key changed from \(stored.primaryKey.name) (\(stored.primaryKey.type.rawValue)) to \(declared.primaryKey.name) (\(declared.primaryKey.type.rawValue))")
        }
        for old in stored.attributes where declared.index(of: old.name) == nil {
            throw refuse("attribute '\(old.name)' was removed")
        }
        var sourceIndex: [Int?] = []
        var added: [AttributeDescription] = []
        var addedIndexes: [AttributeDescription] = []
        var droppedIndexes: [AttributeDescription] = []
        for new in declared.attributes {
            guard let oldIndex = stored.index(of: new.name) else {
                if !new.isOptional && new.defaultValue == nil {
                    throw refuse("new attribute '\(new.name)' is neither optional nor has a default value, so existing records would have no value for it")
                }
                if new.isUnique {
                    throw refuse("new attribute '\(new.name)' is unique, but existing records would all share its default value")
                }
                sourceIndex.append(nil)
                added.append(new)
                if new.isIndexed { addedIndexes.append(new) }
                continue
            }
            let old = stored.attributes[oldIndex]
            if old.type != new.type {
                throw refuse("attribute '\(new.name)' changed type from \(old.type.rawValue) to \(new.type.rawValue)")
            }
            if old.isOptional != new.isOptional {
                throw refuse("attribute '\(new.name)' changed from \(old.isOptional ? "optional" : "non-optional") to \(new.isOptional ? "optional" : "non-optional")")
            }
            if old.isUnique != new.isUnique {
                throw refuse("attribute '\(new.name)' \(new.isUnique ? "became" : "is no longer") unique")
            }
            if old.reference != new.reference {
                // A reference added to existing values could point to nothing; a changed
                // rule or target changes what deletes do to stored records.
                func describe(_ reference: Reference?) -> String {
                    reference.map { "a reference to \($0.entity) (\($0.onDelete.rawValue))" } ?? "no reference"
                }
                throw refuse("attribute '\(new.name)' changed from \(describe(old.reference)) to \(describe(new.reference)); add a new optional reference attribute instead")
            }
            if !old.isIndexed && new.isIndexed { addedIndexes.append(new) }
            if old.isIndexed && !new.isIndexed { droppedIndexes.append(new) }
            sourceIndex.append(oldIndex)
        }
        return SchemaMigration(
            stored: stored, declared: declared, sourceIndex: sourceIndex, addedAttributes: added,
            addedIndexes: addedIndexes, droppedIndexes: droppedIndexes,
            addedCompositeIndexes: declared.indexes.filter { !stored.indexes.contains($0) },
            droppedCompositeIndexes: stored.indexes.filter { !declared.indexes.contains($0) })
    }

    /// New reference attributes with a default other than nil: existing records take the
    /// default, so the store must hold the record it names (checked by every backend when
    /// the entity has records: ``missingDefaultTarget(_:in:)``).
    public var defaultedReferences: [AttributeDescription] {
        addedAttributes.filter { $0.reference != nil && !($0.defaultValue?.isNull ?? true) }
    }

    /// The refusal of a new reference whose default names no record while records exist.
    public static func missingDefaultTarget(_ attribute: AttributeDescription, in entity: String) -> DepotError {
        let target = attribute.reference?.entity ?? "?"
        let value = attribute.defaultValue?.debugLiteral ?? "nil"
        return DepotError(.schemaMismatch, "The new attribute \(entity).\(attribute.name) refers to \(target) with the default \(value), but no \(target) has that primary key, so the existing \(entity) records would refer to nothing. Insert that \(target) first, choose another default, or make the attribute optional.")
    }

    /// Rewrites a row stored under ``stored`` into the declared attribute order.
    public func migrate(_ row: Row) -> Row {
        var out = Row(capacity: declared.attributes.count)
        for (position, source) in sourceIndex.enumerated() {
            if let source, source < row.count {
                out.append(row[value: source])
            } else {
                out.append(Self.fillValue(for: declared.attributes[position]))
            }
        }
        return out
    }
}
