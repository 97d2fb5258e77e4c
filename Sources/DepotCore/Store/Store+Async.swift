extension Store {
    /// Reads the record with primary key `key` as a read of its own, decoded by `decode`:
    /// on the calling task when the store's reads never block.
    @inlinable
    public func readRow<T: Sendable>(_ entity: EntityHandle, key: Value, decode: @escaping @Sendable (any ColumnReader) throws -> T) async throws -> T? {
        try await StoreAccess(self).readRow(entity, key: key, call: DatabaseCall("fetch", entity.name), decode: decode)
    }

    /// Reads the row with primary key `key` as a read of its own, in backend-neutral form.
    public func readRow(_ entity: EntityHandle, key: Value) async throws -> Row? {
        try await readRow(entity, key: key) { try $0.row() }
    }

    /// Runs `body` in a read transaction and returns its result: on the calling task when
    /// the store's reads never block, on the store's threads otherwise.
    public func read<T: Sendable>(_ body: @escaping @Sendable (any ReadTransaction) throws -> T) async throws -> T {
        try await read(.transaction, body)
    }

    /// ``read(_:)`` for a call that `call` describes to tracing; `rows` says how many rows
    /// it returned.
    @usableFromInline
    func read<T: Sendable>(
        _ call: @autoclosure () -> DatabaseCall, rows: (T) -> Int? = { _ in nil },
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T
    ) async throws -> T {
        if let telemetry, let tracer = telemetry.activeTracer {
            return try await telemetry.span(call(), on: tracer, rows: rows) { try await readUntraced(body) }
        }
        return try await readUntraced(body)
    }

    func readUntraced<T: Sendable>(_ body: @escaping @Sendable (any ReadTransaction) throws -> T) async throws -> T {
        if let inline = self as? any InlineReadingStore, inline.readsInline {
            return try inline.readInline(body)
        }
        if StoreExecutor.isCurrent, let here = self as? any ExecutorReadingStore {
            var result: T?
            let ran = try here.readOnCallingThread(singleStatement: false) { result = try body($0) }
            if ran, let result { return result }
        }
        return try await withCheckedThrowingContinuation { continuation in
            submitRead(body) { continuation.resume(with: $0) }
        }
    }

    /// Runs `body` in a write transaction and returns its result; commits when it returns,
    /// rolls back when it throws.
    public func write<T: Sendable>(_ body: @escaping @Sendable (any WriteTransaction) throws -> T) async throws -> T {
        if let telemetry, let tracer = telemetry.activeTracer {
            return try await telemetry.span(.transaction, on: tracer) {
                try await withCheckedThrowingContinuation { continuation in
                    submitWrite(body) { continuation.resume(with: $0) }
                }
            }
        }
        return try await withCheckedThrowingContinuation { continuation in
            submitWrite(body) { continuation.resume(with: $0) }
        }
    }

    /// Creates or migrates the storage for these entities and returns their handles, in
    /// the same order.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema``, ``DepotError/Code/schemaMismatch``.
    @discardableResult
    public func register(_ entities: [EntityDescription]) async throws -> [EntityHandle] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[EntityHandle], any Error>) in
            submitRegistration(entities) { continuation.resume(with: $0) }
        }
    }

    /// Creates or migrates the storage for one entity and returns its handle.
    @discardableResult
    public func register(_ entity: EntityDescription) async throws -> EntityHandle {
        let handles = try await register([entity])
        guard let handle = handles.first, handles.count == 1 else {
            throw DepotError(.invalidSchema, "The \(backendName) store returned \(handles.count) handles for one entity (\(entity.name)); the backend breaks the Store contract.")
        }
        return handle
    }

    /// Creates or migrates the storage for these record types, and for the record types
    /// their references name, and returns the handles of these record types, in the same
    /// order.
    @discardableResult
    public func register(_ records: any ManagedRecord.Type...) async throws -> [EntityHandle] {
        var descriptions: [EntityDescription] = []
        var names: Set<String> = []
        for record in records {
            try record.validatedEntity()
            for entity in record.descriptionsForRegistration where names.insert(entity.name).inserted {
                descriptions.append(entity)
            }
        }
        let handles = try await register(descriptions)
        return try records.map { record throws(DepotError) in
            let name = record.entityDescription.name
            guard let handle = handles.first(where: { $0.name == name }) else {
                throw DepotError(.invalidSchema, "The \(backendName) store returned no handle for \(name); the backend breaks the Store contract.")
            }
            return handle
        }
    }
}

extension ManagedRecord {
    static var entityDescription: EntityDescription { entity.description }
    static var descriptionsForRegistration: [EntityDescription] { entity.descriptionsForRegistration }
    static func validatedEntity() throws(DepotError) { try entity.validate() }
}
