/// A lazy query, in the spirit of Django's QuerySet: built by chaining, run only when read.
///
/// ```swift
/// let old = cats.results.filter(\.age > 10).sorted(by: \.name)
/// let howMany = try await old.count()          // a count in the backend, nothing decoded
/// let page = try await old.offset(40).limit(20).fetchAll()
/// for try await cat in old.batched(1_000) {    // streams, 1,000 records in memory at a time
///     try await push(cat)
/// }
/// try await old.filter(\.weight > 8).delete()   // exactly the records it selects, one transaction
/// ```
///
/// Every builder returns a new value; nothing runs until `count()`, `first()`, a subscript,
/// `fetchAll()`, `delete()`, `update(_:)` or iteration.
public struct ResultSet<Object, Managed>: Sendable
where Object: ManagedConvertible & Sendable, Object.Managed == Managed, Managed: ObjectConvertible, Managed.Object == Object {
    /// The controller that runs the set's reads and writes.
    public let controller: Controller<Object, Managed>
    /// Which records, in which order.
    public let request: Request<Managed>
    /// How many records one batch of iteration reads (and holds) at a time.
    public let batchSize: Int

    /// A set over `request`'s records, iterated `batchSize` records at a time (at least 1).
    public init(controller: Controller<Object, Managed>, request: Request<Managed> = .all, batchSize: Int = 500) {
        self.controller = controller
        self.request = request
        self.batchSize = Swift.max(1, batchSize)
    }

    private func with(_ request: Request<Managed>) -> ResultSet {
        ResultSet(controller: controller, request: request, batchSize: batchSize)
    }

    // MARK: Building

    /// Narrows the set: records must also match `condition`.
    public func filter(_ condition: Condition<Managed>) -> ResultSet { with(request.filter(condition)) }

    /// Narrows the set by attribute name and value.
    public func filter(_ attribute: String, equalTo value: some AttributeValue) -> ResultSet {
        with(request.filter(attribute, equalTo: value))
    }

    /// Widens the set: records matching what came before or `condition`.
    public func or(_ condition: Condition<Managed>) -> ResultSet { with(request.or(condition)) }

    /// Adds a sort key after the existing ones.
    public func sorted<V: AttributeValue>(by keyPath: KeyPath<Managed, V>, ascending: Bool = true) -> ResultSet {
        with(request.sorted(by: keyPath, ascending: ascending))
    }

    /// Adds a sort key by attribute name.
    public func sorted(by attribute: String, ascending: Bool = true) -> ResultSet {
        with(request.sorted(by: attribute, ascending: ascending))
    }

    /// At most `count` records.
    public func limit(_ count: Int) -> ResultSet { with(request.limit(count)) }

    /// Skips the first `count` records.
    public func offset(_ count: Int) -> ResultSet { with(request.offset(count)) }

    /// The same set, iterated `size` records at a time.
    public func batched(_ size: Int) -> ResultSet {
        ResultSet(controller: controller, request: request, batchSize: size)
    }

    // MARK: Reading

    /// The number of records in the set, counted by the backend.
    public func count() async throws -> Int { try await controller.count(request) }

    /// Whether the set is empty (reads at most one record).
    public func isEmpty() async throws -> Bool { try await controller.count(request.atMostOne) == 0 }

    /// The first record in the set's order.
    public func first() async throws -> Object? { try await controller.fetchFirst(request) }

    /// The record at `position` in the set's order, or `nil` past the end.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` for a negative position.
    public subscript(position: Int) -> Object? {
        get async throws {
            guard position >= 0 else {
                throw DepotError(.invalidPredicate, "Position \(position) is negative; positions start at 0.")
            }
            if let limit = request.limit, position >= limit { return nil }
            // Past Int.max there is no record; `offset + position` must not trap.
            let (start, overflow) = request.offset.addingReportingOverflow(position)
            if overflow { return nil }
            return try await controller.fetchAll(request.offset(start).limit(1)).first
        }
    }

    /// Every record in the set, in one array.
    public func fetchAll() async throws -> [Object] { try await controller.fetchAll(request) }

    // MARK: Writing

    /// Deletes exactly the records in the set, in one transaction; returns how many.
    @discardableResult
    public func delete() async throws -> Int { try await controller.deleteAll(where: request) }

    /// Replaces each record in the set with `transform(record)`, in one transaction; returns
    /// how many. Identity is kept: the records are updated in place.
    ///
    /// - Throws: ``DepotError/Code/invalidValue`` when `transform` changes a primary key
    ///   (nothing is written); any error `transform` throws (nothing is written).
    @discardableResult
    public func update(_ transform: @escaping @Sendable (Object) throws -> Object) async throws -> Int {
        let query = try request.resolved(for: try await controller.registeredEntity())
        return try await controller.operation { context in
            let objects = try context.fetchAll(query)
            var changed: [Object] = []
            changed.reserveCapacity(objects.count)
            for object in objects {
                let updated = try transform(object)
                let before = Managed.entity.primaryKey(of: try object.toManaged())
                let after = Managed.entity.primaryKey(of: try updated.toManaged())
                guard before == after else {
                    throw DepotError(.invalidValue, "update(_:) changed the primary key of a \(Managed.entity.name) from \(before.debugLiteral) to \(after.debugLiteral); a primary key identifies the record and cannot change. Nothing was written.")
                }
                changed.append(updated)
            }
            try context.update(changed)
            return changed.count
        }
    }
}

