/// A predicate over the records of one type, checked against its entity when it runs.
///
/// (Named `Condition` so that it never collides with Foundation's `Predicate` in files
/// that import both.)
///
/// Build it from key paths, which the compiler checks:
///
/// ```swift
/// let old: Condition<CatRecord> = \.age > 10 && \.name != "Tom"
/// let named = Condition<CatRecord>.in(\.name, ["Tom", "Felix"])
/// ```
///
/// or from attribute names, for dynamic use; an unknown name or a value of the wrong type
/// is reported as ``DepotError/Code/invalidPredicate`` when the request runs, never as an
/// empty result:
///
/// ```swift
/// let pedro = Condition<CatRecord>.where("name", equalTo: "Pedro")
/// ```
public struct Condition<Record: ManagedRecord>: Sendable, Hashable {
    /// The untyped tree.
    public let expression: PredicateExpression

    /// A condition over an untyped tree, checked against the entity when the request runs.
    public init(_ expression: PredicateExpression) { self.expression = expression }

    /// Matches every record.
    public static var all: Condition { Condition(.constant(true)) }
    /// Matches no record.
    public static var none: Condition { Condition(.constant(false)) }

    /// The condition `make` builds from the name of the attribute at `keyPath`, or an invalid
    /// one (reported when the request runs) when the key path is not an attribute or `make`
    /// throws.
    static func build(_ keyPath: AnyKeyPath, _ make: (String) throws(DepotError) -> PredicateExpression) -> Condition {
        guard let name = Record.entity.attributeName(for: keyPath) else { return undeclared() }
        do {
            return Condition(try make(name))
        } catch {
            return Condition(.invalid(error.message))
        }
    }

    @inline(never)
    static func undeclared() -> Condition {
        Condition(.invalid("A key path used in a predicate on \(Record.entity.name) is not one of its declared attributes; declare an Attribute for it."))
    }

    /// The stored form of predicate values. A value that has none (a `Codable` value whose
    /// encoding throws) makes the whole predicate invalid, reported when the request runs,
    /// rather than a placeholder that could match other records.
    static func stored(_ values: some Sequence<some AttributeValue>) throws(DepotError) -> [Value] {
        var out: [Value] = []
        for value in values { out.append(try value.storedValue()) }
        return out
    }

    static func named(_ make: () throws(DepotError) -> PredicateExpression) -> Condition {
        do { return Condition(try make()) } catch { return Condition(.invalid(error.message)) }
    }

    // MARK: Key-path forms

    /// Records whose attribute is one of `values` (`nil` among them matches nil).
    public static func `in`<V: AttributeValue>(_ keyPath: KeyPath<Record, V>, _ values: some Sequence<V>) -> Condition {
        build(keyPath) { name throws(DepotError) in .oneOf(attribute: name, try stored(values)) }
    }

    /// Records whose attribute is not nil and is none of `values`.
    public static func notIn<V: AttributeValue>(_ keyPath: KeyPath<Record, V>, _ values: some Sequence<V>) -> Condition {
        build(keyPath) { name throws(DepotError) in .notOneOf(attribute: name, try stored(values)) }
    }

    /// Records whose attribute is nil.
    public static func isNil<V: AttributeValue>(_ keyPath: KeyPath<Record, V>) -> Condition {
        build(keyPath) { .isNil(attribute: $0) }
    }

    /// Records whose string attribute starts with `prefix` (bytes, case-sensitive).
    public static func hasPrefix<V: AttributeValue>(_ keyPath: KeyPath<Record, V>, _ prefix: String) -> Condition {
        if V.isJSON { return Condition(.invalid(jsonOrderingProblem)) }
        return build(keyPath) { .hasPrefix(attribute: $0, prefix) }
    }

    /// Records whose string attribute contains `substring` (bytes, case-sensitive).
    public static func contains<V: AttributeValue>(_ keyPath: KeyPath<Record, V>, _ substring: String) -> Condition {
        if V.isJSON { return Condition(.invalid(jsonOrderingProblem)) }
        return build(keyPath) { .contains(attribute: $0, substring) }
    }

