import Depot
import Foundation

// The clinic's records. Each type is its own managed record (`@Record`), so the API encodes
// and decodes the same structs the store holds; an app whose domain types must stay free of
// Depot pairs each with a record type instead (see Depot's README).
//
// Keys are UUIDs: several servers sharing one PostgreSQL database create records without
// asking each other for the next number. The server makes them time-ordered
// (`UUID.timeOrdered()`), so new records go to the end of each store's key order and of the
// indexes on their references, instead of to a random page of each.

/// A pet owner.
@Record
public struct Owner: Codable, Hashable, Sendable {
    public var id: UUID
    public var name: String
    @Stored(.indexed) public var city: String
    /// Unique when present: two owners cannot share an address.
    @Stored(.unique) public var email: String?

    public init(id: UUID, name: String, city: String, email: String?) {
        self.id = id
        self.name = name
        self.city = city
        self.email = email
    }

    /// The owner's pets, by name. Deleting an owner deletes them (and their visits).
    public static let pets = ToMany<Owner, Pet>(\.ownerID).sorted(by: \.name)
}

/// A pet, belonging to one owner.
///
/// The list endpoint's page (`GET /pets?species=cat`, by name) and an owner's pets by name
/// each read an index range in order and stop at the page's end: `(species, name)` and
/// `(ownerID, name)`. Either also serves a filter on its first attribute alone.
@Record(indexes: [.index("species", "name"), .index("ownerID", "name")])
public struct Pet: Codable, Hashable, Sendable {
    public var id: UUID
    @Stored(.references(Owner.self, onDelete: .cascade)) public var ownerID: UUID
    public var name: String
    public var species: String
    public var birthYear: Int

    public init(id: UUID, ownerID: UUID, name: String, species: String, birthYear: Int) {
        self.id = id
        self.ownerID = ownerID
        self.name = name
        self.species = species
        self.birthYear = birthYear
    }

    /// The pet's visits, oldest first.
    public static let visits = ToMany<Pet, Visit>(\.petID).sorted(by: \.date)
}

/// A visit to the clinic.
@Record
public struct Visit: Codable, Hashable, Sendable {
    public var id: UUID
    @Stored(.references(Pet.self, onDelete: .cascade)) public var petID: UUID
    @Stored(.indexed) public var date: Date
    public var reason: String

    public init(id: UUID, petID: UUID, date: Date, reason: String) {
        self.id = id
        self.petID = petID
        self.date = date
        self.reason = reason
    }
}

/// The three controllers the routes use, over one store.
public struct Clinic: Sendable {
    public let store: any Store
    public let owners: Controller<Owner, Owner>
    public let pets: Controller<Pet, Pet>
    public let visits: Controller<Visit, Visit>

    public init(store: any Store) {
        self.store = store
        owners = Controller(store: store)
        pets = Controller(store: store)
        visits = Controller(store: store)
    }

    /// Registers the three entities (creating their tables, indexes and references on first
    /// use) before the server takes requests, so a schema problem stops the start-up, not the
    /// first request.
    public func prepare() async throws {
        _ = try await owners.count()
        _ = try await pets.count()
        _ = try await visits.count()
    }
}
