import Dispatch

/// Depot's store runtime: one implementation of ``Store`` over any ``StorageEngine``.
///
/// Everything a store does that does not depend on how rows are kept lives here, once:
/// admission and close (work submitted before ``close()`` runs to its end, later work is
/// refused with ``DepotError/Code/closed``), the writer's lane (writes one at a time in
/// submission order, queued writes sharing one commit when the engine groups them), the
/// pool of read connections, reference enforcement around every write, publication of
/// committed changes, logging and telemetry, and running a read or a write right on the
/// calling thread when that costs no blocking of Swift's cooperative pool.
///
/// ```swift
/// let store = EngineStore(engine: try SortedArrayEngine(), log: StoreLog(logger: logger))
/// ```
///
/// Closing follows one order on every backend: refuse new work, wait for admitted work,
/// end the change feed (observers' streams end), then ``StorageEngine/close()`` on the
/// writer's lane.
public final class EngineStore<Engine: StorageEngine>: Store, SchemaRewritingStore {
    /// The engine the store runs on.
    public let engine: Engine
    /// The committed changes of this store's writes.
    public let changes = ChangeFeed()
    /// Where the store logs.
    public let log: StoreLog
    /// The metrics and spans of ``log``, when they are on.
    public var telemetry: StoreTelemetry? { log.telemetry }
    /// The engine's ``StorageEngine/backendName``.
    public var backendName: String { engine.backendName }
    /// Whether the store refuses writes, migrations and new registrations.
    public var isReadOnly: Bool { engine.isReadOnly }

    let traits: EngineTraits
    package let gate: StoreGate
    /// Writes, registrations, rewrites, checks and closing, one at a time.
    package let writerLane: SerialLane
    /// Where reads run when they do not run on the calling thread.
    let readQueue: DispatchQueue
    /// The engine's read connections, by the numbers ``pool`` hands out.
    package let readConnections: [Engine.ReadConnection]
    /// Hands out ``readConnections``; nil when the engine's reads need none.
    package let pool: ReaderPool?
    private let storeDescription: String

    /// Runs a store on `engine`.
    ///
    /// - Parameters:
    ///   - engine: The engine, opened.
    ///   - log: Where the store logs, and its metrics and spans when they are on.
    public init(engine: Engine, log: StoreLog = .disabled) {
        self.engine = engine
        self.log = log
        self.traits = engine.traits
        self.storeDescription = engine.storeDescription
        self.gate = StoreGate(store: engine.storeDescription)
        self.writerLane = SerialLane(label: "depot.\(engine.backendName).writer", concurrent: engine.traits.writerOnConcurrentQueue)
        let readQueue = DispatchQueue(label: "depot.\(engine.backendName).readers", attributes: .concurrent)
        self.readQueue = readQueue
        let connections = engine.readConnections
        self.readConnections = connections
        self.pool = connections.isEmpty ? nil : ReaderPool(queues: connections.map { engine.readQueue(for: $0) ?? readQueue }, telemetry: log.telemetry)
        log.opened(engine.backendName, at: engine.location)
        // The lane and the feed, not the store: the engine must not keep its store alive,
        // and a weak reference would give the store a side table, which makes every retain
        // and release of it (each controller call makes some) take the runtime's slow path.
        // Once the store is gone the lane has stopped (a submission is dropped) and the
        // feed has finished (it has no one to deliver to).
        let lane = writerLane
        let changes = self.changes
        engine.start(EngineRuntime(
            publish: { changesOfCommit in lane.submit { changes.publish(changesOfCommit) } },
            publishTouched: { entities in lane.submit { changes.publishTouched(entities) } }))
    }

    /// A store released without ``close()`` still closes its engine, which may be blocking
    /// work (a checkpoint, a file to remove) that must not run on whatever thread dropped
    /// the last reference (often one of Swift's cooperative pool): the writer's lane does
    /// it, and this returns at once.
    deinit {
        // Every job holds the store, so none runs or waits any more.
        if !gate.isClosed {
            changes.finish()
            let engine = self.engine
            let log = self.log
            let close: @Sendable () -> Void = {
                engine.close()
                log.closed(engine.backendName, at: engine.location)
            }
            if !writerLane.submit(close) { close() }
        }
        writerLane.stop()
    }

    // MARK: Registration and schema

