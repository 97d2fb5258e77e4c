import Foundation

/// How the importer reads a date, tried in the order given.
public enum JSONDateFormat: Sendable, Hashable {
    /// ISO 8601 text: `2026-11-23T18:07:36Z`, with fractional seconds and an offset
    /// (`+01:00`) or not, or a bare date (`2026-11-23`, midnight UTC).
    case iso8601
    /// A number of seconds since 1970-01-01 (fractions allowed), or such a number as text.
    case secondsSince1970
    /// A number of milliseconds since 1970-01-01.
    case millisecondsSince1970
    /// A `DateFormatter` pattern (`"dd/MM/yyyy HH:mm"`), read in UTC with the POSIX locale.
    case formatted(String)
}

/// Converts between JSON values and stored values: the rules of ``JSONImportOptions``.
package struct JSONValueConverter {
    let dateFormats: [JSONDateFormat]
    private var formatters: [String: DateFormatter] = [:]

    package init(dateFormats: [JSONDateFormat]) {
        self.dateFormats = dateFormats
    }

    /// What went wrong converting one value: the expected type, for the message.
    package struct Mismatch: Error {
        let expected: String
    }

    /// The stored value for `node` in an attribute of `type`; `.null` for JSON null (the
    /// caller checks optionality).
    package mutating func value(_ node: JSONNode, as type: AttributeType) throws(Mismatch) -> Value {
        if case .null = node { return .null }
        switch type {
        case .int64:
            switch node {
            case .number(let text):
                if let int = Int64(text) { return .int(int) }
                // 1e3 or 5.0: an integral number written another way, only where a double
                // holds every integer exactly (below 2^53), so nothing is rounded.
                if let double = Double(text), abs(double) <= 9_007_199_254_740_992, let int = Int64(exactly: double) { return .int(int) }
            case .string(let text):
                let trimmed = text.trimmingCharacters(in: .whitespaces)
                if let int = Int64(trimmed) { return .int(int) }
                if let double = Double(trimmed), abs(double) <= 9_007_199_254_740_992, let int = Int64(exactly: double) { return .int(int) }
            case .bool(let b):
                return .int(b ? 1 : 0)
            default: break
            }
            throw Mismatch(expected: "an integer (a number or a numeric string)")
        case .double:
            switch node {
            case .number(let text):
                // 1e400 is not a double: refused rather than read as infinity.
                if let double = Double(text), double.isFinite { return .double(double) }
            case .string(let text):
                switch text {
                case "NaN": return .double(.nan)
                case "Infinity", "+Infinity": return .double(.infinity)
                case "-Infinity": return .double(-.infinity)
                default:
                    if let double = Double(text.trimmingCharacters(in: .whitespaces)), double.isFinite { return .double(double) }
                }
            default: break
            }
            throw Mismatch(expected: "a number (or a numeric string, NaN, Infinity, -Infinity)")
        case .bool:
            switch node {
            case .bool(let b): return .bool(b)
            case .number(let text):
                if text == "0" { return .bool(false) }
                if text == "1" { return .bool(true) }
            case .string(let text):
                switch text.lowercased() {
                case "true", "1", "yes": return .bool(true)
                case "false", "0", "no": return .bool(false)
                default: break
                }
            default: break
            }
            throw Mismatch(expected: "a boolean (true, false, 0, 1, \"true\", \"false\")")
        case .string:
            switch node {
            case .string(let text): return .string(text)
            case .number(let text): return .string(text)
            case .bool(let b): return .string(b ? "true" : "false")
            case .array, .object:
                // A nested value: stored as its JSON text, the form of a Codable attribute.
                return .string(JSONWriter.canonical(node))
            case .null: return .null
            }
        case .uuid:
            if case .string(let text) = node, let uuid = UUID(uuidString: text) { return .uuid(uuid) }
            throw Mismatch(expected: "a UUID string")
        case .data:
            if case .string(let text) = node, let data = Data(base64Encoded: text) { return .data(data) }
            throw Mismatch(expected: "base64 text")
        case .date:
            if let date = date(node) { return .date(date) }
            throw Mismatch(expected: "a date (\(dateFormats.map(Self.describe).joined(separator: ", ")))")
        }
    }

    static func describe(_ format: JSONDateFormat) -> String {
        switch format {
        case .iso8601: "ISO 8601"
        case .secondsSince1970: "seconds since 1970"
        case .millisecondsSince1970: "milliseconds since 1970"
        case .formatted(let pattern): "\"\(pattern)\""
        }
    }

    private mutating func date(_ node: JSONNode) -> Date? {
        for format in dateFormats {
            switch (format, node) {
            case (.iso8601, .string(let text)):
                if let date = ISO8601.parse(text) { return date }
            case (.secondsSince1970, .number(let text)), (.secondsSince1970, .string(let text)):
                if let date = ISO8601.sinceReferenceDate(text, shift: 0) { return date }
            case (.millisecondsSince1970, .number(let text)), (.millisecondsSince1970, .string(let text)):
                if let date = ISO8601.sinceReferenceDate(text, shift: 3) { return date }
            case (.formatted(let pattern), .string(let text)):
                let formatter = formatters[pattern] ?? {
                    let formatter = DateFormatter()
                    formatter.locale = Locale(identifier: "en_US_POSIX")
                    formatter.timeZone = TimeZone(identifier: "UTC")
                    formatter.dateFormat = pattern
                    return formatter
                }()
                formatters[pattern] = formatter
                if let date = formatter.date(from: text) { return date }
            default:
                continue
            }
        }
        return nil
    }

    /// The JSON text of a stored value, which the importer reads back as exactly the same
    /// value: doubles in their shortest exact form (NaN and the infinities as strings),
    /// dates as ISO 8601 with as many fractional digits as exactness needs, bytes in base64.
    /// A date that is not finite has no such text (``JSONExport`` refuses it); it gets one
    /// here only for checksums.
    package static func text(_ value: Value) -> String {
        switch value {
        case .null: return "null"
        case .int(let v): return String(v)
        case .bool(let v): return v ? "true" : "false"
        case .double(let v):
            if v.isNaN { return "\"NaN\"" }
            if v.isInfinite { return v > 0 ? "\"Infinity\"" : "\"-Infinity\"" }
            return "\(v)"
        case .string(let v): return JSONWriter.quoted(v)
        case .data(let v): return "\"" + v.base64EncodedString() + "\""
        case .uuid(let v): return "\"" + v.uuidString + "\""
        case .date(let v): return "\"" + ISO8601.format(v) + "\""
        }
    }
}

