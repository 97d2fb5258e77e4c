import Depot
import DepotTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import PetClinic

/// The live endpoint across a PostgreSQL restart: a restart costs a subscriber a late
/// event, never its stream. The test starts a cluster of its own (the tests beside it use
/// the shared one, which must not restart under them).
@Suite(
    "the live endpoint across a PostgreSQL restart",
    .enabled(if: ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] != nil), .timeLimit(.minutes(3)))
struct LiveRestartTests {
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/postgres-test-server.sh").path

    @Test("the stream goes on after the server restarts mid-stream")
    func streamSurvivesARestart() async throws {
        // Short: the socket path must fit in a Unix socket's 107 bytes.
        let dir = "/tmp/clinic-own-\(UUID().uuidString.prefix(8).lowercased())"
        let started = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, "start", dir])
        defer {
            _ = try? ProcessLaunch.run("/bin/bash", [Self.script, "stop", dir])
            try? FileManager.default.removeItem(atPath: dir)
        }
        let server = started.stdout.split(separator: "\n").last.map(String.init) ?? ""
        try #require(started.exit.succeeded && server.hasPrefix("postgresql://"), "\(started.stderr.suffix(2_000))")
        let store = try await openStore(url: server)
        let clinic = Clinic(store: store)
        try await clinic.prepare()
        let app = buildApplication(
            clinic: clinic, settings: ClinicSettings(storeURL: try StoreURL("memory:"), port: 0),
            logger: Logger(label: "pet-clinic-tests"))
        try await app.test(.router) { client in
            let owner = try await client.createOwner("Ivy", city: "Riga")
            _ = try await client.createPet("Ann", species: "cat", birthYear: 2020, owner: owner.id)
            // The first event (the snapshot) before the restart, the second from a commit
            // after it: an observation that ended at the restart would end the stream after
            // one event.
            let stream = Task { try await client.get("/pets/live?species=cat&events=2") }
            try await Task.sleep(for: .seconds(2))
            let restarted = try await ProcessLaunch.runOffPool("/bin/bash", [Self.script, "restart", dir])
            try #require(restarted.exit.succeeded, "\(restarted.stderr.suffix(2_000))")
            let writer = Task {
                var i = 0
                while !Task.isCancelled {
                    // A write may meet the restart's closed session; a later one goes through.
                    _ = try? await clinic.pets.save(Pet(id: UUID(), ownerID: owner.id, name: "Zed\(i)", species: "cat", birthYear: 2021))
                    i += 1
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            defer { writer.cancel() }
            let response = try await stream.value
            writer.cancel()
            #expect(response.status == .ok)
            let events = String(buffer: response.body).components(separatedBy: "\n\n").filter { !$0.isEmpty }
            #expect(events.count == 2, "\(events)")
            #expect(events.first?.hasPrefix("event: snapshot\ndata: ") == true)
            #expect(events.last?.hasPrefix("event: changes\ndata: ") == true, "\(events)")
        }
    }
}
