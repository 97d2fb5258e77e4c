import CSQLite
package import DepotCore

extension DepotError {
    /// Maps an SQLite result code (primary or extended) into Depot's error codes, keeping the
    /// native code and SQLite's own message.
    ///
    /// - Parameters:
    ///   - code: The result code returned by an `sqlite3_*` call.
    ///   - message: SQLite's message (`sqlite3_errmsg`), if any.
    ///   - context: What Depot was doing, for the reader of the log.
    package static func sqlite(_ code: Int32, message: String?, context: String) -> DepotError {
        let detail = message.map { "\(context): \($0)" } ?? context
        if code == SQLiteCode.constraintForeignKey {
            // Depot checks references before SQLite does; this is a row written outside
            // Depot, or a reference Depot's own check let through.
            return DepotError(.missingReference, "\(detail). A record refers to a record that does not exist; nothing of the transaction was kept.", nativeCode: code)
        }
        switch SQLiteCode.primary(code) {
        case SQLITE_CONSTRAINT:
            return DepotError(.duplicateKey, "\(detail). A record with the same primary key or unique value exists.", nativeCode: code)
        case SQLITE_BUSY, SQLITE_LOCKED:
            return DepotError(.busy, "\(detail). Another connection or process held the database lock longer than the busy timeout; retry, or raise the timeout.", nativeCode: code)
        case SQLITE_FULL:
            return DepotError(.storeFull, "\(detail). The disk is full; free space and retry. Nothing of the failed transaction was kept.", nativeCode: code)
        case SQLITE_IOERR:
            return DepotError(.io, "\(detail). The operating system reported an I/O error.", nativeCode: code)
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return DepotError(.storeCorrupted, "\(detail). The file is not an SQLite database or is damaged; it was not modified. Restore it from a backup or point the store elsewhere.", nativeCode: code)
        case SQLITE_CANTOPEN:
            return DepotError(.io, "\(detail). The database file cannot be opened; check that the path exists and is writable.", nativeCode: code)
        case SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH:
            return DepotError(.permissionDenied, "\(detail). The database or its directory is read-only for this process.", nativeCode: code)
        case SQLITE_TOOBIG:
            return DepotError(.invalidValue, "\(detail). A value is larger than SQLite's limit.", nativeCode: code)
        case SQLITE_MISMATCH:
            return DepotError(.conversionFailed, "\(detail). A value does not fit its column.", nativeCode: code)
        default:
            return DepotError(.backend, detail, nativeCode: code)
        }
    }
}

/// SQLite's extended result codes that Depot tells apart. sqlite3.h defines them as macros
/// built from other macros (`#define SQLITE_IOERR_WRITE (SQLITE_IOERR | (3<<8))`), which
/// Swift does not import, so they are spelled out here once, from sqlite3.h.
package enum SQLiteCode {
    package static let ioErrWrite: Int32 = SQLITE_IOERR | (3 << 8)
    package static let ioErrFsync: Int32 = SQLITE_IOERR | (4 << 8)
    package static let constraintPrimaryKey: Int32 = SQLITE_CONSTRAINT | (6 << 8)
    static let constraintUnique: Int32 = SQLITE_CONSTRAINT | (8 << 8)
    static let constraintForeignKey: Int32 = SQLITE_CONSTRAINT | (3 << 8)

    /// The primary result code of a (possibly extended) one.
    package static func primary(_ code: Int32) -> Int32 { code & 0xFF }
}
