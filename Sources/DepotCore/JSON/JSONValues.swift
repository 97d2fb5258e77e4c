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
struct JSONValueConverter {
    let dateFormats: [JSONDateFormat]
    private var formatters: [String: DateFormatter] = [:]

    init(dateFormats: [JSONDateFormat]) {
        self.dateFormats = dateFormats
    }

    /// What went wrong converting one value: the expected type, for the message.
    struct Mismatch: Error {
        let expected: String
    }

    /// The stored value for `node` in an attribute of `type`; `.null` for JSON null (the
    /// caller checks optionality).
    mutating func value(_ node: JSONNode, as type: AttributeType) throws(Mismatch) -> Value {
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
                if let seconds = Double(text), seconds.isFinite { return Date(timeIntervalSince1970: seconds) }
            case (.millisecondsSince1970, .number(let text)), (.millisecondsSince1970, .string(let text)):
                if let milliseconds = Double(text), milliseconds.isFinite { return Date(timeIntervalSince1970: milliseconds / 1000) }
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
    static func text(_ value: Value) -> String {
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

/// ISO 8601 dates without `DateFormatter`: exact both ways for the dates Depot writes, and
/// fast enough for an import of millions.
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
        var fraction = 0.0
        var fractionDigits: Int64 = 0
        var scale = 1.0
        if i == b.count { return Date(timeIntervalSinceReferenceDate: Double(seconds - referenceOffset)) }
        guard take(UInt8(ascii: "T")) || take(UInt8(ascii: "t")) || take(UInt8(ascii: " ")),
            let hour = number(2), take(UInt8(ascii: ":")), let minute = number(2), hour < 24, minute < 60
        else { return nil }
        var second: Int64 = 0
        if take(UInt8(ascii: ":")) {
            guard let s = number(2), s <= 60 else { return nil }
            second = s
            if take(UInt8(ascii: ".")) || take(UInt8(ascii: ",")) {
                var count = 0
                while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                    if count < 18 {
                        fractionDigits = fractionDigits * 10 + Int64(b[i] - 0x30)
                        scale *= 10
                    }
                    count += 1
                    i += 1
                }
                guard count > 0 else { return nil }
                fraction = Double(fractionDigits) / scale
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
        // The same expression as `format` checks, so a written date reads back exactly.
        return Date(timeIntervalSinceReferenceDate: Double(seconds - referenceOffset) + fraction)
    }

    static func format(_ date: Date) -> String {
        let t = date.timeIntervalSinceReferenceDate
        guard t.isFinite, abs(t) < 1e11 else {
            // Beyond ISO 8601's four-digit years; a number of seconds reads back as a date.
            return "\(t + Double(referenceOffset))"
        }
        let whole = t.rounded(.down)
        let remainder = t - whole
        var digits = 0
        var fractionText = ""
        var carry: Int64 = 0
        for n in [0, 3, 6, 9, 12, 15, 18] {
            let scale = pow(10.0, Double(n))
            var scaled = (remainder * scale).rounded()
            var wholeSeconds = whole
            if scaled >= scale {
                scaled -= scale
                wholeSeconds += 1
            }
            let candidate = wholeSeconds + (n == 0 ? 0 : scaled / scale)
            if candidate == t || n == 18 {
                digits = n
                carry = Int64(wholeSeconds - whole)
                if n > 0 {
                    let text = String(Int64(scaled))
                    fractionText = String(repeating: "0", count: n - text.count) + text
                }
                break
            }
        }
        let total = Int64(whole) + carry + referenceOffset
        let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
        let secondsOfDay = total - days * 86_400
        let (year, month, day) = civilFromDays(days)
        guard (0...9999).contains(year) else { return "\(t + Double(referenceOffset))" }
        func pad(_ value: Int64, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        var text = "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondsOfDay / 3600, 2)):\(pad(secondsOfDay / 60 % 60, 2)):\(pad(secondsOfDay % 60, 2))"
        if digits > 0 { text += "." + fractionText }
        return text + "Z"
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
