import DepotCore
import Dispatch
import Foundation
import NIOConcurrencyHelpers

/// Behaviours that a review and outside tests found broken on some backend, kept here so
/// every backend proves them: observations that see writes already running and end when
/// the store closes, numbers at the edge of `Int`, deep predicates, declarations that do
/// not match the registration, and callback ordering.
enum RobustnessChecks {
    /// Two attributes of one type, so a declaration that swaps them has the same shape by
    /// count and by types, and only names tell them apart.
    struct Pair: StoredObject, Hashable {
        var id: Int64
        var first: String
        var second: String

        static let entity = Entity<Pair>("Pair", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("first", \.first)
            Attribute("second", \.second)
        }

        init(id: Int64, first: String, second: String) {
            (self.id, self.first, self.second) = (id, first, second)
        }

        init(row: RecordReader<Self>) throws {
            (id, first, second) = (try row[\.id], try row[\.first], try row[\.second])
        }

        func encode(into row: inout Row) {
            row.removeAll()
            row.append(.int(id))
            row.append(.string(first))
            row.append(.string(second))
        }
    }

    /// `Pair` declared again with its two strings in the other order.
    struct SwappedPair: StoredObject, Hashable {
        var id: Int64
        var second: String
        var first: String

        static let entity = Entity<SwappedPair>("Pair", primaryKey: \.id) {
            Attribute("id", \.id)
            Attribute("second", \.second)
            Attribute("first", \.first)
        }

        init(id: Int64, second: String, first: String) {
            (self.id, self.second, self.first) = (id, second, first)
        }

        init(row: RecordReader<Self>) throws {
            (id, second, first) = (try row[\.id], try row[\.second], try row[\.first])
        }

        func encode(into row: inout Row) {
            row.removeAll()
            row.append(.int(id))
            row.append(.string(second))
            row.append(.string(first))
        }
    }

