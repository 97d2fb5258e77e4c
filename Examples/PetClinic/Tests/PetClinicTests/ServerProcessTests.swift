import Depot
import DepotTesting
import Foundation
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

@testable import PetClinic

/// The built `pet-clinic` executable, run as a separate process on loopback: what an
/// operator runs, signals and all.
@Suite("pet-clinic process", .serialized)
struct ServerProcessTests {
    static let binary = ProcessLaunch.builtProduct("pet-clinic")

    @Test("SIGTERM under load: the server drains, exits 0, and every acknowledged write is in the store", arguments: TestBackend.persistent)
    func sigtermUnderLoad(_ backend: TestBackend) async throws {
        let binary = try #require(Self.binary, "pet-clinic is built beside the test runner")
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = try backend.url(in: directory)
        let server = try RunningServer(binary: binary, storeURL: url, directory: directory)
        var stopped = false
        defer { if !stopped { server.kill() } }

        let owner: Owner = try await TestClient.withClient(host: "127.0.0.1", port: server.port) { client in
            let response = try await client.post("/owners", headers: [.contentType: "application/json"], body: try json(["name": "Load", "city": "Test"]))
            #expect(response.status == .created)
            return try JSONDecoder().decode(Owner.self, from: Data(buffer: response.body ?? ByteBuffer()))
        }

        // Eight connections write pets as fast as they are answered, until the server stops
        // answering. Only a 201 counts as acknowledged.
        let acknowledged = Acknowledged()
        let writers = (0..<8).map { writer in
            Task {
                let client = TestClient(host: "127.0.0.1", port: server.port)
                client.connect()
                defer { Task { try? await client.shutdown() } }
                var i = 0
                while true {
                    let body = try json(PetCreate(ownerID: owner.id, name: "w\(writer)-\(i)", species: "cat", birthYear: 2020))
                    guard let response = try? await client.post("/pets", headers: [.contentType: "application/json"], body: body) else { return }
                    guard response.head.status == .created,
                          let pet = try? JSONDecoder().decode(Pet.self, from: Data(buffer: response.body ?? ByteBuffer()))
                    else { return }
                    acknowledged.ids.withLock { $0.append(pet.id) }
                    i += 1
                }
            }
        }
        // Under load for a while (at least 100 acknowledged writes), then SIGTERM.
        let started = ContinuousClock.now
        while acknowledged.ids.withLock({ $0.count }) < 100, ContinuousClock.now - started < .seconds(60) {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Task.sleep(for: .milliseconds(300))
        let metrics = try await TestClient.withClient(host: "127.0.0.1", port: server.port) { client in
            String(buffer: try await client.get("/metrics").body ?? ByteBuffer())
        }
        #expect(metrics.contains("depot_transactions_total"), "Depot's metrics reach /metrics")
        server.terminate()
        for writer in writers { try await writer.value }
        let exit = server.waitForExit(seconds: 60)
        stopped = exit != nil
        #expect(exit?.code == 0, "the server exits 0 after a graceful shutdown, got \(String(describing: exit)); stderr: \(server.standardError)")
        #expect(server.standardOutput.contains("listening"))

        let ids = acknowledged.ids.withLock { $0 }
        #expect(ids.count >= 100)
        let store = try await openStore(url: url)
        let pets = Controller<Pet, Pet>(store: store)
        let stored = Set(try await pets.fetchAll().map(\.id))
        await store.close()
        let missing = ids.filter { !stored.contains($0) }
        #expect(missing.isEmpty, "\(missing.count) of \(ids.count) acknowledged writes are missing")
    }

    @Test("a bad store URL or port, in the environment or on the command line, stops the start with a message and status 2")
    func badSettings() throws {
        let binary = try #require(Self.binary)
        var result = try ProcessLaunch.run(binary, [], environment: ["DEPOT_STORE_URL": "sqlite:x.sqlite?durability=sometimes"])
        #expect(result.exit.code == 2)
        #expect(result.stderr.contains("durability"), "\(result.stderr)")
        result = try ProcessLaunch.run(binary, [], environment: ["PORT": "99999"])
        #expect(result.exit.code == 2)
        #expect(result.stderr.contains("PORT must be a port number"), "\(result.stderr)")
        result = try ProcessLaunch.run(binary, ["--store-url", "sqlite:x.sqlite?durability=sometimes"], environment: [:])
        #expect(result.exit.code == 2)
        #expect(result.stderr.contains("durability"), "\(result.stderr)")
        result = try ProcessLaunch.run(binary, ["--port", "http"], environment: [:])
        #expect(result.exit.code == 2)
        #expect(result.stderr.contains("PORT must be a port number"), "\(result.stderr)")
    }
}

/// A `pet-clinic` process on a free loopback port.
final class RunningServer: Sendable {
    let pid: pid_t
    let port: Int
    private let outputPath: String
    private let errorPath: String

    init(binary: String, storeURL: String, directory: URL, arguments: [String] = []) throws {
        outputPath = directory.appendingPathComponent("stdout.txt").path
        errorPath = directory.appendingPathComponent("stderr.txt").path
        let child = try ProcessLaunch.spawn(
            binary, arguments, environment: ["DEPOT_STORE_URL": storeURL, "PORT": "0", "LOG_LEVEL": "warning"],
            stdout: .file(outputPath), stderr: .file(errorPath))
        pid = child.pid
        // The server prints "pet-clinic listening on 127.0.0.1:PORT" once it accepts connections.
        let deadline = Date(timeIntervalSinceNow: 120)
        var found: Int?
        while found == nil, Date() < deadline {
            if let text = try? String(contentsOfFile: outputPath, encoding: .utf8),
               let line = text.split(separator: "\n").first(where: { $0.contains("listening on") }),
               let port = line.split(separator: ":").last.flatMap({ Int($0) }) {
                found = port
            } else if let exit = ProcessLaunch.wait(child.pid, seconds: 0.05) {
                let stderr = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
                throw ServerFailure(message: "pet-clinic ended (\(exit)) before listening: \(stderr)")
            }
        }
        guard let found else {
            Foundation.kill(child.pid, SIGKILL)
            _ = ProcessLaunch.wait(child.pid)
            throw ServerFailure(message: "pet-clinic did not listen within 120 s")
        }
        port = found
    }

    var standardOutput: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    var standardError: String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }

    func terminate() { Foundation.kill(pid, SIGTERM) }

    func waitForExit(seconds: Double) -> ProcessLaunch.Exit? { ProcessLaunch.wait(pid, seconds: seconds) }

    func kill() {
        Foundation.kill(pid, SIGKILL)
        _ = ProcessLaunch.wait(pid)
    }
}

/// The ids the server acknowledged with 201, from every writer.
final class Acknowledged: Sendable {
    let ids = Mutex<[UUID]>([])
}

struct ServerFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
