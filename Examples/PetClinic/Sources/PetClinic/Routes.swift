import Depot
import Foundation
import Hummingbird
import NIOCore
import Prometheus
import ServiceLifecycle

extension Owner: ResponseEncodable {}
extension Pet: ResponseEncodable {}
extension Visit: ResponseEncodable {}

/// The service's routes over `clinic`:
///
/// | route | what |
/// |---|---|
/// | `GET /health` | 200 while the service runs |
/// | `POST /owners`, `GET /owners?city=&namePrefix=&sort=&limit=&cursor=` | create, list a page |
/// | `GET`, `PUT`, `DELETE /owners/{id}` | one owner; deleting removes their pets and visits |
/// | `GET`, `POST /owners/{id}/pets` | the owner's pets (through `Owner.pets`), add one |
/// | `POST /pets`, `GET /pets?species=&ownerID=&namePrefix=&sort=&limit=&cursor=` | create, list a page |
/// | `GET`, `PUT`, `DELETE /pets/{id}` | one pet |
/// | `GET`, `POST /pets/{id}/visits` | the pet's visits, add one |
/// | `POST /pets/import?skipInvalid=` | a JSON array of pets, each checked as `POST /pets` checks one, upserted in one transaction |
/// | `GET /pets/live?species=&limit=&events=` | server-sent events: the first `limit` pets, then each change set |
/// | `GET /metrics` | Prometheus text, when a registry is given |
///
/// With `tracing`, each request runs in a server span (Hummingbird's `TracingMiddleware`,
/// on the bootstrapped tracer), and the store's spans, when its URL asks for them
/// (`tracing=true`), are its children: the span is the task's `ServiceContext` while the
/// handler runs.
public func buildRouter(clinic: Clinic, metrics: PrometheusCollectorRegistry? = nil, tracing: Bool = false) -> Router<BasicRequestContext> {
    let router = Router(context: BasicRequestContext.self)
    router.middlewares.add(MetricsMiddleware())
    if tracing { router.middlewares.add(TracingMiddleware()) }
    router.middlewares.add(StoreExecutorMiddleware(executor: clinic.store.executor))
    // Innermost, so the tracing and metrics middlewares see the answer's status.
    router.middlewares.add(APIErrorMiddleware())

    router.get("health") { _, _ in "ok" }
    if let metrics {
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.emitToBuffer())))
        }
    }
    addOwnerRoutes(router.group("owners"), clinic)
    addPetRoutes(router.group("pets"), clinic)
    return router
}

private func addOwnerRoutes(_ owners: RouterGroup<BasicRequestContext>, _ clinic: Clinic) {
    owners.post { request, context in
        let input = try await decodeBody(OwnerInput.self, request).validated()
        let owner = Owner(id: .timeOrdered(), name: input.name, city: input.city, email: input.email)
        try await clinic.owners.insert(owner)
        return EditedResponse(status: .created, headers: [.location: "/owners/\(owner.id)"], response: owner)
    }
    owners.get { request, _ in
        let query = request.uri.queryParameters
        let list = try ListParameters(query, sortable: ["name", "city"], defaultSort: "name")
        var set = clinic.owners.results
        if let city = query.get("city") { set = set.filter(\.city == city) }
        if let prefix = query.get("namePrefix") { set = set.filter(.hasPrefix(\.name, prefix)) }
        return try await list.page(of: set)
    }
    owners.get(":id") { _, context in
        let id = try Check.id(context)
        guard let owner = try await clinic.owners.fetchOne(id: id) else { throw APIError.notFound("owner", id) }
        return owner
    }
    owners.put(":id") { request, context in
        let id = try Check.id(context)
        let input = try await decodeBody(OwnerInput.self, request).validated()
        let owner = Owner(id: id, name: input.name, city: input.city, email: input.email)
        do {
            try await clinic.owners.update(owner)
        } catch let error as DepotError where error.code == .notFound {
            throw APIError.notFound("owner", id)
        }
        return owner
    }
    owners.delete(":id") { _, context in
        let id = try Check.id(context)
        guard try await clinic.owners.delete(id: id) else { throw APIError.notFound("owner", id) }
        return Response(status: .noContent)
    }
    // The nested resource, through the relationship: one query for the owner, one for pets.
    owners.get(":id/pets") { _, context in
        let id = try Check.id(context)
        guard let found = try await clinic.owners.fetchAll(Depot.Request(\.id == id), including: Owner.pets).first else {
            throw APIError.notFound("owner", id)
        }
        return ListResponse(items: found.related, next: nil)
    }
    owners.post(":id/pets") { request, context in
        let ownerID = try Check.id(context)
        let input = try await decodeBody(PetInput.self, request).validated()
        let pet = Pet(id: .timeOrdered(), ownerID: ownerID, name: input.name, species: input.species, birthYear: input.birthYear)
        do {
            try await clinic.pets.insert(pet)
        } catch let error as DepotError where error.code == .missingReference {
            throw APIError.notFound("owner", ownerID)
        }
        return EditedResponse(status: .created, headers: [.location: "/pets/\(pet.id)"], response: pet)
    }
}

