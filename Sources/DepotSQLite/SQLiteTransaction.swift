import CSQLite
public import DepotCore

/// A read or write transaction of ``SQLiteEngine`` on one connection: an SQL transaction
/// (`BEGIN`, or `BEGIN IMMEDIATE` on the writer), or a read of one statement in autocommit
/// mode. Used by one thread at a time, as its connection is: its state is
/// `@exclusivity(unchecked)` for the reason `Statement` gives.
public final class SQLiteTransaction: EngineReadTransaction, EngineWriteTransaction {
    let connection: Connection
    /// The registry handles resolve in, shared with the transactions that began with it.
    let shared: SharedRegistry<RegisteredEntity>
    var tables: EntityRegistry<RegisteredEntity> {
        @inline(__always) _read { yield shared.registry }
    }
    let writable: Bool
    /// Whether the engine opened an SQL transaction around this one; a read of one
    /// statement runs in autocommit mode instead (see `SQLiteEngine.beginRead`).
    let explicit: Bool
    /// Collects changes for the feed (only the touched entities when nobody observed it as
    /// the transaction began).
    @exclusivity(unchecked) var recorder: ChangeRecorder
    @exclusivity(unchecked) var isFinished = false
    /// A read of one statement in autocommit mode (see `SQLiteEngine.beginRead`): its first
    /// statement runs; a second is refused and the transaction asks to run again as a
    /// transaction, so that its statements share one snapshot.
    @exclusivity(unchecked) var single = SingleStatementRead()
    /// The reader connection a read claimed from sweeps of kept transactions, given back
    /// when the read ends (see ``KeptSnapshots``).
    let claimed: SQLiteEngine.Reader?
    /// The store's kept transactions, for a read of one statement in one of them.
    let kept: KeptSnapshots?

    init(
        connection: Connection, tables: SharedRegistry<RegisteredEntity>, writable: Bool, recorder: ChangeRecorder = ChangeRecorder(detailed: false),
        explicit: Bool = true, claimed: SQLiteEngine.Reader? = nil, kept: KeptSnapshots? = nil
    ) {
        self.connection = connection
        self.shared = tables
        self.writable = writable
        self.explicit = explicit
        self.recorder = recorder
        self.claimed = claimed
        self.kept = kept
        connection.lastError = nil
    }

    @inline(__always)
    private func table(_ entity: EntityHandle) throws(DepotError) -> RegisteredEntity {
        if isFinished {
            throw DepotError.transactionEnded
        }
        // The schema moved under this read: it runs again once the registry is reloaded.
        if connection.schemaMoved {
            throw DepotError(.schemaMismatch, "The schema of \(connection.path) was changed by another process; the read runs again with the new schema.")
        }
        // SQLite rolls a whole transaction back on some errors (a full disk, an I/O error);
        // statements run after that would each commit on their own.
        if explicit && !connection.isInTransaction { throw DepotError.rolledBack(after: connection.lastError) }
        return try tables.resolve(entity)
    }

    /// The statement of `query` as a `kind` statement, marked in use, and its parameters:
    /// kept per request shape on the connection (as a select's is; a count and a delete
    /// bind the same parameters in the same order as the select of their request), or
    /// compiled each time when the request's parameters are derived by the dialect.
    private func shapedStatement(
        _ query: Query, _ kind: SelectShape.Kind, table: RegisteredEntity,
        compile: () throws(DepotError) -> CompiledQuery
    ) throws(DepotError) -> (Statement, [Binding]) {
        guard let (tokens, values) = SQLiteDialect.selectShape(query) else {
            let compiled = try compile()
            return (try connection.statement(sql: compiled.sql), compiled.parameters)
        }
        let shape = SelectShape(serial: table.serial, kind: kind, tokens: tokens)
        let statement = try connection.statement(shape: shape, table: table) { () throws(DepotError) in try compile().sql }.statement
        return (statement, values)
    }

    private func bind(_ bindings: [Binding], to statement: Statement) throws(DepotError) {
        for (i, binding) in bindings.enumerated() {
            try connection.bind(binding, at: Int32(i + 1), in: statement)
        }
    }

    // MARK: ReadTransaction

