import Depot
import Foundation
import HummingbirdTesting
import InMemoryTracing
import NIOCore
import Testing
import Tracing

@testable import PetClinic

/// The process's tracer for the tests: an in-memory one, bootstrapped once (swift-distributed-
/// tracing allows one bootstrap per process). Only routers built with tracing on and stores
/// opened with `tracing=true` report to it, so the other tests add nothing.
enum TestTracer {
    static let shared: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()
}

@Suite("PetClinic tracing", .serialized)
struct TracingTests {
    @Test("a request's span is the parent of the store's spans", arguments: TestBackend.all)
    func requestSpanParentsStoreSpans(_ backend: TestBackend) async throws {
        let tracer = TestTracer.shared
        let owner = Owner(id: UUID(), name: "Tia", city: "Oslo", email: nil)
        let missing = UUID()
        try await withClinic(backend, tracing: true) { client, clinic in
            try await clinic.owners.insert(owner)
            #expect(try await client.get("/owners/\(owner.id)").status == .ok)
            #expect(try await client.put("/owners/\(owner.id)", try json(["name": "Tia", "city": "Bergen"])).status == .ok)
            #expect(try await client.put("/owners/\(missing)", try json(["name": "Nobody", "city": "Bergen"])).status == .notFound)
        }
        let spans = tracer.finishedSpans
        for (method, path) in [("GET", "/owners/\(owner.id)"), ("PUT", "/owners/\(owner.id)"), ("PUT", "/owners/\(missing)")] {
            let requests = spans.filter {
                $0.attributes.get("url.path") == .string(path) && $0.attributes.get("http.request.method") == .string(method)
            }
            try #require(requests.count == 1, "one server span for \(method) \(path), found \(requests.count)")
            let request = requests[0]
            #expect(request.kind == .server)
            #expect(request.operationName == "/owners/{id}")
            // Depot's spans: those with OpenTelemetry's database system attribute.
            let inTrace = spans.filter { $0.traceID == request.traceID && $0.attributes.get("db.system.name") != nil }
            #expect(!inTrace.isEmpty, "the store traced \(method) \(path)")
            for span in inTrace {
                #expect(span.parentSpanID == request.spanID, "\(span.operationName) is a child of \(method) \(path)'s span")
                #expect(span.kind == .client)
            }
        }
    }
}
