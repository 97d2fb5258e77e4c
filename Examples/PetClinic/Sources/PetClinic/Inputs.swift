import Depot
import Foundation
import Hummingbird

// What clients send, checked before anything reaches the store: every rule here answers 400
// (code `validation`) with a message naming the field, the value and what is accepted.

struct OwnerInput: Decodable {
    var name: String
    var city: String
    var email: String?

    func validated() throws -> OwnerInput {
        try Check.text(name, "name", maximum: 200)
        try Check.text(city, "city", maximum: 100)
        if let email {
            try Check.text(email, "email", maximum: 254)
            guard email.contains("@") else { throw APIError.validation("email must contain @, not \(Check.quote(email)).") }
        }
        return self
    }
}

struct PetInput: Decodable {
    /// Required when the pet is created at /pets; the owner in the path otherwise.
    var ownerID: UUID?
    var name: String
    var species: String
    var birthYear: Int

    func validated(now: Date = Date()) throws -> PetInput {
        try Check.text(name, "name", maximum: 100)
        try Check.text(species, "species", maximum: 50)
        let year = Calendar(identifier: .gregorian).component(.year, from: now)
        guard (1900...year).contains(birthYear) else {
            throw APIError.validation("birthYear must be from 1900 to \(year), not \(birthYear).")
        }
        return self
    }
}

struct VisitInput: Decodable {
    var date: Date?
    var reason: String

    private enum CodingKeys: String, CodingKey { case date, reason }

    /// Reads `date` itself: the decoder's ISO 8601 strategy reports a bad date without the
    /// field's name.
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        reason = try container.decode(String.self, forKey: .reason)
        if let text = try container.decodeIfPresent(String.self, forKey: .date) {
            guard let date = try? Date(text, strategy: .iso8601) else {
                throw APIError.validation("date must be an ISO 8601 date such as \"2024-05-01T09:30:00Z\", not \(Check.quote(text)).")
            }
            self.date = date
        }
    }

    func validated() throws -> VisitInput {
        try Check.text(reason, "reason", maximum: 1_000)
        return self
    }
}

/// A page of a list, and the cursor to ask for the next one.
struct ListResponse<Item: Encodable & Sendable>: ResponseEncodable, Sendable {
    let items: [Item]
    /// Pass as `cursor` for the next page; absent on the last page.
    let next: String?
}

struct ImportResponse: ResponseEncodable {
    struct Problem: Encodable {
        let index: Int
        let key: String?
        let message: String
    }
    let inserted: Int
    let updated: Int
    let skipped: [Problem]
}

enum Check {
    static func text(_ value: String, _ field: String, maximum: Int) throws {
        guard !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw APIError.validation("\(field) must not be empty.")
        }
        guard value.count <= maximum else {
            throw APIError.validation("\(field) must be at most \(maximum) characters, not \(value.count).")
        }
    }

    static func quote(_ text: some StringProtocol) -> String {
        let cut = text.count > 60 ? text.prefix(60) + "…" : Substring(text)
        return "'\(cut)'"
    }

    /// Refuses a body declared as anything but JSON (415). A request without a
    /// `Content-Type` is read as JSON: every body this API takes is JSON, so the header can
    /// only confirm it, and a body that is not JSON is answered 400 `invalidJSON` anyway.
    /// Parameters such as `charset=utf-8` are allowed.
    static func jsonContentType(_ request: Request) throws {
        guard let declared = request.headers[.contentType] else { return }
        let mediaType = declared.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0]
            .trimmingCharacters(in: .whitespaces).lowercased()
        guard mediaType == "application/json" else {
            throw APIError(.unsupportedMediaType, .unsupportedMediaType, "This route takes a JSON body (Content-Type: application/json), not \(quote(declared)).")
        }
    }

    /// A path segment as a record id.
    static func id(_ context: some RequestContext, _ name: String = "id") throws -> UUID {
        let text = try context.parameters.require(name)
        guard let id = UUID(uuidString: text) else {
            throw APIError.validation("\(name) must be a UUID such as 3F2504E0-4F89-11D3-9A0C-0305E82C3301, not \(quote(text)).")
        }
        return id
    }
}

/// The query parameters every list shares: `limit`, `cursor` and `sort`.
struct ListParameters {
    static let defaultLimit = 20
    static let maximumLimit = 100

    let limit: Int
    let cursor: PageCursor?
    /// Attribute names with their direction, in significance order.
    let sort: [(attribute: String, ascending: Bool)]

    /// Reads `limit` (1 to 100), `cursor` (a page's `next`) and `sort` (comma-separated keys
    /// from `sortable`, `-` for descending; `defaultSort` when absent).
    init(_ query: Parameters, sortable: [String], defaultSort: String) throws {
        if let text = query.get("limit") {
            guard let value = Int(text), (1...Self.maximumLimit).contains(value) else {
                throw APIError.validation("limit must be a whole number from 1 to \(Self.maximumLimit), not \(Check.quote(text)).")
            }
            limit = value
        } else {
            limit = Self.defaultLimit
        }
        if let token = query.get("cursor") {
            do {
                cursor = try PageCursor(token)
            } catch {
                throw APIError.validation("cursor is not valid: pass the `next` value of the previous page unchanged.")
            }
        } else {
            cursor = nil
        }
        let text = query.get("sort") ?? defaultSort
        var keys: [(String, Bool)] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let descending = part.hasPrefix("-")
            let name = String(descending ? part.dropFirst() : part)
            guard sortable.contains(name) else {
                throw APIError.validation("Unknown sort key \(Check.quote(name)); sort by \(sortable.joined(separator: ", ")), each optionally prefixed with - for descending, separated by commas.")
            }
            guard !keys.contains(where: { $0.0 == name }) else {
                throw APIError.validation("sort names \(Check.quote(name)) twice.")
            }
            keys.append((name, !descending))
        }
        sort = keys
    }

    /// `set` sorted by these keys; the primary key breaks ties, so pages never overlap.
    func apply<Object, Managed>(to set: ResultSet<Object, Managed>) -> ResultSet<Object, Managed> {
        sort.reduce(set) { $0.sorted(by: $1.attribute, ascending: $1.ascending) }
    }

    /// One page of `set`, sorted, after the cursor. A cursor made for another sort order is
    /// Depot's `invalidPredicate`, answered 400 here, where the cause is known.
    func page<Object, Managed>(of set: ResultSet<Object, Managed>) async throws -> ListResponse<Object> where Object: Encodable {
        do {
            let page = try await apply(to: set).page(size: limit, after: cursor)
            return ListResponse(items: page.items, next: page.next?.description)
        } catch let error as DepotError where error.code == .invalidPredicate && cursor != nil {
            throw APIError.validation("cursor belongs to another sort order: pass the sort of the page it came from.")
        }
    }
}
