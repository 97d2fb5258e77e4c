import Depot
import DepotTesting
import Foundation
import Testing

/// Issue #35, item 14: the Swift blocks of the README and the DocC articles are compiled:
/// each one's lines appear, in order, in one test file (string literals and comments aside,
/// so a test may use its own paths), and the few that are not are listed here by name.
@Suite("Documentation examples")
struct DocumentationExampleTests {
    /// The blocks not compiled by any test, by file and first line, and why: fragments that
    /// need an application's own values. Keep this list short; a block that is fixed and
    /// compiled must leave it (the test checks both ways).
    static let notCompiled: [(file: String, firstLine: String, why: String)] = [
        ("README.md", ".package(url:", "lines of an application's Package.swift, not code of a target"),
        ("Sources/Depot/Documentation.docc/ChoosingABackend.md", "let config = ConfigReader(", "a service group with the application's server"),
        ("Sources/DepotCore/Documentation.docc/WhatAControllerDoes.md", "let old = cats.results.filter(", "streams to the application's socket and cursor"),
        ("Sources/Depot/Documentation.docc/TheDepotCommand.md", "import ArgumentParser", "the application's own migrator and records"),
        ("Sources/Depot/Documentation.docc/UsingDepotInAServer.md", "@Record", "the example server's model (Examples/PetClinic compiles it)"),
        ("Sources/Depot/Documentation.docc/UsingDepotInAServer.md", "let url = try (StoreURL(config:", "the example server's start-up (Examples/PetClinic)"),
        ("Sources/Depot/Documentation.docc/UsingDepotInAServer.md", "struct StoreExecutorMiddleware", "Hummingbird middleware (Examples/PetClinic)"),
        ("Sources/Depot/Documentation.docc/UsingDepotInAServer.md", "var set = clinic.pets.results", "an example server's handler (Examples/PetClinic)"),
        ("Sources/DepotCore/Documentation.docc/Aggregates.md", "let total = try await cats.sum(", "fragment over an application's controller"),
        ("Sources/DepotCore/Documentation.docc/Concurrency.md", "try await withTaskExecutorPreference(", "fragment: `renamed` is the application's"),
        ("Sources/DepotCore/Documentation.docc/DeclaringRecords.md", "struct Cat: Sendable, Equatable {", "`extension Cat` needs Cat at file scope, where the fixtures' Cat is (the other examples are compiled by DeclaringRecordsArticleTests)"),
        ("Sources/DepotCore/Documentation.docc/ImportingJSON.md", "let cats = Controller<Cat, CatRecord>(store: store)", "fragment: the request body is the application's"),
        ("Sources/DepotCore/Documentation.docc/ImportingJSON.md", "router.post(", "a Hummingbird route (Examples/PetClinic)"),
        ("Sources/DepotCore/Documentation.docc/LiveQueries.md", "let heavy = cats.results.filter(", "fragment over an application's controller"),
        ("Sources/DepotCore/Documentation.docc/LiveQueries.md", "for try await cat in cats.results.batched(", "`export` is the application's"),
        ("Sources/DepotCore/Documentation.docc/LiveQueries.md", "let set = cats.results.filter(", "an application's handler"),
        ("Sources/DepotCore/Documentation.docc/LiveQueries.md", "func streamOldCats(", "`ClientConnection` is the application's"),
        ("Sources/DepotCore/Documentation.docc/LiveQueries.md", "let token = cats.observe(", "`render` is the application's"),
        ("Sources/DepotCore/Documentation.docc/Migrations.md", "var migrator = Migrator()", "the application's `Person` records"),
        ("Sources/DepotCore/Documentation.docc/RelationshipsBetweenRecords.md", "static let entity = Entity<WalkRecord>(", "fragment of a hand-written record"),
        ("Sources/DepotPostgres/Documentation.docc/DepotPostgres.md", "import Depot", "needs DEPOT_STORE_URL to name a server (the calls are those of DepotSQLite's example)"),
    ]

