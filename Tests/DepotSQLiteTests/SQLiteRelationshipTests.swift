import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotSQLite

@Record(name: "Kennel")
struct Kennel: Hashable {
    var id: String
}

@Record(name: "Hound")
struct Hound: Hashable {
    var id: Int64
    @Stored(.references(Kennel.self, onDelete: .nullify)) var kennelID: String?
}

@Record(name: "Outing")
struct Outing: Hashable {
    var id: Int64
    @Stored(.references(Hound.self, onDelete: .cascade)) var houndID: Int64
}

/// SQLite stores references as real foreign keys, so other tools see and enforce them
/// (the conformance suite checks Depot's own enforcement).
@Suite("SQLite references")
struct SQLiteRelationshipTests {
    @Test func referencesAreForeignKeysThatSQLiteItselfEnforces() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("references.sqlite").path
            let store = try SQLiteStore(path: path)
            try await Controller<Kennel, Kennel>(store: store).save(Kennel(id: "north"))
            try await Controller<Hound, Hound>(store: store).save([Hound(id: 1, kennelID: "north"), Hound(id: 2, kennelID: nil)])
            try await Controller<Outing, Outing>(store: store).save([Outing(id: 10, houndID: 1), Outing(id: 11, houndID: 2)])
            await store.close()

            let outings = try sqlite3CLIResult(path, "PRAGMA foreign_key_list(Outing);")
            #expect(outings.text.contains("Hound|houndID|id|NO ACTION|NO ACTION|NONE"), "\(outings.text)")
            let hounds = try sqlite3CLIResult(path, "PRAGMA foreign_key_list(Hound);")
            #expect(hounds.text.contains("Kennel|kennelID|id|NO ACTION|NO ACTION|NONE"), "\(hounds.text)")
            let schema = try sqlite3CLIResult(path, "SELECT sql FROM sqlite_master WHERE name = 'Outing';")
            #expect(schema.text.contains("DEFERRABLE INITIALLY DEFERRED /* depot: on delete cascade */"), "\(schema.text)")
            let check = try sqlite3CLIResult(path, "PRAGMA foreign_key_check;")
            #expect(check.status == 0 && check.text.isEmpty, "no violations: \(check.text)")

            // Another program with foreign keys on cannot commit a reference to nothing.
            let orphaning = try sqlite3CLIResult(path, "PRAGMA foreign_keys = ON; DELETE FROM Hound WHERE id = 1;")
            #expect(orphaning.status != 0, "SQLite refused to orphan outing 10")
            let dangling = try sqlite3CLIResult(path, "PRAGMA foreign_keys = ON; INSERT INTO Outing (id, houndID) VALUES (12, 99);")
            #expect(dangling.status != 0, "SQLite refused a dangling reference")

            let reopened = try SQLiteStore(path: path)
            try await #expect(Controller<Outing, Outing>(store: reopened).fetchAll().map(\.id) == [10, 11])
            try await #expect(Controller<Hound, Hound>(store: reopened).delete(id: 1))
            try await #expect(Controller<Outing, Outing>(store: reopened).fetchAll().map(\.id) == [11])
            await #expect(throws: DepotError.self) {
                try await Controller<Outing, Outing>(store: reopened).save(Outing(id: 13, houndID: 1))
            }
            await reopened.close()
        }
    }
}
