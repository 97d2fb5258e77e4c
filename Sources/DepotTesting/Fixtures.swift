public import DepotCore
public import Foundation

/// The application's value in the examples and benchmarks: an immutable struct.
public struct Cat: Sendable, Hashable, ManagedConvertible {
    public let id: Int64
    public let name: String
    public let weight: Double
    public let age: Int

    public init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    public func toManaged() -> CatRecord {
        CatRecord(id: id, name: name, weight: weight, age: age)
    }
}

/// The managed record that stores a ``Cat``: the paired form of `@Record` (it names
/// `ObjectConvertible`, so the macro makes it a record, not its own object).
@Record(name: "Cat")
public struct CatRecord: ObjectConvertible, Hashable {
    public var id: Int64
    public var name: String
    public var weight: Double
    @Stored(.indexed) public var age: Int

    public init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    public func toObject() -> Cat { Cat(id: id, name: name, weight: weight, age: age) }
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

    public init(seed: UInt64) { state = seed }

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
    public var id: Int64
    public var int: Int
    public var int32: Int32
    public var int16: Int16
    public var double: Double
    public var bool: Bool
    public var string: String
    public var data: Data
    public var date: Date
    public var uuid: UUID
    public var optionalInt: Int64?
    public var optionalDouble: Double?
    public var optionalBool: Bool?
    public var optionalString: String?
    public var optionalData: Data?
    public var optionalDate: Date?
    public var optionalUUID: UUID?

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
    public var id: String
    @Stored(.unique) public var owner: String
    @Stored(.unique) public var nickname: String?
    public var balance: Int64

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
    public var id: Int64
    @Stored(.indexed) public var name: String
    public var weight: Double
    @Stored(.indexed) public var age: Int
    public var color: String?
    public var lives: Int = 9

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
    public var id: Int64
    public var name: String
    public var weight: Double
    public var age: String
}

/// A record whose declaration is invalid (two attributes named alike). Written by hand:
/// `@Record` refuses this at compile time.
public struct BrokenRecord: StoredObject, Hashable {
    public var id: Int64
    public var value: Int

    public static let entity = Entity<BrokenRecord>("Broken", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("ID", \.value)
    }

    public init(id: Int64, value: Int) {
        self.id = id
        self.value = value
    }

    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        value = try row[\.value]
    }
}

/// A value whose conversion to and from its record can fail, to check that failures are
/// reported and never skipped.
public struct Fragile: Sendable, Hashable, ManagedConvertible {
    public let id: Int64
    public let label: String

    public init(id: Int64, label: String) {
        self.id = id
        self.label = label
    }

    public struct Refused: Error, CustomStringConvertible {
        public var description: String { "label is refused" }
    }

    public func toManaged() throws -> FragileRecord {
        if label == "refuse-to-store" { throw Refused() }
        return FragileRecord(id: id, label: label)
    }
}

/// Written by hand (entity, `init(row:)`, the entity's key-path encoding), so the
/// hand-written path runs through every check that uses it.
public struct FragileRecord: ManagedRecord, ObjectConvertible, Hashable {
    public var id: Int64
    public var label: String

    public static let entity = Entity<FragileRecord>("Fragile", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("label", \.label)
    }

    public init(id: Int64, label: String) {
        self.id = id
        self.label = label
    }

    public init(row: RecordReader<Self>) throws {
        id = try row[\.id]
        label = try row[\.label]
    }

    public func toObject() throws -> Fragile {
        if label == "refuse-to-load" { throw Fragile.Refused() }
        return Fragile(id: id, label: label)
    }
}

/// A mood, stored as its `String` raw value.
public enum Mood: String, AttributeValue, Hashable, CaseIterable {
    case calm, grumpy, playful
}

/// A size, stored as its integer raw value.
public enum Size: Int, AttributeValue, Hashable, CaseIterable {
    case small = 1, medium = 2, large = 3
}

/// A record with enum attributes: a `String`-backed one (indexed), an `Int`-backed one and
/// an optional one.
@Record
public struct Critter: Hashable {
    public var id: Int64
    @Stored(.indexed) public var mood: Mood
    public var size: Size
    public var formerMood: Mood?

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
    public var id: Int64
    @Stored(.indexed) public var mood: String
    public var size: Int
    public var formerMood: String?

    public init(id: Int64, mood: String, size: Int, formerMood: String? = nil) {
        self.id = id
        self.mood = mood
        self.size = size
        self.formerMood = formerMood
    }
}
