public import DepotCore
import Foundation

/// What the crash tests kill inside a migration step and inside a JSON import: both must be
/// all or nothing after a kill at any moment.
public enum CrashMigration {
    /// A record the migration changes: `score` is 0 before the step and `id * 2` after it.
    @Record(name: "Crowd")
    public struct Member: Hashable {
        /// The primary key.
        public var id: Int64
        /// The name, which the schema step renames to `label`.
        public var name: String
        /// 0 before the data step, `id * 2` after it.
        public var score: Int64
    }

    /// A record the import brings.
    @Record(name: "Arrival")
    public struct Arrival: Hashable {
        /// The primary key.
        public var id: Int64
        /// The name.
        public var name: String
        /// The weight, given as a string in the file.
        public var weight: Double
    }

    /// The number of members seeded and of arrivals in the import file.
    public static let records: Int64 = 20_000

    /// Seeds the members (one transaction) unless they are there, then runs the migration:
    /// a data step that rewrites every member's score, then a schema step that renames
    /// `name` to `label` (rewriting every record again).
    public static func migrate(_ store: any Store) async throws {
        let stored = try await store.storedEntities()
        // Registering comes before the seeding transaction: a kill between them leaves the
        // entity empty, and it is seeded then.
        let crowd = stored.first { $0.name == "Crowd" }
        var seeded = 0
        if let crowd { seeded = try await store.read { try $0.count(Query(all: crowd)) } }
        if seeded == 0 {
            try await Controller<Member, Member>(store: store).save((1...records).map { Member(id: $0, name: "member \($0)", score: 0) })
        }
        var migrator = Migrator()
        migrator.registerStep("double-scores") { step in
            let crowd = try step.handle(named: "Crowd")
            guard let score = crowd.entity.index(of: "score") else { return }
            var rows: [Row] = []
            try step.transaction.fetch(Query(all: crowd), reserve: { _ in }) { rows.append(try $0.row()) }
            for var row in rows {
                guard case .int(let id) = row[value: crowd.entity.primaryKeyIndex] else { continue }
                row[value: score] = .int(id * 2)
                try step.transaction.update(row, in: crowd)
            }
        }
        migrator.renameAttribute("name-to-label", in: "Crowd", from: "name", to: "label")
        try await migrator.migrate(store)
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

    /// Imports the arrivals in `file` in one call: all of them or none after a kill.
    public static func importAll(_ store: any Store, file: String) async throws {
        let arrivals = Controller<Arrival, Arrival>(store: store)
        _ = try await arrivals.importJSON(contentsOf: URL(fileURLWithPath: file))
    }

    /// What a store holds: members, how many have the migrated score, whether `name` is
    /// renamed, and arrivals; read without the record types (the schema changes).
    public static func summary(_ store: any Store) async throws -> (members: Int, migrated: Int, renamed: Bool, arrivals: Int) {
        let (_, members, renamed) = try await readMembers(store)
        let arrivals = try await Controller<Arrival, Arrival>(store: store).count()
        return (members.count, members.filter { $0.score == $0.id * 2 }.count, renamed, arrivals)
    }

    static func readMembers(_ store: any Store) async throws -> (problems: [String], members: [Member], renamed: Bool) {
        var problems: [String] = []
        var members: [Member] = []
        var renamed = false
        if let crowd = try await store.storedEntities().first(where: { $0.name == "Crowd" }) {
            renamed = crowd.entity.index(of: "label") != nil
            let id = crowd.entity.primaryKeyIndex
            let name = crowd.entity.index(of: renamed ? "label" : "name") ?? 1
            let score = crowd.entity.index(of: "score") ?? 2
            let rows = try await store.read { transaction in
                var rows: [Row] = []
                try transaction.fetch(Query(all: crowd), reserve: { _ in }) { rows.append(try $0.row()) }
                return rows
            }
            for row in rows {
                guard case .int(let key) = row[value: id], case .string(let text) = row[value: name], case .int(let points) = row[value: score] else {
                    problems.append("a member's row has the wrong types")
                    break
                }
                members.append(Member(id: key, name: text, score: points))
            }
        }
        return (problems, members, renamed)
    }

    /// Problems after a kill: a half-applied step or import, or a step recorded without its
    /// changes (or the reverse).
    public static func verify(_ store: any Store) async throws -> [String] {
        var problems: [String] = []
        let applied = try await Migrator().planIgnoringUnknownSteps(store)
        let (read, members, renamed) = try await readMembers(store)
        problems += read
        if !members.isEmpty && renamed != applied.contains("name-to-label") {
            problems.append("the rename step is \(applied.contains("name-to-label") ? "" : "not ")recorded, but the attribute is \(renamed ? "" : "not ")renamed")
        }
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
        let stored = try await store.storedEntities()
        guard let ledger = stored.first(where: { $0.name == EntityDescription.migrationLedgerName }) else { return [] }
        return try await Self.applied(in: store, ledger: ledger)
    }
}
