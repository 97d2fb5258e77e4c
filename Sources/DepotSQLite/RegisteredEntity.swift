import DepotCore
import DepotSQL
import Foundation

/// A registered entity (every backend calls its per-entity state by this name) and the SQL
/// that reads and writes its table, built once.
///
/// Column lists always follow the declared attribute order, which is the row order,
/// whatever order `ALTER TABLE` left the physical columns in.
final class RegisteredEntity: Sendable {
    let entity: EntityDescription
    /// Unique per registration in this process: keys the connections' statement caches,
    /// so a migrated entity never reuses a statement built for its old columns.
    let serial: Int
    let types: [AttributeType]
    /// Whether each attribute is optional (its column may hold NULL).
    let nullable: [Bool]
    let keyIndex: Int
    let keyType: AttributeType
    /// The statements by key, in SQLite's parameter markers.
    let statements: SQLKeyStatements<SQLiteDialect>

    enum Kind: Int {
        case selectByKey, insert, insertUnlessKeyExists, update, deleteByKey, countAll
    }

    @inline(__always)
    func key(_ kind: Kind) -> Int { serial &* 16 &+ kind.rawValue }

    init(entity: EntityDescription, serial: Int) {
        self.entity = entity
        self.serial = serial
        types = entity.attributes.map(\.type)
        nullable = entity.attributes.map(\.isOptional)
        keyIndex = entity.primaryKeyIndex
        keyType = entity.primaryKey.type
        statements = SQLKeyStatements(entity)
    }
}

// MARK: - DDL

