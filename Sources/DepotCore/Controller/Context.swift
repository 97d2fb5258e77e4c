/// The operations shared by ``ReadContext`` and ``Context``: reads of one record type
/// inside one transaction, converting rows to the application's objects.
///
/// Contexts live only inside the closure they are passed to; they are not `Sendable`.
public protocol RecordContext {
    /// The application's value type.
    associatedtype Object: ManagedConvertible & Sendable where Object.Managed == Managed
    /// The record type that stores it.
    associatedtype Managed: ObjectConvertible where Managed.Object == Object
    /// The transaction the context reads through.
    var readTransaction: any ReadTransaction { get }
    /// The record type's entity, as registered with the transaction's store.
    var entity: EntityHandle { get }
}

// The conversion path is `@inlinable` (with the contexts' and the controller's hot
// methods) so that it is specialized where the record types are known: unspecialized, every
// row paid for generic metadata lookups, witness calls and value-witness copies of `Object`.
@usableFromInline
enum Conversion<Object, Managed>
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    @inlinable @inline(__always)
    static func object(from columns: any ColumnReader) throws(DepotError) -> Object {
        do {
            return try Managed(row: RecordReader(columns)).toObject()
        } catch {
            throw conversionError(error, columns: columns)
        }
    }

    @usableFromInline @inline(never)
    static func conversionError(_ error: any Error, columns: any ColumnReader) -> DepotError {
        // A damaged store found while reading the record (a backend that checks each
        // attribute as it is read) is what it is, not the record's conversion failing.
        if let error = error as? DepotError, error.code == .storeCorrupted { return error }
        let entity = Managed.entity.description
        let key = (try? columns.value(entity.primaryKeyIndex))?.debugLiteral ?? "?"
        return DepotError(.conversionFailed, "Cannot convert the stored \(entity.name) with primary key \(key) into \(Object.self): \(error). Fix the record's init(row:) or toObject(), or the stored data.")
    }

    @inlinable @inline(__always)
    static func row(from object: Object, into row: inout Row) throws(DepotError) {
        let managed: Managed
        do {
            managed = try object.toManaged()
        } catch {
            throw managedError(error)
        }
        try managed.encode(into: &row)
    }

    @usableFromInline @inline(never)
    static func managedError(_ error: any Error) -> DepotError {
        DepotError(.conversionFailed, "Cannot convert \(Object.self) into a \(Managed.entity.name) record: \(error). Nothing was written.")
    }
}

extension RecordContext {
    /// Every object matching `request`, in the request's order.
    ///
    /// - Complexity: One query; the result array is reserved up front when the backend
    ///   knows the count.
    @inlinable
    public func fetchAll(_ request: Request<Managed> = .all) throws -> [Object] {
        try fetchAll(request.resolved(for: entity))
    }

    @inlinable
    func fetchAll(_ query: Query) throws -> [Object] {
        var result: [Object] = []
        try readTransaction.fetch(query, reserve: { result.reserveCapacity($0) }) { columns in
            result.append(try Conversion<Object, Managed>.object(from: columns))
        }
        return result
    }

    /// The first object matching `request` in its order, or `nil`.
    @inlinable
    public func fetchFirst(_ request: Request<Managed> = .all) throws -> Object? {
        try fetchAll(request.atMostOne).first
    }

    /// The object with primary key `id`, or `nil`.
    @inlinable
    public func fetchOne(id: Managed.ID) throws -> Object? {
        var object: Object?
        _ = try readTransaction.fetchRow(entity, key: id.value) { columns in
            object = try Conversion<Object, Managed>.object(from: columns)
        }
        return object
    }

    /// The number of records matching `request`, counted without converting them.
    public func count(_ request: Request<Managed> = .all) throws -> Int {
        try readTransaction.count(request.resolved(for: entity))
    }

    /// Whether a record with primary key `id` exists.
    @inlinable
    public func exists(id: Managed.ID) throws -> Bool {
        try readTransaction.fetchRow(entity, key: id.value) { _ in }
    }
}

