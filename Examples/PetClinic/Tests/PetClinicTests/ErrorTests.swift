import Depot
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import PetClinic

/// The error answers as a client sees them: one JSON shape, a code naming the error, and a
/// message in the API's words (field names and limits) on every route and backend.
@Suite("PetClinic errors", .serialized)
struct ErrorTests {
    @Test("unknown routes and methods answer 404 notFound", arguments: TestBackend.all)
    func unknownRoutes(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, _ in
            try expectError(try await client.get("/nowhere"), .notFound, code: "notFound", mentioning: "No route matches GET /nowhere")
            try expectError(try await client.get("/owners/\(UUID())/cats"), .notFound, code: "notFound", mentioning: "No route matches")
            // A known path with a method it has no handler for: Hummingbird's router does not
            // tell it from an unknown path.
            try expectError(try await client.delete("/owners"), .notFound, code: "notFound", mentioning: "No route matches DELETE /owners")
            try expectError(
                try await client.execute(uri: "/pets/import", method: .get) { $0 }, .notFound, code: "notFound",
                mentioning: "No route matches GET /pets/import")
        }
    }

    @Test("a body over the limit answers 413 payloadTooLarge on every route that takes one", arguments: TestBackend.all)
    func payloadTooLarge(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let owner = try await client.createOwner("Lea", city: "Graz")
            // 2 MiB of valid JSON: the size alone refuses it.
            let large = "{\"name\": \"\(String(repeating: "a", count: 2 << 20))\", \"city\": \"Graz\"}"
            try expectError(try await client.post("/owners", json(large)), .contentTooLarge, code: "payloadTooLarge", mentioning: "at most 1 MiB")
            try expectError(try await client.put("/owners/\(owner.id)", json(large)), .contentTooLarge, code: "payloadTooLarge", mentioning: "at most 1 MiB")
            try expectError(try await client.post("/owners/\(owner.id)/pets", json(large)), .contentTooLarge, code: "payloadTooLarge", mentioning: "at most 1 MiB")
            #expect(try await clinic.owners.count() == 1, "nothing stored")
        }
    }

    @Test("a body declared as another type than JSON answers 415 unsupportedMediaType", arguments: TestBackend.all)
    func unsupportedMediaType(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, clinic in
            let body = "{\"name\": \"Max\", \"city\": \"Linz\"}"
            for type in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"] {
                let response = try await client.execute(uri: "/owners", method: .post, headers: [.contentType: type], body: json(body)) { $0 }
                try expectError(response, .unsupportedMediaType, code: "unsupportedMediaType", mentioning: "'\(type)'")
            }
            let owner = try await client.createOwner("Ola", city: "Bern")
            var response = try await client.execute(
                uri: "/pets/import", method: .post, headers: [.contentType: "text/plain"],
                body: json("[{\"ownerID\": \"\(owner.id)\", \"name\": \"Rex\", \"species\": \"dog\", \"birthYear\": 2020}]")) { $0 }
            try expectError(response, .unsupportedMediaType, code: "unsupportedMediaType", mentioning: "application/json")
            #expect(try await clinic.pets.count() == 0)

            // JSON with parameters, and a body without a Content-Type, are read as JSON.
            response = try await client.execute(uri: "/owners", method: .post, headers: [.contentType: "Application/JSON; charset=utf-8"], body: json(body)) { $0 }
            #expect(response.status == .created, "\(String(buffer: response.body))")
            response = try await client.execute(uri: "/owners", method: .post, body: json("{\"name\": \"Ida\", \"city\": \"Linz\"}")) { $0 }
            #expect(response.status == .created, "\(String(buffer: response.body))")
        }
    }

    @Test("messages name fields and JSON kinds, never Swift types or the store's texts", arguments: TestBackend.all)
    func clientMessages(_ backend: TestBackend) async throws {
        try await withClinic(backend) { client, _ in
            let owner = try await client.createOwner("Uma", city: "Gent", email: "uma@example.com")
            var answers: [TestResponse] = []
            func check(_ response: TestResponse, _ status: HTTPResponse.Status, code: String, _ phrase: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
                try expectError(response, status, code: code, mentioning: phrase, sourceLocation: sourceLocation)
                answers.append(response)
            }
            try check(try await client.post("/owners", json("[1]")), .badRequest, code: "validation", "The body must be an object.")
            try check(try await client.post("/owners", json("{\"name\": {}, \"city\": \"x\"}")), .badRequest, code: "validation", "name must be a string.")
            try check(try await client.post("/owners", json("{\"name\": null, \"city\": \"x\"}")), .badRequest, code: "validation", "name must be a string, not null.")
            try check(try await client.post("/owners", json("{\"name\": \"Ed\"")), .badRequest, code: "invalidJSON", "The body is not JSON.")
            try check(
                try await client.post("/owners/\(owner.id)/pets", json("{\"name\": \"Fi\", \"species\": \"cat\", \"birthYear\": \"soon\"}")),
                .badRequest, code: "validation", "birthYear must be a whole number.")
            try check(
                try await client.post("/pets", json("{\"ownerID\": 7, \"name\": \"Fi\", \"species\": \"cat\", \"birthYear\": 2020}")),
                .badRequest, code: "validation", "ownerID must be a UUID string")
            try check(
                try await client.post("/pets", json("{\"ownerID\": \"seven\", \"name\": \"Fi\", \"species\": \"cat\", \"birthYear\": 2020}")),
                .badRequest, code: "validation", "ownerID must be a UUID string")
            try check(try await client.post("/pets/\(UUID())/visits", json("{\"reason\": \"x\", \"date\": \"tomorrow\"}")), .badRequest, code: "validation", "date must be an ISO 8601 date")
            // The store's refusals, in the API's words.
            try check(
                try await client.post("/owners", try json(["name": "Uma 2", "city": "Gent", "email": "uma@example.com"])),
                .conflict, code: "conflict", "email is already used by another owner.")
            let other = try await client.createOwner("Vic", city: "Gent", email: "vic@example.com")
            try check(
                try await client.put("/owners/\(other.id)", try json(["name": "Vic", "city": "Gent", "email": "uma@example.com"])),
                .conflict, code: "conflict", "email is already used")
            try check(
                try await client.post("/pets", try json(PetCreate(ownerID: UUID(), name: "Gus", species: "dog", birthYear: 2020))),
                .unprocessableContent, code: "referenceNotFound", "ownerID names no owner")
            for response in answers {
                #expect(response.headers[.contentType] == "application/json; charset=utf-8")
                let message = try decode(ErrorBody.self, response).error.message
                for leaked in ["Dictionary", "Int", "String", "UUID(", "UNIQUE", "constraint", "Owner.email", "Swift", "duplicate key", "SQL"] {
                    #expect(!message.contains(leaked), "\(message)")
                }
            }
        }
    }
}
