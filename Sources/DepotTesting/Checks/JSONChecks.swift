import DepotCore
import Foundation
import NIOConcurrencyHelpers

/// JSON import and export: every conversion, every error, and exact round trips.
enum JSONChecks {
    struct Spec: Codable, Hashable, JSONAttribute {
        var size: Int
        var colour: String
    }

    @Record(name: "Gadget")
    struct Gadget: Hashable {
        var id: Int64
        var name: String
        var price: Double
        var inStock: Bool
        var added: Date
        var serial: UUID
        var blob: Data?
        var note: String?
        var count: Int?
        var spec: Spec?
        var rating: Double = 3
    }

    typealias Gadgets = Controller<Gadget, Gadget>

    /// A record that refers to its own entity (a manager), for the order of writes.
    @Record(name: "Staff")
    struct Staff: Hashable {
        var id: Int64
        var name: String
        @Stored(.references(Staff.self)) var manager: Int64?
    }

    static let serial = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!

    static func json(_ text: String) -> Data { Data(text.utf8) }

    static func importing(_ store: any Store, _ text: String, options: JSONImportOptions = JSONImportOptions()) async throws -> JSONImportReport {
        try await Gadgets(store: store).importJSON(json(text), options: options)
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("JSON import converts what APIs send: numbers and strings both ways, booleans, dates, UUIDs, nested objects, nulls, renamed keys") { store in
            var options = JSONImportOptions(keys: ["name": "title"])
            options.dateFormats = [.iso8601, .secondsSince1970, .formatted("dd/MM/yyyy HH:mm")]
            let report = try await importing(store, """
                [
                  {"id": "1", "title": 42, "price": 3, "inStock": 1, "added": "2026-11-23T18:07:36.250+01:00",
                   "serial": "e621e1f8-c36c-495a-93fc-0c247a3e6e5f", "blob": "AAEC", "note": null, "count": "7",
                   "spec": {"size": 2, "colour": "red"}, "extra": [1, 2]},
                  {"id": 2.0, "title": "Lamp", "price": "19.5", "inStock": "false", "added": 1700000000,
                   "serial": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "count": 1e3, "rating": "NaN"},
                  {"id": 3, "title": "Clock", "price": -0.0, "inStock": true, "added": "23/11/2026 09:30",
                   "serial": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F", "note": "caf\\u00e9 \\ud83d\\ude00"}
                ]
                """, options: options)
            try expectEqual(report.inserted, 3, "inserted")
            let gadgets = try await Gadgets(store: store).fetchAll()
            try expectEqual(gadgets.map(\.name), ["42", "Lamp", "Clock"], "a number into a string, and a renamed key")
            try expectEqual(gadgets.map(\.price), [3, 19.5, 0], "an integer and a numeric string into doubles")
            // -0.0 reads back as 0.0 from SQLite (documented in DepotSQLite); its value is zero.
            try expect(gadgets[2].price == 0, "negative zero")
            try expectEqual(gadgets.map(\.inStock), [true, false, true], "booleans from 1, \"false\" and true")
            try expectEqual(gadgets[0].added, Date(timeIntervalSince1970: 1_795_453_656.25), "ISO 8601 with a fraction and an offset")
            try expectEqual(gadgets[1].added, Date(timeIntervalSince1970: 1_700_000_000), "seconds since 1970")
            try expectEqual(gadgets[2].added, Date(timeIntervalSince1970: 1_795_426_200), "a caller's pattern, in UTC")
            try expectEqual(gadgets.map(\.serial), [serial, serial, serial], "UUIDs in either case")
            try expectEqual(gadgets[0].blob, Data([0, 1, 2]), "base64 into bytes")
            try expectEqual(gadgets.map(\.note), [nil, nil, "café 😀"], "null and a missing key into nil; escapes and surrogate pairs")
            try expectEqual(gadgets.map(\.count), [7, 1000, nil], "a numeric string and 1e3 into integers")
            try expectEqual(gadgets[0].spec, Spec(size: 2, colour: "red"), "a nested object into a Codable attribute")
            try expect(gadgets[1].rating.isNaN, "\"NaN\" into a double")
            try expectEqual(gadgets[0].rating, 3, "a missing key takes the default on insert")
        },
        ConformanceCheck("JSON import upserts: missing keys keep stored values, null clears them") { store in
            let gadgets = Gadgets(store: store)
            try await gadgets.save(Gadget(id: 1, name: "Old", price: 1, inStock: true, added: Date(timeIntervalSince1970: 0), serial: serial, blob: nil, note: "kept", count: 5, spec: nil))
            let report = try await importing(store, #"[{"id": 1, "name": "New", "count": null}, {"id": 2, "name": "Fresh", "price": 2, "inStock": false, "added": 0, "serial": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"}]"#)
            try expectEqual([report.inserted, report.updated], [1, 1], "one new, one updated")
            let old = try await gadgets.fetchOne(id: 1)
            try expectEqual(old?.name, "New", "a given key is written")
            try expectEqual(old?.note, "kept", "a missing key keeps the stored value")
            try expectEqual(old?.count, nil, "null clears an optional")
            try expectEqual(old?.price, 1, "and everything else is unchanged")
        },
        ConformanceCheck("JSON import errors name the element, key, value and expected type; nothing is written, or the element is skipped") { store in
            let gadgets = Gadgets(store: store)
            let good = #"{"id": 1, "name": "A", "price": 1, "inStock": true, "added": 0, "serial": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"}"#
            let bad = #"{"id": 2, "name": "B", "price": "cheap", "inStock": true, "added": 0, "serial": "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"}"#
            do {
                _ = try await importing(store, "[\(good), \(bad)]")
                throw ConformanceFailure(message: "a bad price was imported", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expectEqual(error.code, .conversionFailed, "code")
                for part in ["Element 1", "\"price\"", "\"cheap\"", "a number"] {
                    try expect(error.message.contains(part), "the message names \(part): \(error.message)")
                }
            }
            try await expectEqual(gadgets.count(), 0, "nothing was written")
            let report = try await importing(store, "[\(good), \(bad), 17]", options: JSONImportOptions(invalidElements: .skip))
            try expectEqual(report.inserted, 1, "the good element")
            try expectEqual(report.skipped.map(\.index), [1, 2], "the bad ones are reported")
            try expectEqual(report.skipped.first?.key, "price", "with the key")
            try expectEqual(report.skipped.first?.value, "\"cheap\"", "the value")
            try await expectError(.conversionFailed, "an unknown key, refused") {
                try await importing(store, #"[{"id": 9, "colour": "blue"}]"#, options: JSONImportOptions(unknownKeys: .refuse))
            }
            try await expectError(.conversionFailed, "no primary key") { try await importing(store, #"[{"name": "anonymous"}]"#) }
            try await expectError(.conversionFailed, "a new record missing a required key") { try await importing(store, #"[{"id": 10, "name": "half"}]"#) }
            try await expectError(.conversionFailed, "null for a required attribute") { try await importing(store, #"[{"id": 1, "name": null}]"#) }
            for malformed in ["", "{}", "[", "[{\"id\": 1,}]", "[{\"id\": 1}] x", "[{\"id\": 01}]", "[\"\\ud800\"]", "[tru]"] {
                try await expectError(.conversionFailed, "malformed JSON \(malformed)") { try await importing(store, malformed) }
            }
            try await expectEqual(gadgets.count(), 1, "still only the one good element")
        },
        ConformanceCheck("JSON export then import gives back exactly the same records") { store in
            let gadgets = Gadgets(store: store)
            // A subnormal rating (the double nearest 1e-310), given by its bits: the literal
            // 1e-310 draws an underflow warning.
            let subnormal = Double(bitPattern: 0x0000_1268_8B70_E62B)
            let odd: [Gadget] = [
                Gadget(id: -5, name: "\"quoted\" \\ back\nslash\u{1}", price: .nan, inStock: false, added: Date(timeIntervalSinceReferenceDate: 0.1), serial: serial, blob: Data(), note: "", count: Int.min, spec: Spec(size: -1, colour: "ü")),
                Gadget(id: 0, name: "∞", price: .infinity, inStock: true, added: Date(timeIntervalSinceReferenceDate: -1e9 + 0.000123), serial: UUID(), blob: Data([255, 0]), note: nil, count: Int.max, spec: nil, rating: -.infinity),
                Gadget(id: 7, name: "x", price: -0.0, inStock: true, added: Date(timeIntervalSinceReferenceDate: 815_000_000.123456789), serial: UUID(), blob: nil, note: "😀", count: nil, spec: nil, rating: subnormal),
                Gadget(id: 8, name: "y", price: 0.1 + 0.2, inStock: true, added: Date(timeIntervalSince1970: 0), serial: UUID(), blob: nil, note: nil, count: 0, spec: nil, rating: 1.7976931348623157e308),
            ]
            // Enough for three pages of a streamed export.
            var many: [Gadget] = odd
            for id in 100..<2_600 {
                let added = Date(timeIntervalSince1970: Double(id) * 1.001)
                many.append(Gadget(id: Int64(id), name: "g\(id)", price: Double(id) / 7, inStock: id % 2 == 0, added: added, serial: UUID(), blob: nil, note: nil, count: id, spec: nil))
            }
            try await gadgets.save(many)
            let handle = try await gadgets.registeredEntity()
            @Sendable func rows() async throws -> [Row] {
                try await store.read { transaction in
                    var rows: [Row] = []
                    try transaction.fetch(Query(all: handle), reserve: { _ in }) { rows.append(try $0.row()) }
                    return rows
                }
            }
            let before = try await rows()
            let exported = try await gadgets.exportJSON()
            try await expectEqual(gadgets.deleteAll(where: Request<Gadget>.all), before.count, "deleted")
            let report = try await gadgets.importJSON(exported)
            try expectEqual(report.inserted, before.count, "every record imported")
            try await expectEqual(rows(), before, "the same values, bit for bit (NaN, -0.0, infinities, dates, bytes, text)")
            try await expectEqual(gadgets.exportJSON(), exported, "and the same JSON again")

            let file = FileManager.default.temporaryDirectory.appendingPathComponent("depot-export-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: file) }
            let written = NIOLockedValueBox<[Int]>([])
            try await expectEqual(
                JSONExport.write(Query(all: handle), of: store, progress: { count in written.withLockedValue { $0.append(count) } }, to: file),
                before.count, "exported to a file")
            let pages = written.withLockedValue { $0 }
            try expect(pages.count >= 3 && pages.last == before.count && pages == pages.sorted(), "export progress after each page, up to the total: \(pages)")
            _ = try await gadgets.deleteAll(where: Request<Gadget>.all)
            let seen = NIOLockedValueBox<[JSONImportProgress]>([])
            var fileOptions = JSONImportOptions(commit: .everyBatch(1_000))
            fileOptions.progress = { step in seen.withLockedValue { $0.append(step) } }
            try await expectEqual(gadgets.importJSON(contentsOf: file, options: fileOptions).inserted, before.count, "imported from the file")
            try await expectEqual(rows(), before, "the file round-trips too")
            let steps = seen.withLockedValue { $0 }
            let last = steps.last
            try expect(
                last?.bytesRead == exported.count && last?.elementsRead == before.count && last?.elementsCommitted == before.count,
                "import progress ends at the file's size and every element: \(String(describing: last)) of \(exported.count) bytes")
            try expect(
                zip(steps, steps.dropFirst()).allSatisfy {
                    $0.bytesRead <= $1.bytesRead && $0.elementsRead <= $1.elementsRead && $0.elementsCommitted <= $1.elementsCommitted
                }, "import progress never goes back")
            try expect(steps.contains { $0.elementsCommitted == 1_000 }, "each batch is reported as it commits")
            let stream = AsyncStream<UInt8> { continuation in
                for byte in exported { continuation.yield(byte) }
                continuation.finish()
            }
            try await expectEqual(JSONImport.run(bytes: stream, into: handle, of: store).updated, before.count, "a stream of bytes")
            let some = try await gadgets.exportJSON(Request(\.id < 1).sorted(by: \.name), keys: ["name": "title"])
            let text = String(decoding: some, as: UTF8.self)
            try expect(text.contains("\"title\":\"∞\"") && !text.contains("\"g100\""), "a request's records, with renamed keys: \(text.prefix(200))")
            try await expectEqual(gadgets.exportJSON(Request(\.id > 1_000_000)), json("[]\n"), "an empty export is an empty array")
        },
        ConformanceCheck("JSON import links references from keys and nested objects, in any order, in batches or at once") { store in
            typealias Walk = RelationshipChecks.Walk
            typealias Dog = RelationshipChecks.Dog
            let walks = Controller<Walk, Walk>(store: store)
            let dogs = Controller<Dog, Dog>(store: store)
            let elements = """
                [{"id": 1, "dogID": 7, "minutes": 3},
                 {"id": 2, "dogID": 8, "minutes": 4},
                 {"id": 3, "dogID": {"id": 7, "name": "Late", "ownerID": {"id": "zed", "name": "Zed"}}, "minutes": 5},
                 {"id": 4, "dogID": {"id": 8, "name": "Later"}, "minutes": 6}]
                """
            let report = try await walks.importJSON(json(elements), options: JSONImportOptions(commit: .everyBatch(1)))
            try expectEqual([report.inserted, report.related], [4, 3], "four walks, two dogs and an owner")
            try await expectEqual(walks.fetchAll().map(\.dogID), [7, 8, 7, 8], "walks written before their dogs were linked at the end")
            try await expectEqual(dogs.fetchOne(id: 7)?.ownerID, "zed", "a nested object inside a nested object")
            _ = try await walks.deleteAll(where: Request<Walk>.all)
            try await expectEqual(walks.importJSON(json(elements)).inserted, 4, "the same in one transaction")
            try await expectError(.missingReference, "a reference to a record the import never brings") {
                try await walks.importJSON(json(#"[{"id": 9, "dogID": 99, "minutes": 1}]"#))
            }
            let batches = """
                [{"id": 20, "dogID": 7, "minutes": 1}, {"id": 21, "dogID": 7, "minutes": 1},
                 {"id": 22, "dogID": 7, "minutes": "long"}, {"id": 23, "dogID": 7, "minutes": 1}]
                """
            do {
                _ = try await walks.importJSON(json(batches), options: JSONImportOptions(commit: .everyBatch(2)))
                throw ConformanceFailure(message: "a bad element was imported", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expect(error.message.contains("Element 2") && error.message.contains("2 elements"), "the error says what was committed: \(error.message)")
            }
            try await expectEqual(walks.count(Request(\.id >= 20)), 2, "the first batch is committed, nothing after it")
            // A chain inside one batch waiting for a later one: 4 refers to 3, which waits for 2.
            let nodes = Controller<RelationshipChecks.Node, RelationshipChecks.Node>(store: store)
            let chain = #"[{"id": 3, "parentID": 2}, {"id": 4, "parentID": 3}, {"id": 2, "parentID": 1}, {"id": 1, "parentID": null}]"#
            try await expectEqual(nodes.importJSON(json(chain), options: JSONImportOptions(commit: .everyBatch(2))).inserted, 4, "a chain across batches")
            try await expectError(.invalidConfiguration, "a key mapping naming no attribute") {
                try await nodes.importJSON(json("[]"), options: JSONImportOptions(keys: ["parent": "p"]))
            }
            try await expectError(.invalidConfiguration, "two attributes read from one key") {
                try await nodes.importJSON(json("[]"), options: JSONImportOptions(keys: ["parentID": "id"]))
            }
        },
        ConformanceCheck("JSON import: a later element for a key wins in every commit mode, also when an earlier one waits for a reference") { store in
            let staff = Controller<Staff, Staff>(store: store)
            let modes: [JSONImportOptions.Commit] = [.atEnd, .everyBatch(1), .everyBatch(2), .everyBatch(3), .everyBatch(1_000)]
            for (round, mode) in modes.enumerated() {
                let base = Int64(round * 100)
                // Element 0 waits for its manager (element 2); element 1, a later one for the
                // same key, must not be overwritten by it.
                let direct = """
                    [{"id": \(base + 1), "name": "old", "manager": \(base + 3)}, {"id": \(base + 1), "name": "new"}, {"id": \(base + 3), "name": "boss"}]
                    """
                let report = try await staff.importJSON(json(direct), options: JSONImportOptions(commit: mode))
                try expectEqual([report.inserted, report.updated], [2, 1], "\(mode): two records, one updated")
                try await expectEqual(staff.fetchOne(id: base + 1), Staff(id: base + 1, name: "new", manager: base + 3), "\(mode): the later element wins, the earlier one's manager kept")
                // The same through a nested record: element 0's nested manager waits for its
                // own manager; element 1 writes that nested record again, later.
                let nested = """
                    [{"id": \(base + 5), "name": "e", "manager": {"id": \(base + 6), "name": "six old", "manager": \(base + 7)}},
                     {"id": \(base + 6), "name": "six new"},
                     {"id": \(base + 7), "name": "seven"},
                     {"id": \(base + 6), "name": "six newest", "manager": null}]
                    """
                _ = try await staff.importJSON(json(nested), options: JSONImportOptions(commit: mode))
                try await expectEqual(staff.fetchOne(id: base + 6), Staff(id: base + 6, name: "six newest", manager: nil), "\(mode): the last element for a nested record's key wins")
                try await expectEqual(staff.fetchOne(id: base + 5)?.manager, base + 6, "\(mode): the waiting element is written")
            }
        },
        ConformanceCheck("JSON import in batches bounds the elements waiting for references and the skipped reports") { store in
            let staff = Controller<Staff, Staff>(store: store)
            // Each child comes just before its manager: waiting elements are written with the
            // next batch, so one waiting element at a time is enough for 50 such pairs.
            var pairs: [String] = []
            for i in 0..<50 { pairs += [#"{"id": \#(2 * i + 1), "name": "c", "manager": \#(2 * i + 2)}"#, #"{"id": \#(2 * i + 2), "name": "m"}"#] }
            var tight = JSONImportOptions(commit: .everyBatch(1))
            tight.maximumWaiting = 1
            try await expectEqual(staff.importJSON(json("[" + pairs.joined(separator: ",") + "]"), options: tight).inserted, 100, "children before their managers, one at a time")
            try await expectEqual(staff.count(Request(\.manager != nil)), 50, "every child linked")
            // Five children before a manager that comes last: more than two would wait.
            var children: [String] = (0..<5).map { #"{"id": \#(1_000 + $0), "name": "c", "manager": 1999}"# }
            children.append(#"{"id": 1999, "name": "m"}"#)
            var two = JSONImportOptions(commit: .everyBatch(1))
            two.maximumWaiting = 2
            do {
                _ = try await staff.importJSON(json("[" + children.joined(separator: ",") + "]"), options: two)
                throw ConformanceFailure(message: "more elements waited than maximumWaiting allows", file: #fileID, line: #line)
            } catch let error as DepotError {
                try expectEqual(error.code, .missingReference, "code")
                try expect(error.message.contains("maximumWaiting") && error.message.contains("element 0;"), "the message names the option and the first waiting element: \(error.message)")
            }
            try await expectEqual(staff.count(Request(\.id >= 1_000)), 0, "nothing of the waiting elements written")
            two.maximumWaiting = 5
            try await expectEqual(staff.importJSON(json("[" + children.joined(separator: ",") + "]"), options: two).inserted, 6, "within the bound")
            // Skipped reports are bounded too, in every mode.
            let invalid = "[" + (0..<5).map { #"{"id": \#(3_000 + $0), "name": null}"# }.joined(separator: ",") + #", {"id": 3999, "name": "fine"}]"#
            for mode in [JSONImportOptions.Commit.atEnd, .everyBatch(2)] {
                var skipping = JSONImportOptions(invalidElements: .skip, commit: mode)
                skipping.maximumSkipped = 3
                do {
                    _ = try await staff.importJSON(json(invalid), options: skipping)
                    throw ConformanceFailure(message: "\(mode): more elements skipped than maximumSkipped allows", file: #fileID, line: #line)
                } catch let error as DepotError {
                    try expectEqual(error.code, .conversionFailed, "\(mode): code")
                    try expect(error.message.contains("maximumSkipped") && error.message.contains("Element 0"), "\(mode): the message names the option and the first problem: \(error.message)")
                }
                skipping.maximumSkipped = 5
                let report = try await staff.importJSON(json(invalid), options: skipping)
                try expectEqual(report.skipped.map(\.index), [0, 1, 2, 3, 4], "\(mode): within the bound, every problem listed")
            }
            // Elements found invalid as they are written (new records without a name): the
            // transaction that would exceed the bound is rolled back, not committed first.
            let incomplete = "[" + #"{"id": 4999, "name": "fine"}, "# + (0..<5).map { #"{"id": \#(4_000 + $0)}"# }.joined(separator: ",") + "]"
            var atEnd = JSONImportOptions(invalidElements: .skip)
            atEnd.maximumSkipped = 3
            try await expectError(.conversionFailed, "more incomplete elements than maximumSkipped") { try await staff.importJSON(json(incomplete), options: atEnd) }
            try await expectEqual(staff.fetchOne(id: 4_999), nil, "nothing of the one transaction is written")
        },
        ConformanceCheck("JSON export then import keeps every date's bits: negative, sub-second, subnormal, huge") { store in
            let gadgets = Gadgets(store: store)
            let seconds: [Double] = [
                -0.1, -1e-07, 1.2345678901234568e-05, -0.9, 0.1, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, -1e9 + 0.000123,
                1e11, -1e11, 0x1p37 - 0x1p-15, 252_423_993_600.000_03, -63_113_904_000.000_01, 1e300, -.greatestFiniteMagnitude,
            ]
            let records = seconds.enumerated().map { i, t in
                Gadget(id: Int64(i), name: "d\(i)", price: 1, inStock: true, added: Date(timeIntervalSinceReferenceDate: t), serial: serial, blob: nil, note: nil, count: nil, spec: nil)
            }
            try await gadgets.save(records)
            let stored = try await gadgets.fetchAll().map(\.added.timeIntervalSinceReferenceDate.bitPattern)
            try expectEqual(stored, seconds.map(\.bitPattern), "the store keeps every date")
            let exported = try await gadgets.exportJSON()
            _ = try await gadgets.deleteAll(where: Request<Gadget>.all)
            _ = try await gadgets.importJSON(exported)
            let back = try await gadgets.fetchAll().map(\.added.timeIntervalSinceReferenceDate)
            for (t, read) in zip(seconds, back) {
                try expect(read.bitPattern == t.bitPattern, "\(t) s came back as \(read) s")
            }
            try expectEqual(back.count, seconds.count, "every record")
        },
        ConformanceCheck("a store lists its entities, passes its checks, and copies to another store verified") { store in
            let (_, dogs, _) = try await RelationshipChecks.seeded(store)
            let names = Set(try await store.storedEntities().map(\.name))
            try expect(names.isSuperset(of: ["Owner", "Dog", "Walk"]), "the registered entities are listed: \(names)")
            try await expectEqual(StoreChecks.run(store), [], "no broken reference, no shared unique value")
            try await expectEqual(store.checkIntegrity(), [], "the backend's own check")
            // Two entities referring to each other: copied whatever the order.
            let team = try EntityDescription(
                name: "Squad",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "captainID", type: .int64, isOptional: true, reference: Reference(entity: "Athlete")),
                ], primaryKey: "id")
            let athlete = try EntityDescription(
                name: "Athlete",
                attributes: [
                    AttributeDescription(name: "id", type: .int64),
                    AttributeDescription(name: "squadID", type: .int64, reference: Reference(entity: "Squad")),
                ], primaryKey: "id")
            let cycle = try await store.register([team, athlete])
            try await store.write { transaction in
                var squad = Row()
                squad.append(.int(1))
                squad.append(.int(10))
                try transaction.insert(squad, into: cycle[0])
                var member = Row()
                member.append(.int(10))
                member.append(.int(1))
                try transaction.insert(member, into: cycle[1])
            }
            let copy = MemoryStore()
            let reports = try await StoreCopy.run(from: store, to: copy)
            try expect(reports.contains { $0.entity == "Squad" && $0.targetRecords == 1 } && reports.contains { $0.entity == "Athlete" && $0.targetRecords == 1 }, "a reference cycle is copied: \(reports)")
            try expect(reports.allSatisfy(\.verified), "every entity verified: \(reports)")
            try expectEqual(reports.first { $0.entity == "Walk" }?.targetRecords, 5, "the walks")
            try await expectEqual(Controller<RelationshipChecks.Dog, RelationshipChecks.Dog>(store: copy).fetchAll(), dogs.fetchAll(), "the same dogs")
            await copy.close()
        },
    ]
}
