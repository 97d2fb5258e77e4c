import DepotCore
import DepotTesting
import Foundation
import Testing

import DepotLMDB

/// A record whose stored bytes are damaged is refused with `storeCorrupted` however it is
/// read: a fetch checks each attribute as the record's initializer reads it and the rest
/// afterwards, a lookup checks the whole record first; both must find the same damage.
@Suite("LMDB: damaged records are refused, never read")
struct LMDBDamagedRecordTests {
    /// Ways to damage a stored record (a `Cat`: id, name, weight, age), each applied to
    /// the record's real bytes.
    static let damages: [(name: String, damage: @Sendable ([UInt8]) -> [UInt8])] = [
        ("a byte after the last attribute", { $0 + [0] }),
        ("the last byte cut off", { Array($0.dropLast()) }),
        ("only the version byte", { Array($0.prefix(1)) }),
        ("another format version", { [0xEE] + $0.dropFirst() }),
        // The second attribute (the name) tagged as an integer: the type check of the tag.
        ("the name's tag made an integer's", { bytes in
            var bytes = bytes
            if let at = tagOffset(of: 1, in: bytes) { bytes[at] = 1 }
            return bytes
        }),
        // The name's length pointing past the record's end.
        ("the name's length past the end", { bytes in
            var bytes = bytes
            if let at = tagOffset(of: 1, in: bytes) { bytes[at + 1] = 0x7F }
            return bytes
        }),
        // The age (last attribute) tagged as a string: damage an initializer reaches last.
        ("the age's tag made a string's", { bytes in
            var bytes = bytes
            if let at = tagOffset(of: 3, in: bytes) { bytes[at] = 5 }
            return bytes
        }),
    ]

    /// Where attribute `index`'s tag is in a `Cat`'s stored bytes (version byte, then the
    /// id as a varint, the name as a length and bytes, the weight as eight bytes).
    static func tagOffset(of index: Int, in bytes: [UInt8]) -> Int? {
        var p = 1
        for i in 0..<4 {
            guard p < bytes.count else { return nil }
            if i == index { return p }
            let tag = bytes[p]
            p += 1
            switch tag {
            case 1:
                while p < bytes.count, bytes[p] >= 0x80 { p += 1 }
                p += 1
            case 2: p += 8
            case 5:
                guard p < bytes.count else { return nil }
                let length = Int(bytes[p])
                p += 1 + length
            default: return nil
            }
        }
        return nil
    }

    @Test("a damaged record fails a fetch and a lookup with storeCorrupted; the others still read", arguments: 0..<damages.count)
    func damagedRecord(_ index: Int) async throws {
        let (name, damage) = Self.damages[index]
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(directory: directory.path)
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat.fixtures)
        let ordered = Cat.fixtures.sorted { $0.id < $1.id }
        let victim = ordered[1]
        let entity = try await store.register(CatRecord.entity.description)
        try await store.write { transaction in
            guard let t = transaction as? LMDBTransaction, let bytes = try t.storedRecord(entity, key: .int(victim.id)) else {
                Issue.record("\(name): no stored record to damage")
                return
            }
            try t.replaceStoredRecord(entity, key: .int(victim.id), with: damage(bytes))
        }
        do {
            let all = try await cats.fetchAll()
            Issue.record("\(name): a fetch read \(all.count) cats")
        } catch let error as DepotError {
            #expect(error.code == .storeCorrupted, "\(name): \(error)")
            #expect(error.message.contains("cannot be decoded as Cat"), "\(name): \(error)")
        }
        await expectDepotError(.storeCorrupted) { try await cats.fetchOne(id: victim.id) }
        await expectDepotError(.storeCorrupted) { try await cats.fetchAll(Request<CatRecord>.all.sorted(by: \.id).limit(Cat.fixtures.count)) }
        #expect(try await cats.fetchOne(id: ordered[0].id) == ordered[0], "\(name): the record before it reads")
        #expect(try await cats.fetchAll(Request<CatRecord>.all.limit(1)) == [ordered[0]], "\(name): a page that stops before it reads")
        await store.close()
    }

    /// A record read through a hand-written initializer that reads its attributes out of
    /// order (by key path) reads the same values as the generated one.
    @Test("attributes read out of order read the same values")
    func outOfOrderReads() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let store = try LMDBStore(directory: directory.path)
        try await Controller<Cat, CatRecord>(store: store).save(Cat.fixtures)
        let backwards = try await Controller<BackwardsCat, BackwardsCat>(store: store).fetchAll()
        #expect(backwards.map(\.cat) == Cat.fixtures.sorted { $0.id < $1.id })
        await store.close()
    }
}

/// `Cat`'s entity, read by a hand-written initializer from the last attribute to the first.
struct BackwardsCat: StoredObject, Hashable {
    var id: Int64
    var name: String
    var weight: Double
    var age: Int

    static let entity = Entity<BackwardsCat>("Cat", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("name", \.name)
        Attribute("weight", \.weight)
        Attribute("age", \.age, indexed: true)
    }

    init(row: RecordReader<BackwardsCat>) throws {
        age = try row[\.age]
        weight = try row[\.weight]
        name = try row[\.name]
        id = try row[\.id]
    }

    var cat: Cat { Cat(id: id, name: name, weight: weight, age: age) }
}