private func addPetRoutes(_ pets: RouterGroup<BasicRequestContext>, _ clinic: Clinic) {
    pets.post { request, context in
        let input = try await decodeBody(PetInput.self, request).validated()
        guard let ownerID = input.ownerID else { throw APIError.validation("ownerID is missing.") }
        let pet = Pet(id: .timeOrdered(), ownerID: ownerID, name: input.name, species: input.species, birthYear: input.birthYear)
        try await clinic.pets.insert(pet)   // missingReference (422 referenceNotFound) when the owner does not exist
        return EditedResponse(status: .created, headers: [.location: "/pets/\(pet.id)"], response: pet)
    }
    pets.get { request, _ in
        let query = request.uri.queryParameters
        let list = try ListParameters(query, sortable: ["name", "species", "birthYear"], defaultSort: "name")
        return try await list.page(of: try petFilter(clinic, query))
    }
    // Registered before ":id" routes' siblings so "import" and "live" are never read as ids.
    pets.post("import") { request, context in
        // Each element is checked as it arrives, by the rules of `POST /pets` (PetImport).
        // One transaction (all or nothing) holds every checked pet until it commits, hence
        // the cap on the body.
        try Check.jsonContentType(request)
        var importer = PetImport(skipInvalid: request.uri.queryParameters.get("skipInvalid") == "true")
        let limit = importLimit
        var received = 0
        for try await buffer in request.body {
            received += buffer.readableBytes
            guard received <= limit else {
                throw APIError.payloadTooLarge(limit: limit, "; send the array in parts")
            }
            try importer.feed(buffer)
        }
        try importer.finish()
        return try await importer.write(to: clinic)
    }
    pets.get("live") { request, context in
        let query = request.uri.queryParameters
        let set = try petFilter(clinic, query).sorted(by: \.name)
        let limit = try boundedInteger(query, "limit", default: 100, range: 1...1_000)
        let events = try boundedInteger(query, "events", default: Int.max, range: 1...Int.max)
        let observation = clinic.pets.observe(set.request.limit(limit))
        return Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
            body: ResponseBody { writer in
                // Ends when the client has had `events` events, disconnects, or the service
                // shuts down (the store's close ends the observation too).
                var sent = 0
                for try await update in observation.cancelOnGracefulShutdown() {
                    try await writer.write(ByteBuffer(bytes: try LiveEvent(update).serverSentEvent()))
                    sent += 1
                    if sent >= events { break }
                }
                try await writer.finish(nil)
            })
    }
    pets.get(":id") { _, context in
        let id = try Check.id(context)
        guard let pet = try await clinic.pets.fetchOne(id: id) else { throw APIError.notFound("pet", id) }
        return pet
    }
    pets.put(":id") { request, context in
        let id = try Check.id(context)
        let input = try await decodeBody(PetInput.self, request).validated()
        let pet = try await clinic.pets.operation { transaction in
            guard let current = try transaction.fetchOne(id: id) else { throw APIError.notFound("pet", id) }
            let pet = Pet(id: id, ownerID: input.ownerID ?? current.ownerID, name: input.name, species: input.species, birthYear: input.birthYear)
            try transaction.update(pet)
            return pet
        }
        return pet
    }
    pets.delete(":id") { _, context in
        let id = try Check.id(context)
        guard try await clinic.pets.delete(id: id) else { throw APIError.notFound("pet", id) }
        return Response(status: .noContent)
    }
    pets.get(":id/visits") { _, context in
        let id = try Check.id(context)
        guard let found = try await clinic.pets.fetchAll(Depot.Request(\.id == id), including: Pet.visits).first else {
            throw APIError.notFound("pet", id)
        }
        return ListResponse(items: found.related, next: nil)
    }
    pets.post(":id/visits") { request, context in
        let petID = try Check.id(context)
        let input = try await decodeBody(VisitInput.self, request).validated()
        let visit = Visit(id: .timeOrdered(), petID: petID, date: input.date ?? Date(), reason: input.reason)
        do {
            try await clinic.visits.insert(visit)
        } catch let error as DepotError where error.code == .missingReference {
            throw APIError.notFound("pet", petID)
        }
        return EditedResponse(status: .created, headers: [.location: "/pets/\(petID)/visits"], response: visit)
    }
}

