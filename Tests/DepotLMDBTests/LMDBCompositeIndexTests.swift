import CLMDB
import DepotCore
import DepotTesting
import Foundation
import Logging
import Testing

import DepotLMDB

/// Pets with composite indexes: a list page's `(species, name)`, a descending optional
/// component, and a second index with the same trailing attribute so that the planner has
/// to choose.
struct IndexedAnimal: StoredObject, Hashable {
    var id: Int64
    var species: String
    var name: String
    var age: Int?
    var owner: Int64?

    static let entity = Entity<IndexedAnimal>(
        "Animal", primaryKey: \.id,
        indexes: [
            .index(\.species, \.name), .index(.ascending(\.species), .descending(\.age)), .index(\.age, \.name),
            .index(.descending(\.name)),
        ]
    ) {
        Attribute("id", \.id)
        Attribute("species", \.species)
        Attribute("name", \.name)
        Attribute("age", \.age)
        Attribute("owner", \.owner)
    }

    init(id: Int64, species: String, name: String, age: Int?, owner: Int64? = nil) {
        (self.id, self.species, self.name, self.age, self.owner) = (id, species, name, age, owner)
    }

    init(row: RecordReader<Self>) throws {
        (id, species, name, age, owner) = (try row[\.id], try row[\.species], try row[\.name], try row[\.age], try row[\.owner])
    }

    static let species = ["cat", "dog", "eel", "fox", "", "a\u{0}b", "a"]

    static func generate(_ n: Int, seed: UInt64 = 7) -> [IndexedAnimal] {
        var g = SplitMix64(seed: seed)
        return (0..<n).map { i in
            let r = g.next()
            let name = ["Tom", "Rex", "Ada", "tom", "", "Zed\u{0}", "Zed", "Bo"][Int(r % 8)] + String(r / 8 % 5)
            return IndexedAnimal(
                id: Int64(i) * 3 - 200, species: species[Int(r / 64 % UInt64(species.count))], name: name,
                age: r % 6 == 0 ? nil : Int(r / 1024 % 12) - 2)
        }
    }
}

/// The same entity as stored before its indexes were declared.
struct PlainAnimal: StoredObject, Hashable {
    var id: Int64
    var species: String
    var name: String
    var age: Int?
    var owner: Int64?

    static let entity = Entity<PlainAnimal>("Animal", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("species", \.species)
        Attribute("name", \.name)
        Attribute("age", \.age)
        Attribute("owner", \.owner)
    }

    init(_ a: IndexedAnimal) { (id, species, name, age, owner) = (a.id, a.species, a.name, a.age, a.owner) }

    init(row: RecordReader<Self>) throws {
        (id, species, name, age, owner) = (try row[\.id], try row[\.species], try row[\.name], try row[\.age], try row[\.owner])
    }
}

/// The entity with two indexes that lead with different attributes.
struct TwoIndexAnimal: StoredObject, Hashable {
    var id: Int64
    var species: String
    var name: String
    var age: Int?
    var owner: Int64?

    static let entity = Entity<TwoIndexAnimal>("Animal", primaryKey: \.id, indexes: [.index(\.species, \.name), .index(\.age, \.name)]) {
        Attribute("id", \.id)
        Attribute("species", \.species)
        Attribute("name", \.name)
        Attribute("age", \.age)
        Attribute("owner", \.owner)
    }

    init(_ a: IndexedAnimal) { (id, species, name, age, owner) = (a.id, a.species, a.name, a.age, a.owner) }

    init(row: RecordReader<Self>) throws {
        (id, species, name, age, owner) = (try row[\.id], try row[\.species], try row[\.name], try row[\.age], try row[\.owner])
    }
}

/// The entity with a unique composite index: one pet per owner and name.
struct UniqueAnimal: StoredObject, Hashable {
    var id: Int64
    var species: String
    var name: String
    var age: Int?
    var owner: Int64?

    static let entity = Entity<UniqueAnimal>("Animal", primaryKey: \.id, indexes: [.unique(\.owner, \.name)]) {
        Attribute("id", \.id)
        Attribute("species", \.species)
        Attribute("name", \.name)
        Attribute("age", \.age)
        Attribute("owner", \.owner)
    }

    init(id: Int64, name: String, owner: Int64?) { (self.id, species, self.name, age, self.owner) = (id, "cat", name, nil, owner) }
    init(_ a: IndexedAnimal) { (id, species, name, age, owner) = (a.id, a.species, a.name, a.age, a.owner) }

