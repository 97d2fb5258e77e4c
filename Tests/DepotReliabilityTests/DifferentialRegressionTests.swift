import Depot
import DepotCore
import Foundation
import Testing

/// Differential cases kept as plain tests. A failure of the random differential test
/// prints its shrunk case decoded (records, predicate, sort, limit, offset); paste it here
/// as a new argument so it stays checked on every run. The first ones are the edges the
/// semantics name, pinned by hand.
@Suite("differential regressions")
struct DifferentialRegressionTests {
    static func probe(_ id: Int64, int: Int = 0, double: Double = 0, string: String = "", optionalString: String? = nil, optionalInt: Int64? = nil) -> Probe {
        Probe(id: id, int: int, double: double, string: string, bool: false, date: Date(timeIntervalSinceReferenceDate: 0), data: Data(),
              uuid: Pool.uuids[0], optionalInt: optionalInt, optionalDouble: nil, optionalString: optionalString, optionalDate: nil)
    }

    static let cases: [DifferentialCase] = [
        // NaN sorts last and ties break by key, also through a limit window and an offset.
        DifferentialCase(
            records: [probe(3, double: .nan), probe(1, double: .infinity), probe(2, double: .nan), probe(-1, double: -0.0), probe(0)],
            predicate: .constant(true), sortKeys: [SortKey("double", ascending: false)], limit: 2, offset: 1),
        // Decomposed and precomposed é differ byte-wise; a prefix of the decomposed form.
        DifferentialCase(
            records: [probe(1, string: "\u{E9}"), probe(2, string: "e\u{301}"), probe(3, string: "e")],
            predicate: .hasPrefix(attribute: "string", "e"), sortKeys: [SortKey("string")]),
        // NOT of an unknown (a nil attribute) matches nothing; `in` with nil matches nil.
        DifferentialCase(
            records: [probe(1, optionalInt: nil), probe(2, optionalInt: 1), probe(3, optionalInt: 2)],
            predicate: .or([.not(.oneOf(attribute: "optionalInt", [.int(1)])), .oneOf(attribute: "optionalInt", [.null, .int(2)])])),
        // NUL bytes inside strings, compared and searched byte-wise.
        DifferentialCase(
            records: [probe(1, string: "a\u{0}b"), probe(2, string: "a"), probe(3, string: "\u{0}")],
            predicate: .contains(attribute: "string", "\u{0}"), sortKeys: [SortKey("string", ascending: false)]),
        // Nothing is greater than Int64.max, whose index key has no successor (found by the
        // full-size random run: the memory store's index range took the value itself in).
        DifferentialCase(
            records: [probe(0), probe(-1), probe(2_000_006, int: .max)],
            predicate: .compare(attribute: "int", .greater, .int(Int64(Int.max)))),
    ]

    @Test("a kept differential case", arguments: 0..<cases.count)
    func keptCase(_ index: Int) async throws {
        let stores = try await DifferentialStores()
        try await stores.check(Self.cases[index])
        await stores.close()
    }
}
