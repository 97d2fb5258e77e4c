import Synchronization

/// One attribute of a record, declared with the key path it maps to.
///
/// ```swift
/// Attribute("name", \.name, indexed: true)
/// ```
public struct Attribute<Record>: Sendable {
    /// The attribute's description; a reference's entity name is filled in by the
    /// ``Entity`` the attribute is declared in.
    public internal(set) var description: AttributeDescription
    let keyPath: PartialKeyPath<Record> & Sendable
    let read: @Sendable (Record) -> Value
    let store: @Sendable (Record) throws(DepotError) -> Value
    /// Why the declaration cannot be used (a default value that cannot be stored);
    /// reported when a store first sees the entity.
    let problem: DepotError?
    /// Whether the value is stored as JSON text (a `Codable` value).
    let isJSON: Bool
    /// The record type a reference attribute refers to, resolved to its entity name by
    /// ``Entity``: a record referring to its own type must not read its own entity while
    /// that is being built.
    let referenceTarget: (type: any ManagedRecord.Type, name: @Sendable () -> String, onDelete: DeleteRule)?

    /// Declares an attribute.
    ///
    /// - Parameters:
    ///   - name: The stored name (column or field name).
    ///   - keyPath: The property it maps to; its type decides the attribute type.
    ///   - indexed: Whether backends keep an index on it, for fast filtering and sorting.
    ///   - unique: Whether two records may share a non-nil value.
    ///   - defaultValue: The value existing records get when this attribute is added later.
    public init<V: AttributeValue>(
        _ name: String, _ keyPath: KeyPath<Record, V> & Sendable, indexed: Bool = false,
        unique: Bool = false, default defaultValue: V? = nil
    ) {
        // The stored form, not `value`: a Codable default whose encoding fails has no
        // stored form, and must not become nil in every existing record.
        var stored: Value?
        var problem: DepotError?
        if let defaultValue {
            do {
                stored = try defaultValue.storedValue()
            } catch {
                problem = DepotError(.invalidSchema, "The default value of attribute \(name) cannot be stored: \(error.message) Give it a default that encodes, or none.")
            }
        }
        self.problem = problem
        self.isJSON = V.isJSON
        self.description = AttributeDescription(
            name: name, type: V.attributeType, isOptional: V.isOptional,
            defaultValue: stored, isIndexed: indexed || unique, isUnique: unique)
        self.keyPath = keyPath
        self.read = { $0[keyPath: keyPath].value }
        self.store = { (record: Record) throws(DepotError) -> Value in try record[keyPath: keyPath].storedValue() }
        self.referenceTarget = nil
    }

    /// Declares a reference: the attribute holds the primary key of a `Target` record (a
    /// to-one relationship), always indexed.
    ///
    /// ```swift
    /// Attribute("dogID", \.dogID, references: Dog.self, onDelete: .cascade)
    /// ```
    ///
    /// - Parameters:
    ///   - name: The attribute's name in the store.
    ///   - keyPath: The record's property holding the referenced record's key.
    ///   - target: The referenced record type.
    ///   - onDelete: What happens to this record when the referenced one is deleted.
    ///   - unique: Whether at most one record may refer to each target (a one-to-one).
    ///   - defaultValue: The key existing records get when the attribute is added to an
    ///     entity that has records; a store refuses the change unless that record exists.
    public init<Target: ManagedRecord>(
        _ name: String, _ keyPath: KeyPath<Record, Target.ID> & Sendable, references target: Target.Type,
        onDelete: DeleteRule = .noAction, unique: Bool = false, default defaultValue: Target.ID? = nil
    ) {
        self.init(name, keyPath, unique: unique, default: defaultValue)
        self = self.referring(to: target, onDelete: onDelete)
    }

    /// Declares an optional reference: `nil` refers to no record.
    public init<Target: ManagedRecord>(
        _ name: String, _ keyPath: KeyPath<Record, Target.ID?> & Sendable, references target: Target.Type,
        onDelete: DeleteRule = .noAction, unique: Bool = false, default defaultValue: Target.ID? = nil
    ) {
        self.init(name, keyPath, unique: unique, default: defaultValue.map { Optional($0) })
        self = self.referring(to: target, onDelete: onDelete)
    }

    private init(copying other: Attribute, referenceTarget: (type: any ManagedRecord.Type, name: @Sendable () -> String, onDelete: DeleteRule)?) {
        self.description = other.description
        self.keyPath = other.keyPath
        self.read = other.read
        self.store = other.store
        self.problem = other.problem
        self.isJSON = other.isJSON
        self.referenceTarget = referenceTarget
    }

    private func referring<Target: ManagedRecord>(to target: Target.Type, onDelete: DeleteRule) -> Attribute {
        var copy = Attribute(copying: self, referenceTarget: (Target.self, { Target.entityName }, onDelete))
        copy.description.isIndexed = true
        return copy
    }
}

