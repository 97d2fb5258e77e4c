import Depot
import DepotTesting
import Foundation
import Testing

@Record
struct ReadOnlyNewcomer {
    var id: Int64
    var name: String
}

/// Issue #35, item 9: `readOnly=true` opens an existing store of any backend without
/// creating or changing anything, refuses a store that does not exist, and refuses writes.
@Suite("Opening a store read-only")
struct ReadOnlyTests {
    static let postgres = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"]

    /// A URL per backend for a store that does not exist yet (`DIR` is a fresh directory).
    static var templates: [String] {
        ["sqlite://DIR/store.sqlite", "lmdb://DIR/store"] + (postgres.map { ["\($0)&schema=SCHEMA"] } ?? [])
    }

    func location(_ template: String) -> (url: String, directory: URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-readonly-\(UUID().uuidString)")
        let url = template.replacingOccurrences(of: "DIR", with: directory.path)
            .replacingOccurrences(of: "SCHEMA", with: "ro_\(UUID().uuidString.prefix(8).lowercased())")
        return (url, directory)
    }

    func readOnly(_ url: String) -> String { url + (url.contains("?") ? "&" : "?") + "readOnly=true" }

    func isReadOnlyRefusal(_ error: any Error) -> Bool {
        guard let error = error as? DepotError else { return false }
        return error.code == .permissionDenied && error.message.contains("read-only")
    }

    @Test(arguments: templates)
    func aMissingStoreIsRefusedAndNothingIsCreated(template: String) async throws {
        let (url, directory) = location(template)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            let store = try await openStore(url: readOnly(url))
            await store.close()
            Issue.record("\(url) was opened read-only although there is no store")
        } catch {
            #expect(error.message.contains("read-only is never created") || error.code == .io, "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty, "nothing was created in \(directory.path)")
        if template.hasPrefix("postgres") || Self.postgres.map({ template.hasPrefix($0) }) == true {
            // A second refusal still finds no schema: the first created none.
            do {
                let store = try await openStore(url: readOnly(url))
                await store.close()
                Issue.record("opened")
            } catch {
                #expect(error.message.contains("has no schema"), "\(error)")
            }
        }
    }

    /// An existing store whose schema (PostgreSQL) or file is there but holds no Depot store.
    @Test func anEmptyFileOrDirectoryIsRefusedUnchanged() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-readonly-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("empty.sqlite")
        #expect(FileManager.default.createFile(atPath: file.path, contents: Data()))
        await #expect(throws: DepotError.self) { try await openStore(url: "sqlite://\(file.path)?readOnly=true").close() }
        #expect(try Data(contentsOf: file).isEmpty, "the empty file stays empty")
        let lmdb = directory.appendingPathComponent("lmdb")
        try FileManager.default.createDirectory(at: lmdb, withIntermediateDirectories: true)
        await #expect(throws: DepotError.self) { try await openStore(url: "lmdb://\(lmdb.path)?readOnly=true").close() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: lmdb.path).isEmpty)
    }

    @Test(arguments: templates)
    func anExistingStoreOpensReadsAndRefusesWrites(template: String) async throws {
        let (url, directory) = location(template)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let writable = try await openStore(url: url)
        try await Controller<Cat, CatRecord>(store: writable).save(Cat.workload(count: 50))
        await writable.close()
        let file = directory.appendingPathComponent("store.sqlite")
        let before = try? Data(contentsOf: file)

        let store = try await openStore(url: readOnly(url))
        let cats = Controller<Cat, CatRecord>(store: store)
        #expect(try await cats.count() == 50, "a controller registers a stored entity and reads")
        #expect(try await cats.fetchOne(id: 7)?.id == 7)
        #expect(try await store.storedEntities().map(\.name) == ["Cat"])

        await #expect { try await cats.save(Cat(id: 999, name: "New", weight: 1, age: 1)) } throws: { isReadOnlyRefusal($0) }
        await #expect { try await cats.deleteAll(where: Request(\.age > 0)) } throws: { isReadOnlyRefusal($0) }
        await #expect { try await store.write { _ in 1 } } throws: { isReadOnlyRefusal($0) }
        // A new entity, or a changed one, would create or alter tables.
        await #expect { try await Controller<ReadOnlyNewcomer, ReadOnlyNewcomer>(store: store).count() } throws: { isReadOnlyRefusal($0) }
        await #expect { try await Controller<CatRecordV2, CatRecordV2>(store: store).count() } throws: { isReadOnlyRefusal($0) }
        #expect(try await cats.count() == 50, "still readable after refusals")
        await store.close()

        if let before {
            #expect(try Data(contentsOf: file) == before, "the SQLite file is byte for byte as it was")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["store.sqlite"], "no -wal or -shm left behind")
        }
        let again = try await openStore(url: url)
        #expect(try await Controller<Cat, CatRecord>(store: again).count() == 50, "nothing was written")
        await again.close()
    }

    @Test func aReadOnlyMemoryStoreRefusesWrites() async throws {
        let store = try await openStore(url: "memory:?readOnly=true")
        #expect((store as? MemoryStore)?.isReadOnly == true)
        await #expect { try await Controller<Cat, CatRecord>(store: store).save(Cat(id: 1, name: "Tom", weight: 1, age: 1)) } throws: { isReadOnlyRefusal($0) }
        await #expect { try await store.write { _ in 1 } } throws: { isReadOnlyRefusal($0) }
        await store.close()
        do {
            let empty = try await StoreURL("sqlite::memory:?readOnly=true").open()
            await empty.close()
            Issue.record("sqlite::memory: opened read-only")
        } catch {
            #expect(error.code == .invalidConfiguration, "\(error)")
        }
    }
}