    // MARK: Name forms

    /// Compares the named attribute with a value.
    public static func `where`(_ attribute: String, _ op: ComparisonOperator, _ value: some AttributeValue) -> Condition {
        named { () throws(DepotError) in .compare(attribute: attribute, op, try value.storedValue()) }
    }

    /// The named attribute equals `value` (`nil` means "is nil").
    public static func `where`(_ attribute: String, equalTo value: some AttributeValue) -> Condition {
        named { () throws(DepotError) in .compare(attribute: attribute, .equal, try value.storedValue()) }
    }

    /// The named attribute is one of `values`.
    public static func `where`(_ attribute: String, in values: [any AttributeValue]) -> Condition {
        named { () throws(DepotError) in .oneOf(attribute: attribute, try values.map { v throws(DepotError) in try v.storedValue() }) }
    }

    /// The named attribute is none of `values`.
    public static func `where`(_ attribute: String, notIn values: [any AttributeValue]) -> Condition {
        named { () throws(DepotError) in .notOneOf(attribute: attribute, try values.map { v throws(DepotError) in try v.storedValue() }) }
    }

    /// The named string attribute starts with `prefix`.
    public static func `where`(_ attribute: String, hasPrefix prefix: String) -> Condition {
        Condition(.hasPrefix(attribute: attribute, prefix))
    }

    /// The named string attribute contains `substring`.
    public static func `where`(_ attribute: String, contains substring: String) -> Condition {
        Condition(.contains(attribute: attribute, substring))
    }

    /// The named attribute is nil.
    public static func whereNil(_ attribute: String) -> Condition {
        Condition(.isNil(attribute: attribute))
    }

    // MARK: Logic

    /// Records both conditions match.
    public static func && (lhs: Condition, rhs: Condition) -> Condition {
        Condition(lhs.expression.and(rhs.expression))
    }

    /// Records either condition matches.
    public static func || (lhs: Condition, rhs: Condition) -> Condition {
        Condition(lhs.expression.or(rhs.expression))
    }

    /// Records the condition does not match (an unknown outcome, a comparison with nil, stays unmatched).
    public static prefix func ! (operand: Condition) -> Condition {
        Condition(.not(operand.expression))
    }
}

// MARK: - Key-path comparison operators

/// Why a predicate other than equality cannot use a JSON attribute.
let jsonOrderingProblem = "A JSON attribute (a Codable value) supports ==, !=, in and notIn only: ordering and text matching would compare JSON text, which means nothing. Filter or sort by another attribute."

func comparison<R: ManagedRecord, V: AttributeValue>(_ keyPath: KeyPath<R, V>, _ op: ComparisonOperator, _ value: V) -> Condition<R> {
    if V.isJSON && op != .equal && op != .notEqual { return Condition(.invalid(jsonOrderingProblem)) }
    return Condition<R>.build(keyPath) { name throws(DepotError) in .compare(attribute: name, op, try value.storedValue()) }
}

/// Records whose attribute equals `rhs`; `nil` means "is nil".
public func == <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .equal, rhs)
}

/// Records whose attribute differs from `rhs`; `nil` means "is not nil".
public func != <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .notEqual, rhs)
}

/// Records whose attribute is less than `rhs` (never a nil attribute).
public func < <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .less, rhs)
}

/// Records whose attribute is at most `rhs` (never a nil attribute).
public func <= <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .lessOrEqual, rhs)
}

/// Records whose attribute is greater than `rhs` (never a nil attribute).
public func > <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .greater, rhs)
}

/// Records whose attribute is at least `rhs` (never a nil attribute).
public func >= <R: ManagedRecord, V: AttributeValue>(lhs: KeyPath<R, V>, rhs: V) -> Condition<R> {
    comparison(lhs, .greaterOrEqual, rhs)
}
