import ArgumentParser
import Depot

struct Check: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a store: its catalog, references and unique values, and the backend's own files.",
        discussion: "SQLite: integrity_check and foreign_key_check. LMDB: every index against the records. Memory: its trees. Exits with status 1 when a problem is found, 2 when the check itself fails.")

    @Argument(help: "The store's URL.") var url: String

    func run() async throws {
        try await reporting(url) {
            let (store, _) = try await openCatalog(url)
            var problems: [String] = []
            let entities: Int
            do {
                entities = try await store.storedEntities().count
                // The backend's own check first: it names every damaged record, where the
                // checks below stop at the first one they read.
                problems += try await store.checkIntegrity()
                problems += try await StoreChecks.run(store)
            } catch let error as DepotError where error.code == .storeCorrupted {
                // Damage found while checking is a finding (status 1), not a failure to check.
                await store.close()
                for problem in problems { print("problem: \(problem)") }
                print("problem: \(error.message) (checking stopped there)")
                throw ExitCode(1)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
            if problems.isEmpty {
                print("ok: \(entities) entities checked")
            } else {
                for problem in problems { print("problem: \(problem)") }
                throw ExitCode(1)
            }
        }
    }
}
