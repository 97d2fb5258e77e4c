import DepotCore
import Foundation

/// Versioned migration steps: once each, in order, recorded; rolled back when they throw;
/// refused when the store is newer than the code; planned without writing.
enum MigrationChecks {
    struct Refused: Error {}

    /// Version 1 of a person: one name.
    @Record(name: "Person")
    struct PersonV1: Hashable {
        var id: Int64
        var fullName: String
    }

    /// Version 2: the name split in two (new attributes with defaults), the old one kept.
    @Record(name: "Person")
    struct PersonV2: Hashable {
        var id: Int64
        var fullName: String
        var firstName: String = ""
        var lastName: String = ""
        var initials: String?
    }

    static func splitNames() -> Migrator {
        var migrator = Migrator()
        migrator.registerStep("split-names") { step in
            let people = try step.context(PersonV2.self)
            for var person in try people.fetchAll(Request(\.firstName == "")) {
                let parts = person.fullName.split(separator: " ", maxSplits: 1).map(String.init)
                person.firstName = parts.first ?? ""
                person.lastName = parts.count > 1 ? parts[1] : ""
                try people.update(person)
            }
        }
        migrator.registerStep("backfill-initials") { step in
            let people = try step.context(PersonV2.self)
            for var person in try people.fetchAll() {
                person.initials = String(person.firstName.prefix(1)) + String(person.lastName.prefix(1))
                try people.update(person)
            }
        }
        return migrator
    }

    static func seeded(_ store: any Store) async throws {
        try await Controller<PersonV1, PersonV1>(store: store).save([
            PersonV1(id: 1, fullName: "Ada Lovelace"), PersonV1(id: 2, fullName: "Grace Hopper"), PersonV1(id: 3, fullName: "Plato"),
        ])
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("migration steps run once each, in order, with full access, and are recorded") { store in
            try await seeded(store)
            let migrator = splitNames()
            try await expectEqual(migrator.migrate(store, registering: PersonV2.self), ["split-names", "backfill-initials"], "both steps ran")
            let people = try await Controller<PersonV2, PersonV2>(store: store).fetchAll()
            try expectEqual(people.map(\.firstName), ["Ada", "Grace", "Plato"], "split")
            try expectEqual(people.map(\.lastName), ["Lovelace", "Hopper", ""], "split")
            try expectEqual(people.map(\.initials), ["AL", "GH", "P"], "backfilled from the first step's work")
            try await expectEqual(migrator.migrate(store, registering: PersonV2.self), [], "nothing runs twice")
            var longer = migrator
            longer.registerStep("uppercase-initials") { step in
                let people = try step.context(PersonV2.self)
                for var person in try people.fetchAll() {
                    person.initials = person.initials?.uppercased()
                    try people.update(person)
                }
            }
            try await expectEqual(longer.migrate(store), ["uppercase-initials"], "only the new step")
            let plan = try await longer.plan(store)
            try expectEqual(plan.applied, ["split-names", "backfill-initials", "uppercase-initials"], "the store records every step, in order")
        },
        ConformanceCheck("a migration step that throws rolls back, leaving the previous version, and runs again next time") { store in
            try await seeded(store)
            var migrator = splitNames()
            migrator.registerStep("fails-halfway") { step in
                let people = try step.context(PersonV2.self)
                try people.delete(id: 1)
                throw Refused()
            }
            do {
                try await migrator.migrate(store, registering: PersonV2.self)
                throw ConformanceFailure(message: "a throwing step succeeded", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expect(error.message.contains("fails-halfway") && error.message.contains("rolled back"), "the error names the step: \(error.message)")
            }
            try await expectEqual(Controller<PersonV2, PersonV2>(store: store).count(), 3, "the step's delete was rolled back")
            try await expectEqual(migrator.plan(store).pending, ["fails-halfway"], "the steps before it stay applied; it stays pending")
            let fixed = splitNames()
            var retried = fixed
            retried.registerStep("fails-halfway") { _ in }
            try await expectEqual(retried.migrate(store), ["fails-halfway"], "a fixed step runs next time")
        },
        ConformanceCheck("a store with migration steps the code does not know is refused by name, before anything runs") { store in
            try await seeded(store)
            try await splitNames().migrate(store, registering: PersonV2.self)
            var older = Migrator()
            older.registerStep("split-names") { _ in }
            try await expectError(.schemaMismatch, "a store migrated by a newer application") { try await older.migrate(store) }
            var reordered = Migrator()
            reordered.registerStep("backfill-initials") { _ in }
            reordered.registerStep("split-names") { _ in }
            try await expectError(.schemaMismatch, "steps in another order") { try await reordered.plan(store) }
            var twice = Migrator()
            twice.registerStep("same") { _ in }
            twice.registerStep("same") { _ in }
            try await expectError(.invalidConfiguration, "a step name used twice") { try await twice.migrate(store) }
            try await expectError(.schemaMismatch, "a destructive change without a step") { try await Migrator().migrate(store, registering: CatRecord.self, CatRecordRetyped.self) }
        },
        ConformanceCheck("a migration plan lists applied and pending steps and the automatic changes, and writes nothing") { store in
            try await seeded(store)
            let plan = try await splitNames().plan(store, registering: PersonV2.self, CatRecord.self)
            try expectEqual(plan.applied, [], "nothing applied yet")
            try expectEqual(plan.pending, ["split-names", "backfill-initials"], "both pending")
            try expect(plan.automaticChanges.contains("add Person.firstName (string), existing records get \"\""), "the additive change: \(plan.automaticChanges)")
            try expect(plan.automaticChanges.contains { $0.hasPrefix("create entity Cat") }, "a new entity: \(plan.automaticChanges)")
            try expect(plan.description.contains("pending: split-names"), "printable: \(plan.description)")
            let person = try await Controller<PersonV1, PersonV1>(store: store).fetchOne(id: 1)
            try expectEqual(person?.fullName, "Ada Lovelace", "the store still holds version 1")
            let names = Set(try await (store as? any CatalogStore)?.storedEntities().map(\.name) ?? [])
            try expect(!names.contains("Cat") && !names.contains(EntityDescription.migrationLedgerName), "nothing was registered: \(names)")
        },
    ]
}
