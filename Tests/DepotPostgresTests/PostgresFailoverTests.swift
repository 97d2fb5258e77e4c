import DepotCore
import DepotPostgres
import DepotTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

extension OwnServer {
    /// Adds a streaming standby; returns the URL naming both, primary first.
    func addStandby() async throws -> String {
        let added = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, "standby", dir])
        guard added.exit.succeeded else { throw DepotError(.io, "could not add a standby: \(added.stderr.suffix(2_000))") }
        let cluster = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, "cluster-url", dir])
        let url = cluster.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard cluster.exit.succeeded, url.hasPrefix("postgresql://") else { throw DepotError(.io, "no cluster URL: \(cluster.stderr.suffix(2_000))") }
        return url
    }

    /// Runs one of the script's commands on this server (`crash`, `promote`).
    func script(_ command: String) async throws {
        let run = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, command, dir])
        guard run.exit.succeeded else { throw DepotError(.io, "\(command) failed: \(run.stderr.suffix(2_000))") }
    }
}

/// A failover under load: writers running, the primary stopped at once (`pg_ctl stop -m
/// immediate`), the standby promoted. With the standby synchronous, every write the store
/// acknowledged is on the new primary; the writes in flight fail with `io` (their outcome
/// unknown to the store, as with any commit whose answer was lost), and the writers go on
/// on the new primary. `make stress` runs it at full size and prints its counts.
@Suite("PostgresStore across a failover", .enabled(if: TestServer.available), .timeLimit(.minutes(5)))
struct PostgresFailoverTests {
    final class Tally: Sendable {
        struct Counts {
            var acknowledged: [Int64] = []
            var failed: [Int64] = []
            var codes: Set<String> = []
        }
        let counts = NIOLockedValueBox(Counts())
        var acknowledged: Int { counts.withLockedValue { $0.acknowledged.count } }
    }

    @Test("every acknowledged write survives a failover to a synchronous standby; writers go on on the new primary")
    func failoverLosesNoAcknowledgedWrite() async throws {
        let full = ProcessInfo.processInfo.environment["DEPOT_STRESS"] == "full"
        let writers = full ? 8 : 3
        let perPhase = full ? 2_000 : 100
        let server = try await OwnServer.start()
        defer { server.stop() }
        let cluster = try await server.addStandby()
        // A commit is acknowledged only once the standby has it (applied, under remote_apply;
        // Depot's sessions ask for `on`, which with a synchronous standby waits for its flush).
        try await server.query("ALTER SYSTEM SET synchronous_standby_names = '*'", database: "postgres")
        try await server.query("ALTER SYSTEM SET synchronous_commit = 'remote_apply'", database: "postgres")
        try await server.query("SELECT pg_reload_conf()", database: "postgres")

        let store = try PostgresStore(url: cluster, options: .init(schema: "failover", readers: 2))
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 0, name: "Seed", weight: 1, age: 1))
        // Another server's store, observing: its listener must find the new primary.
        let watcher = try PostgresStore(url: cluster, options: .init(schema: "failover", readers: 1))
        _ = try await Controller<Cat, CatRecord>(store: watcher).count()
        let heard = NIOLockedValueBox<Set<Int64>>([])
        let subscription = watcher.changes.observe(entities: ["Cat"]) { committed in
            let keys = committed.changes.compactMap { change -> Int64? in if case .int(let key) = change.key { key } else { nil } }
            heard.withLockedValue { $0.formUnion(keys) }
        }
        let tally = Tally()
        let stop = NIOLockedValueBox(false)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    var id = Int64(writer + 1)
                    while !stop.withLockedValue({ $0 }) {
                        do {
                            try await cats.insert(Cat(id: id, name: "w\(writer)", weight: 1, age: writer))
                            tally.counts.withLockedValue { $0.acknowledged.append(id) }
                        } catch let error as DepotError {
                            tally.counts.withLockedValue {
                                $0.failed.append(id)
                                $0.codes.insert(error.code.name)
                            }
                            // No primary yet: wait for the promotion rather than spin.
                            try await Task.sleep(for: .milliseconds(20))
                        }
                        // A failed id is not used again: its outcome is unknown.
                        id += Int64(writers)
                    }
                }
            }
            while tally.acknowledged < perPhase { try await Task.sleep(for: .milliseconds(10)) }
            try await server.script("crash")
            let beforePromotion = tally.acknowledged
            try await server.script("promote")
            let atPromotion = tally.acknowledged
            while tally.acknowledged < atPromotion + perPhase { try await Task.sleep(for: .milliseconds(10)) }
            stop.withLockedValue { $0 = true }
            try await group.waitForAll()
            let counts = tally.counts.withLockedValue { $0 }
            let stored = Set(try await cats.fetchAll().map(\.id))
            let lost = counts.acknowledged.filter { !stored.contains($0) }
            let failedButStored = counts.failed.filter { stored.contains($0) }.count
            print(
                "depot-reliability: postgres failover: \(writers) writers, \(beforePromotion) writes acknowledged before the promotion, \(counts.acknowledged.count - atPromotion) after it on the new primary, \(counts.failed.count) failed (\(counts.codes.sorted().joined(separator: ", ")); \(failedButStored) of them committed all the same), \(lost.count) acknowledged writes lost"
            )
            #expect(lost.isEmpty, "acknowledged but missing after the failover: \(lost.prefix(20))")
            #expect(counts.codes.isSubset(of: ["io", "busy"]), "a write in flight fails with io (or busy), not \(counts.codes)")
            #expect(counts.acknowledged.count >= atPromotion + perPhase)
        }
        // Writes after the failover reach the other store's observers once its listener has
        // found the new primary. A commit made before the listener listens again is not
        // heard by key (the listener then tells observers that everything may have
        // changed), so write until one is heard, a second apart; the suite's time limit
        // bounds the wait.
        var after: Int64 = -1
        try await cats.insert(Cat(id: after, name: "After", weight: 1, age: 1))
        var waited = 0
        while !heard.withLockedValue({ $0.contains(after) }) {
            try await Task.sleep(for: .milliseconds(10))
            waited += 1
            if waited % 100 == 0 {
                after -= 1
                try await cats.insert(Cat(id: after, name: "After", weight: 1, age: 1))
            }
        }
        subscription.cancel()
        await watcher.close()
        await store.close()
    }
}
