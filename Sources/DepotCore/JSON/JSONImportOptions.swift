/// How ``JSONImport`` reads JSON into records.
public struct JSONImportOptions: Sendable {
    /// What to do with a member whose key names no attribute.
    public enum UnknownKeys: Sendable, Hashable {
        /// Skip it (an API's extra fields).
        case ignore
        /// Treat the element as invalid.
        case refuse
    }

    /// What to do with an element that cannot be converted.
    public enum InvalidElements: Sendable, Hashable {
        /// Fail the whole import with a ``DepotError`` naming the element; nothing is written
        /// (with ``Commit/everyBatch(_:)``, nothing of the failing batch and after).
        case failImport
        /// Leave the element out and list it in ``JSONImportReport/skipped``; more than
        /// ``JSONImportOptions/maximumSkipped`` such elements fail the import.
        case skip
    }

    /// When the import commits.
    public enum Commit: Sendable, Hashable {
        /// Once, at the end: all or nothing. The converted rows are held in memory until then.
        case atEnd
        /// One transaction per `n` elements, in bounded memory: a failure keeps the batches
        /// committed before it (``JSONImportReport`` and the error say how many elements).
        /// Elements whose references name records not imported yet wait (at most
        /// ``JSONImportOptions/maximumWaiting`` of them) and are written as soon as those
        /// records are, or in a last transaction, so parents and children may come in any
        /// order. A later element for a key is written after an earlier one that waits, so
        /// the later one wins, as when committing at the end.
        case everyBatch(Int)
    }

    /// The JSON key of each attribute whose key differs from its name (attribute → key).
    public var keys: [String: String]
    /// What a key that names no attribute does.
    public var unknownKeys: UnknownKeys
    /// What an element that cannot be converted does.
    public var invalidElements: InvalidElements
    /// When the import commits.
    public var commit: Commit
    /// How dates are read, tried in order.
    public var dateFormats: [JSONDateFormat]
    /// With ``Commit/everyBatch(_:)``, how many elements may wait in memory for records
    /// they refer to; when more still wait after being retried, the import fails with
    /// ``DepotError/Code/missingReference`` (the batches committed before stay). Raise it
    /// for a file that lists many children before their parents, or commit at the end.
    public var maximumWaiting: Int = 100_000
    /// With ``InvalidElements/skip``, how many invalid elements are left out (each one
    /// listed in ``JSONImportReport/skipped``) before the import fails with
    /// ``DepotError/Code/conversionFailed``: a file of mostly invalid elements is more likely
    /// the wrong file than one to import.
    public var maximumSkipped: Int = 10_000
    /// Called after each chunk of input is scanned and after each committed transaction
    /// (a progress bar for a long import: the bytes read against the input's size).
    public var progress: (@Sendable (JSONImportProgress) -> Void)?

    /// Options for an import; the defaults ignore unknown keys, fail on an invalid element
    /// and commit once at the end.
    public init(
        keys: [String: String] = [:], unknownKeys: UnknownKeys = .ignore, invalidElements: InvalidElements = .failImport,
        commit: Commit = .atEnd, dateFormats: [JSONDateFormat] = [.iso8601, .secondsSince1970]
    ) {
        self.keys = keys
        self.unknownKeys = unknownKeys
        self.invalidElements = invalidElements
        self.commit = commit
        self.dateFormats = dateFormats
        self.progress = nil
    }
}
