import CSQLite
package import DepotCore
import DepotSQL
import Foundation

// Opening a file: the directory, the header and ownership checks, the bookkeeping tables.
extension SQLiteEngine {
    static func createDirectory(_ url: URL) throws(DepotError) {
        do {
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        } catch {
            throw DepotError(.io, "Cannot create the directory \(url.path) for the SQLite store: \(error). Check the path and its permissions.")
        }
    }

    /// Refuses a missing directory for the database file: a mistyped path must not create
    /// directories the caller never meant (``Options/createDirectories`` asks for them).
    static func requireDirectory(_ url: URL) throws(DepotError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
            throw DepotError(
                .io,
                "The directory \(url.path) for the SQLite store does not exist. Check the path, or create it (URL option createDirectories=true, SQLiteStore.Options.createDirectories).")
        }
        guard isDirectory.boolValue else {
            throw DepotError(.invalidConfiguration, "\(url.path) is a file, not a directory; the SQLite store's file needs a directory to be in. Check the path.")
        }
    }

    /// Which of a database's `-wal` and `-shm` files exist.
    static func companions(of file: String) -> (wal: Bool, shm: Bool) {
        (FileManager.default.fileExists(atPath: file + "-wal"), FileManager.default.fileExists(atPath: file + "-shm"))
    }

    /// Removes the `-wal` and `-shm` that reading a WAL database created when opening it
    /// failed: with checkpointing on close turned off, SQLite leaves them behind, and a file
    /// Depot refuses must be left as it was. A `-wal` that holds frames, or that existed
    /// before (another program's uncheckpointed commits), is never touched.
    static func removeCompanions(of file: String, createdSince before: (wal: Bool, shm: Bool)) {
        let wal = file + "-wal"
        var walGone = !FileManager.default.fileExists(atPath: wal)
        if !before.wal, !walGone,
            let size = (try? FileManager.default.attributesOfItem(atPath: wal))?[.size] as? NSNumber, size.intValue == 0
        {
            walGone = (try? FileManager.default.removeItem(atPath: wal)) != nil
        }
        if !before.shm, walGone { try? FileManager.default.removeItem(atPath: file + "-shm") }
    }

    static func synchronous(_ options: Options, inMemory: Bool) -> String {
        if inMemory { return "OFF" }
        switch options.durability {
        case .normal: return "NORMAL"
        case .full: return "FULL"
        }
    }

    /// Runs `body` on `connection` again while it fails with `busy`, for up to `timeout`
    /// in all. Switching a new database to WAL needs an exclusive lock, and SQLite returns
    /// SQLITE_BUSY at once, without its busy handler, while another process is creating
    /// the same file. Each attempt may also wait in SQLite's busy handler, so the handler
    /// is given only the time left: the whole loop ends within `timeout` (plus one 5 ms
    /// pause). It sleeps on the calling thread, which is why opening is documented as
    /// blocking.
    static func retryingWhileBusy<T>(
        _ connection: Connection, _ timeout: Duration, _ body: () throws(DepotError) -> T
    ) throws(DepotError) -> T {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        defer { connection.setBusyTimeout(timeout) }
        while true {
            connection.setBusyTimeout(max(.zero, deadline - clock.now))
            do {
                return try body()
            } catch where error.code == .busy && clock.now < deadline {
                usleep(5_000)
            }
        }
    }

    /// SQLite takes a file shorter than its 100-byte header for an empty database and
    /// writes a new one over it; a non-empty file must therefore start with SQLite's magic
    /// string, or it is not ours to touch. (An empty file is a new database: what a crash
    /// during creation leaves behind.)
    ///
    /// The header is read through the connection's own file (see
    /// ``Connection/readMainFileHead(_:)``), never through a second descriptor, which would
    /// drop the locks of every other connection of this process to the same file.
    static func checkHeader(_ connection: Connection) throws(DepotError) {
        let (head, size) = try connection.readMainFileHead(100)
        // stat, not open: a size needs no descriptor.
        let walSize = ((try? FileManager.default.attributesOfItem(atPath: connection.path + "-wal"))?[.size] as? NSNumber)?.intValue ?? 0
        try validateHeader(head, fileSize: size, walSize: walSize, file: connection.path)
    }

    /// Checks the first (up to) 100 bytes of a database file, the file's size and its
    /// WAL's size. Pure, so tests and fuzzers can feed it anything; it never traps.
    package static func validateHeader(_ head: [UInt8], fileSize size: Int, walSize: Int, file: String) throws(DepotError) {
        if head.isEmpty { return }
        guard head.count >= 100, head.starts(with: Array("SQLite format 3\u{0}".utf8)) else {
            throw DepotError(.storeCorrupted, "\(file) is not an SQLite database (it does not start with SQLite's header). Depot did not modify it; restore it from a backup or open another path.", nativeCode: SQLITE_NOTADB)
        }
        // SQLite reads a page cut short by truncation as if its missing bytes were zeros and
        // returns wrong rows without an error. Every page is written whole, so a file that
        // is not a whole number of pages, or (with no WAL to replay) shorter than the page
        // count its header states, has lost data.
        let pageSize = head[16] == 0 && head[17] == 1 ? 65_536 : Int(head[16]) << 8 | Int(head[17])
        func truncated(_ detail: String) -> DepotError {
            DepotError(.storeCorrupted, "\(file) is truncated (\(detail)). Depot did not modify it; restore it from a backup or open another path.", nativeCode: SQLITE_CORRUPT)
        }
        guard pageSize >= 512, pageSize & (pageSize - 1) == 0 else { return }  // SQLite reports a bad header itself
        if size % pageSize != 0 { throw truncated("\(size) bytes is not a whole number of \(pageSize)-byte pages") }
        // At most 2^32 - 1 pages of at most 65,536 bytes: the product fits in 64 bits.
        let headerPages = Int(head[28]) << 24 | Int(head[29]) << 16 | Int(head[30]) << 8 | Int(head[31])
        let headerPagesValid = head[24..<28] == head[92..<96]
        if headerPagesValid && walSize == 0 && size < headerPages * pageSize {
            throw truncated("\(size) bytes, but its header counts \(headerPages) pages of \(pageSize) bytes")
        }
    }

    /// Reads the schema before anything writes, and refuses another program's database.
    ///
    /// Setting WAL mode rewrites the header, so a file that is not a database, or is a
    /// database Depot did not make, must be refused here to stay byte for byte as it was.
    /// A database with no schema objects at all is new: SQLite's view of an empty file,
    /// and what a crash leaves between switching a new file to WAL and committing the
    /// bookkeeping tables (created in one transaction, so they exist both or neither).
    static func checkOwnership(_ connection: Connection, adopt: Bool) throws(DepotError) {
        var tables: [String] = []
        var objects = 0
        do {
            let statement = try connection.prepare("SELECT type, name FROM sqlite_master", cached: false)
            while try connection.step(statement, "Reading the schema of \(connection.path)") {
                objects += 1
                guard case .string(let type) = try connection.column(0, of: statement, as: .string), type == "table",
                    case .string(let name) = try connection.column(1, of: statement, as: .string)
                else { continue }
                tables.append(name)
            }
        } catch {
            let primary = SQLiteCode.primary(error.nativeCode ?? 0)
            if primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT {
                throw DepotError(.storeCorrupted, "\(connection.path) is not an SQLite database, or it is damaged (\(error.message)). Depot did not modify it; restore it from a backup or open another path.", nativeCode: error.nativeCode)
            }
            throw error
        }
        if let refusal = foreignDatabaseRefusal(file: connection.path, objects: objects, tables: tables, adopt: adopt) { throw refusal }
    }

    /// The error that refuses a database with schema objects but without Depot's
    /// bookkeeping tables, or nil when the database is Depot's, new, or adopted on purpose.
    package static func foreignDatabaseRefusal(file: String, objects: Int, tables: [String], adopt: Bool) -> DepotError? {
        if objects == 0 || adopt { return nil }
        let names = Set(tables.map { $0.lowercased() })
        if names.contains("depot_meta") && names.contains("depot_entities") { return nil }
        let shown = tables.filter { !$0.lowercased().hasPrefix("sqlite_") }.sorted()
        let list = shown.isEmpty ? "\(objects) schema objects" : "tables " + shown.prefix(5).joined(separator: ", ") + (shown.count > 5 ? " and \(shown.count - 5) more" : "")
        return DepotError(
            .storeCorrupted,
            "\(file) is an SQLite database that another program made: it has \(list), but not Depot's bookkeeping tables (depot_meta, depot_entities). It is not damaged, and Depot did not modify it. Open another path for Depot's store; or, to keep Depot's tables beside the existing ones in this file (switching it to WAL mode for good), open it with SQLiteStore.Options(adoptForeignDatabase: true), or the URL option adopt=true.")
    }

    /// Creates Depot's bookkeeping tables when missing and reads the stored entities.
    static func prepareBookkeeping(_ writer: Connection, file: String) throws(DepotError) -> (entities: [EntityDescription], schemaCookie: Int64) {
        try writer.execute("BEGIN IMMEDIATE")
        do throws(DepotError) {
            try writer.execute(
                """
                CREATE TABLE IF NOT EXISTS depot_meta (key TEXT PRIMARY KEY NOT NULL, value ANY) WITHOUT ROWID;
                INSERT OR IGNORE INTO depot_meta (key, value) VALUES ('format', \(formatVersion));
                CREATE TABLE IF NOT EXISTS depot_entities (name TEXT PRIMARY KEY NOT NULL, description TEXT NOT NULL) WITHOUT ROWID;
                """)
            let format = try writer.scalarText("SELECT value FROM depot_meta WHERE key = 'format'")
            guard let format, let version = Int(format), version <= formatVersion else {
                throw DepotError(.schemaMismatch, "\(file) was written with Depot's SQLite format \(format ?? "unknown"), newer than this version's \(formatVersion); open it with a newer Depot.")
            }
            let statement = try writer.prepare("SELECT name, description FROM depot_entities ORDER BY name", cached: false)
            var entities: [EntityDescription] = []
            while try writer.step(statement, "Reading depot_entities") {
                let name = try writer.column(0, of: statement, as: .string)
                entities.append(try StoredDescription.decode(writer.column(1, of: statement, as: .string), of: "\(name)", in: file))
            }
            try repairIndexes(entities, on: writer)
            // After any index the repair made: the cookie the registry starts verified at.
            let cookie = try writer.schemaCookie()
            try writer.execute("COMMIT")
            return (entities, cookie)
        } catch {
            try? writer.execute("ROLLBACK")
            throw error
        }
    }

    /// Creates the declared indexes a file lacks. Versions before collision-free index names
    /// skipped the second of two attributes whose names collided (`a_b` + `c` and
    /// `a` + `b_c`); their files get the missing index the first time this version opens
    /// them. An entity whose table is missing is left for registration to report.
    static func repairIndexes(_ entities: [EntityDescription], on writer: Connection) throws(DepotError) {
        for entity in entities where entity.attributes.contains(where: { DDL.wantsIndex($0, in: entity) }) {
            let table = try writer.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE", cached: false)
            try writer.bind(.string(entity.name), at: 1, in: table)
            guard try writer.step(table, "Looking up table \(entity.name)") else { continue }
            for attribute in entity.attributes where DDL.wantsIndex(attribute, in: entity) {
                try ensureIndex(attribute, in: entity, on: writer)
            }
        }
    }
}
