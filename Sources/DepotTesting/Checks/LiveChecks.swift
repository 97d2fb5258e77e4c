import DepotCore
import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// Lazy result sets, streaming, and observation with change sets.
enum LiveChecks {
    /// Checks a change set against the two results it claims to connect, recomputed here
    /// independently of ``ChangeSet/diff(from:to:key:same:)``.
    static func verify(_ changes: ChangeSet, from old: [Cat], to new: [Cat], _ what: String) throws {
        let oldIDs = Set(old.map(\.id))
        let newIDs = Set(new.map(\.id))
        try expectEqual(Set(changes.deleted.map { old[$0].id }), oldIDs.subtracting(newIDs), "\(what): deleted")
        try expectEqual(Set(changes.inserted.map { new[$0].id }), newIDs.subtracting(oldIDs), "\(what): inserted")
        let oldByID = Dictionary(uniqueKeysWithValues: old.map { ($0.id, $0) })
        let changed = Set(new.filter { cat in oldByID[cat.id].map { $0 != cat } ?? false }.map(\.id))
        try expectEqual(Set(changes.updated.map { new[$0].id }), changed, "\(what): updated")
        for move in changes.moved {
            try expectEqual(old[move.from].id, new[move.to].id, "\(what): a move connects the same record")
        }
        // Records that did not move keep their relative order.
        let moved = Set(changes.moved.map { new[$0.to].id })
        let stayedOld = old.map(\.id).filter { newIDs.contains($0) && !moved.contains($0) }
        let stayedNew = new.map(\.id).filter { oldIDs.contains($0) && !moved.contains($0) }
        try expectEqual(stayedNew, stayedOld, "\(what): unmoved records keep their order")
    }

