import ArgumentParser
import Depot
import Foundation

struct Explain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show how a store runs a request: the index it reads, the ranges, whether it sorts afterwards.",
        discussion: """
            The predicate uses the notation plans print: species == "cat" && (name >= "M" || born == nil), \
            with in [..], hasPrefix and contains; strings, UUIDs, ISO 8601 dates and base64 data in double \
            quotes. With --analyze the request runs and the plan says how many records it read.
            """)

    @Argument(help: "The store's URL.") var url: String
    @Argument(help: "The entity to read.") var entityName: String
    @Argument(help: "The predicate; every record when omitted.") var predicate: String?
    @Option(name: .customLong("sort"), help: "A sort key, most significant first; --sort=-name for descending. Repeatable.") var sort: [String] = []
    @Option(help: "At most this many records.") var limit: Int?
    @Option(help: "Skip this many records first.") var offset: Int = 0
    @Flag(help: "Run the request and count the records read.") var analyze = false
    @Flag(help: "Print JSON instead of text.") var json = false

    func run() async throws {
        try await reporting(url) {
            let (store, _) = try await openCatalog(url)
            do {
                try await explain(store)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        }
    }

    func explain(_ store: any Store) async throws {
        let handle = try await entity(entityName, in: store)
        let expression = try predicate.map { try PredicateSyntax.parse($0, for: handle.entity) } ?? .constant(true)
        let keys = sort.map { $0.hasPrefix("-") ? SortKey(String($0.dropFirst()), ascending: false) : SortKey($0) }
        let query = try Query(entity: handle, predicate: expression, sortKeys: keys, limit: limit, offset: offset)
        let analyze = self.analyze
        let plan = try await store.read { try $0.explain(query, analyze: analyze) }
        if json {
            var object: [String: Any] = [
                "entity": plan.entity, "access": Self.access(plan.access), "ranges": plan.ranges,
                "sortsAfterwards": plan.sortsAfterwards, "filtersAfterwards": plan.filtersAfterwards,
                "backendDetail": plan.backendDetail,
            ]
            if let rows = plan.estimatedRows { object["estimatedRows"] = rows }
            if let rows = plan.actualRows { object["actualRows"] = rows }
            let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(plan.description)
            if !plan.backendDetail.isEmpty { print("\(store.backendName): \(plan.backendDetail)") }
        }
    }

    static func access(_ access: QueryPlan.Access) -> Any {
        func components(_ list: [IndexDescription.Component]) -> [String] {
            list.map { $0.attribute + ($0.isDescending ? " DESC" : "") }
        }
        switch access {
        case .scan: return "scan"
        case .primaryKey: return "primary key"
        case .index(let list): return ["index": components(list)]
        case .union(let lists): return ["union": lists.map(components)]
        }
    }
}
