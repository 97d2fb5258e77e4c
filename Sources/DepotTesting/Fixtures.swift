public import DepotCore
public import Foundation

/// The application's value in the examples and benchmarks: an immutable struct.
public struct Cat: Sendable, Hashable, ManagedConvertible {
    /// The cat's primary key.
    public let id: Int64
    /// The cat's name.
    public let name: String
    /// The cat's weight in kilograms.
    public let weight: Double
    /// The cat's age in years.
    public let age: Int

    /// A cat with the given values.
    public init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    /// The cat as its record. Inlinable, as a models module would declare it: the
    /// benchmark and the tests use it from other modules, as an application would.
    @inlinable public func toManaged() -> CatRecord {
        CatRecord(id: id, name: name, weight: weight, age: age)
    }
}

/// The managed record that stores a ``Cat``: the paired form of `@Record` (it names
/// `ObjectConvertible`, so the macro makes it a record, not its own object).
@Record(name: "Cat")
public struct CatRecord: ObjectConvertible, Hashable {
    /// The cat's primary key.
    public var id: Int64
    /// The cat's name.
    public var name: String
    /// The cat's weight in kilograms.
    public var weight: Double
    /// The cat's age in years, indexed.
    @Stored(.indexed) public var age: Int

    /// A record with the given values.
    public init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    /// The record as its ``Cat`` (inlinable, as ``Cat/toManaged()``).
    @inlinable public func toObject() -> Cat { Cat(id: id, name: name, weight: weight, age: age) }
}

extension Cat {
    /// The benchmark workload's cats: `count` cats with ids 1…count, names of 8–12 ASCII
    /// letters, weights and ages (0…15) drawn from a generator seeded with `seed`, so
    /// every backend and every run gets the same data.
    public static func workload(count: Int, seed: UInt64 = 42) -> [Cat] {
        var generator = SplitMix64(seed: seed)
        var cats: [Cat] = []
        cats.reserveCapacity(count)
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for i in 0..<count {
            let length = 8 + Int(generator.next() % 5)
            var bytes: [UInt8] = []
            bytes.reserveCapacity(length)
            for _ in 0..<length { bytes.append(letters[Int(generator.next() % UInt64(letters.count))]) }
            let weight = Double(generator.next() % 10_000) / 1000 + 1
            let age = Int(generator.next() % 16)
            cats.append(Cat(id: Int64(i + 1), name: String(decoding: bytes, as: UTF8.self), weight: weight, age: age))
        }
        return cats
    }
}

/// A small deterministic random number generator (SplitMix64), so fixtures are the same on
/// every platform and run.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator that starts from `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next number of the sequence.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A record with an attribute of every type, and an optional one of every type: it is its
/// own object (`Controller<Sample, Sample>`, which `@Record` provides).
@Record
public struct Sample: Hashable {
    /// The primary key.
    public var id: Int64
    /// An `Int` attribute.
    public var int: Int
    /// An `Int32` attribute.
    public var int32: Int32
    /// An `Int16` attribute.
    public var int16: Int16
    /// A `Double` attribute.
    public var double: Double
    /// A `Bool` attribute.
    public var bool: Bool
    /// A `String` attribute.
    public var string: String
    /// A `Data` attribute.
    public var data: Data
    /// A `Date` attribute.
    public var date: Date
    /// A `UUID` attribute.
    public var uuid: UUID
    /// An optional `Int64` attribute.
    public var optionalInt: Int64?
    /// An optional `Double` attribute.
    public var optionalDouble: Double?
    /// An optional `Bool` attribute.
    public var optionalBool: Bool?
    /// An optional `String` attribute.
    public var optionalString: String?
    /// An optional `Data` attribute.
    public var optionalData: Data?
    /// An optional `Date` attribute.
    public var optionalDate: Date?
    /// An optional `UUID` attribute.
    public var optionalUUID: UUID?

    /// A sample with key `id` and every other attribute zero, empty or `nil` unless given.
    public init(
        id: Int64, int: Int = 0, int32: Int32 = 0, int16: Int16 = 0, double: Double = 0, bool: Bool = false,
        string: String = "", data: Data = Data(), date: Date = Date(timeIntervalSinceReferenceDate: 0),
        uuid: UUID = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), optionalInt: Int64? = nil,
        optionalDouble: Double? = nil, optionalBool: Bool? = nil, optionalString: String? = nil,
        optionalData: Data? = nil, optionalDate: Date? = nil, optionalUUID: UUID? = nil
    ) {
        self.id = id
        self.int = int
        self.int32 = int32
        self.int16 = int16
        self.double = double
        self.bool = bool
        self.string = string
        self.data = data
        self.date = date
        self.uuid = uuid
        self.optionalInt = optionalInt
        self.optionalDouble = optionalDouble
        self.optionalBool = optionalBool
        self.optionalString = optionalString
        self.optionalData = optionalData
        self.optionalDate = optionalDate
        self.optionalUUID = optionalUUID
    }

    /// The record as a row: equal rows mean identical stored values, with Depot's value
    /// equality (bytes for strings, NaN equal to NaN).
    public var row: Row {
        get throws {
            var row = Row()
            try encode(into: &row)
            return row
        }
    }
}

/// A record with a string primary key, a unique attribute and an optional unique one.
@Record
public struct Account: Hashable {
    /// The primary key, a string.
    public var id: String
    /// The owner, unique among accounts.
    @Stored(.unique) public var owner: String
    /// An optional nickname, unique when present.
    @Stored(.unique) public var nickname: String?
    /// The balance.
    public var balance: Int64

