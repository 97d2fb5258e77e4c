package import DepotCore

// What Depot's own tests look at inside an SQLite store: package members, so the tests need
// no `@testable import`.
extension EngineStore where Engine == SQLiteEngine {
    /// Checkpoints the WAL beside the writer.
    package var checkpointer: Checkpointer { engine.checkpointer }

    /// How many reader connections keep a read transaction between reads now (see
    /// `KeptSnapshots`); 0 for a read-only store.
    package var keptSnapshots: Int { engine.kept?.keptCount ?? 0 }

    /// Pauses (or resumes) the sweeps that end idle readers' kept transactions, so that a
    /// test can look at a kept one however slowly it runs.
    package func pauseSnapshotSweeps(_ paused: Bool) {
        engine.kept?.sweepsPaused.store(paused, ordering: .sequentiallyConsistent)
    }

    /// The journal mode and synchronous level the writer connection runs with, as SQLite
    /// reports them (`PRAGMA journal_mode`, `PRAGMA synchronous`: 0 off, 1 normal, 2 full).
    package func pragmaSettings() async throws -> (journalMode: String, synchronous: Int) {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed(engine.storeDescription)) {
            try self.engine.pragmaSettings()
        }
    }

    /// Caps the database at `pages` pages on the writer connection (SQLite's
    /// `max_page_count`), so tests can fill the "disk" without filling a real one.
    package func limitPages(to pages: Int) async throws {
        try await writerLane.run(admittedBy: gate, closed: DepotError.closed(engine.storeDescription)) {
            try self.engine.limitPages(to: pages)
        }
    }

    /// Checks the head of a database file: see `SQLiteEngine.validateHeader`.
    package static func validateHeader(_ head: [UInt8], fileSize size: Int, walSize: Int, file: String) throws(DepotError) {
        try SQLiteEngine.validateHeader(head, fileSize: size, walSize: walSize, file: file)
    }

    /// The refusal of another program's database: see `SQLiteEngine.foreignDatabaseRefusal`.
    package static func foreignDatabaseRefusal(file: String, objects: Int, tables: [String], adopt: Bool) -> DepotError? {
        SQLiteEngine.foreignDatabaseRefusal(file: file, objects: objects, tables: tables, adopt: adopt)
    }
}
