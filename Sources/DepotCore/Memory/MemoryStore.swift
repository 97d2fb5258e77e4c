import Dispatch
import HashTreeCollections
import NIOConcurrencyHelpers
import Synchronization

/// The in-memory backend: the reference implementation of Depot's semantics, and the
/// store to use in tests.
///
/// Readers work on a copy-on-write snapshot taken when their transaction starts, so they
/// never wait for the writer and never see its uncommitted changes. Writers are
/// serialized in submission order: a write runs right on the calling thread when no other
/// write is running or queued (it only touches memory, so it never blocks), else it queues
/// behind them and its caller is resumed when it has run. A writer changes working copies of the
/// tables it touches (persistent B+ trees ordered by primary key, so a copy costs O(1) and
/// a write copies only the nodes on its path) and swaps them in only when its closure returns, so a throw
/// leaves nothing behind.
///
/// ```swift
/// let store = MemoryStore()
/// let cats = Controller<Cat, CatRecord>(store: store)
/// ```
///
/// Nothing is persisted: the data lives as long as the store.
public final class MemoryStore: InlineReadingStore, InlineWritingStore {
    /// A registered entity (every backend calls its per-entity state by this name): its
    /// description and its rows.
    struct RegisteredEntity: Sendable {
        var entity: EntityDescription
        /// The rows in primary key order, in a persistent B+ tree: a commit while readers
        /// hold a snapshot copies only the nodes on the changed paths, not the whole table.
        var rows = RowTree()
        /// For each unique attribute position: value → primary key.
        var unique: [Int: TreeDictionary<Value, Value>] = [:]

        init(entity: EntityDescription) {
            self.entity = entity
            for (i, a) in entity.attributes.enumerated() where a.isUnique { unique[i] = [:] }
        }
    }

    struct Snapshot: Sendable {
        var tables = EntityRegistry<RegisteredEntity>()
    }

    struct State: Sendable {
        var snapshot = Snapshot()
    }

    let state = NIOLockedValueBox(State())
    /// Writes, registrations and rewrites, one at a time in submission order.
    private let writerLane = SerialLane(label: "depot.memory.writer", concurrent: false)
    private let readers = DispatchQueue(label: "depot.memory.readers", attributes: .concurrent)
    private let gate = StoreGate(store: "memory store")
    public let changes = ChangeFeed()

    public var backendName: String { "memory" }

    /// Where the store logs.
    public let log: StoreLog
    public var telemetry: StoreTelemetry? { log.telemetry }

    /// Whether the store refuses every write, registration and rewrite
    /// (`DepotError.readOnly(_:)`). A read-only memory store stays empty: it is what
    /// `memory:?readOnly=true` opens, so that reading code behaves alike on every backend.
    public let isReadOnly: Bool

    /// Creates an empty store.
    ///
    /// - Parameters:
    ///   - log: Where the store logs (nothing by default).
    ///   - readOnly: Refuse every write, registration and rewrite (false by default).
    public init(log: StoreLog = .disabled, readOnly: Bool = false) {
        self.log = log
        self.isReadOnly = readOnly
        log.opened("memory", at: "memory:")
    }

    // MARK: Work accounting

    private func begin() throws(DepotError) -> Snapshot {
        try gate.enter()
        return state.withLockedValue { $0.snapshot }
    }

    /// Admission of a transaction run by work admitted when it was submitted (see
    /// `StoreGate.enterWithin()`): not refused while a close waits for that work.
    private func beginWithin() throws(DepotError) -> Snapshot {
        try gate.enterWithin()
        return state.withLockedValue { $0.snapshot }
    }

    private func end() { gate.leave() }

    // MARK: Store

    public func submitRegistration(
        _ entities: [EntityDescription], completion: @escaping @Sendable (Result<[EntityHandle], any Error>) -> Void
    ) {
        writerLane.submit(admittedBy: gate, closed: DepotError.closed("memory store"), {
            Result { try self.log.loggingFailure("registering entities") { try self.registerNow(entities) } }
        }, completion: completion)
    }