/// Reads of one record type inside one read transaction: every read sees the same
/// snapshot.
public struct ReadContext<Object, Managed>: RecordContext
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// The store's read transaction the reads run in.
    public let readTransaction: any ReadTransaction
    /// The record type's entity, as registered with the store.
    public let entity: EntityHandle

    /// A context over `transaction` for the record type registered as `entity`.
    @inlinable
    public init(_ transaction: any ReadTransaction, entity: EntityHandle) {
        self.readTransaction = transaction
        self.entity = entity
    }
}

/// A unit of work on one record type inside one write transaction.
///
/// Reads see the context's own writes. The work commits when the closure that received
/// the context returns, and rolls back when it throws.
///
/// ```swift
/// try await cats.operation { context in
///     guard var tom = try context.fetchOne(id: 1) else { return }
///     tom.age += 1
///     try context.update(tom)
/// }
/// ```
public struct Context<Object, Managed>: RecordContext
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// The store's write transaction the work runs in.
    public let transaction: any WriteTransaction
    /// The record type's entity, as registered with the store.
    public let entity: EntityHandle
    /// The same transaction, for reads.
    @inlinable public var readTransaction: any ReadTransaction { transaction }

    /// A context over `transaction` for the record type registered as `entity`.
    @inlinable
    public init(_ transaction: any WriteTransaction, entity: EntityHandle) {
        self.transaction = transaction
        self.entity = entity
    }

    /// Inserts or replaces `object` (upsert by primary key).
    @inlinable
    public func save(_ object: Object) throws {
        var row = Row(capacity: entity.entity.attributes.count)
        try Conversion<Object, Managed>.row(from: object, into: &row)
        try transaction.upsert(row, into: entity)
    }

    /// Inserts or replaces each object, in this one transaction.
    @inlinable
    public func save(_ objects: some Sequence<Object>) throws {
        let entity = self.entity
        var row = Row(capacity: entity.entity.attributes.count)
        for object in objects {
            try Conversion<Object, Managed>.row(from: object, into: &row)
            try transaction.upsert(row, into: entity)
        }
    }

    /// Inserts `object`.
    ///
    /// - Throws: ``DepotError/Code/duplicateKey`` when its primary key or a unique value
    ///   exists already.
    @inlinable
    public func insert(_ object: Object) throws {
        try insert(CollectionOfOne(object))
    }

    /// Inserts each object, in this one transaction.
    @inlinable
    public func insert(_ objects: some Sequence<Object>) throws {
        let entity = self.entity
        var row = Row(capacity: entity.entity.attributes.count)
        for object in objects {
            try Conversion<Object, Managed>.row(from: object, into: &row)
            try transaction.insert(row, into: entity)
        }
    }

    /// Replaces the stored record with the same primary key, in place.
    ///
    /// - Throws: ``DepotError/Code/notFound`` when there is none.
    @inlinable
    public func update(_ object: Object) throws {
        try update(CollectionOfOne(object))
    }

    /// Replaces each stored record, in this one transaction.
    @inlinable
    public func update(_ objects: some Sequence<Object>) throws {
        let entity = self.entity
        var row = Row(capacity: entity.entity.attributes.count)
        for object in objects {
            try Conversion<Object, Managed>.row(from: object, into: &row)
            try transaction.update(row, in: entity)
        }
    }

    /// Deletes the record stored for `object`; returns whether it existed.
    @discardableResult
    public func delete(_ object: Object) throws -> Bool {
        let managed: Managed
        do { managed = try object.toManaged() } catch {
            throw DepotError(.conversionFailed, "Cannot convert \(Object.self) into a \(entity.name) record to delete it: \(error).")
        }
        return try transaction.delete(key: Managed.entity.primaryKey(of: managed), from: entity)
    }

    /// Deletes the record with primary key `id`; returns whether it existed.
    @discardableResult
    public func delete(id: Managed.ID) throws -> Bool {
        try transaction.delete(key: id.value, from: entity)
    }

    /// Deletes every record matching `request`; returns how many.
    @discardableResult
    public func deleteAll(where request: Request<Managed>) throws -> Int {
        try transaction.delete(request.resolved(for: entity))
    }

    /// Deletes every record matching `predicate`; returns how many.
    @discardableResult
    public func deleteAll(where predicate: Condition<Managed>) throws -> Int {
        try deleteAll(where: Request(predicate))
    }
}
