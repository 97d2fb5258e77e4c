public import Logging
import NIOConcurrencyHelpers
import Synchronization

/// The façade an application holds: stores and fetches its immutable `Object` values
/// through their `Managed` records, in one store.
///
/// ```swift
/// let cats = Controller<Cat, CatRecord>(store: store)
/// try await cats.save(Cat(id: 1, name: "Tom", weight: 4.2, age: 3))
/// let old = try await cats.fetchAll(Request(\.age > 10).sorted(by: \.name))
/// ```
///
/// Every call validates its input, converts, runs one transaction on the store's own
/// threads, converts back, and then resumes the caller (async methods) or calls the
/// completion handler on ``operatingQueue`` (the ``callbacks`` view). A controller is a
/// small value: copy it freely; copies share the store.
///
/// The entity is registered with the store on first use; an invalid declaration fails that
/// first call with ``DepotError/Code/invalidSchema``.
///
/// Each call logs its transaction's lines (its duration at `debug`, slowness, its failure)
/// to the caller's logger when it has one: the logger the controller is bound to with
/// ``logging(to:)``, else the logger the calling task bound with swift-log's `withLogger`
/// (`Logger.current`; Hummingbird binds each request's logger so), else the store's own.
/// The caller's logger is taken when the call is made, on the calling task, and carried to
/// the store's thread with the work.
public struct Controller<Object, Managed>: Sendable
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// The store this controller works in.
    public let store: any Store
    /// Where the ``callbacks`` view delivers completion handlers.
    public let operatingQueue: OperatingQueue
    @usableFromInline let registration: Registration
    /// ``store`` with its capabilities looked up once.
    @usableFromInline let access: StoreAccess
    /// The logger ``logging(to:)`` bound this controller to.
    @usableFromInline let boundLogger: Logger?

    /// Creates a controller.
    ///
    /// - Parameters:
    ///   - store: The backend.
    ///   - operatingQueue: Where completion handlers run; `.background` by default.
    public init(store: any Store, operatingQueue: OperatingQueue = .background) {
        self.store = store
        self.operatingQueue = operatingQueue
        self.registration = Registration()
        self.access = StoreAccess(store)
        self.boundLogger = nil
    }

    private init(_ controller: Controller, logger: Logger?) {
        self.store = controller.store
        self.operatingQueue = controller.operatingQueue
        self.registration = controller.registration
        self.access = controller.access
        self.boundLogger = logger
    }

    /// This controller, logging its calls' lines to `logger`: a request handler's logger,
    /// so that what Depot logs for the request's calls carries its metadata (a request id)
    /// and obeys its level.
    ///
    /// ```swift
    /// router.get("pets/:id") { request, context in
    ///     try await pets.logging(to: context.logger).fetchOne(id: context.parameters.require("id", as: Int64.self))
    /// }
    /// ```
    ///
    /// A small copy that shares the store and the registration: make one per request. The
    /// store's own events (opening, closing, schema changes, checkpoints) still go to the
    /// store's logger.
    public func logging(to logger: Logger) -> Controller {
        Controller(self, logger: logger)
    }

    /// The logger a call made now logs to, when not the store's: the bound one, or the
    /// calling task's (see ``logging(to:)``).
    @inlinable
    var callLogger: Logger? { boundLogger ?? CallLogger.ofCallingTask }

    static var entity: EntityDescription { Managed.entity.description }

    // MARK: Registration

    /// The entity's handle in ``store``, registering it first when this is the first use.
    @inlinable @inline(__always)
    public func registeredEntity() async throws -> EntityHandle {
        if let handle = registration.handle { return handle }
        return try await registerEntity()
    }

    @usableFromInline
    func registerEntity() async throws -> EntityHandle {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<EntityHandle, any Error>) in
            ensureRegistered { continuation.resume(with: $0) }
        }
    }

    /// Calls `next` with the entity's handle once the entity is registered (at once when it
    /// is). Calls that arrive while the registration runs wait for it and continue in
    /// arrival order, so two completion-handler writes on a fresh controller submit, and
    /// commit, in call order.
    func ensureRegistered(then next: @escaping @Sendable (Result<EntityHandle, any Error>) -> Void) {
        if let handle = registration.handle { return next(.success(handle)) }
        do { try Managed.entity.validate() } catch { return next(.failure(error)) }
        let store = self.store
        // With the entities its references name: a store never holds a reference to an
        // entity it does not know, whichever controller is used first.
        let entities = Managed.entity.descriptionsForRegistration
        let entity = Self.entity
        registration.whenRegistered(register: { done in
            store.submitRegistration(entities) { result in
                done(result.flatMap { handles in
                    guard handles.count == entities.count, let handle = handles.first, handle.name == entity.name else {
                        return .failure(DepotError(.invalidSchema, "The \(store.backendName) store answered the registration of \(entity.name) with \(handles.count) handles; the backend breaks the Store contract."))
                    }
                    return .success(handle)
                })
            }
        }, then: next)
    }

    // MARK: Units of work

    /// Runs `body` with a read context: every read inside sees one snapshot.
    @inlinable
    public func read<T: Sendable>(_ body: @escaping @Sendable (ReadContext<Object, Managed>) throws -> T) async throws -> T {
        let entity = try await registeredEntity()
        let logger = callLogger
        return try await access.read(DatabaseCall("transaction", entity.name)) { transaction in
            CallLogger.adopt(logger)
            return try body(ReadContext(transaction, entity: entity))
        }
    }

    /// ``read(_:)`` for a `body` that reads with one statement and has no effect outside
    /// what it returns (a page): a store may run it as a read of its own, without a
    /// transaction around it.
    @inlinable
    func readOneStatement<T: Sendable>(_ body: @escaping @Sendable (ReadContext<Object, Managed>) throws -> T) async throws -> T {
        let entity = try await registeredEntity()
        let logger = callLogger
        return try await access.read(DatabaseCall("fetch", entity.name), singleStatement: true) { transaction in
            CallLogger.adopt(logger)
            return try body(ReadContext(transaction, entity: entity))
        }
    }

    /// Runs `body` in one write transaction: its reads see its writes; it commits when
    /// `body` returns and rolls back when it throws (the error is rethrown unchanged).
    @inlinable
    public func operation<T: Sendable>(_ body: @escaping @Sendable (Context<Object, Managed>) throws -> T) async throws -> T {
        try await write("transaction", body)
    }

    /// A write described to tracing as `operation` on this entity, logging to the caller's
    /// logger.
    @inlinable
    func write<T: Sendable>(_ operation: String, _ body: @escaping @Sendable (Context<Object, Managed>) throws -> T) async throws -> T {
        let entity = try await registeredEntity()
        let logger = callLogger
        return try await access.write(DatabaseCall(operation, entity.name)) { transaction in
            CallLogger.adopt(logger)
            return try body(Context(transaction, entity: entity))
        }
    }

    // MARK: Reads

    /// Every object matching `request`, in its order (by primary key by default).
    @inlinable
    public func fetchAll(_ request: Request<Managed> = .all) async throws -> [Object] {
        let entity = try await registeredEntity()
        let query = try request.resolved(for: entity)
        let logger = callLogger
        return try await access.read(DatabaseCall("fetch", entity.name), rows: { $0.count }, singleStatement: true) {
            CallLogger.adopt(logger)
            return try ReadContext<Object, Managed>($0, entity: entity).fetchAll(query)
        }
    }

    /// The first object matching `request`, or `nil`.
    @inlinable
    public func fetchFirst(_ request: Request<Managed> = .all) async throws -> Object? {
        let entity = try await registeredEntity()
        let query = try request.atMostOne.resolved(for: entity)
        let logger = callLogger
        return try await access.read(DatabaseCall("fetch", entity.name), rows: { $0 == nil ? 0 : 1 }, singleStatement: true) {
            CallLogger.adopt(logger)
            return try ReadContext<Object, Managed>($0, entity: entity).fetchAll(query).first
        }
    }

    /// The object with primary key `id`, or `nil`.
    @inlinable
    public func fetchOne(id: Managed.ID) async throws -> Object? {
        let entity = try await registeredEntity()
        let logger = callLogger
        return try await access.readRow(entity, key: id.value, call: DatabaseCall("fetch", entity.name)) { columns in
            CallLogger.adopt(logger)
            return try Conversion<Object, Managed>.object(from: columns)
        }
    }

    /// The number of records matching `request`, counted by the backend.
    public func count(_ request: Request<Managed> = .all) async throws -> Int {
        let entity = try await registeredEntity()
        let query = try request.resolved(for: entity)
        let logger = callLogger
        return try await access.read(DatabaseCall("count", entity.name), rows: { _ in 1 }, singleStatement: true) {
            CallLogger.adopt(logger)
            return try $0.count(query)
        }
    }

    /// How the store runs `request`: which index (if any) it reads, which ranges, whether it
    /// sorts afterwards; see ``QueryPlan``. With `analyze` the request runs, and the plan
    /// says how many records were actually read.
    ///
    /// ```swift
    /// let plan = try await pets.explain(Request(\.species == "cat").sorted(by: \.name).limit(20))
    /// if plan.sortsAfterwards { logger.warning("list page sorts: \(plan)") }
    /// ```
    public func explain(_ request: Request<Managed> = .all, analyze: Bool = false) async throws -> QueryPlan {
        let entity = try await registeredEntity()
        let query = try request.resolved(for: entity)
        let logger = callLogger
        return try await access.read(DatabaseCall("explain", entity.name), rows: { _ in 1 }) {
            CallLogger.adopt(logger)
            return try $0.explain(query, analyze: analyze)
        }
    }

    /// Whether a record with primary key `id` exists.
    @inlinable
    public func exists(id: Managed.ID) async throws -> Bool {
        let entity = try await registeredEntity()
        let logger = callLogger
        return try await access.readRow(entity, key: id.value, call: DatabaseCall("exists", entity.name)) { _ in
            CallLogger.adopt(logger)
            return true
        } != nil
    }

    // MARK: Writes

    /// Inserts or replaces `object` by primary key.
    @inlinable
    public func save(_ object: Object) async throws {
        try await write("save") { try $0.save(object) }
    }

    /// Inserts or replaces every object, in one transaction.
    @inlinable
    public func save(_ objects: some Collection<Object> & Sendable) async throws {
        try await write("save") { try $0.save(objects) }
    }

    /// Inserts `object`.
    ///
    /// - Throws: ``DepotError/Code/duplicateKey`` when its key or a unique value exists.
    @inlinable
    public func insert(_ object: Object) async throws {
        try await write("insert") { try $0.insert(object) }
    }

    /// Inserts every object in one transaction; if one fails, none is inserted.
    @inlinable
    public func insert(_ objects: some Collection<Object> & Sendable) async throws {
        try await write("insert") { try $0.insert(objects) }
    }

    /// Replaces the stored record for `object`, keeping its identity.
    ///
    /// - Throws: ``DepotError/Code/notFound`` when there is none.
    @inlinable
    public func update(_ object: Object) async throws {
        try await write("update") { try $0.update(object) }
    }

    /// Replaces every stored record in one transaction; if one is missing, none changes.
    @inlinable
    public func update(_ objects: some Collection<Object> & Sendable) async throws {
        try await write("update") { try $0.update(objects) }
    }

    /// Deletes the record stored for `object`; returns whether there was one.
    @discardableResult
    public func delete(_ object: Object) async throws -> Bool {
        try await write("delete") { try $0.delete(object) }
    }

    /// Deletes the record with primary key `id`; returns whether there was one.
    @discardableResult
    public func delete(id: Managed.ID) async throws -> Bool {
        try await write("delete") { try $0.delete(id: id) }
    }

    /// Deletes every record matching `predicate`; returns how many.
    @discardableResult
    public func deleteAll(where predicate: Condition<Managed>) async throws -> Int {
        try await deleteAll(where: Request(predicate))
    }

    /// Deletes every record matching `request` (its order, offset and limit included).
    @discardableResult
    public func deleteAll(where request: Request<Managed>) async throws -> Int {
        let entity = try await registeredEntity()
        let query = try request.resolved(for: entity)
        let logger = callLogger
        return try await access.write(DatabaseCall("delete", entity.name)) {
            CallLogger.adopt(logger)
            return try $0.delete(query)
        }
    }
}

