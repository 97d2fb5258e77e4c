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

    /// What the schema steps turn a stored Gizmo into.
    @Record(name: "Widget")
    struct Widget: Hashable {
        var id: Int64
        var code: Int
        var title: String
    }

    static let gizmo = EntityDescription(
        name: "Gizmo",
        attributes: [
            AttributeDescription(name: "id", type: .int64),
            AttributeDescription(name: "code", type: .string),
            AttributeDescription(name: "legacy", type: .string, isOptional: true),
            AttributeDescription(name: "label", type: .string, isIndexed: true),
        ],
        primaryKeyIndex: 0)

    /// Three gizmos, written through the raw transaction API.
    static func seededGizmos(_ store: any Store, codes: [String] = ["12", "7", "-3"]) async throws {
        let handle = try await store.register(gizmo)
        try await store.write { transaction in
            for (i, code) in codes.enumerated() {
                var row = Row()
                row.append(.int(Int64(i + 1)))
                row.append(.string(code))
                row.append(i == 0 ? .null : .string("old \(i)"))
                row.append(.string("gizmo \(i + 1)"))
                try transaction.insert(row, into: handle)
            }
        }
    }

    static func gizmoToWidget() -> Migrator {
        var migrator = Migrator()
        migrator.changeType("code-to-integer", of: "code", in: "Gizmo", to: .int64) { value in
            guard case .string(let text) = value, let number = Int64(text) else { throw Refused() }
            return .int(number)
        }
        migrator.dropAttribute("drop-legacy", "legacy", from: "Gizmo")
        migrator.renameAttribute("label-to-title", in: "Gizmo", from: "label", to: "title")
        migrator.renameEntity("gizmo-to-widget", from: "Gizmo", to: "Widget")
        return migrator
    }

    static func seeded(_ store: any Store) async throws {
        try await Controller<PersonV1, PersonV1>(store: store).save([
            PersonV1(id: 1, fullName: "Ada Lovelace"), PersonV1(id: 2, fullName: "Grace Hopper"), PersonV1(id: 3, fullName: "Plato"),
        ])
    }

    static let all: [ConformanceCheck] = dataSteps + schemaSteps

    static let schemaSteps: [ConformanceCheck] = [
        ConformanceCheck("schema steps retype, drop and rename attributes and rename an entity, keeping every record") { store in
            try await seededGizmos(store)
            let collector = ChangeFeedChecks.Collector()
            let subscription = store.changes.observe(entities: ["Gizmo", "Widget"]) { collector.add($0) }
            let ran = try await gizmoToWidget().migrate(store, registering: Widget.self)
            subscription.cancel()
            try expectEqual(collector.all.count, 4, "observers hear of each rewrite")
            try expectEqual(ran, ["code-to-integer", "drop-legacy", "label-to-title", "gizmo-to-widget"], "every step ran")
            let widgets = try await Controller<Widget, Widget>(store: store).fetchAll()
            try expectEqual(widgets, [Widget(id: 1, code: 12, title: "gizmo 1"), Widget(id: 2, code: 7, title: "gizmo 2"), Widget(id: 3, code: -3, title: "gizmo 3")], "the records, in the new layout")
            let names = Set(try await store.storedEntities().map(\.name))
            try expect(names.contains("Widget") && !names.contains("Gizmo"), "the entity is renamed: \(names)")
            try await expectEqual(Controller<Widget, Widget>(store: store).fetchAll(Request(\.title == "gizmo 2")).map(\.id), [2], "the renamed attribute is indexed")
            try await expectEqual(gizmoToWidget().migrate(store, registering: Widget.self), [], "nothing runs twice")
        },
        ConformanceCheck("a schema step that fails, or would break a reference or a key, changes nothing") { store in
            try await seededGizmos(store, codes: ["12", "seven", "-3"])
            do {
                try await gizmoToWidget().migrate(store, registering: Widget.self)
                throw ConformanceFailure(message: "a conversion that throws succeeded", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expect(error.message.contains("code-to-integer"), "the error names the step: \(error.message)")
            }
            guard let stored = try await store.storedEntities().first(where: { $0.name == "Gizmo" }) else {
                throw ConformanceFailure(message: "the store no longer lists Gizmo", file: #fileID, line: #line)
            }
            try expectEqual(stored.entity, gizmo, "the stored schema is the old one")
            try await expectEqual(store.read { try $0.count(Query(all: stored)) }, 3, "and the records are all there")
            try await expectEqual(gizmoToWidget().plan(store).pending.count, 4, "no step is recorded")

            var collide = Migrator()
            collide.registerSchemaStep("same-key", entity: "Gizmo", describe: { $0 }) { row, _, _ in
                var row = row
                row[value: 0] = .int(1)
                return row
            }
            try await expectError(.duplicateKey, "two records given one key") { try await collide.migrate(store) }

            let (_, _, _) = try await RelationshipChecks.seeded(store)
            var renameReferenced = Migrator()
            renameReferenced.renameEntity("rename-dog", from: "Dog", to: "Hound")
            try await expectError(.schemaMismatch, "renaming an entity others refer to") { try await renameReferenced.migrate(store) }
            var dangle = Migrator()
            dangle.registerSchemaStep("walks-to-nowhere", entity: "Walk", describe: { $0 }) { row, from, _ in
                var row = row
                if let index = from.index(of: "dogID") { row[value: index] = .int(999) }
                return row
            }
            try await expectError(.missingReference, "rows referring to nothing") { try await dangle.migrate(store) }
            try await expectEqual(Controller<RelationshipChecks.Walk, RelationshipChecks.Walk>(store: store).fetchAll().map(\.dogID), [1, 1, 2, 3, 1], "the walks are unchanged")
        },
    ]

    static let dataSteps: [ConformanceCheck] = [
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
            let names = Set(try await store.storedEntities().map(\.name))
            try expect(!names.contains("Cat") && !names.contains(EntityDescription.migrationLedgerName), "nothing was registered: \(names)")
        },
    ]
}
