import DepotCore
import Foundation
import Testing

import DepotSQLite

/// A mistyped path must not grow a directory tree: the file's directory must exist unless
/// `createDirectories` asks for it.
@Suite("SQLiteStore: missing directories")
struct SQLiteDirectoryTests {
    @Test func aMissingDirectoryIsRefusedNamingItAndNothingIsCreated() async throws {
        try await withTemporaryDirectory { root in
            let missing = root.appendingPathComponent("nonexistent/dir")
            let file = missing.appendingPathComponent("x.sqlite").path
            do {
                _ = try SQLiteStore(path: file)
                Issue.record("a path under a missing directory was opened")
            } catch let error as DepotError {
                #expect(error.code == .io)
                #expect(error.message.contains(missing.path), "\(error.message)")
                #expect(error.message.contains("createDirectories=true"), "\(error.message)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty, "nothing was created")
        }
    }

    @Test func aFileWhereTheDirectoryShouldBeIsRefused() async throws {
        try await withTemporaryDirectory { root in
            let blocker = root.appendingPathComponent("file")
            try Data("x".utf8).write(to: blocker)
            #expect(throws: DepotError.self) { _ = try SQLiteStore(path: blocker.appendingPathComponent("x.sqlite").path) }
        }
    }

    @Test func createDirectoriesCreatesTheMissingChain() async throws {
        try await withTemporaryDirectory { root in
            let file = root.appendingPathComponent("a/b/c/x.sqlite").path
            let store = try SQLiteStore(path: file, options: .init(createDirectories: true))
            await store.close()
            #expect(FileManager.default.fileExists(atPath: file))
        }
    }
}
