import Foundation

/// The backend-neutral description of one attribute: what a store needs to create a column,
/// a field or an index. ``Attribute`` declares it for a typed record.
public struct AttributeDescription: Sendable, Hashable, Codable {
    /// The attribute's name: letters, digits and `_`, not starting with a digit, at most
    /// 64 characters. Names are unique per entity regardless of case (SQL identifiers are
    /// case-insensitive).
    public var name: String
    /// The stored type.
    public var type: AttributeType
    /// Whether a record may leave the attribute nil.
    public var isOptional: Bool
    /// The value given to existing records when the attribute is added to an entity that
    /// already has records.
    public var defaultValue: Value?
    /// Whether the store keeps an index on the attribute.
    public var isIndexed: Bool
    /// Whether no two records may share a non-nil value.
    public var isUnique: Bool
    /// The entity whose primary key this attribute holds, and what happens to this record
    /// when that one is deleted; `nil` for an attribute that refers to nothing. A
    /// reference attribute is always indexed (the delete rules look records up by it).
    public var reference: Reference?

    /// An attribute; a reference makes it indexed whatever `isIndexed` says.
    public init(
        name: String, type: AttributeType, isOptional: Bool = false, defaultValue: Value? = nil,
        isIndexed: Bool = false, isUnique: Bool = false, reference: Reference? = nil
    ) {
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.defaultValue = defaultValue
        self.isIndexed = isIndexed || reference != nil
        self.isUnique = isUnique
        self.reference = reference
    }
}

/// The backend-neutral schema of one entity: its name, attributes, primary key and the
/// indexes that span attributes.
///
/// Stores receive this type; applications normally declare an ``Entity`` on their record
/// and never build one by hand.
public struct EntityDescription: Sendable, Hashable, Codable {
    /// The entity's name, unique in a store.
    public var name: String
    /// Attributes in declaration order; rows carry values in this order.
    public var attributes: [AttributeDescription]
    /// The position of the primary key in ``attributes``.
    public var primaryKeyIndex: Int
    /// Indexes over several attributes (or one, in descending order), beside the
    /// single-attribute indexes that ``AttributeDescription/isIndexed`` asks for.
    public var indexes: [IndexDescription]

    /// An entity named `name` with `attributes`, keyed by the one at `primaryKeyIndex`.
    public init(name: String, attributes: [AttributeDescription], primaryKeyIndex: Int, indexes: [IndexDescription] = []) {
        self.name = name
        self.attributes = attributes
        self.primaryKeyIndex = primaryKeyIndex
        self.indexes = indexes
    }

    /// Builds a description naming the primary key by attribute name.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` when no attribute has that name.
    public init(name: String, attributes: [AttributeDescription], primaryKey: String, indexes: [IndexDescription] = []) throws(DepotError) {
        guard let index = attributes.firstIndex(where: { $0.name == primaryKey }) else {
            throw DepotError(.invalidSchema, "Entity \(name) names primary key '\(primaryKey)', but has no attribute of that name. Declare the attribute or name another primary key.")
        }
        self.init(name: name, attributes: attributes, primaryKeyIndex: index, indexes: indexes)
    }

    private enum CodingKeys: String, CodingKey { case name, attributes, primaryKeyIndex, indexes }

