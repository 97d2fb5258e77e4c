import CLMDB
import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

#if os(Linux)
import Glibc

/// Makes the next write of LMDB's meta page fail, in this process, without a shim.
///
/// With full durability LMDB writes the meta page through a descriptor of its own
/// (`me_mfd`, opened with `O_DSYNC`), and the data pages through another (`me_fd`, which
/// `mdb_env_get_fd` returns). Putting a read-only descriptor of the same file in place of
/// `me_mfd` makes exactly the meta-page write fail (`EBADF`), which is what sets LMDB's
/// `MDB_FATAL_ERROR`: the same state a disk error there leaves (the reliability tests
/// provoke that one with an `LD_PRELOAD` shim in a helper process).
struct MetaWriteSabotage {
    let metaDescriptor: Int32
    let saved: Int32

    /// Call with no transaction of `store` running.
    init(_ store: LMDBStore) throws {
        let pointer = try #require(store.environment.pointer)
        var dataDescriptor: Int32 = -1
        try #require(mdb_env_get_fd(pointer, &dataDescriptor) == 0)
        let dataFile = (store.directory as NSString).appendingPathComponent("data.mdb")
        // Every descriptor of this process open on data.mdb, except the data one.
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap(Int32.init)
        let meta = descriptors.filter { descriptor in
            guard descriptor != dataDescriptor,
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")
            else { return false }
            return target == dataFile
        }
        metaDescriptor = try #require(meta.count == 1 ? meta.first : nil, "one meta descriptor of \(dataFile): \(meta)")
        saved = dup(metaDescriptor)
        try #require(saved >= 0)
        let readOnly = open(dataFile, O_RDONLY)
        try #require(readOnly >= 0)
        try #require(dup2(readOnly, metaDescriptor) == metaDescriptor)
        close(readOnly)
    }

    /// Puts LMDB's own descriptor back: the "disk" works again.
    func restore() {
        _ = dup2(saved, metaDescriptor)
        close(saved)
    }
}

@Suite("LMDB after a failed meta-page write (MDB_PANIC)")
struct LMDBPanicTests {
    static let batch = (500..<510).map { Cat(id: Int64($0), name: "lost \($0)", weight: 1, age: 1) }
    static let later = (600..<610).map { Cat(id: Int64($0), name: "after \($0)", weight: 1, age: 1) }

    /// Commits a batch whose meta-page write fails, checks that LMDB did declare the
    /// environment dead, and restores the descriptor.
    static func failMetaWrite(_ store: LMDBStore, _ cats: Cats) async throws {
        let sabotage = try MetaWriteSabotage(store)
        await expectDepotError(.backend) { try await cats.save(batch) }
        sabotage.restore()
        // The state the store must recover from: LMDB refuses every new transaction.
        let pointer = try #require(store.environment.pointer)
        var txn: OpaquePointer?
        #expect(mdb_txn_begin(pointer, nil, UInt32(MDB_RDONLY), &txn) == MDB_PANIC)
    }

    @Test("the store reopens its environment once, for every reader waiting, and loses nothing acknowledged")
    func reopensAfterPanic() async throws {
        try await withStore { store, directory in
            let cats = Cats(store: store)
            try await cats.save(Cat.fixtures)
            // Idle read transactions (reset, keeping their reader slots) go with the old
            // environment.
            #expect(try await cats.count() == Cat.fixtures.count)
            let epoch = store.environment.epoch
            try await Self.failMetaWrite(store, cats)

            // Several readers meet the dead environment at once: one reopens it, all read.
            let counts = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 { group.addTask { try await cats.count() } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(counts == Array(repeating: Cat.fixtures.count, count: 8))
            #expect(store.environment.epoch == epoch + 2, "closed and opened once")

            try await cats.save(Self.later)
            let expected = Set(Cat.fixtures.map(\.id)).union(Self.later.map(\.id))
            #expect(Set(try await cats.fetchAll().map(\.id)) == expected)
            await store.close()

            let reopened = try LMDBStore(directory: directory.path)
            #expect(Set(try await Cats(store: reopened).fetchAll().map(\.id)) == expected)
            await reopened.close()
        }
    }

    @Test("a reopen the disk refuses throws .io at each transaction until the disk works again")
    func refusedReopenIsRetried() async throws {
        try await withStore { store, directory in
            let cats = Cats(store: store)
            try await cats.save(Cat.fixtures)
            try await Self.failMetaWrite(store, cats)

            // The data file gone (a disk that fails to show it): the store must not create an
            // empty one in its place.
            let dataFile = (store.directory as NSString).appendingPathComponent("data.mdb")
            let away = dataFile + ".away"
            try FileManager.default.moveItem(atPath: dataFile, toPath: away)
            await expectDepotError(.io) { try await cats.count() }
            #expect(store.environment.pointer == nil)
            await expectDepotError(.io) { try await cats.save(Self.later) }
            #expect(!FileManager.default.fileExists(atPath: dataFile))

            try FileManager.default.moveItem(atPath: away, toPath: dataFile)
            #expect(try await cats.count() == Cat.fixtures.count)
            try await cats.save(Self.later)
            #expect(try await cats.count() == Cat.fixtures.count + Self.later.count)
        }
    }
}
#endif
