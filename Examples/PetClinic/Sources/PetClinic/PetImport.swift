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
    /// Elements split off but not decoded yet: decoded as one array, which costs far less
    /// than a decoder call per element.
    private var waiting: [(index: Int, bytes: [UInt8])] = []
    private let decoder = JSONDecoder()
    private let now = Date()

    static let batchSize = 512

    init(skipInvalid: Bool) {
        self.skipInvalid = skipInvalid
    }

    /// Scans the next chunk of the body, checking the elements it completes.
    mutating func feed(_ chunk: ByteBuffer) throws {
        // Moved out and back, so the closure does not hold `self` while the splitter runs.
        var splitter = self.splitter
        var waiting = self.waiting
        self.waiting = []
        try chunk.withUnsafeReadableBytes { bytes in
            try splitter.split(bytes) { waiting.append($0) }
        }
        self.splitter = splitter
        self.waiting = waiting
        if waiting.count >= Self.batchSize { try checkWaiting() }
    }

    /// Ends the body: it must have closed the array.
    mutating func finish() throws {
        try splitter.finish()
        try checkWaiting()
    }

    /// Decodes the waiting elements as one array and validates each in order. When the
    /// array does not decode, each element is decoded on its own, so the error names the
    /// element and its field exactly as it would alone.
    private mutating func checkWaiting() throws {
        let batch = waiting
        waiting.removeAll(keepingCapacity: true)
        guard !batch.isEmpty else { return }
        var array: [UInt8] = [UInt8(ascii: "[")]
        array.reserveCapacity(batch.reduce(2) { $0 + $1.bytes.count + 1 })
        for (position, element) in batch.enumerated() {
            if position > 0 { array.append(UInt8(ascii: ",")) }
            array.append(contentsOf: element.bytes)
        }
        array.append(UInt8(ascii: "]"))
        if let decoded = try? decoder.decode([Element].self, from: Data(array)), decoded.count == batch.count {
            for (element, value) in zip(batch, decoded) { try validate(element.index, value) }
        } else {
            for element in batch { try check(element) }
        }
    }

    /// Decodes and validates element `index` on its own.
    private mutating func check(_ element: (index: Int, bytes: [UInt8])) throws {
        let decoded: Element
        do {
            decoded = try decoder.decode(Element.self, from: Data(element.bytes))
        } catch let error as DecodingError {
            // Text that is not JSON at all cannot be skipped: what follows it is not
            // reliably an element boundary either.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty {
                throw APIError.invalidJSON("Element \(element.index) is not JSON.")
            }
            try refuse(element.index, key: nil, APIError.decoding(error))
            return
        }
        try validate(element.index, decoded)
    }

    /// Checks a decoded element by the create route's rules; an invalid one is refused with
    /// that route's message prefixed by its index, or skipped and reported with `skipInvalid`.
    private mutating func validate(_ index: Int, _ element: Element) throws {
        do {
            let input = try element.input.validated(now: now)
            guard let ownerID = input.ownerID else { throw APIError.validation("ownerID is missing.") }
            pets.append(Pet(id: element.id ?? .timeOrdered(), ownerID: ownerID, name: input.name, species: input.species, birthYear: input.birthYear))
        } catch let error as APIError {
            try refuse(index, key: element.id, error)
        }
    }

    /// Refuses the import with the element's error, its message prefixed by the index (the
    /// code unchanged), or skips the element and reports it.
    private mutating func refuse(_ index: Int, key: UUID?, _ error: APIError) throws {
        guard skipInvalid else { throw APIError(error.status, error.code, "Element \(index): \(error.message)") }
        skipped.append(.init(index: index, key: key?.uuidString, message: error.message))
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

/// Splits a JSON array into the bytes of its elements, chunk by chunk, tracking strings and
/// nesting only: each element's own syntax is the decoder's to check.
struct JSONArraySplitter {
    private enum Phase { case beforeArray, beforeElement, inElement, afterArray }
    private var phase = Phase.beforeArray
    /// Bytes of the chunks before the current one.
    private var consumed = 0
    private var index = 0
    /// The current element's bytes from earlier chunks.
    private var partial: [UInt8] = []
    private var depth = 0
    private var inString = false
    private var escaped = false

    /// Scans `bytes`, handing each element it completes to `completed` with its index.
    mutating func split(_ bytes: UnsafeRawBufferPointer, _ completed: ((index: Int, bytes: [UInt8])) throws -> Void) throws {
        var position = 0
        // Where the current element starts in this chunk (0 when it began in an earlier one).
        var start = 0
        defer { consumed += bytes.count }
        while position < bytes.count {
            let byte = bytes[position]
            let whitespace = byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
            switch phase {
            case .beforeArray:
                if !whitespace {
                    guard byte == UInt8(ascii: "[") else { throw malformed("expected an array ('[')", at: position) }
                    phase = .beforeElement
                }
            case .afterArray:
                if !whitespace { throw malformed("text after the array", at: position) }
            case .beforeElement:
                if whitespace { break }
                if byte == UInt8(ascii: "]") && index == 0 {
                    phase = .afterArray
                    break
                }
                guard byte != UInt8(ascii: ","), byte != UInt8(ascii: "]") else { throw malformed("expected an element", at: position) }
                phase = .inElement
                start = position
                continue  // the same byte, as the element's first
            case .inElement:
                if inString {
                    if escaped {
                        escaped = false
                    } else if byte == UInt8(ascii: "\\") {
                        escaped = true
                    } else if byte == UInt8(ascii: "\"") {
                        inString = false
                    }
                    break
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}") where depth > 0, UInt8(ascii: "]") where depth > 0: depth -= 1
                case UInt8(ascii: ","):
                    guard depth == 0 else { break }
                    fallthrough
                case UInt8(ascii: "]"):  // at depth 0: the case above took the others
                    partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<position]))
                    let element = (index: index, bytes: partial)
                    partial.removeAll(keepingCapacity: true)
                    index += 1
                    phase = byte == UInt8(ascii: "]") ? .afterArray : .beforeElement
                    try completed(element)
                default: break
                }
            }
            position += 1
        }
        if phase == .inElement { partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<bytes.count])) }
    }

    func finish() throws {
        switch phase {
        case .afterArray: return
        case .beforeArray: throw malformed("expected an array ('['), found no JSON", at: 0)
        case .beforeElement, .inElement: throw malformed("the array is not closed with ']'", at: 0)
        }
    }

    private func malformed(_ what: String, at position: Int) -> APIError {
        APIError.invalidJSON("The body must be a JSON array of pets; at byte \(consumed + position), near element \(index): \(what).")
    }
}
