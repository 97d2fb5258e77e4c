import DepotCore

/// Hand-written records read by key path or stored name; a mapping that does not match the
/// entity is an error naming the problem, never a value read from the wrong attribute.
enum MappingChecks {
    /// A label record written by hand, correctly: the reference the wrong ones are read against.
    struct Label: StoredObject, Hashable {
        var id: Int64
        var title: String
        var subtitle: String
        var note: String?

        static let entity = Entity<Label>("Label", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("title", \.title)
            Attribute("subtitle", \.subtitle)
            Attribute("note", \.note)
        }

        init(id: Int64, title: String, subtitle: String, note: String? = nil) {
            (self.id, self.title, self.subtitle, self.note) = (id, title, subtitle, note)
        }

        init(row: RecordReader<Self>) throws {
            // Deliberately not in declaration order: reads by key path need none.
            subtitle = try row[\.subtitle]
            note = try row[\.note]
            title = try row["title"]
            id = try row[\.id]
        }
    }

    /// `Label` as registered, plus one property that its `init(row:)` reads wrongly: the
    /// same entity, so it registers, and only reading shows the mistake.
    struct UndeclaredRead: StoredObject {
        var id: Int64
        var title: String
        var subtitle: String
        var note: String?
        var extra: String

        static let entity = Entity<UndeclaredRead>("Label", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("title", \.title)
            Attribute("subtitle", \.subtitle)
            Attribute("note", \.note)
        }

        init(row: RecordReader<Self>) throws {
            (id, title, subtitle, note) = (try row[\.id], try row[\.title], try row[\.subtitle], try row[\.note])
            extra = try row[\.extra]
        }
    }

    /// Reads a string attribute, by name, as an integer.
    struct WrongType: StoredObject {
        var id: Int64
        var title: String
        var subtitle: String
        var note: String?
        var number: Int

        static let entity = Entity<WrongType>("Label", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("title", \.title)
            Attribute("subtitle", \.subtitle)
            Attribute("note", \.note)
        }

        init(row: RecordReader<Self>) throws {
            (id, title, subtitle, note) = (try row[\.id], try row[\.title], try row[\.subtitle], try row[\.note])
            number = try row["title"]
        }
    }

    /// Reads the optional `note` as a non-optional string, and a name nobody declared.
    struct NonOptionalRead: StoredObject {
        var id: Int64
        var title: String
        var subtitle: String
        var note: String?
        var text: String

        static let entity = Entity<NonOptionalRead>("Label", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("title", \.title)
            Attribute("subtitle", \.subtitle)
            Attribute("note", \.note)
        }

        init(row: RecordReader<Self>) throws {
            (id, title, subtitle, note) = (try row[\.id], try row[\.title], try row[\.subtitle], try row[\.note])
            text = try row["note"]
        }
    }

    struct UnknownName: StoredObject {
        var id: Int64
        var title: String
        var subtitle: String
        var note: String?
        var text: String

        static let entity = Entity<UnknownName>("Label", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("title", \.title)
            Attribute("subtitle", \.subtitle)
            Attribute("note", \.note)
        }

        init(row: RecordReader<Self>) throws {
            (id, title, subtitle, note) = (try row[\.id], try row[\.title], try row[\.subtitle], try row[\.note])
            text = try row["nickname"]
        }
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("a hand-written record reads its attributes by key path or name, in any order") { store in
            let labels = Controller<Label, Label>(store: store)
            let saved = [Label(id: 1, title: "first", subtitle: "second", note: "third"), Label(id: 2, title: "a", subtitle: "b")]
            try await labels.save(saved)
            try await expectEqual(labels.fetchAll(), saved, "every label back, no attribute swapped")
            try await expectEqual(labels.fetchOne(id: 1), saved[0], "one label by key")
        },
        ConformanceCheck("a hand-written mapping that does not match its entity is a conversion error") { store in
            let labels = Controller<Label, Label>(store: store)
            try await labels.save(Label(id: 1, title: "first", subtitle: "second", note: "third"))
            try await expectError(.conversionFailed, "a key path the entity does not declare") {
                try await Controller<UndeclaredRead, UndeclaredRead>(store: store).fetchAll().count
            }
            // The message names the read as the mapping wrote it, and the declaration.
            try await expectError(
                .conversionFailed, containing: "WrongType.init(row:) reads \"title\" as Int, but entity Label declares title as string",
                "a string read as an integer"
            ) {
                try await Controller<WrongType, WrongType>(store: store).fetchAll().count
            }
            try await expectError(
                .conversionFailed, containing: "NonOptionalRead.init(row:) reads \"note\" as String, but entity Label declares note as optional string",
                "an optional attribute read as non-optional"
            ) {
                try await Controller<NonOptionalRead, NonOptionalRead>(store: store).fetchAll().count
            }
            try await expectError(.conversionFailed, "an attribute name the entity does not declare") {
                try await Controller<UnknownName, UnknownName>(store: store).fetchAll().count
            }
            try await expectError(.conversionFailed, "one record by key") {
                try await Controller<WrongType, WrongType>(store: store).fetchOne(id: 1)
            }
        },
    ]
}