    /// Decodes a description; one stored before indexes existed has none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        attributes = try c.decode([AttributeDescription].self, forKey: .attributes)
        primaryKeyIndex = try c.decode(Int.self, forKey: .primaryKeyIndex)
        indexes = try c.decodeIfPresent([IndexDescription].self, forKey: .indexes) ?? []
    }

    /// Encodes the description, leaving out an empty index list, so an entity without
    /// indexes is stored exactly as versions before them stored it (and they can read it).
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(attributes, forKey: .attributes)
        try c.encode(primaryKeyIndex, forKey: .primaryKeyIndex)
        if !indexes.isEmpty { try c.encode(indexes, forKey: .indexes) }
    }

    /// The index over exactly these components, if the entity declares it.
    public func index(over components: [IndexDescription.Component]) -> IndexDescription? {
        indexes.first { $0.components == components }
    }

    /// The primary key attribute.
    public var primaryKey: AttributeDescription { attributes[primaryKeyIndex] }

    /// The position of the attribute with this exact name.
    public func index(of attribute: String) -> Int? {
        // By index, not `firstIndex(where:)`, whose closure got a copy of each attribute's
        // description.
        for index in attributes.indices where attributes[index].name == attribute { return index }
        return nil
    }

    /// Types that may be primary keys.
    public static let primaryKeyTypes: Set<AttributeType> = [.int64, .string, .uuid, .data, .date]

    /// Checks the description against the rules every backend relies on.
    ///
    /// - Throws: ``DepotError/Code/invalidSchema`` naming the first problem found.
    public func validate() throws(DepotError) {
        try Self.validateIdentifier(name, what: "Entity name")
        guard !attributes.isEmpty else {
            throw DepotError(.invalidSchema, "Entity \(name) declares no attributes; declare at least its primary key.")
        }
        guard attributes.indices.contains(primaryKeyIndex) else {
            throw DepotError(.invalidSchema, "Entity \(name) has no primary key; name one of its attributes as primary key.")
        }
        var seen = Set<String>()
        for attribute in attributes {
            try Self.validateIdentifier(attribute.name, what: "Attribute name in \(name)")
            guard seen.insert(attribute.name.lowercased()).inserted else {
                throw DepotError(.invalidSchema, "Entity \(name) declares attribute '\(attribute.name)' twice (names are compared without case). Rename one of them.")
            }
            if let value = attribute.defaultValue {
                if value.isNull {
                    if !attribute.isOptional {
                        throw DepotError(.invalidSchema, "Attribute \(name).\(attribute.name) is not optional, so its default value cannot be nil.")
                    }
                } else if value.type != attribute.type {
                    throw DepotError(.invalidSchema, "Attribute \(name).\(attribute.name) has type \(attribute.type.rawValue), but its default value \(value.debugLiteral) is of another type.")
                }
            }
            if let reference = attribute.reference {
                try reference.validate(attribute, in: name)
            }
        }
        var indexNames = Set<String>()
        for index in indexes {
            try index.validate(in: self)
            guard indexNames.insert(index.name.lowercased()).inserted else {
                throw DepotError(.invalidSchema, "Entity \(name) declares the index (\(index.summary)) twice (attribute names are compared without case); declare it once, unique or not.")
            }
        }
        let key = primaryKey
        guard !key.isOptional else {
            throw DepotError(.invalidSchema, "The primary key \(name).\(key.name) is optional; a primary key must always have a value.")
        }
        guard Self.primaryKeyTypes.contains(key.type) else {
            throw DepotError(.invalidSchema, "The primary key \(name).\(key.name) has type \(key.type.rawValue), which is not supported for keys; use int64, string, uuid, data or date.")
        }
    }

    /// Checks that a row fits the entity: one value per attribute, of the attribute's type,
    /// nil only where the attribute is optional. Backends call it before writing anything.
    ///
    /// - Returns: The row's primary key.
    /// - Throws: ``DepotError/Code/conversionFailed`` naming the attribute.
    public func check(_ row: Row) throws(DepotError) -> Value {
        guard row.count == attributes.count else {
            throw DepotError(.conversionFailed, "A \(name) row has \(row.count) values, but the entity declares \(attributes.count) attributes.")
        }
        // Field by field, not `enumerated()`: binding each attribute copied the whole
        // description (its name and default retained and released) for every value of every
        // row written.
        for i in attributes.indices {
            let type = row[value: i].type
            if type == nil {
                if !attributes[i].isOptional {
                    throw DepotError(.conversionFailed, "\(name).\(attributes[i].name) is not optional but the row has nil for it.")
                }
            } else if type != attributes[i].type {
                throw DepotError(.conversionFailed, "\(name).\(attributes[i].name) has type \(attributes[i].type.rawValue), but the row holds \(row[value: i].debugLiteral).")
            }
        }
        return row[value: primaryKeyIndex]
    }

    /// Checks that `described` (what a transaction was handed) lays rows out as this
    /// registered description does: the same attributes, with the same names and types,
    /// in the same order, and the same primary key. Rows are stored by position, so a
    /// record type whose attributes are reordered, renamed or retyped must not write
    /// through the registration of another.
    ///
    /// - Throws: ``DepotError/Code/schemaMismatch`` naming the first difference.
    public func checkSameShape(as described: EntityDescription) throws(DepotError) {
        let hint = "use the record type that registered it, or register the new declaration first"
        guard described.attributes.count == attributes.count else {
            throw DepotError(.schemaMismatch, "The entity \(name) is registered with \(attributes.count) attributes, but this request describes \(described.attributes.count); \(hint).")
        }
        for (i, (registered, given)) in zip(attributes, described.attributes).enumerated()
        where registered.name != given.name || registered.type != given.type || registered.isOptional != given.isOptional {
            throw DepotError(.schemaMismatch, "The entity \(name) is registered with attribute \(i + 1) as \(registered.name) (\(registered.type.rawValue)\(registered.isOptional ? ", optional" : "")), but this request describes it as \(given.name) (\(given.type.rawValue)\(given.isOptional ? ", optional" : "")); \(hint).")
        }
        guard described.primaryKeyIndex == primaryKeyIndex else {
            throw DepotError(.schemaMismatch, "The entity \(name) is registered with primary key \(primaryKey.name), but this request names another; \(hint).")
        }
    }

    static func validateIdentifier(_ identifier: String, what: String) throws(DepotError) {
        let utf8 = identifier.utf8
        guard let first = utf8.first, utf8.count <= 64 else {
            throw DepotError(.invalidSchema, "\(what) '\(identifier)' must have 1 to 64 characters.")
        }
        func isLetter(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 }
        func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }
        guard isLetter(first), utf8.allSatisfy({ isLetter($0) || isDigit($0) }) else {
            throw DepotError(.invalidSchema, "\(what) '\(identifier)' may contain only ASCII letters, digits and '_', and must not start with a digit.")
        }
        // Depot's own ledger of migration steps is the one name with the reserved prefix.
        guard identifier == migrationLedgerName || !identifier.lowercased().hasPrefix("depot_"), !identifier.lowercased().hasPrefix("sqlite_") else {
            throw DepotError(.invalidSchema, "\(what) '\(identifier)' uses a reserved prefix (depot_, sqlite_); choose another name.")
        }
    }
}

