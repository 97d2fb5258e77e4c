import DepotCore
import Foundation
import NIOConcurrencyHelpers
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

    /// Two processes opening one new store both see no directory and both try to create it;
    /// the one that loses that race must open the directory the other made, not fail. The
    /// race is run here between threads: every attempt opens the store or is told it is
    /// already open in this process, never that its directory cannot be created.
    @Test func openersRacingToCreateTheDirectoryAllSeeOneStore() async throws {
        let root = TemporaryDirectory()
        defer { root.remove() }
        try FileManager.default.createDirectory(atPath: root.path, withIntermediateDirectories: true)
        for round in 0..<20 {
            let directory = (root.path as NSString).appendingPathComponent("db\(round)")
            // A box (a class), not a local `Mutex`: the threads' closure captured the local
            // variable, and Thread Sanitizer reported the captures' accesses as a race.
            let outcomes = NIOLockedValueBox<(stores: [LMDBStore], errors: [DepotError])>(([], []))
            DispatchQueue.concurrentPerform(iterations: 4) { _ in
                do {
                    let store = try LMDBStore(directory: directory)
                    outcomes.withLockedValue { $0.stores.append(store) }
                } catch let error as DepotError {
                    outcomes.withLockedValue { $0.errors.append(error) }
                } catch {
                    outcomes.withLockedValue { $0.errors.append(DepotError(.io, "\(error)")) }
                }
            }
            let (stores, errors) = outcomes.withLockedValue { $0 }
            for store in stores { await store.close() }
            #expect(stores.count == 1, "round \(round): \(stores.count) stores opened, errors \(errors)")
            for error in errors {
                #expect(error.code == .busy, "round \(round): \(error.code): \(error.message)")
            }
        }
    }
}