/// Collects the attributes of an ``Entity`` declaration.
@resultBuilder
public enum AttributeListBuilder<Record> {
    /// One attribute line. It gives each line the record type as context, so `\.name`
    /// needs no root type.
    public static func buildExpression(_ attribute: Attribute<Record>) -> Attribute<Record> { attribute }
    /// The attributes, in declaration order.
    public static func buildBlock(_ attributes: Attribute<Record>...) -> [Attribute<Record>] { attributes }
}

/// The schema of a ``ManagedRecord``: its entity name, attributes and primary key,
/// declared once with the key paths the attributes map to.
///
/// ```swift
/// static let entity = Entity<CatRecord>("Cat", primaryKey: \.id) {
///     Attribute("id", \.id)
///     Attribute("name", \.name, indexed: true)
///     Attribute("age", \.age)
/// }
/// ```
///
/// The declaration cannot fail at compile time for a type mismatch; problems only a run
/// can see (a primary key path that is not among the attributes, duplicate names) are
/// reported as ``DepotError/Code/invalidSchema`` when a store first sees the entity.
public struct Entity<Record: ManagedRecord>: Sendable {
    /// The declaration's parts behind one reference: every request built with key paths
    /// reads `Record.entity` through the protocol, which copies the value, and a copy of
    /// one reference is one retain where the parts' arrays and sets were several.
    final class Storage: Sendable {
        let description: EntityDescription
        let attributes: [Attribute<Record>]
        let indexByKeyPath: KeyPathIndex
        let declarationProblem: DepotError?
        let jsonAttributes: Set<String>
        let referencedTypes: [any ManagedRecord.Type]
        /// Each attribute's type and whether it is optional, in attribute order: what a read
        /// by key path checks, without copying the attribute's description (its name, and
        /// more) for every attribute of every record.
        let readShapes: [(type: AttributeType, isOptional: Bool)]

        init(
            description: EntityDescription, attributes: [Attribute<Record>], indexByKeyPath: KeyPathIndex,
            declarationProblem: DepotError?, jsonAttributes: Set<String>, referencedTypes: [any ManagedRecord.Type]
        ) {
            self.description = description
            self.attributes = attributes
            self.indexByKeyPath = indexByKeyPath
            self.declarationProblem = declarationProblem
            self.jsonAttributes = jsonAttributes
            self.referencedTypes = referencedTypes
            self.readShapes = description.attributes.map { ($0.type, $0.isOptional) }
        }
    }

    private let storage: Storage

    /// The backend-neutral schema.
    public var description: EntityDescription { storage.description }
    var attributes: [Attribute<Record>] { storage.attributes }
    var indexByKeyPath: KeyPathIndex { storage.indexByKeyPath }
    var declarationProblem: DepotError? { storage.declarationProblem }
    /// The names of the attributes stored as JSON text.
    var jsonAttributes: Set<String> { storage.jsonAttributes }
    /// The record types this entity's references name.
    var referencedTypes: [any ManagedRecord.Type] { storage.referencedTypes }

    /// An entity named `name`, keyed by `primaryKey`, with the attributes listed in the
    /// builder and the indexes that span them.
    ///
    /// ```swift
    /// static let entity = Entity<PetRecord>("Pet", primaryKey: \.id, indexes: [.index(\.species, \.name)]) {
    ///     Attribute("id", \.id)
    ///     Attribute("species", \.species)
    ///     Attribute("name", \.name)
    /// }
    /// ```
    public init(
        _ name: String, primaryKey: KeyPath<Record, Record.ID> & Sendable, indexes: [EntityIndex<Record>] = [],
        @AttributeListBuilder<Record> attributes: () -> [Attribute<Record>]
    ) {
        var list = attributes()
        for i in list.indices {
            guard let target = list[i].referenceTarget else { continue }
            let entityName = ObjectIdentifier(target.type) == ObjectIdentifier(Record.self) ? name : target.name()
            list[i].description.reference = Reference(entity: entityName, onDelete: target.onDelete)
        }
        var byKeyPath: [AnyKeyPath: Int] = [:]
        for (i, a) in list.enumerated() where byKeyPath[a.keyPath] == nil { byKeyPath[a.keyPath] = i }
        let keyIndex = byKeyPath[primaryKey]
        var indexDescriptions: [IndexDescription] = []
        var indexProblem: DepotError?
        for index in indexes {
            var components: [IndexDescription.Component] = []
            for key in index.keys {
                guard let position = byKeyPath[key.keyPath] else {
                    indexProblem = indexProblem ?? DepotError(.invalidSchema, "An index of entity \(name) names a key path that is not one of its attributes; declare an Attribute for it or leave it out of the index.")
                    continue
                }
                components.append(IndexDescription.Component(list[position].description.name, descending: key.isDescending))
            }
            indexDescriptions.append(IndexDescription(components, unique: index.isUnique))
        }
        self.storage = Storage(
            description: EntityDescription(
                name: name, attributes: list.map(\.description), primaryKeyIndex: keyIndex ?? -1, indexes: indexDescriptions),
            attributes: list,
            indexByKeyPath: KeyPathIndex(byKeyPath),
            declarationProblem: keyIndex == nil
                ? DepotError(.invalidSchema, "Entity \(name) names a primary key path that is not one of its attributes; declare an Attribute for it.")
                : indexProblem ?? list.lazy.compactMap(\.problem).first,
            jsonAttributes: Set(list.filter(\.isJSON).map(\.description.name)),
            referencedTypes: list.compactMap { $0.referenceTarget?.type })
    }

