import NIOConcurrencyHelpers
import Synchronization

/// An entity registered with one store: what queries and transactions name it by.
///
/// ``Store/submitRegistration(_:completion:)`` (or ``Store/register(_:)-(EntityDescription)``)
/// returns one handle per entity. A handle carries the store's slot for the entity, so a
/// transaction finds its table, statements or databases by position instead of looking
/// the name up again, and the description it was registered with, so a handle kept across
/// a migration made by someone else is refused with ``DepotError/Code/schemaMismatch``
/// rather than writing rows in the old layout.
///
/// A ``Controller`` registers its record type on first use and keeps the handle; code that
/// works with ``ReadTransaction`` and ``WriteTransaction`` directly registers first:
///
/// ```swift
/// let cats = try await store.register(CatRecord.entity.description)
/// try await store.write { try $0.insert(row, into: cats) }
/// ```
public struct EntityHandle: Sendable, Hashable, CustomStringConvertible {
    /// The description the entity was registered with.
    public var entity: EntityDescription { interned.entity }

    /// Checks `row` against the registered description (``EntityDescription/check(_:)``)
    /// without copying the description: what a write of every row runs.
    package func check(_ row: Row) throws(DepotError) -> Value { try interned.check(row) }
    // Unowned and unsafe, so that a handle copies as plain bits: handles are copied several
    // times on every read (into each closure and call that carries one), and retaining a
    // description's attribute array each time was an atomic on a cache line every reader
    // thread shares. Safe because interned descriptions live as long as the process.
    @usableFromInline package unowned(unsafe) let interned: InternedEntity
    /// The store's position for the entity: assigned at its first registration and kept
    /// for the store's life (a migration keeps the slot).
    public let slot: Int
    /// Which registration of the slot issued the handle; a migration makes a new one.
    /// Unique in the process, so a handle is never mistaken for one of another store.
    public let generation: UInt64
    /// The store that issued the handle.
    public let store: ObjectIdentifier

    /// For backends, through ``EntityRegistry``; applications get handles by registering.
    init(entity: EntityDescription, slot: Int, generation: UInt64, store: ObjectIdentifier) {
        self.interned = InternedEntity.interning(entity)
        self.slot = slot
        self.generation = generation
        self.store = store
    }

    /// The entity's name.
    public var name: String { entity.name }

    /// The entity's name and slot, for messages.
    public var description: String { "\(entity.name) (slot \(slot))" }

    /// Whether both handles come from the same registration of the same slot in the same store.
    public static func == (a: EntityHandle, b: EntityHandle) -> Bool {
        a.generation == b.generation && a.slot == b.slot && a.store == b.store
    }

    /// Hashes the registration and slot that ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(generation)
        hasher.combine(slot)
    }
}

/// An entity description kept for the life of the process, one per distinct description
/// (as the runtime keeps type metadata), so that ``EntityHandle`` can refer to it without
/// counting references. A process registers a bounded set of schemas: those its code
/// declares and those it migrates between.
@usableFromInline
package final class InternedEntity: Sendable {
    private let stored: EntityDescription
    /// Set, with release ordering, once `stored` is written. Handles reach other threads
    /// by many routes (a registration's completion, a registry copy, a continuation); the
    /// acquiring load in ``entity`` orders every reader after the writer whichever route it
    /// was, in a form Thread Sanitizer sees. A plain load on x86 and ARM64's `ldar`, of a
    /// line nobody writes again.
    private let published = Atomic<Bool>(false)

    private init(_ entity: EntityDescription) {
        self.stored = entity
        published.store(true, ordering: .releasing)
    }

    @usableFromInline var entity: EntityDescription {
        _ = published.load(ordering: .acquiring)
        return stored
    }

    /// ``EntityDescription/check(_:)`` on the description in place: ``entity`` returns a
    /// copy, which retains and releases each of the description's arrays and strings.
    func check(_ row: Row) throws(DepotError) -> Value {
        _ = published.load(ordering: .acquiring)
        return try stored.check(row)
    }

    /// A pthread lock, not `Synchronization.Mutex`, which waits inside the standard library
    /// where Thread Sanitizer cannot see the ordering it gives.
    private static let table = NIOLockedValueBox<[EntityDescription: InternedEntity]>([:])

    /// The interned copy of `entity`, made on first use. Called when an entity is
    /// registered, never per read.
    static func interning(_ entity: EntityDescription) -> InternedEntity {
        table.withLockedValue { table in
            if let interned = table[entity] { return interned }
            let interned = InternedEntity(entity)
            table[entity] = interned
            return interned
        }
    }
}

