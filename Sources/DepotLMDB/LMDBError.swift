import CLMDB
package import DepotCore

extension DepotError {
    /// Maps an LMDB return code (or an `errno` value, which LMDB passes through) into
    /// Depot's error codes, keeping the native code and LMDB's own text.
    package static func lmdb(_ code: Int32, context: String) -> DepotError {
        let text = String(cString: mdb_strerror(code))
        let detail = "\(context): \(text)"
        switch code {
        case MDB_NOTFOUND:
            return DepotError(.notFound, detail, nativeCode: code)
        case MDB_KEYEXIST:
            return DepotError(.duplicateKey, "\(detail). A record with the same key or unique value exists.", nativeCode: code)
        case MDB_MAP_FULL:
            return DepotError(.storeFull, "\(detail). The map is full and could not grow further; raise mapSize or free disk space.", nativeCode: code)
        case MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_INVALID, MDB_VERSION_MISMATCH:
            return DepotError(.storeCorrupted, "\(detail). The directory does not hold a valid LMDB environment of this version; it was not modified.", nativeCode: code)
        case MDB_READERS_FULL:
            return DepotError(.busy, "\(detail). Every reader slot is in use; raise the reader limit or finish read transactions sooner.", nativeCode: code)
        case MDB_BAD_VALSIZE:
            return DepotError(.invalidValue, "\(detail). A key is empty or longer than LMDB's key limit.", nativeCode: code)
        case MDB_PANIC:
            // Set after a failed write of the meta page; the file is intact. LMDBStore
            // reopens the environment when a transaction meets it, so this reaches a caller
            // only from the transaction that was running then.
            return DepotError(.io, "\(detail). A write to disk failed earlier, so LMDB stopped this environment; nothing acknowledged was lost. The store reopens it at the next transaction: retry, and check the disk (free space, I/O errors) if it keeps failing.", nativeCode: code)
        case 28 /* ENOSPC */:
            return DepotError(.storeFull, "\(detail). The disk is full; free space and retry.", nativeCode: code)
        case 5 /* EIO */:
            return DepotError(.io, "\(detail). The operating system reported an I/O error.", nativeCode: code)
        case 13 /* EACCES */, 1 /* EPERM */, 30 /* EROFS */:
            return DepotError(.permissionDenied, "\(detail). The store's directory or files are not writable by this process.", nativeCode: code)
        case 2 /* ENOENT */:
            return DepotError(.io, "\(detail). The store's directory does not exist.", nativeCode: code)
        default:
            return DepotError(.backend, detail, nativeCode: code)
        }
    }
}
