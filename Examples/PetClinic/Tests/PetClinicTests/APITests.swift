import Depot
import Foundation
import HummingbirdTesting
import NIOCore
import Testing

@testable import PetClinic

@Suite("PetClinic API", .serialized)
struct APITests {
    @Test("create, read, update and delete, with the nested pets and visits", arguments: TestBackend.all)
    func crud(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, _ in
            let owner = try await client.createOwner("Ana", city: "Lisbon", email: "ana@example.com")
            var response = try await client.get("/owners/\(owner.id)")
            #expect(response.status == .ok)
            #expect(try decode(Owner.self, response) == owner)

            response = try await client.put("/owners/\(owner.id)", try json(["name": "Ana Maria", "city": "Porto"]))
            #expect(response.status == .ok)
            #expect(try decode(Owner.self, response).city == "Porto")

            let rex = try await client.createPet("Rex", species: "dog", birthYear: 2019, owner: owner.id)
            _ = try await client.createPet("Ada", species: "cat", birthYear: 2021, owner: owner.id)
            response = try await client.get("/owners/\(owner.id)/pets")
            #expect(try decode(List<Pet>.self, response).items.map(\.name) == ["Ada", "Rex"], "the owner's pets by name")

            response = try await client.put("/pets/\(rex.id)", try json(PetUpdate(name: "Rex", species: "dog", birthYear: 2018)))
            #expect(response.status == .ok)
            #expect(try decode(Pet.self, response).birthYear == 2018)
            #expect(try decode(Pet.self, response).ownerID == owner.id, "an update without ownerID keeps the owner")

            response = try await client.post("/pets/\(rex.id)/visits", try json(["reason": "vaccination"]))
            #expect(response.status == .created)
            response = try await client.get("/pets/\(rex.id)/visits")
            #expect(try decode(List<Visit>.self, response).items.map(\.reason) == ["vaccination"])

            // Deleting the owner deletes the pets and their visits (the references' cascade).
            response = try await client.delete("/owners/\(owner.id)")
            #expect(response.status == .noContent)
            try expectError(try await client.get("/owners/\(owner.id)"), .notFound, code: "notFound", mentioning: owner.id.uuidString)
            try expectError(try await client.get("/pets/\(rex.id)"), .notFound, code: "notFound", mentioning: "No pet")
            try expectError(try await client.get("/pets/\(rex.id)/visits"), .notFound, code: "notFound", mentioning: "No pet")
            try expectError(try await client.delete("/pets/\(rex.id)"), .notFound, code: "notFound", mentioning: "No pet")
        }
    }

    @Test("lists filter, sort and page with cursors to the end", arguments: TestBackend.all)
    func lists(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owners = [
                try await client.createOwner("Bo", city: "Oslo"),
                try await client.createOwner("Cy", city: "Rome"),
            ]
            var expected: [Pet] = []
            for i in 0..<45 {
                let species = ["cat", "dog", "parrot"][i % 3]
                expected.append(Pet(id: UUID(), ownerID: owners[i % 2].id, name: "pet\(i % 7)-\(i)", species: species, birthYear: 2000 + i % 20))
            }
            try await clinic.pets.save(expected)

            // Every page of cats, by birth year descending then name, in pages of 4.
            var seen: [Pet] = []
            var uri = "/pets?species=cat&sort=-birthYear,name&limit=4"
            var pages = 0
            while pages < 20 {
                let response = try await client.get(uri)
                #expect(response.status == .ok, "\(String(buffer: response.body))")
                let page = try decode(List<Pet>.self, response)
                seen += page.items
                pages += 1
                guard let next = page.next else { break }
                uri = "/pets?species=cat&sort=-birthYear,name&limit=4&cursor=\(next)"
            }
            let cats = expected.filter { $0.species == "cat" }.sorted { a, b in
                a.birthYear != b.birthYear ? a.birthYear > b.birthYear : a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
            }
            #expect(seen.map(\.id) == cats.map(\.id), "every cat once, in order")
            #expect(pages == 4, "15 cats in pages of 4, no empty last page")

            let byOwner = try decode(List<Pet>.self, try await client.get("/pets?ownerID=\(owners[1].id)&limit=100"))
            #expect(byOwner.items.count == 22)
            #expect(byOwner.next == nil)
            let prefixed = try decode(List<Pet>.self, try await client.get("/pets?namePrefix=pet3-&limit=100"))
            #expect(Set(prefixed.items.map(\.name)) == Set(expected.map(\.name).filter { $0.hasPrefix("pet3-") }))
            let oslo = try decode(List<Owner>.self, try await client.get("/owners?city=Oslo"))
            #expect(oslo.items.map(\.name) == ["Bo"])

            // A cursor belongs to its order.
            let first = try decode(List<Pet>.self, try await client.get("/pets?sort=name&limit=2"))
            let cursor = try #require(first.next)
            try expectError(try await client.get("/pets?sort=species&cursor=\(cursor)"), .badRequest, code: "validation", mentioning: "sort order")
        }
    }

    /// The list endpoint's default page reads the (species, name) index the model declares,
    /// in order. On the embedded backends; PostgreSQL's planner chooses by statistics that
    /// a table just filled does not have yet, and its own tests check its plans on analyzed
    /// tables.
    @Test("the list page reads the (species, name) index", arguments: TestBackend.all.filter { $0.name != "postgres" })
    func listPagePlan(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owner = try await client.createOwner("Bo", city: "Oslo")
            let species = ["cat", "dog", "parrot", "rabbit", "hamster", "horse", "snake", "fish"]
            try await clinic.pets.save((0..<1_000).map { i in
                Pet(id: UUID(), ownerID: owner.id, name: "pet\(i % 97)", species: species[i % species.count], birthYear: 2000 + i % 20)
            })
            let plan = try await clinic.pets.explain(Request(\.species == "cat").sorted(by: \.name).limit(20))
            guard case .index(let components) = plan.access else {
                Issue.record("the list page does not read an index: \(plan)")
                return
            }
            #expect(components.prefix(2).map(\.attribute) == ["species", "name"], "\(plan)")
            #expect(!plan.sortsAfterwards, "\(plan)")
        }
    }

    @Test("bad input answers 400 with a message naming it", arguments: TestBackend.all)
    func validation(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, _ in
            let owner = try await client.createOwner("Di", city: "Kyiv", email: "di@example.com")
            try expectError(try await client.get("/pets?limit=9223372036854775807"), .badRequest, code: "validation", mentioning: "limit must be a whole number from 1 to 100")
            try expectError(try await client.get("/pets?limit=0"), .badRequest, code: "validation", mentioning: "'0'")
            try expectError(try await client.get("/pets?limit=ten"), .badRequest, code: "validation", mentioning: "'ten'")
            try expectError(try await client.get("/pets?sort=weight"), .badRequest, code: "validation", mentioning: "Unknown sort key 'weight'")
            try expectError(try await client.get("/pets?sort=name,name"), .badRequest, code: "validation", mentioning: "twice")
            try expectError(try await client.get("/pets?cursor=%21%21"), .badRequest, code: "validation", mentioning: "cursor is not valid")
            try expectError(try await client.get("/pets/12345"), .badRequest, code: "validation", mentioning: "id must be a UUID")
            try expectError(try await client.get("/owners/not-a-uuid/pets"), .badRequest, code: "validation", mentioning: "'not-a-uuid'")
            try expectError(try await client.get("/pets?ownerID=7"), .badRequest, code: "validation", mentioning: "ownerID must be a UUID")
            try expectError(try await client.post("/owners", json("{\"name\": \"Ed\"")), .badRequest, code: "invalidJSON", mentioning: "not JSON")
            try expectError(try await client.post("/owners", json("{\"name\": \"Ed\"}")), .badRequest, code: "validation", mentioning: "city is missing")
            try expectError(try await client.post("/owners", json("{\"name\": 5, \"city\": \"x\"}")), .badRequest, code: "validation", mentioning: "name must be a string.")
            try expectError(try await client.post("/owners", json("{\"name\": \" \", \"city\": \"x\"}")), .badRequest, code: "validation", mentioning: "name must not be empty")
            try expectError(
                try await client.post("/owners/\(owner.id)/pets", json("{\"name\": \"Fi\", \"species\": \"cat\", \"birthYear\": 1800}")),
                .badRequest, code: "validation", mentioning: "birthYear must be from 1900")
            // Store rules, through the error middleware.
            try expectError(try await client.post("/owners", try json(["name": "Di 2", "city": "Kyiv", "email": "di@example.com"])), .conflict, code: "conflict", mentioning: "email is already used by another owner.")
            try expectError(
                try await client.post("/pets", try json(PetCreate(ownerID: UUID(), name: "Gus", species: "dog", birthYear: 2020))),
                .unprocessableContent, code: "referenceNotFound", mentioning: "ownerID names no owner")
            try expectError(
                try await client.post("/owners/\(UUID())/pets", json("{\"name\": \"Fi\", \"species\": \"cat\", \"birthYear\": 2020}")),
                .notFound, code: "notFound", mentioning: "No owner")
            try expectError(try await client.put("/owners/\(UUID())", try json(["name": "X", "city": "Y"])), .notFound, code: "notFound", mentioning: "No owner")
        }
    }

    @Test("bulk import upserts a JSON array in one transaction and names a bad element", arguments: TestBackend.all)
    func bulkImport(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owner = try await client.createOwner("Hal", city: "Bern")
            let pets = (0..<250).map { Pet(id: UUID(), ownerID: owner.id, name: "p\($0)", species: $0 % 2 == 0 ? "cat" : "dog", birthYear: 2010 + $0 % 10) }
            var body = try json(pets)
            var response = try await client.post("/pets/import", body)
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            let report = try decode(ImportCounts.self, response)
            #expect(report.inserted == 250)
            #expect(try await clinic.pets.count() == 250)

            // One bad element (a birth year that is not a number) refuses the whole import...
            body = json("[{\"id\": \"\(UUID())\", \"ownerID\": \"\(owner.id)\", \"name\": \"ok\", \"species\": \"cat\", \"birthYear\": 2020}, {\"id\": \"\(UUID())\", \"ownerID\": \"\(owner.id)\", \"name\": \"bad\", \"species\": \"cat\", \"birthYear\": \"soon\"}]")
            response = try await client.post("/pets/import", body)
            try expectError(response, .badRequest, code: "validation", mentioning: "birthYear")
            #expect(try await clinic.pets.count() == 250, "nothing imported")
            // ...unless the client asks to skip it.
            response = try await client.post("/pets/import?skipInvalid=true", body)
            #expect(response.status == .ok)
            let skipped = try decode(ImportCounts.self, response)
            #expect(skipped.inserted == 1)
            #expect(skipped.skipped.map(\.index) == [1])
            try expectError(try await client.post("/pets/import", json("{\"not\": \"an array\"}")), .badRequest, code: "invalidJSON", mentioning: "expected an array")

            // A body past the cap is refused as it streams in, with nothing of it imported,
            // though its first elements are valid.
            var large = "["
            var index = 0
            while large.utf8.count <= importLimit {
                large += "{\"id\": \"\(UUID())\", \"ownerID\": \"\(owner.id)\", \"name\": \"bulk\(index)\", \"species\": \"cat\", \"birthYear\": 2020},"
                index += 1
            }
            large.removeLast()
            large += "]"
            try expectError(try await client.post("/pets/import", json(large)), .contentTooLarge, code: "payloadTooLarge", mentioning: "at most 32 MiB; send the array in parts")
            #expect(try await clinic.pets.count() == 251, "nothing of the refused import")
        }
    }

    @Test("import checks each element as the create route does, naming its index", arguments: TestBackend.all)
    func importValidatesLikeCreate(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owner = try await client.createOwner("Ida", city: "Chur")
            let valid = "{\"ownerID\": \"\(owner.id)\", \"name\": \"Rex\", \"species\": \"dog\", \"birthYear\": 2020}"
            let invalid = [
                "{\"ownerID\": \"\(owner.id)\", \"name\": \"\", \"species\": \"cat\", \"birthYear\": 2020}",
                "{\"ownerID\": \"\(owner.id)\", \"name\": \"Old\", \"species\": \"cat\", \"birthYear\": 3000}",
                "{\"ownerID\": \"\(owner.id)\", \"name\": \"Long\", \"species\": \"\(String(repeating: "x", count: 51))\", \"birthYear\": 2020}",
                "{\"ownerID\": \"\(owner.id)\", \"name\": \"\(String(repeating: "n", count: 101))\", \"species\": \"cat\", \"birthYear\": 2020}",
            ]
            for element in invalid {
                // The create route's answer for the same pet...
                let created = try await client.post("/pets", json(element))
                #expect(created.status == .badRequest, "\(String(buffer: created.body))")
                let expected = try decode(ErrorBody.self, created)
                // ...is the import's, with the element's index, and nothing is imported.
                let response = try await client.post("/pets/import", json("[\(valid), \(element)]"))
                #expect(response.status == .badRequest, "\(String(buffer: response.body))")
                let body = try decode(ErrorBody.self, response)
                #expect(body.error.code == expected.error.code)
                #expect(body.error.code == "validation")
                #expect(body.error.message == "Element 1: " + expected.error.message)
            }
            #expect(try await clinic.pets.count() == 0, "nothing imported")

            // With skipInvalid, each invalid element is left out and reported with its index;
            // the valid ones, without an id, get one from the server. Commas, brackets and
            // escaped quotes inside a string do not split an element.
            let tricky = "{\"ownerID\": \"\(owner.id)\", \"name\": \"Rex, \\\"the\\\" [king]}\", \"species\": \"dog\", \"birthYear\": 2021}"
            let response = try await client.post("/pets/import?skipInvalid=true", json("[" + ([valid, tricky] + invalid).joined(separator: ",") + "]"))
            #expect(response.status == .ok, "\(String(buffer: response.body))")
            let report = try decode(ImportCounts.self, response)
            #expect(report.inserted == 2)
            #expect(report.skipped.map(\.index) == [2, 3, 4, 5])
            let pets = try await clinic.pets.fetchAll()
            #expect(Set(pets.map(\.name)) == ["Rex", "Rex, \"the\" [king]}"])
            // An owner that does not exist refuses the whole array, as the create route refuses the pet.
            let orphan = "{\"ownerID\": \"\(UUID())\", \"name\": \"Orphan\", \"species\": \"cat\", \"birthYear\": 2020}"
            try expectError(
                try await client.post("/pets/import", json("[\(valid), \(orphan)]")), .unprocessableContent, code: "referenceNotFound",
                mentioning: "ownerID names no owner")
            #expect(try await clinic.pets.count() == 2, "nothing of the refused import")
            // A field of the wrong kind: the create route's words, with the index.
            try expectError(
                try await client.post("/pets/import", json("[\(valid), {\"ownerID\": \"\(owner.id)\", \"name\": [], \"species\": \"cat\", \"birthYear\": 2020}]")),
                .badRequest, code: "validation", mentioning: "Element 1: name must be a string.")
            try expectError(try await client.post("/pets/import", json("[\(valid),]")), .badRequest, code: "invalidJSON", mentioning: "expected an element")
            try expectError(try await client.post("/pets/import", json("[\(valid)")), .badRequest, code: "invalidJSON", mentioning: "not closed")
        }
    }

    @Test("the live endpoint streams the first result, then change sets", arguments: TestBackend.all)
    func live(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owner = try await client.createOwner("Ivy", city: "Riga")
            _ = try await client.createPet("Ann", species: "cat", birthYear: 2020, owner: owner.id)
            // Keeps adding cats until the stream has had its two events, so the test does not
            // depend on when the observation's first read happens.
            let writer = Task {
                var i = 0
                while !Task.isCancelled {
                    try await clinic.pets.save(Pet(id: UUID(), ownerID: owner.id, name: "Zed\(i)", species: "cat", birthYear: 2021))
                    _ = try? await clinic.pets.save(Pet(id: UUID(), ownerID: owner.id, name: "Dog\(i)", species: "dog", birthYear: 2021))
                    i += 1
                    try await Task.sleep(for: .milliseconds(30))
                }
            }
            defer { writer.cancel() }
            let response = try await client.get("/pets/live?species=cat&events=2")
            writer.cancel()
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "text/event-stream")
            let events = String(buffer: response.body).components(separatedBy: "\n\n").filter { !$0.isEmpty }
            #expect(events.count == 2, "\(events)")
            #expect(events.first?.hasPrefix("event: snapshot\ndata: ") == true)
            #expect(events.last?.hasPrefix("event: changes\ndata: ") == true)
            let lastData = String(events.last?.split(separator: "\n").last?.dropFirst("data: ".count) ?? "")
            let changes = try JSONDecoder().decode(LiveChanges.self, from: Data(lastData.utf8))
            #expect(changes.inserted?.allSatisfy { $0.pet.species == "cat" } == true, "only cats")
            #expect(changes.inserted?.isEmpty == false)
            try expectError(try await client.get("/pets/live?limit=5000"), .badRequest, code: "validation", mentioning: "limit must be a whole number from 1 to 1000")
        }
    }
}

struct PetUpdate: Encodable {
    let name: String
    let species: String
    let birthYear: Int
}

struct PetCreate: Encodable {
    let ownerID: UUID
    let name: String
    let species: String
    let birthYear: Int
}

struct ImportCounts: Decodable {
    struct Problem: Decodable {
        let index: Int
    }
    let inserted: Int
    let updated: Int
    let skipped: [Problem]
}

struct LiveChanges: Decodable {
    struct Indexed: Decodable {
        let index: Int
        let pet: Pet
    }
    let kind: String
    let inserted: [Indexed]?
}