/// The entities registered with one store, by slot: the bookkeeping every backend shares.
///
/// A backend keeps one registry per store (inside its lock or snapshot), with its own
/// per-entity state as `Entry` (a table's statements, an LMDB database handle, the memory
/// store's rows). ``set(_:_:)`` registers or replaces an entity and returns its handle;
/// ``resolve(_:)`` is what a transaction calls with the handle it was given: an array
/// access and an integer comparison on the common path, with every refusal worded once
/// for all backends.
public struct EntityRegistry<Entry: Sendable>: Sendable {
    /// One registered entity.
    public struct Registered: Sendable {
        /// The description it was registered with.
        public var entity: EntityDescription
        /// The backend's state for it.
        public var entry: Entry
        /// Which registration of its slot this is.
        public var generation: UInt64
    }

    // Parallel arrays by slot rather than one array of optional structs: resolving a handle
    // reads one generation and one entry, without copying (retaining) the description.
    @usableFromInline var generations: [UInt64] = []
    @usableFromInline var entries: [Entry?] = []
    @usableFromInline var entities: [EntityDescription?] = []
    private var slotByName: [String: Int] = [:]
    /// The references among the registered entities; rebuilt whenever one is registered or
    /// removed (rarely), read with every write.
    public private(set) var relationships = Relationships()
    /// What the handles name as their store: an object only this registry (and its copies)
    /// holds, so that a backend can create the registry before the store itself exists.
    @usableFromInline let identity = Identity()
    @usableFromInline final class Identity: Sendable {
        @usableFromInline init() {}
    }

    /// The identity the handles this registry issues carry.
    @inlinable public var store: ObjectIdentifier { ObjectIdentifier(identity) }

    /// An empty registry; a store keeps one (and its copies) for its whole life.
    public init() {}

    /// The registered entity named `name`.
    public subscript(name: String) -> Registered? {
        slotByName[name].flatMap { self[slot: $0] }
    }

    /// The registered entity at `slot`, if any.
    public subscript(slot slot: Int) -> Registered? {
        guard entries.indices.contains(slot), let entry = entries[slot], let entity = entities[slot] else { return nil }
        return Registered(entity: entity, entry: entry, generation: generations[slot])
    }

    /// Every registered entity with its handle, in slot order.
    public var all: [(handle: EntityHandle, entry: Entry)] {
        entries.indices.compactMap { slot in
            self[slot: slot].map { (EntityHandle(entity: $0.entity, slot: slot, generation: $0.generation, store: store), $0.entry) }
        }
    }

    /// The names of the registered entities.
    public var names: [String] { entities.compactMap { $0?.name } }

    /// The handle of the entity named `name`, as registered now.
    public func handle(named name: String) -> EntityHandle? {
        guard let slot = slotByName[name], let registered = self[slot: slot] else { return nil }
        return EntityHandle(entity: registered.entity, slot: slot, generation: registered.generation, store: store)
    }

