import CLibPQ
public import DepotCore
import Foundation

/// A read of ``PostgresEngine`` on one connection: in a `REPEATABLE READ READ ONLY`
/// transaction, or, for a read of one statement, alone in autocommit mode, its own snapshot.
/// The engine's writes run their statements through one too.
public final class PostgresTransaction: EngineReadTransaction, WriteTransaction {
    let connection: PGConnection
    let tables: EntityRegistry<RegisteredEntity>
    let writable: Bool
    var recorder: ChangeRecorder
    var isFinished = false
    /// Whether the engine began an SQL transaction for the read (and ends it in ``end()``).
    var explicit = false
    /// A read of one statement in autocommit mode: its first statement runs; a second is
    /// refused and the read asks to run again as a transaction (``EngineRetry/asTransaction``).
    var single = SingleStatementRead()
    /// What the previous run of the read asked for, and how many runs came before.
    var after: EngineRetry?
    var attempt = 0
    /// Whether the read holds the engine's connection to the primary (see
    /// `PostgresEngine.primaryReader`), which ``end()`` gives back.
    var releasesPrimary: DispatchSemaphore?
    /// Whether the read began without the schema probe (see `PostgresEngine+SchemaWatch.swift`).
    var probeSkipped = false
    /// Whether a result's column types were not the ones the registry keeps its
    /// attributes in.
    var layoutMismatch = false

    /// `columns`, after noting in ``layoutMismatch`` when their types are not the
    /// registry's: a read that skipped the schema probe then runs again as after a schema
    /// change, instead of failing on the first value of another type.
    private func checked(_ columns: PGColumns) -> PGColumns {
        if !columns.typesMatch { layoutMismatch = true }
        return columns
    }

    init(connection: PGConnection, tables: EntityRegistry<RegisteredEntity>, writable: Bool, recorder: ChangeRecorder = ChangeRecorder(detailed: false)) {
        self.connection = connection
        self.tables = tables
        self.writable = writable
        self.recorder = recorder
    }

    @inline(__always)
    private func table(_ entity: EntityHandle) throws(DepotError) -> RegisteredEntity {
        if isFinished { throw DepotError.transactionEnded }
        // After an error PostgreSQL refuses every statement until the transaction ends:
        // say so once, in Depot's words, rather than with the server's.
        if connection.isInFailedTransaction {
            throw DepotError(.backend, "An earlier statement of this PostgreSQL transaction failed, so PostgreSQL rolls it back; nothing of it is kept. Let the error end the operation (or retry it).")
        }
        return try tables.resolve(entity)
    }

    // MARK: ReadTransaction

