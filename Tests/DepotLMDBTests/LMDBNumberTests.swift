import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

@Suite("LMDB: every number gives a result or a DepotError")
struct LMDBNumberTests {
    @Test("map sizes up to Int.max open or are refused, never trap", arguments: [
        Int.max, Int.max - 1, Int.max / 2 + 1, (1 << 44) + 1, 1 << 62,
    ])
    func hugeMapSize(_ size: Int) async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        await expectDepotError(.invalidConfiguration) { try LMDBStore(directory: directory.path, options: .init(mapSize: size)) }
    }

    @Test("the largest map size and tiny ones open", arguments: [1, 4095, 4097, 1 << 44])
    func boundaryMapSize(_ size: Int) async throws {
        // A 16 TiB map is address space, not disk; where the process cannot reserve that
        // much (Thread Sanitizer takes most of it), opening must still end in a DepotError
        // naming ENOMEM, never a trap.
        if size == 1 << 44 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("depot-lmdb-max-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            do {
                let store = try LMDBStore(directory: directory.path, options: .init(mapSize: size))
                await store.close()
            } catch let error as DepotError {
                #expect(error.nativeCode == 12, "only a refused address-space reservation may stop the largest map: \(error)")
                return
            }
        }
        try await withStore(options: .init(mapSize: size)) { store, _ in
            let cats = Controller<Cat, CatRecord>(store: store)
            try await cats.save(Cat.fixtures)
            #expect(try await cats.count() == Cat.fixtures.count)
            #expect(store.environment.mapSize % 4096 == 0)
        }
    }

    @Test("page rounding stays within bounds for every size")
    func rounding() {
        for size in [Int.min, -1, 0, 1, 4096, 4097, (1 << 44) - 1, 1 << 44, (1 << 44) + 1, Int.max - 4095, Int.max] {
            let rounded = LMDBStore.roundedMapSize(size)
            #expect(rounded >= 16 * 4096 && rounded <= Environment.maximumMapSize && rounded % 4096 == 0, "\(size) → \(rounded)")
        }
    }
}
