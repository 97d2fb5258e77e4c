import ArgumentParser
import Depot

struct Copy: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy every entity of one store into another (for example SQLite to LMDB), then verify counts and checksums.",
        discussion: "Exits with status 1 when an entity's copy does not match its source.")

    @Argument(help: "The source store's URL.") var from: String
    @Argument(help: "The target store's URL (created when missing).") var to: String

    func run() async throws {
        try await reporting(from, to) {
            let (source, _) = try await openCatalog(from)
            let target: any Store
            do {
                target = try await openStore(url: to)
            } catch {
                await source.close()
                throw error
            }
            let progress = Progress()
            let reports: [StoreCopy.EntityReport]
            do {
                var totals: [String: Int] = [:]
                for handle in try await source.storedEntities() {
                    totals[handle.name] = try await source.read { try $0.count(Query(all: handle)) }
                }
                let known = totals
                reports = try await StoreCopy.run(from: source, to: target) { entity, records in
                    progress.show(entity, done: records, of: known[entity] ?? records, unit: "records")
                }
            } catch {
                await source.close()
                await target.close()
                throw error
            }
            progress.done()
            await source.close()
            await target.close()
            var failed = false
            for report in reports {
                let verdict = report.verified ? "verified" : "MISMATCH"
                print("\(report.entity): \(report.sourceRecords) records → \(report.targetRecords), checksum \(String(report.sourceChecksum, radix: 16)) → \(String(report.targetChecksum, radix: 16)): \(verdict)")
                failed = failed || !report.verified
            }
            if failed { throw ExitCode(1) }
        }
    }
}
