/// The bookkeeping of a read begun with `singleStatement` (see
/// ``StorageEngine/beginRead(on:singleStatement:)``), for an engine whose one statement is
/// its own snapshot and that therefore runs such a read without a transaction.
///
/// The transaction keeps one and calls ``countStatement()`` before each statement it runs.
/// The first runs; the second is refused (it would see another snapshot), and the
/// transaction's ``EngineReadTransaction/retry`` answers ``retry``, which is then
/// ``EngineRetry/asTransaction``: the runtime begins the read again with `singleStatement`
/// false. What takes more than one statement however it is asked (an explanation, an
/// aggregate that reads twice) calls ``requireTransaction()`` instead.
///
/// ```swift
/// final class MyTransaction: EngineReadTransaction {
///     var single = SingleStatementRead()
///     var retry: EngineRetry? { single.retry }
///
///     func count(_ query: Query) throws -> Int {
///         try single.countStatement()
///         return try run(countStatement(for: query))
///     }
/// }
/// ```
public struct SingleStatementRead: Sendable {
    /// Whether the read runs one statement only (begun with `singleStatement` and without
    /// a transaction of the engine's).
    public var isOn: Bool
    private var ranStatement = false
    /// Whether the read went on past what one statement does, and so runs again as a
    /// transaction.
    public private(set) var wantedAnother = false

    /// Bookkeeping for a read that runs one statement only when `isOn`.
    public init(isOn: Bool = false) {
        self.isOn = isOn
    }

    /// The refusal of a second statement in a read of one statement. The runtime sees
    /// ``EngineRetry/asTransaction`` in the transaction's retry and runs the read again, so
    /// the caller never sees this error.
    public struct SecondStatement: Error, CustomStringConvertible {
        /// What happened, in words.
        public var description: String { "A read of one statement went on to a second; it runs again as a transaction." }
    }

    /// Counts a statement about to run: the first of a read of one statement runs, the
    /// second is refused. Does nothing when the read is a transaction.
    ///
    /// - Throws: ``SecondStatement`` for the second statement.
    @inlinable
    public mutating func countStatement() throws(SecondStatement) {
        guard isOn else { return }
        try countOne()
    }

    @usableFromInline
    mutating func countOne() throws(SecondStatement) {
        if ranStatement {
            wantedAnother = true
            throw SecondStatement()
        }
        ranStatement = true
    }

    /// Refuses, in a read of one statement, what needs more than one: the read runs again
    /// as a transaction. Does nothing when the read is a transaction.
    ///
    /// - Throws: ``SecondStatement`` in a read of one statement.
    public mutating func requireTransaction() throws(SecondStatement) {
        guard isOn else { return }
        wantedAnother = true
        throw SecondStatement()
    }

    /// ``EngineRetry/asTransaction`` when the read went on past one statement; nil otherwise.
    public var retry: EngineRetry? { wantedAnother ? .asTransaction : nil }
}
