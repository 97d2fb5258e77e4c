import DepotCore
import Foundation
import Testing

private typealias Expr = DepotCore.PredicateExpression

@Suite("Predicates as text")
struct PredicateSyntaxTests {
    static let pet = EntityDescription(
        name: "Pet",
        attributes: [
            .init(name: "id", type: .int64), .init(name: "species", type: .string), .init(name: "weight", type: .double),
            .init(name: "born", type: .date, isOptional: true), .init(name: "tag", type: .uuid, isOptional: true),
            .init(name: "indoor", type: .bool), .init(name: "chip", type: .data, isOptional: true),
        ],
        primaryKeyIndex: 0)

    @Test func parsesTheNotationPlansPrint() throws {
        let parsed = try PredicateSyntax.parse(#"species == "cat" && (weight >= 2.5 || born == nil) && !(id in [1, 2]) || species hasPrefix "d\"o""#, for: Self.pet)
        let expected = Expr.or([
            .and([
                .compare(attribute: "species", .equal, .string("cat")),
                .or([.compare(attribute: "weight", .greaterOrEqual, .double(2.5)), .compare(attribute: "born", .equal, .null)]),
                .not(.oneOf(attribute: "id", [.int(1), .int(2)])),
            ]),
            .hasPrefix(attribute: "species", "d\"o"),
        ])
        #expect(parsed == expected)
        let typed = try PredicateSyntax.parse(
            #"born < "2026-11-26T12:00:00Z" && tag != "E621E1F8-C36C-495A-93FC-0C247A3E6E5F" && indoor == true && chip == "AAE=" && species contains "a""#,
            for: Self.pet)
        guard case .and(let parts) = typed, parts.count == 5 else {
            Issue.record("\(typed)")
            return
        }
        #expect(parts[0] == .compare(attribute: "born", .less, .date(Date(timeIntervalSince1970: 1_795_694_400))))
        #expect(parts[3] == .compare(attribute: "chip", .equal, .data(Data([0, 1]))))
    }

    @Test(arguments: [
        ("speces == \"cat\"", "no attribute 'speces'"),
        ("weight == \"heavy\"", "expected a number"),
        ("id == 99999999999999999999", "expected an integer"),
        ("species == \"cat", "no closing quote"),
        ("(species == \"cat\"", "expected )"),
        ("species = \"cat\"", "expected ==, !=, <, <=, >, >=, in"),
        ("species == \"cat\" garbage", "expected && or ||"),
        ("born == \"yesterday\"", "ISO 8601"),
        (String(repeating: "(", count: 100) + "id == 1" + String(repeating: ")", count: 100), "nested deeper"),
    ])
    func badTextIsAnInvalidPredicate(_ text: String, _ message: String) {
        #expect {
            try PredicateSyntax.parse(text, for: Self.pet)
        } throws: { error in
            guard let error = error as? DepotError else { return false }
            return error.code == .invalidPredicate && error.message.contains(message)
        }
    }
}