    /// The entity name.
    public var name: String { description.name }

    /// This entity's description, then those of the entities its references name, directly
    /// or through others: what registering the record type registers, so that a store
    /// never holds a reference to an entity it does not know.
    public var descriptionsForRegistration: [EntityDescription] {
        var result = [description]
        var seen: Set<String> = [description.name]
        var pending = referencedTypes
        func open<T: ManagedRecord>(_ type: T.Type) -> (EntityDescription, [any ManagedRecord.Type]) {
            (T.entity.description, T.entity.referencedTypes)
        }
        while let type = pending.popLast() {
            let (entity, next) = open(type)
            guard seen.insert(entity.name).inserted else { continue }
            result.append(entity)
            pending.append(contentsOf: next)
        }
        return result
    }

    /// Checks the declaration.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` naming the problem.
    public func validate() throws(DepotError) {
        if let declarationProblem { throw declarationProblem }
        try description.validate()
    }

    /// Why a predicate or sort keys cannot run: ordering, text matching or sorting on an
    /// attribute stored as JSON text, named by string (the key-path forms refuse it when
    /// the request is built). `nil` when they can.
    func jsonMisuse(in predicate: PredicateExpression, sortKeys: [SortKey]) -> String? {
        if jsonAttributes.isEmpty { return nil }
        if sortKeys.contains(where: { jsonAttributes.contains($0.attribute) }) { return jsonOrderingProblem }
        // Without recursion: the predicate's depth is checked only later, when it resolves.
        var pending = [predicate]
        while let expression = pending.popLast() {
            switch expression {
            case .compare(let name, let op, _) where op != .equal && op != .notEqual:
                if jsonAttributes.contains(name) { return jsonOrderingProblem }
            case .hasPrefix(let name, _), .contains(let name, _):
                if jsonAttributes.contains(name) { return jsonOrderingProblem }
            case .and(let parts), .or(let parts):
                pending.append(contentsOf: parts)
            case .not(let inner):
                pending.append(inner)
            default:
                break
            }
        }
        return nil
    }

    /// Whether the attribute at `position` may be read as a `V`: `V` stores as its type,
    /// and is optional where the attribute is.
    @inline(__always)
    func reads<V: AttributeValue>(_ type: V.Type, at position: Int) -> Bool {
        let shapes = storage.readShapes
        guard shapes.indices.contains(position) else { return false }
        let shape = shapes[position]
        return shape.type == V.attributeType && (shape.isOptional == V.isOptional || !shape.isOptional)
    }

    /// The name of the attribute a key path maps to, if it is declared.
    public func attributeName(for keyPath: AnyKeyPath) -> String? {
        // Through the storage: `description` would copy the whole description to read one name.
        guard let position = indexByKeyPath.position(of: keyPath) else { return nil }
        return storage.description.attributes[position].name
    }

    /// Writes a record's values into a row in attribute order.
    public func encode(_ record: Record, into row: inout Row) throws(DepotError) {
        row.removeAll()
        for attribute in attributes { row.append(try attribute.store(record)) }
    }

    /// The primary key value of a record.
    public func primaryKey(of record: Record) -> Value {
        guard attributes.indices.contains(description.primaryKeyIndex) else { return .null }
        return attributes[description.primaryKeyIndex].read(record)
    }
}

/// An index of an ``Entity`` declared with key paths: see ``IndexDescription``.
///
/// ```swift
/// indexes: [.index(\.species, \.name), .unique(.ascending(\.ownerID), .descending(\.born))]
/// ```
public struct EntityIndex<Record>: Sendable {
    /// One indexed key path and its direction.
    public struct Key: Sendable {
        let keyPath: PartialKeyPath<Record> & Sendable
        let isDescending: Bool

        /// The attribute at `keyPath`, smallest value first.
        public static func ascending(_ keyPath: PartialKeyPath<Record> & Sendable) -> Key {
            Key(keyPath: keyPath, isDescending: false)
        }

