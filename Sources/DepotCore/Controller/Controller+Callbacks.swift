/// The completion-handler face of a ``Controller``: the same calls, each delivering its
/// `Result` on the controller's ``OperatingQueue``.
///
/// ```swift
/// cats.callbacks.fetchAll(Request(\.age > 10)) { result in
///     switch result {
///     case .success(let cats): render(cats)
///     case .failure(let error): log(error)
///     }
/// }
/// ```
///
/// Writes submitted through one store run in submission order, so two saves issued one
/// after the other commit in that order. The completion handler names differ from the
/// async ones by living on this view, so the two never compete in overload resolution.
public struct CallbackController<Object, Managed>: Sendable
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// The controller whose calls this view makes.
    public let controller: Controller<Object, Managed>

    /// A completion handler: the call's value or its `DepotError`, on the operating queue.
    public typealias Completion<T: Sendable> = @Sendable (Result<T, DepotError>) -> Void

    private func deliver<T: Sendable>(_ result: Result<T, any Error>, to completion: @escaping Completion<T>) {
        let mapped = result.mapError { DepotError.wrapping($0, code: .backend, context: "Unexpected error") }
        controller.operatingQueue.queue.async { completion(mapped) }
    }

    private func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (ReadContext<Object, Managed>) throws -> T, completion: @escaping Completion<T>
    ) {
        let store = controller.store
        let logger = controller.callLogger
        controller.ensureRegistered { registered in
            switch registered {
            case .failure(let error): deliver(.failure(error), to: completion)
            case .success(let entity):
                store.submitRead({
                    CallLogger.adopt(logger)
                    return try body(ReadContext($0, entity: entity))
                }) { deliver($0, to: completion) }
            }
        }
    }

    private func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (Context<Object, Managed>) throws -> T, completion: @escaping Completion<T>
    ) {
        let store = controller.store
        let logger = controller.callLogger
        controller.ensureRegistered { registered in
            switch registered {
            case .failure(let error): deliver(.failure(error), to: completion)
            case .success(let entity):
                store.submitWrite({
                    CallLogger.adopt(logger)
                    return try body(Context($0, entity: entity))
                }) { deliver($0, to: completion) }
            }
        }
    }


    // MARK: Units of work

    /// Runs `body` with a read context and delivers what it returns.
    public func read<T: Sendable>(
        _ body: @escaping @Sendable (ReadContext<Object, Managed>) throws -> T, completion: @escaping Completion<T>
    ) {
        submitRead(body, completion: completion)
    }

    /// Runs `body` in one write transaction (committed when it returns, rolled back when
    /// it throws) and delivers what it returns. An error thrown by `body` is delivered as
    /// is when it is a `DepotError`, and wrapped in one otherwise.
    public func operation<T: Sendable>(
        _ body: @escaping @Sendable (Context<Object, Managed>) throws -> T, completion: @escaping Completion<T>
    ) {
        submitWrite(body, completion: completion)
    }

    // MARK: Reads

    /// The objects matching `request`, in its order.
    public func fetchAll(_ request: Request<Managed> = .all, completion: @escaping Completion<[Object]>) {
        submitRead({ try $0.fetchAll(request) }, completion: completion)
    }

    /// The first object matching `request`, or `nil`.
    public func fetchFirst(_ request: Request<Managed> = .all, completion: @escaping Completion<Object?>) {
        submitRead({ try $0.fetchFirst(request) }, completion: completion)
    }

    /// The object with primary key `id`, or `nil`.
    public func fetchOne(id: Managed.ID, completion: @escaping Completion<Object?>) {
        submitRowRead(id, { columns in try Conversion<Object, Managed>.object(from: columns) }, completion: completion)
    }

    /// Reads one record by key as a read of its own (see
    /// ``Store/readRow(_:key:decode:completion:)``).
    private func submitRowRead<T: Sendable>(
        _ id: Managed.ID, _ decode: @escaping @Sendable (any ColumnReader) throws -> T, completion: @escaping Completion<T?>
    ) {
        let store = controller.store
        let logger = controller.callLogger
        controller.ensureRegistered { registered in
            switch registered {
            case .failure(let error): deliver(.failure(error), to: completion)
            case .success(let entity):
                store.readRow(entity, key: id.value, decode: { columns in
                    CallLogger.adopt(logger)
                    return try decode(columns)
                }) { deliver($0, to: completion) }
            }
        }
    }

    /// How many records match `request`, counted by the backend.
    public func count(_ request: Request<Managed> = .all, completion: @escaping Completion<Int>) {
        submitRead({ try $0.count(request) }, completion: completion)
    }

    /// Whether a record with primary key `id` exists.
    public func exists(id: Managed.ID, completion: @escaping Completion<Bool>) {
        submitRowRead(id, { _ in true }) { (result: Result<Bool?, DepotError>) in completion(result.map { $0 != nil }) }
    }

    // MARK: Writes

    /// Inserts `object`, or replaces the record with its key.
    public func save(_ object: Object, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.save(object) }, completion: completion)
    }

    /// Saves `objects` in one transaction.
    public func save(_ objects: some Collection<Object> & Sendable, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.save(objects) }, completion: completion)
    }

    /// Inserts `object`; an existing key fails with `duplicateKey`.
    public func insert(_ object: Object, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.insert(object) }, completion: completion)
    }

    /// Inserts `objects` in one transaction; an existing key fails them all with `duplicateKey`.
    public func insert(_ objects: some Collection<Object> & Sendable, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.insert(objects) }, completion: completion)
    }

    /// Replaces the record with `object`'s key; a missing key fails with `notFound`.
    public func update(_ object: Object, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.update(object) }, completion: completion)
    }

    /// Updates `objects` in one transaction; a missing key fails them all with `notFound`.
    public func update(_ objects: some Collection<Object> & Sendable, completion: @escaping Completion<Void>) {
        submitWrite({ try $0.update(objects) }, completion: completion)
    }

    /// Deletes `object`'s record; delivers whether there was one.
    public func delete(_ object: Object, completion: @escaping Completion<Bool>) {
        submitWrite({ try $0.delete(object) }, completion: completion)
    }

    /// Deletes the record with primary key `id`; delivers whether there was one.
    public func delete(id: Managed.ID, completion: @escaping Completion<Bool>) {
        submitWrite({ try $0.delete(id: id) }, completion: completion)
    }

    /// Deletes the records matching `request` in one transaction; delivers how many.
    public func deleteAll(where request: Request<Managed>, completion: @escaping Completion<Int>) {
        submitWrite({ try $0.deleteAll(where: request) }, completion: completion)
    }

    /// Deletes the records matching `predicate` in one transaction; delivers how many.
    public func deleteAll(where predicate: Condition<Managed>, completion: @escaping Completion<Int>) {
        deleteAll(where: Request(predicate), completion: completion)
    }
}

extension Controller {
    /// The completion-handler API, delivering on ``operatingQueue``.
    public var callbacks: CallbackController<Object, Managed> { CallbackController(controller: self) }
}
