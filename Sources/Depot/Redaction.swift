import Foundation

extension StoreURL {
    /// `text` with everything that may be a password replaced by `***`, for messages and
    /// logs: it works on any text, a URL that does not parse included.
    ///
    /// Replaced: what follows the user name in a URL's user part (between the `:` after
    /// `scheme://user` and the last `@`; the whole user part when it holds a %-escape, which
    /// may hide a `:`), and the value of every `password` key (also `passwd`, `pwd` or any
    /// name containing `pass`, %-escaped or not, in a query item or a libpq `key=value`
    /// connection string, quoted or not). What is left over is more than the password
    /// sometimes (the host, when the password holds an `@` or a `/`), never less.
    public static func redactingPasswords(in text: String) -> String {
        redactingKeyedSecrets(in: redactingUserPart(of: text))
    }

    private static func redactingUserPart(of text: String) -> String {
        // The part after the scheme: a scheme is letters, digits, + - . before the first ':'.
        var start = text.startIndex
        if let colon = text.firstIndex(of: ":"),
            !text[..<colon].isEmpty,
            text[..<colon].unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) || "+-.".unicodeScalars.contains($0) })
        {
            start = text.index(after: colon)
        }
        while start < text.endIndex, text[start] == "/" { start = text.index(after: start) }
        guard let at = text[start...].lastIndex(of: "@") else { return text }
        let userPart = text[start..<at]
        if let colon = userPart.firstIndex(of: ":") {
            let user = userPart[..<colon]
            // A %-escape in the user name itself may hide the ':' that ends it.
            return String(text[..<start]) + (user.contains("%") ? "***" : user + ":***") + String(text[at...])
        }
        if userPart.contains("%") { return String(text[..<start]) + "***" + String(text[at...]) }
        return text
    }

    /// Whether a key (of a query item or a connection string) names a secret.
    private static func isSecretKey(_ key: Substring) -> Bool {
        let name = (String(key).removingPercentEncoding ?? String(key)).lowercased()
        return name.contains("pass") || name.contains("pwd")
    }

    private static func redactingKeyedSecrets(in text: String) -> String {
        let characters = Array(text)
        func isSeparator(_ c: Character) -> Bool { c == "&" || c == "?" || c == ";" || c.isWhitespace }
        var result = ""
        var i = 0
        while i < characters.count {
            if isSeparator(characters[i]) || characters[i] == "=" {
                result.append(characters[i])
                i += 1
                continue
            }
            // A key: up to '=', a separator or the end.
            let start = i
            while i < characters.count, characters[i] != "=", !isSeparator(characters[i]) { i += 1 }
            let key = String(characters[start..<i])
            // A %-escaped '=' (password%3Dsecret) hides the value in the key itself.
            if let decoded = key.removingPercentEncoding, let equals = decoded.firstIndex(of: "="),
                isSecretKey(decoded[..<equals][...])
            {
                result += "***"
                continue
            }
            result += key
            // A connection string may have spaces around '='.
            var j = i
            while j < characters.count, characters[j] == " " { j += 1 }
            guard j < characters.count, characters[j] == "=", isSecretKey(key[...]) else { continue }
            result += "=***"
            i = j + 1
            while i < characters.count, characters[i] == " " { i += 1 }
            if i < characters.count, characters[i] == "'" {
                // A quoted value (libpq: backslash escapes a quote): up to the closing quote.
                i += 1
                while i < characters.count, characters[i] != "'" { i += characters[i] == "\\" ? 2 : 1 }
                i += 1
            } else {
                while i < characters.count, !isSeparator(characters[i]) { i += 1 }
            }
        }
        return result
    }

    /// The passwords this URL holds, as written and %-decoded: what no message about it may
    /// contain.
    var passwords: [String] {
        var found: [String] = []
        if let server, let at = server.lastIndex(of: "@") {
            let userPart = server.drop(while: { $0 == "/" })[..<at]
            if let colon = userPart.firstIndex(of: ":") {
                let raw = String(userPart[userPart.index(after: colon)...])
                // libpq ends the password at the first '@' and reads the rest as the host:
                // its messages quote the pieces.
                let pieces = raw.split(separator: "@").map(String.init)
                for text in [raw] + (pieces.count > 1 ? pieces : []) {
                    found += [text, text.removingPercentEncoding ?? text]
                }
            }
        }
        if let password = options["password"] { found.append(password) }
        return found.filter { !$0.isEmpty }
    }

    /// `message` with this URL's passwords, and anything that looks like one, replaced by
    /// `***`: for errors that quote what a backend or a library said about the URL.
    public func redacting(_ message: String) -> String {
        var text = message
        for password in passwords.sorted(by: { $0.count > $1.count }) {
            text = text.replacingOccurrences(of: password, with: "***")
        }
        return Self.redactingPasswordsInMessage(text)
    }

    /// ``redactingPasswords(in:)`` for a sentence that may quote URLs: the user part of
    /// each word that looks like a URL, and every `password=` value.
    public static func redactingPasswordsInMessage(_ message: String) -> String {
        var result = ""
        var word = ""
        for character in message {
            if character.isWhitespace || character == "\"" || character == "'" || character == "`" {
                result += redactingUserPart(of: word)
                word = ""
                result.append(character)
            } else {
                word.append(character)
            }
        }
        result += redactingUserPart(of: word)
        return redactingKeyedSecrets(in: result)
    }
}
