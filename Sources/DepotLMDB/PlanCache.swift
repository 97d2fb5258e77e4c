import CLMDB
package import DepotCore
import Synchronization

/// A query as the planner sees it, its values left out: the filter's structure (each
/// condition's kind, attribute and operator, the length of an `in` list), the sort, whether
/// it has a limit, and whether the order is needed. Two queries of one shape get the same
/// candidate plans, up to the keys their values encode to (see ``ReusablePlan``).
package struct PlanShape: Hashable, Sendable {
    private var tokens: [Int]

    package init(_ query: Query, needsOrder: Bool) {
        var tokens: [Int] = []
        tokens.reserveCapacity(8 + 2 * query.sort.count)
        tokens.append(needsOrder ? 1 : 0)
        tokens.append(query.limit == nil ? 0 : 1)
        tokens.append(query.sort.count)
        for key in query.sort { tokens.append(key.attributeIndex << 1 | (key.ascending ? 1 : 0)) }
        Self.append(query.filter, to: &tokens)
        self.tokens = tokens
    }

    // One append per token: `tokens += [a, b]` built a temporary array on the heap for
    // each condition of every read's filter.
    private static func append(_ filter: Filter, to tokens: inout [Int]) {
        switch filter {
        case .constant(let b):
            tokens.append(0)
            tokens.append(b.map { $0 ? 1 : 0 } ?? 2)
        case .compare(let i, let op, _):
            tokens.append(1)
            tokens.append(i)
            tokens.append(code(op))
        case .oneOf(let i, let values, let includesNil):
            tokens.append(2)
            tokens.append(i)
            tokens.append(values.count)
            tokens.append(includesNil ? 1 : 0)
        case .notOneOf(let i, let values):
            tokens.append(3)
            tokens.append(i)
            tokens.append(values.count)
        case .isNil(let i):
            tokens.append(4)
            tokens.append(i)
        case .isNotNil(let i):
            tokens.append(5)
            tokens.append(i)
        case .hasPrefix(let i, _):
            tokens.append(6)
            tokens.append(i)
        case .contains(let i, _):
            tokens.append(7)
            tokens.append(i)
        case .and(let parts):
            tokens.append(8)
            tokens.append(parts.count)
            for part in parts { append(part, to: &tokens) }
        case .or(let parts):
            tokens.append(9)
            tokens.append(parts.count)
            for part in parts { append(part, to: &tokens) }
        case .not(let inner):
            tokens.append(10)
            append(inner, to: &tokens)
        }
    }

    private static func code(_ op: ComparisonOperator) -> Int {
        switch op {
        case .equal: 0
        case .notEqual: 1
        case .less: 2
        case .lessOrEqual: 3
        case .greater: 4
        case .greaterOrEqual: 5
        }
    }
}