    private func registerNow(_ entities: [EntityDescription]) throws -> [EntityHandle] {
        _ = try beginWithin()
        defer { end() }
        for entity in entities { try entity.validate() }
        return try state.withLockedValue { s in
            let registered = s.snapshot.tables
            if isReadOnly, !entities.allSatisfy({ registered[$0.name]?.entity == $0 }) {
                throw DepotError.readOnly("memory store")
            }
            try Relationships.validate(entities, registered: { registered[$0]?.entity })
            var handles: [EntityHandle] = []
            for entity in entities {
                guard let existing = s.snapshot.tables[entity.name]?.entry else {
                    handles.append(s.snapshot.tables.set(entity, RegisteredEntity(entity: entity)))
                    log.schemaCreated(entity)
                    continue
                }
                if existing.entity == entity {
                    handles.append(s.snapshot.tables.set(entity, existing))
                    continue
                }
                let migration = try SchemaMigration.plan(from: existing.entity, to: entity)
                if !existing.rows.isEmpty {
                    for attribute in migration.defaultedReferences {
                        let target = s.snapshot.tables[attribute.reference?.entity ?? ""]?.entry.rows
                        if let value = attribute.defaultValue, target?[value] == nil {
                            throw SchemaMigration.missingDefaultTarget(attribute, in: entity.name)
                        }
                    }
                }
                log.schemaMigrated(migration)
                var table = RegisteredEntity(entity: entity)
                let keyIndex = entity.primaryKeyIndex
                existing.rows.forEach { row in
                    let migrated = migration.migrate(row)
                    let key = migrated[value: keyIndex]
                    table.rows.updateValue(migrated, forKey: key)
                    for position in table.unique.keys where !migrated[value: position].isNull {
                        table.unique[position]?[migrated[value: position]] = key
                    }
                    return true
                }
                handles.append(s.snapshot.tables.set(entity, table))
            }
            return handles
        }
    }

    public func submitRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        do { _ = try begin() } catch { return completion(.failure(error)) }
        readers.async {
            let result = Result { try self.readNow(body) }
            self.end()
            completion(result)
        }
    }

    /// Reads may run on the calling task (``InlineReadingStore``): they touch only memory
    /// and never wait for a writer, so there is no blocking work to move off the
    /// cooperative pool.
    public func readInline<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        _ = try begin()
        defer { end() }
        return try readNow(body)
    }

    private func readNow<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        try log.transaction("read") { try readInSnapshot(body) }
    }

    private func readInSnapshot<T>(_ body: (any ReadTransaction) throws -> T) throws -> T {
        let snapshot = try beginWithin()
        defer { end() }
        let transaction = MemoryTransaction(base: snapshot, writable: false)
        defer { transaction.isFinished = true }
        return try body(transaction)
    }

    public func submitWrite<T: Sendable>(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        submitWriteThroughUntyped(body, completion: completion)
    }

    public func submitUntypedWrite(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        if isReadOnly { return completion(.failure(DepotError.readOnly("memory store"))) }
        do { _ = try begin() } catch { return completion(.failure(error)) }
        submit(PendingWrite(body, completion: completion, runner: self, admittedBy: gate))
    }

    /// An awaited write runs right on the calling thread when the writer is idle (nothing
    /// running, nothing queued): a memory write never blocks, so it needs no hop to another
    /// thread and back, as awaited reads need none (W3, 1,000 awaited saves: see the
    /// README). Otherwise it queues behind the writes before it.
    public func submitUntypedWriteRunningHereIfIdle(
        _ body: @escaping @Sendable (any WriteTransaction) throws -> Void,
        completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        if isReadOnly { return completion(.failure(DepotError.readOnly("memory store"))) }
        do { _ = try begin() } catch { return completion(.failure(error)) }
        let write = PendingWrite(body, completion: completion, runner: self, admittedBy: gate)
        if writerLane.runHereIfIdle(write: write) { return }
        submit(write)
    }

    /// Queues an admitted write on the writer's lane.
    private func submit(_ write: PendingWrite) {
        guard writerLane.submit(write: write) else {
            return write.complete(failure: DepotError.closed("memory store"))
        }
    }

    private func writeNow<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        try log.transaction("write") { try writeInWorkingCopies(body) }
    }

    private func writeInWorkingCopies<T>(_ body: (any WriteTransaction) throws -> T) throws -> T {
        let snapshot = try beginWithin()
        defer { end() }
        // Made as the write begins, like every backend's: it decides whether each key is
        // recorded or only the entities touched.
        var recorder = changes.makeRecorder()
        let transaction = MemoryTransaction(base: snapshot, writable: true, recordsKeys: recorder.isDetailed)
        let result: T
        do {
            result = try ReferenceEnforcement.run(transaction, snapshot.tables.relationships, body)
            transaction.isFinished = true
        } catch {
            transaction.isFinished = true
            throw error
        }
        for working in transaction.working where working.wasWritten {
            let name = working.table.entity.name
            guard recorder.isDetailed else {
                recorder.recordTouched(entity: name)
                continue
            }
            let before = snapshot.tables[slot: working.slot]?.entry.rows
            for key in working.written {
                recorder.record(entity: name, key: key, existedBefore: before?[key] != nil, existsAfter: working.table.rows[key] != nil)
            }
        }
        state.withLockedValue { s in
            // Writers are serialized, so the committed tables are still the ones the
            // transaction started from: its working copies replace them.
            for working in transaction.working {
                s.snapshot.tables.modify(slot: working.slot) { $0 = working.table }
            }
        }
        changes.publish(recorder)
        return result
    }

    public func close() async {
        let first = await gate.close()
        // After the last commit and before the records go: observations end with `closed`
        // instead of waiting forever.
        changes.finish()
        state.withLockedValue { $0.snapshot = Snapshot() }
        if first { log.closed("memory", at: "memory:") }
    }
}

