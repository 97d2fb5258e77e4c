/// A struct that a store can hold: described by an ``Entity``, read from a backend's stored
/// record through a ``RecordReader``, and written back as a ``Row``.
///
/// ``Record(name:indexes:)`` writes the whole conformance from a struct's stored properties. By
/// hand, declaring one takes the entity and an initializer that reads each attribute by
/// key path; writing the record back comes for free from the entity's key paths. The
/// record is `Identifiable`: its `id` is the primary key (add a computed `id` when the key
/// has another name).
///
/// ```swift
/// struct CatRecord: ManagedRecord {
///     var id: Int64
///     var name: String
///     var age: Int
///
///     static let entity = Entity<CatRecord>("Cat", primaryKey: \.id) {
///         Attribute("id", \.id)
///         Attribute("name", \.name)
///         Attribute("age", \.age)
///     }
///
///     init(id: Int64, name: String, age: Int) { self.id = id; self.name = name; self.age = age }
///     init(row: RecordReader<CatRecord>) throws {
///         id = try row[\.id]
///         name = try row[\.name]
///         age = try row[\.age]
///     }
/// }
/// ```
public protocol ManagedRecord: Identifiable, Sendable where ID: PrimaryKeyValue {
    /// The record's schema.
    static var entity: Entity<Self> { get }
    /// The entity's name, without building ``entity``: what references to this record
    /// type name. `@Record` declares it; the default reads ``entity``.
    ///
    /// Declare it by hand (`static var entityName: String { "Dog" }`) in a hand-written
    /// record that another hand-written record refers to while this one refers back to
    /// it: building either entity would otherwise need the other one first.
    static var entityName: String { get }
    /// Reads a record from the backend's stored form.
    ///
    /// Read each attribute by key path (`try row[\.name]`); a key path the entity does not
    /// declare, or read as another type, throws instead of reading the wrong value.
    ///
    /// The reader is borrowed: a fetch hands the same reader to every record's
    /// initializer, and a borrowed one is not retained and released around each. An
    /// initializer declared without `borrowing` satisfies this requirement too.
    ///
    /// - Throws: Any error; Depot reports it as ``DepotError/Code/conversionFailed``
    ///   naming the entity and the primary key.
    init(row: borrowing RecordReader<Self>) throws
    /// Writes the record's values into `row`, in the entity's attribute order.
    ///
    /// The default implementation reads the declared key paths. Implement it by hand only
    /// when profiling shows the key-path reads matter.
    ///
    /// - Throws: ``DepotError/Code/conversionFailed`` when a value has no stored form (a
    ///   `Codable` attribute whose encoding fails).
    func encode(into row: inout Row) throws(DepotError)
}

extension ManagedRecord {
    /// Reads a record from a row in backend-neutral form (values in attribute order).
    public init(decoding row: Row) throws {
        try self.init(row: RecordReader(RowColumns(row)))
    }
}

extension ManagedRecord {
    /// The entity's name.
    public static var entityName: String { entity.name }

    /// Writes the record's values into `row`, in the entity's attribute order.
    public func encode(into row: inout Row) throws(DepotError) {
        try Self.entity.encode(self, into: &row)
    }
}

/// A managed record that can become the application's value type.
public protocol ObjectConvertible<Object> {
    /// The application's value type.
    associatedtype Object
    /// The application's value for this record.
    ///
    /// - Throws: Any error when the record cannot be represented (an unknown enum raw
    ///   value, say); Depot reports it as ``DepotError/Code/conversionFailed`` with the
    ///   entity and primary key. A record is never skipped silently.
    func toObject() throws -> Object
}

/// An application value that can become its managed record.
public protocol ManagedConvertible<Managed> {
    /// The record type that stores the value.
    associatedtype Managed: ManagedRecord
    /// The record that stores this value.
    ///
    /// - Throws: Any error when the value cannot be stored; Depot reports it as
    ///   ``DepotError/Code/conversionFailed``.
    func toManaged() throws -> Managed
}

extension ObjectConvertible where Object == Self {
    /// The record itself: it is its own object.
    public func toObject() -> Self { self }
}

extension ManagedConvertible where Managed == Self {
    /// The object itself: it is its own record.
    public func toManaged() -> Self { self }
}

/// A struct that is its own managed record: `Controller<Cat, Cat>` needs no conversion
/// code when `Cat` conforms to this.
public protocol StoredObject: ManagedRecord, ObjectConvertible, ManagedConvertible
where Object == Self, Managed == Self {}
