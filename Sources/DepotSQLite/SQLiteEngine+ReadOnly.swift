import DepotCore
import DepotSQL
import Foundation

// Opening read-only (`Options.readOnly`): the bookkeeping is read, never created.
extension SQLiteEngine {
    /// Reads the stored entity descriptions of a file opened read-only, refusing a file that
    /// has no Depot bookkeeping (a new, empty database, or one whose store was never
    /// created) instead of creating it.
    static func readBookkeeping(_ connection: Connection, file: String) throws(DepotError) -> (entities: [EntityDescription], schemaCookie: Int64) {
        try connection.execute("BEGIN")
        do throws(DepotError) {
            let tables = try connection.scalarText("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('depot_meta', 'depot_entities')")
            guard tables == "2" else {
                throw DepotError(.storeCorrupted, "\(file) holds no Depot store (no depot_meta and depot_entities tables), and a store opened read-only is never created. Check the path, or open it without readOnly to create the store.")
            }
            let format = try connection.scalarText("SELECT value FROM depot_meta WHERE key = 'format'")
            guard let format, let version = Int(format), version <= formatVersion else {
                throw DepotError(.schemaMismatch, "\(file) was written with Depot's SQLite format \(format ?? "unknown"), newer than this version's \(formatVersion); open it with a newer Depot.")
            }
            let statement = try connection.prepare("SELECT name, description FROM depot_entities ORDER BY name", cached: false)
            var entities: [EntityDescription] = []
            while try connection.step(statement, "Reading depot_entities") {
                let name = try connection.column(0, of: statement, as: .string)
                entities.append(try StoredDescription.decode(connection.column(1, of: statement, as: .string), of: "\(name)", in: file))
            }
            let cookie = try connection.schemaCookie()
            try connection.execute("COMMIT")
            return (entities, cookie)
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
    }

    /// Removes the `-wal` and `-shm` files that reading a WAL database read-only created
    /// (a read-only connection cannot checkpoint, so SQLite leaves them behind), the way
    /// SQLite removes them: a connection that may write opens the database, reads once and
    /// closes, and SQLite removes the files only when that connection is the last one to the
    /// database, never from under another process. Only when neither file existed before
    /// the store opened and the `-wal` holds nothing: its checkpoint then writes nothing to
    /// the database, and a `-wal` with commits of another program is left alone.
    static func removeCompanionsAfterReading(_ file: String, createdSince before: (wal: Bool, shm: Bool)) {
        let wal = file + "-wal"
        guard !before.wal, !before.shm,
            let size = (try? FileManager.default.attributesOfItem(atPath: wal))?[.size] as? NSNumber, size.intValue == 0,
            let connection = try? Connection.open(path: file, create: false, busyTimeout: .zero)
        else { return }
        _ = try? connection.scalarText("SELECT 1 FROM sqlite_master LIMIT 1")
        connection.close()
    }
}
