import DepotTesting
import Foundation
import PropertyBased
import Testing

import DepotCore

/// Dates written by the JSON export read back by the import as the same `Double` of seconds
/// since the reference date, bit for bit: negative, sub-second, subnormal, huge; a date
/// that is no instant (NaN, an infinity) is refused at export.
@Suite("JSON dates round-trip exactly")
struct JSONDateTests {
    /// The seconds an exported date imports back as, through the importer's own reading of
    /// the text (the default date formats).
    static func roundTrip(_ seconds: Double) throws -> Double? {
        let text = JSONValueConverter.text(.date(Date(timeIntervalSinceReferenceDate: seconds)))
        var scanner = JSONScanner(Array(text.utf8))
        let node = try scanner.value()
        var converter = JSONValueConverter(dateFormats: JSONImportOptions().dateFormats)
        guard case .date(let date) = try converter.value(node, as: .date) else { return nil }
        return date.timeIntervalSinceReferenceDate
    }

    static func expectExact(_ seconds: Double, _ comment: Comment? = nil) throws {
        let back = try roundTrip(seconds)
        let text = JSONValueConverter.text(.date(Date(timeIntervalSinceReferenceDate: seconds)))
        // The sign of a zero is the one thing not kept (documented): -0.0 and 0.0 are the
        // same instant.
        let expected = seconds == 0 ? 0.0 : seconds
        #expect(back?.bitPattern == expected.bitPattern, "\(seconds) (bits \(String(seconds.bitPattern, radix: 16))) was written as \(text) and read back as \(String(describing: back))")
    }

    @Test("the dates the audit found, and the edges of each form")
    func knownDates() throws {
        let cases: [Double] = [
            -0.1, -1e-07, 1.2345678901234568e-05, 0.1, -0.9, -1.5, 0.5, 0, -0.0, 1, -1,
            815_000_000.123456789, -1e9 + 0.000123, 1_700_000_000.25, -978_307_200, -978_307_200.000_001,
            .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, -.leastNormalMagnitude, .ulpOfOne, -.ulpOfOne,
            .greatestFiniteMagnitude, -.greatestFiniteMagnitude, 1e11, -1e11, 1e15, 1e300, -1e300,
            // Either side of the last second of year 9999 and the first of year 0, where the
            // form changes from ISO 8601 to a number.
            252_423_993_599.999_97, 252_423_993_600, 252_423_993_600.000_03,
            -63_113_904_000, -63_113_904_000.000_01, -63_113_903_999.999_99,
            // Where adding the seconds from 1970 moves into the next binade.
            0x1p37 - 0x1p-15, -0x1p37 + 0x1p-15, 0x1p53, 0x1p53 + 2, -0x1p52 - 1,
        ]
        for seconds in cases { try Self.expectExact(seconds) }
    }

    /// Random cases per property (DEPOT_JSON_DATE_CASES), fewer under Thread Sanitizer:
    /// pure computation on one thread, nothing for it to check (``TestScale``).
    static let cases = TestScale.size("DEPOT_JSON_DATE_CASES", ci: 20_000, tsan: 2_000)

    @Test("random bit patterns of every finite double")
    func randomBitPatterns() async {
        await propertyCheck(count: Self.cases, input: Gen.uint64()) { bits in
            let seconds = Double(bitPattern: bits)
            guard seconds.isFinite else { return }
            try Self.expectExact(seconds)
        }
    }

    @Test("random dates within ISO 8601's years, sub-second and negative ones first")
    func randomDatesInRange() async {
        // The magnitude's exponent spread from 2^-1074 to 2^38, so that sub-second and
        // subnormal fractions are as common as whole dates.
        await propertyCheck(count: Self.cases, input: Gen.uint64(), Gen.int(in: -1074...38), Gen.bool) { bits, exponent, negative in
            let significand = Double(bitPattern: 0x3FF0_0000_0000_0000 | (bits & 0x000F_FFFF_FFFF_FFFF))
            let magnitude = Double(sign: .plus, exponent: exponent, significand: significand)
            try Self.expectExact(negative ? -magnitude : magnitude)
        }
    }

    @Test("ordinary dates keep their ISO 8601 form, the fraction in milliseconds")
    func ordinaryDatesLookTheSame() {
        #expect(JSONValueConverter.text(.date(Date(timeIntervalSince1970: 1_795_453_656.25))) == "\"2026-11-23T17:07:36.250Z\"")
        #expect(JSONValueConverter.text(.date(Date(timeIntervalSince1970: 0))) == "\"1970-01-01T00:00:00Z\"")
        #expect(JSONValueConverter.text(.date(Date(timeIntervalSinceReferenceDate: -0.1))) == "\"2000-12-31T23:59:59.900Z\"")
    }

    @Record(name: "Moment")
    struct Moment: Hashable {
        var id: Int64
        var at: Date
    }

    @Test("a date that is NaN or infinite is refused at export with a message naming the record")
    func nonFiniteDatesAreRefusedAtExport() async throws {
        for seconds in [Double.nan, .infinity, -.infinity, Double(bitPattern: 0xFFF0_0000_0000_0001)] {
            let store = MemoryStore()
            let moments = Controller<Moment, Moment>(store: store)
            try await moments.save([Moment(id: 1, at: Date(timeIntervalSinceReferenceDate: 1)), Moment(id: 2, at: Date(timeIntervalSinceReferenceDate: seconds))])
            do {
                let data = try await moments.exportJSON()
                Issue.record("\(seconds) was exported as \(String(decoding: data, as: UTF8.self))")
            } catch let error as DepotError {
                #expect(error.code == .invalidValue)
                #expect(error.message.contains("Moment with key 2") && error.message.contains("Moment.at"), "\(error.message)")
            }
            await store.close()
        }
    }
}
