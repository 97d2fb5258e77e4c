import Depot
import DepotTesting
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// SIGKILL inside a migration step and inside a JSON import: after any kill the store holds
/// the version before the step (or after it, recorded), and the import all or nothing.
@Suite("crash safety: SIGKILL inside a migration step and inside an import")
struct MigrationCrashTests {
    /// Kills per configuration: `DEPOT_MIGRATION_KILLS`, or 40 in the full run.
    static let kills = Stress.size("DEPOT_MIGRATION_KILLS", ci: 4, tsan: 2, full: 40)

    static let configs = Array(CrashConfig.all.prefix(2))

    func killRepeatedly(_ config: CrashConfig, _ mode: String, file: (TemporaryDirectory) throws -> [String]) async throws {
        var generator = SystemRandomNumberGenerator()
        let directory = TemporaryDirectory("\(mode)-crash")
        defer { directory.remove() }
        let extra = try file(directory)
        // A run to the end first: how long one takes, so that the kills land anywhere in it
        // (opening, seeding, inside the step or the import, committing).
        let calibration = config.backend.url(in: directory, name: "calibration", options: config.options)
        let started = DispatchTime.now().uptimeNanoseconds
        let finished = try runHelper([mode, calibration] + extra, in: directory)
        let duration = Int((DispatchTime.now().uptimeNanoseconds - started) / 1_000_000)
        #expect(finished.status == 0, "\(finished.stderr)")
        try await expectAllOrNothing(calibration, complete: true, "\(config.testDescription) \(mode), run to the end")
        var killed = 0
        for kill in 0..<Self.kills {
            let url = config.backend.url(in: directory, name: "store\(kill)", options: config.options)
            let helper = try Helper([mode, url] + extra, stderrPath: directory.file("stderr.txt"))
            let delay = Int.random(in: (duration / 10)...max(duration / 10 + 1, duration * 95 / 100), using: &generator)
            try await Task.sleep(for: .milliseconds(delay))
            if helper.killNow() == nil { killed += 1 }
            try await expectAllOrNothing(url, complete: false, "\(config.testDescription) \(mode), kill \(kill) after \(delay) of \(duration) ms")
            // The killed work runs again, whole.
            let again = try runHelper([mode, url] + extra, in: directory)
            #expect(again.status == 0, "\(again.stderr)")
            try await expectAllOrNothing(url, complete: true, "\(config.testDescription) \(mode), kill \(kill), run again")
        }
        report("crash \(config.testDescription) \(mode): \(killed) of \(Self.kills) runs killed inside a \(duration) ms run, every store all or nothing, and complete after running again")
    }

    func expectAllOrNothing(_ url: String, complete: Bool, _ context: String) async throws {
        let store = try await openStore(url: url)
        let problems = try await CrashMigration.verify(store)
        let summary = try await CrashMigration.summary(store)
        await store.close()
        #expect(problems.isEmpty, "\(context): \(problems)")
        if complete {
            let records = Int(CrashMigration.records)
            let migrated = summary.members == records && summary.migrated == records && summary.renamed
            #expect(migrated || summary.arrivals == records, "\(context): \(summary)")
        }
    }

    @Test("a kill inside a migration step (a data step, then a schema step) leaves the version before it", arguments: configs)
    func killedMigration(_ config: CrashConfig) async throws {
        try await killRepeatedly(config, "migrate") { _ in [] }
    }

    @Test("a kill inside a JSON import leaves it all or nothing", arguments: configs)
    func killedImport(_ config: CrashConfig) async throws {
        try await killRepeatedly(config, "import") { directory in
            let file = directory.file("arrivals.json")
            try CrashMigration.importFile(at: file)
            return [file]
        }
    }
}
