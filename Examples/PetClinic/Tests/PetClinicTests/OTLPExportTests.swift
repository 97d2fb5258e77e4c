import Depot
import DepotTesting
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import Synchronization
import Testing

@testable import PetClinic

/// The built server with OTLP export turned on by configuration, against a stand-in
/// collector on loopback: what an operator sees when they point the server at theirs.
@Suite("pet-clinic OTLP export", .serialized)
struct OTLPExportTests {
    @Test("otlp exporters send the requests' and the store's spans, and the metrics, to the collector")
    func exportReachesTheCollector() async throws {
        let binary = try #require(ServerProcessTests.binary, "pet-clinic is built beside the test runner")
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // The collector: OTLP/HTTP posts protobuf to /v1/traces and /v1/metrics and takes
        // any 200 answer.
        let traces = Received()
        let metrics = Received()
        let router = Router()
        for (path, received) in [("v1/traces", traces), ("v1/metrics", metrics)] {
            router.post(RouterPath(path)) { request, _ in
                let body = try await request.body.collect(upTo: 64 << 20)
                received.bytes.withLock { $0 += Array(buffer: body) }
                return Response(status: .ok, headers: [.contentType: "application/x-protobuf"])
            }
        }
        let collector = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await collector.test(.live) { collectorClient in
            let port = try #require(collectorClient.port)
            let server = try RunningServer(
                binary: binary, storeURL: "sqlite://" + directory.appendingPathComponent("clinic.sqlite").path, directory: directory,
                arguments: [
                    "--otel-traces-exporter", "otlp", "--otel-metrics-exporter", "otlp",
                    "--otel-exporter-otlp-endpoint", "http://127.0.0.1:\(port)",
                ])
            var stopped = false
            defer { if !stopped { server.kill() } }
            try await TestClient.withClient(host: "127.0.0.1", port: server.port) { client in
                let response = try await client.post("/owners", headers: [.contentType: "application/json"], body: try json(["name": "Otto", "city": "Wien"]))
                #expect(response.status == .created)
                let owner = try JSONDecoder().decode(Owner.self, from: Data(buffer: response.body ?? ByteBuffer()))
                #expect(try await client.get("/owners/\(owner.id)").status == .ok)
            }
            // Spans are sent in batches and metrics periodically; the graceful shutdown
            // flushes both.
            server.terminate()
            let exit = server.waitForExit(seconds: 60)
            stopped = exit != nil
            #expect(exit?.code == 0, "stderr: \(server.standardError)")
        }
        // Protobuf keeps strings as UTF-8 bytes: the names are in the posted bodies.
        let spans = traces.bytes.withLock { $0 }
        // Depot's spans carry OpenTelemetry's database attributes, the entity among them.
        for name in ["/owners/{id}", "db.query.summary", "Owner", "pet-clinic"] {
            #expect(spans.firstRange(of: Array(name.utf8)) != nil, "the collector received the span \(name) (\(spans.count) bytes)")
        }
        let series = metrics.bytes.withLock { $0 }
        for name in ["depot_transactions_total", "pet-clinic"] {
            #expect(series.firstRange(of: Array(name.utf8)) != nil, "the collector received the metric \(name) (\(series.count) bytes)")
        }
    }
}

final class Received: Sendable {
    let bytes = Mutex<[UInt8]>([])
}