    /// Registers `entities` through the engine on the writer's lane, in submission order
    /// with the writes.
    public func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<[EntityHandle], any Error>) -> Void
    ) {
        writerLane.submit(admittedBy: gate, closed: DepotError.closed(storeDescription), {
            Result { try self.log.loggingFailure("registering entities") { try self.registerNow(entities) } }
        }, completion: completion)
    }

    private func registerNow(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        try gate.enterWithin()
        defer { gate.leave() }
        for entity in entities { try entity.validate() }
        var registered: [String: EntityDescription] = [:]
        for handle in try engine.entities() { registered[handle.name] = handle.entity }
        if engine.isReadOnly, !entities.allSatisfy({ registered[$0.name]?.serves($0) ?? false }) {
            // A read-only store serves the entities its files hold as declared, and no other.
            for handle in try engine.storedEntities() { registered[handle.name] = handle.entity }
            guard entities.allSatisfy({ registered[$0.name]?.serves($0) ?? false }) else {
                throw DepotError.readOnly(storeDescription)
            }
        }
        try Relationships.validate(entities, registered: { registered[$0] })
        // Indexes a declaration leaves out stay until a migration step drops them, on every
        // engine: the engine is handed the description it is to hold.
        return try engine.register(entities.map { declared in
            registered[declared.name].map { declared.keepingIndexes(of: $0) } ?? declared
        })
    }

    /// The handles of every entity the engine holds, registering the stored ones not yet
    /// registered.
    public func storedEntities() async throws -> [EntityHandle] {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed(storeDescription)) {
            try self.engine.storedEntities()
        }
    }

    /// Runs one migration step through the engine on the writer's lane and publishes the
    /// entities it touched.
    package func rewrite(
        _ name: String, as entity: EntityDescription, transform: @escaping @Sendable (Row) throws -> Row,
        ledgerRow: Row, ledger: EntityHandle
    ) async throws -> EntityHandle? {
        if engine.isReadOnly { throw DepotError.readOnly(storeDescription) }
        let handle = try await writerLane.run(admittedBy: gate, closed: DepotError.closed(storeDescription)) {
            try self.log.loggingFailure("rewriting \(name)") {
                try self.engine.rewrite(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
            }
        }
        guard let handle else { return nil }
        changes.publishTouched([name, entity.name, ledger.name])
        log.logger.info("Entity rewritten by a migration step", metadata: ["depot.entity": .string(name), "depot.newName": .string(entity.name)])
        return handle
    }

    /// The engine's ``StorageEngine/checkIntegrity()``, run on the writer's lane.
    public func checkIntegrity() async throws -> [String] {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed(storeDescription)) {
            try self.engine.checkIntegrity()
        }
    }

    // MARK: Reads

    /// Runs `body` in a read transaction on the store's read queue, on one of the engine's
    /// read connections when it has them.
    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitRead(singleStatement: false, body, completion: completion)
    }

    /// Admits a read and runs it: right here on a thread that may block (a task preferring
    /// the store's executor) when it need not wait for a connection, which saves the hop
    /// there and back; otherwise on the read queue, with a connection when the engine has
    /// them. Untyped, so that nothing here is generic over the caller's result type: this
    /// runs unspecialized, and a generic `Result` or closure would have its metadata looked
    /// up at run time on every read.
    @usableFromInline
    package func submitUntypedRead(
        singleStatement: Bool, _ body: @escaping @Sendable (any ReadTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        do { try gate.enter() } catch { return completion(.failure(error)) }
        guard let pool else {
            if StoreExecutor.isCurrent {
                let result = untypedRead(on: nil, singleStatement: singleStatement, body)
                gate.leave()
                return completion(result)
            }
            readQueue.async {
                let result = self.untypedRead(on: nil, singleStatement: singleStatement, body)
                self.gate.leave()
                completion(result)
            }
            return
        }
        pool.checkOut { reader in
            let result = self.untypedRead(on: self.readConnections[reader], singleStatement: singleStatement, body)
            pool.checkIn(reader)
            self.gate.leave()
            completion(result)
        }
    }

    /// An admitted untyped read, its outcome as a value (a `do`/`catch`: the generic
    /// `Result(catching:)` would look up metadata per call here).
    @inline(__always)
    private func untypedRead(
        on connection: Engine.ReadConnection?, singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void
    ) -> Result<Void, any Error> {
        do {
            try readNow(on: connection, singleStatement: singleStatement, body)
            return .success(())
        } catch {
            return .failure(error)
        }
    }

    /// One read transaction, logged, on `connection`; run again from the start when the
    /// engine asks for it (``EngineReadTransaction/retry``).
    @inline(__always)
    func readNow<T>(
        on connection: Engine.ReadConnection?, singleStatement: Bool, _ body: (any ReadTransaction) throws -> T
    ) throws -> T {
        try log.transaction("read") {
            var attempt = 0
            var runs = 0
            var previous: EngineRetry?
            var singleStatement = singleStatement
            while true {
                let transaction = try engine.beginRead(on: connection, singleStatement: singleStatement, after: previous, attempt: runs)
                runs += 1
                let value: T
                do {
                    value = try body(transaction)
                } catch {
                    // Read before the transaction ends: an engine may reuse it for the next read.
                    guard let retry = transaction.retry else {
                        transaction.end()
                        throw error
                    }
                    transaction.end()
                    try prepareRead(retry, attempt: &attempt, singleStatement: &singleStatement)
                    previous = retry
                    continue
                }
                guard let retry = transaction.retry else {
                    transaction.end()
                    return value
                }
                transaction.end()
                try prepareRead(retry, attempt: &attempt, singleStatement: &singleStatement)
                previous = retry
            }
        }
    }

    /// Prepares a read's next attempt: as a transaction when it went on to a second
    /// statement, otherwise through the engine on the writer's lane when the engine needs
    /// that.
    private func prepareRead(_ retry: EngineRetry, attempt: inout Int, singleStatement: inout Bool) throws {
        if retry.inTransaction, singleStatement {
            singleStatement = false
            return
        }
        attempt += 1
        try prepareRetry(retry, attempt: attempt, fromReader: true)
    }

    /// Has the engine prepare a transaction's next attempt on the writer's lane (a reader
    /// waits for the lane, a write is already on it), unless the retry needs no preparation.
    private func prepareRetry(_ retry: EngineRetry, attempt: Int, fromReader: Bool) throws {
        if log.tracing { log.trace("Running a transaction again", ["depot.reason": .string(retry.reason), "depot.attempt": .stringConvertible(attempt)]) }
        guard retry.needsPreparation else { return }
        guard fromReader else { return try engine.prepareRetry(retry, attempt: attempt) }
        let engine = self.engine
        try writerLane.runAndWait { try engine.prepareRetry(retry, attempt: attempt) }
    }

    /// Runs `body` right here when that blocks nothing it should not: the engine's reads
    /// never block, or this is a ``StoreExecutor`` thread and a read connection is idle.
    /// Returns `false`, without running it, otherwise.
    func readHere(singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        if traits.readsBlock, !StoreExecutor.isCurrent { return false }
        try gate.enter()
        defer { gate.leave() }
        guard let pool else {
            try readNow(on: nil, singleStatement: singleStatement, body)
            return true
        }
        guard let reader = pool.takeIdle() else { return false }
        defer { pool.checkIn(reader) }
        try readNow(on: readConnections[reader], singleStatement: singleStatement, body)
        return true
    }

    // MARK: Writes

    /// Runs `body` in a write transaction after every write submitted before it.
    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitWriteThroughUntyped(body, completion: completion)
    }

    /// Runs `body` in a write transaction after every write submitted before it; queued writes
    /// share one commit when the engine groups them.
    public func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        submitWrite(body, runHere: StoreExecutor.isCurrent, completion: completion)
    }

    /// Admits and queues a write; with `runHere`, runs it on the calling thread when the
    /// writer is idle.
    func submitWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void, runHere: Bool,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        if engine.isReadOnly { return completion(.failure(DepotError.readOnly(storeDescription))) }
        do { try gate.enter() } catch { return completion(.failure(error)) }
        let write = PendingWrite(body, completion: completion, runner: self, admittedBy: gate)
        if runHere, writerLane.runHereIfIdle(write: write) { return }
        if !writerLane.submit(write: write) { write.complete(failure: DepotError.closed(storeDescription)) }
    }

    // MARK: Closing

    /// Closes the store in the order described above: refuse, wait, end the feed, close the engine.
    /// Every call returns after the engine has closed, whichever call began closing.
    public func close() async {
        await gate.close {
            // After the last commit and before the engine's resources go: observers' streams
            // end with every commit delivered, instead of waiting forever.
            changes.finish()
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let accepted = writerLane.submit {
                    self.engine.close()
                    continuation.resume()
                }
                if !accepted { continuation.resume() }
            }
            writerLane.stop()
            log.closed(engine.backendName, at: engine.location)
        }
    }
}

