/// The one error type Depot throws.
///
/// Catch it by ``code``; the ``message`` is written for the person reading a log and says
/// what to do next. Backends keep their own result code in ``nativeCode`` (an SQLite
/// extended result code, an LMDB return code), so nothing is lost in translation.
///
/// ```swift
/// do {
///     try await cats.insert(tom)
/// } catch let error as DepotError where error.code == .duplicateKey {
///     try await cats.update(tom)
/// }
/// ```
///
/// `DepotError` is a struct over an open set of codes rather than an enum, so that new
/// codes can be added without breaking exhaustive `switch` statements in applications.
public struct DepotError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A stable, machine-readable error code.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The code's stable name, e.g. `"notFound"`; safe to log and to compare.
        public let name: String

        private init(_ name: String) { self.name = name }

        /// The code's ``name``.
        public var description: String { name }

        /// No record has the given primary key.
        public static let notFound = Code("notFound")
        /// A record with the same primary key or unique attribute value already exists.
        public static let duplicateKey = Code("duplicateKey")
        /// The schema stored in the backend differs from the declared one in a way Depot
        /// will not migrate automatically.
        public static let schemaMismatch = Code("schemaMismatch")
        /// An entity declaration is not valid (no primary key, duplicate names, bad names,
        /// a default value of the wrong type, an entity the store does not know).
        public static let invalidSchema = Code("invalidSchema")
        /// A predicate or request names an unknown attribute or compares it with a value
        /// of the wrong type, or a limit or offset is negative.
        public static let invalidPredicate = Code("invalidPredicate")
        /// A value could not be converted between the object, the record and the row.
        public static let conversionFailed = Code("conversionFailed")
        /// A value cannot be stored by this backend (for instance a key longer than the
        /// backend's key limit).
        public static let invalidValue = Code("invalidValue")
        /// The store's files are damaged or are not a store of this kind.
        public static let storeCorrupted = Code("storeCorrupted")
        /// The disk, or a fixed-size map, is full.
        public static let storeFull = Code("storeFull")
        /// The operating system reported an input/output error.
        public static let io = Code("io")
        /// Another process or connection holds a lock for longer than the busy timeout.
        public static let busy = Code("busy")
        /// The store has been closed.
        public static let closed = Code("closed")
        /// The store's configuration (a URL, an option, a path) is not valid.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// The caller is not allowed to use the store's files (permissions, read-only
        /// media).
        public static let permissionDenied = Code("permissionDenied")
        /// A record refers (through a reference attribute) to a record that does not exist:
        /// written with a reference to nothing, or left behind by a delete whose rule is
        /// ``DeleteRule/noAction``.
        public static let missingReference = Code("missingReference")
        /// A delete was refused because other records refer to the record and their
        /// reference's rule is ``DeleteRule/deny``.
        public static let deleteDenied = Code("deleteDenied")
        /// A backend failure that fits no other code; ``DepotError/nativeCode`` says more.
        public static let backend = Code("backend")
    }

    /// What went wrong, as a stable code.
    public let code: Code
    /// A sentence or two for a person: what happened and what to do.
    public let message: String
    /// The backend's own result code, when the error came from a backend.
    public let nativeCode: Int32?
    /// Whether this is the refusal of a write by a store opened read-only
    /// (``readOnly(_:)``): a ``Code/permissionDenied`` the caller caused, which
    /// ``StoreLog/level(for:)`` tells from the operating system's or server's refusals.
    let isReadOnlyRefusal: Bool

    /// An error with `code` and a message that says what to do; `nativeCode` is the
    /// engine's own code, when there is one.
    public init(_ code: Code, _ message: String, nativeCode: Int32? = nil) {
        self.init(code, message, nativeCode: nativeCode, isReadOnlyRefusal: false)
    }

    init(_ code: Code, _ message: String, nativeCode: Int32?, isReadOnlyRefusal: Bool) {
        self.code = code
        self.message = message
        self.nativeCode = nativeCode
        self.isReadOnlyRefusal = isReadOnlyRefusal
    }

    /// The code, the backend's native code when there is one, and the message.
    public var description: String {
        if let nativeCode {
            return "DepotError.\(code.name) (native code \(nativeCode)): \(message)"
        }
        return "DepotError.\(code.name): \(message)"
    }
}

// The messages every backend gives for the same failures, so they read alike.
extension DepotError {
    /// `notFound`: no record of `entity` has primary key `key`.
    public static func notFound(entity: String, key: Value) -> DepotError {
        DepotError(.notFound, "No \(entity) has primary key \(key.debugLiteral). Insert it first, or use save(_:) to upsert.")
    }

    /// `duplicateKey`: a record of `entity` with primary key `key` exists already.
    public static func duplicateKey(entity: String, key: Value) -> DepotError {
        DepotError(.duplicateKey, "A \(entity) with primary key \(key.debugLiteral) already exists. Use save(_:) to upsert or update(_:) to change it.")
    }

    /// `duplicateKey`: another record of `entity` has `value` in the unique `attribute`.
    public static func duplicateUnique(entity: String, attribute: String, value: Value) -> DepotError {
        DepotError(.duplicateKey, "Another \(entity) already has \(attribute) = \(value.debugLiteral), and \(attribute) is declared unique.")
    }

    /// `duplicateKey`: another record of `entity` has the values `row` has in every
    /// component of the unique composite `index`: "Another Visit already has pet = 3,
    /// day = 12, and the index (pet, day) is declared unique." What an engine throws for a
    /// unique ``IndexDescription``, as ``duplicateUnique(entity:attribute:value:)`` is for a
    /// unique attribute.
    public static func duplicateUnique(entity: EntityDescription, index: IndexDescription, row: Row) -> DepotError {
        let values = index.components.map { component in
            let value = entity.index(of: component.attribute).flatMap { $0 < row.count ? row[value: $0].debugLiteral : nil } ?? "?"
            return "\(component.attribute) = \(value)"
        }
        let attributes = index.components.map(\.attribute).joined(separator: ", ")
        return DepotError(.duplicateKey, "Another \(entity.name) already has \(values.joined(separator: ", ")), and the index (\(attributes)) is declared unique.")
    }

    /// `closed`: the store, described by `store`, has been closed.
    public static func closed(_ store: String) -> DepotError {
        DepotError(.closed, "The \(store) has been closed; open a new store to continue.")
    }

    /// What every backend throws for a write asked of a read transaction.
    public static let writeInRead = DepotError(.invalidConfiguration, "This is a read transaction; write inside a write operation.")

    /// What every backend throws for a transaction used after its closure returned.
    public static let transactionEnded = DepotError(.closed, "This transaction has ended; use the context only inside its closure.")

    /// What every backend throws for an entity a transaction names but the store has not
    /// registered.
    public static func notRegistered(_ entity: String) -> DepotError {
        DepotError(.invalidSchema, "The entity \(entity) is not registered with this store; register it (a Controller does so on first use) before reading or writing it.")
    }

    /// Wraps any error thrown by caller code (a conversion, a closure) so that callers see
    /// only `DepotError`, keeping the original text.
    public static func wrapping(_ error: any Error, code: Code = .conversionFailed, context: String) -> DepotError {
        if let depot = error as? DepotError { return depot }
        return DepotError(code, "\(context): \(error)")
    }
}