/// ISO 8601 dates without `DateFormatter`, exact both ways: a date Depot writes reads back
/// as the same `Double` of seconds since the reference date, bit for bit.
///
/// The written text is the shortest decimal that rounds to the date's seconds (Swift's
/// `description` of the `Double`), split into whole seconds, written as a UTC date and time,
/// and a fraction, written as digits: the text stands for exactly that decimal. Reading
/// adds the whole seconds and the fraction as decimals, exactly, and rounds once to the
/// nearest `Double`, which gives back the date's bits. Adding them as doubles rounds twice,
/// which lost the last bit of dates such as -0.1 s. A date beyond years 0 to 9999 is
/// written as its exact decimal number of seconds since 1970, read back the same way.
/// The one value that does not come back is the sign of a zero: -0.0 seconds reads as
/// 0.0, the same instant.
enum ISO8601 {
    /// Seconds from 1970 to 2001, the reference date of `Date`.
    static let referenceOffset: Int64 = 978_307_200

    static func parse(_ text: String) -> Date? {
        let b = Array(text.utf8)
        var i = 0
        func number(_ count: Int) -> Int64? {
            guard i + count <= b.count else { return nil }
            var value: Int64 = 0
            for k in 0..<count {
                let c = b[i + k]
                guard c >= 0x30 && c <= 0x39 else { return nil }
                value = value * 10 + Int64(c - 0x30)
            }
            i += count
            return value
        }
        func take(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let year = number(4), take(UInt8(ascii: "-")), let month = number(2), take(UInt8(ascii: "-")), let day = number(2),
            (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year)
        else { return nil }
        var seconds = daysFromCivil(year: year, month: month, day: day) * 86_400
        if i == b.count { return Date(timeIntervalSinceReferenceDate: Double(seconds - referenceOffset)) }
        guard take(UInt8(ascii: "T")) || take(UInt8(ascii: "t")) || take(UInt8(ascii: " ")),
            let hour = number(2), take(UInt8(ascii: ":")), let minute = number(2), hour < 24, minute < 60
        else { return nil }
        var second: Int64 = 0
        var fraction: ArraySlice<UInt8> = []
        if take(UInt8(ascii: ":")) {
            guard let s = number(2), s <= 60 else { return nil }
            second = s
            if take(UInt8(ascii: ".")) || take(UInt8(ascii: ",")) {
                let start = i
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39 { i += 1 }
                guard i > start else { return nil }
                fraction = b[start..<i]
            }
        }
        seconds += hour * 3600 + minute * 60 + second
        if take(UInt8(ascii: "Z")) || take(UInt8(ascii: "z")) {
        } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign: Int64 = b[i] == UInt8(ascii: "+") ? 1 : -1
            i += 1
            guard let offsetHours = number(2), offsetHours < 24 else { return nil }
            _ = take(UInt8(ascii: ":"))
            let offsetMinutes = number(2) ?? 0
            guard offsetMinutes < 60 else { return nil }
            seconds -= sign * (offsetHours * 3600 + offsetMinutes * 60)
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let whole = seconds - referenceOffset
        if fraction.isEmpty { return Date(timeIntervalSinceReferenceDate: Double(whole)) }
        // Whole seconds and the fraction, added exactly and rounded once: for a date after
        // the reference date the sum's text is the two side by side.
        let exact: String
        if whole >= 0 {
            exact = String(whole) + "." + String(decoding: fraction, as: UTF8.self)
        } else {
            exact = (ExactDecimal(whole) + ExactDecimal(negative: false, digits: Array(fraction.map { $0 - 0x30 }), scale: fraction.count)).text
        }
        guard let interval = Double(exact), interval.isFinite else { return nil }
        return Date(timeIntervalSinceReferenceDate: interval)
    }

    /// A date from a number of seconds (`shift` 0) or milliseconds (`shift` 3) since 1970
    /// written as decimal text: the offset to the reference date is subtracted exactly, and
    /// the result rounded once. Text that is not a plain decimal (hexadecimal, an exponent
    /// beyond any double's) is read through `Double`.
    static func sinceReferenceDate(_ text: String, shift: Int) -> Date? {
        if let value = ExactDecimal(text) {
            var since1970 = value
            since1970.scale += shift
            guard let interval = (since1970 + ExactDecimal(-referenceOffset)).double, interval.isFinite else { return nil }
            return Date(timeIntervalSinceReferenceDate: interval)
        }
        guard let number = Double(text), number.isFinite else { return nil }
        return Date(timeIntervalSince1970: shift == 3 ? number / 1000 : number)
    }

    static func format(_ date: Date) -> String {
        let t = date.timeIntervalSinceReferenceDate
        // The shortest decimal that reads back as `t` (Swift prints doubles that way).
        guard t.isFinite, let exact = ExactDecimal(t.description) else { return "\(t)" }
        let (whole, fraction) = exact.splitAtFloor()
        if let whole = Int64(whole.text), abs(whole) < 400_000_000_000 {
            let total = whole + referenceOffset
            let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
            let secondsOfDay = total - days * 86_400
            let (year, month, day) = civilFromDays(days)
            if (0...9999).contains(year) {
                func pad(_ value: Int64, _ width: Int) -> String {
                    let text = String(value)
                    return String(repeating: "0", count: max(0, width - text.count)) + text
                }
                var text = "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondsOfDay / 3600, 2)):\(pad(secondsOfDay / 60 % 60, 2)):\(pad(secondsOfDay % 60, 2))"
                if !fraction.isEmpty {
                    // Milliseconds, microseconds...: zeros after the last digit change nothing.
                    var digits = fraction
                    while digits.count % 3 != 0 { digits.append(0) }
                    text += "." + String(decoding: digits.map { $0 + 0x30 }, as: UTF8.self)
                }
                return text + "Z"
            }
        }
        // Beyond ISO 8601's four-digit years: the exact number of seconds since 1970.
        return (exact + ExactDecimal(referenceOffset)).text
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civilFromDays(_ days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}

/// A decimal number held exactly, as digits: `digits` (most significant first) times
/// 10^-`scale`. Enough arithmetic (addition, a split at the floor) to write and read dates
/// without rounding anywhere but in the one conversion to `Double`.
struct ExactDecimal: Sendable {
    var negative: Bool
    /// Decimal digits, 0 to 9, most significant first.
    var digits: [UInt8]
    /// How many of `digits` are after the point (more than `digits.count` means leading
    /// zeros after the point).
    var scale: Int

    /// Exponents beyond this are refused: the text of such a number would be long, and no
    /// double needs it (the smallest subnormal is about 5e-324).
    static let maximumExponent = 400

    init(negative: Bool, digits: [UInt8], scale: Int) {
        self.negative = negative
        self.digits = digits
        self.scale = scale
    }

    init(_ value: Int64) {
        negative = value < 0
        digits = Array(String(value.magnitude).utf8.map { $0 - 0x30 })
        scale = 0
    }

    /// Reads `-?[0-9]+(.[0-9]+)?([eE][+-]?[0-9]+)?` (a leading `+` allowed); nil for any
    /// other text or an exponent beyond ``maximumExponent``.
    init?(_ text: String) {
        let b = Array(text.utf8)
        var i = 0
        var negative = false
        if i < b.count, b[i] == UInt8(ascii: "-") || b[i] == UInt8(ascii: "+") {
            negative = b[i] == UInt8(ascii: "-")
            i += 1
        }
        var digits: [UInt8] = []
        while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
            digits.append(b[i] - 0x30)
            i += 1
        }
        guard !digits.isEmpty else { return nil }
        var scale = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                digits.append(b[i] - 0x30)
                i += 1
            }
            guard i > start else { return nil }
            scale = i - start
        }
        if i < b.count, b[i] == UInt8(ascii: "e") || b[i] == UInt8(ascii: "E") {
            i += 1
            var exponentNegative = false
            if i < b.count, b[i] == UInt8(ascii: "-") || b[i] == UInt8(ascii: "+") {
                exponentNegative = b[i] == UInt8(ascii: "-")
                i += 1
            }
            var exponent = 0
            let start = i
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                exponent = exponent * 10 + Int(b[i] - 0x30)
                guard exponent <= Self.maximumExponent else { return nil }
                i += 1
            }
            guard i > start else { return nil }
            scale -= exponentNegative ? -exponent : exponent
        }
        guard i == b.count else { return nil }
        self.init(negative: negative, digits: digits, scale: scale)
    }

    /// The digits as an integer count of 10^-`scale`, that scale not below `scale`'s.
    private func aligned(to scale: Int) -> [UInt8] {
        var result = digits
        if scale > self.scale { result.append(contentsOf: repeatElement(0, count: scale - self.scale)) }
        return result
    }

    private static func compareMagnitudes(_ a: [UInt8], _ b: [UInt8]) -> Int {
        let a = a.drop { $0 == 0 }, b = b.drop { $0 == 0 }
        if a.count != b.count { return a.count < b.count ? -1 : 1 }
        for (x, y) in zip(a, b) where x != y { return x < y ? -1 : 1 }
        return 0
    }

    static func + (a: ExactDecimal, b: ExactDecimal) -> ExactDecimal {
        // Negative scales (trailing zeros left implicit) are made explicit first.
        let scale = max(a.scale, b.scale, 0)
        var x = a.aligned(to: scale), y = b.aligned(to: scale)
        let width = max(x.count, y.count) + 1
        x.insert(contentsOf: repeatElement(0, count: width - x.count), at: 0)
        y.insert(contentsOf: repeatElement(0, count: width - y.count), at: 0)
        var result = [UInt8](repeating: 0, count: width)
        var negative = a.negative
        if a.negative == b.negative {
            var carry: UInt8 = 0
            for k in stride(from: width - 1, through: 0, by: -1) {
                let sum = x[k] + y[k] + carry
                result[k] = sum % 10
                carry = sum / 10
            }
        } else {
            // The larger magnitude minus the smaller, with the larger one's sign.
            if compareMagnitudes(x, y) < 0 {
                swap(&x, &y)
                negative = b.negative
            }
            var borrow: Int8 = 0
            for k in stride(from: width - 1, through: 0, by: -1) {
                var difference = Int8(x[k]) - Int8(y[k]) - borrow
                borrow = difference < 0 ? 1 : 0
                if difference < 0 { difference += 10 }
                result[k] = UInt8(difference)
            }
        }
        return ExactDecimal(negative: negative, digits: result, scale: scale)
    }

    /// The integer part (towards zero) and the fraction digits, without trailing zeros.
    private var parts: (integer: ArraySlice<UInt8>, fraction: ArraySlice<UInt8>) {
        let all = aligned(to: max(scale, 0))
        let padded = all.count < scale ? [UInt8](repeating: 0, count: scale - all.count) + all : all
        let point = padded.count - max(scale, 0)
        var integer = padded[..<point]
        var fraction = padded[point...]
        while let first = integer.first, first == 0 { integer = integer.dropFirst() }
        while let last = fraction.last, last == 0 { fraction = fraction.dropLast() }
        return (integer, fraction)
    }

    /// The number as plain decimal text, without exponent: `-12.5`, `0`, `978307200`.
    var text: String {
        let (integer, fraction) = parts
        var bytes: [UInt8] = []
        if negative && !(integer.isEmpty && fraction.isEmpty) { bytes.append(UInt8(ascii: "-")) }
        if integer.isEmpty { bytes.append(0x30) } else { bytes.append(contentsOf: integer.map { $0 + 0x30 }) }
        if !fraction.isEmpty {
            bytes.append(UInt8(ascii: "."))
            bytes.append(contentsOf: fraction.map { $0 + 0x30 })
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The nearest `Double`, rounded once (the standard library reads decimal text with
    /// correct rounding).
    var double: Double? { Double(text) }

    /// The largest integer not above the number, and the digits of what remains, in
    /// [0, 1), without trailing zeros: `-0.25` is `-1` and `75`.
    func splitAtFloor() -> (whole: ExactDecimal, fraction: [UInt8]) {
        let (integer, fraction) = parts
        var whole = ExactDecimal(negative: negative, digits: Array(integer), scale: 0)
        if fraction.isEmpty { return (whole, []) }
        if negative { whole = whole + ExactDecimal(-1) }
        let rest = self + ExactDecimal(negative: !whole.negative, digits: whole.digits, scale: 0)
        return (whole, Array(rest.parts.fraction))
    }
}
