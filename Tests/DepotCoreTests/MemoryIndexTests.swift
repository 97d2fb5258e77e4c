import DepotCore
import Foundation
import Testing

private typealias Expr = DepotCore.PredicateExpression

/// The memory store's ordered indexes: the byte order of their keys, the plans its reads
/// take, and answers equal to a scan's for random requests.
@Suite("Memory store indexes")
struct MemoryIndexTests {
    /// A deterministic generator, so a failure repeats.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static func randomValue(_ type: AttributeType, _ g: inout Generator) -> Value {
        switch type {
        case .int64: return .int([Int64.min, -1, 0, 1, Int64.max, Int64.random(in: -1000...1000, using: &g)][Int.random(in: 0..<6, using: &g)])
        case .double: return .double([-.infinity, -1.5, -0.0, 0, 2.25, .infinity, .nan, Double.random(in: -10...10, using: &g)][Int.random(in: 0..<8, using: &g)])
        case .string: return .string(["", "a", "a\u{0}", "a\u{0}b", "ab", "b", "é", "\u{0}"][Int.random(in: 0..<8, using: &g)])
        case .data: return .data(Data([[], [0], [0, 0], [0, 255], [1], [255], [255, 0]][Int.random(in: 0..<7, using: &g)]))
        case .bool: return .bool(Bool.random(using: &g))
        case .date: return .date(Date(timeIntervalSinceReferenceDate: Double(Int.random(in: -5...5, using: &g))))
        case .uuid: return .uuid(UUID(uuid: (UInt8.random(in: 0...2, using: &g), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8.random(in: 0...255, using: &g))))
        }
    }

    @Test(arguments: [AttributeType.int64, .double, .string, .data, .bool, .date, .uuid])
    func encodedTuplesSortAsTheirValues(_ type: AttributeType) {
        var g = Generator(state: 7)
        for _ in 0..<2_000 {
            let a = [Bool.random(using: &g) ? .null : Self.randomValue(type, &g), Self.randomValue(.string, &g)]
            let b = [Bool.random(using: &g) ? .null : Self.randomValue(type, &g), Self.randomValue(.string, &g)]
            for descending in [false, true] {
                var ea: [UInt8] = []
                var eb: [UInt8] = []
                for (value, other) in [(a[0], b[0])] {
                    IndexKeyEncoding.append(value, descending: descending, to: &ea)
                    IndexKeyEncoding.append(other, descending: descending, to: &eb)
                }
                IndexKeyEncoding.append(a[1], descending: false, to: &ea)
                IndexKeyEncoding.append(b[1], descending: false, to: &eb)
                var expected = Value.compare(a[0], b[0])
                if descending { expected = -expected }
                if expected == 0 { expected = Value.compare(a[1], b[1]) }
                let actual = ea.lexicographicallyPrecedes(eb) ? -1 : (ea == eb ? 0 : 1)
                #expect(actual == expected, "\(a) vs \(b), descending: \(descending)")
            }
        }
    }

    static let species = ["cat", "dog", "eel", "fox"]

    /// Pets under two names: one with indexes, one without, holding the same rows.
    static func pets(_ store: MemoryStore, count: Int = 400) async throws -> (indexed: EntityHandle, plain: EntityHandle) {
        let attributes = [
            AttributeDescription(name: "id", type: .int64),
            AttributeDescription(name: "species", type: .string),
            AttributeDescription(name: "name", type: .string, isOptional: true),
            AttributeDescription(name: "weight", type: .double, isIndexed: true),
            AttributeDescription(name: "born", type: .int64, isOptional: true),
        ]
        let indexed = try await store.register(EntityDescription(
            name: "Pet", attributes: attributes, primaryKeyIndex: 0,
            indexes: [.index("species", "name"), .index("species", .descending("born")), .index(.descending("name"))]))
        let plain = try await store.register(EntityDescription(name: "PlainPet", attributes: attributes, primaryKeyIndex: 0))
        var g = Generator(state: 42)
        var rows: [Row] = []
        for id in 0..<count {
            var row = Row()
            row.append(.int(Int64(id)))
            row.append(.string(species[Int.random(in: 0..<species.count, using: &g)]))
            row.append(Int.random(in: 0..<10, using: &g) == 0 ? .null : .string("n\(Int.random(in: 0..<60, using: &g))"))
            row.append(.double(Double(Int.random(in: 0..<50, using: &g))))
            row.append(Int.random(in: 0..<8, using: &g) == 0 ? .null : .int(Int64(Int.random(in: 0..<30, using: &g))))
            rows.append(row)
        }
        let written = rows
        try await store.write { transaction in
            for row in written {
                try transaction.insert(row, into: indexed)
                try transaction.insert(row, into: plain)
            }
        }
        return (indexed, plain)
    }

    fileprivate static func query(_ handle: EntityHandle, _ predicate: Expr, sort: [SortKey], limit: Int? = nil, offset: Int = 0) throws -> Query {
        try Query(entity: handle, predicate: predicate, sortKeys: sort, limit: limit, offset: offset)
    }

    /// A bulk insert writes fixed-width keys in place; they must be the very bytes the
    /// appending encoder gives, or a bulk-saved entry would sort apart from a single one.
    @Test(arguments: [AttributeType.int64, .double, .bool, .date, .uuid])
    func keysWrittenInPlaceEqualAppendedKeys(_ type: AttributeType) {
        var g = Generator(state: 11)
        for _ in 0..<2_000 {
            let tagged = Bool.random(using: &g)
            let descending = Bool.random(using: &g)
            let value = tagged && Bool.random(using: &g) ? Value.null : Self.randomValue(type, &g)
            var appended: [UInt8] = []
            IndexKeyEncoding.append(value, descending: descending, tagged: tagged, to: &appended)
            var written = [UInt8](repeating: 0xAA, count: 32)
            let width = written.withUnsafeMutableBytes { IndexKeyEncoding.write(value, descending: descending, tagged: tagged, to: $0.baseAddress!) }
            #expect(width == appended.count, "\(value) descending \(descending) tagged \(tagged)")
            #expect(Array(written.prefix(width ?? 0)) == appended, "\(value) descending \(descending) tagged \(tagged)")
        }
        var none = [UInt8](repeating: 0, count: 8)
        #expect(none.withUnsafeMutableBytes { IndexKeyEncoding.write(.string("a"), descending: false, tagged: true, to: $0.baseAddress!) } == nil)
    }

    @Test func aListPageReadsItsIndexRangeInOrder() async throws {
        let store = MemoryStore()
        let (pets, _) = try await Self.pets(store)
        let page = try Self.query(pets, Expr.compare(attribute: "species", .equal, .string("cat")), sort: [SortKey("name")], limit: 20)
        let plan = try await store.read { try $0.explain(page, analyze: true) }
        #expect(plan.access == .index([.init("species"), .init("name")]))
        #expect(!plan.sortsAfterwards && !plan.filtersAfterwards)
        #expect(plan.ranges == [#"species == "cat""#])
        #expect(plan.actualRows == 20)
        #expect((plan.estimatedRows ?? 0) > 20)

        // A range on the next component, and IN on the first with the sort on both.
        let range = try Self.query(pets, Expr.and([.compare(attribute: "species", .equal, .string("dog")), .compare(attribute: "name", .greater, .string("n3"))]), sort: [SortKey("name")])
        let rangePlan = try await store.read { try $0.explain(range, analyze: false) }
        #expect(rangePlan.access == .index([.init("species"), .init("name")]) && !rangePlan.sortsAfterwards)
        let oneOf = try Self.query(pets, Expr.oneOf(attribute: "species", [.string("eel"), .string("cat")]), sort: [SortKey("species"), SortKey("name")], limit: 5)
        let oneOfPlan = try await store.read { try $0.explain(oneOf, analyze: false) }
        #expect(oneOfPlan.access == .index([.init("species"), .init("name")]) && !oneOfPlan.sortsAfterwards && oneOfPlan.ranges.count == 2)

        // A descending component serves a descending sort; nothing fits a sort by weight
        // alone but its single-attribute index.
        let youngest = try Self.query(pets, Expr.compare(attribute: "species", .equal, .string("fox")), sort: [SortKey("born", ascending: false)], limit: 3)
        #expect(try await store.read { try $0.explain(youngest, analyze: false) }.access == .index([.init("species"), .init("born", descending: true)]))
        let heavy = try Self.query(pets, Expr.compare(attribute: "weight", .greaterOrEqual, .double(45)), sort: [])
        #expect(try await store.read { try $0.explain(heavy, analyze: false) }.access == .index([.init("weight")]))
        // A condition no index holds is a scan.
        let scan = try Self.query(pets, Expr.contains(attribute: "name", "3"), sort: [])
        #expect(try await store.read { try $0.explain(scan, analyze: false) }.access == .scan)
        await store.close()
    }

    @Test func aCursorPageSeeksIntoTheIndex() async throws {
        let store = MemoryStore()
        let (pets, _) = try await Self.pets(store)
        // The condition a page cursor adds: after (name "n30", id 100) in (name, id) order.
        let after = Expr.or([
            .compare(attribute: "name", .greater, .string("n30")),
            .and([.compare(attribute: "name", .equal, .string("n30")), .compare(attribute: "id", .greater, .int(100))]),
        ])
        let page = try Self.query(pets, Expr.and([.compare(attribute: "species", .equal, .string("cat")), after]), sort: [SortKey("name")], limit: 20)
        let plan = try await store.read { try $0.explain(page, analyze: true) }
        #expect(plan.access == .index([.init("species"), .init("name")]))
        #expect(!plan.sortsAfterwards && !plan.filtersAfterwards)
        #expect(plan.actualRows == 20)
        await store.close()
    }

    @Test func oneTransactionInsertsUpdatesDeletesAndReadsItsOwnIndexEntries() async throws {
        let store = MemoryStore()
        let (pets, _) = try await Self.pets(store, count: 50)
        let seen = try await store.write { transaction in
            for id in 1_000..<1_300 {
                var row = Row()
                row.append(.int(Int64(id)))
                row.append(.string("yak"))
                row.append(.string("y\(id % 17)"))
                row.append(.double(1))
                row.append(.null)
                try transaction.insert(row, into: pets)
                if id % 3 == 0 {
                    row[value: 1] = .string("zebu")
                    try transaction.update(row, in: pets)
                }
                if id % 5 == 0 { _ = try transaction.delete(key: .int(Int64(id)), from: pets) }
            }
            var names: [Value] = []
            try transaction.fetchRows(Self.query(pets, .compare(attribute: "species", .equal, .string("zebu")), sort: [SortKey("name")])) {
                names.append($0[value: 2])
            }
            return names.count
        }
        #expect(seen == (1_000..<1_300).filter { $0 % 3 == 0 && $0 % 5 != 0 }.count)
        try store.checkInvariants()
        await store.close()
    }

    @Test func countsComeFromTheIndex() async throws {
        let store = MemoryStore()
        let (pets, plain) = try await Self.pets(store)
        for species in Self.species {
            let predicate = Expr.compare(attribute: "species", .equal, .string(species))
            let counted = try await store.read { try $0.count(Self.query(pets, predicate, sort: [])) }
            let scanned = try await store.read { try $0.count(Self.query(plain, predicate, sort: [])) }
            #expect(counted == scanned)
        }
        await store.close()
    }

    fileprivate static func randomPredicate(_ g: inout Generator, depth: Int = 0) -> Expr {
        func name() -> Value { Int.random(in: 0..<8, using: &g) == 0 ? .null : .string("n\(Int.random(in: 0..<60, using: &g))") }
        let ops: [ComparisonOperator] = [.equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual]
        switch Int.random(in: 0..<(depth < 2 ? 10 : 7), using: &g) {
        case 0: return .compare(attribute: "species", .equal, .string(species[Int.random(in: 0..<4, using: &g)]))
        case 1: return .compare(attribute: "name", ops[Int.random(in: 0..<6, using: &g)], name())
        case 2: return .compare(attribute: "born", ops[Int.random(in: 0..<6, using: &g)], .int(Int64(Int.random(in: 0..<30, using: &g))))
        case 3: return .oneOf(attribute: "species", (0..<Int.random(in: 1...3, using: &g)).map { _ in .string(species[Int.random(in: 0..<4, using: &g)]) })
        case 4: return .isNil(attribute: Bool.random(using: &g) ? "name" : "born")
        case 5: return .hasPrefix(attribute: "name", "n\(Int.random(in: 0..<7, using: &g))")
        case 6: return .compare(attribute: "weight", ops[Int.random(in: 0..<6, using: &g)], .double(Double(Int.random(in: 0..<50, using: &g))))
        case 7: return .and((0..<Int.random(in: 1...3, using: &g)).map { _ in randomPredicate(&g, depth: depth + 1) })
        case 8: return .or((0..<Int.random(in: 1...3, using: &g)).map { _ in randomPredicate(&g, depth: depth + 1) })
        default: return .not(randomPredicate(&g, depth: depth + 1))
        }
    }

    @Test func answersEqualAScansForRandomRequests() async throws {
        let store = MemoryStore()
        let (pets, plain) = try await Self.pets(store)
        var g = Generator(state: 2026)
        let sorts: [[SortKey]] = [[], [SortKey("name")], [SortKey("species"), SortKey("name")], [SortKey("born", ascending: false)], [SortKey("name", ascending: false)], [SortKey("weight")]]
        var usedIndex = 0
        for _ in 0..<600 {
            let predicate = Self.randomPredicate(&g)
            let sort = sorts[Int.random(in: 0..<sorts.count, using: &g)]
            let limit: Int? = Bool.random(using: &g) ? Int.random(in: 0...25, using: &g) : nil
            let offset = Int.random(in: 0...3, using: &g)
            let indexed = try Self.query(pets, predicate, sort: sort, limit: limit, offset: offset)
            let scanned = try Self.query(plain, predicate, sort: sort, limit: limit, offset: offset)
            let (a, b, ca, cb, plan) = try await store.read { transaction in
                var a: [Row] = []
                var b: [Row] = []
                try transaction.fetchRows(indexed) { a.append($0) }
                try transaction.fetchRows(scanned) { b.append($0) }
                return (a, b, try transaction.count(indexed), try transaction.count(scanned), try transaction.explain(indexed, analyze: false))
            }
            #expect(a == b, "\(predicate) sorted by \(sort), limit \(String(describing: limit)), offset \(offset): \(plan)")
            #expect(ca == cb, "count of \(predicate): \(plan)")
            if plan.usesIndex { usedIndex += 1 }
        }
        // The cases exercise the index plans, not only scans.
        #expect(usedIndex > 150)
        await store.close()
    }

    /// The radix sort of a bulk save's fixed-width keys gives the byte order, equal keys in
    /// queue order, whatever positions the keys share, with each key's trailing bytes
    /// moved with it; told that the records come ordered by a suffix of the key, it gives
    /// the same order when they do, and does not trust it when they do not.
    @Test(arguments: [1, 3, 8, 16, 25])
    func radixSortGivesTheKeysByteOrder(_ width: Int) {
        var g = Generator(state: UInt64(width))
        let stride = (width + 7) / 8 * 8 + 8
        for count in [0, 1, 2, 7, 300] {
            for suffixOrdered in [false, true] {
                // Some positions constant, some with few values, some with any.
                var keys: [[UInt8]] = (0..<count).map { _ in
                    (0..<width).map { position in
                        switch position % 3 {
                        case 0: 0x80
                        case 1: UInt8.random(in: 0...2, using: &g)
                        default: UInt8.random(in: 0...255, using: &g)
                        }
                    }
                }
                let sortedFrom = width / 2
                if suffixOrdered {
                    // The last half of the key ascending in queue order, as primary keys are.
                    let suffixes = keys.map { $0[sortedFrom...] }.sorted { $0.lexicographicallyPrecedes($1) }
                    for k in keys.indices { keys[k].replaceSubrange(sortedFrom..., with: suffixes[k]) }
                }
                let records = UnsafeMutableRawPointer.allocate(byteCount: max(1, stride * count * 2), alignment: 8)
                defer { records.deallocate() }
                records.initializeMemory(as: UInt8.self, repeating: 0, count: stride * count * 2)
                for (k, key) in keys.enumerated() {
                    for (i, byte) in key.enumerated() { records.storeBytes(of: byte, toByteOffset: k * stride + i, as: UInt8.self) }
                    records.storeBytes(of: k, toByteOffset: k * stride + stride - 8, as: Int.self)
                }
                let sorted = IndexKeyEncoding.radixSort(
                    records, scratch: records + stride * count, recordStride: stride,
                    keyWidth: width, count: count, sortedFrom: sortedFrom)
                let order = (0..<count).map { sorted.load(fromByteOffset: $0 * stride + stride - 8, as: Int.self) }
                let sortedKeys = (0..<count).map { j in (0..<width).map { sorted.load(fromByteOffset: j * stride + $0, as: UInt8.self) } }
                let expected = (0..<count).sorted { a, b in
                    keys[a].lexicographicallyPrecedes(keys[b]) || (keys[a] == keys[b] && a < b)
                }
                #expect(order == expected, "width \(width), \(count) keys, suffix ordered: \(suffixOrdered)")
                #expect(sortedKeys == expected.map { keys[$0] }, "width \(width), \(count) keys, suffix ordered: \(suffixOrdered)")
            }
        }
    }

    /// Bulk saves into indexes whose keys have fixed widths but hold nils (a tag byte and
    /// no value, so shorter keys, padded to the slot), inline or not, ascending and not.
    @Test func bulkSavesKeepFixedWidthIndexesWithNilsInOrder() async throws {
        let store = MemoryStore()
        let attributes = [
            AttributeDescription(name: "id", type: .uuid),
            AttributeDescription(name: "seq", type: .int64),
            AttributeDescription(name: "rank", type: .int64, isOptional: true),
            AttributeDescription(name: "flag", type: .bool, isOptional: true),
            AttributeDescription(name: "at", type: .date, isOptional: true),
        ]
        let byUUID = try await store.register(EntityDescription(
            name: "Mark", attributes: attributes, primaryKeyIndex: 0,
            indexes: [.index(.descending("rank")), .index("flag"), .index("flag", .descending("at"))]))
        let bySeq = try await store.register(EntityDescription(
            name: "SeqMark", attributes: attributes, primaryKeyIndex: 1,
            indexes: [.index(.descending("rank")), .index("flag"), .index(.descending("flag"), "rank")]))
        var g = Generator(state: 7)
        func rows(_ ids: some Sequence<Int>) -> [Row] {
            ids.map { id in
                var row = Row()
                row.append(.uuid(UUID()))
                row.append(.int(Int64(id)))
                row.append(Int.random(in: 0..<4, using: &g) == 0 ? .null : .int(Int64.random(in: -3...3, using: &g)))
                row.append(Int.random(in: 0..<4, using: &g) == 0 ? .null : .bool(Bool.random(using: &g)))
                row.append(Int.random(in: 0..<4, using: &g) == 0 ? .null : .date(Date(timeIntervalSinceReferenceDate: Double(Int.random(in: -2...2, using: &g)))))
                return row
            }
        }
        // Into empty indexes, then entries that sort among the existing ones.
        for batch in [rows(0..<500), rows((500..<800).reversed()), rows(-300 ..< -100)] {
            try await store.write { transaction in
                for row in batch {
                    try transaction.insert(row, into: byUUID)
                    try transaction.insert(row, into: bySeq)
                }
            }
            try store.checkInvariants()
        }
        // A read in an index's order gives the order a sort gives.
        for handle in [byUUID, bySeq] {
            let sort = [SortKey("rank", ascending: false), SortKey("seq")]
            let query = try Self.query(handle, .constant(true), sort: sort)
            let (read, scanned) = try await store.read { transaction in
                var read: [Value] = []
                try transaction.fetchRows(query) { read.append($0[value: 1]) }
                var all: [Row] = []
                try transaction.fetchRows(Self.query(handle, .constant(true), sort: [SortKey("seq")])) { all.append($0) }
                // Descending puts nil last.
                let scanned = all.sorted {
                    let order = Value.compare($0[value: 2], $1[value: 2])
                    return order > 0 || (order == 0 && Value.compare($0[value: 1], $1[value: 1]) < 0)
                }.map { $0[value: 1] }
                return (read, scanned)
            }
            #expect(read == scanned)
        }
        await store.close()
    }

    @Test func uniqueIndexesRefuseDuplicatesAndAMigrationBuildsIndexes() async throws {
        let store = MemoryStore()
        let attributes = [
            AttributeDescription(name: "id", type: .int64),
            AttributeDescription(name: "owner", type: .int64, isOptional: true),
            AttributeDescription(name: "name", type: .string),
        ]
        let first = try await store.register(EntityDescription(name: "Tag", attributes: attributes, primaryKeyIndex: 0))
        @Sendable func row(_ id: Int64, _ owner: Int64?, _ name: String) -> Row {
            var row = Row()
            row.append(.int(id))
            row.append(owner.map(Value.int) ?? .null)
            row.append(.string(name))
            return row
        }
        try await store.write { try $0.insert(row(1, 1, "a"), into: first); try $0.insert(row(2, 1, "a"), into: first) }
        // Existing duplicates refuse a new unique index, and nothing changes.
        let unique = EntityDescription(name: "Tag", attributes: attributes, primaryKeyIndex: 0, indexes: [.unique("owner", "name")])
        await #expect { _ = try await store.register(unique) } throws: { ($0 as? DepotError)?.code == .schemaMismatch }
        try await store.write { _ = try $0.delete(key: .int(2), from: first) }
        let tags = try await store.register(unique)
        try await store.write { try $0.insert(row(3, 2, "a"), into: tags); try $0.insert(row(4, nil, "a"), into: tags); try $0.insert(row(5, nil, "a"), into: tags) }
        await #expect { try await store.write { try $0.insert(row(6, 1, "a"), into: tags) } } throws: { ($0 as? DepotError)?.code == .duplicateKey }
        await #expect { try await store.write { try $0.update(row(3, 1, "a"), in: tags) } } throws: { ($0 as? DepotError)?.code == .duplicateKey }
        // Updating a record to its own values is no conflict.
        try await store.write { try $0.update(row(1, 1, "a"), in: tags) }
        try store.checkInvariants()
        await store.close()
    }
}
