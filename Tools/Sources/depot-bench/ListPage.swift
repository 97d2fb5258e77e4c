import Depot
import DepotTesting
import Dispatch
import Foundation

/// W8's record: a pet, as a list page of an application shows them (the example's list
/// endpoint: one species, sorted by name, 20 at a time).
struct BenchPet: Sendable, Hashable {
    let id: Int64
    let name: String
    let species: String
    let birthYear: Int
    let weight: Double

    /// The species W8 chooses from.
    static let species = [
        "cat", "dog", "rabbit", "hamster", "parrot", "canary", "goldfish", "turtle",
        "ferret", "guinea pig", "lizard", "snake", "horse", "goat", "chicken", "mouse",
    ]

    /// `count` pets with ids 1…count, each of one of the 16 species, named from a pool of
    /// names small enough that names repeat within a species (so the order's tie-break by
    /// id matters), from a generator seeded with `seed`: the same pets on every backend
    /// and every run.
    static func workload(count: Int, seed: UInt64 = 37) -> [BenchPet] {
        var generator = SplitMix64(seed: seed)
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        let names: [String] = (0..<max(16, count / 50)).map { _ in
            let length = 3 + Int(generator.next() % 8)
            return String(decoding: (0..<length).map { _ in letters[Int(generator.next() % UInt64(letters.count))] }, as: UTF8.self)
        }
        return (0..<count).map { i in
            BenchPet(
                id: Int64(i + 1), name: names[Int(generator.next() % UInt64(names.count))],
                species: species[Int(generator.next() % UInt64(species.count))], birthYear: 2000 + Int(generator.next() % 26),
                weight: Double(generator.next() % 50_000) / 1000 + 0.1)
        }
    }

    /// Depot's order for a request sorted by name: the name's UTF-8 bytes, then the id.
    static func precedes(_ a: BenchPet, _ b: BenchPet) -> Bool {
        if a.name.utf8.lexicographicallyPrecedes(b.name.utf8) { return true }
        return a.name.utf8.elementsEqual(b.name.utf8) && a.id < b.id
    }
}

/// The pet with the composite index W8 measures: `(species, name)`, which serves a
/// request filtering on the species and sorted by name.
@Record(name: "Pet", indexes: [.index("species", "name")])
struct IndexedPet: Hashable {
    var id: Int64
    var name: String
    var species: String
    var birthYear: Int
    var weight: Double

    init(_ pet: BenchPet) {
        id = pet.id
        name = pet.name
        species = pet.species
        birthYear = pet.birthYear
        weight = pet.weight
    }

    var pet: BenchPet { BenchPet(id: id, name: name, species: species, birthYear: birthYear, weight: weight) }
}

/// The same pet without the composite index: the species indexed alone, as the example
/// declared it before composite indexes existed. W8n measures the list page on it.
@Record(name: "PetWithoutIndex")
struct PlainPet: Hashable {
    var id: Int64
    var name: String
    @Stored(.indexed) var species: String
    var birthYear: Int
    var weight: Double

    init(_ pet: BenchPet) {
        id = pet.id
        name = pet.name
        species = pet.species
        birthYear = pet.birthYear
        weight = pet.weight
    }

    var pet: BenchPet { BenchPet(id: id, name: name, species: species, birthYear: birthYear, weight: weight) }
}

/// W8's and W8c's fixed inputs and expected answers.
struct ListPageFixture {
    static let pageSize = 20
    /// W8: list pages per sample (W8n: the first `slowQueries` of them).
    static let queries = 200
    static let slowQueries = 20
    /// W8c: walks per sample, each at most `pagesPerWalk` pages of one species.
    static let walks = 4
    static let pagesPerWalk = 200

    let pets: [BenchPet]
    /// Each species' pets in the list page's order.
    let bySpecies: [String: [BenchPet]]
    /// W8's species, one per query.
    let querySpecies: [String]
    /// W8c's species, one per walk.
    let walkSpecies: [String]

    init(records: Int) {
        pets = BenchPet.workload(count: records)
        var grouped = Dictionary(grouping: pets, by: \.species)
        for key in grouped.keys { grouped[key]?.sort(by: BenchPet.precedes) }
        bySpecies = grouped
        var generator = SplitMix64(seed: 8)
        let all = BenchPet.species
        querySpecies = (0..<Self.queries).map { _ in all[Int(generator.next() % UInt64(all.count))] }
        walkSpecies = (0..<Self.walks).map { _ in all[Int(generator.next() % UInt64(all.count))] }
    }

