/// The backend-neutral description of an index over one or more attributes of an entity,
/// in order: what a list endpoint's `WHERE species = ? ORDER BY name LIMIT 20` needs to
/// read twenty entries instead of every pet of that species.
///
/// ```swift
/// @Record(indexes: [.index("species", "name"), .unique("ownerID", .descending("born"))])
/// struct Pet { ... }
/// ```
///
/// A request can use the index when its filter fixes a prefix of the components by
/// equality (optionally a range or `IN` on the next one) and its sort follows the rest.
/// Every backend orders entries of equal components by the primary key, so a sort that
/// ends with the key, and a cursor page, follow the index too.
///
/// An attribute marked ``AttributeOption/indexed`` keeps its single-attribute index; this
/// type adds the ones that span several attributes, or one attribute in descending order.
public struct IndexDescription: Sendable, Hashable, Codable {
    /// One attribute of an index, and its direction.
    public struct Component: Sendable, Hashable, Codable, ExpressibleByStringLiteral {
        /// The attribute's name (in a ``Record(name:indexes:)`` declaration: the property's
        /// name, which the macro turns into the stored name).
        public var attribute: String
        /// Whether entries are ordered from the largest value to the smallest.
        public var isDescending: Bool

        /// A component in ascending order unless `descending`.
        public init(_ attribute: String, descending: Bool = false) {
            self.attribute = attribute
            self.isDescending = descending
        }

        /// An ascending component named by a string literal.
        public init(stringLiteral attribute: String) {
            self.init(attribute)
        }

        /// A component in descending order.
        public static func descending(_ attribute: String) -> Component {
            Component(attribute, descending: true)
        }

        /// A component in ascending order.
        public static func ascending(_ attribute: String) -> Component {
            Component(attribute)
        }
    }

    /// The indexed attributes, most significant first.
    public var components: [Component]
    /// Whether no two records may have equal values in every component: a write that would
    /// make two fails with ``DepotError/Code/duplicateKey``. Records with nil in any
    /// component never conflict, as with a unique attribute.
    public var isUnique: Bool

    /// An index over `components`, unique when `unique`.
    public init(_ components: [Component], unique: Bool = false) {
        self.components = components
        self.isUnique = unique
    }

    /// An index over `components`, most significant first.
    public static func index(_ components: Component...) -> IndexDescription {
        IndexDescription(components)
    }

    /// A unique index over `components`: no two records share all their values.
    public static func unique(_ components: Component...) -> IndexDescription {
        IndexDescription(components, unique: true)
    }

    /// The most components an index may have: every backend can index that many, and an
    /// LMDB key of that many short values still fits its key size.
    public static let maximumComponents = 8

    /// A name derived from the components alone, unique among an entity's indexes: each
    /// attribute's name is preceded by its length, so no two component lists share a name
    /// (`a_b` + `c` and `a` + `b_c` differ), and a descending component is marked. Backends
    /// prefix it with the entity (see their naming rules); uniqueness is not part of it,
    /// because an entity has at most one index per component list.
    public var name: String {
        var name = "ix"
        for component in components {
            name += "_\(component.attribute.utf8.count)_\(component.attribute)"
            if component.isDescending { name += "_d" }
        }
        return name
    }

    /// The index's components as a reader would write them: `species, name DESC`.
    public var summary: String {
        components.map { $0.attribute + ($0.isDescending ? " DESC" : "") }.joined(separator: ", ")
    }

    /// Checks the index against `entity`: components that exist, at most
    /// ``maximumComponents``, no attribute twice.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` naming the problem.
    func validate(in entity: EntityDescription) throws(DepotError) {
        guard !components.isEmpty else {
            throw DepotError(.invalidSchema, "Entity \(entity.name) declares an index with no attributes; name at least one.")
        }
        guard components.count <= Self.maximumComponents else {
            throw DepotError(.invalidSchema, "The index (\(summary)) of entity \(entity.name) has \(components.count) attributes; an index may have at most \(Self.maximumComponents).")
        }
        var seen = Set<String>()
        for component in components {
            guard entity.index(of: component.attribute) != nil else {
                throw DepotError(.invalidSchema, "The index (\(summary)) of entity \(entity.name) names '\(component.attribute)', which is not one of its attributes.")
            }
            guard seen.insert(component.attribute).inserted else {
                throw DepotError(.invalidSchema, "The index (\(summary)) of entity \(entity.name) names '\(component.attribute)' twice.")
            }
        }
    }
}

extension EntityDescription {
    /// The description a store keeps when `stored` is what it held and `self` is declared:
    /// the declared indexes, and the stored ones the declaration leaves out, in the stored
    /// order with new ones after them.
    ///
    /// An index leaves a store only through a migration step
    /// (``Migrator/dropIndex(_:_:from:)``), never because a declaration stopped naming it:
    /// during a rolling deploy, servers still running the previous version open the store
    /// with the previous declaration, and dropping on open would undo every index the new
    /// version built. A kept index stays maintained by every write. A declared index whose
    /// components match a stored one (same ``IndexDescription/name``) replaces it, so a
    /// change of ``IndexDescription/isUnique`` alone still takes effect on open.
    public func keepingIndexes(of stored: EntityDescription) -> EntityDescription {
        guard !stored.indexes.isEmpty, stored.indexes != indexes else { return self }
        var merged: [IndexDescription] = []
        merged.reserveCapacity(stored.indexes.count + indexes.count)
        for old in stored.indexes {
            if let declared = indexes.first(where: { $0.name == old.name }) {
                merged.append(declared)
            } else if old.components.allSatisfy({ index(of: $0.attribute) != nil }) {
                // An index over an attribute the declaration no longer has cannot be kept;
                // opening refuses the removed attribute anyway.
                merged.append(old)
            }
        }
        for declared in indexes where !merged.contains(where: { $0.name == declared.name }) {
            merged.append(declared)
        }
        guard merged != indexes else { return self }
        var description = self
        description.indexes = merged
        return description
    }

    /// Whether a store holding `self` may serve `declared` as it is: equal, or equal once
    /// the indexes `self` keeps beyond the declaration are counted
    /// (``keepingIndexes(of:)``).
    public func serves(_ declared: EntityDescription) -> Bool {
        self == declared || self == declared.keepingIndexes(of: self)
    }
}