/// A plan remembered for a ``PlanShape``, to be reused with another query's values.
///
/// Only one kind of plan is remembered: a composite index whose equality prefix expresses
/// the whole filter, read in order (or counted) and stopping at `offset + limit` (the list
/// page). Its reuse encodes the new values into the prefix, as
/// ``CompositePlanner/candidate(_:query:conjuncts:handles:maxKeySize:needsOrder:describing:)``
/// would; nothing else about it depends on the values.
///
/// The choice among candidates stays the one ``LMDBTransaction/choose(_:_:_:needsOrder:)``
/// would make, because a plan is remembered only when no candidate's estimate depends on
/// the values either:
/// - the filter names no attribute with a single-attribute index and not the primary key,
///   so the single-attribute planner has no range to measure;
/// - every other candidate either stops at the same `offset + limit` (its estimate scales
///   with it as the chosen one's does: the order between them stays) or reads a whole
///   database (its estimate is the database's entry count, read again at every reuse from
///   `mdb_stat` and compared with the chosen plan's window: the ``rivals``);
/// - every composite index without a candidate is one the filter does not mention (a
///   mentioned one might have been refused for a key too long, which depends on the value).
///
/// A reuse whose check fails plans afresh; so does a value whose key is too long.
package struct ReusablePlan: Sendable {
    /// The chosen index's place in ``RegisteredEntity/composites``.
    let composite: Int
    /// For each leading component, the conjunct (in ``CompositePlanner/conjuncts(of:)``)
    /// whose value fixes it.
    let prefix: [Int]
    let ordered: Bool
    let descending: Bool
    /// ``rowCost`` of the chosen plan.
    let perRow: Int
    /// The candidates that read a whole database: the database and its cost per entry.
    let rivals: [(dbi: MDB_dbi, perRow: Int)]

    /// The reusable form of `candidates[chosen]`, or `nil` when reusing it could choose
    /// differently from planning afresh with other values or data (see the type).
    init?(
        chosen: Int, of candidates: [Plan], _ query: Query, _ handles: RegisteredEntity, needsOrder: Bool,
        transaction: LMDBTransaction
    ) {
        let plan = candidates[chosen]
        guard case .composite(let index) = plan.source, plan.exact, !plan.keyset,
            transaction.window(plan, query, needsOrder: needsOrder) != nil,
            let place = handles.composites.firstIndex(where: { $0.dbi == index.dbi })
        else { return nil }
        let conjuncts = CompositePlanner.conjuncts(of: query.filter)
        let fixing = CompositePlanner.equalityPrefix(index, conjuncts: conjuncts, entity: handles.entity)
        // The prefix is all the plan's ranges express.
        guard plan.consumed == fixing.count, (plan.ranges?.count ?? 0) == (fixing.isEmpty ? 0 : 1) else { return nil }
        if fixing.isEmpty && plan.ranges != nil { return nil }
        let mentioned = query.filter.attributeIndices
        let pk = handles.entity.primaryKeyIndex
        if mentioned.contains(where: { $0 == pk || handles.index(at: $0) != nil }) { return nil }
        var rivals: [(dbi: MDB_dbi, perRow: Int)] = []
        for (n, candidate) in candidates.enumerated() where n != chosen {
            if transaction.window(candidate, query, needsOrder: needsOrder) != nil { continue }
            guard candidate.ranges == nil else { return nil }
            let dbi: MDB_dbi
            switch candidate.source {
            case .primary: dbi = handles.main
            case .index(let index): dbi = index.dbi
            case .composite(let index): dbi = index.dbi
            case .union: return nil
            }
            rivals.append((dbi, transaction.rowCost(candidate, needsOrder: needsOrder)))
        }
        // The composite indexes without a candidate, which the candidates list leaves out.
        let offered = Set(candidates.compactMap { candidate -> MDB_dbi? in
            if case .composite(let index) = candidate.source { return index.dbi }
            return nil
        })
        for other in handles.composites where !offered.contains(other.dbi) {
            if other.positions.contains(where: mentioned.contains) { return nil }
        }
        self.composite = place
        self.prefix = fixing.map(\.conjunct)
        self.ordered = plan.ordered
        self.descending = plan.descending
        self.perRow = transaction.rowCost(plan, needsOrder: needsOrder)
        self.rivals = rivals
    }
}

extension RegisteredEntity {
    /// How many shapes an entity remembers plans for: an application asks a few shapes
    /// over and over; past this, new shapes are planned afresh every time.
    static let planCacheCapacity = 64

    package func reusablePlan(for shape: PlanShape) -> ReusablePlan? {
        planCache.withLock { $0[shape] }
    }

    func remember(_ plan: ReusablePlan, for shape: PlanShape) {
        planCache.withLock { cache in
            if cache.count < Self.planCacheCapacity || cache[shape] != nil { cache[shape] = plan }
        }
    }
}

extension LMDBTransaction {
    /// `reusable` with the values of `query`, or `nil` when the plan no longer wins (a
    /// rival's database shrank below the chosen plan's window) or a value cannot be
    /// encoded into a key: then the caller plans afresh.
    func reuse(_ reusable: ReusablePlan, _ query: Query, _ handles: RegisteredEntity) throws -> Plan? {
        guard handles.composites.indices.contains(reusable.composite), let end = query.end, end > 0 else { return nil }
        let (cost, overflow) = end.multipliedReportingOverflow(by: reusable.perRow)
        if overflow { return nil }
        for rival in reusable.rivals {
            let (rivalCost, rivalOverflow) = try entries(rival.dbi).multipliedReportingOverflow(by: rival.perRow)
            // Ties go to the chosen plan: it came first when it was chosen.
            if !rivalOverflow && rivalCost < cost { return nil }
        }
        let index = handles.composites[reusable.composite]
        let conjuncts = CompositePlanner.conjuncts(of: query.filter)
        var prefix: [UInt8] = []
        for (n, c) in reusable.prefix.enumerated() {
            guard conjuncts.indices.contains(c), index.positions.indices.contains(n) else { return nil }
            let position = index.positions[n]
            let value: Value
            switch conjuncts[c] {
            case .compare(position, .equal, let v): value = v
            case .isNil(position): value = .null
            case .oneOf(position, let values, false) where values.count == 1: value = values[0]
            default: return nil
            }
            guard value.isNull || value.type == handles.types[position] else { return nil }
            KeyEncoding.appendTupleComponent(value, descending: index.description.components[n].isDescending, to: &prefix)
        }
        var ranges: [KeyRange]?
        if !prefix.isEmpty {
            let upper = KeyEncoding.successor(ofPrefix: prefix)
            if prefix.count > maxKeySize || (upper?.count ?? 0) > maxKeySize { return nil }
            ranges = [KeyRange(lower: prefix, upper: upper, upperInclusive: false)]
        }
        var plan = Plan(
            source: .composite(index), ranges: ranges, exact: true, ordered: reusable.ordered, descending: reusable.descending)
        plan.consumed = reusable.prefix.count
        return plan
    }
}
