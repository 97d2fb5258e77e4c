import DepotCore
import DepotServiceLifecycle
import DepotTesting
import Logging
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
}
