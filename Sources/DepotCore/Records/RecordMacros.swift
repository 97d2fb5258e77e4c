/// Makes a struct a managed record: its entity, its decoding and encoding, and its
/// conformance, all from its stored properties.
///
/// ```swift
/// @Record
/// struct Cat {
///     var id: Int64
///     var name: String
///     @Stored(.indexed) var age: Int
/// }
///
/// let cats = Controller<Cat, Cat>(store: store)
/// ```
///
/// Each stored property becomes an attribute, in declaration order, under its own name
/// (or the one given with ``Stored(_:name:)``). The primary key is the property named
/// `id`, or the one marked ``PrimaryKey()``. A property's initial value is the default
/// that existing records get when the attribute is added later. Computed, `static`, `lazy`
/// and ``NotStored()`` properties are not stored.
///
/// The struct becomes its own object (``StoredObject``), unless it converts to a separate
/// application type: when its declaration names ``ObjectConvertible`` or it declares
/// `toObject()`, it only becomes a ``ManagedRecord``, for `Controller<Cat, CatRecord>`.
///
/// Indexes over several attributes, for requests that filter on some and sort by others,
/// are listed on the macro by property name (see ``IndexDescription``):
///
/// ```swift
/// @Record(indexes: [.index("species", "name")])
/// struct Pet {
///     var id: Int64
///     var species: String
///     var name: String
/// }
/// ```
///
/// - Parameters:
///   - name: The stored entity name; the struct's name when omitted.
///   - indexes: Indexes over one or more stored properties, named by string literals that
///     the macro checks against the struct's stored properties.
@attached(
    extension, conformances: ManagedRecord, ObjectConvertible, ManagedConvertible, StoredObject,
    names: named(entity), named(entityName), named(id), named(init(row:)), named(encode(into:)))
public macro Record(name: String? = nil, indexes: [IndexDescription] = []) = #externalMacro(module: "DepotMacros", type: "RecordMacro")

/// Options for a stored property of a ``Record(name:indexes:)`` struct: how it is stored.
///
/// ```swift
/// @Stored(.indexed) var age: Int
/// @Stored(.unique, name: "email_address") var email: String
/// ```
///
/// A property holding another record's primary key becomes a reference (a to-one
/// relationship) with ``AttributeOption/references(_:onDelete:)``:
///
/// ```swift
/// @Stored(.references(Dog.self, onDelete: .cascade)) var dogID: Int64
/// ```
///
/// - Parameters:
///   - options: ``AttributeOption/indexed``, ``AttributeOption/unique`` (which implies an
///     index), ``AttributeOption/references(_:onDelete:)`` (which implies an index).
///   - name: The stored attribute name; the property's name when omitted. Renaming the
///     property while keeping this name keeps the stored data.
@attached(peer)
public macro Stored(_ options: AttributeOption..., name: String? = nil) =
    #externalMacro(module: "DepotMacros", type: "StoredMacro")

/// Marks the primary key of a ``Record(name:indexes:)`` struct whose key is not named `id`.
///
/// The macro then adds `var id` returning the key, so the record stays `Identifiable`.
/// Combine it with ``Stored(_:name:)`` to give the key a stored name.
@attached(peer)
public macro PrimaryKey() = #externalMacro(module: "DepotMacros", type: "PrimaryKeyMacro")

/// Leaves a property of a ``Record(name:indexes:)`` struct out of the store: a cache, a value
/// derived when the record is used. It needs an initial value (optional `var`s start as
/// `nil`), which records read from the store get.
@attached(peer)
public macro NotStored() = #externalMacro(module: "DepotMacros", type: "NotStoredMacro")

/// How a stored property is stored: see ``Stored(_:name:)``.
public enum AttributeOption: Sendable, Hashable {
    /// Backends keep an index on the attribute, for fast filtering and sorting.
    case indexed
    /// No two records share a non-nil value; implies an index.
    case unique
    /// The property holds the primary key of a record of the entity named `entity`; see
    /// ``references(_:onDelete:)``.
    case reference(entity: String, onDelete: DeleteRule)

    /// The property holds the primary key of a `Target` record (its type must be
    /// `Target.ID`, or optional), and `onDelete` says what happens to this record when that
    /// one is deleted. Implies an index.
    public static func references<Target: ManagedRecord>(_ target: Target.Type, onDelete: DeleteRule = .noAction) -> AttributeOption {
        .reference(entity: Target.entityName, onDelete: onDelete)
    }
}