extension MemoryStore: CatalogStore {
    public func storedEntities() async throws -> [EntityHandle] {
        state.withLockedValue { $0.snapshot.tables.all.map(\.handle) }
    }
}

extension MemoryStore: SchemaRewritingStore {
    public func rewrite(
        _ name: String, as entity: EntityDescription, transform: @escaping @Sendable (Row) throws -> Row,
        ledgerRow: Row, ledger: EntityHandle
    ) async throws -> EntityHandle? {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed("memory store")) {
            try self.rewriteNow(name, as: entity, transform: transform, ledgerRow: ledgerRow, ledger: ledger)
        }
    }

    private func rewriteNow(
        _ name: String, as entity: EntityDescription, transform: (Row) throws -> Row, ledgerRow: Row, ledger: EntityHandle
    ) throws -> EntityHandle? {
        if isReadOnly { throw DepotError.readOnly("memory store") }
        _ = try beginWithin()
        defer { end() }
        let handle = try state.withLockedValue { s -> EntityHandle? in
            // A copy: the snapshot changes only once everything below has succeeded.
            var tables = s.snapshot.tables
            // The step applied meanwhile (the rule every backend keeps; see
            // SchemaRewritingStore): nothing to rewrite.
            if let ledgerRows = tables[ledger.name]?.entry.rows, ledgerRows[ledgerRow[value: ledger.entity.primaryKeyIndex]] != nil {
                return nil
            }
            guard let old = tables[name]?.entry else { throw DepotError.notRegistered(name) }
            let links = tables.relationships.incoming.values.flatMap { $0 }
            try SchemaRewrite.check(renaming: old.entity, to: entity, registered: { tables[$0]?.entity }, relationships: links)
            var rows: [Row] = []
            old.rows.forEach { rows.append($0); return true }
            var table = RegisteredEntity(entity: entity)
            for row in rows {
                let new = try transform(row)
                let key = try entity.check(new)
                if table.rows[key] != nil { throw DepotError.duplicateKey(entity: entity.name, key: key) }
                for position in table.unique.keys where !new[value: position].isNull {
                    if table.unique[position]?[new[value: position]] != nil {
                        throw DepotError.duplicateUnique(entity: entity.name, attribute: entity.attributes[position].name, value: new[value: position])
                    }
                    table.unique[position]?[new[value: position]] = key
                }
                _ = table.rows.updateValue(new, forKey: key)
            }
            for (position, attribute) in entity.attributes.enumerated() {
                guard let target = attribute.reference?.entity else { continue }
                let targetRows = target == entity.name ? table.rows : tables[target]?.entry.rows
                var problem: DepotError?
                table.rows.forEach { row in
                    let value = row[value: position]
                    if !value.isNull && targetRows?[value] == nil {
                        problem = SchemaRewrite.missingTarget(entity, key: row[value: entity.primaryKeyIndex], attribute: position, value: value)
                        return false
                    }
                    return true
                }
                if let problem { throw problem }
            }
            if entity.name != name { tables.remove(named: name) }
            let handle = tables.set(entity, table)
            guard var ledgerTable = tables[ledger.name]?.entry else { throw DepotError.notRegistered(ledger.name) }
            let key = try ledgerTable.entity.check(ledgerRow)
            if ledgerTable.rows[key] != nil { throw DepotError.duplicateKey(entity: ledger.name, key: key) }
            _ = ledgerTable.rows.updateValue(ledgerRow, forKey: key)
            tables.set(ledgerTable.entity, ledgerTable)
            s.snapshot.tables = tables
            return handle
        }
        guard let handle else { return nil }
        changes.publishTouched([name, entity.name, ledger.name])
        log.logger.info("Entity rewritten by a migration step", metadata: ["depot.entity": .string(name), "depot.newName": .string(entity.name)])
        return handle
    }
}

extension MemoryStore: WriteGroupRunner {
    /// Writes queued together each run in a transaction of their own: a memory commit has
    /// no sync to share, and one write's failure then never touches another's.
    package func runWrites(_ group: [any GroupedWrite]) {
        for write in group {
            var failure: (any Error)?
            do { try writeNow { try write.perform($0) } } catch { failure = error }
            write.complete(failure: failure)
        }
    }
}
