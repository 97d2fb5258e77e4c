import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A record sorted by its key, by an attribute that cannot be nil and by one that can, each
/// with an index of its own.
@Record(name: "Ranked")
struct PGRanked: Hashable {
    var id: Int64
    @Stored(.indexed) var score: Int64
    @Stored(.indexed) var nick: String?
}

/// A record with a unique attribute that can be nil.
@Record(name: "Handled")
struct PGHandled: Hashable {
    var id: Int64
    @Stored(.unique) var handle: String?
}

/// A record with a unique attribute that cannot be nil.
@Record(name: "Mailed")
struct PGMailed: Hashable {
    var id: Int64
    @Stored(.unique) var email: String
}

/// PostgreSQL reads an index for an ORDER BY only when their nulls orders agree, and does
/// not reason from NOT NULL. Depot's sorts put nil first ascending; written so for every
/// column, they matched neither the primary key's index nor the single-attribute indexes
/// (both in PostgreSQL's default order), and a page sorted by either read and sorted every
/// row. These check the plans on an analyzed table, and that a store made before the change
/// has its indexes rebuilt on open.
@Suite("PostgresStore index order", .enabled(if: TestServer.available))
struct PostgresIndexOrderTests {
    static func fill(_ store: PostgresStore) async throws -> Controller<PGRanked, PGRanked> {
        let ranked = Controller<PGRanked, PGRanked>(store: store)
        var all: [PGRanked] = []
        for i in 0..<20_000 {
            let score = Int64((i * 7_919) % 5_000)
            let nick: String? = i % 4 == 0 ? nil : "n\((i * 104_729) % 9_000)"
            all.append(PGRanked(id: Int64(i + 1), score: score, nick: nick))
        }
        try await ranked.save(all)
        _ = try await store.executeOnWriter("ANALYZE \"Ranked\"")
        return ranked
    }

    static func expectOrderedRead(_ plan: QueryPlan, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(plan.usesIndex, "\(what) reads an index: \(plan)", sourceLocation: sourceLocation)
        #expect(!plan.sortsAfterwards, "\(what) reads the index in order, no sort: \(plan)", sourceLocation: sourceLocation)
    }

    @Test("pages sorted by the key or by an indexed attribute read their index in order")
    func sortedPagesReadIndexes() async throws {
        let store = try TestServer.makeStore()
        let ranked = try await Self.fill(store)
        let byKey = try await ranked.explain(Request<PGRanked>.all.limit(20))
        #expect(byKey.access == .primaryKey && !byKey.sortsAfterwards, "the first page in key order: \(byKey)")
        let after = try await ranked.explain(Request<PGRanked>(\.id > 15_000).limit(20))
        #expect(after.access == .primaryKey && !after.sortsAfterwards, "a page after a key: \(after)")
        Self.expectOrderedRead(try await ranked.explain(Request<PGRanked>.all.sorted(by: \.score).limit(20)), "a page by score")
        Self.expectOrderedRead(try await ranked.explain(Request<PGRanked>.all.sorted(by: \.nick).limit(20)), "a page by a nullable attribute")
        // The answers are the reference's: nil first, then by key.
        let page = try await ranked.fetchAll(Request<PGRanked>.all.sorted(by: \.nick).limit(3))
        #expect(page.map(\.nick) == [nil, nil, nil] && page.map(\.id) == [1, 5, 9], "\(page)")
        let last = try await ranked.fetchAll(Request<PGRanked>.all.sorted(by: \.nick, ascending: false).limit(1000))
        #expect(!last.contains { $0.nick == nil }, "nil sorts last descending")
        await store.close()
    }

    static func fillHandled(_ store: PostgresStore) async throws -> Controller<PGHandled, PGHandled> {
        let handled = Controller<PGHandled, PGHandled>(store: store)
        var all: [PGHandled] = []
        for i in 0..<20_000 {
            all.append(PGHandled(id: Int64(i + 1), handle: i % 4 == 0 ? nil : "h\((i * 7_919) % 20_000)"))
        }
        try await handled.save(all)
        _ = try await store.executeOnWriter("ANALYZE \"Handled\"")
        return handled
    }

    /// The unique constraint's index is in PostgreSQL's default order (a constraint takes
    /// no other), nil last ascending: a page sorted by a nullable unique attribute read and
    /// sorted every row until the attribute had an index in Depot's order beside it.
    @Test("pages sorted by a nullable unique attribute read an index in order")
    func sortedByNullableUnique() async throws {
        let store = try TestServer.makeStore()
        let handled = try await Self.fillHandled(store)
        Self.expectOrderedRead(try await handled.explain(Request<PGHandled>.all.sorted(by: \.handle).limit(20)), "a page by a nullable unique attribute")
        // Descending, nil last and ties (the nils) by the key ascending: the index read
        // backwards gives the values in order, and at most the nils are sorted by key.
        let descending = try await handled.explain(Request<PGHandled>.all.sorted(by: \.handle, ascending: false).limit(20))
        #expect(descending.usesIndex, "a page by a nullable unique attribute, descending: \(descending)")
        #expect(!descending.backendDetail.contains("\"Node Type\": \"Sort\""), "no full sort: \(descending)")
        let page = try await handled.fetchAll(Request<PGHandled>.all.sorted(by: \.handle).limit(3))
        #expect(page.map(\.handle) == [nil, nil, nil] && page.map(\.id) == [1, 5, 9], "\(page)")
        let last = try await handled.fetchAll(Request<PGHandled>.all.sorted(by: \.handle, ascending: false).limit(2))
        #expect(last.map(\.handle) == ["h9999", "h9998"], "\(last)")
        // Uniqueness is the constraint's, as before: nils never conflict, a value does,
        // with Depot's message.
        try await handled.save([PGHandled(id: 30_001, handle: nil), PGHandled(id: 30_002, handle: nil)])
        do {
            try await handled.save(PGHandled(id: 30_003, handle: "h1"))
            Issue.record("a duplicate unique value was saved")
        } catch let error as DepotError {
            #expect(error.code == .duplicateKey && error.message == "Another Handled already has handle = \"h1\", and handle is declared unique.", "\(error)")
        }
        await store.close()
    }

