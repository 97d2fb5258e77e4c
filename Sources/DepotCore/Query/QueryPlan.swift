/// How a backend runs one request, in one form on every backend: which records it reads
/// (every record, primary-key ranges, or ranges of an index), whether it sorts them
/// afterwards, and how many it expects to read (and, when analyzed, read).
///
/// ```swift
/// let plan = try await pets.explain(Request(\.species == "cat").sorted(by: \.name).limit(20))
/// print(plan)   // Pet: index (species, name) [species == "cat"], in order
/// ```
///
/// A plan says why a request is slow: a ``Access/scan`` over a large entity, or
/// ``sortsAfterwards`` on a request with a small limit, reads far more than it returns.
/// Declaring an ``IndexDescription`` whose leading components the filter fixes and whose
/// remaining ones the sort follows turns both into an index range read in order.
public struct QueryPlan: Sendable, Hashable, CustomStringConvertible {
    /// Where the candidate records come from.
    public enum Access: Sendable, Hashable {
        /// Every record of the entity, in primary-key order.
        case scan
        /// Ranges of primary keys.
        case primaryKey
        /// Ranges of an index over these attributes (a single-attribute index has one).
        case index([IndexDescription.Component])
        /// Ranges of several indexes, their records merged (a filter that is an `OR` of
        /// conditions on different indexed attributes).
        case union([[IndexDescription.Component]])
    }

    /// The entity the request reads.
    public var entity: String
    /// Where the candidate records come from.
    public var access: Access
    /// The ranges read, one line each, in Depot's predicate notation (`species == "cat"`,
    /// `age > 3`); empty for a scan.
    public var ranges: [String]
    /// Whether the records read are sorted afterwards. When false they are read in the
    /// request's order, and a limited request stops after `offset + limit` matches.
    public var sortsAfterwards: Bool
    /// Whether conditions the ranges do not express are checked on each record read.
    public var filtersAfterwards: Bool
    /// The backend's estimate of the records it reads, where it makes one.
    public var estimatedRows: Int?
    /// The records actually read, when the plan was made with `analyze` (which runs the
    /// request).
    public var actualRows: Int?
    /// The backend's own account (SQLite's `EXPLAIN QUERY PLAN`, PostgreSQL's `EXPLAIN`),
    /// for the details the neutral form leaves out; empty for a backend without one.
    public var backendDetail: String

    /// A plan; backends make these.
    public init(
        entity: String, access: Access, ranges: [String] = [], sortsAfterwards: Bool, filtersAfterwards: Bool,
        estimatedRows: Int? = nil, actualRows: Int? = nil, backendDetail: String = ""
    ) {
        self.entity = entity
        self.access = access
        self.ranges = ranges
        self.sortsAfterwards = sortsAfterwards
        self.filtersAfterwards = filtersAfterwards
        self.estimatedRows = estimatedRows
        self.actualRows = actualRows
        self.backendDetail = backendDetail
    }

    /// Whether the plan reads an index (or several) rather than every record or key ranges.
    public var usesIndex: Bool {
        switch access {
        case .index, .union: true
        case .scan, .primaryKey: false
        }
    }

    /// One line: the access, its ranges, and what happens afterwards.
    public var description: String {
        func components(_ list: [IndexDescription.Component]) -> String {
            "(" + IndexDescription(list).summary + ")"
        }
        var text = "\(entity): "
        switch access {
        case .scan: text += "scan"
        case .primaryKey: text += "primary key"
        case .index(let list): text += "index \(components(list))"
        case .union(let lists): text += "union of indexes " + lists.map(components).joined(separator: ", ")
        }
        if !ranges.isEmpty { text += " [" + ranges.joined(separator: "; ") + "]" }
        if filtersAfterwards { text += ", filtered" }
        text += sortsAfterwards ? ", sorted afterwards" : ", in order"
        if let estimatedRows { text += ", about \(estimatedRows) rows" }
        if let actualRows { text += ", read \(actualRows) rows" }
        return text
    }
}