    init(row: RecordReader<Self>) throws {
        (id, species, name, age, owner) = (try row[\.id], try row[\.species], try row[\.name], try row[\.age], try row[\.owner])
    }
}

/// The messages a store logs.
final class LoggedMessages: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var logged: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
        lock.lock()
        logged.append("\(event.message)")
        lock.unlock()
    }
    var messages: [String] {
        lock.lock()
        defer { lock.unlock() }
        return logged
    }
    var storeLog: StoreLog {
        var logger = Logger(label: "test.depot") { _ in self }
        logger.logLevel = .info
        return StoreLog(logger: logger)
    }
}

@Suite("LMDB composite indexes")
struct LMDBCompositeIndexTests {
    typealias Animals = Controller<IndexedAnimal, IndexedAnimal>

    static func plan(_ store: LMDBStore, _ animals: Animals, _ request: Request<IndexedAnimal>, order: Bool = true) async throws -> Plan? {
        let query = try request.resolved(for: try await animals.registeredEntity())
        return try await store.read { transaction in
            guard let t = transaction as? LMDBTransaction else { return nil }
            return try t.plan(query, try t.handles(for: query.handle), needsOrder: order)
        }
    }

    static func components(_ plan: QueryPlan) -> [String]? {
        guard case .index(let list) = plan.access else { return nil }
        return list.map { $0.attribute + ($0.isDescending ? " DESC" : "") }
    }