extension EngineStore: WriteGroupRunner {
    /// Runs the writes the lane found queued one behind the other: in one transaction, each
    /// in a save point, when the engine groups writes (one commit for all; a closure that
    /// throws undoes only its own changes); otherwise each in a transaction of its own.
    /// Each caller gets its own result, observers one change set per write, in order.
    package func runWrites(_ group: [any GroupedWrite]) {
        if group.count == 1 || !traits.groupsWrites {
            for write in group {
                var failure: (any Error)?
                do { try writeAlone(write) } catch { failure = error }
                write.complete(failure: failure)
            }
            return
        }
        var pending = group[...]
        while !pending.isEmpty { pending = runGroup(pending) }
    }

    private func writeAlone(_ write: any GroupedWrite) throws {
        try gate.enterWithin()
        defer { gate.leave() }
        try log.transaction("write") {
            var attempt = 0
            var previous: EngineRetry?
            while true {
                let transaction = try engine.beginWrite(recordingKeys: changes.isObserved, after: previous, attempt: attempt)
                let retry: EngineRetry
                do {
                    try ReferenceEnforcement.run(transaction, transaction.relationships) { try write.perform($0) }
                    // The engine's request wins over a body that caught the error and returned.
                    guard let asked = transaction.retry else {
                        changes.publish(try transaction.commit())
                        if log.tracing { log.trace("Write transaction committed", ["depot.writes": "1", "depot.attempts": .stringConvertible(attempt + 1)]) }
                        return
                    }
                    retry = asked
                } catch {
                    guard let asked = transaction.retry else {
                        transaction.rollback()
                        throw error
                    }
                    retry = asked
                }
                transaction.rollback()
                attempt += 1
                try prepareRetry(retry, attempt: attempt, fromReader: false)
                previous = retry
            }
        }
    }