    final class Deliveries: Sendable {
        let items = NIOLockedValueBox<[ObservedResult<Cat>]>([])
        var count: Int { items.withLockedValue { $0.count } }
        func add(_ item: ObservedResult<Cat>) { items.withLockedValue { $0.append(item) } }
        var last: ObservedResult<Cat>? { items.withLockedValue { $0.last } }
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("result sets chain lazily and count without fetching") { store in
            let cats = try await seededCats(store)
            let old = cats.results.filter(\.age >= 7).sorted(by: \.age, ascending: false).sorted(by: \.name)
            try await expectEqual(old.count(), 6, "count")
            try await expectEqual(old.fetchAll().map(\.id), [8, 1, 6, 10, 2, 3], "order")
            try await expectEqual(old.first()?.id, 8, "first")
            try await expectEqual(old.isEmpty(), false, "isEmpty")
            try await expectEqual(cats.results.filter(\.age > 99).isEmpty(), true, "isEmpty of nothing")
            try await expectEqual(old[2]?.id, 6, "subscript")
            try await expectEqual(old[6]?.id, nil, "subscript past the end")
            try await expectEqual(old.offset(1).limit(2)[1]?.id, 6, "subscript inside offset and limit")
            try await expectEqual(old.offset(1).limit(2)[2]?.id, nil, "subscript past the limit")
            try await expectEqual(cats.results.filter(\.age == 1).or(\.age == 15).fetchAll().map(\.id), [7, 8], "or")
            try await expectEqual(cats.results.filter("age", equalTo: 3).count(), 2, "filter by name")
        },
        ConformanceCheck("result set delete and update act on exactly their records") { store in
            let cats = try await seededCats(store)
            let removed = try await cats.results.filter(\.age == 7).sorted(by: \.weight).limit(2).delete()
            try expectEqual(removed, 2, "deleted")
            try await expectEqual(cats.results.filter(\.age == 7).fetchAll().map(\.id), [3], "the heaviest age-7 cat stays")
            let renamed = try await cats.results.filter(\.age == 3).update { Cat(id: $0.id, name: $0.name + "!", weight: $0.weight, age: 4) }
            try expectEqual(renamed, 2, "updated")
            try await expectEqual(cats.results.filter(\.age == 4).fetchAll().map(\.name), ["Tom!", "tom!"], "updated in place")
            try await expectEqual(cats.count(), 8, "count unchanged by update")
            try await expectError(.invalidValue, "update changing a key") {
                try await cats.results.filter(\.age == 4).update { Cat(id: $0.id + 1000, name: $0.name, weight: $0.weight, age: $0.age) }
            }
            try await expectEqual(cats.results.filter(\.age == 4).count(), 2, "nothing written by the refused update")
        },
        ConformanceCheck("streaming returns every record once, in order, a batch at a time") { store in
            let recording = RecordingStore(store)
            let cats = Controller<Cat, CatRecord>(store: recording)
            let all = Cat.workload(count: 2_000, seed: 3)
            try await cats.save(all)
            var seen: [Int64] = []
            for try await cat in cats.results.batched(128) { seen.append(cat.id) }
            try expectEqual(seen, all.map(\.id), "every record once, in key order")
            try expect(recording.largestFetch <= 128, "a batch holds at most 128 records, held \(recording.largestFetch)")
            var byAge: [Cat] = []
            for try await cat in cats.results.sorted(by: \.age, ascending: false).sorted(by: \.name).batched(50) { byAge.append(cat) }
            let expected = try await cats.fetchAll(Request().sorted(by: \.age, ascending: false).sorted(by: \.name))
            try expectEqual(byAge.map(\.id), expected.map(\.id), "sorted streaming matches fetchAll")
            var window: [Int64] = []
            for try await cat in cats.results.offset(10).limit(250).batched(100) { window.append(cat.id) }
            try expectEqual(window, Array(all.map(\.id)[10..<260]), "offset and limit across batches")
        },
        ConformanceCheck("cursor pages cover a set once, in order, with limit and offset, and end without an empty page") { store in
            let cats = Cats(store: store)
            let all = Cat.workload(count: 500, seed: 11)
            try await cats.save(all)
            let set = cats.results.sorted(by: \.age, ascending: false).sorted(by: \.name)
            let expected = try await set.fetchAll().map(\.id)
            var seen: [Int64] = []
            var token: String?
            var pages = 0
            repeat {
                // Through the token, as a client would send it back.
                let page = try await set.page(size: 37, after: try token.map { try PageCursor($0) })
                try expect(page.items.count == 37 || page.next == nil, "only the last page is short (page \(pages) has \(page.items.count))")
                seen += page.items.map(\.id)
                token = page.next?.description
                pages += 1
            } while token != nil && pages < 100
            try expectEqual(seen, expected, "every record once, in the set's order")
            try expectEqual(pages, 14, "500 records in pages of 37, the last one not empty")
            let exact = try await cats.results.sorted(by: \.name).limit(40).page(size: 20)
            let second = try await cats.results.sorted(by: \.name).limit(40).page(size: 20, after: exact.next)
            try expect(second.next == nil, "no page after the set's limit")
            let window = cats.results.sorted(by: \.name).offset(5).limit(50)
            var windowed: [Int64] = []
            var cursor: PageCursor?
            var sizes: [Int] = []
            repeat {
                let page = try await window.page(size: 20, after: cursor)
                windowed += page.items.map(\.id)
                sizes.append(page.items.count)
                cursor = page.next
            } while cursor != nil && sizes.count < 10
            try expectEqual(sizes, [20, 20, 10], "the limit counts across pages")
            try await expectEqual(windowed, window.fetchAll().map(\.id), "offset on the first page, limit across pages")
            try await expectEqual(cats.results.filter(\.age > 99).page(size: 5), Page(items: [], next: nil), "an empty set is one empty page")
        },
        ConformanceCheck("a cursor page starts after its record while others are written, and refuses foreign cursors") { store in
            let cats = Cats(store: store)
            let all = Cat.workload(count: 300, seed: 12)
            try await cats.save(all)
            let set = cats.results.sorted(by: \.age).sorted(by: \.weight, ascending: false)
            let expected = try await set.fetchAll().map(\.id)
            let first = try await set.page(size: 100)
            try expectEqual(first.items.map(\.id), Array(expected[0..<100]), "first page")
            // A record sorting before the cursor and one deleted after it.
            try await cats.save(Cat(id: 9_000, name: "early", weight: 99, age: 0))
            try await cats.delete(id: expected[150])
            try await cats.delete(id: expected[99])   // the cursor's own record: the next page still starts after it
            let next = try await set.page(size: 100, after: first.next)
            try expectEqual(next.items.map(\.id), Array(expected[100..<201]).filter { $0 != expected[150] }, "neither repeats nor skips")
            guard let cursor = first.next else { throw ConformanceFailure(message: "the first page has a next cursor", file: #fileID, line: #line) }
            try await expectError(.invalidPredicate, "a cursor used with another order") {
                try await cats.results.sorted(by: \.name).page(size: 10, after: cursor)
            }
            try await expectError(.invalidPredicate, "page size 0") { try await set.page(size: 0) }
            try await expectError(.invalidPredicate, "page size -1") { try await set.page(size: -1) }
            let token = cursor.description
            try await expectError(.invalidPredicate, "a truncated cursor") { try PageCursor(token.dropLast(3)) }
            try await expectError(.invalidPredicate, "not a cursor") { try PageCursor("not a cursor!") }
            try await expectError(.invalidPredicate, "an empty cursor") { try PageCursor("") }
            try await expectError(.invalidPredicate, "a cursor with bytes appended") { try PageCursor(token + "AAAA") }
            try await expectError(.invalidPredicate, "a cursor too long") { try PageCursor(String(repeating: "A", count: 20_000)) }
            try expectEqual(try PageCursor(token), cursor, "a token reads back as its cursor")
            let huge = try await set.page(size: .max)
            try expectEqual(huge.items.count, 299, "a page size of Int.max reads to the end")
            try expect(huge.next == nil, "and has no next page")
        },
        ConformanceCheck("cursors carry every attribute type and nil through their tokens") { store in
            let samples = Controller<Sample, Sample>(store: store)
            var records: [Sample] = []
            for i in 0..<60 {
                let n = Int64(i)
                records.append(Sample(
                    id: n, int: i % 3, double: Double(i % 4) - 1.5, bool: i % 2 == 0, string: "s\(i % 5)",
                    data: Data([UInt8(i % 3), 0]), date: Date(timeIntervalSinceReferenceDate: Double(i % 7) * 1_000.25),
                    uuid: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(i % 6))),
                    optionalString: i % 4 == 0 ? nil : "o\(i % 3)", optionalDate: i % 5 == 0 ? nil : Date(timeIntervalSinceReferenceDate: Double(i % 2))))
            }
            try await samples.save(records)
            let set = samples.results.sorted(by: \.optionalString, ascending: false).sorted(by: \.bool).sorted(by: \.data)
                .sorted(by: \.optionalDate).sorted(by: \.uuid, ascending: false).sorted(by: \.date).sorted(by: \.double).sorted(by: \.string)
            let expected = try await set.fetchAll().map(\.id)
            var seen: [Int64] = []
            var token: String?
            var pages = 0
            repeat {
                let page = try await set.page(size: 7, after: try token.map { try PageCursor($0) })
                seen += page.items.map(\.id)
                token = page.next?.description
                pages += 1
            } while token != nil && pages < 20
            try expectEqual(seen, expected, "every record once across pages whose cursors hold nil, strings, data, dates, UUIDs, doubles and booleans")
        },
        ConformanceCheck("streaming while a writer commits sees each existing record once") { store in
            let cats = Cats(store: store)
            let all = Cat.workload(count: 1_500, seed: 5)
            try await cats.save(all)
            let writer = Task {
                for i in 0..<60 {
                    try await cats.save(Cat(id: Int64(10_000 + i), name: "new\(i)", weight: 1, age: 1))
                    try await cats.update(Cat(id: Int64(i * 20 + 1), name: "changed", weight: 2, age: all[i * 20].age))
                }
            }
            var counts: [Int64: Int] = [:]
            for try await cat in cats.results.batched(64) { counts[cat.id, default: 0] += 1 }
            try await writer.value
            for cat in all { try expectEqual(counts[cat.id], 1, "record \(cat.id) seen once") }
            try expect(counts.values.allSatisfy { $0 == 1 }, "no record seen twice")
        },
        ConformanceCheck("observation delivers the result, then exact change sets") { store in
            let cats = try await seededCats(store)
            var updates = cats.observe(Request(\.age >= 7).sorted(by: \.weight)).makeAsyncIterator()
            guard let initial = try await updates.next() else { throw ConformanceFailure(message: "no initial result", file: #fileID, line: #line) }
            try expect(initial.isInitial, "first delivery is initial")
            var current = try await cats.fetchAll(Request(\.age >= 7).sorted(by: \.weight))
            try expectEqual(initial.objects, current, "initial objects")
            try expectEqual(initial.changes.inserted, Array(current.indices), "initial lists every record as inserted")
            let steps: [(String, (Cats) async throws -> Void)] = [
                ("insert", { try await $0.save(Cat(id: 20, name: "Nova", weight: 5.5, age: 9)) }),
                ("update in place", { try await $0.update(Cat(id: 2, name: "Felix II", weight: 3.25, age: 7)) }),
                ("move by sort key", { try await $0.update(Cat(id: 10, name: "A", weight: 20, age: 7)) }),
                ("delete", { try await $0.delete(id: 3) }),
                ("leave the result", { try await $0.update(Cat(id: 8, name: "Ab", weight: 6, age: 2)) }),
                ("a mix in one transaction", { cats in
                    try await cats.operation { context in
                        try context.insert(Cat(id: 21, name: "Mix", weight: 0.5, age: 8))
                        try context.delete(id: 1)
                        try context.update(Cat(id: 6, name: "Tomasz", weight: 1, age: 12))
                        try context.update(Cat(id: 2, name: "Felix III", weight: 3.25, age: 7))
                        try context.save(Cat(id: 8, name: "Ab", weight: 6, age: 15))
                    }
                }),
            ]
            for (what, step) in steps {
                try await step(cats)
                guard let update = try await updates.next() else { throw ConformanceFailure(message: "\(what): no delivery", file: #fileID, line: #line) }
                let next = try await cats.fetchAll(Request(\.age >= 7).sorted(by: \.weight))
                try expectEqual(update.objects, next, "\(what): objects")
                try expect(!update.isInitial && !update.changes.isEmpty, "\(what): a change is delivered")
                try verify(update.changes, from: current, to: next, what)
                current = next
            }
        },
        ConformanceCheck("observation ignores rollbacks and other entities, and coalesces bursts") { store in
            let cats = try await seededCats(store)
            let accounts = Accounts(store: store)
            var updates = cats.observe().makeAsyncIterator()
            _ = try await updates.next()
            do {
                try await cats.operation { context in
                    try context.insert(Cat(id: 30, name: "Ghost", weight: 1, age: 1))
                    throw TransactionChecks.Abort()
                }
            } catch is TransactionChecks.Abort {}
            try await accounts.save(Account(id: "a", owner: "o"))
            for i in 0..<20 { try await cats.save(Cat(id: Int64(40 + i), name: "burst", weight: 1, age: 1)) }
            var seen: [ObservedResult<Cat>] = []
            while let update = try await updates.next() {
                seen.append(update)
                if update.objects.count == fixtureCats.count + 20 { break }
            }
            try expect(!seen.isEmpty && seen.count <= 20, "a burst of 20 commits gives 1 to 20 deliveries, got \(seen.count)")
            try expect(seen.allSatisfy { !$0.objects.contains { $0.id == 30 } }, "the rolled-back cat never appears")
            try expectEqual(seen.last?.objects.count, fixtureCats.count + 20, "the final state is delivered")
        },
        ConformanceCheck("callback observation delivers on its queue and stops when cancelled") { store in
            let cats = try await seededCats(store)
            let key = DispatchSpecificKey<Bool>()
            let queue = DispatchQueue(label: "observer")
            queue.setSpecific(key: key, value: true)
            let deliveries = Deliveries()
            let onQueue = NIOLockedValueBox(true)
            let token = cats.observe(Request(\.age == 1), on: .custom(queue)) { result in
                if DispatchQueue.getSpecific(key: key) != true { onQueue.withLockedValue { $0 = false } }
                if case .success(let update) = result { deliveries.add(update) }
            }
            try await waitUntil { deliveries.count >= 1 }
            try await cats.save(Cat(id: 50, name: "Kit", weight: 1, age: 1))
            try await waitUntil { deliveries.last?.objects.count == 2 }
            token.cancel()
            try await Task.sleep(for: .milliseconds(100))
            let before = deliveries.count
            try await cats.save(Cat(id: 51, name: "Kat", weight: 1, age: 1))
            try await Task.sleep(for: .milliseconds(300))
            try expectEqual(deliveries.count, before, "no delivery after cancel")
            try expect(onQueue.withLockedValue { $0 }, "every delivery on the given queue")
        },
        ConformanceCheck("a slow callback observer gets one coalesced delivery with the exact merged change set, never a backlog") { store in
            let recording = RecordingStore(store)
            let cats = try await seededCats(recording)
            let request = Request<CatRecord>(\.age >= 7).sorted(by: \.weight)
            let deliveries = Deliveries()
            // The handler holds its first delivery until every commit below is made: a
            // handler far slower than the commits, without a clock.
            let gate = DispatchSemaphore(value: 0)
            let token = cats.observe(request, on: .custom(DispatchQueue(label: "slow observer"))) { result in
                guard case .success(let update) = result else { return }
                deliveries.add(update)
                if update.isInitial { gate.wait() }
            }
            var released = false
            defer {
                if !released { gate.signal() }
                token.cancel()
            }
            try await waitUntil { deliveries.count >= 1 }
            let initial = try await cats.fetchAll(request)
            try expectEqual(deliveries.last?.objects, initial, "the initial result")
            // 200 commits while the handler is busy: inserts, updates in place, moves by the
            // sort key, deletes, records leaving and entering the result. The pause after
            // each gives an observation that reads on regardless every chance to do so (the
            // assertions count reads and deliveries; none depends on the time).
            let readsBefore = recording.fetchCount
            for i in 0..<200 {
                let id = Int64(100 + i % 40)
                switch i % 5 {
                case 0: try await cats.save(Cat(id: id, name: "n\(i)", weight: Double(i % 13), age: 8))
                case 1: try await cats.update(Cat(id: 2, name: "Felix \(i)", weight: 3.25, age: 7))
                case 2: try await cats.save(Cat(id: 10, name: "mover", weight: Double(200 - i), age: 7))
                case 3: try await cats.delete(id: Int64(100 + (i / 5) % 40))
                default: try await cats.save(Cat(id: 8, name: "in and out", weight: 6, age: i % 10 == 4 ? 2 : 15))
                }
                try await Task.sleep(for: .milliseconds(1))
            }
            try expectEqual(recording.fetchCount - readsBefore, 0, "the observation reads nothing while its handler is busy: no result waits beside the one being handled")
            let final = try await cats.fetchAll(request)
            gate.signal()
            released = true
            try await waitUntil { deliveries.last?.objects == final }
            let seen = deliveries.items.withLockedValue { $0 }
            try expectEqual(seen.count, 2, "200 commits during one slow delivery reach the handler as one more delivery, not a backlog of results")
            try expect(!seen[1].isInitial, "the second delivery is a change")
            try verify(seen[1].changes, from: initial, to: final, "the merged change set")
            try expectEqual(seen[1].changes, ChangeSet.diff(from: initial, to: final, key: \.id, same: ==), "the merged change set is the diff from the result the handler last saw")
            // The observation goes on after the coalesced delivery.
            try await cats.save(Cat(id: 999, name: "after", weight: 0.5, age: 9))
            let after = try await cats.fetchAll(request)
            try await waitUntil { deliveries.last?.objects == after }
            let last = deliveries.items.withLockedValue { $0 }
            try expectEqual(last.count, 3, "one delivery for the next commit")
            try verify(last[2].changes, from: final, to: after, "the next change set")
        },
    ]

    /// Polls `condition` for up to a minute (a loaded machine under Thread Sanitizer is slow;
    /// a healthy store answers in milliseconds).
    static func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        for _ in 0..<6_000 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw ConformanceFailure(message: "timed out waiting for a delivery", file: #fileID, line: #line)
    }
}
