import DepotCore
import DepotServiceLifecycle
import DepotTesting
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import Testing

@Suite("Service lifecycle")
struct StoreServiceTests {
    @Test func gracefulShutdownClosesTheStore() async throws {
        let store = MemoryStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        try await cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1))
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: StoreService(store))], logger: Logger(label: "test")))
        let running = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(50))
        #expect(try await cats.count() == 1)
        await group.triggerGracefulShutdown()
        try await running.value
        await #expect(throws: DepotError.self) { try await cats.count() }
    }

    /// A service that, once shutdown begins, keeps using the store for a while (as an HTTP
    /// server finishing its requests does) and records whether those writes succeeded.
    struct DrainingWriter: Service {
        let cats: Controller<Cat, CatRecord>
        let results: Results

        final class Results: Sendable {
            let outcomes = NIOLockedValueBox<[Bool]>([])
        }

        func run() async throws {
            try? await gracefulShutdown()
            for i in 0..<5 {
                let saved = (try? await cats.save(Cat(id: Int64(100 + i), name: "late", weight: 1, age: 1))) != nil
                results.outcomes.withLockedValue { $0.append(saved) }
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    @Test("listed before the services that use the store, it closes the store after they stop")
    func closesAfterTheServicesUsingIt() async throws {
        let store = MemoryStore()
        let cats = Controller<Cat, CatRecord>(store: store)
        let writer = DrainingWriter(cats: cats, results: .init())
        // swift-service-lifecycle stops services in reverse order: StoreService goes first in
        // the list so that it stops last.
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: StoreService(store)), .init(service: writer)], logger: Logger(label: "test")))
        let running = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(50))
        await group.triggerGracefulShutdown()
        try await running.value
        #expect(writer.results.outcomes.withLockedValue { $0 } == [true, true, true, true, true], "every write during the drain committed")
        await #expect(throws: DepotError.self) { try await cats.count() }
    }
}
