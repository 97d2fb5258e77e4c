import Depot
import DepotTesting

/// The cats of W1 and W3 in an entity that also declares one composite index, `(age,
/// name)`, beside the `age` index every cat has: W1x and W3x, measured beside W1 and W3 in
/// the same run, are what keeping one more index costs a write.
@Record(name: "IndexedCat", indexes: [.index("age", "name")])
struct IndexedCat: Hashable {
    var id: Int64
    var name: String
    var weight: Double
    @Stored(.indexed) var age: Int

    init(_ cat: Cat) {
        id = cat.id
        name = cat.name
        weight = cat.weight
        age = cat.age
    }
}

extension DepotSubject {
    /// A controller of the indexed cats, registering their entity in the open store.
    func indexedCats() async throws -> Controller<IndexedCat, IndexedCat> {
        let store = try openStore()
        try await store.register(IndexedCat.self)
        return Controller(store: store)
    }
}