    /// An account with the given values.
    public init(id: String, owner: String, nickname: String? = nil, balance: Int64 = 0) {
        self.id = id
        self.owner = owner
        self.nickname = nickname
        self.balance = balance
    }
}

/// ``CatRecord``'s entity grown additively: a new optional attribute and a new attribute
/// with a default (its initial value), and an index on `name`.
@Record(name: "Cat")
public struct CatRecordV2: Hashable {
    /// The cat's primary key.
    public var id: Int64
    /// The cat's name, now indexed.
    @Stored(.indexed) public var name: String
    /// The cat's weight in kilograms.
    public var weight: Double
    /// The cat's age in years, indexed.
    @Stored(.indexed) public var age: Int
    /// A new optional attribute.
    public var color: String?
    /// A new attribute whose default, 9, existing records get.
    public var lives: Int = 9

    /// A record with the given values.
    public init(id: Int64, name: String, weight: Double, age: Int, color: String?, lives: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
        self.color = color
        self.lives = lives
    }
}

/// ``CatRecord``'s entity with `age` retyped to a string: an incompatible change.
@Record(name: "Cat")
public struct CatRecordRetyped: Hashable {
    /// The cat's primary key.
    public var id: Int64
    /// The cat's name.
    public var name: String
    /// The cat's weight in kilograms.
    public var weight: Double
    /// The age, retyped from `Int` to `String`.
    public var age: String
}

/// A record whose declaration is invalid (two attributes named alike). Written by hand:
/// `@Record` refuses this at compile time.
public struct BrokenRecord: StoredObject, Hashable {
    /// The primary key.
    public var id: Int64
    /// Stored as `ID`, which clashes with `id`.
    public var value: Int

    /// The invalid entity: two attributes whose names differ only in case.
    public static let entity = Entity<BrokenRecord>("Broken", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("ID", \.value)
    }

    /// A record with the given values.
    public init(id: Int64, value: Int) {
        self.id = id
        self.value = value
    }

    /// Reads the record from a stored row.
    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        value = try row[\.value]
    }
}

/// A value whose conversion to and from its record can fail, to check that failures are
/// reported and never skipped.
public struct Fragile: Sendable, Hashable, ManagedConvertible {
    /// The primary key.
    public let id: Int64
    /// The label; `refuse-to-store` makes ``toManaged()`` throw.
    public let label: String

    /// A value with the given key and label.
    public init(id: Int64, label: String) {
        self.id = id
        self.label = label
    }

    /// The error a refused conversion throws.
    public struct Refused: Error, CustomStringConvertible {
        /// "label is refused".
        public var description: String { "label is refused" }
    }

    /// The value as its record; throws ``Refused`` for the label `refuse-to-store`.
    public func toManaged() throws -> FragileRecord {
        if label == "refuse-to-store" { throw Refused() }
        return FragileRecord(id: id, label: label)
    }
}

/// Written by hand (entity, `init(row:)`, the entity's key-path encoding), so the
/// hand-written path runs through every check that uses it.
public struct FragileRecord: ManagedRecord, ObjectConvertible, Hashable {
    /// The primary key.
    public var id: Int64
    /// The label; `refuse-to-load` makes ``toObject()`` throw.
    public var label: String

    /// The entity, declared by hand.
    public static let entity = Entity<FragileRecord>("Fragile", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("label", \.label)
    }

    /// A record with the given key and label.
    public init(id: Int64, label: String) {
        self.id = id
        self.label = label
    }

    /// Reads the record from a stored row.
    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        label = try row[\.label]
    }

    /// The record as its value; throws ``Fragile/Refused`` for the label `refuse-to-load`.
    public func toObject() throws -> Fragile {
        if label == "refuse-to-load" { throw Fragile.Refused() }
        return Fragile(id: id, label: label)
    }
}

/// A mood, stored as its `String` raw value.
public enum Mood: String, AttributeValue, Hashable, CaseIterable {
    /// The moods, stored as their names.
    case calm, grumpy, playful
}

/// A size, stored as its integer raw value.
public enum Size: Int, AttributeValue, Hashable, CaseIterable {
    /// The sizes, stored as 1, 2 and 3.
    case small = 1, medium = 2, large = 3
}

/// A record with enum attributes: a `String`-backed one (indexed), an `Int`-backed one and
/// an optional one.
@Record
public struct Critter: Hashable {
    /// The primary key.
    public var id: Int64
    /// A `String`-backed enum attribute, indexed.
    @Stored(.indexed) public var mood: Mood
    /// An `Int`-backed enum attribute.
    public var size: Size
    /// An optional enum attribute.
    public var formerMood: Mood?

    /// A critter with the given values.
    public init(id: Int64, mood: Mood, size: Size, formerMood: Mood? = nil) {
        self.id = id
        self.mood = mood
        self.size = size
        self.formerMood = formerMood
    }
}

/// ``Critter``'s entity with the raw values as plain attributes: the same stored schema,
/// so it can write values that no case has.
@Record(name: "Critter")
public struct CritterRaw: Hashable {
    /// The primary key.
    public var id: Int64
    /// ``Critter/mood``'s raw value, indexed.
    @Stored(.indexed) public var mood: String
    /// ``Critter/size``'s raw value.
    public var size: Int
    /// ``Critter/formerMood``'s raw value.
    public var formerMood: String?

    /// A record with the given raw values.
    public init(id: Int64, mood: String, size: Int, formerMood: String? = nil) {
        self.id = id
        self.mood = mood
        self.size = size
        self.formerMood = formerMood
    }
}