/// The most JSON one `POST /pets/import` takes.
let importLimit = 32 << 20

/// The most JSON a route other than the import takes.
let bodyLimit = 1 << 20

/// The request's JSON body as `T`, at most ``bodyLimit`` (413 past it); dates in ISO 8601.
/// A body declared as another media type is 415; decoding errors are answered 400 with the
/// field's path (the error middleware words them).
private func decodeBody<T: Decodable>(_ type: T.Type, _ request: Request) async throws -> T {
    try Check.jsonContentType(request)
    var request = request
    let body: ByteBuffer
    do {
        body = try await request.collectBody(upTo: bodyLimit)
    } catch is NIOTooManyBytesError {
        throw APIError.payloadTooLarge(limit: bodyLimit)
    }
    let decoder = JSONDecoder()
    decoder.dateDecodingStrategy = .iso8601
    return try decoder.decode(T.self, from: Data(buffer: body))
}

/// The pets selected by `species`, `ownerID` and `namePrefix`.
private func petFilter(_ clinic: Clinic, _ query: Parameters) throws -> ResultSet<Pet, Pet> {
    var set = clinic.pets.results
    if let species = query.get("species") { set = set.filter(\.species == species) }
    if let text = query.get("ownerID") {
        guard let owner = UUID(uuidString: text) else { throw APIError.validation("ownerID must be a UUID, not \(Check.quote(text)).") }
        set = set.filter(\.ownerID == owner)
    }
    if let prefix = query.get("namePrefix") { set = set.filter(.hasPrefix(\.name, prefix)) }
    return set
}

private func boundedInteger(_ query: Parameters, _ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
    guard let text = query.get(name) else { return value }
    guard let number = Int(text), range.contains(number) else {
        throw APIError.validation("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not \(Check.quote(text)).")
    }
    return number
}

/// One server-sent event of `/pets/live`: the first result (`snapshot`), then each change
/// set with the records it inserted or updated (indices as Depot's `ChangeSet` gives them:
/// deletions in the old result, insertions and updates in the new one).
struct LiveEvent: Encodable {
    struct Indexed: Encodable {
        let index: Int
        let pet: Pet
    }
    struct Move: Encodable {
        let from: Int
        let to: Int
    }
    let kind: String
    let count: Int
    var items: [Pet]?
    var inserted: [Indexed]?
    var updated: [Indexed]?
    var deleted: [Int]?
    var moved: [Move]?

    init(_ update: ObservedResult<Pet>) {
        count = update.objects.count
        if update.isInitial {
            kind = "snapshot"
            items = update.objects
        } else {
            kind = "changes"
            // Indices come from the store; a bad one is skipped rather than trapping.
            let objects = update.objects
            inserted = update.changes.inserted.compactMap { objects.indices.contains($0) ? Indexed(index: $0, pet: objects[$0]) : nil }
            updated = update.changes.updated.compactMap { objects.indices.contains($0) ? Indexed(index: $0, pet: objects[$0]) : nil }
            deleted = update.changes.deleted
            moved = update.changes.moved.map { Move(from: $0.from, to: $0.to) }
        }
    }

    func serverSentEvent() throws -> [UInt8] {
        let data = try JSONEncoder().encode(self)
        return Array("event: \(kind)\ndata: ".utf8) + Array(data) + Array("\n\n".utf8)
    }
}

/// Runs each request on the store's executor threads, so the store's reads run in place
/// instead of hopping to its own thread and back (Depot's documentation, "Using Depot in a
/// server").
struct StoreExecutorMiddleware<Context: RequestContext>: RouterMiddleware {
    let executor: StoreExecutor

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await withTaskExecutorPreference(executor) { try await next(request, context) }
    }
}
