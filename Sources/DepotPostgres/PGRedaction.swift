import Foundation

/// Keeps a connection string's password out of every message DepotPostgres makes from
/// libpq's or the server's words (errors, logged notices).
///
/// libpq quotes what it could not parse, and some of that is the password: the whole URI
/// (`unexpected character "x" at position 31 in URI "postgresql://app:hunter2@[::1]x/db"`)
/// or the token (`invalid percent-encoded token: "hun%zzter2"`). Every such text passes
/// through ``redact(_:)`` where it enters a `DepotError` or a log line: the passwords found
/// in the connection string are replaced in every spelling libpq may echo (as written,
/// percent-decoded, percent-encoded), then any URI's userinfo password and any
/// `password=` value left in the text, whatever the connection string was.
struct PGRedaction: Sendable {
    static let mask = "***"

    /// The secrets to replace, longest first (so a shorter one inside a longer one does not
    /// leave the rest of the longer in place).
    let secrets: [String]

    init(conninfo: String) {
        var found: Set<String> = []
        // Not one or two characters: replacing every such pair in a message would leave
        // nothing readable (a malformed URI parsed the libpq way yields such fragments);
        // the userinfo and `password=` passes still mask them where libpq quotes them.
        for password in Self.passwords(in: conninfo) where password.count >= 3 {
            found.insert(password)
            found.insert(Self.percentDecoded(password))
            for allowed in [CharacterSet.alphanumerics, .urlPasswordAllowed, .urlQueryAllowed] {
                if let encoded = password.addingPercentEncoding(withAllowedCharacters: allowed) { found.insert(encoded) }
            }
        }
        secrets = found.filter { $0.count >= 3 }.sorted { $0.utf8.count != $1.utf8.count ? $0.utf8.count > $1.utf8.count : $0 < $1 }
    }

    /// `text` without the connection string's passwords, any URI userinfo password or any
    /// `password=` value.
    func redact(_ text: String) -> String {
        var out = text
        for secret in secrets where out.contains(secret) {
            out = out.replacingOccurrences(of: secret, with: Self.mask)
        }
        return Self.redactPasswordKeywords(Self.redactUserinfo(out))
    }

    // MARK: Finding the passwords

    /// Every password a connection string may carry: a URI's userinfo password (read both
    /// as libpq reads it, up to the first `@`, and up to the last `@` of the authority, for
    /// a password with a raw `@`), a URI's `password=` query parameter, and a keyword/value
    /// string's `password` value (quoted or not).
    static func passwords(in conninfo: String) -> [String] {
        var out: [String] = []
        let text = Substring(conninfo)
        if let scheme = text.range(of: "://") {
            let rest = text[scheme.upperBound...]
            // libpq: the userinfo ends at the first '@' before any '/'.
            if let end = rest.firstIndex(where: { $0 == "@" || $0 == "/" }), rest[end] == "@" {
                out += userinfoPassword(rest[..<end])
            }
            // Generously, for a password with a raw '@', '/' or '?': up to the last '@'.
            if let at = rest.lastIndex(of: "@") {
                out += userinfoPassword(rest[..<at])
            }
            if let query = rest.firstIndex(of: "?") {
                for pair in rest[rest.index(after: query)...].split(separator: "&") {
                    let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    if parts.count == 2, percentDecoded(String(parts[0])).lowercased() == "password" {
                        out.append(String(parts[1]))
                    }
                }
            }
        }
        out += keywordValues(in: text).map(\.raw)
        out += keywordValues(in: text).map(\.value)
        return out
    }

    private static func userinfoPassword(_ userinfo: Substring) -> [String] {
        guard let colon = userinfo.firstIndex(of: ":") else { return [] }
        return [String(userinfo[userinfo.index(after: colon)...])]
    }

