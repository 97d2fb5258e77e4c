import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotSQLite

/// The SQLite store keeps a select's, a count's and a delete's statement per request shape
/// and binds each call's own values to it. Requests of one shape asked one after the other
/// with other values (nil among them, `in` lists of one length, other limits and offsets)
/// must each answer what the memory store answers, so a parameter bound in the wrong place
/// or a shape that hides a difference in the SQL shows as a wrong page, count or deletion.
@Suite("SQLite select shapes")
struct SQLiteSelectShapeTests {
    @Test func requestsOfOneShapeWithOtherValuesAnswerAsTheReference() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(path: directory.appendingPathComponent("shapes.sqlite").path)
            let sqlite = Controller<ListedPet, ListedPet>(store: store)
            let memory = Controller<ListedPet, ListedPet>(store: MemoryStore())
            let pets = SQLiteCompositeIndexTests.pets(400)
            try await sqlite.save(pets)
            try await memory.save(pets)

            let groups: [[Request<ListedPet>]] = [
                ["cat", "dog", "bird", "none"].map { Request(\.species == $0).sorted(by: \.name).limit(20) },
                [0, 7, 33].map { Request(\.species == "fish").sorted(by: \.name).limit(10).offset($0) },
                [Int64?.none, 2005, 2011].map { Request(\.born == $0).sorted(by: \.name).limit(15) },
                [["cat", "dog"], ["bird", "fish"], ["dog", "none"]].map { Request(.in(\.species, $0)).sorted(by: \.name).limit(25) },
                [("cat", "n3"), ("dog", "n7"), ("fish", "n0")].map { Request(\.species == $0.0 && \.name > $0.1).sorted(by: \.name).limit(12) },
                [("bird", Int64(2003)), ("cat", 2017)].map { Request(\.species == $0.0 || \.born < $0.1).sorted(by: \.name).limit(30) },
                ["cat", "dog"].map { Request(!(\.species == $0)).sorted(by: \.born, ascending: false).limit(18) },
            ]
            for requests in groups {
                for request in requests {
                    let expected = try await memory.fetchAll(request)
                    #expect(try await sqlite.fetchAll(request) == expected, "\(request)")
                    // Once more, now that the shape's SQL is kept.
                    #expect(try await sqlite.fetchAll(request) == expected, "\(request), asked again")
                    let count = try await memory.count(request)
                    #expect(try await sqlite.count(request) == count, "count of \(request)")
                    #expect(try await sqlite.count(request) == count, "count of \(request), asked again")
                }
            }
        }
    }

    @Test func deletionsOfOneShapeWithOtherValuesDeleteAsTheReference() async throws {
        try await withTemporaryDirectory { directory in
            let store = try SQLiteStore(path: directory.appendingPathComponent("deletes.sqlite").path)
            let sqlite = Controller<ListedPet, ListedPet>(store: store)
            let memory = Controller<ListedPet, ListedPet>(store: MemoryStore())
            let pets = SQLiteCompositeIndexTests.pets(400)
            try await sqlite.save(pets)
            try await memory.save(pets)

            let groups: [[Request<ListedPet>]] = [
                ["cat", "dog", "none"].map { Request(\.species == $0).sorted(by: \.name).limit(3) },
                [0, 4, 9].map { Request(\.species == "fish").sorted(by: \.name, ascending: false).limit(2).offset($0) },
                [Int64?.none, 2005, 2011].map { Request(\.born == $0) },
                [["cat", "dog"], ["bird", "fish"]].map { Request(.in(\.species, $0) && \.born > 2015) },
            ]
            for requests in groups {
                for request in requests {
                    let expected = try await memory.deleteAll(where: request)
                    #expect(try await sqlite.deleteAll(where: request) == expected, "\(request)")
                    #expect(try await sqlite.fetchAll() == memory.fetchAll(), "after deleting \(request)")
                }
            }
        }
    }
}