    /// Runs `body`, failing the check when it has not finished within `seconds` (it is then
    /// cancelled). Only guards against a hang: a healthy store answers in milliseconds.
    static func within<T: Sendable>(
        _ seconds: Int, _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw ConformanceFailure(message: "\(what): nothing after \(seconds) s", file: #fileID, line: #line)
            }
            return value
        }
    }

    /// The value of `task`, cancelling it when the waiting task is cancelled (by ``within``).
    static func valueOf<T: Sendable>(_ task: Task<T, any Error>) async throws -> T {
        try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() }
    }

    /// Every subscription's deliveries, in arrival order.
    final class Subscriptions: Sendable {
        let all = NIOLockedValueBox<[[ObservedResult<Cat>]]>([])
        let failures = NIOLockedValueBox<[DepotError]>([])

        func start() -> Int { all.withLockedValue { $0.append([]); return $0.count - 1 } }
        func add(_ update: ObservedResult<Cat>, to index: Int) { all.withLockedValue { $0[index].append(update) } }
        func fail(_ error: DepotError) { failures.withLockedValue { $0.append(error) } }
        func last(_ index: Int) -> ObservedResult<Cat>? { all.withLockedValue { $0[index].last } }
        var snapshot: [[ObservedResult<Cat>]] { all.withLockedValue { $0 } }
    }

    /// Checks that deliveries form a chain: the first is initial and lists every record as
    /// inserted; each later one's change set turns the previous result into its own.
    static func verifyChain(_ deliveries: [ObservedResult<Cat>], _ what: String) throws {
        guard let first = deliveries.first else { return }
        try expect(first.isInitial, "\(what): the first delivery is initial")
        try expectEqual(first.changes.inserted, Array(first.objects.indices), "\(what): initial lists every record")
        for (n, pair) in zip(deliveries, deliveries.dropFirst()).enumerated() {
            try expect(!pair.1.isInitial, "\(what): only the first delivery is initial")
            try LiveChecks.verify(pair.1.changes, from: pair.0.objects, to: pair.1.objects, "\(what), delivery \(n + 2)")
        }
    }

    static let all: [ConformanceCheck] = [
        ConformanceCheck("a write already running when an observation starts reaches it") { store in try await holdingAStoreThread {
            let cats = try await seededCats(store)
            // The write begins (and inserts) before anyone observes, and commits only after
            // the observation has read its first result, which cannot contain it.
            let started = DispatchSemaphore(value: 0)
            let proceed = DispatchSemaphore(value: 0)
            let write = Task {
                let entity = try await store.register(CatRecord.entity.description)
                try await store.write { transaction in
                    var row = Row()
                    try CatRecord(id: 100, name: "Late", weight: 1, age: 1).encode(into: &row)
                    try transaction.insert(row, into: entity)
                    started.signal()
                    _ = proceed.wait(timeout: .now() + 60)
                }
            }
            guard await signalled(started, within: 60) else {
                proceed.signal()
                throw ConformanceFailure(message: "the write starts: nothing after 60 s", file: #fileID, line: #line)
            }
            let observer = Task { () -> (ObservedResult<Cat>?, ObservedResult<Cat>?) in
                var updates = cats.observe().makeAsyncIterator()
                let initial = try await updates.next()
                proceed.signal()
                return (initial, try await updates.next())
            }
            let (initial, update) = try await within(60, "the running write's commit is delivered") { try await valueOf(observer) }
            try await write.value
            try expect(initial?.objects.contains { $0.id == 100 } == false, "the first result predates the running write")
            try expect(update?.objects.contains { $0.id == 100 } == true, "the delivery after the commit contains its record")
            if let update, let initial { try LiveChecks.verify(update.changes, from: initial.objects, to: update.objects, "late write") }
        } },
        ConformanceCheck("closing the store ends every observation with closed") { store in
            let cats = try await seededCats(store)
            let ready = NIOLockedValueBox(false)
            let observer = Task { () -> ObservedResult<Cat>? in
                var updates = cats.observe().makeAsyncIterator()
                _ = try await updates.next()
                ready.withLockedValue { $0 = true }
                return try await updates.next()
            }
            let callbackResults = NIOLockedValueBox<[Result<ObservedResult<Cat>, DepotError>]>([])
            let token = cats.observe { result in callbackResults.withLockedValue { $0.append(result) } }
            try await LiveChecks.waitUntil { callbackResults.withLockedValue { $0.count } >= 1 && ready.withLockedValue { $0 } }
            let feed = store.changes.stream(entities: ["Cat"])
            let feedEnded = Task {
                for await _ in feed {}
                return true
            }
            await store.close()
            try await within(60, "the waiting observation ends") {
                do {
                    let value = try await valueOf(observer)
                    throw ConformanceFailure(message: "the observation went on after close: \(String(describing: value))", file: #fileID, line: #line)
                } catch let error as DepotError {
                    try expectEqual(error.code, .closed, "the observation ends with closed")
                }
            }
            try await LiveChecks.waitUntil {
                callbackResults.withLockedValue { results in
                    if case .failure(let error) = results.last { return error.code == .closed }
                    return false
                }
            }
            try await expectEqual(try within(60, "the change feed's stream ends") { await feedEnded.value }, true, "stream ended")
            try await expectError(.closed, "observing a closed store") {
                try await valueOf(Task { () -> Int? in
                    var late = cats.observe().makeAsyncIterator()
                    return try await late.next()?.objects.count
                })
            }
            token.cancel()
        },
        ConformanceCheck("offsets and limits up to Int.max give results, never a crash") { store in
            let cats = try await seededCats(store)
            let byID = fixtureCats.map(\.id).sorted()
            let byName = fixtureCats.sorted { utf8Less($0.name, $1.name) || ($0.name == $1.name && $0.id < $1.id) }.map(\.id)
            try await expectEqual(cats.fetchAll(Request().offset(1).limit(Int.max)).map(\.id), Array(byID.dropFirst()), "offset 1, limit Int.max")
            try await expectEqual(
                cats.fetchAll(Request().sorted(by: \.name).offset(1).limit(Int.max)).map(\.id), Array(byName.dropFirst()),
                "sorted by an unindexed attribute, offset 1, limit Int.max")
            try await expectEqual(
                cats.fetchAll(Request(\.age >= 0).sorted(by: \.age).offset(2).limit(Int.max - 1)).count, fixtureCats.count - 2,
                "filtered, sorted by an index, offset 2, limit Int.max - 1")
            try await expectEqual(cats.fetchAll(Request().offset(Int.max).limit(Int.max)).count, 0, "offset Int.max")
            try await expectEqual(cats.count(Request().offset(1).limit(Int.max)), fixtureCats.count - 1, "count with limit Int.max")
            try await expectEqual(cats.count(Request().offset(Int.max)), 0, "count with offset Int.max")
            try await expectEqual(cats.results.offset(1).limit(Int.max).count(), fixtureCats.count - 1, "result set count")
            try await expectEqual(cats.results.offset(1)[Int.max]?.id, nil, "subscript past Int.max")
            try await expectEqual(cats.results.offset(Int.max - 1)[1]?.id, nil, "subscript at Int.max")
            var streamed = 0
            for try await _ in cats.results.offset(1).limit(Int.max).batched(3) { streamed += 1 }
            try expectEqual(streamed, fixtureCats.count - 1, "streaming with limit Int.max")
            try await expectEqual(cats.deleteAll(where: Request().offset(Int.max).limit(Int.max)), 0, "delete at offset Int.max")
            try await expectEqual(cats.count(), fixtureCats.count, "nothing deleted")
            try await expectError(.invalidPredicate, "a negative limit") { try await cats.fetchAll(Request().limit(Int.min)) }
            try await expectError(.invalidPredicate, "a negative offset") { try await cats.fetchAll(Request().offset(Int.min)) }
        },
        ConformanceCheck("limit(0) means no record for first, fetchFirst and isEmpty") { store in
            let cats = try await seededCats(store)
            try await expectEqual(cats.fetchFirst(Request().limit(0))?.id, nil, "fetchFirst")
            try await expectEqual(cats.results.limit(0).first()?.id, nil, "first()")
            try await expectEqual(cats.results.limit(0).isEmpty(), true, "isEmpty()")
            try await expectEqual(cats.read { try $0.fetchFirst(Request().limit(0))?.id }, nil, "context fetchFirst")
            try await expectEqual(cats.fetchFirst(Request().limit(5))?.id, 1, "a larger limit still gives the first")
        },
        ConformanceCheck("predicates nested too deeply are refused; deep enough ones work") { store in
            let cats = try await seededCats(store)
            var nested: DepotCore.PredicateExpression = .compare(attribute: "age", .greaterOrEqual, .int(7))
            for _ in 0..<(Query.maximumPredicateDepth - 1) { nested = .not(.not(nested)) }
            // An even number of `!` around the comparison keeps its meaning, but this one is
            // twice as deep as allowed.
            try await expectError(.invalidPredicate, "a predicate over the depth limit") {
                try await cats.fetchAll(Request(Condition(nested)))
            }
            var alternating: DepotCore.PredicateExpression = .compare(attribute: "age", .greaterOrEqual, .int(7))
            for level in 0..<1_000 {
                let other: DepotCore.PredicateExpression = .constant(level % 2 == 0)
                alternating = level % 2 == 0 ? .and([alternating, other]) : .or([alternating, other])
            }
            try await expectError(.invalidPredicate, "alternating && and || 1,000 deep") {
                try await cats.fetchAll(Request(Condition(alternating)))
            }
            var allowed: DepotCore.PredicateExpression = .compare(attribute: "age", .greaterOrEqual, .int(7))
            for _ in 0..<((Query.maximumPredicateDepth - 1) / 2) { allowed = .not(.not(allowed)) }
            let expected = fixtureCats.filter { $0.age >= 7 }.map(\.id).sorted()
            try await expectEqual(cats.fetchAll(Request(Condition(allowed))).map(\.id), expected, "nested ! at the limit gives its answer")
            var mixed: DepotCore.PredicateExpression = .compare(attribute: "age", .greaterOrEqual, .int(7))
            for level in 1..<Query.maximumPredicateDepth {
                // `x && true` and `x || false` keep x's meaning at every level; the last
                // level is an `||`, so streaming's `&&` cannot merge into it.
                mixed = level % 2 == 0 ? .and([mixed, .constant(true)]) : .or([mixed, .constant(false)])
            }
            try await expectEqual(cats.fetchAll(Request(Condition(mixed))).map(\.id), expected, "&& and || at the limit give their answer")
            // Streaming adds its keyset condition around the caller's predicate.
            var streamed: [Int64] = []
            for try await cat in cats.results.filter(Condition(mixed)).batched(2) { streamed.append(cat.id) }
            try expectEqual(streamed, expected, "streaming a predicate at the limit")
            var streamedNots: [Int64] = []
            for try await cat in cats.results.filter(Condition(allowed)).sorted(by: \.age, ascending: false).batched(2) { streamedNots.append(cat.id) }
            try expectEqual(Set(streamedNots), Set(expected), "streaming nested ! at the limit")
        },
        ConformanceCheck("a declaration that reorders the attributes migrates by name; handles from before are refused") { store in
            let pairs = Controller<Pair, Pair>(store: store)
            try await pairs.save(Pair(id: 1, first: "a", second: "b"))
            let swapped = Controller<SwappedPair, SwappedPair>(store: store)
            try await expectEqual(swapped.fetchAll(), [SwappedPair(id: 1, second: "b", first: "a")], "the reordered declaration reads each value under its name")
            // Rows are laid out by position: the old handle would bind "first" where the
            // registered layout now has "second".
            try await expectError(.schemaMismatch, "writing through the controller registered before the reorder") {
                try await pairs.save(Pair(id: 2, first: "x", second: "y"))
            }
            try await expectError(.schemaMismatch, "reading through the controller registered before the reorder") {
                try await pairs.fetchAll()
            }
            try await expectEqual(Controller<Pair, Pair>(store: store).fetchAll(), [Pair(id: 1, first: "a", second: "b")], "registering the first declaration again migrates back")
        },
        ConformanceCheck("completion-handler writes on a fresh controller commit in call order") { store in
            for round in 0..<40 {
                // A new controller each round: the race was between its registration and
                // its first writes.
                let cats = Cats(store: store).callbacks
                let done = NIOLockedValueBox(0)
                let failures = NIOLockedValueBox<[DepotError]>([])
                let id = Int64(round + 1)
                for version in 0..<3 {
                    cats.save(Cat(id: id, name: "v\(version)", weight: 1, age: version)) { result in
                        if case .failure(let error) = result { failures.withLockedValue { $0.append(error) } }
                        done.withLockedValue { $0 += 1 }
                    }
                }
                try await LiveChecks.waitUntil { done.withLockedValue { $0 } == 3 }
                try expect(failures.withLockedValue { $0.isEmpty }, "round \(round): every save succeeds")
                try await expectEqual(Cats(store: store).fetchOne(id: id)?.name, "v2", "round \(round): the last save wins")
            }
        },
        ConformanceCheck("observers that subscribe, cancel and resubscribe while writers commit see exact chains") { store in
            let cats = try await seededCats(store)
            let subscriptions = Subscriptions()
            let requests: [Request<CatRecord>] = [.all, Request(\.age >= 7).sorted(by: \.weight), Request(\.name < "T").sorted(by: \.name).limit(5)]
            var lasting: [(index: Int, request: Request<CatRecord>, token: ObservationToken)] = []
            func subscribe(_ request: Request<CatRecord>) -> (Int, ObservationToken) {
                let index = subscriptions.start()
                let token = cats.observe(request) { result in
                    switch result {
                    case .success(let update): subscriptions.add(update, to: index)
                    case .failure(let error): subscriptions.fail(error)
                    }
                }
                return (index, token)
            }
            for request in requests {
                let (index, token) = subscribe(request)
                lasting.append((index, request, token))
            }
            let writers = (0..<2).map { writer in
                Task {
                    var generator = SystemRandomNumberGenerator()
                    for step in 0..<120 {
                        let id = Int64.random(in: 1...30, using: &generator)
                        if step % 5 == 4 {
                            try await cats.delete(id: id)
                        } else {
                            try await cats.save(Cat(id: id, name: "w\(writer)s\(step)", weight: Double(step % 9), age: Int.random(in: 0...15, using: &generator)))
                        }
                    }
                }
            }
            // Short-lived observers come and go while the writers run.
            var churn = 0
            while churn < 30 {
                let (_, token) = subscribe(requests[churn % requests.count])
                try await Task.sleep(for: .milliseconds(churn % 4))
                token.cancel()
                churn += 1
            }
            for writer in writers { try await writer.value }
            for (index, request, _) in lasting {
                let fresh = try await cats.fetchAll(request)
                try await LiveChecks.waitUntil { subscriptions.last(index)?.objects == fresh }
            }
            for item in lasting { item.token.cancel() }
            try expect(subscriptions.failures.withLockedValue { $0.isEmpty }, "no observation failed: \(subscriptions.failures.withLockedValue { $0 })")
            for (n, deliveries) in subscriptions.snapshot.enumerated() {
                try verifyChain(deliveries, "subscription \(n)")
            }
        },
    ]
}
