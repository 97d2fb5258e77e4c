import CLMDB
import DepotCore
import Foundation

extension LMDBEngine {
    /// Each index against the records: for every indexed attribute, the records a query
    /// finds through the index (one query per distinct value) must be exactly those a scan
    /// of the records counts. An index entry missing, extra or pointing to the wrong record
    /// shows as a difference.
    ///
    /// Each composite index is compared entry by entry with the entries its records need:
    /// an entry missing, extra, or pointing to another record is a problem.
    ///
    /// First every record is checked to decode as its entity: each damaged record (bytes
    /// another program wrote, a torn copy) is a problem naming the entity and the key, and
    /// the index checks of that entity are skipped (they read every record).
    public func checkIntegrity() throws -> [String] {
        var problems: [String] = []
        for handle in try storedEntities() {
            let damaged = try withRead { try $0.damagedRecords(handle) }
            if !damaged.isEmpty {
                problems += damaged.map { "\(handle.name) record with key \($0) is damaged: its stored value cannot be decoded as \(handle.name)." }
                continue
            }
            for (position, attribute) in handle.entity.attributes.enumerated() where attribute.isIndexed && position != handle.entity.primaryKeyIndex {
                let differences = try withRead { transaction in
                    var differences: [String] = []
                    // LMDB aggregates by scanning the records (the reference computation);
                    // an equality count on an indexed attribute goes through the index.
                    let scanned = try transaction.aggregate(AggregateQuery(rows: Query(all: handle), groupBy: [position], functions: [.count]))
                    var total = 0
                    for group in scanned {
                        guard let value = group.keys.first, case .int(let expected)? = group.values.first else { continue }
                        total += Int(expected)
                        let predicate: DepotCore.PredicateExpression = .compare(attribute: attribute.name, .equal, value)
                        let found = try transaction.count(Query(entity: handle, predicate: predicate))
                        if found != Int(expected) {
                            differences.append("\(handle.name).\(attribute.name) = \(value.debugLiteral): \(expected) records, but the index finds \(found)")
                        }
                    }
                    let all = try transaction.count(Query(all: handle))
                    if total != all { differences.append("\(handle.name): \(all) records, but \(total) grouped by \(attribute.name)") }
                    return differences
                }
                problems += differences.prefix(20)
            }
            problems += try withRead { try $0.compositeIndexProblems(handle) }
        }
        return problems
    }

    /// Runs `body` in a read transaction of its own, on the calling thread.
    func withRead<T>(_ body: (LMDBTransaction) throws -> T) throws -> T {
        let transaction = try beginRead(on: nil, singleStatement: false)
        defer { transaction.end() }
        return try body(transaction)
    }
}

extension LMDBTransaction {
    /// For each composite index of `entity`: the entries its records need (computed from
    /// every record) against the entries it holds.
    func compositeIndexProblems(_ entity: EntityHandle) throws -> [String] {
        let handles = try handles(for: entity)
        var problems: [String] = []
        for index in handles.composites {
            // Entry key → the primary key it must point to.
            var expected: [[UInt8]: [UInt8]] = [:]
            var row = Row()
            try withCursor(handles.main) { cursor in
                _ = try scan(cursor, dupSort: false, range: .all, descending: false) { key, data in
                    try decode(data, handles, into: &row)
                    let primaryKey = Array(UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size))
                    var entry: [UInt8] = []
                    index.appendComponents(of: row, to: &entry)
                    entry += primaryKey
                    expected[entry] = primaryKey
                    return true
                }
            }
            var extra = 0
            var misdirected = 0
            try withCursor(index.dbi) { cursor in
                _ = try scan(cursor, dupSort: false, range: .all, descending: false) { key, data in
                    let entry = Array(UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size))
                    guard let primaryKey = expected.removeValue(forKey: entry) else {
                        extra += 1
                        return true
                    }
                    if Self.compare(data, primaryKey) != 0 { misdirected += 1 }
                    return true
                }
            }
            let name = "\(handles.entity.name) index (\(index.description.summary))"
            if !expected.isEmpty {
                let keys = expected.values.prefix(5).map {
                    $0.withUnsafeBytes { Self.describeKey($0, type: handles.entity.primaryKey.type) }
                }
                problems.append("\(name) has no entry for \(expected.count) records (keys \(keys.joined(separator: ", "))\(expected.count > 5 ? ", …" : "")).")
            }
            if extra > 0 { problems.append("\(name) has \(extra) entries that match no record.") }
            if misdirected > 0 { problems.append("\(name) has \(misdirected) entries that point to the wrong record.") }
        }
        return problems
    }

    /// The keys (as text) of the records of `entity` whose stored values do not decode as
    /// the entity, found by walking its database: a damaged record does not end the walk.
    func damagedRecords(_ entity: EntityHandle) throws -> [String] {
        let handles = try handles(for: entity)
        let columns = RecordColumns(types: handles.types)
        let keyType = handles.entity.primaryKey.type
        var damaged: [String] = []
        try withCursor(handles.main) { cursor in
            _ = try scan(cursor, dupSort: false, range: .all, descending: false) { key, data in
                if !columns.load(UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)) {
                    damaged.append(Self.describeKey(UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size), type: keyType))
                }
                return true
            }
        }
        return damaged
    }

    /// A primary key's stored bytes as the value they encode (see `KeyEncoding`), or as hex
    /// when they are not a key of that type.
    static func describeKey(_ bytes: UnsafeRawBufferPointer, type: AttributeType) -> String {
        switch type {
        case .int64 where bytes.count == 8:
            let bits = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            return String(Int64(bitPattern: bits ^ (1 << 63)))
        case .string where bytes.first == 0:
            if let text = String(validating: bytes.dropFirst(), as: UTF8.self) { return text.debugDescription }
        case .uuid where bytes.count == 16:
            var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: bytes) }
            return UUID(uuid: uuid).uuidString
        default:
            break
        }
        return "0x" + bytes.map { String(format: "%02x", $0) }.joined()
    }
}