/// Whether a controller has registered its entity; shared by the controller's copies.
///
/// One registration runs at a time; calls that arrive meanwhile queue behind it and are
/// released in arrival order before the registration counts as done, so no later call can
/// overtake an earlier one by finding the registration done first.
@usableFromInline
final class Registration: Sendable {
    typealias Next = @Sendable (Result<EntityHandle, any Error>) -> Void

    private let done = Atomic<Bool>(false)
    /// The handle: written once, before `done` turns true (a releasing store), and read only
    /// after `done` was seen true (an acquiring load), which orders the two without a lock
    /// on every call. (An `AtomicLazyReference` did the same with a generic load that looked
    /// up type metadata on every call.)
    nonisolated(unsafe) private var registered: EntityHandle?
    /// The calls waiting for the running registration; `nil` when none runs.
    private let waiting = NIOLockedValueBox<[Next]?>(nil)

    /// The handle once the registration is done.
    @usableFromInline var handle: EntityHandle? {
        guard done.load(ordering: .acquiring) else { return nil }
        return registered
    }

    func whenRegistered(register: (@escaping Next) -> Void, then next: @escaping Next) {
        let starts = waiting.withLockedValue { waiting -> Bool? in
            if done.load(ordering: .acquiring) { return nil }
            if waiting == nil {
                waiting = [next]
                return true
            }
            waiting?.append(next)
            return false
        }
        guard let starts else {
            guard let handle = registered else {
                return next(.failure(DepotError(.backend, "A registration counted as done without a handle; this is a bug in Depot.")))
            }
            return next(.success(handle))
        }
        guard starts else { return }
        register { result in self.release(result) }
    }

    /// Runs every waiting call in order (each one submits its work), including calls that
    /// arrive while they run, then marks the registration done. After a failure, the calls
    /// that waited get it and the next call tries again.
    private func release(_ result: Result<EntityHandle, any Error>) {
        // Only one registration runs at a time and none after one succeeded: a single write.
        if case .success(let handle) = result, registered == nil {
            registered = handle
        }
        if case .failure = result {
            // Only the calls that waited for this registration share its failure; a call
            // arriving from now on starts a registration of its own.
            let failed = waiting.withLockedValue { waiting -> [Next] in
                defer { waiting = nil }
                return waiting ?? []
            }
            for next in failed { next(result) }
            return
        }
        while true {
            let batch = waiting.withLockedValue { waiting -> [Next] in
                let batch = waiting ?? []
                if batch.isEmpty {
                    done.store(true, ordering: .releasing)
                    waiting = nil
                } else {
                    waiting = []
                }
                return batch
            }
            if batch.isEmpty { return }
            for next in batch { next(result) }
        }
    }
}
