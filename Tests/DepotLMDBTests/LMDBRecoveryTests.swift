import CLMDB
import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

/// The newest meta page of a closed store's `data.mdb` and the file's size.
func lastPageAndSize(_ directory: String) throws -> (meta: DataFileCheck.Meta, pageSize: Int, fileSize: Int) {
    let file = (directory as NSString).appendingPathComponent("data.mdb")
    let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: file))
    defer { try? handle.close() }
    let pageSize = 4096
    let check = DataFileCheck(descriptor: handle.fileDescriptor, pageSize: pageSize, path: file)
    let metas = [try check.meta(slot: 0), try check.meta(slot: 1)].compactMap { $0 }
    let newest = try #require(metas.max { $0.txnid < $1.txnid })
    let size = try #require(try FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber).intValue
    return (newest, pageSize, size)
}

@Suite("LMDB recovery: stores LMDB reads are opened, truncated ones refused")
struct LMDBRecoveryTests {
    /// The pages LMDB itself lists as free in the newest snapshot (read through LMDB's own
    /// cursor on the free database, not through the code under test).
    static func freePages(_ directory: String) throws -> Set<UInt64> {
        var created: OpaquePointer?
        #expect(mdb_env_create(&created) == 0)
        let env = try #require(created)
        defer { mdb_env_close(env) }
        try #require(mdb_env_open(env, directory, UInt32(MDB_RDONLY), 0o644) == 0)
        var begun: OpaquePointer?
        try #require(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &begun) == 0)
        let txn = try #require(begun)
        defer { mdb_txn_abort(txn) }
        var cursor: OpaquePointer?
        try #require(mdb_cursor_open(txn, 0, &cursor) == 0)
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var data = MDB_val()
        var free = Set<UInt64>()
        while mdb_cursor_get(cursor, &key, &data, MDB_NEXT) == 0 {
            let ids = UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
            let count = Int(ids.loadUnaligned(as: UInt64.self))
            for n in 0..<count { free.insert(ids.loadUnaligned(fromByteOffset: 8 + 8 * n, as: UInt64.self)) }
        }
        return free
    }

    /// A store whose last pages are free: many records written, then deleted, then a few
    /// small commits that move the trees to low pages. Returns how many trailing pages are
    /// free.
    static func storeWithFreeTail(_ directory: String) async throws -> (meta: DataFileCheck.Meta, freeTail: Int) {
        let store = try LMDBStore(directory: directory)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.fixtures)
        try await cats.save((1000..<4000).map { Cat(id: Int64($0), name: String(repeating: "n", count: 40), weight: 1, age: Int($0 % 7)) })
        _ = try await cats.deleteAll(where: \.id >= 1000)
        for i in 0..<8 { try await cats.save(Cat(id: Int64(100 + i), name: "small \(i)", weight: 1, age: 1)) }
        _ = try await cats.deleteAll(where: \.id >= 100)
        await store.close()
        let (meta, _, _) = try lastPageAndSize(directory)
        let free = try freePages(directory)
        var tail = 0
        while free.contains(meta.lastPage - UInt64(tail)) { tail += 1 }
        return (meta, tail)
    }

    @Test("a store whose file ends before its last, unused page opens and reads back")
    func unwrittenFreePages() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (meta, freeTail) = try await Self.storeWithFreeTail(directory.path)
        try #require(freeTail > 0, "the last page of the store is free")
        // What a crash leaves when LMDB allocated and freed the last pages in one transaction
        // and so never wrote them: the file ends where the free pages begin.
        let file = (directory.path as NSString).appendingPathComponent("data.mdb")
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        try handle.truncate(atOffset: (meta.lastPage + 1 - UInt64(freeTail)) * 4096)
        try handle.close()
        let (_, pageSize, size) = try lastPageAndSize(directory.path)
        #expect(size < (Int(meta.lastPage) + 1) * pageSize, "file \(size) bytes, last page \(meta.lastPage)")
        if let tool = executable("mdb_stat") {
            let (status, output) = try run(tool, ["-a", directory.path])
            #expect(status == 0, "LMDB itself reads the store: \(output)")
        }
        let store = try LMDBStore(directory: directory.path)
        let cats = Controller<Cat, CatRecord>(store: store)
        #expect(try await cats.fetchAll() == Cat.fixtures.sorted { $0.id < $1.id })
        try await cats.save(Cat(id: 77, name: "After", weight: 2, age: 2))
        #expect(try await cats.count() == Cat.fixtures.count + 1)
        await store.close()
    }

    @Test("cutting pages that hold data off such a store is still refused, file unchanged")
    func truncatedUsedPages() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let (meta, freeTail) = try await Self.storeWithFreeTail(directory.path)
        let file = (directory.path as NSString).appendingPathComponent("data.mdb")
        let whole = try Data(contentsOf: URL(fileURLWithPath: file))
        let firstFree = Int(meta.lastPage) + 1 - freeTail
        #expect(whole.count >= firstFree * 4096)
        // Cut into the used pages below the free tail.
        for pages in [1, 2, 4] where firstFree > pages + 4 {
            let cut = whole.prefix((firstFree - pages) * 4096)
            try cut.write(to: URL(fileURLWithPath: file))
            do {
                let store = try LMDBStore(directory: directory.path)
                await store.close()
                Issue.record("a store missing \(pages) used pages must be refused")
            } catch let error as DepotError {
                #expect(error.code == .storeCorrupted, "\(error)")
                #expect(error.message.contains("truncated"), "\(error.message)")
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == cut, "the refused file is unchanged")
        }
    }
}
