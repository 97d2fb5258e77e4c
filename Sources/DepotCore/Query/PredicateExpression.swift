/// A comparison between an attribute and a value.
public enum ComparisonOperator: String, Sendable, Hashable, Codable, CaseIterable {
    /// `==`
    case equal = "=="
    /// `!=`
    case notEqual = "!="
    /// `<`
    case less = "<"
    /// `<=`
    case lessOrEqual = "<="
    /// `>`
    case greater = ">"
    /// `>=`
    case greaterOrEqual = ">="
}

/// The untyped predicate tree: attributes by name, values in neutral form.
///
/// Applications usually build predicates with key paths through ``Condition``; this form
/// is for dynamic use (names from a request's query string) and for backends.
///
/// Semantics, shared by every backend (the SQL three-valued logic):
/// - `== nil` means "is nil" and `!= nil` means "is not nil";
/// - any other comparison, `in`, `notIn`, `hasPrefix` and `contains` never match a record
///   whose attribute is nil, and a comparison against a nil value never matches;
///   `!` of such an unknown outcome is still unknown and does not match either;
/// - `in` with `nil` among its values also matches records whose attribute is nil;
/// - `hasPrefix` and `contains` compare UTF-8 bytes, case-sensitively, with no wildcards.
public indirect enum PredicateExpression: Sendable, Hashable {
    /// Matches every record (`true`) or none (`false`).
    case constant(Bool)
    /// The named attribute compared with a value (`.null` with `==` or `!=`: is nil, is not nil).
    case compare(attribute: String, ComparisonOperator, Value)
    /// The named attribute is one of the values (`.null` among them matches nil).
    case oneOf(attribute: String, [Value])
    /// The named attribute is not nil and none of the values.
    case notOneOf(attribute: String, [Value])
    /// The named attribute is nil.
    case isNil(attribute: String)
    /// The named string attribute starts with the text (UTF-8 bytes, case-sensitive).
    case hasPrefix(attribute: String, String)
    /// The named string attribute contains the text (UTF-8 bytes, case-sensitive).
    case contains(attribute: String, String)
    /// Every operand matches.
    case and([PredicateExpression])
    /// At least one operand matches.
    case or([PredicateExpression])
    /// The operand does not match (an unknown outcome stays unmatched).
    case not(PredicateExpression)
    /// A predicate that could not be built (a key path that is not a declared attribute);
    /// running it throws ``DepotError/Code/invalidPredicate`` with this message.
    case invalid(String)
}

extension PredicateExpression {
    /// `self && other`, flattening nested conjunctions.
    public func and(_ other: PredicateExpression) -> PredicateExpression {
        switch (self, other) {
        case (.constant(true), _): return other
        case (_, .constant(true)): return self
        case (.and(let a), .and(let b)): return .and(a + b)
        case (.and(let a), _): return .and(a + [other])
        case (_, .and(let b)): return .and([self] + b)
        default: return .and([self, other])
        }
    }

    /// `self || other`, flattening nested disjunctions.
    public func or(_ other: PredicateExpression) -> PredicateExpression {
        switch (self, other) {
        case (.constant(false), _): return other
        case (_, .constant(false)): return self
        case (.or(let a), .or(let b)): return .or(a + b)
        case (.or(let a), _): return .or(a + [other])
        case (_, .or(let b)): return .or([self] + b)
        default: return .or([self, other])
        }
    }
}
