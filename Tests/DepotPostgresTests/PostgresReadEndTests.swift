import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import Testing

/// A read-only transaction's ROLLBACK is sent without waiting for its answer, which the
/// connection reads before its next statement. These checks guard what that must not
/// cost: no transaction left open on the server, and no connection wedged when the server
/// drops it between two reads.
@Suite("PostgresStore ending reads", .enabled(if: TestServer.available), .serialized)
struct PostgresReadEndTests {
    /// The store's connections, told apart from every other test's by their
    /// application_name.
    struct Tagged {
        let store: PostgresStore
        let psql: String
        let url: String
        let tag: String

        init(readers: Int) throws {
            guard let url = TestServer.url,
                let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
            else {
                throw DepotError(.invalidConfiguration, "DEPOT_TEST_POSTGRES_URL and psql are needed")
            }
            let tag = "depot_read_end_\(UUID().uuidString.prefix(8).lowercased())"
            let separator = url.contains("?") ? "&" : "?"
            let schema = "r_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased())"
            self.store = try PostgresStore(url: url + separator + "application_name=\(tag)", options: .init(schema: schema, readers: readers))
            self.psql = psql
            self.url = url
            self.tag = tag
        }

        /// Runs `sql` through psql, one value per line.
        func query(_ sql: String) throws -> String {
            try ProcessLaunch.run(psql, [url, "-At", "-c", sql]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// How many of the store's server processes are in a transaction or running a
        /// statement, waiting up to a minute for them to finish what was sent (a loaded
        /// machine can be slow to give their server processes the CPU).
        func busyConnections() async throws -> Int {
            var busy = -1
            _ = try await eventually(every: .milliseconds(100)) {
                busy = Int(try query("SELECT count(*) FROM pg_stat_activity WHERE application_name = '\(tag)' AND state <> 'idle'")) ?? -1
                return busy == 0
            }
            return busy
        }
    }

    @Test("reads leave no transaction open on the server, whether they succeed or fail")
    func readsLeaveNoTransactionOpen() async throws {
        let tagged = try Tagged(readers: 2)
        let accounts = Controller<Account, Account>(store: tagged.store)
        try await accounts.save((1...20).map { Account(id: $0, balance: $0, owner: "o\($0)") })
        #expect(Int(try tagged.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = '\(tagged.tag)'")) ?? 0 >= 3)
        for round in 0..<10 {
            #expect(try await accounts.fetchAll().count == 20)
            #expect(try await accounts.count(Request(\.balance > 10)) == 10)
            await #expect(throws: DepotError.self) {
                try await accounts.read { context -> Int in
                    _ = try context.fetchAll()
                    throw DepotError(.notFound, "the caller's own failure in round \(round)")
                }
            }
        }
        #expect(try await tagged.busyConnections() == 0, "every connection idle, none 'idle in transaction'")
        // The transactions really ended: a reader sees a write made after its last read.
        try await accounts.save(Account(id: 21, balance: 21, owner: "late"))
        #expect(try await accounts.count() == 21)
        #expect(try await accounts.fetchAll().count == 21)
        await tagged.store.close()
    }

    @Test("a reader the server dropped after a read is reconnected; reads go on")
    func aDroppedReaderIsReconnected() async throws {
        let readers = 2
        let tagged = try Tagged(readers: readers)
        let accounts = Controller<Account, Account>(store: tagged.store)
        try await accounts.save((1...5).map { Account(id: $0, balance: $0, owner: "o\($0)") })
        // Every reader has ended a read (its last statement is the ROLLBACK, its answer not
        // read yet) when its server process is terminated. A read closure: a fetchAll alone
        // is one autocommit statement, with no ROLLBACK.
        for _ in 0..<(readers * 4) { #expect(try await accounts.read { try $0.fetchAll().count } == 5) }
        #expect(try await tagged.busyConnections() == 0)
        let killed = try tagged.query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '\(tagged.tag)' AND query = 'ROLLBACK'")
        #expect(Int(killed) ?? 0 >= 1, "readers whose last statement was the ROLLBACK: \(killed)")
        try await Task.sleep(for: .milliseconds(200))
        // A read on a connection the server dropped may fail with `io` (as any statement on
        // it would); each connection is then reconnected before its next use.
        var failures: [DepotError] = []
        for _ in 0..<(readers * 4) {
            do {
                #expect(try await accounts.fetchAll().count == 5)
            } catch let error as DepotError {
                failures.append(error)
            }
        }
        #expect(failures.count <= readers, "at most one failed read per dropped connection: \(failures.map(\.message))")
        #expect(failures.allSatisfy { $0.code == .io }, "a lost connection is an io error: \(failures.map(\.message))")
        for _ in 0..<(readers * 2) { #expect(try await accounts.fetchAll().map(\.id) == [1, 2, 3, 4, 5]) }
        #expect(try await tagged.busyConnections() == 0)
        await tagged.store.close()
    }
}