    /// Registers `entity` with `entry`, or replaces what its name had (keeping the slot);
    /// returns the handle. A different description makes a new generation, so handles for
    /// the old one go through ``EntityDescription/checkSameShape(as:)`` from then on.
    @discardableResult
    public mutating func set(_ entity: EntityDescription, _ entry: Entry) -> EntityHandle {
        let slot: Int
        if let existing = slotByName[entity.name] {
            slot = existing
        } else {
            slot = entries.count
            entries.append(nil)
            entities.append(nil)
            generations.append(0)
            slotByName[entity.name] = slot
        }
        let generation: UInt64
        if entries[slot] != nil, let previous = entities[slot], previous == entity {
            generation = generations[slot]
        } else {
            // Starts at 1: generation 0 marks an empty slot.
            generation = _generations.add(1, ordering: .relaxed).newValue
        }
        entries[slot] = entry
        entities[slot] = entity
        generations[slot] = generation
        relationships = Relationships(handles: all.map(\.handle))
        return EntityHandle(entity: entity, slot: slot, generation: generation, store: store)
    }

    /// Forgets the entity named `name` (its slot stays reserved for the name): its handles
    /// are refused as not registered from then on.
    public mutating func remove(named name: String) {
        if let slot = slotByName[name] {
            entries[slot] = nil
            entities[slot] = nil
            generations[slot] = 0
            relationships = Relationships(handles: all.map(\.handle))
        }
    }

    /// Changes the entry at a slot in place (the description and generation stay).
    public mutating func modify<R>(slot: Int, _ body: (inout Entry) throws -> R) rethrows -> R? {
        guard entries.indices.contains(slot), entries[slot] != nil else { return nil }
        return try body(&entries[slot]!)
    }

    /// The entry for `handle`, after checking that this store issued it and that rows laid
    /// out by its description fit the registered one.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` for a handle another store issued or an
    ///   entity this store no longer has; ``DepotError/Code/schemaMismatch`` when the
    ///   entity was registered since with another layout.
    // Inlinable, so that each backend gets it specialized for its entry type: a generic
    // call from another module looked the registry's type metadata up on every read.
    @inlinable @inline(__always)
    public func resolve(_ handle: EntityHandle) throws(DepotError) -> Entry {
        let slot = handle.slot
        if handle.store == store, slot >= 0, slot < generations.count, generations[slot] != 0 {
            if generations[slot] == handle.generation, let entry = entries[slot] { return entry }
            if let registered = self[slot: slot] { return try resolveChanged(handle, registered) }
        }
        throw unknown(handle)
    }

    @usableFromInline @inline(never)
    func resolveChanged(_ handle: EntityHandle, _ registered: Registered) throws(DepotError) -> Entry {
        guard registered.entity.name == handle.entity.name else { throw unknown(handle) }
        try registered.entity.checkSameShape(as: handle.entity)
        return registered.entry
    }

    @usableFromInline @inline(never)
    func unknown(_ handle: EntityHandle) -> DepotError {
        if handle.store != store {
            return DepotError(.invalidSchema, "The handle for \(handle.name) was issued by another store; register the entity with this store and use the handle it returns.")
        }
        return DepotError.notRegistered(handle.name)
    }
}

/// Process-wide, so that generations never repeat across stores (a store's address can be
/// reused after it is released).
private let _generations = Atomic<UInt64>(0)

/// An immutable copy of a backend's ``EntityRegistry``, shared by reference among the
/// transactions that began while it was current.
///
/// Handing a registry to a transaction by value retains each of its arrays and
/// dictionaries (and releases them when the transaction ends); an awaited lookup by key did
/// that on every call. Handing this box over is one retain.
package final class SharedRegistry<Entry: Sendable>: Sendable {
    package let registry: EntityRegistry<Entry>

    package init(_ registry: EntityRegistry<Entry>) {
        self.registry = registry
    }
}

/// A backend's registry of entities and the ``SharedRegistry`` its transactions take,
/// made on first use after each change and shared until the next (almost always: changes
/// are registrations and migrations).
///
/// Keep it behind the lock that guards registrations.
package struct SharingRegistry<Entry: Sendable>: Sendable {
    package var registry = EntityRegistry<Entry>() {
        didSet { shared = nil }
    }
    private var shared: SharedRegistry<Entry>?

    package init() {}

    /// The registry as it is now, shared.
    package mutating func snapshot() -> SharedRegistry<Entry> {
        if let shared { return shared }
        let made = SharedRegistry(registry)
        shared = made
        return made
    }
}
