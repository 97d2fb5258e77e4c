import ToolsCLMDB
import DepotTesting
import Dispatch
import Foundation

/// LMDB through its C API, written as fast as we can: one database, keys as big-endian
/// sign-flipped integers (memcmp order), values as `age, weight, name bytes`, decoded
/// straight from the map, and a `MDB_DUPSORT` index on age (age → key), because
/// `CatRecord` declares age indexed and raw SQLite keeps that index too: writes do the same
/// work on both sides. The yardstick for `lmdb`. Durable commits (LMDB's defaults).
final class RawLMDBSubject: BenchSubject {
    let name = "raw-lmdb"
    let rawCounterpart: String? = nil
    private var env: OpaquePointer?
    private var dbi = MDB_dbi(0)
    private var ageIndex = MDB_dbi(0)
    private var petDBI = MDB_dbi(0)
    private var speciesNameIndex = MDB_dbi(0)

    private func check(_ code: Int32, _ what: String) throws {
        guard code == MDB_SUCCESS else { throw BenchError("raw-lmdb \(what): \(String(cString: mdb_strerror(code)))") }
    }

    func open(at directory: URL) async throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var env: OpaquePointer?
        try check(mdb_env_create(&env), "env create")
        self.env = env
        try check(mdb_env_set_mapsize(env, 1 << 31), "set map size")
        try check(mdb_env_set_maxreaders(env, 126), "set max readers")
        try check(mdb_env_set_maxdbs(env, 4), "set max databases")
        try check(mdb_env_open(env, directory.path, UInt32(MDB_NOTLS), 0o644), "env open")
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn), "txn begin")
        try check(mdb_dbi_open(txn, "Cat", UInt32(MDB_CREATE), &dbi), "dbi open")
        try check(mdb_dbi_open(txn, "Cat.age", UInt32(MDB_CREATE | MDB_DUPSORT), &ageIndex), "index open")
        try check(mdb_txn_commit(txn), "commit")
    }

    func close() async {
        mdb_env_close(env)
        env = nil
    }

    @inline(__always)
    private static func key(_ id: Int64) -> UInt64 { (UInt64(bitPattern: id) ^ (1 << 63)).bigEndian }

    private func put(_ cat: Cat, in txn: OpaquePointer?, buffer: inout [UInt8]) throws {
        buffer.removeAll(keepingCapacity: true)
        withUnsafeBytes(of: Int64(cat.age).littleEndian) { buffer.append(contentsOf: $0) }
        withUnsafeBytes(of: cat.weight.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
        buffer.append(contentsOf: cat.name.utf8)
        var keyBytes = Self.key(cat.id)
        var newAge = Self.key(Int64(cat.age))
        try withUnsafeMutableBytes(of: &keyBytes) { keyBuffer in
            var key = MDB_val(mv_size: 8, mv_data: keyBuffer.baseAddress)
            // An upsert moves the index entry only when the age changed.
            var old = MDB_val()
            var oldAge: Int64?
            if mdb_get(txn, dbi, &key, &old) == MDB_SUCCESS {
                oldAge = Int64(littleEndian: UnsafeRawPointer(old.mv_data).loadUnaligned(as: Int64.self))
            }
            try buffer.withUnsafeMutableBytes { valueBuffer in
                var value = MDB_val(mv_size: valueBuffer.count, mv_data: valueBuffer.baseAddress)
                try check(mdb_put(txn, dbi, &key, &value, 0), "put")
            }
            if oldAge == Int64(cat.age) { return }
            if let oldAge {
                var oldAgeKey = Self.key(oldAge)
                try withUnsafeMutableBytes(of: &oldAgeKey) { ageBuffer in
                    var indexKey = MDB_val(mv_size: 8, mv_data: ageBuffer.baseAddress)
                    var indexValue = MDB_val(mv_size: 8, mv_data: keyBuffer.baseAddress)
                    try check(mdb_del(txn, ageIndex, &indexKey, &indexValue), "index delete")
                }
            }
            try withUnsafeMutableBytes(of: &newAge) { ageBuffer in
                var indexKey = MDB_val(mv_size: 8, mv_data: ageBuffer.baseAddress)
                var indexValue = MDB_val(mv_size: 8, mv_data: keyBuffer.baseAddress)
                try check(mdb_put(txn, ageIndex, &indexKey, &indexValue, 0), "index put")
            }
        }
    }

    private func write(_ body: (OpaquePointer?) throws -> Void) throws {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, 0, &txn), "txn begin")
        do {
            try body(txn)
            try check(mdb_txn_commit(txn), "commit")
        } catch {
            mdb_txn_abort(txn)
            throw error
        }
    }

    private func read<T>(_ body: (OpaquePointer?) throws -> T) throws -> T {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn), "read txn begin")
        defer { mdb_txn_abort(txn) }
        return try body(txn)
    }

    func saveAll(_ cats: [Cat]) async throws {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64)
        try write { txn in for cat in cats { try put(cat, in: txn, buffer: &buffer) } }
    }

    @inline(__always)
    private static func cat(key: MDB_val, value: MDB_val) -> Cat {
        let raw = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
        let keyBits = UInt64(bigEndian: UnsafeRawPointer(key.mv_data).loadUnaligned(as: UInt64.self))
        let id = Int64(bitPattern: keyBits ^ (1 << 63))
        let age = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: Int64.self))
        let weight = Double(bitPattern: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: raw[16...]), as: UTF8.self)
        return Cat(id: id, name: name, weight: weight, age: Int(age))
    }

    private func scan(_ visit: (Cat) -> Void) throws {
        try read { txn in
            var stat = MDB_stat()
            mdb_stat(txn, dbi, &stat)
            var cursor: OpaquePointer?
            try check(mdb_cursor_open(txn, dbi, &cursor), "cursor open")
            defer { mdb_cursor_close(cursor) }
            var key = MDB_val()
            var value = MDB_val()
            var code = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
            while code == MDB_SUCCESS {
                visit(Self.cat(key: key, value: value))
                code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
        }
    }

    func fetchAll() async throws -> [Cat] {
        var cats: [Cat] = []
        try read { txn in
            var stat = MDB_stat()
            mdb_stat(txn, dbi, &stat)
            cats.reserveCapacity(Int(stat.ms_entries))
        }
        try scan { cats.append($0) }
        return cats
    }

    func saveEach(_ cats: [Cat]) async throws {
        var buffer: [UInt8] = []
        for cat in cats { try write { txn in try put(cat, in: txn, buffer: &buffer) } }
    }

    private func lookUp(_ id: Int64, in txn: OpaquePointer?) throws -> Cat {
        var keyBytes = Self.key(id)
        return try withUnsafeMutableBytes(of: &keyBytes) { keyBuffer in
            var key = MDB_val(mv_size: 8, mv_data: keyBuffer.baseAddress)
            var value = MDB_val()
            try check(mdb_get(txn, dbi, &key, &value), "get \(id)")
            return Self.cat(key: key, value: value)
        }
    }

    func lookUpInOneRead(_ ids: [Int64]) async throws -> Int64 {
        try read { txn in
            var sum: Int64 = 0
            for id in ids { sum &+= checksum(try lookUp(id, in: txn)) }
            return sum
        }
    }

    /// Each lookup in its own read transaction, called synchronously.
    func lookUpEach(_ ids: [Int64]) async throws -> Int64 {
        var sum: Int64 = 0
        for id in ids { sum &+= try read { txn in checksum(try lookUp(id, in: txn)) } }
        return sum
    }

    /// A full scan keeping the first 100 by (name, id): LMDB has no secondary index here.
    func oldestByName() async throws -> [Int64] {
        var top: [Cat] = []
        top.reserveCapacity(101)
        func before(_ a: Cat, _ b: Cat) -> Bool {
            if a.name.utf8.lexicographicallyPrecedes(b.name.utf8) { return true }
            return a.name.utf8.elementsEqual(b.name.utf8) && a.id < b.id
        }
        try scan { cat in
            guard cat.age > 10 else { return }
            if top.count == 100, let last = top.last, !before(cat, last) { return }
            let position = top.firstIndex { before(cat, $0) } ?? top.count
            top.insert(cat, at: position)
            if top.count > 100 { top.removeLast() }
        }
        return top.map(\.id)
    }

    func count() async throws -> Int {
        try read { txn in
            var stat = MDB_stat()
            try check(mdb_stat(txn, dbi, &stat), "stat")
            return Int(stat.ms_entries)
        }
    }

    // MARK: W8

    /// A string component of a composite key in an order-preserving encoding: its bytes,
    /// 0x00 escaped as 0x00 0xFF, then 0x00 0x00, so tuples compare as `memcmp` of their
    /// keys (a shorter string before a longer one it starts).
    private static func append(_ text: String, to key: inout [UInt8]) {
        for byte in text.utf8 {
            key.append(byte)
            if byte == 0 { key.append(0xFF) }
        }
        key += [0, 0]
    }

    private static func append(_ id: Int64, to key: inout [UInt8]) {
        withUnsafeBytes(of: Self.key(id)) { key.append(contentsOf: $0) }
    }

    /// The key of a pet in the `(species, name, id)` index.
    private static func indexKey(_ pet: BenchPet) -> [UInt8] {
        var key: [UInt8] = []
        append(pet.species, to: &key)
        append(pet.name, to: &key)
        append(pet.id, to: &key)
        return key
    }

    /// Pets stored by id (`birthYear, weight, species length, species, name`) and a
    /// composite index database whose keys are `(species, name, id)` with empty values:
    /// the layout a composite index needs in a key-value store. Written once, into the
    /// populated store.
    func savePets(_ pets: [BenchPet]) async throws {
        try write { txn in
            try check(mdb_dbi_open(txn, "Pet", UInt32(MDB_CREATE), &petDBI), "dbi open")
            try check(mdb_dbi_open(txn, "Pet.species_name", UInt32(MDB_CREATE), &speciesNameIndex), "index open")
        }
        var buffer: [UInt8] = []
        try write { txn in
            for pet in pets {
                buffer.removeAll(keepingCapacity: true)
                withUnsafeBytes(of: Int64(pet.birthYear).littleEndian) { buffer.append(contentsOf: $0) }
                withUnsafeBytes(of: pet.weight.bitPattern.littleEndian) { buffer.append(contentsOf: $0) }
                withUnsafeBytes(of: Int64(pet.species.utf8.count).littleEndian) { buffer.append(contentsOf: $0) }
                buffer += pet.species.utf8
                buffer += pet.name.utf8
                var id = Self.key(pet.id)
                try withUnsafeMutableBytes(of: &id) { idBuffer in
                    try buffer.withUnsafeMutableBytes { valueBuffer in
                        var key = MDB_val(mv_size: 8, mv_data: idBuffer.baseAddress)
                        var value = MDB_val(mv_size: valueBuffer.count, mv_data: valueBuffer.baseAddress)
                        try check(mdb_put(txn, petDBI, &key, &value, UInt32(MDB_NOOVERWRITE)), "put pet")
                    }
                }
                var indexKey = Self.indexKey(pet)
                try indexKey.withUnsafeMutableBytes { keyBuffer in
                    var key = MDB_val(mv_size: keyBuffer.count, mv_data: keyBuffer.baseAddress)
                    var empty = MDB_val(mv_size: 0, mv_data: nil)
                    try check(mdb_put(txn, speciesNameIndex, &key, &empty, UInt32(MDB_NOOVERWRITE)), "put index entry")
                }
            }
        }
    }

    /// The pets of `species` from the index, starting at the first key at or after `start`
    /// (skipping `start` itself), at most `limit`, each looked up by the id its key ends in.
    private func pets(species: String, from start: [UInt8], skippingStart: Bool, limit: Int) throws -> [BenchPet] {
        var prefix: [UInt8] = []
        Self.append(species, to: &prefix)
        return try read { txn in
            var cursor: OpaquePointer?
            try check(mdb_cursor_open(txn, speciesNameIndex, &cursor), "cursor open")
            defer { mdb_cursor_close(cursor) }
            var found: [BenchPet] = []
            found.reserveCapacity(limit)
            var seek = start
            try seek.withUnsafeMutableBytes { seekBuffer in
                var key = MDB_val(mv_size: seekBuffer.count, mv_data: seekBuffer.baseAddress)
                var value = MDB_val()
                var code = mdb_cursor_get(cursor, &key, &value, MDB_SET_RANGE)
                if skippingStart, code == MDB_SUCCESS,
                    UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size).elementsEqual(UnsafeRawBufferPointer(seekBuffer))
                {
                    code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
                }
                while code == MDB_SUCCESS, found.count < limit {
                    let bytes = UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)
                    // memcmp, as C code over LMDB would compare the key's prefix (a
                    // generic elementsEqual over a slice goes byte by byte).
                    guard bytes.count >= prefix.count + 8, let keyStart = bytes.baseAddress,
                        prefix.withUnsafeBytes({ $0.baseAddress.map { memcmp($0, keyStart, prefix.count) == 0 } ?? false })
                    else { break }
                    var id = MDB_val(mv_size: 8, mv_data: key.mv_data.advanced(by: key.mv_size - 8))
                    var record = MDB_val()
                    try check(mdb_get(txn, petDBI, &id, &record), "get pet")
                    found.append(Self.pet(key: id, value: record))
                    code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
                }
            }
            return found
        }
    }

    @inline(__always)
    private static func pet(key: MDB_val, value: MDB_val) -> BenchPet {
        let raw = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
        let keyBits = UInt64(bigEndian: UnsafeRawPointer(key.mv_data).loadUnaligned(as: UInt64.self))
        let birthYear = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: Int64.self))
        let weight = Double(bitPattern: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
        let speciesLength = Int(Int64(littleEndian: raw.loadUnaligned(fromByteOffset: 16, as: Int64.self)))
        let species = String(decoding: UnsafeRawBufferPointer(rebasing: raw[24..<(24 + speciesLength)]), as: UTF8.self)
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: raw[(24 + speciesLength)...]), as: UTF8.self)
        return BenchPet(id: Int64(bitPattern: keyBits ^ (1 << 63)), name: name, species: species, birthYear: Int(birthYear), weight: weight)
    }

    func listPage(species: String, indexed: Bool) async throws -> [BenchPet] {
        guard indexed else { throw BenchError("raw-lmdb keeps the composite index; W8n is for Depot's stores") }
        var start: [UInt8] = []
        Self.append(species, to: &start)
        return try pets(species: species, from: start, skippingStart: false, limit: ListPageFixture.pageSize)
    }

    /// Keyset pages over the index: each page seeks to the key of the last pet of the page
    /// before and reads on from the one after it; one pet more than the page says whether
    /// another follows.
    func walkPages(species: String, pages: Int) async throws -> (pets: [BenchPet], nanoseconds: [UInt64]) {
        var all: [BenchPet] = []
        var nanoseconds: [UInt64] = []
        var last: BenchPet?
        for _ in 0..<pages {
            let start = DispatchTime.now().uptimeNanoseconds
            var seek: [UInt8]
            if let last {
                seek = Self.indexKey(last)
            } else {
                seek = []
                Self.append(species, to: &seek)
            }
            var page = try pets(species: species, from: seek, skippingStart: last != nil, limit: ListPageFixture.pageSize + 1)
            let more = page.count > ListPageFixture.pageSize
            if more { page.removeLast() }
            nanoseconds.append(elapsed(since: start))
            all += page
            guard more else { break }
            last = page.last
        }
        return (all, nanoseconds)
    }

    /// W6 like for like: four reader tasks, every lookup its own read transaction in a hop
    /// onto a concurrent queue (as Depot's reads); the writer's saves hop onto a serial
    /// queue (as Depot's writes), each its own durable commit.
    func concurrentMix(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let reads = HandOff.concurrent("raw-lmdb.readers")
        let writer = HandOff.serial("raw-lmdb.writer")
        let handle = UnsafeLMDBHandle(env: env, dbi: dbi)
        let subject = Unchecked(self)
        return try await asyncMix(
            readers: readers, lookups: lookups, writes: writes,
            save: { cat in try await writer.run { try subject.value.saveOne(cat) } }, openReader: {},
            lookUp: { _, id in try await reads.run { try handle.lookUp(id) } })
    }

    /// W4ph: W4' with each lookup (a read transaction of its own) handed to a thread of a
    /// concurrent queue and awaited, as Depot's reads from an ordinary task.
    func lookUpEachBehindHandOff(_ ids: [Int64]) async throws -> Int64 {
        let reads = HandOff.concurrent("raw-lmdb.readers")
        let handle = UnsafeLMDBHandle(env: env, dbi: dbi)
        var sum: Int64 = 0
        for id in ids { sum &+= try await reads.run { checksum(try handle.lookUp(id)) } }
        return sum
    }

    /// W3h: W3 with each save handed to a serial queue and awaited, as Depot's writes.
    func saveEachBehindHandOff(_ cats: [Cat]) async throws {
        let writer = HandOff.serial("raw-lmdb.writer")
        let subject = Unchecked(self)
        for cat in cats { try await writer.run { try subject.value.saveOne(cat) } }
    }

    /// One save in its own durable commit, as `saveEach` does per cat.
    func saveOne(_ cat: Cat) throws {
        var buffer: [UInt8] = []
        try write { txn in try put(cat, in: txn, buffer: &buffer) }
    }

    /// W6t: the same mix with each reader on a plain thread of its own, no hand-off.
    func concurrentMixOnThreads(readers: Int, lookups: [Int64], writes: [Cat]) async throws -> (latencies: [UInt64], checksum: Int64) {
        let share = lookups.count / readers
        let results = ResultBox(readers)
        let writer = WriterDone()
        let group = DispatchGroup()
        let worker = UnsafeLMDBHandle(env: env, dbi: dbi)
        for reader in 0..<readers {
            let mine = Array(lookups[(reader * share)..<((reader + 1) * share)])
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                results.set(reader, Result { try ReaderLoop.run(mine, until: writer) { try worker.lookUp($0) } })
            }
        }
        try await writeWhileThreadsRead(writer, group) { try await saveEach(writes) }
        return try results.merged()
    }
}

