import DepotCore
import Foundation

/// References between records: integrity when writing, the four delete rules, registration
/// and schema changes — the same on every backend.
enum RelationshipChecks {
    @Record(name: "Owner")
    struct Owner: Hashable {
        var id: String
        var name: String
    }

    @Record(name: "Dog")
    struct Dog: Hashable {
        var id: Int64
        var name: String
        @Stored(.references(RelationshipChecks.Owner.self, onDelete: .nullify)) var ownerID: String?
    }

    @Record(name: "Walk")
    struct Walk: Hashable {
        var id: Int64
        @Stored(.references(RelationshipChecks.Dog.self, onDelete: .cascade)) var dogID: Int64
        var minutes: Int
    }

    /// Declared by hand, with the deny rule.
    struct Licence: StoredObject, Hashable {
        var id: UUID
        var dogID: Int64
        var number: String

        static let entity = Entity<Licence>("Licence", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("dogID", \.dogID, references: Dog.self, onDelete: .deny)
            Attribute("number", \.number)
        }

        init(id: UUID, dogID: Int64, number: String) {
            self.id = id
            self.dogID = dogID
            self.number = number
        }

        init(row: RecordReader<Licence>) throws {
            id = try row[\.id]
            dogID = try row[\.dogID]
            number = try row[\.number]
        }
    }

    @Record(name: "Photo")
    struct Photo: Hashable {
        var id: Int64
        @Stored(.references(RelationshipChecks.Dog.self)) var dogID: Int64?
    }

    /// A tree: each node refers to its parent, and a node's subtree goes with it.
    @Record(name: "Node")
    struct Node: Hashable {
        var id: Int64
        @Stored(.references(Node.self, onDelete: .cascade)) var parentID: Int64?
    }

    typealias Owners = Controller<Owner, Owner>
    typealias Dogs = Controller<Dog, Dog>
    typealias Walks = Controller<Walk, Walk>
    typealias Licences = Controller<Licence, Licence>
    typealias Photos = Controller<Photo, Photo>
    typealias Nodes = Controller<Node, Node>

    /// A dog's walks, longest first (then by primary key).
    static let walksOfDog = ToMany<Dog, Walk>(\.dogID).sorted(by: \.minutes, ascending: false)
    static let dogsOfOwner = ToMany<Owner, Dog>(\.ownerID)

    static let licenceA = UUID(uuidString: "00000000-0000-0000-0000-0000000000A1")!

    /// Two owners, three dogs (one without owner), five walks.
    static func seeded(_ store: any Store) async throws -> (Owners, Dogs, Walks) {
        let owners = Owners(store: store)
        let dogs = Dogs(store: store)
        let walks = Walks(store: store)
        try await owners.save([Owner(id: "ann", name: "Ann"), Owner(id: "bob", name: "Bob")])
        try await dogs.save([
            Dog(id: 1, name: "Rex", ownerID: "ann"), Dog(id: 2, name: "Fido", ownerID: "ann"),
            Dog(id: 3, name: "Stray", ownerID: nil),
        ])
        try await walks.save([
            Walk(id: 10, dogID: 1, minutes: 30), Walk(id: 11, dogID: 1, minutes: 45), Walk(id: 12, dogID: 2, minutes: 20),
            Walk(id: 13, dogID: 3, minutes: 5), Walk(id: 14, dogID: 1, minutes: 60),
        ])
        return (owners, dogs, walks)
    }

    static let all: [ConformanceCheck] = rules + loading