    @Test("list requests read a composite index in order and stop at the limit")
    func plansUseTheIndex() async throws {
        let animals = IndexedAnimal.generate(3_000)
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            try await lmdb.save(animals)

            // Equality prefix + sort on the next component.
            let page = Request<IndexedAnimal>(\.species == "cat").sorted(by: \.name).limit(20)
            let plan = try await lmdb.explain(page, analyze: true)
            #expect(Self.components(plan) == ["species", "name"], "\(plan)")
            #expect(!plan.sortsAfterwards && !plan.filtersAfterwards)
            #expect(plan.actualRows == 20 && plan.estimatedRows == 20)
            #expect(plan.ranges == ["species == \"cat\""])

            // Equality + a range on the next component.
            let ranged = try await lmdb.explain(Request(\.species == "dog" && \.name >= "Rex" && \.name < "Zed").sorted(by: \.name).limit(5))
            #expect(Self.components(ranged) == ["species", "name"] && !ranged.sortsAfterwards && !ranged.filtersAfterwards, "\(ranged)")
            #expect(ranged.ranges == ["species == \"dog\" AND name >= \"Rex\" AND name < \"Zed\""], "\(ranged)")

            // IN on the first component, sorted by the index's components.
            let listed = try await lmdb.explain(
                Request(.in(\.species, ["eel", "cat"])).sorted(by: \.species).sorted(by: \.name).limit(30), analyze: true)
            #expect(Self.components(listed) == ["species", "name"] && !listed.sortsAfterwards && !listed.filtersAfterwards, "\(listed)")
            #expect(listed.actualRows == 30 && listed.ranges == ["species == \"cat\"", "species == \"eel\""], "\(listed)")
            // IN sorted by the second component only: the ranges are read, then sorted.
            let unmerged = try await lmdb.explain(Request(.in(\.species, ["eel", "zebra"])).sorted(by: \.name).limit(30))
            #expect(unmerged.usesIndex && unmerged.sortsAfterwards, "\(unmerged)")

            // A descending component, nulls last, read in order.
            let oldest = try await lmdb.explain(Request(\.species == "fox").sorted(by: \.age, ascending: false).limit(10))
            #expect(Self.components(oldest) == ["species", "age DESC"] && !oldest.sortsAfterwards, "\(oldest)")
            // The whole order reversed: read backwards.
            let youngest = try await lmdb.explain(
                Request(\.species == "fox").sorted(by: \.age).sorted(by: \.id, ascending: false).limit(10))
            #expect(Self.components(youngest) == ["species", "age DESC"] && !youngest.sortsAfterwards, "\(youngest)")

            // A range on a descending first component, read in its order.
            let below = try await lmdb.explain(Request(\.name < "Rex").sorted(by: \.name, ascending: false).limit(5), analyze: true)
            #expect(Self.components(below) == ["name DESC"] && !below.sortsAfterwards && below.actualRows == 5, "\(below)")
            let belowRows = try await lmdb.fetchAll(Request(\.name < "Rex").sorted(by: \.name, ascending: false).limit(5))
            let belowReference = animals.filter { $0.name < "Rex" }.sorted { ($1.name, $0.id) < ($0.name, $1.id) }.prefix(5)
            #expect(belowRows.map(\.id) == belowReference.map(\.id))
            let above = Request<IndexedAnimal>(\.name >= "Rex").sorted(by: \.name, ascending: false).limit(5)
            #expect(Self.components(try await lmdb.explain(above)) == ["name DESC"])
            let aboveReference = animals.filter { $0.name >= "Rex" }.sorted { ($1.name, $0.id) < ($0.name, $1.id) }.prefix(5)
            #expect(try await lmdb.fetchAll(above).map(\.id) == aboveReference.map(\.id))

            // A count uses the index and reads no record.
            let counted = try await Self.plan(store, lmdb, Request(\.species == "cat" && \.name == "Tom1"), order: false)
            if case .composite(let index)? = counted?.source {
                #expect(index.description.summary == "species, name" && counted?.exact == true)
            } else {
                Issue.record("count plan: \(String(describing: counted))")
            }
            let reference = animals.filter { $0.species == "cat" && $0.name == "Tom1" }.count
            #expect(try await lmdb.count(Request(\.species == "cat" && \.name == "Tom1")) == reference)

            // Without a matching index the plan says so.
            let scan = try await lmdb.explain(Request(\.owner == 3).sorted(by: \.age))
            #expect(scan.sortsAfterwards && scan.filtersAfterwards && !scan.usesIndex, "\(scan)")
        }
    }

    @Test("where several indexes fit, the estimate chooses")
    func estimateChooses() async throws {
        var animals: [TwoIndexAnimal] = []
        for i in 0..<1_000 {
            // Many cats, few eels; age 7 is rare, age 1 common.
            let species = i % 100 == 0 ? "eel" : "cat"
            let age = i % 50 == 1 ? 7 : 1
            animals.append(TwoIndexAnimal(IndexedAnimal(id: Int64(i), species: species, name: "n\(i % 37)", age: age)))
        }
        try await withStore { store, _ in
            let lmdb = Controller<TwoIndexAnimal, TwoIndexAnimal>(store: store)
            try await lmdb.save(animals)
            // Both (species, name) and (age, name) fix one component; the rare value wins,
            // whichever index was declared first.
            let rareAge = try await lmdb.explain(Request(\.species == "cat" && \.age == 7).sorted(by: \.name), analyze: true)
            #expect(Self.components(rareAge) == ["age", "name"] && rareAge.actualRows == 20, "\(rareAge)")
            let rareSpecies = try await lmdb.explain(Request(\.species == "eel" && \.age == 1).sorted(by: \.name), analyze: true)
            #expect(Self.components(rareSpecies) == ["species", "name"] && rareSpecies.actualRows == 10, "\(rareSpecies)")
            let memory = Controller<TwoIndexAnimal, TwoIndexAnimal>(store: MemoryStore())
            try await memory.save(animals)
            for request in [Request<TwoIndexAnimal>(\.species == "cat" && \.age == 7).sorted(by: \.name), Request(\.species == "eel" && \.age == 1).sorted(by: \.name)] {
                #expect(try await lmdb.fetchAll(request) == memory.fetchAll(request))
            }
        }
    }

    @Test("cursor pages seek into the index")
    func pagesSeek() async throws {
        let animals = IndexedAnimal.generate(2_000, seed: 11)
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            let memory = Animals(store: MemoryStore())
            try await lmdb.save(animals)
            try await memory.save(animals)
            for request in [
                Request<IndexedAnimal>(\.species == "cat").sorted(by: \.name),
                Request(\.species == "fox").sorted(by: \.age, ascending: false),
                Request(\.species == "dog").sorted(by: \.age).sorted(by: \.id, ascending: false),
                Request(\.species == "eel" && \.name > "Bo").sorted(by: \.species).sorted(by: \.name),
            ] {
                var cursor: PageCursor?
                var pages = 0
                repeat {
                    let a = try await lmdb.results(request).page(size: 7, after: cursor)
                    let b = try await memory.results(request).page(size: 7, after: cursor)
                    #expect(a.items == b.items, "page \(pages) of \(request)")
                    cursor = a.next
                    pages += 1
                } while cursor != nil && pages < 500
                #expect(pages > 3)
            }

            // The keyset condition a page adds becomes the start of the range.
            let entity = try await lmdb.registeredEntity()
            let cat = animals.filter { $0.species == "cat" }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
            let middle = cat[cat.count / 2]
            let keyset: DepotCore.PredicateExpression = .or([
                .compare(attribute: "name", .greater, .string(middle.name)),
                .and([.compare(attribute: "name", .equal, .string(middle.name)), .compare(attribute: "id", .greater, .int(middle.id))]),
            ])
            let query = try Query(
                entity: entity, predicate: DepotCore.PredicateExpression.compare(attribute: "species", .equal, .string("cat")).and(keyset),
                sortKeys: [SortKey("name")], limit: 8)
            let plan = try await store.read { transaction in
                try (transaction as? LMDBTransaction).map { t in try t.plan(query, try t.handles(for: entity), needsOrder: true) }
            }
            #expect(plan?.keyset == true && plan?.ordered == true && plan?.exact == true, "\(String(describing: plan))")
            let explained = try await store.read { try $0.explain(query, analyze: true) }
            // Nothing before the cursor is read: the page and the one record after it.
            #expect(explained.actualRows == 8, "\(explained)")
            #expect(explained.ranges == ["species == \"cat\" AND (name, id) after (\(Value.string(middle.name).debugLiteral), \(middle.id))"], "\(explained)")
            let rows = try await store.read { transaction -> [Int64] in
                var ids: [Int64] = []
                try transaction.fetch(query, reserve: { _ in }) { reader in
                    if case .int(let id) = try reader.value(entity.entity.primaryKeyIndex) { ids.append(id) }
                }
                return ids
            }
            #expect(rows == cat.drop(while: { ($0.name, $0.id) <= (middle.name, middle.id) }).prefix(8).map(\.id))
        }
    }

    /// Rounds per seed (DEPOT_INDEX_ROUNDS), fewer under Thread Sanitizer: one request after
    /// another, nothing concurrent for it to check (``TestScale``).
    static let randomRounds = TestScale.size("DEPOT_INDEX_ROUNDS", ci: 400, tsan: 50)
    /// Pages per cursor walk: enough to cross many page boundaries and to reach the end of
    /// most answers; each page of the memory reference filters and sorts every record.
    static let pagesPerWalk = 60

    @Test("random requests answer as the memory store does", arguments: [1, 2, 3])
    func randomRequests(seed: UInt64) async throws {
        let animals = IndexedAnimal.generate(1_500, seed: seed)
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            let memory = Animals(store: MemoryStore())
            try await lmdb.save(animals)
            try await memory.save(animals)
            var g = SplitMix64(seed: seed &* 31)
            func pick<T>(_ list: [T]) -> T { list[Int(g.next() % UInt64(list.count))] }
            let names = ["Tom1", "Rex0", "", "Zed\u{0}2", "Zed3", "Bo", "tom", "A"]
            for round in 0..<Self.randomRounds {
                var conditions: [Condition<IndexedAnimal>] = []
                switch g.next() % 4 {
                case 0: conditions.append(\.species == pick(IndexedAnimal.species))
                case 1: conditions.append(.in(\.species, [pick(IndexedAnimal.species), pick(IndexedAnimal.species)]))
                case 2: conditions.append(\.age == pick([nil, 0, 3, -2, 9] as [Int?]))
                default: break
                }
                switch g.next() % 7 {
                case 0: conditions.append(\.name > pick(names))
                case 1: conditions.append(\.name <= pick(names))
                case 2: conditions.append(.hasPrefix(\.name, pick(["Z", "Zed", "t", "", "Zed\u{0}"])))
                case 3: conditions.append(\.age < pick([0, 5, 20]))
                case 4: conditions.append(\.age >= pick([0, 5, -3]))
                case 5: conditions.append(.in(\.age, [pick([1, 2, 3]), nil]))
                default: break
                }
                if g.next() % 4 == 0 { conditions.append(\.name != "Tom1") }
                let condition = conditions.reduce(Condition<IndexedAnimal>.all) { $0 && $1 }
                var request = Request(condition)
                switch g.next() % 7 {
                case 0: request = request.sorted(by: \.name)
                case 1: request = request.sorted(by: \.species).sorted(by: \.name, ascending: g.next() % 2 == 0)
                case 2: request = request.sorted(by: \.age, ascending: false)
                case 3: request = request.sorted(by: \.age).sorted(by: \.id, ascending: false)
                case 4: request = request.sorted(by: \.species).sorted(by: \.age, ascending: false)
                case 5: request = request.sorted(by: \.name, ascending: false).sorted(by: \.id, ascending: false)
                default: break
                }
                if g.next() % 2 == 0 { request = request.limit(Int(g.next() % 25)) }
                if g.next() % 3 == 0 { request = request.offset(Int(g.next() % 30)) }
                let got = try await lmdb.fetchAll(request).map(\.id)
                let expected = try await memory.fetchAll(request).map(\.id)
                #expect(got == expected, "round \(round): \(request)")
                #expect(try await lmdb.count(request) == memory.count(request), "count, round \(round): \(request)")
                if round % 8 == 0 {
                    // Walked in cursor pages, which seek into the index where it fits.
                    let size = 1 + Int(g.next() % 9)
                    var cursor: PageCursor?
                    var pages = 0
                    repeat {
                        let a = try await lmdb.results(request).page(size: size, after: cursor)
                        let b = try await memory.results(request).page(size: size, after: cursor)
                        #expect(a.items.map(\.id) == b.items.map(\.id), "page \(pages), round \(round): \(request)")
                        cursor = a.next
                        pages += 1
                    } while cursor != nil && pages < Self.pagesPerWalk
                }
                let plan = try await lmdb.explain(request, analyze: true)
                #expect((plan.actualRows ?? 0) >= (plan.sortsAfterwards || plan.filtersAfterwards ? got.count : 0), "\(plan)")
            }
            // The same after updates and deletes moved entries.
            let changed = animals.prefix(400).map { a in
                IndexedAnimal(id: a.id, species: a.species == "cat" ? "dog" : a.species, name: a.name + "x", age: a.age.map { -$0 })
            }
            try await lmdb.save(changed)
            try await memory.save(changed)
            #expect(try await lmdb.deleteAll(where: \.species == "eel" && \.age > 3) == memory.deleteAll(where: \.species == "eel" && \.age > 3))
            for request in [
                Request<IndexedAnimal>(\.species == "dog").sorted(by: \.name), Request(\.species == "eel").sorted(by: \.age, ascending: false),
                Request(\.age == 2).sorted(by: \.name).limit(9),
            ] {
                #expect(try await lmdb.fetchAll(request) == memory.fetchAll(request), "\(request)")
            }
            #expect(try await store.checkIntegrity() == [])
        }
    }

    @Test("a unique composite index refuses a second record with the same values")
    func uniqueRefusesDuplicates() async throws {
        try await withStore { store, _ in
            let pets = Controller<UniqueAnimal, UniqueAnimal>(store: store)
            try await pets.save([UniqueAnimal(id: 1, name: "Tom", owner: 1), UniqueAnimal(id: 2, name: "Tom", owner: 2)])
            await #expect { try await pets.save(UniqueAnimal(id: 3, name: "Tom", owner: 1)) } throws: { error in
                (error as? DepotError)?.code == .duplicateKey && "\(error)".contains("(owner, name)")
            }
            // Moving a record onto another's values is refused too; onto its own, allowed.
            await #expect { try await pets.save(UniqueAnimal(id: 2, name: "Tom", owner: 1)) } throws: { error in
                (error as? DepotError)?.code == .duplicateKey
            }
            try await pets.save(UniqueAnimal(id: 1, name: "Tom", owner: 1))
            // Nil in a component never conflicts.
            try await pets.save([UniqueAnimal(id: 4, name: "Tom", owner: nil), UniqueAnimal(id: 5, name: "Tom", owner: nil)])
            // Freed values can be taken again.
            #expect(try await pets.delete(id: 1))
            try await pets.save(UniqueAnimal(id: 6, name: "Tom", owner: 1))
            #expect(try await pets.count(Request(\.name == "Tom")) == 4)
            #expect(try await store.checkIntegrity() == [])
        }
    }

    @Test("a value too long for an LMDB key is refused with an error")
    func longValuesRefused() async throws {
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            let long = String(repeating: "x", count: 600)
            await #expect { try await lmdb.save(IndexedAnimal(id: 1, species: "cat", name: long, age: 1)) } throws: { error in
                (error as? DepotError)?.code == .invalidValue
            }
            let stored = try await lmdb.count()
            #expect(stored == 0)
            // A filter on such a value cannot match, and is answered.
            let found = try await lmdb.fetchAll(Request(\.species == long).sorted(by: \.name))
            #expect(found.isEmpty)
        }
    }

    @Test("an index declared on a store with records is built; an undeclared one is kept until a step empties it")
    func addedIndexIsBuilt() async throws {
        let animals = IndexedAnimal.generate(800, seed: 5)
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try LMDBStore(directory: directory.path)
            let plain = Controller<PlainAnimal, PlainAnimal>(store: store)
            try await plain.save(animals.map(PlainAnimal.init))
            // A store written without indexes stores no index in its schema.
            let json = try await store.read { transaction -> String in
                guard let t = transaction as? LMDBTransaction else { return "" }
                return String(decoding: try t.storedStamp("Animal"), as: UTF8.self)
            }
            #expect(!json.contains("indexes"))
            await store.close()
        }
        do {
            // Reopened as it was: unchanged.
            let store = try LMDBStore(directory: directory.path)
            let plain = Controller<PlainAnimal, PlainAnimal>(store: store)
            #expect(try await plain.count() == animals.count)
            let version = try await store.read { try ($0 as? LMDBTransaction)?.readStoredEntity("Animal")?.schemaVersion }
            #expect(version == 1)
            // A unique index the records already break is refused, and nothing is built.
            let unique = Controller<UniqueAnimal, UniqueAnimal>(store: store)
            try await plain.save([PlainAnimal(IndexedAnimal(id: 90_001, species: "cat", name: "Tom", age: 1, owner: 5)), PlainAnimal(IndexedAnimal(id: 90_002, species: "cat", name: "Tom", age: 1, owner: 5))])
            await #expect { _ = try await unique.count() } throws: { error in
                (error as? DepotError)?.code == .schemaMismatch
            }
            let after = try await store.read { try ($0 as? LMDBTransaction)?.readStoredEntity("Animal") }
            #expect(after?.schemaVersion == 1 && after?.entity.indexes == [])
            #expect(try await plain.delete(id: 90_001))
            #expect(try await plain.delete(id: 90_002))
            await store.close()
        }
        let log = LoggedMessages()
        do {
            let store = try LMDBStore(directory: directory.path, log: log.storeLog)
            let lmdb = Animals(store: store)
            let memory = Animals(store: MemoryStore())
            try await memory.save(animals)
            let request = Request<IndexedAnimal>(\.species == "cat").sorted(by: \.name).limit(15)
            let plan = try await lmdb.explain(request)
            #expect(Self.components(plan) == ["species", "name"] && !plan.sortsAfterwards)
            #expect(try await lmdb.fetchAll(request) == memory.fetchAll(request))
            #expect(try await store.checkIntegrity() == [])
            #expect(log.messages.contains("Depot index built"))
            await store.close()
        }
        do {
            // Declared without them again: kept and maintained, until a step drops them.
            let store = try LMDBStore(directory: directory.path)
            let plain = Controller<PlainAnimal, PlainAnimal>(store: store)
            #expect(try await plain.count() == animals.count)
            #expect(try await store.register(PlainAnimal.self).first?.entity.indexes.isEmpty == false)
            #expect(try await store.checkIntegrity() == [])
            await store.close()
        }
        do {
            let store = try LMDBStore(directory: directory.path)
            var migrator = Migrator()
            let indexes = try await store.register(PlainAnimal.self).first?.entity.indexes ?? []
            for (i, index) in indexes.enumerated() { migrator.dropIndex("drop-\(i)", index, from: "Animal") }
            #expect(try await migrator.migrate(store, registering: PlainAnimal.self).count == indexes.count)
            #expect(try await store.register(PlainAnimal.self).first?.entity.indexes == [])
            let entries = try await store.write { transaction -> Int in
                guard let t = transaction as? LMDBTransaction,
                    let dbi = try t.openDatabase("Animal.cix.\(IndexDescription.index("species", "name").name)", flags: 0)
                else { return -1 }
                return try t.entries(dbi)
            }
            #expect(entries == 0)
            await store.close()
        }
    }

    @Test("a migration that renames an indexed attribute rebuilds the index under its new name")
    func renameRebuilds() async throws {
        let animals = IndexedAnimal.generate(300, seed: 3)
        try await withStore { store, _ in
            try await Animals(store: store).save(animals)
            var migrator = Migrator()
            migrator.renameAttribute("rename", in: "Animal", from: "name", to: "title")
            _ = try await migrator.migrate(store, registering: [])
            let handle = try #require(try await store.storedEntities().first { $0.name == "Animal" })
            #expect(handle.entity.indexes.contains(.index("species", "title")))
            let query = try Query(
                entity: handle, predicate: .compare(attribute: "species", .equal, .string("cat")), sortKeys: [SortKey("title")], limit: 6)
            let plan = try await store.read { try $0.explain(query, analyze: true) }
            #expect(Self.components(plan) == ["species", "title"] && !plan.sortsAfterwards && plan.actualRows == 6, "\(plan)")
            let ids = try await store.read { transaction -> [Int64] in
                var ids: [Int64] = []
                try transaction.fetch(query, reserve: { _ in }) { reader in
                    if case .int(let id) = try reader.value(handle.entity.primaryKeyIndex) { ids.append(id) }
                }
                return ids
            }
            let expected = animals.filter { $0.species == "cat" }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }.prefix(6).map(\.id)
            #expect(ids == expected)
            #expect(try await store.checkIntegrity() == [])
        }
    }

    @Test("indexes stored in the schema without their databases are built on open")
    func missingDatabasesAreBuilt() async throws {
        let animals = IndexedAnimal.generate(200, seed: 9)
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try LMDBStore(directory: directory.path)
            try await Controller<PlainAnimal, PlainAnimal>(store: store).save(animals.map(PlainAnimal.init))
            // What a version that stored composite indexes without building them left.
            try await store.write { transaction in
                guard let t = transaction as? LMDBTransaction, var stored = try t.readStoredEntity("Animal") else { return }
                stored.entity = IndexedAnimal.entity.description
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                try t.put(t.metaDBI, Catalog.entityKey("Animal"), Array(try encoder.encode(stored)), context: "test")
            }
            await store.close()
        }
        let store = try LMDBStore(directory: directory.path)
        let lmdb = Animals(store: store)
        let request = Request<IndexedAnimal>(\.species == "dog").sorted(by: \.name).limit(7)
        #expect(Self.components(try await lmdb.explain(request)) == ["species", "name"])
        let expected = animals.filter { $0.species == "dog" }.sorted { ($0.name, $0.id) < ($1.name, $1.id) }.prefix(7)
        #expect(try await lmdb.fetchAll(request) == Array(expected))
        #expect(try await store.checkIntegrity() == [])
        await store.close()
    }

    @Test("a store opened read-only plans over its composite indexes")
    func readOnlyStoreUsesIndexes() async throws {
        let animals = IndexedAnimal.generate(400, seed: 13)
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        do {
            let store = try LMDBStore(directory: directory.path)
            try await Animals(store: store).save(animals)
            await store.close()
        }
        let store = try LMDBStore(directory: directory.path, options: .init(readOnly: true))
        let lmdb = Animals(store: store)
        let request = Request<IndexedAnimal>(\.species == "eel").sorted(by: \.age, ascending: false).limit(9)
        let plan = try await lmdb.explain(request, analyze: true)
        #expect(Self.components(plan) == ["species", "age DESC"] && !plan.sortsAfterwards && plan.actualRows == 9, "\(plan)")
        let memory = Animals(store: MemoryStore())
        try await memory.save(animals)
        #expect(try await lmdb.fetchAll(request) == memory.fetchAll(request))
        await store.close()
    }

    @Test("the integrity check finds a missing composite index entry")
    func checkFindsMissingEntry() async throws {
        try await withStore { store, _ in
            let lmdb = Animals(store: store)
            try await lmdb.save(IndexedAnimal.generate(50))
            #expect(try await store.checkIntegrity() == [])
            let entity = try await lmdb.registeredEntity()
            let removed = try await store.write { transaction -> Bool in
                guard let t = transaction as? LMDBTransaction else { return false }
                let index = try t.handles(for: entity).composites[0]
                return try t.withCursor(index.dbi) { cursor in
                    var key = MDB_val()
                    var value = MDB_val()
                    guard mdb_cursor_get(cursor, &key, &value, MDB_FIRST) == 0 else { return false }
                    return mdb_cursor_del(cursor, 0) == 0
                }
            }
            #expect(removed)
            let problems = try await store.checkIntegrity()
            #expect(problems.count == 1 && problems.first?.contains("(species, name) has no entry for 1 records") == true, "\(problems)")
        }
    }
}
