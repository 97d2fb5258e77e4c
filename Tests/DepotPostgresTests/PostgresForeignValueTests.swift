import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

@Record(name: "Gadget")
struct Gadget: Equatable {
    var id: Int64
    var count: Int32
    var size: Int64
    var label: String
    var ratio: Double
    var blob: Data
    var tag: UUID
    var flag: Bool
    var note: String?
}

/// Values another program wrote into a store's tables (a changed column type, a NULL, text
/// Depot's encoding cannot have made, a number the attribute's type cannot hold) are a
/// `conversionFailed` naming the entity, the key and the attribute: never a zero, never
/// one type's bytes read as another's.
@Suite("PostgresStore reading values another program wrote", .enabled(if: TestServer.available))
struct PostgresForeignValueTests {
    static func gadget(_ id: Int64) -> Gadget {
        Gadget(
            id: id, count: 7, size: 12, label: "label\(id)", ratio: 0.5, blob: Data([1, 2, 3]),
            tag: UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!, flag: true, note: "n")
    }

    /// Saves gadgets 1 and 2, runs `sql` through psql in the store's schema (as another
    /// program would), and reads gadget 2 back with a store opened afterwards, every way:
    /// by key, in a list, and through an observation's first delivery.
    static func readAfter(_ sql: String) async throws -> [DepotError] {
        let url = try #require(TestServer.url)
        let psql = try #require(["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }))
        let schema = "f_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let before = try PostgresStore(url: url, options: .init(schema: schema, readers: 1))
        try await Controller<Gadget, Gadget>(store: before).save([gadget(1), gadget(2)])
        await before.close()
        let run = try ProcessLaunch.run(psql, [url, "-q", "-v", "ON_ERROR_STOP=1", "-c", "SET search_path TO \"\(schema)\"; \(sql)"])
        #expect(run.exit.succeeded, "\(run.stderr)")

        let store = try PostgresStore(url: url, options: .init(schema: schema, readers: 1))
        let gadgets = Controller<Gadget, Gadget>(store: store)
        var errors: [DepotError] = []
        func attempt(_ what: String, _ body: () async throws -> Void) async {
            do {
                try await body()
                Issue.record("\(what) read the value another program wrote without an error")
            } catch let error as DepotError {
                errors.append(error)
            } catch {
                Issue.record("\(what): \(error)")
            }
        }
        await attempt("fetchOne") { _ = try await gadgets.fetchOne(id: 2) }
        await attempt("fetchAll") { _ = try await gadgets.fetchAll(Request(\.id == 2)) }
        await attempt("observe") {
            var iterator = gadgets.observe(Request(\.id == 2)).makeAsyncIterator()
            _ = try await iterator.next()
        }
        await store.close()
        return errors
    }

    static func expectNamed(_ errors: [DepotError], attribute: String, _ comment: Comment? = nil, code: DepotError.Code = .conversionFailed) {
        #expect(errors.count == 3)
        for error in errors {
            #expect(error.code == code, "\(error)")
            #expect(error.message.contains("Gadget"), "\(error)")
            #expect(error.message.contains("primary key 2"), "\(error)")
            #expect(error.message.contains(attribute), "\(error)")
        }
    }

    @Test("a bigint column holding text is refused, not read as the text's bytes")
    func textWhereAnIntegerWas() async throws {
        // Eight bytes of text: as many as a bigint, so only the column's type tells them apart.
        let errors = try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN size TYPE text USING 'twelve!!'")
        Self.expectNamed(errors, attribute: "size")
        #expect(errors.allSatisfy { $0.message.contains("text") })
    }

    @Test("a text column holding a bigint is refused, not read as its bytes")
    func integerWhereTextWas() async throws {
        let errors = try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN label TYPE bigint USING 2314885530818453536")
        Self.expectNamed(errors, attribute: "label")
    }

    @Test("an integer column made smaller (integer, smallint) is refused")
    func narrowerIntegerColumns() async throws {
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN size TYPE integer"), attribute: "size")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN count TYPE smallint"), attribute: "count")
    }

    @Test("real, numeric, text and varchar where Depot keeps double, uuid, bytea and text are refused")
    func otherRetypedColumns() async throws {
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN ratio TYPE real"), attribute: "ratio")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN ratio TYPE numeric"), attribute: "ratio")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN tag TYPE text"), attribute: "tag")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN blob TYPE text USING 'abcdefgh'"), attribute: "blob")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN flag TYPE integer USING 1"), attribute: "flag")
        Self.expectNamed(try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN note TYPE varchar(20)"), attribute: "note")
    }

    @Test("a number the attribute's type cannot hold is refused")
    func outOfRange() async throws {
        // The core's narrowing check names the value and the property's type.
        Self.expectNamed(try await Self.readAfter("UPDATE \"Gadget\" SET count = 3000000000 WHERE id = 2"), attribute: "3000000000 as Int32")
    }

    @Test("NULL in an attribute that is not optional is refused, naming it")
    func nullInANonOptionalAttribute() async throws {
        let errors = try await Self.readAfter("ALTER TABLE \"Gadget\" ALTER COLUMN label DROP NOT NULL; UPDATE \"Gadget\" SET label = NULL WHERE id = 2")
        Self.expectNamed(errors, attribute: "label")
    }

    @Test("text with a raw U+0001, which Depot's string encoding never writes, is refused")
    func rawControlCharacter() async throws {
        Self.expectNamed(try await Self.readAfter("UPDATE \"Gadget\" SET label = E'a\\x01b' WHERE id = 2"), attribute: "label")
        Self.expectNamed(try await Self.readAfter("UPDATE \"Gadget\" SET note = E'ends with \\x01' WHERE id = 2"), attribute: "note")
    }

    @Test("values Depot wrote read back as they were")
    func depotsOwnValues() async throws {
        let url = try #require(TestServer.url)
        let store = try PostgresStore(url: url, options: .init(schema: "f_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())", readers: 1))
        let gadgets = Controller<Gadget, Gadget>(store: store)
        var odd = Self.gadget(3)
        odd.label = "nul \u{0} and one \u{1}"
        odd.note = "\u{1}\u{1}\u{0}"
        try await gadgets.save([Self.gadget(1), odd])
        #expect(try await gadgets.fetchAll(Request<Gadget>.all.sorted(by: \.id)) == [Self.gadget(1), odd])
        #expect(try await gadgets.fetchOne(id: 3) == odd)
        await store.close()
    }
}