    /// The rows `query` selects, in its order.
    public func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        let table = try table(query.handle)
        try single.countStatement()
        if query.limit == 0 { return }
        let compiled = try PGQueryCompiler.select(query, table: table)
        let result = try connection.query(compiled.sql, compiled.parameters, prepare: true, "Fetching \(table.entity.name) records")
        let count = result.rowCount
        reserve(count)
        let columns = checked(PGColumns(result, table: table))
        for row in 0..<count {
            columns.row = row
            try body(columns)
        }
    }

    /// The row of `entity` whose key is `key`, when there is one.
    public func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        let table = try table(entity)
        try single.countStatement()
        guard key.type == table.keyType else { return false }
        let result = try connection.query(
            table.selectByKey, [.value(key)], prepare: true, "Reading a \(entity.name) record")
        guard result.rowCount > 0 else { return false }
        let columns = checked(PGColumns(result, table: table))
        try body(columns)
        return true
    }

    /// How many rows `query` selects.
    public func count(_ query: Query) throws -> Int {
        let table = try table(query.handle)
        try single.countStatement()
        let compiled = try PGQueryCompiler.count(query, table: table)
        let result = try connection.query(compiled.sql, compiled.parameters, prepare: true, "Counting \(table.entity.name) records")
        guard result.rowCount > 0 else { return 0 }
        return Int(result.int64(0, 0))
    }

    /// Computed by the server (`PGQueryCompiler.aggregate(_:table:)`), so a count or a
    /// sum over a large table sends one row per group (per group and binary exponent for
    /// double sums, finished with Depot's exactly rounded sum), not every record.
    public func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        let table = try table(query.rows.handle)
        // Sums and averages of doubles take a statement of their own beside the main one,
        // and both must read one snapshot: in a transaction, as every aggregate is.
        try single.requireTransaction()
        let compiled = try PGQueryCompiler.aggregate(query, table: table)
        let entity = query.entity
        let keyCount = query.groupBy.count
        // Every statement in this transaction's one snapshot (reads are REPEATABLE READ).
        var doubleSums: [Int: [[Value]: ExactSum]] = [:]
        for part in compiled.doubleSums {
            doubleSums[part.attribute] = try doubleSum(part, entity: entity, keyCount: keyCount)
        }
        let result = try connection.query(compiled.query.sql, compiled.query.parameters, prepare: true, "Aggregating \(entity.name) records")
        let columns = checked(PGColumns(result, types: compiled.types, entity: entity.name))
        var rows: [AggregateRow] = []
        rows.reserveCapacity(result.rowCount)
        for row in 0..<result.rowCount {
            columns.row = row
            let keys = try Self.groupKeys(columns, count: keyCount)
            var values: [Value] = []
            values.reserveCapacity(query.functions.count)
            var column = keyCount
            for (function, layout) in zip(query.functions, compiled.functions) {
                switch layout {
                case .count:
                    values.append(.int(try columns.int64(column)))
                    column += 1
                case .integerSum:
                    // The server's state, finished by Depot's own accumulator: the same
                    // nil, the same 64-bit check and message, the same average.
                    var accumulator = AggregateAccumulator(function, in: entity)
                    let count = try columns.int64(column)
                    let sum: Int128 = try columns.isNull(column + 1) ? 0 : Self.integer(columns, column + 1, "an integer sum", of: entity)
                    accumulator.merge(count: count, integerSum: sum, doubleSum: ExactSum())
                    values.append(try accumulator.result())
                    column += 2
                case .extreme:
                    values.append(try columns.value(column))
                    column += 1
                case .doubleSum(let attribute):
                    var accumulator = AggregateAccumulator(function, in: entity)
                    let sum = doubleSums[attribute]?[keys] ?? ExactSum()
                    accumulator.merge(count: try columns.int64(column), integerSum: 0, doubleSum: sum)
                    values.append(try accumulator.result())
                    column += 1
                }
            }
            rows.append(AggregateRow(keys: keys, values: values))
        }
        // Depot's order for the groups (nil first), whatever order the server grouped in.
        rows.sort { AggregateQuery.keyOrder($0.keys, $1.keys) }
        return rows
    }

    /// One summed double attribute's exact sums per group, from the server's rows: per
    /// group and binary exponent the sum of the significands, then the counts of NaNs,
    /// infinities, finite values and negative zeros.
    private func doubleSum(_ part: PGQueryCompiler.DoubleSumQuery, entity: EntityDescription, keyCount: Int) throws -> [[Value]: ExactSum] {
        let result = try connection.query(part.query.sql, part.query.parameters, prepare: true, "Summing \(entity.name).\(entity.attributes[part.attribute].name)")
        let columns = checked(PGColumns(result, types: part.types, entity: entity.name))
        var sums: [[Value]: ExactSum] = [:]
        for row in 0..<result.rowCount {
            columns.row = row
            let keys = try Self.groupKeys(columns, count: keyCount)
            var sum = sums[keys] ?? ExactSum()
            if !columns.isNull(keyCount) && !columns.isNull(keyCount + 1) {
                let significands = try Self.integer(columns, keyCount + 1, "a sum of significands", of: entity)
                let exponent = try columns.int64(keyCount)
                guard (-1074...971).contains(exponent) else {
                    throw DepotError(.backend, "PostgreSQL returned \(exponent) as a binary exponent of a double of \(entity.name), outside a double's -1074...971.")
                }
                try sum.add(significands, timesTwoToThe: Int(exponent))
            }
            if try columns.int64(keyCount + 2) > 0 { sum.add(.nan) }
            if try columns.int64(keyCount + 3) > 0 { sum.add(.infinity) }
            if try columns.int64(keyCount + 4) > 0 { sum.add(-.infinity) }
            // Zeros' significands add nothing, so the sign of a zero sum comes from the
            // counts: one -0.0 for a row of negative zeros alone, one +0.0 for a row with any
            // other finite value. ExactSum keeps -0.0 only while every value was -0.0, so
            // the group's rows combine as its values would; neither zero changes the sum.
            let finite = try columns.int64(keyCount + 5), negative = try columns.int64(keyCount + 6)
            if finite > negative {
                sum.add(0.0)
            } else if finite > 0 {
                sum.add(-0.0)
            }
            sums[keys] = sum
        }
        return sums
    }

    /// The group's key values, the first `count` columns of the row.
    private static func groupKeys(_ columns: PGColumns, count: Int) throws -> [Value] {
        var keys: [Value] = []
        keys.reserveCapacity(count)
        for index in 0..<count { keys.append(try columns.value(index)) }
        return keys
    }

    /// A `numeric` the server returned as text, as the 128-bit integer Depot sums in.
    private static func integer(_ columns: PGColumns, _ column: Int, _ what: String, of entity: EntityDescription) throws -> Int128 {
        let text = try columns.string(column)
        guard let value = Int128(text) else {
            throw DepotError(.backend, "PostgreSQL returned \(text.prefix(60)) as \(what) of \(entity.name), which is not an integer Depot can hold.")
        }
        return value
    }

    // MARK: WriteTransaction

    private func writableTable(_ entity: EntityHandle) throws(DepotError) -> RegisteredEntity {
        let table = try table(entity)
        if !writable {
            throw DepotError.writeInRead
        }
        return table
    }

    private func params(_ row: Row, table: RegisteredEntity) throws(DepotError) -> [PGParam] {
        try Self.params(row, table: table)
    }

    static func params(_ row: Row, table: RegisteredEntity) throws(DepotError) -> [PGParam] {
        _ = try table.entity.check(row)
        var params: [PGParam] = []
        params.reserveCapacity(row.count)
        for i in 0..<row.count {
            var param = PGParam.value(row[value: i])
            // A NULL still has its column's type, so the prepared statement's types hold.
            if param.bytes == nil { param.oid = Self.oid(table.types[i]) }
            params.append(param)
        }
        return params
    }

    static func oid(_ type: AttributeType) -> Oid {
        switch type {
        case .int64: PGParam.int8Oid
        case .bool: PGParam.boolOid
        case .double, .date: PGParam.float8Oid
        case .string: PGParam.textOid
        case .data: PGParam.byteaOid
        case .uuid: PGParam.uuidOid
        }
    }

    /// Runs a writing statement, turning constraint failures into Depot's words. On an
    /// entity with unique attributes the statement runs inside a savepoint (sent with it, in
    /// one round trip): PostgreSQL aborts the whole transaction on a failed statement, where
    /// the other backends fail only the statement, and the savepoint gives back that
    /// behaviour, so a closure that catches a duplicate can go on.
    private func runWrite(_ sql: String, _ params: [PGParam], row: Row, table: RegisteredEntity, what: String) throws(DepotError) -> PGResult {
        let context = "\(what) the \(table.entity.name) with primary key \(row[value: table.keyIndex].debugLiteral)"
        let statement = PGConnection.Step(sql: sql, params: params, prepare: true, context: context)
        do {
            guard table.hasUniqueAttributes else { return try connection.run([statement])[0] }
            return try connection.run([
                PGConnection.Step(sql: "SAVEPOINT depot_statement", context: context), statement,
                PGConnection.Step(sql: "RELEASE SAVEPOINT depot_statement", context: context),
            ])[1]
        } catch {
            if table.hasUniqueAttributes && connection.isInFailedTransaction {
                _ = try? connection.run([
                    PGConnection.Step(sql: "ROLLBACK TO SAVEPOINT depot_statement", context: context),
                    PGConnection.Step(sql: "RELEASE SAVEPOINT depot_statement", context: context),
                ])
            }
            guard let failure = connection.lastFailure, failure.sqlState == "23505" else { throw error }
            let key = row[value: table.keyIndex]
            let entity = table.entity.name
            if let index = table.entity.indexes.first(where: { $0.isUnique && failure.constraint == PGDDL.compositeIndexName(entity: entity, index: $0) }) {
                throw DepotError.duplicateUnique(entity: table.entity, index: index, row: row)
            }
            if let attribute = table.entity.attributes.first(where: { failure.constraint == PGDDL.uniqueName(entity: entity, attribute: $0.name) }),
                let index = table.entity.index(of: attribute.name)
            {
                throw DepotError.duplicateUnique(entity: entity, attribute: attribute.name, value: row[value: index])
            }
            throw DepotError(.duplicateKey, "\(what) the \(entity) with primary key \(key.debugLiteral) would duplicate a unique value (\(failure.message)).")
        }
    }

    /// Inserts `row`; a key or unique value already present is refused.
    public func insert(_ row: Row, into entity: EntityHandle) throws {
        let table = try writableTable(entity)
        // ON CONFLICT on the key: a duplicate key is reported without aborting the
        // transaction.
        let result = try runWrite(
            table.insertUnlessKeyExists, try params(row, table: table), row: row, table: table, what: "Inserting")
        let key = row[value: table.keyIndex]
        if result.affectedRows == 0 {
            throw DepotError(.duplicateKey, "A \(entity.name) with primary key \(key.debugLiteral) already exists. Use save(_:) to upsert or update(_:) to change it.")
        }
        recorder.record(entity: entity.name, key: key, existedBefore: false, existsAfter: true)
    }

    /// Inserts `row`, or replaces the row with its key; returns whether it inserted.
    public func upsert(_ row: Row, into entity: EntityHandle) throws -> Bool {
        let table = try writableTable(entity)
        let result = try runWrite(table.upsert, try params(row, table: table), row: row, table: table, what: "Saving")
        let inserted = result.bool(0, 0)
        recorder.record(entity: entity.name, key: row[value: table.keyIndex], existedBefore: !inserted, existsAfter: true)
        return inserted
    }

    /// Replaces the row with `row`'s key; a missing row is refused.
    public func update(_ row: Row, in entity: EntityHandle) throws {
        let table = try writableTable(entity)
        let result = try runWrite(table.update, try params(row, table: table), row: row, table: table, what: "Updating")
        let key = row[value: table.keyIndex]
        if result.affectedRows == 0 {
            throw DepotError(.notFound, "No \(entity.name) has primary key \(key.debugLiteral). Insert it first, or use save(_:) to upsert.")
        }
        recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: true)
    }

    /// Deletes the row whose key is `key`; returns whether there was one.
    public func delete(key: Value, from entity: EntityHandle) throws -> Bool {
        let table = try writableTable(entity)
        guard key.type == table.keyType else { return false }
        let result = try connection.query(
            table.deleteByKey, [.value(key)], prepare: true, "Deleting the \(entity.name) with primary key \(key.debugLiteral)")
        let deleted = result.affectedRows > 0
        if deleted { recorder.record(entity: entity.name, key: key, existedBefore: true, existsAfter: false) }
        return deleted
    }

    /// Deletes the rows `query` selects; returns how many.
    public func delete(_ query: Query) throws -> Int {
        let table = try writableTable(query.handle)
        if query.limit == 0 { return 0 }
        let compiled = try PGQueryCompiler.delete(query, table: table, returningKeys: true)
        let result = try connection.query(compiled.sql, compiled.parameters, prepare: true, "Deleting \(table.entity.name) records")
        let keys = PGColumns(result, types: [table.keyType], entity: table.entity.name, names: [table.entity.primaryKey.name], keyIndex: 0)
        for row in 0..<result.rowCount {
            keys.row = row
            recorder.record(entity: table.entity.name, key: try keys.value(0), existedBefore: true, existsAfter: false)
        }
        return result.rowCount
    }
}
