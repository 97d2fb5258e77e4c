import Depot
import DepotTesting
import Foundation
import Testing

/// A durable backend and durability setting under test.
struct CrashConfig: Sendable, CustomTestStringConvertible {
    let backend: Backend
    let options: String
    /// Whether a commit is promised to survive a power loss (not only a process crash).
    let durable: Bool

    var testDescription: String { "\(backend.rawValue) \(options)" }

    static let all: [CrashConfig] = [
        // The map starts small so that kills also land inside map growth.
        CrashConfig(backend: .sqlite, options: "durability=full", durable: true),
        CrashConfig(backend: .lmdb, options: "durability=full&mapSize=256KiB", durable: true),
        // Relaxed settings may lose the last commits on a power loss, which a process kill
        // cannot simulate; a process crash must lose nothing with them either.
        CrashConfig(backend: .sqlite, options: "durability=normal", durable: false),
        CrashConfig(backend: .lmdb, options: "durability=relaxed&mapSize=256KiB", durable: false),
        CrashConfig(backend: .lmdb, options: "durability=unsafe&mapSize=256KiB", durable: false),
    ]
}

/// Checks one store after its writers were killed: it opens, it is consistent, every
/// acknowledged commit is there, and so is every commit seen by the previous check
/// (`floor`); beyond those, at most `inFlight` commits exist (each killed writer's last,
/// committed but not yet logged).
func checkAfterKill(url: String, logs: [String], floor: Int64, inFlight: Int64, context: String) async throws -> (acknowledged: Int, last: Int64) {
    var acknowledged: [Int64] = []
    for log in logs {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let numbers = CrashWorkload.acknowledged(inLog: text)
        #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $0 < $1 }, "\(context): a writer's log goes backwards: \(numbers.suffix(5))")
        acknowledged += numbers
    }
    #expect(Set(acknowledged).count == acknowledged.count, "\(context): two commits were acknowledged with the same number")
    let store: any Store
    do {
        store = try await openStore(url: url)
    } catch {
        Issue.record("\(context): the store does not open after the kill: \(error)")
        throw error
    }
    let verdict: CrashWorkload.Verdict
    do {
        verdict = try await CrashWorkload.verify(store)
    } catch {
        await store.close()
        Issue.record("\(context): the store cannot be read after the kill: \(error)")
        throw error
    }
    await store.close()
    let highest = acknowledged.max() ?? 0
    #expect(verdict.problems.isEmpty, "\(context): \(verdict.problems.prefix(5).joined(separator: "; "))")
    #expect(verdict.lastCommitted >= highest, "\(context): acknowledged commit \(highest) is lost; the store ends at \(verdict.lastCommitted)")
    #expect(verdict.lastCommitted >= floor, "\(context): commits up to \(floor) were in the store before this run; now it ends at \(verdict.lastCommitted)")
    #expect(verdict.lastCommitted <= max(highest, floor) + inFlight, "\(context): \(verdict.lastCommitted) commits, but only \(max(highest, floor)) acknowledged or seen and \(inFlight) in flight")
    return (acknowledged.count, verdict.lastCommitted)
}

@Suite("crash safety: SIGKILL at random moments")
struct CrashTests {
    /// Kills per configuration: `DEPOT_CRASH_KILLS`, or 200 in the full run.
    static let kills = Stress.size("DEPOT_CRASH_KILLS", ci: 6, tsan: 3, full: 200)

    @Test("every acknowledged commit survives a kill, no transaction is half-applied", arguments: CrashConfig.all)
    func killedWriter(_ config: CrashConfig) async throws {
        var generator = SystemRandomNumberGenerator()
        var directory = TemporaryDirectory("crash")
        defer { directory.remove() }
        var survived = 0
        var acknowledged = 0
        var storeNumber = 0
        var log = ""
        var url = ""
        var last: Int64 = 0
        var commits: Int64 = 0
        for kill in 0..<Self.kills {
            // A new store every 25 kills keeps the check after each kill cheap.
            if kill % 25 == 0 {
                if kill > 0 {
                    commits += last
                    directory.remove()
                    directory = TemporaryDirectory("crash")
                }
                storeNumber += 1
                url = config.backend.url(in: directory, name: "store\(storeNumber)", options: config.options)
                log = directory.file("acknowledged-\(storeNumber).log")
                last = 0
            }
            let seed = UInt64.random(in: 0...UInt64(Int64.max), using: &generator)
            let helper = try Helper(["write", url, log, String(seed)], stderrPath: directory.file("stderr.txt"))
            // Short delays kill the writer while it opens or recovers the store, longer ones
            // inside commits of every size.
            let delay = Int.random(in: 0..<4, using: &generator) == 0
                ? Int.random(in: 0...40, using: &generator) : Int.random(in: 40...400, using: &generator)
            try await Task.sleep(for: .milliseconds(Stress.underTSan ? delay * 4 : delay))
            if let problem = helper.killNow() {
                Issue.record("\(config.testDescription), kill \(kill) (seed \(seed)): \(problem)")
                break
            }
            let context = "\(config.testDescription), kill \(kill), writer seed \(seed)"
            let result = try await checkAfterKill(url: url, logs: [log], floor: last, inFlight: 1, context: context)
            acknowledged = result.acknowledged
            last = result.last
            survived += 1
        }
        commits += last
        report("crash \(config.testDescription): \(survived) of \(Self.kills) kill points survived, \(commits) commits (\(acknowledged) acknowledged in the last store's log) checked in \(storeNumber) stores; any loss or torn transaction fails the test")
    }

    /// The size of the file at `path`; 0 when there is none yet.
    static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }

    /// Rounds of the two-process test: `DEPOT_TWO_PROCESS_ROUNDS`, or 50 in the full run.
    static let rounds = Stress.size("DEPOT_TWO_PROCESS_ROUNDS", ci: 2, tsan: 1, full: 50)

    @Test("two processes write one store at once, are killed, and nothing is lost or torn", arguments: [
        CrashConfig.all[0], CrashConfig.all[1],
    ])
    func twoWriters(_ config: CrashConfig) async throws {
        var generator = SystemRandomNumberGenerator()
        let directory = TemporaryDirectory("two")
        defer { directory.remove() }
        let url = config.backend.url(in: directory, options: config.options)
        let logs = [directory.file("a.log"), directory.file("b.log")]
        var commits: Int64 = 0
        for round in 0..<Self.rounds {
            let helpers = try logs.enumerated().map { index, log in
                try Helper(["write", url, log, String(UInt64.random(in: 0...UInt64(Int64.max), using: &generator))],
                    stderrPath: directory.file("stderr-\(index).txt"))
            }
            // The kill comes a random while after either writer's first acknowledged commit,
            // not after its start: a machine busy with other suites (or the Thread
            // Sanitizer) can take seconds to start a writer and open the store.
            _ = try await eventually(within: 120, every: .milliseconds(20)) { logs.contains { Self.fileSize($0) > 0 } }
            try await Task.sleep(for: .milliseconds(Int.random(in: 300...900, using: &generator) * (Stress.underTSan ? 3 : 1)))
            for helper in helpers.shuffled(using: &generator) {
                if let problem = helper.killNow() { Issue.record("\(config.testDescription), round \(round): \(problem)") }
            }
            let result = try await checkAfterKill(url: url, logs: logs, floor: commits, inFlight: 2, context: "\(config.testDescription), two writers, round \(round)")
            commits = result.last
        }
        #expect(commits > 0, "the two writers committed nothing")
        report("two-process \(config.testDescription): \(Self.rounds) rounds, \(commits) commits from two concurrent writers, 0 losses")
    }
}