    struct Block {
        let file: String
        let line: Int
        let lines: [String]
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A line as compared: string literals emptied, comments and indentation dropped.
    static func normalized(_ line: String) -> String {
        var text = line.replacingOccurrences(of: #""(?:[^"\\]|\\.)*""#, with: "\"\"", options: .regularExpression)
        if let comment = text.range(of: "//") { text = String(text[..<comment.lowerBound]) }
        return text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    static func blocks() throws -> [Block] {
        var files = ["README.md"]
        let sources = root.appendingPathComponent("Sources")
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let catalog = "Sources/\(module)/Documentation.docc"
            guard let articles = try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(catalog).path) else { continue }
            files += articles.filter { $0.hasSuffix(".md") }.sorted().map { "\(catalog)/\($0)" }
        }
        var blocks: [Block] = []
        for file in files {
            let lines = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8).components(separatedBy: "\n")
            var start: Int?
            var body: [String] = []
            for (number, line) in lines.enumerated() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if start == nil, trimmed == "```swift" {
                    start = number + 1
                    body = []
                } else if let first = start, trimmed == "```" {
                    blocks.append(Block(file: file, line: first, lines: body.map(normalized).filter { !$0.isEmpty }))
                    start = nil
                } else if start != nil {
                    body.append(line)
                }
            }
        }
        return blocks
    }

    /// The tests (among them Tests/OutsideEngineTests, the outside engine that "Writing a
    /// backend" quotes), and Examples/SortedArrayEngine, the package that compiles that
    /// engine with nothing `package` in reach (`make example-test`).
    static func testFiles() throws -> [(String, [String])] {
        var files: [(String, [String])] = []
        for folder in ["Tests", "Examples/SortedArrayEngine"] {
            let base = root.appendingPathComponent(folder)
            guard let walker = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let path as String in walker where path.hasSuffix(".swift") && !path.hasPrefix(".build") {
                let text = try String(contentsOf: base.appendingPathComponent(path), encoding: .utf8)
                files.append(("\(folder)/\(path)", text.components(separatedBy: "\n").map(normalized).filter { !$0.isEmpty }))
            }
        }
        return files
    }

    /// Whether `needle` is a subsequence of `haystack`.
    static func appears(_ needle: [String], in haystack: [String]) -> Bool {
        var position = haystack.startIndex
        for line in needle {
            guard let found = haystack[position...].firstIndex(of: line) else { return false }
            position = found + 1
        }
        return true
    }

    @Test func everySwiftBlockIsCompiledOrListed() throws {
        let blocks = try Self.blocks()
        #expect(blocks.count > 30, "found the blocks: \(blocks.count)")
        let tests = try Self.testFiles()
        var listedAndUncompiled = Set<Int>()
        for block in blocks where !block.lines.isEmpty {
            let compiled = tests.contains { Self.appears(block.lines, in: $0.1) }
            // The most specific entry that names the block.
            let listed = Self.notCompiled.indices
                .filter { Self.notCompiled[$0].file == block.file && block.lines.first?.hasPrefix(Self.normalized(Self.notCompiled[$0].firstLine)) == true }
                .max { Self.notCompiled[$0].firstLine.count < Self.notCompiled[$1].firstLine.count }
            if compiled { continue }
            if let listed {
                listedAndUncompiled.insert(listed)
            } else {
                Issue.record("\(block.file):\(block.line): this Swift block is compiled by no test; copy it into one (Tests/DepotTests) or list it in notCompiled.\n\(block.lines.joined(separator: "\n"))")
            }
        }
        for (index, entry) in Self.notCompiled.enumerated() where !listedAndUncompiled.contains(index) {
            Issue.record("notCompiled lists \(entry.file): \(entry.firstLine), but no uncompiled block there starts so: remove the entry.")
        }
    }

    // The examples of the module catalogues, as an application writes them.

    @Test func openingExamples() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-docs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            // ChoosingABackend.md.
            let store = try await openStore(url: ProcessInfo.processInfo.environment["DEPOT_DOCS_UNSET"] ?? "sqlite://\(directory.path)/app.sqlite")
            #expect(store is SQLiteStore)
            await store.close()
        }
        do {
            // Depot.md.
            let store = try await openStore(url: "sqlite://\(directory.path)/full.sqlite?durability=full")
            let cats = Controller<Cat, CatRecord>(store: store)
            #expect(try await cats.count() == 0)
            await store.close()
        }
        do {
            // DepotSQLite.md.
            let store = try SQLiteStore(path: "\(directory.path)/sqlite.sqlite")
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat(id: 1, name: "Tom", weight: 4.5, age: 3))
            await store.close()
        }
        do {
            // DepotLMDB.md.
            let store = try LMDBStore(directory: "\(directory.path)/cats")
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat(id: 1, name: "Tom", weight: 4.2, age: 3))
            let old = try await cats.fetchAll(Request(\.age > 10).sorted(by: \.name).limit(100))
            await store.close()
            #expect(old.isEmpty)
        }
    }
}
