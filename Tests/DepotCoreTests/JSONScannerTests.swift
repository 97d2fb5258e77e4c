import DepotTesting
import Foundation
import Testing

@testable import DepotCore

/// The streaming import reads the same records whatever the chunk boundaries: inside a
/// number, a literal, an escape, a surrogate pair, between elements, before the first.
@Suite("JSON import across chunk boundaries")
struct JSONScannerTests {
    @Record(name: "Token")
    struct Token: Hashable {
        var id: Int64
        var text: String
        var amount: Double?
        var flag: Bool
        var nested: String?
    }

    static let document = #"""
          [ {"id": 1, "text": "a\"b\\c\u00e9\ud83d\ude00", "amount": -12.5e-3, "flag": true, "nested": {"z": [1, 2.0, null], "a": false}},
        {"id":2,"text":"","amount":null,"flag":false},
        {"id": 300000, "text": "tru", "amount": 1E+2, "flag": "1", "nested": []}  ,
        {"id": "4", "text": 12345678901234567890, "flag": 0}
        ]
        """#

    func importing(_ bytes: [UInt8], chunk: Int) async throws -> [Token] {
        let store = MemoryStore()
        let tokens = Controller<Token, Token>(store: store)
        let handle = try await tokens.registeredEntity()
        var session = try await JSONImportSession(entity: handle, store: store, options: JSONImportOptions())
        var start = 0
        while start < bytes.count {
            let end = min(bytes.count, start + chunk)
            try await session.feed(Array(bytes[start..<end]), final: false)
            start = end
        }
        try await session.feed([], final: true)
        _ = try await session.finish()
        let result = try await tokens.fetchAll()
        await store.close()
        return result
    }

    @Test func everyChunkSizeReadsTheSameRecords() async throws {
        let bytes = Array(Self.document.utf8)
        let whole = try await importing(bytes, chunk: bytes.count)
        #expect(whole.map(\.id) == [1, 2, 4, 300_000])
        #expect(whole.first?.text == "a\"b\\cé😀")
        #expect(whole.first?.nested == #"{"a":false,"z":[1,2.0,null]}"#)
        #expect(whole.last?.amount == 100)
        #expect(whole.first(where: { $0.id == 4 })?.text == "12345678901234567890")
        for chunk in 1...48 {
            let pieces = try await importing(bytes, chunk: chunk)
            #expect(pieces == whole, "chunks of \(chunk) bytes")
        }
    }

    @Test func truncatedAndMalformedInputIsAnErrorAtEveryLength() async throws {
        let bytes = Array(Self.document.utf8)
        // Every proper prefix ends before the closing bracket: each is an error, never a
        // trap, never a partial import.
        for length in stride(from: 0, to: bytes.count - 8, by: 7) {
            await #expect(throws: DepotError.self, "a document cut after \(length) bytes") {
                _ = try await importing(Array(bytes.prefix(length)), chunk: 5)
            }
        }
    }
}
