public import DepotCore

// One round trip for a read that is one statement.
//
// A controller's `fetchAll`, `fetchFirst`, `count` (and so a page) read with one statement,
// which in autocommit mode is its own snapshot: it runs so, with no `BEGIN` before it and no
// `ROLLBACK` after it, and with the schema probe pipelined before it as a lookup by key has.
// Should the read go on to a second statement (a request that reads related records), the
// two would see different snapshots: the read stops there and runs again from its start in a
// `REPEATABLE READ READ ONLY` transaction, which the core allows because such a read has no
// effect outside what it returns.
extension PostgresStore: SingleStatementReadingStore {
    @usableFromInline
    package func submitSingleStatementRead<T: Sendable>(
        _ body: @escaping @Sendable (any ReadTransaction) throws -> T,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        dispatchRead(body, { reader throws -> T in
            let single = SingleStatementRead(PostgresTransaction(connection: reader, tables: self.tables, writable: false))
            reader.probeNextStatement()
            let result: T
            do {
                defer { single.real.isFinished = true }
                result = try body(single)
            } catch {
                guard single.wantedAnother else { throw error }
                return try self.readInTransaction(on: reader, body)
            }
            // A read that caught the refusal of its second statement itself.
            if single.wantedAnother { return try self.readInTransaction(on: reader, body) }
            return result
        }, completion: completion)
    }
}

/// A reader's connection in autocommit mode as a read sees it: its first statement runs
/// there; a second throws ``SecondStatement``, and the read runs again in a transaction.
final class SingleStatementRead: ReadTransaction {
    struct SecondStatement: Error {}

    let real: PostgresTransaction
    private var ran = false
    /// Whether the read went on to another statement: it runs again in a transaction.
    private(set) var wantedAnother = false

    init(_ real: PostgresTransaction) {
        self.real = real
    }

    private func first() throws {
        if ran {
            wantedAnother = true
            throw SecondStatement()
        }
        ran = true
    }

    func fetch(_ query: Query, reserve: (Int) -> Void, _ body: (any ColumnReader) throws -> Void) throws {
        try first()
        try real.fetch(query, reserve: reserve, body)
    }

    func fetchRow(_ entity: EntityHandle, key: Value, _ body: (any ColumnReader) throws -> Void) throws -> Bool {
        try first()
        return try real.fetchRow(entity, key: key, body)
    }

    func count(_ query: Query) throws -> Int {
        try first()
        return try real.count(query)
    }

    func aggregate(_ query: AggregateQuery) throws -> [AggregateRow] {
        // Sums and averages of doubles take a statement of their own beside the main one,
        // and both must read one snapshot: in a transaction, as every aggregate is.
        wantedAnother = true
        throw SecondStatement()
    }

    func explain(_ query: Query, analyze: Bool) throws -> QueryPlan {
        // An explanation may run more than one statement: in a transaction.
        wantedAnother = true
        throw SecondStatement()
    }
}
