import Depot
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import PetClinic

/// A backend the example's tests run on. PostgreSQL joins when DEPOT_TEST_POSTGRES_URL names
/// a server (`make example-test` starts a throwaway one); each test gets a schema of its own.
struct TestBackend: Sendable, CustomTestStringConvertible {
    let name: String

    var testDescription: String { name }

    static var all: [TestBackend] {
        var backends = ["memory", "sqlite", "lmdb"].map(TestBackend.init)
        if ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] != nil { backends.append(TestBackend(name: "postgres")) }
        return backends
    }

    /// Backends whose records outlive the process (for the shutdown test).
    static var persistent: [TestBackend] { all.filter { $0.name != "memory" } }

    /// A fresh, empty store's URL.
    func url(in directory: URL) throws -> String {
        switch name {
        case "memory": return "memory:"
        case "sqlite": return "sqlite://" + directory.appendingPathComponent("clinic.sqlite").path
        case "lmdb": return "lmdb://" + directory.appendingPathComponent("clinic.lmdb").path
        default:
            let server = ProcessInfo.processInfo.environment["DEPOT_TEST_POSTGRES_URL"] ?? ""
            let schema = "clinic_" + UUID().uuidString.prefix(8).lowercased()
            return try StoreURL(server).setting("schema", to: schema).unredacted
        }
    }
}

func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("pet-clinic-tests-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// Runs `body` against the application on a fresh store of `backend`, through Hummingbird's
/// router test framework (no socket), then removes the store's files. With `tracing`, the
/// router has its tracing middleware and the store is opened with `tracing=true`; spans go
/// to the bootstrapped tracer (``TestTracer``).
func withClinic(
    _ backend: TestBackend, tracing: Bool = false, _ body: @escaping @Sendable (any TestClientProtocol, Clinic) async throws -> Void
) async throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    var url = try StoreURL(try backend.url(in: directory))
    if tracing {
        _ = TestTracer.shared
        url = try url.setting("tracing", to: "true")
    }
    let store = try await url.open()
    let clinic = Clinic(store: store)
    try await clinic.prepare()
    // The exporter setting only turns the router's tracing middleware on here: the tests
    // bootstrap their in-memory tracer instead of swift-otel's.
    let app = buildApplication(
        clinic: clinic,
        settings: ClinicSettings(storeURL: try StoreURL("memory:"), port: 0, telemetry: TelemetrySettings(traces: tracing ? .otlp : .none)),
        logger: Logger(label: "pet-clinic-tests"))
    // The application's StoreService closes the store when the test framework shuts it down.
    try await app.test(.router) { client in try await body(client, clinic) }
}

let jsonEncoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.dateEncodingStrategy = .iso8601
    return encoder
}()

func json(_ value: some Encodable) throws -> ByteBuffer { ByteBuffer(bytes: try jsonEncoder.encode(value)) }

func json(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

func decode<T: Decodable>(_ type: T.Type, _ response: TestResponse, sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
    do {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(T.self, from: Data(buffer: response.body))
    } catch {
        Issue.record("Could not decode \(T.self) from \(String(buffer: response.body)): \(error)", sourceLocation: sourceLocation)
        throw error
    }
}

struct ErrorBody: Decodable {
    struct Detail: Decodable {
        let code: String
        let message: String
    }
    let error: Detail
}

struct List<Item: Decodable>: Decodable {
    let items: [Item]
    let next: String?
}

extension TestClientProtocol {
    func get(_ uri: String) async throws -> TestResponse {
        try await execute(uri: uri, method: .get) { $0 }
    }

    func post(_ uri: String, _ body: ByteBuffer) async throws -> TestResponse {
        try await execute(uri: uri, method: .post, headers: [.contentType: "application/json"], body: body) { $0 }
    }

    func put(_ uri: String, _ body: ByteBuffer) async throws -> TestResponse {
        try await execute(uri: uri, method: .put, headers: [.contentType: "application/json"], body: body) { $0 }
    }

    func delete(_ uri: String) async throws -> TestResponse {
        try await execute(uri: uri, method: .delete) { $0 }
    }

    /// Creates an owner and returns it.
    func createOwner(_ name: String, city: String, email: String? = nil) async throws -> Owner {
        let response = try await post("/owners", try json(["name": name, "city": city, "email": email]))
        #expect(response.status == .created, "\(String(buffer: response.body))")
        return try decode(Owner.self, response)
    }

    func createPet(_ name: String, species: String, birthYear: Int, owner: UUID) async throws -> Pet {
        let response = try await post("/owners/\(owner)/pets", try json(PetUpdate(name: name, species: species, birthYear: birthYear)))
        #expect(response.status == .created, "\(String(buffer: response.body))")
        return try decode(Pet.self, response)
    }
}

/// Expects an error answer with `status`, the JSON error body with `code`, and a message
/// that contains `phrase`.
func expectError(
    _ response: TestResponse, _ status: HTTPResponse.Status, code: String, mentioning phrase: String,
    sourceLocation: SourceLocation = #_sourceLocation
) throws {
    #expect(response.status == status, "\(String(buffer: response.body))", sourceLocation: sourceLocation)
    #expect(response.headers[.contentType] == "application/json; charset=utf-8", sourceLocation: sourceLocation)
    let body = try decode(ErrorBody.self, response, sourceLocation: sourceLocation)
    #expect(body.error.code == code, "message: \(body.error.message)", sourceLocation: sourceLocation)
    #expect(body.error.message.contains(phrase), "message: \(body.error.message)", sourceLocation: sourceLocation)
}
