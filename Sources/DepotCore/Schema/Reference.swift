/// What happens to the records that refer to a record when that record is deleted.
///
/// The rule belongs to the referencing attribute (a Walk's `dogID` says what happens to the
/// walk when its dog goes), and every backend applies it in the same transaction as the
/// delete, before the deleted record is gone.
public enum DeleteRule: String, Sendable, Hashable, Codable, CaseIterable {
    /// The referencing records are deleted too (and their own referencing records, by
    /// their rules).
    case cascade
    /// The reference in each referencing record is set to `nil`; the attribute must be
    /// optional.
    case nullify
    /// The delete is refused with ``DepotError/Code/deleteDenied``, naming the referencing
    /// records, while any exist.
    case deny
    /// Nothing happens at the delete; when the write ends, a reference left pointing to
    /// nothing fails it with ``DepotError/Code/missingReference``. Deleting the referencing
    /// records, or inserting the record again, in the same write keeps it valid (SQL's
    /// deferred `NO ACTION`).
    case noAction
}

/// A reference from an attribute to another entity's primary key: a to-one relationship.
///
/// The attribute holds the referenced record's primary key (or `nil`, when optional, for
/// no record). Stores refuse a write that leaves it pointing to nothing
/// (``DepotError/Code/missingReference``), checked when the write ends, so records that
/// refer to each other can be inserted in any order within one write.
public struct Reference: Sendable, Hashable, Codable {
    /// The name of the referenced entity.
    public var entity: String
    /// What happens to the referencing record when the referenced one is deleted.
    public var onDelete: DeleteRule

    /// A reference to `entity`'s primary key, with its delete rule.
    public init(entity: String, onDelete: DeleteRule = .noAction) {
        self.entity = entity
        self.onDelete = onDelete
    }

    /// The checks that need only the referencing entity; the referenced entity is checked
    /// when both are registered (``Relationships/validate(_:registered:)``).
    func validate(_ attribute: AttributeDescription, in entity: String) throws(DepotError) {
        let what = "\(entity).\(attribute.name) refers to \(self.entity)"
        try EntityDescription.validateIdentifier(self.entity, what: "The entity \(what) names")
        guard EntityDescription.primaryKeyTypes.contains(attribute.type) else {
            throw DepotError(.invalidSchema, "\(what), but has type \(attribute.type.rawValue), which no primary key has; a reference holds the referenced record's primary key.")
        }
        if onDelete == .nullify && !attribute.isOptional {
            throw DepotError(.invalidSchema, "\(what) with the delete rule nullify, but is not optional, so it cannot be set to nil; make it optional or choose cascade, deny or noAction.")
        }
        guard attribute.isIndexed else {
            throw DepotError(.invalidSchema, "\(what) but is not indexed; a reference attribute is always indexed (the delete rules look records up by it).")
        }
    }
}

/// One reference between two registered entities, with both entities' handles.
public struct Link: Sendable, Hashable, CustomStringConvertible {
    /// The referencing entity (a Walk).
    public let source: EntityHandle
    /// The position of the reference attribute in ``source``.
    public let attribute: Int
    /// The referenced entity (a Dog).
    public let target: EntityHandle
    /// What happens to the referencing record when the referenced one is deleted.
    public let onDelete: DeleteRule

    /// The reference attribute's name.
    public var attributeName: String { source.entity.attributes[attribute].name }

    /// `Entity.attribute → Target (rule)`, for messages.
    public var description: String { "\(source.name).\(attributeName) → \(target.name) (\(onDelete.rawValue))" }
}

/// The references among the entities registered with one store, in both directions.
///
/// ``EntityRegistry`` keeps it up to date as entities are registered; a backend hands it to
/// ``ReferenceEnforcement`` with each write.
public struct Relationships: Sendable {
    /// References held by each entity, by its slot.
    public private(set) var outgoing: [Int: [Link]] = [:]
    /// References to each entity, by its slot.
    public private(set) var incoming: [Int: [Link]] = [:]

    /// Whether no registered entity refers to another: writes then need no checks.
    public var isEmpty: Bool { outgoing.isEmpty }

    init() {}

    /// Builds the graph from every registered entity's handle. A reference to an entity
    /// not registered (yet) is left out: registration refuses it
    /// (``validate(_:registered:)``), and an entity read from a store file before the one
    /// it refers to is complete once both are.
    init(handles: [EntityHandle]) {
        var byName: [String: EntityHandle] = [:]
        for handle in handles { byName[handle.name] = handle }
        for handle in handles {
            for (position, attribute) in handle.entity.attributes.enumerated() {
                guard let reference = attribute.reference, let target = byName[reference.entity] else { continue }
                let link = Link(source: handle, attribute: position, target: target, onDelete: reference.onDelete)
                outgoing[handle.slot, default: []].append(link)
                incoming[target.slot, default: []].append(link)
            }
        }
    }

    /// Checks the references of `entities` (about to be registered together) against each
    /// other and what is registered already: every referenced entity must be one of them or
    /// registered, with a primary key of the reference attribute's type.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` naming the first reference that does not
    ///   resolve.
    public static func validate(_ entities: [EntityDescription], registered: (String) -> EntityDescription?) throws(DepotError) {
        var batch: [String: EntityDescription] = [:]
        for entity in entities { batch[entity.name] = entity }
        for entity in entities {
            for attribute in entity.attributes {
                guard let reference = attribute.reference else { continue }
                guard let target = batch[reference.entity] ?? registered(reference.entity) else {
                    throw DepotError(.invalidSchema, "\(entity.name).\(attribute.name) refers to \(reference.entity), which is not registered with this store. Register \(reference.entity) before \(entity.name), or both together.")
                }
                guard target.primaryKey.type == attribute.type else {
                    throw DepotError(.invalidSchema, "\(entity.name).\(attribute.name) refers to \(target.name), whose primary key \(target.primaryKey.name) has type \(target.primaryKey.type.rawValue), but the attribute has type \(attribute.type.rawValue); declare it with the key's type.")
                }
            }
        }
    }
}