    /// The `password` values of a keyword/value string (`password=secret`,
    /// `password = 'sec ret'`), as written and unquoted.
    private static func keywordValues(in text: Substring) -> [(raw: String, value: String)] {
        var out: [(String, String)] = []
        var search = text.startIndex
        while let found = text[search...].range(of: "password", options: .caseInsensitive) {
            search = found.upperBound
            var i = found.upperBound
            while i < text.endIndex, text[i] == " " || text[i] == "\t" { i = text.index(after: i) }
            guard i < text.endIndex, text[i] == "=" else { continue }
            i = text.index(after: i)
            while i < text.endIndex, text[i] == " " || text[i] == "\t" { i = text.index(after: i) }
            let (end, value) = valueEnd(text, from: i)
            out.append((String(text[i..<end]), value))
            search = end
        }
        return out
    }

    /// Where a value starting at `start` ends (a quoted one at its closing quote, or at the
    /// end when none; another at whitespace, `&` or a double quote), and its unquoted text.
    private static func valueEnd(_ text: Substring, from start: Substring.Index) -> (Substring.Index, String) {
        var i = start
        var value = ""
        if i < text.endIndex, text[i] == "'" {
            i = text.index(after: i)
            while i < text.endIndex, text[i] != "'" {
                if text[i] == "\\", text.index(after: i) < text.endIndex { i = text.index(after: i) }
                value.append(text[i])
                i = text.index(after: i)
            }
            if i < text.endIndex { i = text.index(after: i) }
            return (i, value)
        }
        while i < text.endIndex, !text[i].isWhitespace, text[i] != "&", text[i] != "\"" {
            value.append(text[i])
            i = text.index(after: i)
        }
        return (i, value)
    }

    /// `%XX` sequences decoded where they are valid, anything else kept as it is (libpq
    /// echoes invalid ones, `Foundation`'s decoder gives up on them).
    static func percentDecoded(_ text: String) -> String {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count, let high = hexDigit(bytes[i + 1]), let low = hexDigit(bytes[i + 2]) {
                out.append(high << 4 | low)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: Redacting what is left

    /// Every `scheme://user:password@` in `text` with the password masked: the userinfo runs
    /// to the last `@` before whitespace or a quote.
    static func redactUserinfo(_ text: String) -> String {
        guard text.contains("://") else { return text }
        var out = ""
        var rest = Substring(text)
        while let scheme = rest.range(of: "://") {
            out += rest[..<scheme.upperBound]
            let after = rest[scheme.upperBound...]
            let segmentEnd = after.firstIndex(where: { $0.isWhitespace || $0 == "\"" || $0 == "'" }) ?? after.endIndex
            let segment = after[..<segmentEnd]
            if let at = segment.lastIndex(of: "@"), let colon = segment[..<at].firstIndex(of: ":") {
                out += segment[...colon]
                out += mask
                out += segment[at...]
            } else {
                out += segment
            }
            rest = after[segmentEnd...]
        }
        out += rest
        return out
    }

    /// Every `password=value` (keyword/value strings, URI query parameters) in `text` with
    /// the value masked.
    static func redactPasswordKeywords(_ text: String) -> String {
        guard text.range(of: "password", options: .caseInsensitive) != nil else { return text }
        let whole = Substring(text)
        var out = ""
        var copied = whole.startIndex
        var search = whole.startIndex
        while let found = whole[search...].range(of: "password", options: .caseInsensitive) {
            search = found.upperBound
            var i = found.upperBound
            while i < whole.endIndex, whole[i] == " " || whole[i] == "\t" { i = whole.index(after: i) }
            guard i < whole.endIndex, whole[i] == "=" else { continue }
            i = whole.index(after: i)
            while i < whole.endIndex, whole[i] == " " || whole[i] == "\t" { i = whole.index(after: i) }
            let (end, _) = valueEnd(whole, from: i)
            guard end > i else { continue }
            out += whole[copied..<i]
            out += mask
            copied = end
            search = end
        }
        out += whole[copied...]
        return out
    }
}
