public import DepotCore
public import Foundation

/// What the crash tests kill inside a migration step and inside a JSON import: both must be
/// all or nothing after a kill at any moment.
public enum CrashMigration {
    /// A record the migration changes: `score` is 0 before the step and `id * 2` after it.
    @Record(name: "Crowd")
    public struct Member: Hashable {
        public var id: Int64
        public var name: String
        public var score: Int64
    }

    /// A record the import brings.
    @Record(name: "Arrival")
    public struct Arrival: Hashable {
        public var id: Int64
        public var name: String
        public var weight: Double
    }

    public static let records: Int64 = 20_000

    /// Seeds the members (one transaction) unless they are there, then runs the migration:
    /// one step that rewrites every member, one that records a marker.
    public static func migrate(_ store: any Store) async throws {
        let members = Controller<Member, Member>(store: store)
        if try await members.count() == 0 {
            try await members.save((1...records).map { Member(id: $0, name: "member \($0)", score: 0) })
        }
        var migrator = Migrator()
        migrator.registerStep("double-scores") { step in
            let context = try step.context(Member.self)
            for var member in try context.fetchAll() {
                member.score = member.id * 2
                try context.update(member)
            }
        }
        try await migrator.migrate(store, registering: Member.self)
    }

    /// The JSON array the import reads: `records` arrivals.
    public static func importFile(at path: String) throws {
        var text = "["
        for id in 1...records {
            text += id == 1 ? "\n" : ",\n"
            text += #"{"id": \#(id), "name": "arrival \#(id)", "weight": "\#(Double(id) / 4)"}"#
        }
        text += "\n]\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    public static func importAll(_ store: any Store, file: String) async throws {
        let arrivals = Controller<Arrival, Arrival>(store: store)
        _ = try await arrivals.importJSON(contentsOf: URL(fileURLWithPath: file))
    }

    /// Problems after a kill: a half-applied step or import, or a step recorded without its
    /// changes (or the reverse).
    public static func verify(_ store: any Store) async throws -> [String] {
        var problems: [String] = []
        let members = try await Controller<Member, Member>(store: store).fetchAll()
        let applied = try await Migrator().planIgnoringUnknownSteps(store)
        if !members.isEmpty {
            if members.count != Int(records) { problems.append("\(members.count) of \(records) members: the seeding transaction is torn") }
            let migrated = members.filter { $0.score == $0.id * 2 }.count
            let untouched = members.filter { $0.score == 0 }.count
            let recorded = applied.contains("double-scores")
            if recorded && migrated != members.count { problems.append("the step is recorded, but only \(migrated) of \(members.count) members are migrated") }
            if !recorded && untouched != members.count { problems.append("the step is not recorded, but \(members.count - untouched) members are changed") }
        } else if applied.contains("double-scores") {
            problems.append("the step is recorded, but there are no members")
        }
        let arrivals = try await Controller<Arrival, Arrival>(store: store).fetchAll()
        if !arrivals.isEmpty && arrivals.count != Int(records) {
            problems.append("\(arrivals.count) of \(records) arrivals: the import is half-written")
        }
        if let wrong = arrivals.first(where: { $0.weight != Double($0.id) / 4 || $0.name != "arrival \($0.id)" }) {
            problems.append("arrival \(wrong.id) holds wrong values")
        }
        return problems
    }
}

extension Migrator {
    /// The applied steps, whichever this migrator knows (for checks).
    func planIgnoringUnknownSteps(_ store: any Store) async throws -> [String] {
        let stored = try await (store as? any CatalogStore)?.storedEntities() ?? []
        guard let ledger = stored.first(where: { $0.name == EntityDescription.migrationLedgerName }) else { return [] }
        return try await Self.applied(in: store, ledger: ledger)
    }
}