package enum DDL {
    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .int64, .bool: "INTEGER"
        case .double, .date: "REAL"
        case .string: "TEXT"
        case .data, .uuid: "BLOB"
        }
    }

    /// The name (unquoted) of the index Depot makes for `attribute` of `entity`:
    /// `depot_idx_<n>_<entity>_<attribute>`, where `n` is the entity name's length in
    /// UTF-8 bytes.
    ///
    /// The length makes the name decodable (``indexNameParts(_:)``), so two different
    /// pairs never get the same name. Versions before it wrote
    /// ``legacyIndexName(entity:attribute:)``, `depot_idx_<entity>_<attribute>`, where
    /// `a_b` + `c` and `a` + `b_c` collide, and `CREATE INDEX IF NOT EXISTS` then silently
    /// left the second attribute without an index. Entity names never start with a digit,
    /// so no legacy name equals a current one.
    package static func indexName(entity: String, attribute: String) -> String {
        "depot_idx_\(entity.utf8.count)_\(entity)_\(attribute)"
    }

    /// The name earlier versions gave the index of `attribute`; still recognised when an
    /// index is looked up, so files they wrote keep working.
    package static func legacyIndexName(entity: String, attribute: String) -> String {
        "depot_idx_\(entity)_\(attribute)"
    }

    /// The entity and attribute a current index name stands for, or nil when `name` is not
    /// one. The inverse of ``indexName(entity:attribute:)``, which is what makes names
    /// collision-free.
    package static func indexNameParts(_ name: String) -> (entity: String, attribute: String)? {
        let prefix = Array("depot_idx_".utf8)
        let bytes = Array(name.utf8)
        guard bytes.starts(with: prefix) else { return nil }
        var position = prefix.count
        var length = 0
        var digits = 0
        while position < bytes.count, bytes[position] >= 48, bytes[position] <= 57 {
            // Nine digits already exceed any name: stop before the number can overflow.
            guard digits < 9 else { return nil }
            length = length * 10 + Int(bytes[position] - 48)
            digits += 1
            position += 1
        }
        guard digits > 0, !(digits > 1 && bytes[prefix.count] == 48), position < bytes.count, bytes[position] == 95 else { return nil }
        let entityStart = position + 1
        let entityEnd = entityStart + length
        guard entityEnd < bytes.count, bytes[entityEnd] == 95 else { return nil }
        let entity = String(decoding: bytes[entityStart..<entityEnd], as: UTF8.self)
        let attribute = String(decoding: bytes[(entityEnd + 1)...], as: UTF8.self)
        // A cut through a multi-byte character decodes to replacement characters.
        guard indexName(entity: entity, attribute: attribute) == name else { return nil }
        return (entity, attribute)
    }

    /// The table, with the primary key, NOT NULL and UNIQUE constraints. An integer key is
    /// the rowid itself; other keys make a WITHOUT ROWID table clustered on the key.
    static func createTable(_ entity: EntityDescription, registered: (String) -> EntityDescription? = { _ in nil }) -> String {
        var columns: [String] = []
        for (i, attribute) in entity.attributes.enumerated() {
            var column = "\(quoted(attribute.name)) \(columnType(attribute.type))"
            if i == entity.primaryKeyIndex {
                column += " PRIMARY KEY NOT NULL"
            } else {
                if !attribute.isOptional { column += " NOT NULL" }
                if attribute.isUnique { column += " UNIQUE" }
            }
            column += foreignKey(attribute, registered: registered)
            columns.append(column)
        }
        let rowid = entity.primaryKey.type == .int64 ? "" : " WITHOUT ROWID"
        return "CREATE TABLE \(quoted(entity.name)) (\n  \(columns.joined(separator: ",\n  "))\n)\(rowid)"
    }

    /// The `REFERENCES` clause of a reference attribute, so that SQLite itself knows the
    /// relationship (`PRAGMA foreign_key_list`, `PRAGMA foreign_key_check`) and refuses, at
    /// commit, a row any program leaves pointing to nothing.
    ///
    /// Always `ON DELETE NO ACTION DEFERRABLE INITIALLY DEFERRED`, whatever Depot's rule
    /// (which the trailing comment names, kept by SQLite in the table's SQL): Depot applies
    /// the rules itself (`ReferenceEnforcement`) so that observers hear of every record
    /// they touch and every backend behaves alike. SQLite's own CASCADE would delete records
    /// of a cascade cycle behind Depot's back, and its RESTRICT is checked at once, where
    /// Depot's deny lets a record go with the records that refer to it.
    static func foreignKey(_ attribute: AttributeDescription, registered: (String) -> EntityDescription?) -> String {
        guard let reference = attribute.reference else { return "" }
        let key = registered(reference.entity).map { " (\(quoted($0.primaryKey.name)))" } ?? ""
        return " REFERENCES \(quoted(reference.entity))\(key) ON DELETE NO ACTION DEFERRABLE INITIALLY DEFERRED /* depot: on delete \(reference.onDelete.rawValue) */"
    }

    /// Whether an attribute needs an index of its own (the key and unique attributes
    /// already have one).
    static func wantsIndex(_ attribute: AttributeDescription, in entity: EntityDescription) -> Bool {
        attribute.isIndexed && !attribute.isUnique && attribute.name != entity.primaryKey.name
    }

    /// Without `IF NOT EXISTS`: the caller has looked the index up by table
    /// (`SQLiteStore.ensureIndex`), so a name already taken is an error to report, not an
    /// index to skip.
    static func createIndex(_ attribute: AttributeDescription, in entity: EntityDescription) -> String {
        "CREATE INDEX \(quoted(indexName(entity: entity.name, attribute: attribute.name))) ON \(quoted(entity.name)) (\(quoted(attribute.name)))"
    }

    /// The name (unquoted) of the index Depot makes for a declared ``IndexDescription``:
    /// `depot_cidx_<n>_<entity>_<index name>`, `n` the entity name's length in UTF-8 bytes.
    /// The index's own name is collision-free among the entity's indexes, and the length
    /// keeps two entities' names apart (`a_b` + `ix_1_c` and `a` + `b_ix_1_c`); the prefix
    /// keeps them apart from single-attribute indexes (`depot_idx_…`).
    static func compositeIndexName(entity: String, index: IndexDescription) -> String {
        "depot_cidx_\(entity.utf8.count)_\(entity)_\(index.name)"
    }

    /// The columns of a declared index, in SQL: each component with its direction, then,
    /// for an index that is not unique and has a descending component, the primary key
    /// ascending. Depot's sorts end with the primary key ascending (the tie-break), and
    /// SQLite already ends every index with the table's key (the rowid, or the key of a
    /// WITHOUT ROWID table), which serves a sort whose components all ascend; after a
    /// descending component the key must ascend where the scan descends, so it is
    /// written out. A unique index gets no key: that would make every entry unique.
    static func compositeIndexColumns(_ index: IndexDescription, in entity: EntityDescription) -> [String] {
        var columns = index.components.map { "\(quoted($0.attribute)) \($0.isDescending ? "DESC" : "ASC")" }
        let key = entity.primaryKey.name
        if !index.isUnique, index.components.contains(where: \.isDescending), !index.components.contains(where: { $0.attribute == key }) {
            columns.append("\(quoted(key)) ASC")
        }
        return columns
    }

    /// Without `IF NOT EXISTS`: the name is Depot's own and derived from the declaration,
    /// so an index already under it is not one to adopt silently.
    static func createIndex(_ index: IndexDescription, in entity: EntityDescription) -> String {
        let columns = compositeIndexColumns(index, in: entity).joined(separator: ", ")
        return "CREATE \(index.isUnique ? "UNIQUE " : "")INDEX \(quoted(compositeIndexName(entity: entity.name, index: index))) ON \(quoted(entity.name)) (\(columns))"
    }

    static func dropIndex(_ index: IndexDescription, in entity: EntityDescription) -> String {
        "DROP INDEX IF EXISTS \(quoted(compositeIndexName(entity: entity.name, index: index)))"
    }

    /// `ALTER TABLE … ADD COLUMN` for a new attribute, and whether existing rows must then
    /// be given `fill` by a bound `UPDATE`.
    ///
    /// `ALTER TABLE` takes no parameters and its DEFAULT only a literal, so a default is
    /// written as a literal only when the literal is exact (integers, integral doubles,
    /// strings without NUL, bytes in hex). Any other default gets a placeholder literal of
    /// the right type, then the real value is bound into every existing row.
    static func addColumn(
        _ attribute: AttributeDescription, to entity: EntityDescription, registered: (String) -> EntityDescription? = { _ in nil }
    ) -> (sql: String, needsFill: Bool) {
        let fill = SchemaMigration.fillValue(for: attribute)
        var sql = "ALTER TABLE \(quoted(entity.name)) ADD COLUMN \(quoted(attribute.name)) \(columnType(attribute.type))"
        // SQLite refuses a REFERENCES column with a default other than NULL while foreign
        // keys are on: registration turns them off (SQLiteStore.registerNow) and checks a
        // defaulted reference itself.
        let references = foreignKey(attribute, registered: registered)
        if fill.isNull { return (sql + references, false) }
        if !attribute.isOptional { sql += " NOT NULL" }
        if let literal = exactLiteral(fill) {
            return (sql + " DEFAULT " + literal + references, false)
        }
        return (sql + " DEFAULT " + placeholderLiteral(attribute.type) + references, true)
    }

    static func placeholderLiteral(_ type: AttributeType) -> String {
        switch type {
        case .int64, .bool, .double, .date: "0"
        case .string: "''"
        case .data, .uuid: "X''"
        }
    }

    /// An SQL literal that reads back as exactly `value`, or nil when there is none.
    static func exactLiteral(_ value: Value) -> String? {
        switch value {
        case .null: return "NULL"
        case .int(let v): return String(v)
        case .bool(let v): return v ? "1" : "0"
        case .double(let v): return integralLiteral(v)
        case .date(let v): return integralLiteral(v.timeIntervalSinceReferenceDate)
        case .string(let s):
            if s.utf8.contains(0) { return nil }
            return "'" + s.replacingOccurrences(of: "'", with: "''") + "'"
        case .data(let d): return hexLiteral(d)
        case .uuid(let u): return withUnsafeBytes(of: u.uuid) { hexLiteral($0) }
        }
    }

    /// Doubles are written only when integral and within ±2^53, where the decimal text
    /// is exact whatever SQLite's float parser does.
    private static func integralLiteral(_ v: Double) -> String? {
        guard v.isFinite, v == v.rounded(), abs(v) <= 9_007_199_254_740_992 else { return nil }
        return String(Int64(v)) + ".0"
    }

    private static func hexLiteral(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = Array("X'".utf8)
        out.reserveCapacity(bytes.count * 2 + 3)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        out.append(UInt8(ascii: "'"))
        return String(decoding: out, as: UTF8.self)
    }
}
