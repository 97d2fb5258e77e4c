import DepotCore

// DepotCore keeps its message helpers internal; these say the same thing in the same
// words so every backend reports the same failures alike.
extension DepotError {
    static func lmdbNotFound(entity: String, key: Value) -> DepotError {
        DepotError(.notFound, "No \(entity) has primary key \(key.debugLiteral). Insert it first, or use save(_:) to upsert.")
    }

    static func lmdbDuplicateKey(entity: String, key: Value) -> DepotError {
        DepotError(.duplicateKey, "A \(entity) with primary key \(key.debugLiteral) already exists. Use save(_:) to upsert or update(_:) to change it.")
    }

    static func lmdbDuplicateUnique(entity: String, attribute: String, value: Value) -> DepotError {
        DepotError(.duplicateKey, "Another \(entity) already has \(attribute) = \(value.debugLiteral), and \(attribute) is declared unique.")
    }

    static func lmdbClosed(_ store: String) -> DepotError {
        DepotError(.closed, "The \(store) has been closed; open a new store to continue.")
    }
}
