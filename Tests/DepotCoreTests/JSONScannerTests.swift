import DepotTesting
import Foundation
import Testing

import DepotCore

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

    /// The document in chunks of `sizes` (cycled), as an async sequence like a request body.
    static func chunks(_ bytes: [UInt8], sizes: [Int], failingAfter failure: Int? = nil) -> AsyncThrowingStream<ArraySlice<UInt8>, any Error> {
        AsyncThrowingStream { continuation in
            var start = 0, turn = 0
            while start < bytes.count {
                if let failure, start >= failure {
                    continuation.finish(throwing: CancellationError())
                    return
                }
                let end = min(bytes.count, start + sizes[turn % sizes.count])
                continuation.yield(bytes[start..<end])
                start = end
                turn += 1
            }
            continuation.finish()
        }
    }

    @Test func aStreamOfChunksImportsWhatTheWholeDocumentDoes() async throws {
        let bytes = Array(Self.document.utf8)
        let whole = try await importing(bytes, chunk: bytes.count)
        for sizes in [[1], [3, 7], [64], [bytes.count]] {
            let store = MemoryStore()
            let tokens = Controller<Token, Token>(store: store)
            let report = try await tokens.importJSON(chunks: Self.chunks(bytes, sizes: sizes))
            #expect(report.inserted == 4, "chunks of \(sizes)")
            #expect(try await tokens.fetchAll() == whole, "chunks of \(sizes)")
            await store.close()
        }
    }

    @Test func aStreamOfSingleBytesImportsWhatTheWholeDocumentDoes() async throws {
        let bytes = Array(Self.document.utf8)
        let whole = try await importing(bytes, chunk: bytes.count)
        let store = MemoryStore()
        let tokens = Controller<Token, Token>(store: store)
        let stream = AsyncStream<UInt8> { continuation in
            for byte in bytes { continuation.yield(byte) }
            continuation.finish()
        }
        let report = try await JSONImport.run(bytes: stream, into: try await tokens.registeredEntity(), of: store)
        #expect(report.inserted == 4)
        #expect(try await tokens.fetchAll() == whole)
        await store.close()
    }

    @Test func aLargeStreamIsScannedAsItArrivesAndAFailingStreamWritesNothing() async throws {
        // 20,000 elements, about 0.9 MiB: several rounds of gathering small chunks.
        var text = "["
        for id in 1...20_000 { text += "{\"id\": \(id), \"text\": \"t\(id)\", \"flag\": \(id % 2 == 0)}," }
        text.removeLast()
        text += "]"
        let bytes = Array(text.utf8)
        let store = MemoryStore()
        let tokens = Controller<Token, Token>(store: store)
        let reads = BytesRead()
        var options = JSONImportOptions()
        options.progress = { reads.note($0.bytesRead) }
        let report = try await tokens.importJSON(chunks: Self.chunks(bytes, sizes: [1_000, 17, 4_093]), options: options)
        #expect(report.inserted == 20_000)
        // Scanned in gathered chunks of 256 KiB as they arrive, not once at the end.
        let counts = reads.values
        #expect(counts.filter { $0 < bytes.count }.count >= bytes.count / (1 << 18), "\(counts)")
        #expect(counts.last == bytes.count)
        #expect(try await tokens.count() == 20_000)
        #expect(try await tokens.fetchOne(id: 12_345)?.text == "t12345")
        // A stream that fails halfway (a client that went away): the error comes out, and
        // the one transaction of the default commit writes nothing.
        let other = MemoryStore()
        let empty = Controller<Token, Token>(store: other)
        await #expect(throws: CancellationError.self) {
            _ = try await empty.importJSON(chunks: Self.chunks(bytes, sizes: [1_000], failingAfter: bytes.count / 2))
        }
        #expect(try await empty.count() == 0)
        await store.close()
        await other.close()
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

    /// The bytes of `text` with `raw` in place of each `%` (bytes that are no UTF-8).
    static func bytes(_ text: String, _ raw: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var rest = raw[...]
        for byte in text.utf8 {
            if byte == UInt8(ascii: "%"), let next = rest.popFirst() {
                out.append(next)
            } else {
                out.append(byte)
            }
        }
        return out
    }

    @Test("invalid UTF-8 in a string or a key is malformed JSON naming the byte, never a repaired U+FFFD", arguments: [
        // (what, the raw bytes, where the error is)
        ("FF C0 80 inside a value (the issue's case)", [0xFF, 0xC0, 0x80], 0),
        ("an overlong NUL, C0 80", [0xC0, 0x80], 0),
        ("an overlong two-byte form, C1 BF", [0xC1, 0xBF], 0),
        ("an overlong three-byte form, E0 80 AF", [0xE0, 0x80, 0xAF], 1),
        ("an overlong four-byte form, F0 8F BF BF", [0xF0, 0x8F, 0xBF, 0xBF], 1),
        ("a surrogate encoded in UTF-8, ED A0 80", [0xED, 0xA0, 0x80], 1),
        ("a low surrogate encoded in UTF-8, ED BF BF", [0xED, 0xBF, 0xBF], 1),
        ("above U+10FFFF, F4 90 80 80", [0xF4, 0x90, 0x80, 0x80], 1),
        ("a byte above F4, F5 80 80 80", [0xF5, 0x80, 0x80, 0x80], 0),
        ("FE", [0xFE], 0),
        ("a lone continuation byte, 80", [0x80], 0),
        ("a truncated two-byte sequence before the quote, C3", [0xC3], 1),
        ("a truncated three-byte sequence, E2 82", [0xE2, 0x82], 2),
        ("a truncated four-byte sequence, F0 9F 98", [0xF0, 0x9F, 0x98], 3),
    ] as [(String, [UInt8], Int)])
    func invalidUTF8IsRefused(_ what: String, _ raw: [UInt8], _ at: Int) async throws {
        // In a plain string, in a string after an escape (the slower path), and in a key.
        let prefix = #"[{"id": 1, "flag": true, "text": "a"#
        let placeholders = String(repeating: "%", count: raw.count)
        let documents: [(String, [UInt8], Int)] = [
            ("a string", Self.bytes(prefix + placeholders + #"b"}]"#, raw), prefix.utf8.count + at),
            ("a string with an escape", Self.bytes(prefix + #"\n"# + placeholders + #"b"}]"#, raw), prefix.utf8.count + 2 + at),
            ("a key", Self.bytes(#"[{"id": 1, "flag": true, "text": "x", "te"# + placeholders + #"xt": "a"}]"#, raw), #"[{"id": 1, "flag": true, "text": "x", "te"#.utf8.count + at),
        ]
        for (place, bytes, offset) in documents {
            for chunk in [bytes.count, 1, 3] {
                do {
                    let imported = try await importing(bytes, chunk: chunk)
                    Issue.record("\(what) in \(place) was imported as \(imported.map(\.text))")
                } catch let error as DepotError {
                    #expect(error.code == .conversionFailed, "\(what) in \(place)")
                    #expect(error.message.contains("malformed at byte \(offset),") && error.message.contains("UTF-8"), "\(what) in \(place), chunks of \(chunk): \(error.message)")
                }
            }
        }
    }

    @Test func validUTF8OfEveryLengthReadsBackWhateverTheChunks() async throws {
        let text = "é€😀\u{7F}\u{80}\u{7FF}\u{800}\u{FFFF}\u{10000}\u{10FFFF}\u{E000}\u{D7FF}"
        let bytes = Array(#"[{"id": 1, "flag": true, "text": "\#(text)", "\#(text)": 1}, {"id": 2, "flag": false, "text": "\n\#(text)"}]"#.utf8)
        for chunk in 1...12 {
            let tokens = try await importing(bytes, chunk: chunk)
            #expect(tokens.map(\.text) == [text, "\n" + text], "chunks of \(chunk)")
        }
    }
}

/// The byte counts an import's progress reported, in order.
private final class BytesRead: @unchecked Sendable {
    // @unchecked: `counts` is only touched under `lock`.
    private let lock = NSLock()
    private var counts: [Int] = []
    func note(_ count: Int) { lock.withLock { counts.append(count) } }
    var values: [Int] { lock.withLock { counts } }
}