        /// The attribute at `keyPath`, largest value first.
        public static func descending(_ keyPath: PartialKeyPath<Record> & Sendable) -> Key {
            Key(keyPath: keyPath, isDescending: true)
        }
    }

    let keys: [Key]
    let isUnique: Bool

    /// An index over the attributes at `keyPaths`, each ascending, most significant first.
    public static func index(_ keyPaths: (PartialKeyPath<Record> & Sendable)...) -> EntityIndex {
        EntityIndex(keys: keyPaths.map { Key.ascending($0) }, isUnique: false)
    }

    /// An index over `keys`, each in its own direction.
    public static func index(_ keys: Key...) -> EntityIndex {
        EntityIndex(keys: keys, isUnique: false)
    }

    /// A unique index over the attributes at `keyPaths`: no two records share all their
    /// values.
    public static func unique(_ keyPaths: (PartialKeyPath<Record> & Sendable)...) -> EntityIndex {
        EntityIndex(keys: keyPaths.map { Key.ascending($0) }, isUnique: true)
    }

    /// A unique index over `keys`, each in its own direction.
    public static func unique(_ keys: Key...) -> EntityIndex {
        EntityIndex(keys: keys, isUnique: true)
    }
}

/// Key path → attribute position.
///
/// Looking a key path up in the dictionary hashes it, which walks its components: every
/// request built with key paths pays that per key path, and a hand-written `init(row:)`
/// that reads by key path per attribute of every record it decodes. A key path written as
/// a literal is one object, made once per place in the source, so the index also remembers
/// the objects it was asked for (a few, first come), and finds those by identity. Each
/// remembered key path is retained, so its address cannot be reused by another while the
/// index holds it; the slots are filled once and never change, so a reader needs one
/// acquiring load per slot and no lock.
///
/// `@unchecked Sendable` because `AnyKeyPath` is not `Sendable` in general (a key path can
/// capture subscript arguments), but these are only compared and hashed, never applied;
/// the dictionary is never mutated after `init`, and a slot is written once, with release
/// ordering, after the entry it points to is complete.
final class KeyPathIndex: @unchecked Sendable {
    let positions: [AnyKeyPath: Int]

    /// A remembered key path: the object (held, so the identity stays its own) and its
    /// attribute's position.
    private struct Remembered {
        let identity: ObjectIdentifier
        let position: Int
        let keyPath: AnyKeyPath
    }

    /// How many key paths are remembered by identity: more than an entity's attributes are
    /// usually written in distinct places; a key path made afresh on every use (in generic
    /// code) fills the slots at worst, and is then looked up by hash as before.
    private static let slotCount = 16
    /// The address of a `Remembered` in each slot, 0 while the slot is free.
    private let slots: UnsafeMutablePointer<Atomic<UInt>>

    init(_ positions: [AnyKeyPath: Int]) {
        self.positions = positions
        slots = .allocate(capacity: Self.slotCount)
        for i in 0..<Self.slotCount { (slots + i).initialize(to: Atomic(0)) }
    }

    deinit {
        for i in 0..<Self.slotCount {
            let bits = slots[i].load(ordering: .acquiring)
            if let entry = UnsafeMutablePointer<Remembered>(bitPattern: bits) {
                entry.deinitialize(count: 1)
                entry.deallocate()
            }
        }
        slots.deinitialize(count: Self.slotCount)
        slots.deallocate()
    }

    /// The attribute position `keyPath` maps to, if it is declared.
    func position(of keyPath: AnyKeyPath) -> Int? {
        let identity = ObjectIdentifier(keyPath)
        for i in 0..<Self.slotCount {
            guard let entry = UnsafePointer<Remembered>(bitPattern: slots[i].load(ordering: .acquiring)) else { break }
            if entry.pointee.identity == identity { return entry.pointee.position }
        }
        guard let position = positions[keyPath] else { return nil }
        remember(keyPath, at: position, identity: identity)
        return position
    }

    /// Puts `keyPath` in the first free slot, unless it is there already (another thread
    /// found it at the same time) or no slot is free.
    private func remember(_ keyPath: AnyKeyPath, at position: Int, identity: ObjectIdentifier) {
        let entry = UnsafeMutablePointer<Remembered>.allocate(capacity: 1)
        entry.initialize(to: Remembered(identity: identity, position: position, keyPath: keyPath))
        let bits = UInt(bitPattern: entry)
        for i in 0..<Self.slotCount {
            let (exchanged, current) = slots[i].compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing)
            if exchanged { return }
            if let other = UnsafePointer<Remembered>(bitPattern: current), other.pointee.identity == identity { break }
        }
        entry.deinitialize(count: 1)
        entry.deallocate()
    }
}