    /// Values of a unique attribute that cannot be nil are all distinct, so Depot's sort
    /// ends there: with the key as a tie-break after it, PostgreSQL read the constraint's
    /// index in order and still sorted on top of it (an Incremental Sort).
    @Test("pages sorted by a unique attribute that cannot be nil read its constraint's index, no sort")
    func sortedByUnique() async throws {
        let store = try TestServer.makeStore()
        let mailed = Controller<PGMailed, PGMailed>(store: store)
        let all = (0..<20_000).map { PGMailed(id: Int64($0 + 1), email: "m\(($0 * 7_919) % 20_000)@example.com") }
        try await mailed.save(all)
        // Strings sort by their UTF-8 bytes.
        let emails = all.map(\.email).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        _ = try await store.executeOnWriter("ANALYZE \"Mailed\"")
        for ascending in [true, false] {
            let plan = try await mailed.explain(Request<PGMailed>.all.sorted(by: \.email, ascending: ascending).limit(20))
            #expect(plan.usesIndex, "ascending \(ascending): \(plan)")
            #expect(!plan.sortsAfterwards && !plan.backendDetail.contains("Sort\""), "ascending \(ascending), no sort of any kind: \(plan)")
        }
        let first = try await mailed.fetchAll(Request<PGMailed>.all.sorted(by: \.email).limit(2))
        #expect(first.map(\.email) == Array(emails.prefix(2)), "\(first)")
        let page = try await mailed.fetchAll(Request<PGMailed>.all.sorted(by: \.email, ascending: false).limit(2))
        #expect(page.map(\.email) == Array(emails.suffix(2).reversed()), "\(page)")
        await store.close()
    }

    @Test("a store made before nullable unique attributes had an index gets one on a read-write open only")
    func nullableUniqueIndexIsAdded() async throws {
        let schema = "io_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let name = PostgresStore.indexName(entity: "Handled", attribute: "handle")
        func definitions(_ store: PostgresStore) async throws -> [String] {
            try await store.executeOnWriter(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Handled' AND indexname LIKE 'depot_idx%' ORDER BY indexname")
        }
        do {
            let store = try TestServer.makeStore(schema: schema)
            let handled = Controller<PGHandled, PGHandled>(store: store)
            try await handled.save(PGHandled(id: 1, handle: nil))
            #expect(try await definitions(store).count == 1)
            // What Depot made in index order 2: no index but the constraint's.
            _ = try await store.executeOnWriter("DROP INDEX \"\(name)\"")
            _ = try await store.executeOnWriter("UPDATE depot_meta SET value = '2' WHERE key = 'index_order'")
            await store.close()
        }
        do {
            let store = try PostgresStore(url: try #require(TestServer.url), options: .init(schema: schema, readers: 1, readOnly: true))
            #expect(try await definitions(store).isEmpty, "a read-only store changes nothing")
            await store.close()
        }
        let store = try TestServer.makeStore(schema: schema)
        let defs = try await definitions(store)
        #expect(defs.count == 1 && defs[0].hasSuffix("(handle NULLS FIRST, id)"), "\(defs)")
        #expect(try await store.executeOnWriter("SELECT value FROM depot_meta WHERE key = 'index_order'") == ["3"])
        let handled = Controller<PGHandled, PGHandled>(store: store)
        #expect(try await handled.fetchAll().map(\.id) == [1], "the records are kept")
        await store.close()
    }

    @Test("a store made with indexes in the old order has them rebuilt on open")
    func oldIndexesAreRebuilt() async throws {
        let schema = "io_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        func definitions(_ store: PostgresStore) async throws -> [String] {
            try await store.executeOnWriter(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'Ranked' AND indexname LIKE 'depot_idx%' ORDER BY indexname")
        }
        do {
            let store = try TestServer.makeStore(schema: schema)
            let ranked = Controller<PGRanked, PGRanked>(store: store)
            try await ranked.save(PGRanked(id: 1, score: 3, nick: nil))
            // What an earlier Depot made: the indexes in PostgreSQL's default order, and no
            // record of their order.
            for attribute in ["score", "nick"] {
                let name = PostgresStore.indexName(entity: "Ranked", attribute: attribute)
                _ = try await store.executeOnWriter("DROP INDEX \"\(name)\"")
                _ = try await store.executeOnWriter("CREATE INDEX \"\(name)\" ON \"Ranked\" (\"\(attribute)\")")
            }
            _ = try await store.executeOnWriter("DELETE FROM depot_meta WHERE key = 'index_order'")
            let old = try await definitions(store)
            #expect(old.count == 2 && old.allSatisfy { !$0.contains("NULLS") && !$0.contains(", id") }, "\(old)")
            await store.close()
        }
        let store = try TestServer.makeStore(schema: schema)
        let defs = try await definitions(store)
        #expect(defs.count == 2, "\(defs)")
        #expect(defs.contains { $0.hasSuffix("(nick NULLS FIRST, id)") }, "\(defs)")
        #expect(defs.contains { $0.hasSuffix("(score, id)") }, "\(defs)")
        let ranked = Controller<PGRanked, PGRanked>(store: store)
        #expect(try await ranked.fetchAll().map(\.id) == [1], "the records are kept")
        await store.close()
    }
}
