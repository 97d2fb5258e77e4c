import Foundation

/// Predicates written as text, for tools that have a store's catalog but not the
/// application's record types (`depot explain`): the notation plans print.
///
/// ```
/// species == "cat" && (name >= "M" || born == nil) && !(weight in [1, 2.5])
/// name hasPrefix "Ti" || owner contains "son"
/// ```
///
/// Comparisons are `==`, `!=`, `<`, `<=`, `>`, `>=` between an attribute and a literal;
/// `in [..]`, `hasPrefix` and `contains` as above; `!`, `&&` (binding tighter) and `||`, and
/// parentheses. Literals take the attribute's type: strings in double quotes (`\"` and
/// `\\` escape), and so are UUIDs, dates (ISO 8601) and data (base64); numbers, `true`,
/// `false`, `nil`.
package enum PredicateSyntax {
    /// Parses `text` against `entity`'s attributes.
    ///
    /// - Throws: ``DepotError/Code/invalidPredicate`` saying where and why the text does not
    ///   parse, or which attribute or value does not fit.
    package static func parse(_ text: String, for entity: EntityDescription) throws(DepotError) -> PredicateExpression {
        var parser = Parser(text: Array(text.unicodeScalars), entity: entity)
        let expression = try parser.or(depth: 0)
        parser.skipSpace()
        guard parser.position == parser.text.count else { throw parser.problem("expected && or || or the end") }
        return expression
    }

    struct Parser {
        let text: [Unicode.Scalar]
        let entity: EntityDescription
        var position = 0

        /// Deeper nesting is refused rather than recursed into (a stack overflow is a trap).
        static let maximumDepth = 64

        func problem(_ what: String) -> DepotError {
            DepotError(.invalidPredicate, "The predicate does not parse at character \(position + 1): \(what).")
        }

        mutating func skipSpace() {
            while position < text.count, text[position].properties.isWhitespace { position += 1 }
        }

        mutating func take(_ token: String) -> Bool {
            skipSpace()
            let scalars = Array(token.unicodeScalars)
            guard position + scalars.count <= text.count, Array(text[position..<position + scalars.count]) == scalars else { return false }
            // A word operator must end where the word does.
            if let last = scalars.last, last.properties.isAlphabetic, position + scalars.count < text.count,
                Self.isWordCharacter(text[position + scalars.count])
            {
                return false
            }
            position += scalars.count
            return true
        }

        static func isWordCharacter(_ c: Unicode.Scalar) -> Bool {
            (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") || c == "_"
        }

        mutating func or(depth: Int) throws(DepotError) -> PredicateExpression {
            guard depth < Self.maximumDepth else { throw problem("nested deeper than \(Self.maximumDepth) levels") }
            var parts = [try and(depth: depth)]
            while take("||") { parts.append(try and(depth: depth)) }
            return parts.count == 1 ? parts[0] : .or(parts)
        }

        mutating func and(depth: Int) throws(DepotError) -> PredicateExpression {
            var parts = [try unary(depth: depth)]
            while take("&&") { parts.append(try unary(depth: depth)) }
            return parts.count == 1 ? parts[0] : .and(parts)
        }

        mutating func unary(depth: Int) throws(DepotError) -> PredicateExpression {
            guard depth < Self.maximumDepth else { throw problem("nested deeper than \(Self.maximumDepth) levels") }
            if take("!") {
                if take("=") { throw problem("expected an attribute before !=") }
                return .not(try unary(depth: depth + 1))
            }
            if take("(") {
                let inner = try or(depth: depth + 1)
                guard take(")") else { throw problem("expected )") }
                return inner
            }
            return try comparison()
        }

        mutating func comparison() throws(DepotError) -> PredicateExpression {
            skipSpace()
            let start = position
            while position < text.count, Self.isWordCharacter(text[position]) { position += 1 }
            let name = String(String.UnicodeScalarView(text[start..<position]))
            guard !name.isEmpty else { throw problem("expected an attribute name, !, or (") }
            guard let index = entity.index(of: name) else {
                position = start
                throw problem("\(entity.name) has no attribute '\(name)' (its attributes: \(entity.attributes.map(\.name).joined(separator: ", ")))")
            }
            let attribute = entity.attributes[index]
            let operators: [(String, ComparisonOperator)] = [("==", .equal), ("!=", .notEqual), ("<=", .lessOrEqual), (">=", .greaterOrEqual), ("<", .less), (">", .greater)]
            for (token, op) in operators where take(token) {
                return .compare(attribute: name, op, try literal(for: attribute))
            }
            if take("in") {
                guard take("[") else { throw problem("expected [ after in") }
                var values: [Value] = []
                if !take("]") {
                    repeat { values.append(try literal(for: attribute)) } while take(",")
                    guard take("]") else { throw problem("expected , or ]") }
                }
                return .oneOf(attribute: name, values)
            }
            if take("hasPrefix") { return .hasPrefix(attribute: name, try string()) }
            if take("contains") { return .contains(attribute: name, try string()) }
            throw problem("expected ==, !=, <, <=, >, >=, in, hasPrefix or contains after \(name)")
        }

        mutating func string() throws(DepotError) -> String {
            skipSpace()
            guard position < text.count, text[position] == "\"" else { throw problem("expected a string in double quotes") }
            position += 1
            var scalars = String.UnicodeScalarView()
            while position < text.count {
                let c = text[position]
                position += 1
                if c == "\"" { return String(scalars) }
                if c == "\\" {
                    guard position < text.count, text[position] == "\"" || text[position] == "\\" else {
                        throw problem("only \\\" and \\\\ are escapes in a string")
                    }
                    scalars.append(text[position])
                    position += 1
                } else {
                    scalars.append(c)
                }
            }
            throw problem("the string has no closing quote")
        }

        mutating func literal(for attribute: AttributeDescription) throws(DepotError) -> Value {
            if take("nil") { return .null }
            let what = "\(entity.name).\(attribute.name) (\(attribute.type.rawValue))"
            switch attribute.type {
            case .string:
                return .string(try string())
            case .bool:
                if take("true") { return .bool(true) }
                if take("false") { return .bool(false) }
                throw problem("expected true, false or nil for \(what)")
            case .int64:
                let word = number()
                guard let value = Int64(word) else { throw problem("expected an integer or nil for \(what), not '\(word)'") }
                return .int(value)
            case .double:
                let word = number()
                guard let value = Double(word) else { throw problem("expected a number or nil for \(what), not '\(word)'") }
                return .double(value)
            case .uuid:
                let text = try string()
                guard let value = UUID(uuidString: text) else { throw problem("expected a UUID string for \(what), not \"\(text)\"") }
                return .uuid(value)
            case .date:
                let text = try string()
                let formatter = ISO8601DateFormatter()
                formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                guard let value = formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text) else {
                    throw problem("expected an ISO 8601 date string for \(what), such as \"2026-11-26T12:00:00Z\", not \"\(text)\"")
                }
                return .date(value)
            case .data:
                let text = try string()
                guard let value = Data(base64Encoded: text) else { throw problem("expected base64 in a string for \(what)") }
                return .data(value)
            }
        }

        /// The characters of a number: sign, digits, point, exponent, or a word such as `nan`.
        mutating func number() -> String {
            skipSpace()
            let start = position
            while position < text.count, Self.isWordCharacter(text[position]) || "+-.".unicodeScalars.contains(text[position]) {
                position += 1
            }
            return String(String.UnicodeScalarView(text[start..<position]))
        }
    }
}
