import DepotCore
import DepotSQL
import Foundation
import Synchronization

/// A registered entity and the SQL that reads and writes its table, built once. Column
/// lists follow the declared attribute order, which is the row order.
final class RegisteredEntity: Sendable {
    let entity: EntityDescription
    let types: [AttributeType]
    let keyIndex: Int
    let keyType: AttributeType
    /// The statements by key, in PostgreSQL's parameter markers.
    let statements: SQLKeyStatements<PostgresDialect>
    let upsert: String
    /// The same writes as one autocommit statement each, carrying their change notification
    /// and the schema-version guard (see `PostgresEngine+SingleStatement.swift`).
    let single: SingleStatements
    /// Whether a write can violate a UNIQUE constraint other than the key's (which inserts
    /// avoid with ON CONFLICT): such writes run inside a savepoint (see PostgresTransaction).
    let hasUniqueAttributes: Bool
    /// How this entity's last upsert went (inserted or updated): a held-back upsert is
    /// answered so (see `PostgresEngine+SingleStatement.swift`).
    let upsertsInsert = Atomic<Bool>(true)

    /// A write of one record as one autocommit statement: a data-modifying CTE that writes
    /// the row only while the schema version is the one the registry was verified at, sends
    /// the change notification for each row it wrote (so only a write that took effect is
    /// heard, and in its own commit), and returns how many rows it wrote: the count of the
    /// notifications, one per row written. PostgreSQL runs a CTE that only reads (the
    /// notifications' `SELECT`) when something reads it, and a data-modifying one always, so
    /// counting the notifications sends them and counts the rows. An upsert is sent as the
    /// insert or the update it was answered as, so it takes effect only as answered.
    ///
    /// Parameters: the row's attributes `$1...$n` (for a delete, the key `$1`), then the
    /// channel, the notification's payload and the schema version expected.
    struct SingleStatements: Sendable {
        let insert: String
        let update: String
        let delete: String
    }

    init(entity: EntityDescription) {
        self.entity = entity
        types = entity.attributes.map(\.type)
        keyIndex = entity.primaryKeyIndex
        keyType = entity.primaryKey.type
        let statements = SQLKeyStatements<PostgresDialect>(entity)
        self.statements = statements
        let columns = entity.attributes.map { quoted($0.name) }
        // One statement that says which it did: a row the INSERT wrote has no xmax yet,
        // a row the DO UPDATE rewrote has this transaction's.
        let excluded = columns.indices.filter { $0 != entity.primaryKeyIndex }.map { "\(columns[$0]) = EXCLUDED.\(columns[$0])" }
        let keyColumn = statements.keyColumn
        upsert = statements.insert + " ON CONFLICT (\(keyColumn)) DO UPDATE SET "
            + (excluded.isEmpty ? "\(keyColumn) = EXCLUDED.\(keyColumn)" : excluded.joined(separator: ", "))
            + " RETURNING (xmax = 0)"
        hasUniqueAttributes =
            entity.attributes.enumerated().contains { $0.offset != entity.primaryKeyIndex && $0.element.isUnique }
            || entity.indexes.contains(where: \.isUnique)
        single = Self.singleStatements(statements, count: columns.count)
    }

    private static func singleStatements(_ statements: SQLKeyStatements<PostgresDialect>, count: Int) -> SingleStatements {
        let (name, columnList, keyColumn) = (statements.name, statements.columnList, statements.keyColumn)
        let (parameters, assignments, keyParameter) = (statements.parameters, statements.assignments, statements.keyParameter)
        let version = "(SELECT value FROM depot_meta WHERE key = 'schema')"
        func guarded(_ at: Int) -> String { "\(version) IS NOT DISTINCT FROM $\(at)" }
        func wrapped(_ write: String, extra: Int, payload: String) -> String {
            "WITH w AS (\(write)), n AS (SELECT pg_notify($\(extra), \(payload)) FROM w) SELECT count(*) FROM n"
        }
        let channel = count + 1
        let insertRow = "INSERT INTO \(name) (\(columnList)) SELECT \(parameters) WHERE \(guarded(count + 3))"
        let insert = wrapped(insertRow + " ON CONFLICT (\(keyColumn)) DO NOTHING RETURNING 1", extra: channel, payload: "$\(count + 2)")
        let update = wrapped(
            "UPDATE \(name) SET \(assignments.joined(separator: ", ")) WHERE \(keyColumn) = \(keyParameter) AND \(guarded(count + 3)) RETURNING 1",
            extra: channel, payload: "$\(count + 2)")
        let delete = wrapped("DELETE FROM \(name) WHERE \(keyColumn) = $1 AND \(guarded(4)) RETURNING 1", extra: 2, payload: "$3")
        return SingleStatements(insert: insert, update: update, delete: delete)
    }
}

