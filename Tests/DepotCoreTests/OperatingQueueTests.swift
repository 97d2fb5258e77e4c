import DepotCore
import DepotTesting
import Dispatch
import Foundation
import Testing

/// Completion handlers arrive on the queue the controller was given.
@Suite("Completion handlers and operating queues")
struct OperatingQueueTests {
    /// Calls `body`, waits for the completion it passes on, and reports where it ran.
    func deliveredOn(
        _ queue: OperatingQueue, key: DispatchSpecificKey<Bool>,
        _ call: (CallbackController<Cat, CatRecord>, @escaping @Sendable (Bool, Bool) -> Void) -> Void
    ) async -> (onMain: Bool, hasKey: Bool) {
        let cats = Controller<Cat, CatRecord>(store: MemoryStore(), operatingQueue: queue)
        return await withCheckedContinuation { continuation in
            call(cats.callbacks) { onMain, hasKey in continuation.resume(returning: (onMain, hasKey)) }
        }
    }

    @Test func mainQueue() async {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        let place = await deliveredOn(.main, key: key) { cats, done in
            cats.save(Cat(id: 1, name: "Tom", weight: 1, age: 1)) { result in
                done(DispatchQueue.getSpecific(key: key) == true, (try? result.get()) != nil)
            }
        }
        #expect(place.onMain, "delivered on the main queue")
        #expect(place.hasKey, "the save succeeded")
    }

    @Test func backgroundQueue() async {
        let place = await deliveredOn(.background, key: OperatingQueue.backgroundKey) { cats, done in
            cats.fetchAll { result in
                let ok = (try? result.get()) == []
                done(Thread.isMainThread || !ok, DispatchQueue.getSpecific(key: OperatingQueue.backgroundKey) == true)
            }
        }
        #expect(!place.onMain)
        #expect(place.hasKey)
    }

    @Test func customQueue() async {
        let key = DispatchSpecificKey<Bool>()
        let queue = DispatchQueue(label: "test.custom")
        queue.setSpecific(key: key, value: true)
        let place = await deliveredOn(.custom(queue), key: key) { cats, done in
            cats.count { result in
                done(false, DispatchQueue.getSpecific(key: key) == true && (try? result.get()) == 0)
            }
        }
        #expect(place.hasKey)
    }

    @Test func errorsArriveAsDepotErrors() async {
        let cats = Controller<Cat, CatRecord>(store: MemoryStore())
        let result = await withCheckedContinuation { continuation in
            cats.callbacks.update(Cat(id: 9, name: "Ghost", weight: 1, age: 1)) { continuation.resume(returning: $0) }
        }
        #expect(throws: DepotError.self) { try result.get() }
        if case .failure(let error) = result { #expect(error.code == .notFound) }
    }

    @Test func everyCallbackCallRuns() async throws {
        let cats = Controller<Cat, CatRecord>(store: MemoryStore())
        let api = cats.callbacks
        func call<T: Sendable>(_ body: (@escaping @Sendable (Result<T, DepotError>) -> Void) -> Void) async throws -> T {
            try await withCheckedThrowingContinuation { c in body { c.resume(with: $0) } }
        }
        try await call { api.insert([Cat(id: 1, name: "A", weight: 1, age: 1), Cat(id: 2, name: "B", weight: 2, age: 2)], completion: $0) }
        try await call { api.save([Cat(id: 3, name: "C", weight: 3, age: 3)], completion: $0) }
        try await call { api.update(Cat(id: 1, name: "A2", weight: 1, age: 1), completion: $0) }
        #expect(try await call { api.fetchOne(id: 1, completion: $0) }?.name == "A2")
        #expect(try await call { api.fetchFirst(Request(\.age > 1), completion: $0) }?.id == 2)
        #expect(try await call { api.exists(id: 3, completion: $0) })
        #expect(try await call { api.delete(id: 3, completion: $0) })
        #expect(try await call { api.deleteAll(where: \.age == 2, completion: $0) } == 1)
        let names = try await call { api.read({ try $0.fetchAll().map(\.name) }, completion: $0) }
        #expect(names == ["A2"])
        let inside = try await call { api.operation({ context in try context.count() }, completion: $0) }
        #expect(inside == 1)
    }
}
