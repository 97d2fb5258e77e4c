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

/// The managed record that stores a ``Cat``.
public struct CatRecord: ManagedRecord, ObjectConvertible, Hashable {
    public var id: Int64
    public var name: String
    public var weight: Double
    public var age: Int

    public static let entity = Entity<CatRecord>("Cat", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("name", \.name)
        Attribute("weight", \.weight)
        Attribute("age", \.age, indexed: true)
    }

    public init(id: Int64, name: String, weight: Double, age: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
    }

    public init(row: Row) throws {
        id = try row[0]
        name = try row[1]
        weight = try row[2]
        age = try row[3]
    }

    public func encode(into row: inout Row) {
        row.removeAll()
        row.append(.int(id))
        row.append(.string(name))
        row.append(.double(weight))
        row.append(.int(Int64(age)))
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
/// own object (`Controller<Sample, Sample>`).
public struct Sample: StoredObject, Hashable {
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

    public static let entity = Entity<Sample>("Sample", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("int", \.int)
        Attribute("int32", \.int32)
        Attribute("int16", \.int16)
        Attribute("double", \.double)
        Attribute("bool", \.bool)
        Attribute("string", \.string)
        Attribute("data", \.data)
        Attribute("date", \.date)
        Attribute("uuid", \.uuid)
        Attribute("optionalInt", \.optionalInt)
        Attribute("optionalDouble", \.optionalDouble)
        Attribute("optionalBool", \.optionalBool)
        Attribute("optionalString", \.optionalString)
        Attribute("optionalData", \.optionalData)
        Attribute("optionalDate", \.optionalDate)
        Attribute("optionalUUID", \.optionalUUID)
    }

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

    public init(row: Row) throws {
        id = try row[0]
        int = try row[1]
        int32 = try row[2]
        int16 = try row[3]
        double = try row[4]
        bool = try row[5]
        string = try row[6]
        data = try row[7]
        date = try row[8]
        uuid = try row[9]
        optionalInt = try row[10]
        optionalDouble = try row[11]
        optionalBool = try row[12]
        optionalString = try row[13]
        optionalData = try row[14]
        optionalDate = try row[15]
        optionalUUID = try row[16]
    }

    /// The record as a row: equal rows mean identical stored values, with Depot's value
    /// equality (bytes for strings, NaN equal to NaN).
    public var row: Row {
        var row = Row()
        encode(into: &row)
        return row
    }
}

/// A record with a string primary key, a unique attribute and an optional unique one.
public struct Account: StoredObject, Hashable {
    public var id: String
    public var owner: String
    public var nickname: String?
    public var balance: Int64

    public static let entity = Entity<Account>("Account", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("owner", \.owner, unique: true)
        Attribute("nickname", \.nickname, unique: true)
        Attribute("balance", \.balance)
    }

    public init(id: String, owner: String, nickname: String? = nil, balance: Int64 = 0) {
        self.id = id
        self.owner = owner
        self.nickname = nickname
        self.balance = balance
    }

    public init(row: Row) throws {
        id = try row[0]
        owner = try row[1]
        nickname = try row[2]
        balance = try row[3]
    }
}

/// ``CatRecord``'s entity grown additively: a new optional attribute and a new attribute
/// with a default, and an index on `name`.
public struct CatRecordV2: StoredObject, Hashable {
    public var id: Int64
    public var name: String
    public var weight: Double
    public var age: Int
    public var color: String?
    public var lives: Int

    public static let entity = Entity<CatRecordV2>("Cat", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("name", \.name, indexed: true)
        Attribute("weight", \.weight)
        Attribute("age", \.age, indexed: true)
        Attribute("color", \.color)
        Attribute("lives", \.lives, default: 9)
    }

    public init(id: Int64, name: String, weight: Double, age: Int, color: String?, lives: Int) {
        self.id = id
        self.name = name
        self.weight = weight
        self.age = age
        self.color = color
        self.lives = lives
    }

    public init(row: Row) throws {
        id = try row[0]
        name = try row[1]
        weight = try row[2]
        age = try row[3]
        color = try row[4]
        lives = try row[5]
    }
}

/// ``CatRecord``'s entity with `age` retyped to a string: an incompatible change.
public struct CatRecordRetyped: StoredObject, Hashable {
    public var id: Int64
    public var name: String
    public var weight: Double
    public var age: String

    public static let entity = Entity<CatRecordRetyped>("Cat", primaryKey: \.id) {
        Attribute("id", \.id)
        Attribute("name", \.name)
        Attribute("weight", \.weight)
        Attribute("age", \.age)
    }

    public init(row: Row) throws {
        id = try row[0]
        name = try row[1]
        weight = try row[2]
        age = try row[3]
    }
}

/// A record whose declaration is invalid (two attributes named alike).
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

    public init(row: Row) throws {
        id = try row[0]
        value = try row[1]
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

    public init(row: Row) throws {
        id = try row[0]
        label = try row[1]
    }

    public func toObject() throws -> Fragile {
        if label == "refuse-to-load" { throw Fragile.Refused() }
        return Fragile(id: id, label: label)
    }
}