/// The DDL of Depot's tables in PostgreSQL.
enum PGDDL {
    /// PostgreSQL cuts identifiers at 63 bytes (NAMEDATALEN - 1), silently: longer names
    /// would collide, so they are refused at registration.
    static let identifierLimit = 63

    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .int64: "bigint"
        case .bool: "boolean"
        // Dates are seconds since 2001 as a double: exact to the bit, like every backend;
        // a `timestamptz` keeps only microseconds.
        case .double, .date: "double precision"
        // "C": strings compare by their UTF-8 bytes, as Depot orders them everywhere.
        case .string: "text COLLATE \"C\""
        case .data: "bytea"
        case .uuid: "uuid"
        }
    }

    static func checkNames(_ entity: EntityDescription) throws(DepotError) {
        for name in [entity.name] + entity.attributes.map(\.name) where name.utf8.count > identifierLimit {
            throw DepotError(.invalidSchema, "The name \(name) in entity \(entity.name) is \(name.utf8.count) bytes long; PostgreSQL keeps only \(identifierLimit) bytes of a name. Use a shorter one.")
        }
    }

    /// The index Depot makes for `attribute`: `depot_idx_<n>_<entity>_<attribute>` (n: the
    /// entity name's length, so two pairs never share a name), or, when that exceeds
    /// PostgreSQL's 63 bytes, the entity's and attribute's names hashed.
    static func indexName(entity: String, attribute: String) -> String {
        name("depot_idx", entity: entity, attribute: attribute)
    }

    /// The primary key constraint's name (and its index's). Named by Depot rather than left
    /// to PostgreSQL, which cuts long generated names in its own way: errors are matched
    /// against these names, and a schema rewrite renames them.
    static func primaryKeyName(entity: String) -> String {
        name("depot_pk", entity: entity, attribute: "")
    }

    /// The UNIQUE constraint's name of `attribute`.
    static func uniqueName(entity: String, attribute: String) -> String {
        name("depot_uq", entity: entity, attribute: attribute)
    }

    /// `<prefix>_<n>_<entity>_<attribute>`, or the names hashed when that is longer than
    /// PostgreSQL keeps.
    static func name(_ prefix: String, entity: String, attribute: String) -> String {
        let full = "\(prefix)_\(entity.utf8.count)_\(entity)_\(attribute)"
        if full.utf8.count <= identifierLimit { return full }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array(entity.utf8) + [0] + Array(attribute.utf8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return "\(prefix)_h\(String(hash, radix: 16))"
    }

    /// The table with its key, NOT NULL and UNIQUE constraints and its indexes. Foreign keys
    /// come after every table of a registration exists (``addForeignKeys(_:registered:)``):
    /// PostgreSQL, unlike SQLite, needs the referenced table first, and references may form
    /// a cycle.
    static func createTable(_ entity: EntityDescription) -> [String] {
        var columns: [String] = []
        for (i, attribute) in entity.attributes.enumerated() {
            var column = "\(quoted(attribute.name)) \(columnType(attribute.type))"
            if i == entity.primaryKeyIndex {
                column += " CONSTRAINT \(quoted(primaryKeyName(entity: entity.name))) PRIMARY KEY"
            } else {
                if !attribute.isOptional { column += " NOT NULL" }
                if attribute.isUnique { column += " CONSTRAINT \(quoted(uniqueName(entity: entity.name, attribute: attribute.name))) UNIQUE" }
            }
            columns.append(column)
        }
        var statements = ["CREATE TABLE \(quoted(entity.name)) (\n  \(columns.joined(separator: ",\n  "))\n)"]
        for attribute in entity.attributes {
            statements += referenceComment(attribute, in: entity)
            if wantsIndex(attribute, in: entity) { statements.append(createIndex(attribute, in: entity)) }
        }
        return statements
    }

    /// The foreign key of a reference attribute, so PostgreSQL knows the relationship (`\d`
    /// in psql) and refuses, at commit, a row any program leaves pointing to nothing. Always
    /// NO ACTION and deferred: Depot applies its own rule (`ReferenceEnforcement`), so
    /// observers hear of every record a cascade touches and the backends agree; the rule is
    /// in the column's comment.
    static func addForeignKey(_ attribute: AttributeDescription, of entity: String, registered: (String) -> EntityDescription?) -> [String] {
        guard let reference = attribute.reference else { return [] }
        let key = registered(reference.entity).map { " (\(quoted($0.primaryKey.name)))" } ?? ""
        return [
            "ALTER TABLE \(quoted(entity)) ADD FOREIGN KEY (\(quoted(attribute.name))) REFERENCES \(quoted(reference.entity))\(key) ON DELETE NO ACTION DEFERRABLE INITIALLY DEFERRED"
        ]
    }

    static func addForeignKeys(_ entity: EntityDescription, registered: (String) -> EntityDescription?) -> [String] {
        entity.attributes.flatMap { addForeignKey($0, of: entity.name, registered: registered) }
    }

    static func referenceComment(_ attribute: AttributeDescription, in entity: EntityDescription) -> [String] {
        guard let reference = attribute.reference else { return [] }
        return ["COMMENT ON COLUMN \(quoted(entity.name)).\(quoted(attribute.name)) IS 'depot: references \(reference.entity), on delete \(reference.onDelete.rawValue)'"]
    }

    /// Whether `attribute` gets an index of its own (``createIndex(_:in:)``): an indexed
    /// attribute does, and so does a unique one that can hold nil. A unique attribute's
    /// constraint is backed by an index in PostgreSQL's default order, which a constraint
    /// cannot change (`UNIQUE USING INDEX` takes only an index in that order); for a
    /// column without nil that is the order Depot sorts by, but a nullable one sorted with
    /// nil first ascending matched it read neither way. The constraint stays what enforces
    /// uniqueness (nil values never conflict) and names the violation; the second index
    /// serves the sorts, with the primary key after the attribute as Depot's sorts end.
    static func wantsIndex(_ attribute: AttributeDescription, in entity: EntityDescription) -> Bool {
        attribute.isIndexed && (!attribute.isUnique || attribute.isOptional) && attribute.name != entity.primaryKey.name
    }

    /// The index of an indexed attribute (or a nullable unique one, see
    /// ``wantsIndex(_:in:)``), in the order Depot sorts by, as a declared index
    /// of that one attribute is (``compositeIndexColumns(_:in:)``), then the primary key.
    /// Made in PostgreSQL's default order, the index of a nullable attribute served no sort
    /// Depot asks for, read forwards or backwards, and a request sorted by the attribute
    /// with a limit read and sorted every record.
    static func createIndex(_ attribute: AttributeDescription, in entity: EntityDescription) -> String {
        let columns = compositeIndexColumns(IndexDescription([.ascending(attribute.name)]), in: entity).joined(separator: ", ")
        return "CREATE INDEX IF NOT EXISTS \(quoted(indexName(entity: entity.name, attribute: attribute.name))) ON \(quoted(entity.name)) (\(columns))"
    }

    /// The index Depot makes for a declared ``IndexDescription``:
    /// `depot_cidx_<n>_<entity>_<index name>`, or hashed when longer than PostgreSQL keeps
    /// (see ``name(_:entity:attribute:)``). The index's own name is collision-free among
    /// the entity's indexes; the prefix keeps it apart from single-attribute indexes.
    static func compositeIndexName(entity: String, index: IndexDescription) -> String {
        name("depot_cidx", entity: entity, attribute: index.name)
    }

    /// A column of an index or an ORDER BY key, in the order Depot sorts by: nil first
    /// ascending and last descending. A column that cannot hold nil is written in
    /// PostgreSQL's default order (`ASC`, `DESC`), so that the ORDER BY keys match the
    /// primary key's and unique constraints' indexes, which are in that order; a nullable
    /// one says where nil goes (`ASC NULLS FIRST`, `DESC NULLS LAST`), and so does its
    /// index. PostgreSQL reads an index for an ORDER BY only when the nulls orders agree.
    static func indexColumn(_ quotedName: String, descending: Bool, nullable: Bool) -> String {
        switch (descending, nullable) {
        case (false, false): "\(quotedName) ASC"
        case (true, false): "\(quotedName) DESC"
        case (false, true): "\(quotedName) ASC NULLS FIRST"
        case (true, true): "\(quotedName) DESC NULLS LAST"
        }
    }

    /// The columns of a declared index, in SQL, in the order Depot's queries sort by (see
    /// ``indexColumn(_:descending:nullable:)``), then, unless the index is unique or already
    /// has it, the primary key ascending: Depot's sorts end with the key, and PostgreSQL's
    /// entries of equal values are in no particular order. The columns' collation (`"C"`)
    /// is the index's.
    static func compositeIndexColumns(_ index: IndexDescription, in entity: EntityDescription) -> [String] {
        func column(_ name: String, descending: Bool) -> String {
            let nullable = entity.attributes.first { $0.name == name }?.isOptional ?? true
            return indexColumn(quoted(name), descending: descending, nullable: nullable)
        }
        var columns = index.components.map { column($0.attribute, descending: $0.isDescending) }
        let key = entity.primaryKey.name
        if !index.isUnique, !index.components.contains(where: { $0.attribute == key }) {
            columns.append(column(key, descending: false))
        }
        return columns
    }

    /// Without `IF NOT EXISTS`: the name is derived from the declaration, so an index
    /// already under it is not one to adopt silently.
    static func createIndex(_ index: IndexDescription, in entity: EntityDescription) -> String {
        let columns = compositeIndexColumns(index, in: entity).joined(separator: ", ")
        return "CREATE \(index.isUnique ? "UNIQUE " : "")INDEX \(quoted(compositeIndexName(entity: entity.name, index: index))) ON \(quoted(entity.name)) (\(columns))"
    }

    static func dropIndex(_ index: IndexDescription, in entity: EntityDescription) -> String {
        "DROP INDEX IF EXISTS \(quoted(compositeIndexName(entity: entity.name, index: index)))"
    }

    static func dropIndex(_ attribute: AttributeDescription, in entity: EntityDescription) -> String {
        "DROP INDEX IF EXISTS \(quoted(indexName(entity: entity.name, attribute: attribute.name)))"
    }
}
