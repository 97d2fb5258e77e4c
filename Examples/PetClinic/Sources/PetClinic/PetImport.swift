import Depot
import Foundation
import Hummingbird

/// `POST /pets/import`: a JSON array of pets, each element decoded and checked by the same
/// rules as `POST /pets` (``PetInput/validated(now:)``), then upserted in one transaction.
///
/// The body is split into elements as it arrives, so it is never held whole; the checked
/// pets are (one transaction, all or nothing). Depot's own `importJSON` converts by the
/// stored schema and knows nothing of this API's rules (a birth year of 3000 and an empty
/// name are valid `Int` and `String` values), which is why the route decodes each element
/// itself instead.
struct PetImport {
    /// One element: a pet as `POST /pets` takes it, with the id to upsert under (the server
    /// assigns one when it is absent).
    struct Element: Decodable {
        var id: UUID?
        var input: PetInput

        private enum CodingKeys: String, CodingKey { case id }

        init(from decoder: any Decoder) throws {
            id = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent(UUID.self, forKey: .id)
            input = try PetInput(from: decoder)
        }
    }

    let skipInvalid: Bool
    var pets: [Pet] = []
    var skipped: [ImportResponse.Problem] = []
    private var splitter = JSONArraySplitter()
    private let decoder = JSONDecoder()
    private let now = Date()

    init(skipInvalid: Bool) {
        self.skipInvalid = skipInvalid
    }

    /// Scans the next chunk of the body, checking each element it completes.
    mutating func feed(_ bytes: some Sequence<UInt8>) throws {
        for byte in bytes {
            if let element = try splitter.consume(byte) { try check(element) }
        }
    }

    /// Ends the body: it must have closed the array.
    func finish() throws {
        try splitter.finish()
    }

    /// Decodes and validates element `index`; an invalid one is refused with the create
    /// route's message prefixed by its index, or skipped and reported with `skipInvalid`.
    private mutating func check(_ element: (index: Int, bytes: [UInt8])) throws {
        let id: UUID?
        do {
            let decoded = try decoder.decode(Element.self, from: Data(element.bytes))
            id = decoded.id
            do {
                let input = try decoded.input.validated(now: now)
                guard let ownerID = input.ownerID else { throw APIError.badRequest("ownerID is missing.") }
                pets.append(Pet(id: id ?? UUID(), ownerID: ownerID, name: input.name, species: input.species, birthYear: input.birthYear))
                return
            } catch let error as APIError {
                try refuse(element.index, key: id, error.message)
            }
        } catch let error as DecodingError {
            // Text that is not JSON at all cannot be skipped: what follows it is not
            // reliably an element boundary either.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty {
                throw APIError.badRequest("Element \(element.index) is not JSON (\(context.debugDescription)).")
            }
            try refuse(element.index, key: nil, DepotErrorMiddleware<BasicRequestContext>.describe(error))
        }
    }

    private mutating func refuse(_ index: Int, key: UUID?, _ message: String) throws {
        guard skipInvalid else { throw APIError.badRequest("Element \(index): \(message)") }
        skipped.append(.init(index: index, key: key?.uuidString, message: message))
    }

    /// Upserts the checked pets in one transaction. An owner that does not exist refuses the
    /// whole import (422, Depot's `missingReference`).
    func write(to clinic: Clinic) async throws -> ImportResponse {
        let pets = self.pets
        let (inserted, updated) = try await clinic.pets.operation { transaction in
            var inserted = 0
            var updated = 0
            for pet in pets {
                if try transaction.fetchOne(id: pet.id) == nil { inserted += 1 } else { updated += 1 }
                try transaction.save(pet)
            }
            return (inserted, updated)
        }
        return ImportResponse(inserted: inserted, updated: updated, skipped: skipped)
    }
}

/// Splits a JSON array, byte by byte, into the bytes of its elements, tracking strings and
/// nesting only: each element's own syntax is the decoder's to check.
struct JSONArraySplitter {
    private enum Phase { case beforeArray, beforeElement, inElement, afterArray }
    private var phase = Phase.beforeArray
    private var offset = 0
    private var index = 0
    private var element: [UInt8] = []
    private var depth = 0
    private var inString = false
    private var escaped = false

    /// The element `byte` completes, if any.
    mutating func consume(_ byte: UInt8) throws -> (index: Int, bytes: [UInt8])? {
        defer { offset += 1 }
        let whitespace = byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
        switch phase {
        case .beforeArray:
            if whitespace { return nil }
            guard byte == UInt8(ascii: "[") else { throw malformed("expected an array ('[')") }
            phase = .beforeElement
            return nil
        case .afterArray:
            if whitespace { return nil }
            throw malformed("text after the array")
        case .beforeElement:
            if whitespace { return nil }
            if byte == UInt8(ascii: "]") && index == 0 {
                phase = .afterArray
                return nil
            }
            guard byte != UInt8(ascii: ","), byte != UInt8(ascii: "]") else { throw malformed("expected an element") }
            phase = .inElement
            return try consume(inElement: byte)
        case .inElement:
            return try consume(inElement: byte)
        }
    }

    private mutating func consume(inElement byte: UInt8) throws -> (index: Int, bytes: [UInt8])? {
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
            }
        } else {
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
            case UInt8(ascii: "}") where depth > 0: depth -= 1
            case UInt8(ascii: "]") where depth > 0: depth -= 1
            case UInt8(ascii: ","), UInt8(ascii: "]"):
                guard depth == 0 else { break }
                let done = (index: index, bytes: element)
                element = []
                index += 1
                phase = byte == UInt8(ascii: "]") ? .afterArray : .beforeElement
                return done
            default: break
            }
        }
        element.append(byte)
        return nil
    }

    func finish() throws {
        switch phase {
        case .afterArray: return
        case .beforeArray: throw malformed("expected an array ('['), found no JSON")
        case .beforeElement, .inElement: throw malformed("the array is not closed with ']'")
        }
    }

    private func malformed(_ what: String) -> APIError {
        APIError.badRequest("The body must be a JSON array of pets; at byte \(offset), near element \(index): \(what).")
    }
}