extension Value: Codable {
    private enum CodingKeys: String, CodingKey { case type, value }

    /// Encodes the value as its type's name and its value; doubles and dates by their bits, so
    /// every value round-trips exactly.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .null: try c.encode("null", forKey: .type)
        case .int(let v): try c.encode("int64", forKey: .type); try c.encode(v, forKey: .value)
        case .double(let v):
            // JSON has no NaN or infinity: keep the bit pattern.
            try c.encode("double", forKey: .type); try c.encode(v.bitPattern, forKey: .value)
        case .bool(let v): try c.encode("bool", forKey: .type); try c.encode(v, forKey: .value)
        case .string(let v): try c.encode("string", forKey: .type); try c.encode(v, forKey: .value)
        case .data(let v): try c.encode("data", forKey: .type); try c.encode(v, forKey: .value)
        case .date(let v):
            try c.encode("date", forKey: .type)
            try c.encode(v.timeIntervalSinceReferenceDate.bitPattern, forKey: .value)
        case .uuid(let v): try c.encode("uuid", forKey: .type); try c.encode(v, forKey: .value)
        }
    }

    /// Decodes a value encoded by ``encode(to:)``.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        switch try c.decode(String.self, forKey: .type) {
        case "null": self = .null
        case "int64": self = .int(try c.decode(Int64.self, forKey: .value))
        case "double": self = .double(Double(bitPattern: try c.decode(UInt64.self, forKey: .value)))
        case "bool": self = .bool(try c.decode(Bool.self, forKey: .value))
        case "string": self = .string(try c.decode(String.self, forKey: .value))
        case "data": self = .data(try c.decode(Data.self, forKey: .value))
        case "date":
            self = .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try c.decode(UInt64.self, forKey: .value))))
        case "uuid": self = .uuid(try c.decode(UUID.self, forKey: .value))
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .type, in: c, debugDescription: "unknown value type \(other)")
        }
    }
}
