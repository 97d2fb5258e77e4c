import Configuration
import Depot
import DepotTesting
import Foundation
import InMemoryLogging
import Logging
import Synchronization
import Testing

/// What an access reporter that logs each read (as swift-configuration's AccessLogger does)
/// would write: the key and the value as the value describes itself.
final class RecordingReporter: AccessReporter, Sendable {
    let lines = Mutex<[String]>([])

    func report(_ event: AccessEvent) {
        let value: String
        switch event.result {
        case .success(let found?): value = "\(found)"
        case .success(nil): value = "nil"
        case .failure(let error): value = "\(error)"
        }
        lines.withLock { $0.append("\(event.metadata.key) \(value)") }
    }
}

/// Issue #35, item 4: no message, log line or description holds a store URL's password,
/// whatever the URL: malformed URLs carrying a known secret, in every position a password
/// can take, go through the parser, the opening, swift-configuration and the `depot` command.
@Suite("Passwords stay out of messages")
struct SecretRedactionTests {
    static let secret = "Hunter2Zq"
    /// Every form of the secret a message might carry: as given, %-escaped, and halves of it
    /// (a redaction that stops at the wrong character leaks one).
    static let forms = [secret, "Hun%74er2Zq", "%48unter2Zq", "Hunter2", "er2Zq"]

    /// The secret in every place a password goes, inside URLs that are wrong in every way
    /// the parser reports.
    static var malformedURLs: [String] {
        let schemes = ["postgress://", "postgres://", "postgresql:", "postgres:/", "POSTGRESQL://", "mysql://", "sqlite://", "lmdb://", "memory:", "", "pg//"]
        let userParts = ["app:SECRET@", "app:SECRET@@", ":SECRET@", "app:Hun%74er2Zq@", "app%3ASECRET@", "app:Hunt@er2Zq@", "app:Hunt/er2Zq@", "app:Hunt?er2Zq@", "app:SECRET:x@"]
        let rests = ["db.internal/app", "[::1]x/db", "", "db/app\u{0}", "db/app?sslmode=maybe", "db/app?mapSize=1GiB", "db/app?readers=1&readers=2"]
        var urls: [String] = []
        for scheme in schemes {
            for user in userParts {
                for rest in rests { urls.append(scheme + user + rest) }
            }
        }
        let queries = [
            "?password=SECRET&sslmode=maybe", "?pass%77ord=SECRET&readers=0", "?password%3DSECRET", "?sslmode=maybe&password=SECRET",
            "?schema=&password=SECRET", "?PASSWORD=SECRET&x=1", "?password=Hun%74er2Zq&nope=1",
        ]
        for scheme in ["postgres://", "postgress://", "sqlite:", "memory:"] {
            for query in queries { urls.append(scheme + "db/app" + query) }
        }
        urls += [
            "host=db password=SECRET", "host=db password = SECRET dbname=app", "host=db password='SECRET' x", "password=SECRET",
            "app:SECRET@db", "//app:SECRET@db/app", "postgres:app:SECRET@db/app", "sqlite:///tmp/x.sqlite?password=SECRET",
        ]
        return urls.map { $0.replacingOccurrences(of: "SECRET", with: secret) }
    }

    static func leaks(_ text: String) -> String? {
        forms.first { text.contains($0) }
    }

    @Test func parserErrorsAndDescriptionsHoldNoPassword() throws {
        var refused = 0
        for text in Self.malformedURLs {
            do {
                let url = try StoreURL(text)
                for shown in [url.description, url.redacted, "\(url)", String(reflecting: url)] {
                    #expect(Self.leaks(shown) == nil, "\(text.debugDescription) is shown as \(shown.debugDescription)")
                }
            } catch {
                refused += 1
                #expect(Self.leaks(error.message) == nil, "\(text.debugDescription): \(error.message)")
                #expect(Self.leaks(error.description) == nil, "\(text.debugDescription): \(error.description)")
            }
        }
        #expect(refused > Self.malformedURLs.count / 2, "most of these URLs are malformed")
    }