extension ResultSet: AsyncSequence {
    /// Each element is one of the application's values.
    public typealias Element = Object
    /// Iteration throws a `DepotError`, or the task's cancellation.
    public typealias Failure = any Error

    /// Iterates the set's records in its order, one batch read at a time.
    public func makeAsyncIterator() -> Iterator { Iterator(set: self) }

    /// Reads the set in batches of ``ResultSet/batchSize``, each batch in its own read
    /// snapshot, resuming after the last record of the previous batch (keyset pagination)
    /// so that records committed meanwhile neither repeat nor shift the cursor.
    public struct Iterator: AsyncIteratorProtocol {
        let set: ResultSet
        var buffer: [Object] = []
        var position = 0
        var lastRow: Row?
        var delivered = 0
        var finished = false

        init(set: ResultSet) { self.set = set }

        /// The next record, read in batches.
        public mutating func next() async throws -> Object? {
            if position < buffer.count {
                position += 1
                return buffer[position - 1]
            }
            if finished { return nil }
            try Task.checkCancellation()
            let request = set.request
            var want = set.batchSize
            if let limit = request.limit {
                want = Swift.min(want, limit - delivered)
                if want <= 0 {
                    finished = true
                    return nil
                }
            }
            let base = try request.resolved(for: try await set.controller.registeredEntity())
            var predicate = request.predicate
            if let lastRow { predicate = predicate.and(Self.after(lastRow, in: base)) }
            let query = try Query(
                entity: base.handle, predicate: predicate, sortKeys: base.sort.map { SortKey(base.entity.attributes[$0.attributeIndex].name, ascending: $0.ascending) },
                limit: want, offset: lastRow == nil ? request.offset : 0, extraDepth: 1)
            let batchSize = want
            let batch = try await set.controller.read { context -> ([Object], Row?) in
                var objects: [Object] = []
                var last: Row?
                try context.readTransaction.fetch(query, reserve: { objects.reserveCapacity($0) }) { columns in
                    objects.append(try Conversion<Object, Managed>.object(from: columns))
                    // Only a full batch's last record is kept: it is where the next batch
                    // starts, and a shorter batch is the last one.
                    if objects.count == batchSize { last = try columns.row() }
                }
                return (objects, last)
            }
            buffer = batch.0
            position = 0
            lastRow = batch.1 ?? lastRow
            delivered += buffer.count
            if buffer.count < want { finished = true }
            if buffer.isEmpty { return nil }
            position = 1
            return buffer[0]
        }

        /// The records strictly after `row` in the query's order (sort keys, then key).
        static func after(_ row: Row, in query: Query) -> PredicateExpression {
            after(query.sort.map { row[value: $0.attributeIndex] }, in: query)
        }

        /// The records strictly after the position given by one value per sort key of
        /// `query` (a page cursor's values), in the query's order.
        package static func after(_ sortValues: [Value], in query: Query) -> PredicateExpression {
            var alternatives: [PredicateExpression] = []
            var equalSoFar: [PredicateExpression] = []
            for (key, value) in zip(query.sort, sortValues) {
                let name = query.entity.attributes[key.attributeIndex].name
                let later: PredicateExpression
                let same: PredicateExpression
                if value.isNull {
                    // Nulls come first ascending and last descending.
                    later = key.ascending ? .not(.isNil(attribute: name)) : .constant(false)
                    same = .isNil(attribute: name)
                } else if key.ascending {
                    later = .compare(attribute: name, .greater, value)
                    same = .compare(attribute: name, .equal, value)
                } else {
                    later = .or([.compare(attribute: name, .less, value), .isNil(attribute: name)])
                    same = .compare(attribute: name, .equal, value)
                }
                alternatives.append(.and(equalSoFar + [later]))
                equalSoFar.append(same)
            }
            let position = PredicateExpression.or(alternatives)
            // The same records, with the first sort key's bound stated on its own as well:
            // an SQL engine takes a range only from a plain comparison, not from inside the
            // OR, and without it a page behind an index reads every row before its cursor
            // instead of seeking to it. Only where the bound is one comparison: nil (first
            // ascending, last descending) and a descending key that may be nil have none.
            guard let key = query.sort.first, let value = sortValues.first, !value.isNull else { return position }
            let attribute = query.entity.attributes[key.attributeIndex]
            if key.ascending {
                return .and([.compare(attribute: attribute.name, .greaterOrEqual, value), position])
            }
            guard !attribute.isOptional else { return position }
            return .and([.compare(attribute: attribute.name, .lessOrEqual, value), position])
        }
    }
}

extension Controller {
    /// Every record, as a lazy ``ResultSet`` to narrow, sort, count, stream or delete.
    public var results: ResultSet<Object, Managed> { ResultSet(controller: self) }

    /// The records matching `request`, as a lazy ``ResultSet``.
    public func results(_ request: Request<Managed>) -> ResultSet<Object, Managed> {
        ResultSet(controller: self, request: request)
    }
}