    static let loading: [ConformanceCheck] = [
        ConformanceCheck("including: loads each record's related records, in order, in two queries however many records") { store in
            let recording = RecordingStore(store)
            let (owners, _, _) = try await seeded(store)
            let dogs = Dogs(store: recording)
            let first = try await dogs.fetchAll(including: walksOfDog)
            try expectEqual(first.map(\.object.id), [1, 2, 3], "every dog, in the request's order")
            try expectEqual(first.map { $0.related.map(\.id) }, [[14, 11, 10], [12], [13]], "each dog's walks, longest first")
            var before = recording.queryCount
            let some = try await dogs.fetchAll(Request(\.name != "Fido").sorted(by: \.name, ascending: false).limit(1), including: walksOfDog)
            try expectEqual(some.map(\.object.name), ["Stray"], "the request's filter, order and limit")
            try expectEqual(some.first?.related.map(\.minutes), [5], "with its walks")
            try expectEqual(recording.queryCount - before, 2, "one query for the dogs, one for their walks")
            try await Dogs(store: store).save((100..<160).map { Dog(id: $0, name: "Dog \($0)", ownerID: $0 % 2 == 0 ? "bob" : nil) })
            try await Walks(store: store).save((100..<160).flatMap { [Walk(id: $0 * 10, dogID: $0, minutes: 1), Walk(id: $0 * 10 + 1, dogID: $0, minutes: 2)] })
            before = recording.queryCount
            let many = try await dogs.fetchAll(Request(\.id >= 100), including: walksOfDog)
            try expectEqual(recording.queryCount - before, 2, "still two queries for sixty dogs")
            try expect(many.count == 60 && many.allSatisfy { $0.related.map(\.minutes) == [2, 1] }, "each of the sixty with its two walks")
            try await Dogs(store: store).save(Dog(id: 200, name: "Idle", ownerID: nil))
            try await expectEqual(dogs.fetchAll(Request(\.id == 200), including: walksOfDog).first?.related, [], "a dog without walks")
            let people = try await owners.fetchAll(including: dogsOfOwner)
            try expectEqual(people.map { $0.related.count }, [2, 30], "an optional reference relates too")
        },
        ConformanceCheck("countRelated counts each record's related records, zero included") { store in
            let (_, dogs, _) = try await seeded(store)
            try await dogs.save(Dog(id: 4, name: "Idle", ownerID: nil))
            try await expectEqual(dogs.countRelated(walksOfDog), [1: 3, 2: 1, 3: 1, 4: 0], "walks per dog")
            try await expectEqual(dogs.countRelated(walksOfDog, Request(\.ownerID == "ann")), [1: 3, 2: 1], "for the request's dogs only")
            try await expectEqual(Owners(store: store).countRelated(dogsOfOwner), ["ann": 2, "bob": 0], "dogs per owner")
        },
        ConformanceCheck("having and lacking select records by their related records") { store in
            let (_, dogs, _) = try await seeded(store)
            try await dogs.save(Dog(id: 4, name: "Idle", ownerID: nil))
            try await expectEqual(dogs.fetchAll(having: walksOfDog).map(\.id), [1, 2, 3], "dogs with a walk")
            try await expectEqual(dogs.fetchAll(having: walksOfDog, where: \.minutes > 40).map(\.id), [1], "dogs with a long walk")
            try await expectEqual(dogs.fetchAll(lacking: walksOfDog).map(\.id), [4], "dogs without walks")
            try await expectEqual(dogs.fetchAll(lacking: walksOfDog, where: \.minutes > 40).map(\.id), [2, 3, 4], "dogs without a long walk")
            try await expectEqual(
                dogs.fetchAll(Request<Dog>.all.sorted(by: \.name).offset(1).limit(1), having: walksOfDog, where: \.minutes < 40).map(\.name),
                ["Rex"], "the request's order, offset and limit apply to the selected dogs")
            try await expectEqual(dogs.fetchAll(having: walksOfDog, where: \.minutes > 1000), [], "no dog has such a walk")
        },
        ConformanceCheck("an observation including related records updates when a related record changes") { store in
            let (_, dogs, walks) = try await seeded(store)
            var updates = dogs.observe(Request(\.id <= 2), including: walksOfDog).makeAsyncIterator()
            let initial = try await updates.next()
            try expectEqual(initial?.objects.map { $0.related.map(\.id) }, [[14, 11, 10], [12]], "the first result")
            try await walks.update(Walk(id: 12, dogID: 2, minutes: 90))
            let changed = try await updates.next()
            try expectEqual(changed?.changes.updated, [1], "Fido's entry changed with his walk")
            try expectEqual(changed?.objects[1].related.map(\.minutes), [90], "to the new minutes")
            try await walks.save(Walk(id: 15, dogID: 1, minutes: 50))
            let added = try await updates.next()
            try expectEqual(added?.changes.updated, [0], "a new walk changes Rex's entry")
            try expectEqual(added?.objects[0].related.map(\.id), [14, 15, 11, 10], "in order")
            try await walks.save(Walk(id: 16, dogID: 3, minutes: 1))
            _ = try await walks.delete(id: 15)
            let removed = try await updates.next()
            try expectEqual(removed?.objects[0].related.map(\.id), [14, 11, 10], "a walk of an unobserved dog changes nothing; a deleted walk leaves")
            try expectEqual(removed?.changes.updated, [0], "only Rex changed")
        },
    ]