/// The environment handle shared with reader threads in W6.
///
/// `@unchecked Sendable`: an LMDB environment opened with MDB_NOTLS may be used from any
/// thread, and each reader thread opens its own read transactions.
final class UnsafeLMDBHandle: @unchecked Sendable {
    let env: OpaquePointer?
    let dbi: MDB_dbi

    init(env: OpaquePointer?, dbi: MDB_dbi) {
        self.env = env
        self.dbi = dbi
    }

    /// One lookup in a read transaction of its own.
    func lookUp(_ id: Int64) throws -> Cat {
        var txn: OpaquePointer?
        guard mdb_txn_begin(env, nil, UInt32(MDB_RDONLY), &txn) == MDB_SUCCESS else { throw BenchError("raw-lmdb: txn") }
        defer { mdb_txn_abort(txn) }
        var keyBytes = (UInt64(bitPattern: id) ^ (1 << 63)).bigEndian
        let found: Cat? = withUnsafeMutableBytes(of: &keyBytes) { keyBuffer in
            var key = MDB_val(mv_size: 8, mv_data: keyBuffer.baseAddress)
            var value = MDB_val()
            guard mdb_get(txn, dbi, &key, &value) == MDB_SUCCESS else { return nil }
            let raw = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
            let age = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: 0, as: Int64.self))
            let weight = Double(bitPattern: UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
            let name = String(decoding: UnsafeRawBufferPointer(rebasing: raw[16...]), as: UTF8.self)
            return Cat(id: id, name: name, weight: weight, age: Int(age))
        }
        guard let cat = found else { throw BenchError("raw-lmdb: cat \(id) missing") }
        return cat
    }

}
