import CLibPQ

/// The statements one connection has prepared, by SQL text and parameter types, so that the
/// server parses and plans a statement the connection sends again once, not on every call.
///
/// Bounded: a store whose queries take many shapes (filters built from user input) would
/// otherwise keep every shape's plan in its server session for as long as the connection
/// lives. Past ``capacity``, the statement used longest ago is dropped, and DEALLOCATEd on
/// the server before the connection's next statement outside a transaction (see
/// ``PGConnection/deallocateEvicted()``): an eviction is rare, and a session that let every
/// evicted statement live until it ends would grow without bound on a long-lived pool.
///
/// Names are `depot_s` and a number this connection never hands out twice, so two entries
/// (or an entry and a statement evicted but not yet deallocated) never share a name. A
/// reconnect leaves the server with none of them: ``forgetAll()``. A schema change the store
/// made or took in (``PGConnection/statementEpoch``) drops every entry: PostgreSQL would
/// plan an old statement again against the new tables, but fails one whose result columns
/// changed with `cached plan must not change result type`.
struct PGStatementCache {
    struct Key: Hashable {
        let sql: String
        let types: [Oid]
    }

    /// The most statements a connection keeps prepared.
    static let capacity = 128

    private var entries: [Key: (name: String, used: UInt64)] = [:]
    private var clock: UInt64 = 0
    private var counter = 0
    /// Names dropped from the cache and still prepared on the server.
    private(set) var evicted: [String] = []

    /// The name `key` is prepared under, marked as just used; nil when it is not prepared.
    mutating func name(of key: Key) -> String? {
        guard var entry = entries[key] else { return nil }
        clock &+= 1
        entry.used = clock
        entries[key] = entry
        return entry.name
    }

    /// A name no statement of this connection has had.
    mutating func freshName() -> String {
        counter += 1
        return "depot_s\(counter)"
    }

    /// Records that `key` is now prepared under `name`, dropping the entry used longest ago
    /// when the cache is full.
    mutating func insert(_ key: Key, name: String) {
        if entries.count >= Self.capacity, entries[key] == nil, let oldest = entries.min(by: { $0.value.used < $1.value.used }) {
            entries[oldest.key] = nil
            evicted.append(oldest.value.name)
        }
        clock &+= 1
        if let previous = entries.updateValue((name, clock), forKey: key), previous.name != name {
            evicted.append(previous.name)
        }
    }

    /// Drops `key` (its plan failed): the next use prepares it afresh under a new name.
    mutating func remove(_ key: Key) {
        if let entry = entries.removeValue(forKey: key) { evicted.append(entry.name) }
    }

    /// Drops every entry, to be deallocated (the schema changed).
    mutating func invalidateAll() {
        evicted += entries.values.map(\.name)
        entries.removeAll()
    }

    /// The server has none of the statements (a new session).
    mutating func forgetAll() {
        entries.removeAll()
        evicted.removeAll()
    }

    /// The evicted names, now being deallocated.
    mutating func takeEvicted() -> [String] {
        defer { evicted.removeAll() }
        return evicted
    }

    var count: Int { entries.count }
}