    func firstPage(_ species: String) -> ArraySlice<BenchPet> {
        (bySpecies[species] ?? []).prefix(Self.pageSize)
    }

    /// The pets a walk of `pagesPerWalk` pages of `species` reads, in order.
    func walk(_ species: String) -> ArraySlice<BenchPet> {
        (bySpecies[species] ?? []).prefix(Self.pageSize * Self.pagesPerWalk)
    }
}

/// Times one page of a walk: nanoseconds since `start`.
@inline(__always)
func elapsed(since start: UInt64) -> UInt64 {
    DispatchTime.now().uptimeNanoseconds - start
}

extension DepotSubject {
    /// The list page through Depot's public API, as an endpoint asks for it.
    func listPage(species: String, indexed: Bool) async throws -> [BenchPet] {
        guard let indexedPets, let plainPets else { throw BenchError("\(name) holds no pets") }
        if indexed {
            return try await indexedPets.fetchAll(Request(\.species == species).sorted(by: \.name).limit(ListPageFixture.pageSize)).map(\.pet)
        }
        return try await plainPets.fetchAll(Request(\.species == species).sorted(by: \.name).limit(ListPageFixture.pageSize)).map(\.pet)
    }

    /// W8, W8e and W8n: the pages as an endpoint asks for them, its objects the records
    /// (W8e: from a task preferring the store's executor, as a server whose requests run
    /// there, the README's advice and the example's middleware, reads them).
    func timedListPages(species: [String], indexed: Bool, preferringStoreExecutor: Bool) async throws -> (pages: [[BenchPet]], ms: Double) {
        guard let store, let indexedPets, let plainPets else { throw BenchError("\(name) holds no pets") }
        let preferred: (any TaskExecutor)? = preferringStoreExecutor ? store.executor : nil
        if indexed {
            let (read, ms) = try await Self.timed(species, on: preferred) { name in
                try await indexedPets.fetchAll(Request(\.species == name).sorted(by: \.name).limit(ListPageFixture.pageSize))
            }
            return (read.map { $0.map(\.pet) }, ms)
        }
        let (read, ms) = try await Self.timed(species, on: preferred) { name in
            try await plainPets.fetchAll(Request(\.species == name).sorted(by: \.name).limit(ListPageFixture.pageSize))
        }
        return (read.map { $0.map(\.pet) }, ms)
    }

    /// `page` for each of `species` in turn (on `preferred` when there is one), and the
    /// milliseconds the pages took.
    private static func timed<Record: Sendable>(
        _ species: [String], on preferred: (any TaskExecutor)?, _ page: @escaping @Sendable (String) async throws -> [Record]
    ) async throws -> (pages: [[Record]], ms: Double) {
        @Sendable func read() async throws -> [[Record]] {
            var pages: [[Record]] = []
            pages.reserveCapacity(species.count)
            for name in species { pages.append(try await page(name)) }
            return pages
        }
        let start = DispatchTime.now().uptimeNanoseconds
        let pages: [[Record]]
        if let preferred {
            pages = try await withTaskExecutorPreference(preferred) { try await read() }
        } else {
            pages = try await read()
        }
        return (pages, Double(elapsed(since: start)) / 1_000_000)
    }

    /// W8c through `ResultSet.page(size:after:)`, each page handed the previous one's cursor.
    func walkPages(species: String, pages: Int) async throws -> (pets: [BenchPet], nanoseconds: [UInt64]) {
        guard let indexedPets else { throw BenchError("\(name) holds no pets") }
        let set = indexedPets.results.filter(\.species == species).sorted(by: \.name)
        var pets: [BenchPet] = []
        var nanoseconds: [UInt64] = []
        var cursor: PageCursor?
        for _ in 0..<pages {
            let start = DispatchTime.now().uptimeNanoseconds
            let page = try await set.page(size: ListPageFixture.pageSize, after: cursor)
            nanoseconds.append(elapsed(since: start))
            pets += page.items.map(\.pet)
            guard let next = page.next else { break }
            cursor = next
        }
        return (pets, nanoseconds)
    }

    func savePets(_ pets: [BenchPet]) async throws {
        let store = try openStore()
        try await store.register(IndexedPet.self)
        try await store.register(PlainPet.self)
        let indexed = Controller<IndexedPet, IndexedPet>(store: store)
        let plain = Controller<PlainPet, PlainPet>(store: store)
        try await indexed.save(pets.map(IndexedPet.init))
        try await plain.save(pets.map(PlainPet.init))
        indexedPets = indexed
        plainPets = plain
    }
}