    /// The redaction works on text that is not a URL at all, and keeps what is not secret.
    @Test func redactionKeepsWhatIsNotSecret() {
        #expect(StoreURL.redactingPasswords(in: "postgres://app:s3cret@db:5432/app?sslmode=require") == "postgres://app:***@db:5432/app?sslmode=require")
        #expect(StoreURL.redactingPasswords(in: "postgres://app@db/app?password=x%20y&schema=s") == "postgres://app@db/app?password=***&schema=s")
        #expect(StoreURL.redactingPasswords(in: "host=db password='a b\\' c' dbname=app") == "host=db password=*** dbname=app")
        #expect(StoreURL.redactingPasswords(in: "sqlite:///var/lib/app.sqlite") == "sqlite:///var/lib/app.sqlite")
        #expect(StoreURL.redactingPasswordsInMessage("unexpected character \"x\" at position 31 in URI \"postgresql://app:pw@[::1]x/db\"") == "unexpected character \"x\" at position 31 in URI \"postgresql://app:***@[::1]x/db\"")
        let url = try? StoreURL("postgres://app:p%40ss@db/app")
        #expect(url?.redacting("libpq said: p@ss and p%40ss") == "libpq said: *** and ***")
        #expect(url?.unredacted == "postgres://app:p%40ss@db/app", "the unredacted form keeps the password, to pass the URL on")
    }

    /// Opening: the parser's errors and what libpq says about a URL it cannot use (it quotes
    /// the URI), in the error and in the store's log.
    @Test func openingErrorsAndLogsHoldNoPassword() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "depot.test") { _ in handler }
        logger.logLevel = .trace
        let urls = Self.malformedURLs.filter { !$0.contains("db.internal") } + [
            // libpq refuses these itself, quoting the URI or the token.
            "postgres://app:\(Self.secret)@[::1]x/db", "postgres://app:Hun%zzter2Zq@127.0.0.1:1/db",
            // Refused connections: a port nothing listens on.
            "postgres://app:\(Self.secret)@127.0.0.1:1/db?connect_timeout=2",
            "postgres://app@127.0.0.1:1/db?password=\(Self.secret)&connect_timeout=2",
        ]
        for text in urls {
            do {
                let store = try await openStore(url: text, logger: logger)
                await store.close()
            } catch {
                #expect(Self.leaks(error.message) == nil, "\(text.debugDescription): \(error.message)")
                #expect(Self.leaks(error.description) == nil, "\(text.debugDescription): \(error.description)")
            }
        }
        for entry in handler.entries {
            let line = "\(entry.message) \(entry.metadata) \(entry.error.map { "\($0)" } ?? "")"
            #expect(Self.leaks(line) == nil, "logged: \(line)")
        }
    }

    /// swift-configuration's access reporters see the store URL (and the password option) as
    /// secrets: what they print of the value is `<REDACTED>`.
    @Test func configurationReadsTheURLAsASecret() throws {
        let reporter = RecordingReporter()
        let config = ConfigReader(
            provider: InMemoryProvider(values: [
                "depot.store.url": .init(.string("postgres://app:\(Self.secret)@db.internal/app"), isSecret: false),
                "depot.store.password": .init(.string(Self.secret), isSecret: false),
            ]),
            accessReporter: reporter)
        let url = try #require(try StoreURL(config: config))
        #expect(url[option: "password"] == Self.secret)
        let lines = reporter.lines.withLock { $0 }
        #expect(lines.contains { $0.hasPrefix("depot.store.url ") }, "the reporter saw the read: \(lines)")
        #expect(lines.contains { $0.hasPrefix("depot.store.password ") }, "\(lines)")
        for line in lines { #expect(Self.leaks(line) == nil, "reported: \(line)") }
    }

    /// The `depot` command prints no password, whatever URL it is given.
    @Test func depotCommandPrintsNoPassword() throws {
        let binary = try #require(ProcessLaunch.builtProduct("depot"))
        let urls = Self.malformedURLs.enumerated().filter { $0.offset % 15 == 0 && !$0.element.contains("\u{0}") && !$0.element.contains("db.internal") }.map(\.element) + [
            "postgres://app:\(Self.secret)@[::1]x/db", "postgres://app:\(Self.secret)@127.0.0.1:1/db?connect_timeout=2",
        ]
        for url in urls {
            for arguments in [["info", url], ["check", url], ["migrate", url]] {
                let result = try ProcessLaunch.run(binary, arguments)
                #expect(result.exit.status != 0, "\(arguments)")
                #expect(Self.leaks(result.stdout + result.stderr) == nil, "\(arguments): \(result.stdout)\(result.stderr)")
            }
        }
    }
}