    static let rules: [ConformanceCheck] = [
        ConformanceCheck("a reference to a record that does not exist is refused; nil refers to nothing") { store in
            let (_, dogs, walks) = try await seeded(store)
            try await expectError(.missingReference, "insert a walk of a dog that does not exist") {
                try await walks.insert(Walk(id: 20, dogID: 99, minutes: 1))
            }
            try await expectError(.missingReference, "update a walk to a dog that does not exist") {
                try await walks.update(Walk(id: 10, dogID: 99, minutes: 30))
            }
            try await expectError(.missingReference, "save a dog whose owner does not exist") {
                try await dogs.save(Dog(id: 4, name: "Lost", ownerID: "nobody"))
            }
            try await expectError(.missingReference, "a batch with one bad reference") {
                try await walks.save([Walk(id: 21, dogID: 1, minutes: 1), Walk(id: 22, dogID: 42, minutes: 1)])
            }
            try await expectEqual(walks.count(), 5, "nothing of a refused write is kept")
            try await expectEqual(walks.fetchOne(id: 10)?.dogID, 1, "the refused update changed nothing")
            try await dogs.save(Dog(id: 4, name: "Loner", ownerID: nil))
            try await expectEqual(dogs.fetchOne(id: 4)?.ownerID, nil, "a nil reference is stored")
            do {
                try await walks.insert(Walk(id: 20, dogID: 77, minutes: 1))
            } catch let error as DepotError {
                try expect(error.message.contains("Walk 20") && error.message.contains("Dog 77") && error.message.contains("dogID"), "the error names the record, the reference and the key: \(error.message)")
            }
        },
        ConformanceCheck("parents and children written in any order within one write") { store in
            let handles = try await store.register(Walk.self, Dog.self, Owner.self)
            let (walkHandle, dogHandle, ownerHandle) = (handles[0], handles[1], handles[2])
            try await store.write { transaction in
                try Context<Walk, Walk>(transaction, entity: walkHandle).insert([
                    Walk(id: 1, dogID: 7, minutes: 10), Walk(id: 2, dogID: 8, minutes: 20),
                ])
                try Context<Dog, Dog>(transaction, entity: dogHandle).insert([
                    Dog(id: 7, name: "Late", ownerID: "zoe"), Dog(id: 8, name: "Later", ownerID: nil),
                ])
                try Context<Owner, Owner>(transaction, entity: ownerHandle).insert(Owner(id: "zoe", name: "Zoe"))
            }
            try await expectEqual(Walks(store: store).count(), 2, "children written before their parents")
            // A reference to a record deleted later in the same write is refused at the end.
            try await expectError(.missingReference, "a walk whose dog is deleted afterwards in the same write") {
                try await store.write { transaction in
                    try Context<Dog, Dog>(transaction, entity: dogHandle).insert(Dog(id: 9, name: "Gone", ownerID: nil))
                    try transaction.delete(key: .int(9), from: dogHandle)
                    try Context<Walk, Walk>(transaction, entity: walkHandle).insert(Walk(id: 4, dogID: 9, minutes: 1))
                }
            }
            try await expectEqual(Walks(store: store).count(), 2, "the refused write kept nothing")
            // A reference to a record the write removes and then writes again is valid.
            try await store.write { transaction in
                try Context<Owner, Owner>(transaction, entity: ownerHandle).insert(Owner(id: "tmp", name: "Temporary"))
                try Context<Dog, Dog>(transaction, entity: dogHandle).insert(Dog(id: 10, name: "Brief", ownerID: "tmp"))
                try Context<Dog, Dog>(transaction, entity: dogHandle).update(Dog(id: 10, name: "Brief", ownerID: nil))
                _ = try Context<Owner, Owner>(transaction, entity: ownerHandle).delete(id: "tmp")
            }
            try await expectEqual(Dogs(store: store).fetchOne(id: 10)?.ownerID, nil, "a reference changed before its target went")
        },
        ConformanceCheck("cascade deletes the referencing records, at every level, and observers hear of each") { store in
            let (_, dogs, walks) = try await seeded(store)
            let nodes = Nodes(store: store)
            try await nodes.save([
                Node(id: 1, parentID: nil), Node(id: 2, parentID: 1), Node(id: 3, parentID: 2), Node(id: 4, parentID: 3),
                Node(id: 5, parentID: 1), Node(id: 6, parentID: nil), Node(id: 7, parentID: 7),
            ])
            let collector = ChangeFeedChecks.Collector()
            let subscription = store.changes.observe(entities: ["Dog", "Walk", "Node"]) { collector.add($0) }
            defer { subscription.cancel() }
            try await expect(dogs.delete(id: 1), "Rex existed")
            try await expectEqual(walks.fetchAll().map(\.id), [12, 13], "Rex's walks went with him")
            try await expect(nodes.delete(id: 2), "node 2 existed")
            try await expectEqual(nodes.fetchAll().map(\.id), [1, 5, 6, 7], "a subtree goes with its root")
            try await expect(nodes.delete(id: 7), "a node referring to itself can be deleted")
            try await expectEqual(nodes.fetchAll().map(\.id), [1, 5, 6], "and nothing else went")
            let batches = collector.all.map { Set($0.changes.map { "\($0.kind.rawValue) \($0.entity) \($0.key)" }) }
            try expectEqual(batches.count, 3, "one change set per delete")
            try expectEqual(
                batches.first, ["delete Dog 1", "delete Walk 10", "delete Walk 11", "delete Walk 14"],
                "observers hear of every record a cascade removed")
            try expectEqual(batches.dropFirst().first, ["delete Node 2", "delete Node 3", "delete Node 4"], "three levels")
        },
        ConformanceCheck("delete rules plan before they write: cycles, long chains, deny inside a cascade, refusals change nothing") { store in
            let nodes = Nodes(store: store)
            // A cycle of two nodes, each going with the other.
            let handles = try await store.register(Node.self)
            try await store.write { transaction in
                let context = Context<Node, Node>(transaction, entity: handles[0])
                try context.insert([Node(id: 8, parentID: 9), Node(id: 9, parentID: 8)])
            }
            let collector = ChangeFeedChecks.Collector()
            let subscription = store.changes.observe(entities: ["Node"]) { collector.add($0) }
            try await expect(nodes.delete(id: 8), "a node in a cascade cycle is deleted")
            try await expectEqual(nodes.count(), 0, "with the other one")
            try expectEqual(collector.all.map { Set($0.changes.map { "\($0.kind.rawValue) \($0.key)" }) }, [["delete 8", "delete 9"]], "observers hear of both")
            subscription.cancel()
            // A chain far longer than a recursion could follow on a writer thread's stack.
            let length: Int64 = 5_000
            try await nodes.save((1...length).map { Node(id: $0, parentID: $0 == 1 ? nil : $0 - 1) })
            try await expect(nodes.delete(id: 1), "the head of a long chain")
            try await expectEqual(nodes.count(), 0, "takes the whole chain")
            try await nodes.save([Node(id: 1, parentID: nil), Node(id: 2, parentID: 1), Node(id: 3, parentID: 2), Node(id: 4, parentID: nil)])
            try await expectEqual(nodes.deleteAll(where: Request<Node>.all), 4, "deleteAll counts records an earlier cascade took")

            // A deny is not refused by a record that goes in the same delete; a deny outside
            // it refuses the whole delete, and nothing changes even when the closure goes on.
            let parent = try EntityDescription(
                name: "Team",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "captainID", type: .int64, isOptional: true, reference: Reference(entity: "Player", onDelete: .deny)),
                ], primaryKey: "id")
            let child = try EntityDescription(
                name: "Player",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "teamID", type: .int64, reference: Reference(entity: "Team", onDelete: .cascade)),
                ], primaryKey: "id")
            let badge = try EntityDescription(
                name: "Badge",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "playerID", type: .int64, reference: Reference(entity: "Player", onDelete: .deny)),
                    AttributeDescription(name: "teamID", type: .int64, isOptional: true, reference: Reference(entity: "Team", onDelete: .nullify)),
                ], primaryKey: "id")
            let registered = try await store.register([badge, child, parent])
            let (badges, players, teams) = (registered[0], registered[1], registered[2])
            @Sendable func row(_ values: Value...) -> Row {
                var row = Row()
                for value in values { row.append(value) }
                return row
            }
            try await store.write { transaction in
                try transaction.insert(row(.int(1), .int(10)), into: teams)
                try transaction.insert(row(.int(10), .int(1)), into: players)
                try transaction.insert(row(.int(2), .int(20)), into: teams)
                try transaction.insert(row(.int(20), .int(2)), into: players)
                try transaction.insert(row(.int(200), .int(20), .int(2)), into: badges)
            }
            try await store.write { transaction in
                _ = try transaction.delete(key: .int(1), from: teams)
            }
            try await expectEqual(store.read { try $0.count(Query(all: players)) }, 1, "team 1 went with its captain, who denied only as long as the team stayed")
            let denied = try await store.write { transaction in
                do {
                    _ = try transaction.delete(key: .int(2), from: teams)
                    return false
                } catch let error as DepotError where error.code == .deleteDenied {
                    return error.message.contains("Badge 200")
                }
            }
            try expect(denied, "player 20's badge denies the cascade from team 2, and is named")
            try await expectEqual(store.read { try $0.count(Query(all: players)) }, 1, "the player is kept")
            try await expectEqual(store.read { try $0.count(Query(all: teams)) }, 1, "and the team")
            let badgeTeam = try await store.read { transaction in
                var team: Value?
                _ = try transaction.fetchRow(badges, key: .int(200)) { team = try $0.value(2) }
                return team
            }
            try expectEqual(badgeTeam, .int(2), "and the badge's nullify did not happen")
        },
        ConformanceCheck("nullify sets the referencing attribute to nil and keeps the records") { store in
            let (owners, dogs, _) = try await seeded(store)
            try await expect(owners.delete(id: "ann"), "Ann existed")
            try await expectEqual(dogs.fetchAll().map(\.ownerID), [nil, nil, nil], "Ann's dogs have no owner")
            try await expectEqual(dogs.fetchAll().map(\.name), ["Rex", "Fido", "Stray"], "and are otherwise unchanged")
        },
        ConformanceCheck("deny refuses a delete while referencing records exist, naming them, and keeps everything") { store in
            let (_, dogs, walks) = try await seeded(store)
            let licences = Licences(store: store)
            try await licences.save(Licence(id: licenceA, dogID: 1, number: "L-1"))
            do {
                _ = try await dogs.delete(id: 1)
                throw ConformanceFailure(message: "deleting a licensed dog succeeded", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expectEqual(error.code, .deleteDenied, "code")
                try expect(error.message.contains(licenceA.uuidString) || error.message.contains(licenceA.uuidString.lowercased()), "the error names the licence: \(error.message)")
            }
            try await expectEqual(dogs.count(), 3, "the dog is kept")
            try await expectEqual(walks.count(), 5, "and so are its walks, though their rule is cascade")
            // Removing the licence first, in the same write, lets the delete through.
            let handles = try await store.register(Licence.self, Dog.self)
            try await store.write { transaction in
                _ = try Context<Licence, Licence>(transaction, entity: handles[0]).delete(id: licenceA)
                _ = try Context<Dog, Dog>(transaction, entity: handles[1]).delete(id: 1)
            }
            try await expectEqual(dogs.fetchAll().map(\.id), [2, 3], "the unlicensed dog went")
        },
        ConformanceCheck("no action: a delete leaving references fails at the end of the write; removing them too succeeds") { store in
            let (_, dogs, _) = try await seeded(store)
            let photos = Photos(store: store)
            try await photos.save([Photo(id: 1, dogID: 2), Photo(id: 2, dogID: nil)])
            try await expectError(.missingReference, "deleting a photographed dog") { try await dogs.delete(id: 2) }
            try await expectEqual(dogs.count(), 3, "the dog is kept")
            let handles = try await store.register(Dog.self, Photo.self)
            try await store.write { transaction in
                _ = try transaction.delete(key: .int(2), from: handles[0])
                _ = try transaction.delete(key: .int(1), from: handles[1])
            }
            try await expectEqual(dogs.fetchAll().map(\.id), [1, 3], "the dog went with its photo, deleted after it")
            try await store.write { transaction in
                _ = try transaction.delete(key: .int(3), from: handles[0])
                try Context<Dog, Dog>(transaction, entity: handles[0]).insert(Dog(id: 3, name: "Back", ownerID: nil))
            }
            try await expectEqual(dogs.fetchOne(id: 3)?.name, "Back", "a record deleted and written again keeps its references valid")
        },
        ConformanceCheck("deleteAll(where:) applies the rules to every record it deletes") { store in
            let (owners, dogs, walks) = try await seeded(store)
            try await expectEqual(dogs.deleteAll(where: \.id >= 2), 2, "two dogs")
            try await expectEqual(walks.fetchAll().map(\.id), [10, 11, 14], "their walks went with them")
            try await expectEqual(owners.deleteAll(where: Request<Owner>.all), 2, "both owners")
            try await expectEqual(dogs.fetchAll().map(\.ownerID), [nil], "Rex has no owner")
        },
        ConformanceCheck("registering a record type registers what it refers to; an unknown or mistyped target is refused") { store in
            let walks = Walks(store: store)
            try await expectEqual(walks.count(), 0, "a walk controller used first")
            try await expectEqual(Owners(store: store).count(), 0, "registered the dog and the owner too")
            let stray = try EntityDescription(
                name: "Stray",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "homeID", type: .int64, reference: Reference(entity: "Home")),
                ], primaryKey: "id")
            try await expectError(.invalidSchema, "a reference to an entity the store does not know") { try await store.register(stray) }
            let mistyped = try EntityDescription(
                name: "Mistyped",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "ownerID", type: .int64, reference: Reference(entity: "Owner")),
                ], primaryKey: "id")
            try await expectError(.invalidSchema, "a reference of another type than the key") { try await store.register(mistyped) }
            let notNullable = try EntityDescription(
                name: "Unnullable",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "ownerID", type: .string, reference: Reference(entity: "Owner", onDelete: .nullify)),
                ], primaryKey: "id")
            try await expectError(.invalidSchema, "nullify on a non-optional attribute") { try await store.register(notNullable) }
            let both = [
                try EntityDescription(
                    name: "Child",
                    attributes: [
                        AttributeDescription(name: "id", type: .string),
                        AttributeDescription(name: "parentID", type: .uuid, reference: Reference(entity: "Parent", onDelete: .cascade)),
                    ], primaryKey: "id"),
                try EntityDescription(name: "Parent", attributes: [AttributeDescription(name: "id", type: .uuid)], primaryKey: "id"),
            ]
            let handles = try await store.register(both)
            try expect(handles[0].entity.attributes[1].isIndexed, "a reference is indexed")
            try await expectError(.missingReference, "the raw transaction API is checked as well") {
                try await store.write { transaction in
                    var row = Row()
                    row.append(.string("c"))
                    row.append(.uuid(licenceA))
                    try transaction.insert(row, into: handles[0])
                }
            }
        },
        ConformanceCheck("adding an optional reference is an additive change; changing or removing one is refused") { store in
            let plain = try EntityDescription(
                name: "Leash", attributes: [AttributeDescription(name: "id", type: .int64)], primaryKey: "id")
            let (_, dogs, _) = try await seeded(store)
            let leash = try await store.register(plain)
            try await store.write { transaction in
                var row = Row()
                row.append(.int(1))
                try transaction.insert(row, into: leash)
            }
            var withReference = plain
            withReference.attributes.append(AttributeDescription(name: "dogID", type: .int64, isOptional: true, reference: Reference(entity: "Dog", onDelete: .cascade)))
            let migrated = try await store.register(withReference)
            let dogIDs = try await store.read { transaction in
                var values: [Value] = []
                try transaction.fetch(Query(all: migrated), reserve: { _ in }) { values.append(try $0.value(1)) }
                return values
            }
            try expectEqual(dogIDs, [.null], "existing records refer to nothing")
            try await store.write { transaction in
                var row = Row()
                row.append(.int(2))
                row.append(.int(1))
                try transaction.insert(row, into: migrated)
            }
            _ = try await dogs.delete(id: 1)
            try await expectEqual(store.read { try $0.count(Query(all: migrated)) }, 1, "the new reference cascades")
            var changedRule = withReference
            changedRule.attributes[1].reference = Reference(entity: "Dog", onDelete: .nullify)
            try await expectError(.schemaMismatch, "a changed delete rule") { try await store.register(changedRule) }
            var dropped = withReference
            dropped.attributes[1].reference = nil
            try await expectError(.schemaMismatch, "a removed reference") { try await store.register(dropped) }
            var required = withReference
            required.attributes.append(AttributeDescription(name: "ownerID", type: .string, reference: Reference(entity: "Owner")))
            try await expectError(.schemaMismatch, "a new reference that is neither optional nor defaulted") { try await store.register(required) }
            var defaulted = withReference
            defaulted.attributes.append(AttributeDescription(name: "favouriteID", type: .int64, defaultValue: .int(99), reference: Reference(entity: "Dog")))
            try await expectError(.schemaMismatch, "a new reference whose default names no record") { try await store.register(defaulted) }
            defaulted.attributes[2].defaultValue = .int(2)
            let withDefault = try await store.register(defaulted)
            let favourites = try await store.read { transaction in
                var values: [Value] = []
                try transaction.fetch(Query(all: withDefault), reserve: { _ in }) { values.append(try $0.value(2)) }
                return values
            }
            try expectEqual(favourites, [.int(2)], "existing records refer to the default")
            try await expectError(.missingReference, "the defaulted reference is enforced") { try await dogs.delete(id: 2) }
        },
        ConformanceCheck("a write that breaks a reference fails alone among writes committed together") { store in
            let (_, _, walks) = try await seeded(store)
            let results = await withTaskGroup(of: (Int64, Bool).self) { group in
                for id in Int64(100)..<Int64(116) {
                    group.addTask {
                        do {
                            try await walks.insert(Walk(id: id, dogID: id == 107 ? 404 : 1 + id % 3, minutes: 1))
                            return (id, true)
                        } catch {
                            return (id, false)
                        }
                    }
                }
                var all: [Int64: Bool] = [:]
                for await (id, ok) in group { all[id] = ok }
                return all
            }
            try expectEqual(results.filter { !$0.value }.map(\.key), [107], "only the bad write failed")
            try await expectEqual(walks.count(), 5 + 15, "every other write was kept")
        },
    ]
}