    /// The rows `query` selects, in its order, each read through one column reader.
    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        let table = try table(query.handle)
        try single.countStatement()
        if query.limit == 0 { return }
        if let limit = query.limit {
            // A page: at most `limit` rows, whatever the table holds. Counting the table
            // here would make every first page cost a walk of the whole table.
            if limit <= 4096 { reserve(limit) }
        } else if query.filter == .constant(true) {
            // Every row: counting a table walks its b-tree without decoding a row, cheaper
            // than growing the caller's array step by step.
            reserve(max(0, try countAll(table) - query.offset))
        }
        let statement: Statement
        let columns: StatementColumns
        let parameters: [Binding]
        if let (tokens, values) = SQLiteDialect.selectShape(query) {
            // A list page asks the same shape again and again with other values: its
            // statement is prepared once per connection, only the parameters are walked
            // each time.
            let shape = SelectShape(serial: table.serial, kind: .select, tokens: tokens)
            let shaped = try connection.statement(shape: shape, table: table) { () throws(DepotError) in
                try QueryCompiler.select(query, table: table).sql
            }
            statement = shaped.statement
            columns = shaped.columns
            parameters = values
        } else {
            let compiled = try QueryCompiler.select(query, table: table)
            statement = try connection.statement(sql: compiled.sql)
            columns = StatementColumns(statement, table: table)
            parameters = compiled.parameters
        }
        defer { connection.release(statement) }
        try bind(parameters, to: statement)
        while try connection.step(statement, "Fetching \(table.entity.name) records") {
            try body(columns)
        }
    }

    private func countAll(_ table: RegisteredEntity) throws(DepotError) -> Int {
        let statement = try connection.statement(key: table.key(.countAll)) { table.countAll }
        defer { connection.release(statement) }
        guard try connection.step(statement, "Counting \(table.entity.name) records") else { return 0 }
        return Int(sqlite3_column_int64(statement.handle, 0))
    }

    /// The row of `entity` whose key is `key`, when there is one.
    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let table = try table(entity)
        try single.countStatement()
        return try Self.fetchRow(entity, key: key, table: table, on: connection, body)
    }

    /// One row by key on `connection`: the lookup `fetchRow` makes, and what a single-row
    /// read in autocommit mode runs without a transaction object around it.
    static func fetchRow(
        _ entity: EntityHandle, key: Value, table: RegisteredEntity, on connection: Connection, _ body: (any ColumnReader) throws -> Void
    ) throws -> Bool {
        // A key of another type is in no row (SQLite's affinity would otherwise turn the
        // integer 5 into the text '5').
        guard key.type == table.keyType else { return false }
        let statement = try connection.statement(key: table.key(.selectByKey)) { table.selectByKey }
        defer { connection.release(statement) }
        try connection.bind(key, at: 1, in: statement)
        guard try connection.step(statement, "Reading a \(entity.name) record") else { return false }
        // One reader per connection for lookups by key on its cached statement: no
        // allocation per lookup (see `Connection.rowColumns`).
        let columns: StatementColumns
        if let cached = connection.rowColumns, cached.statement == statement.handle, cached.serial == table.serial {
            columns = cached.columns
        } else {
            columns = StatementColumns(statement, table: table)
            connection.rowColumns = (statement.handle, table.serial, columns)
        }
        try body(columns)
        return true
    }

    /// How many rows `query` selects.
    public func count(_ query: Query) throws -> Int {
        let table = try table(query.handle)
        try single.countStatement()
        if query.filter == .constant(true) && query.limit == nil && query.offset == 0 {
            return try countAll(table)
        }
        let (statement, parameters) = try shapedStatement(query, .count, table: table) { () throws(DepotError) in
            try QueryCompiler.count(query, table: table)
        }
        defer { connection.release(statement) }
        try bind(parameters, to: statement)
        guard try connection.step(statement, "Counting \(table.entity.name) records") else { return 0 }
        return Int(sqlite3_column_int64(statement.handle, 0))
    }

    /// The groups and values of `query`, computed by SQLite.
    public func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        let table = try table(query.rows.handle)
        try single.countStatement()
        let compiled = try QueryCompiler.aggregate(query, table: table)
        let statement = try connection.statement(sql: compiled.sql)
        defer { connection.release(statement) }
        try bind(compiled.parameters, to: statement)
        let entity = query.entity
        // Result columns: the group keys, then one per function, each read by its type.
        var types = query.groupBy.map { entity.attributes[$0].type }
        for function in query.functions {
            switch function {
            case .minimum(let i), .maximum(let i): types.append(entity.attributes[i].type)
            default: types.append(.int64)
            }
        }
        let columns = StatementColumns(statement, types: types, entity: entity.name)
        let keyCount = query.groupBy.count
        var result: [AggregateRow] = []
        while try connection.step(statement, "Aggregating \(entity.name) records") {
            var keys: [Value] = []
            for index in 0..<keyCount { keys.append(try columns.value(index)) }
            var values: [Value] = []
            for (offset, function) in query.functions.enumerated() {
                let column = keyCount + offset
                switch function {
                case .count, .countValues:
                    values.append(.int(sqlite3_column_int64(statement.handle, Int32(column))))
                case .minimum, .maximum:
                    values.append(try columns.value(column))
                case .sum, .average:
                    var accumulator = AggregateAccumulator(function, in: entity)
                    try AccumulatorState.merge(statement.handle, column: Int32(column), into: &accumulator, entity: entity.name)
                    values.append(try accumulator.result())
                }
            }
            result.append(AggregateRow(keys: keys, values: values))
        }
        return result
    }

    // MARK: WriteTransaction

    private func writableTable(_ entity: EntityHandle) throws(DepotError) -> RegisteredEntity {
        let table = try table(entity)
        if !writable {
            throw DepotError.writeInRead
        }
        return table
    }

    /// Binds every attribute of `row` at its position, checking it against the schema the
    /// way the memory store does (SQLite itself would store a text in an INTEGER column).
    @inline(__always)
    private func bindRow(_ row: Row, table: RegisteredEntity, to statement: Statement) throws(DepotError) {
        _ = try table.entity.check(row)
        for i in 0..<row.count {
            try connection.bind(row[value: i], at: Int32(i + 1), in: statement)
        }
    }

    /// Runs a bound writing statement, turning constraint failures into Depot's words.
    @inline(__always)
    private func runWrite(_ statement: Statement, row: Row, table: RegisteredEntity, what: String) throws(DepotError) {
        let rc = sqlite3_step(statement.handle)
        if rc == SQLITE_DONE || rc == SQLITE_ROW { return }
        throw constraintError(rc, row: row, table: table, what: what)
    }

    private func constraintError(_ rc: Int32, row: Row, table: RegisteredEntity, what: String) -> DepotError {
        let key = row[value: table.keyIndex]
        let entity = table.entity.name
        switch rc {
        case SQLiteCode.constraintPrimaryKey:
            return DepotError(.duplicateKey, "A \(entity) with primary key \(key.debugLiteral) already exists. Use save(_:) to upsert or update(_:) to change it.", nativeCode: rc)
        case SQLiteCode.constraintUnique:  // SQLite's message names the column.
            let detail = connection.handle.flatMap { sqlite3_errmsg($0) }.map { String(cString: $0) } ?? "UNIQUE constraint failed"
            // A declared unique index: SQLite names its columns, `Pet.species, Pet.name`.
            if let index = table.entity.indexes.first(where: { index in
                index.isUnique && detail.hasSuffix(": " + index.components.map { "\(entity).\($0.attribute)" }.joined(separator: ", "))
            }) {
                // Worded as every backend words it, with SQLite's code kept.
                let refusal = DepotError.duplicateUnique(entity: table.entity, index: index, row: row)
                return DepotError(refusal.code, refusal.message, nativeCode: rc)
            }
            if let attribute = table.entity.attributes.first(where: { detail.hasSuffix(".\($0.name)") }) {
                let value = table.entity.index(of: attribute.name).map { row[value: $0] } ?? .null
                // Worded as every backend words it, with SQLite's code kept.
                let refusal = DepotError.duplicateUnique(entity: entity, attribute: attribute.name, value: value)
                return DepotError(refusal.code, refusal.message, nativeCode: rc)
            }
            return DepotError(.duplicateKey, "\(what) the \(entity) with primary key \(key.debugLiteral) would duplicate a unique value (\(detail)).", nativeCode: rc)
        default:
            return connection.error(rc, "\(what) the \(entity) with primary key \(key.debugLiteral)")
        }
    }

    /// Inserts `row`; a key or unique value already present is refused.
    public func insert(_ row: Row, into entity: EntityHandle) throws {
        let table = try writableTable(entity)
        let statement = try connection.statement(key: table.key(.insert)) { table.insert }
        defer { connection.release(statement) }
        try bindRow(row, table: table, to: statement)
        try runWrite(statement, row: row, table: table, what: "Inserting")
        recorder.record(entity: entity.name, key: row[value: table.keyIndex], existedBefore: false, existsAfter: true)
    }

    /// Inserts `row`, or replaces the row with its key; returns whether it inserted.
    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        let table = try writableTable(entity)
        // Insert unless the key exists, then update in place: one statement for a new
        // row, and `changes` says which case it was (an upsert's DO UPDATE would not).
        let inserted: Bool
        do {
            let statement = try connection.statement(key: table.key(.insertUnlessKeyExists)) { table.insertUnlessKeyExists }
            defer { connection.release(statement) }
            try bindRow(row, table: table, to: statement)
            try runWrite(statement, row: row, table: table, what: "Saving")
            inserted = connection.changes > 0
        }
        if !inserted {
            let statement = try connection.statement(key: table.key(.update)) { table.update }
            defer { connection.release(statement) }
            try bindRow(row, table: table, to: statement)
            try runWrite(statement, row: row, table: table, what: "Saving")
        }
        recorder.record(entity: entity.name, key: row[value: table.keyIndex], existedBefore: !inserted, existsAfter: true)
        return inserted
    }

    /// Replaces the row with `row`'s key; a missing row is refused.
    public func update(_ row: Row, in entity: EntityHandle) throws {
        let table = try writableTable(entity)
        let statement = try connection.statement(key: table.key(.update)) { table.update }
        defer { connection.release(statement) }
        try bindRow(row, table: table, to: statement)
        try runWrite(statement, row: row, table: table, what: "Updating")
        let key = row[value: table.keyIndex]
        if connection.changes == 0 {
            throw DepotError(.notFound, "No \(entity.name) has primary key \(key.debugLiteral). Insert it first, or use save(_:) to upsert.")
        }
        recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: true)
    }

    /// Deletes the row whose key is `key`; returns whether there was one.
    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        let table = try writableTable(entity)
        guard key.type == table.keyType else { return false }
        let statement = try connection.statement(key: table.key(.deleteByKey)) { table.deleteByKey }
        defer { connection.release(statement) }
        try connection.bind(key, at: 1, in: statement)
        _ = try connection.step(statement, "Deleting the \(entity.name) with primary key \(key.debugLiteral)")
        let deleted = connection.changes > 0
        if deleted { recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: false) }
        return deleted
    }

    /// Deletes the rows `query` selects; returns how many.
    public func delete(_ query: Query) throws -> Int {
        let table = try writableTable(query.handle)
        if query.limit == 0 { return 0 }
        let recording = recorder.isDetailed
        let (statement, parameters) = try shapedStatement(query, .delete(returningKeys: recording), table: table) { () throws(DepotError) in
            try QueryCompiler.delete(query, table: table, returningKeys: recording)
        }
        defer { connection.release(statement) }
        try bind(parameters, to: statement)
        var deleted = 0
        while try connection.step(statement, "Deleting \(table.entity.name) records") {
            let key = try connection.column(0, of: statement, as: table.keyType)
            recorder.record(entity: table.entity.name, key: key, existedBefore: true, existsAfter: false)
            deleted += 1
        }
        if recording { return deleted }
        let changed = connection.changes
        if changed > 0 { recorder.recordTouched(entity: table.entity.name) }
        return changed
    }
}

extension DepotError {
    /// The error for a statement run after SQLite rolled the transaction back by itself:
    /// the cause's code (`io`, `storeFull`, ...) and message, so the caller can act on it.
    static func rolledBack(after cause: DepotError?) -> DepotError {
        guard let cause else {
            return DepotError(.backend, "SQLite rolled this transaction back after an earlier error in it (see that error); nothing of it was kept. Retry the operation.")
        }
        return DepotError(cause.code, "SQLite rolled this transaction back after an error in it and kept nothing of it: \(cause.message)", nativeCode: cause.nativeCode)
    }
}
