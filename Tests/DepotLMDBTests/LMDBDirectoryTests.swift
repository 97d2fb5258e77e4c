import DepotCore
import Foundation
import Testing

import DepotLMDB

/// The store's own directory is created when missing, but only inside one that exists; the
/// chain above it only with `createDirectories`.
@Suite("LMDBStore: missing directories")
struct LMDBDirectoryTests {
    @Test func aMissingParentIsRefusedNamingItAndNothingIsCreated() async throws {
        let root = TemporaryDirectory()
        defer { root.remove() }
        try FileManager.default.createDirectory(atPath: root.path, withIntermediateDirectories: true)
        let parent = (root.path as NSString).appendingPathComponent("nonexistent/dir")
        do {
            _ = try LMDBStore(directory: (parent as NSString).appendingPathComponent("db"))
            Issue.record("a store under a missing directory was opened")
        } catch let error as DepotError {
            #expect(error.code == .io)
            #expect(error.message.contains(parent), "\(error.message)")
            #expect(error.message.contains("createDirectories=true"), "\(error.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: root.path).isEmpty, "nothing was created")
    }

    @Test func theStoreDirectoryIsCreatedInsideAnExistingOne() async throws {
        let root = TemporaryDirectory()
        defer { root.remove() }
        try FileManager.default.createDirectory(atPath: root.path, withIntermediateDirectories: true)
        let directory = (root.path as NSString).appendingPathComponent("db")
        let store = try LMDBStore(directory: directory)
        await store.close()
        #expect(FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent("data.mdb")))
    }

    @Test func createDirectoriesCreatesTheMissingChain() async throws {
        let root = TemporaryDirectory()
        defer { root.remove() }
        let directory = (root.path as NSString).appendingPathComponent("a/b/db")
        let store = try LMDBStore(directory: directory, options: .init(createDirectories: true))
        await store.close()
        #expect(FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent("data.mdb")))
    }
}