    /// Runs `group` in one transaction; returns the writes it did not get to (after an
    /// error that ended the transaction early), to run in another. When the engine asks for
    /// a retry, the whole group runs again from the start; so every write's outcome is
    /// told only once the group's transaction is over.
    private func runGroup(_ group: ArraySlice<any GroupedWrite>) -> ArraySlice<any GroupedWrite> {
        do { try gate.enterWithin() } catch {
            for write in group { write.complete(failure: error) }
            return []
        }
        defer { gate.leave() }
        var attempt = 0
        var previous: EngineRetry?
        attempts: while true {
            let transaction: Engine.Writing
            do {
                transaction = try engine.beginWrite(recordingKeys: changes.isObserved, after: previous, attempt: attempt)
            } catch {
                for write in group { write.complete(failure: error) }
                return []
            }
            var outcomes: [(write: any GroupedWrite, recorder: ChangeRecorder?, failure: (any Error)?)] = []
            outcomes.reserveCapacity(group.count)
            var index = group.startIndex
            while index < group.endIndex {
                let write = group[index]
                index += 1
                do {
                    try transaction.savepoint()
                    try log.transaction("write") {
                        try ReferenceEnforcement.run(transaction, transaction.relationships) { try write.perform($0) }
                    }
                    guard let retry = transaction.retry else {
                        outcomes.append((write, try transaction.releaseSavepoint(), nil))
                        continue
                    }
                    if retryGroup(group, transaction, retry, attempt: &attempt) {
                        previous = retry
                        continue attempts
                    }
                    return []
                } catch {
                    guard let retry = transaction.retry else {
                        if (try? transaction.rollbackToSavepoint()) != nil {
                            // Only this write's changes are undone; the group goes on.
                            outcomes.append((write, nil, error))
                            continue
                        }
                        // The engine abandoned the whole transaction: the writes before this
                        // one are lost with it; the ones after it run in a transaction of
                        // their own.
                        transaction.rollback()
                        let lost = Self.lostWithGroup(error)
                        for outcome in outcomes { outcome.write.complete(failure: outcome.failure ?? lost) }
                        write.complete(failure: error)
                        return group[index...]
                    }
                    if retryGroup(group, transaction, retry, attempt: &attempt) {
                        previous = retry
                        continue attempts
                    }
                    return []
                }
            }
            do {
                _ = try transaction.commit()
            } catch {
                if let retry = transaction.retry {
                    if retryGroup(group, transaction, retry, attempt: &attempt) {
                        previous = retry
                        continue attempts
                    }
                    return []
                }
                transaction.rollback()
                for outcome in outcomes { outcome.write.complete(failure: outcome.failure ?? error) }
                return []
            }
            if log.tracing { log.trace("Write transaction committed", ["depot.writes": .stringConvertible(outcomes.count), "depot.attempts": .stringConvertible(attempt + 1)]) }
            for outcome in outcomes {
                if let recorder = outcome.recorder { changes.publish(recorder) }
                outcome.write.complete(failure: outcome.failure)
            }
            return []
        }
    }

