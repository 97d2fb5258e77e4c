import DepotCore
import DepotTesting
import Foundation

/// Reads the input as a program that builds a request on `Sample` (an attribute of every
/// type, optional and not): a predicate tree of random shape and depth (including chains
/// thousands deep), sort keys, and limit and offset from the numbers that break arithmetic.
/// Resolving it gives a `Query` or a `DepotError`; a query must then give the same rows on
/// every backend as evaluation in memory, also on a copy of the entity with composite
/// indexes (read through each backend's planner, whose `explain` must answer cleanly), and
/// `ResultSet` positions and counts must agree.
enum RequestTarget {
    static let entity = Sample.entity.description
    /// Attribute names, and names that are not attributes.
    static let names: [String] = entity.attributes.map(\.name) + ["", "ID", "nope", "id ", "optionalint"]

    static func run(_ bytes: UnsafeRawBufferPointer) {
        var input = FuzzInput(bytes)
        let request = buildRequest(&input)
        do {
            _ = try request.resolved(for: Stores.all[0].entity)
        } catch {
            return
        }
        check(request)
        checkResultSet(request, &input)
    }

    static func buildRequest(_ input: inout FuzzInput) -> Request<Sample> {
        var request = Request<Sample>(Condition(expression(&input, depth: 0)))
        for _ in 0..<input.choose(4) {
            request = request.sorted(by: names[input.choose(names.count)], ascending: input.bool())
        }
        if input.bool() { request = request.limit(input.int()) }
        if input.bool() { request = request.offset(input.int()) }
        if input.bool() { request = request.or(Condition(expression(&input, depth: 0))) }
        return request
    }

    static func attributeName(_ input: inout FuzzInput) -> String { names[input.choose(names.count)] }

    /// A value, usually of the named attribute's type (so that resolution gets past the type check).
    static func value(for name: String, _ input: inout FuzzInput) -> Value {
        if input.byte() < 200, let index = entity.index(of: name) { return input.value(of: entity.attributes[index].type) }
        return input.anyValue()
    }

    static func expression(_ input: inout FuzzInput, depth: Int) -> DepotCore.PredicateExpression {
        // The builder's own recursion stays shallow; deep trees come from the chain case.
        let op = depth > 40 ? input.choose(7) : input.choose(12)
        switch op {
        case 0: return .constant(input.bool())
        case 1:
            let name = attributeName(&input)
            return .compare(attribute: name, ComparisonOperator.allCases[input.choose(6)], value(for: name, &input))
        case 2, 3:
            let name = attributeName(&input)
            let values = (0..<input.choose(5)).map { _ in value(for: name, &input) }
            return op == 2 ? .oneOf(attribute: name, values) : .notOneOf(attribute: name, values)
        case 4: return .isNil(attribute: attributeName(&input))
        case 5: return .hasPrefix(attribute: attributeName(&input), input.string())
        case 6: return .contains(attribute: attributeName(&input), input.string())
        case 7, 8:
            let parts = (0..<input.choose(5)).map { _ in expression(&input, depth: depth + 1) }
            return op == 7 ? .and(parts) : .or(parts)
        case 9: return .not(expression(&input, depth: depth + 1))
        case 10 where depth == 0:
            // A chain up to 4,095 levels deep, built iteratively: what a query string
            // turned into a predicate by an application can produce. Only at the top and
            // no longer: releasing a tree recurses once per level, and chains inside chains
            // overflowed this harness's own stack under ASan (Depot refuses past 32 levels
            // before it recurses; FuzzRegressionTests checks 15,337 levels in a plain build).
            let length = input.uint16() & 0x0FFF
            let kind = input.choose(3)
            var tree = expression(&input, depth: depth + 1)
            for _ in 0..<length {
                switch kind {
                case 0: tree = .not(tree)
                case 1: tree = DepotCore.PredicateExpression.and([tree, DepotCore.PredicateExpression.constant(true)])
                default: tree = DepotCore.PredicateExpression.or([DepotCore.PredicateExpression.constant(false), tree])
                }
            }
            return tree
        case 10: return .compare(attribute: "int", .greater, .int(Int64(depth)))
        default: return .invalid(input.string())
        }
    }

    /// Every backend gives the rows evaluation in memory gives, and counts them alike.
    static func check(_ request: Request<Sample>) {
        // Resolved against each store's own handle; the same request resolves alike
        // everywhere, so the first one gives the expected rows.
        guard let reference = try? request.resolved(for: Stores.all[0].entity) else { violated("the request resolved once, then not") }
        let expected = reference.apply(to: SampleRows.rows)
        if let limit = reference.limit, expected.count > limit { violated("\(expected.count) rows for limit \(limit)") }
        for (name, store, entity) in Stores.all + Stores.allIndexed {
            guard let query = try? request.resolved(for: entity) else { violated("\(name): the request does not resolve against its handle") }
            let result = blocking { completion in
                store.submitRead({ transaction -> ([Row], Int) in
                    var rows: [Row] = []
                    try transaction.fetchRows(query) { rows.append($0) }
                    if entity.name == Stores.indexed.name {
                        // The plan, estimated and counted, is the planner's own view of
                        // the same request: it must come out, or be refused, cleanly.
                        do {
                            let plan = try transaction.explain(query, analyze: rows.count % 2 == 0)
                            if plan.entity != entity.name { violated("\(name) explains \(plan.entity) for \(entity.name)") }
                        } catch {
                            expectDepotError(error, "\(name) explaining \(query)")
                        }
                    }
                    return (rows, try transaction.count(query))
                }, completion: completion)
            }
            switch result {
            case .failure(let error):
                expectDepotError(error, "\(name) running \(query) on \(entity.name)")
            case .success(let (rows, count)):
                guard rows == expected else {
                    violated("\(name) returned \(rows.map { $0[value: 0].debugLiteral }) where evaluation in memory returns \(expected.map { $0[value: 0].debugLiteral }) for \(query)")
                }
                guard count == rows.count else { violated("\(name) counts \(count) rows but fetches \(rows.count) for \(query)") }
            }
        }
    }

    /// `ResultSet` adds positions to offsets and subtracts deliveries from limits.
    static func checkResultSet(_ request: Request<Sample>, _ input: inout FuzzInput) {
        let controller = Controller<Sample, Sample>(store: Stores.memory)
        let position = input.int()
        let batch = max(1, input.choose(4))
        let result = blockingAsync { () async throws -> (Sample?, Int, Int) in
            let set = controller.results(request).batched(batch)
            let atPosition = try await set[position]
            var iterated = 0
            for try await _ in set { iterated += 1 }
            return (atPosition, iterated, try await set.count())
        }
        switch result {
        case .failure(let error):
            expectDepotError(error, "ResultSet of \(request) at \(position)")
        case .success(let (_, iterated, count)):
            guard iterated == count else { violated("ResultSet iterates \(iterated) records but counts \(count) for \(request)") }
        }
    }
}
