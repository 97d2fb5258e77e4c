import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import InMemoryLogging
import Logging
import Testing

/// No error DepotPostgres throws and no line it logs contains a connection string's
/// password, however libpq quoted it.
@Suite("PostgresStore keeps passwords out of messages", .enabled(if: TestServer.available))
struct PostgresSecretTests {
    /// Passwords with the characters URLs and keyword/value strings treat specially.
    static let secrets = ["hunter2xyz", "hun%zzter2", "p@ss:w/rd?x", "s3cr et&pw", "ünï©ødé-pw", "q'uo\\te\"pw", "%41bc%2Fdef"]

    /// Malformed or unreachable connection strings carrying `secret` (as written, and
    /// percent-encoded where a URI holds it); none of them reaches a server.
    static func connectionStrings(_ secret: String) -> [String] {
        let encoded = secret.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? secret
        let quoted = "'" + secret.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
        var out: [String] = []
        for password in [secret, encoded] {
            out += [
                "postgresql://app:\(password)@[::1]x/db",
                "postgresql://app:\(password)@[::1/db",
                "postgresql://app:\(password)@/db?host=/nonexistent-depot-socket&port=1",
                "postgresql://app:\(password)@127.0.0.1:1/db",
                "postgresql://app:\(password)@127.0.0.1/db?bogus=1",
                "postgresql://app:\(password)@127.0.0.1/db?port=notaport",
                "postgresql://app:\(password)@127.0.0.1/db?sslmode=nonsense",
                "postgres://app:\(password)@127.0.0.1/db?host=%zz",
                "postgresql://app@127.0.0.1/db?password=\(password)&sslmode=nonsense",
                "postgresql://app@127.0.0.1/db?password=\(password)&port=1",
                "postgresql://app:\(password)x%zz@127.0.0.1/db",
            ]
        }
        out += [
            "host=/nonexistent-depot-socket port=1 password=\(quoted)",
            "password=\(quoted) garbage",
            "password = \(quoted) host=127.0.0.1 port=notaport",
            "password=\(quoted) sslmode=nonsense host=127.0.0.1",
            "host=127.0.0.1 port=1 password=\(quoted) 'unterminated",
        ]
        return out
    }

    /// The spellings of `secret` a message must not hold.
    static func forms(_ secret: String) -> [String] {
        [
            secret, secret.removingPercentEncoding ?? secret, secret.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? secret,
            secret.addingPercentEncoding(withAllowedCharacters: .urlPasswordAllowed) ?? secret,
        ]
    }

    @Test("no DepotError message or logged line holds the password of a malformed or unreachable URL")
    func malformedURLsDoNotLeakTheirPassword() throws {
        var checked = 0
        for secret in Self.secrets {
            for conninfo in Self.connectionStrings(secret) {
                let handler = InMemoryLogHandler()
                var logger = Logger(label: "depot.test.secrets") { _ in handler }
                logger.logLevel = .trace
                var message = ""
                do {
                    let store = try PostgresStore(url: conninfo, options: .init(schema: "s", readers: 1), log: StoreLog(logger: logger))
                    Issue.record("\(conninfo) opened a store")
                    _ = store
                } catch {
                    message = "\(error) \(error.message)"
                }
                #expect(!message.isEmpty)
                let logged = handler.entries.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n")
                for form in Self.forms(secret) {
                    #expect(!message.contains(form), "\(conninfo): \(message)")
                    #expect(!logged.contains(form), "\(conninfo): \(logged)")
                }
                checked += 1
            }
        }
        #expect(checked == Self.secrets.count * 27)
    }

    /// A password that happens to be part of a constraint's name (`owner` in
    /// `depot_uq_7_Account_owner`) is masked in messages, but the constraint's name is still
    /// matched, so a duplicate unique value is still reported in Depot's words.
    @Test("a password inside a constraint's name does not hide which unique attribute clashed")
    func passwordInsideAConstraintName() async throws {
        let url = try #require(TestServer.url)
        let withPassword = url.replacingOccurrences(of: "postgresql://depot@", with: "postgresql://depot:owner@")
        #expect(withPassword != url)
        let schema = "p_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try PostgresStore(url: withPassword, options: .init(schema: schema, readers: 1))
        let accounts = Controller<DepotTesting.Account, DepotTesting.Account>(store: store)
        try await accounts.save(DepotTesting.Account(id: "a", owner: "ann"))
        do {
            try await accounts.save(DepotTesting.Account(id: "b", owner: "ann"))
            Issue.record("a duplicate unique value was written")
        } catch let error as DepotError {
            #expect(error.code == .duplicateKey, "\(error)")
            #expect(error.message.hasPrefix("Another Account already has owner = \"ann\""), "\(error)")
        }
        await store.close()
    }

    /// Against the running server: a password in the URL (which the test server's trust
    /// login ignores) appears in no message of a failing operation, nor in the log.
    @Test("errors of a connected store hold no password")
    func connectedStoreErrorsHoldNoPassword() async throws {
        let url = try #require(TestServer.url)
        let secret = "Tr0ub4dor-pw"
        let withPassword = url.replacingOccurrences(of: "postgresql://depot@", with: "postgresql://depot:\(secret)@")
        #expect(withPassword != url)
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "depot.test.secrets") { _ in handler }
        logger.logLevel = .trace
        let schema = "p_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
        let store = try PostgresStore(url: withPassword, options: .init(schema: schema, readers: 1), log: StoreLog(logger: logger))
        let accounts = Controller<Account, Account>(store: store)
        try await accounts.save(Account(id: 1, balance: 1, owner: "a"))
        var messages: [String] = []
        do {
            try await accounts.insert(Account(id: 1, balance: 2, owner: "again"))
        } catch let error as DepotError {
            messages.append("\(error)")
        }
        await store.close()
        #expect(messages.count == 1)
        let logged = handler.entries.map { "\($0.message) \($0.metadata)" }
        for text in messages + logged {
            #expect(!text.contains(secret), "\(text)")
        }
    }
}