    /// Rolls back a group's transaction whose engine asked for `retry` (every write of it
    /// runs again) and prepares the next attempt; when the engine gives up, fails every
    /// write of the group (nothing of them was kept) and returns `false`.
    private func retryGroup(
        _ group: ArraySlice<any GroupedWrite>, _ transaction: Engine.Writing, _ retry: EngineRetry, attempt: inout Int
    ) -> Bool {
        transaction.rollback()
        attempt += 1
        do {
            try prepareRetry(retry, attempt: attempt, fromReader: false)
            return true
        } catch {
            for write in group { write.complete(failure: error) }
            return false
        }
    }

    /// What a write of a group gets when a later write's failure made the engine abandon
    /// the transaction they shared.
    static func lostWithGroup(_ cause: any Error) -> DepotError {
        let cause = cause as? DepotError
        return DepotError(
            cause?.code ?? .backend,
            "The transaction this write shared with others was rolled back after an error in another write (\(cause?.message ?? "see that error")); nothing of it was kept. Retry the operation.",
            nativeCode: cause?.nativeCode)
    }
}

// MARK: Reads and writes that skip a hop

extension EngineStore: InlineReadingStore {
    @usableFromInline
    package var readsInline: Bool { !traits.readsBlock }

    @usableFromInline

    package func readInline<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try gate.enter()
        defer { gate.leave() }
        return try readNow(on: nil, singleStatement: false, body)
    }
}

extension EngineStore: InlineWritingStore {
    @usableFromInline
    package var writesInline: Bool { !traits.writesBlock }

    @usableFromInline

    package func submitUntypedWriteRunningHereIfIdle(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        submitWrite(body, runHere: !traits.writesBlock || StoreExecutor.isCurrent, completion: completion)
    }
}

extension EngineStore: ExecutorReadingStore {
    @usableFromInline
    package func readOnCallingThread(singleStatement: Bool, _ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        try readHere(singleStatement: singleStatement, body)
    }
}

extension EngineStore: UntypedReadingStore {}

extension EngineStore: SingleStatementExecutorReadingStore {
    @usableFromInline
    package func readOneStatementOnCallingThread(_ body: (any ReadTransaction) throws -> Void) throws -> Bool {
        try readHere(singleStatement: true, body)
    }
}

extension EngineStore: RowReadingStore {
    @usableFromInline
    package func submitRowRead(
        _ entity: EntityHandle, key: Value, visit: @escaping @Sendable (any ColumnReader) throws -> Void,
        completion: @escaping @Sendable (Result<Bool, any Error>) -> Void
    ) {
        submitRead(singleStatement: true, { try $0.fetchRow(entity, key: key, visit) }, completion: completion)
    }

    /// One row by key, as ``submitRowRead(_:key:visit:completion:)``, without retaining the
    /// store: its submitter keeps it alive until `read.finish` (see `RowReadingStore`).
    @usableFromInline
    package func submitRowRead(_ read: any RowRead) {
        do { try gate.enter() } catch { return read.finish(.failure(error)) }
        if let pool {
            // A connection to wait for: the job holds the store until it has run. Not the
            // generic `submitRead`, which, unspecialized here, looks up the metadata of its
            // result type at run time on every call.
            pool.checkOut { reader in
                let result = self.readRow(read, on: self.readConnections[reader])
                pool.checkIn(reader)
                self.gate.leave()
                read.finish(result)
            }
            return
        }
        if StoreExecutor.isCurrent { return readRowNow(read) }
        let store = Unmanaged.passUnretained(self)
        readQueue.async { store._withUnsafeGuaranteedRef { $0.readRowNow(read) } }
    }

    /// The read of an admitted ``submitRowRead(_:)``, which it ends.
    private func readRowNow(_ read: any RowRead) {
        let result = readRow(read, on: nil)
        gate.leave()
        read.finish(result)
    }

    /// The lookup of an admitted ``submitRowRead(_:)``, on `connection`. A `do`/`catch`
    /// rather than `Result(catching:)`, whose generic initializer looks up the result
    /// type's metadata at run time on every call.
    @inline(__always)
    private func readRow(_ read: any RowRead, on connection: Engine.ReadConnection?) -> Result<Bool, any Error> {
        do {
            return .success(try readNow(on: connection, singleStatement: true) { try $0.fetchRow(read.entity, key: read.key) { try read.visit($0) } })
        } catch {
            return .failure(error)
        }
    }
}
