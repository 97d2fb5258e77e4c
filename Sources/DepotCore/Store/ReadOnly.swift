// What every backend throws for a write through a store opened read-only.
extension DepotError {
    /// A write, a registration that would create or change an entity, or a migration, on a
    /// store opened read-only (`readOnly` in the backend's options, `readOnly=true` in its
    /// URL). The store itself was left as it was.
    public static func readOnly(_ store: String) -> DepotError {
        DepotError(
            .permissionDenied,
            "The \(store) was opened read-only: writes, new or changed entities and migrations are refused, and nothing was changed. Open it without readOnly to write.",
            nativeCode: nil, isReadOnlyRefusal: true)
    }
}
