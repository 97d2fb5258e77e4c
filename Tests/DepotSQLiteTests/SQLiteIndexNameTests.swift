import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotSQLite

/// Issue #11, item 12: index names `depot_idx_<entity>_<attribute>` collided
/// (`a_b` + `c` and `a` + `b_c`), and `CREATE INDEX IF NOT EXISTS` then silently left the
/// second attribute without an index.
@Suite("SQLite index names")
struct SQLiteIndexNameTests {
    private static func entity(_ name: String, indexed attribute: String, isIndexed: Bool = true) -> EntityDescription {
        EntityDescription(
            name: name,
            attributes: [
                AttributeDescription(name: "id", type: .int64),
                AttributeDescription(name: attribute, type: .int64, isOptional: true, isIndexed: isIndexed),
            ],
            primaryKeyIndex: 0)
    }

    private static func indexes(_ path: String) throws -> String {
        try sqlite3CLI(path, "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND name LIKE 'depot_idx_%' ORDER BY tbl_name, name;")
    }

    @Test func namesAreCollisionFreeAndDecodable() {
        #expect(DDL.indexName(entity: "a_b", attribute: "c") == "depot_idx_3_a_b_c")
        #expect(DDL.indexName(entity: "a", attribute: "b_c") == "depot_idx_1_a_b_c")
        #expect(DDL.legacyIndexName(entity: "a_b", attribute: "c") == DDL.legacyIndexName(entity: "a", attribute: "b_c"), "the old collision")

        // Names made of few characters collide often under the old scheme: every distinct
        // pair must still get a distinct name that decodes back to it.
        var generator = SplitMix64(seed: 12)
        func identifier() -> String {
            let alphabet = Array("ab_1")
            let length = 1 + Int(generator.next() % 5)
            var name = String(alphabet[Int(generator.next() % 2)])  // a letter first, like a valid name
            for _ in 1..<length { name.append(alphabet[Int(generator.next() % 4)]) }
            return name
        }
        var seen: [String: String] = [:]
        var legacyCollisions = 0
        var legacySeen: [String: String] = [:]
        for _ in 0..<5_000 {
            let pair = (identifier(), identifier())
            let name = DDL.indexName(entity: pair.0, attribute: pair.1)
            let key = pair.0 + "\u{0}" + pair.1
            #expect(seen[name] == nil || seen[name] == key, "\(name) names both \(seen[name] ?? "") and \(key)")
            seen[name] = key
            let legacy = DDL.legacyIndexName(entity: pair.0, attribute: pair.1)
            if let other = legacySeen[legacy], other != key { legacyCollisions += 1 }
            legacySeen[legacy] = key
            #expect(seen[legacy] == nil, "a legacy name equals a current one: \(legacy)")
            let parts = DDL.indexNameParts(name)
            #expect(parts?.entity == pair.0 && parts?.attribute == pair.1, "\(name) decodes to \(String(describing: parts))")
        }
        #expect(legacyCollisions > 0, "the sample does exercise the old collision")
    }

    @Test func decodingAnyStringNeverTrapsAndOnlyAcceptsCanonicalNames() {
        for name in ["", "depot_idx_", "depot_idx_x", "depot_idx_3", "depot_idx_3_", "depot_idx_03_a_b_c", "depot_idx_99999999999999999999_a_b",
            "depot_idx_1_é_x", "depot_idx_2_é_x", "depot_idx_0__x", "depot_idx_1_ab"]
        {
            if let parts = DDL.indexNameParts(name) {
                #expect(DDL.indexName(entity: parts.entity, attribute: parts.attribute) == name, "\(name)")
            }
        }
        #expect(DDL.indexNameParts("depot_idx_03_a_b_c") == nil, "leading zeros are not canonical")
        var generator = SplitMix64(seed: 13)
        let pieces = ["depot_idx_", "1", "2", "9", "0", "_", "a", "b", "é", "\u{0}"]
        for _ in 0..<20_000 {
            let name = (0..<Int(generator.next() % 9)).map { _ in pieces[Int(generator.next() % UInt64(pieces.count))] }.joined()
            if let parts = DDL.indexNameParts(name) {
                #expect(DDL.indexName(entity: parts.entity, attribute: parts.attribute) == name, "\(name)")
            }
        }
    }

    @Test func collidingOldNamesGetAnIndexEach() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("collide.sqlite").path
            let store = try SQLiteStore(path: path)
            try await store.register([Self.entity("a_b", indexed: "c"), Self.entity("a", indexed: "b_c")])
            await store.close()
            #expect(try Self.indexes(path) == "a|depot_idx_1_a_b_c\na_b|depot_idx_3_a_b_c\n")
        }
    }

    @Test func filesWithOldIndexNamesKeepWorkingAndAreRepaired() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("legacy.sqlite").path
            let ab = Self.entity("a_b", indexed: "c")
            let a = Self.entity("a", indexed: "b_c")
            do {
                let store = try SQLiteStore(path: path)
                try await store.register([ab, a])
                try await Cats(store: store).save(Cat.workload(count: 30))
                await store.close()
            }
            // What the previous version left: legacy names, and no index at all for the
            // second of the two colliding attributes.
            _ = try sqlite3CLI(
                path,
                """
                DROP INDEX depot_idx_3_a_b_c; DROP INDEX depot_idx_1_a_b_c; DROP INDEX depot_idx_3_Cat_age;
                CREATE INDEX depot_idx_a_b_c ON a_b(c); CREATE INDEX depot_idx_Cat_age ON Cat(age);
                """)

            do {
                // Opening adds the missing index and keeps the legacy-named ones, without a duplicate.
                let store = try SQLiteStore(path: path)
                try await store.register([ab, a])
                #expect(try await Cats(store: store).count(Request(\.age > 5)) == Cat.workload(count: 30).filter { $0.age > 5 }.count)
                await store.close()
            }
            #expect(try Self.indexes(path) == "Cat|depot_idx_Cat_age\na|depot_idx_1_a_b_c\na_b|depot_idx_a_b_c\n")

            do {
                // A migration that drops the index finds it under its legacy name, and only on
                // its own table; adding it back uses the new name.
                let store = try SQLiteStore(path: path)
                try await store.register([Self.entity("a_b", indexed: "c", isIndexed: false)])
                await store.close()
            }
            #expect(try Self.indexes(path) == "Cat|depot_idx_Cat_age\na|depot_idx_1_a_b_c\n")
            do {
                let store = try SQLiteStore(path: path)
                try await store.register([ab])
                await store.close()
            }
            #expect(try Self.indexes(path) == "Cat|depot_idx_Cat_age\na|depot_idx_1_a_b_c\na_b|depot_idx_3_a_b_c\n")
            #expect(try sqlite3CLI(path, "PRAGMA integrity_check;") == "ok\n")
        }
    }
}
