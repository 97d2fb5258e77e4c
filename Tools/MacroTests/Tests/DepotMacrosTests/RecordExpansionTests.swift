import DepotMacrosUnderTest
import SwiftSyntaxMacroExpansion
import SwiftSyntaxMacrosGenericTestSupport
import Testing

/// The macros as the compiler sees them, with the conformances `@Record` may add.
let recordMacros: [String: MacroSpec] = [
    "Record": MacroSpec(
        type: RecordMacro.self, conformances: ["ManagedRecord", "ObjectConvertible", "ManagedConvertible", "StoredObject"]),
    "Stored": MacroSpec(type: StoredMacro.self),
    "PrimaryKey": MacroSpec(type: PrimaryKeyMacro.self),
    "NotStored": MacroSpec(type: NotStoredMacro.self),
]

/// swift-syntax's expansion check, reporting to Swift Testing.
func assertExpansion(
    _ source: String, expandedSource: String, diagnostics: [DiagnosticSpec] = [], fixedSource: String? = nil,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    assertMacroExpansion(
        source, expandedSource: expandedSource, diagnostics: diagnostics, macroSpecs: recordMacros,
        fixedSource: fixedSource,
        failureHandler: { Issue.record(Comment(rawValue: $0.message), sourceLocation: sourceLocation) })
}

@Suite("@Record expansion")
struct RecordExpansionTests {
    @Test func plainStructBecomesItsOwnObject() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var id: Int64
                var name: String
                var age: Int
            }
            """,
            expandedSource: """
            struct Cat {
                var id: Int64
                var name: String
                var age: Int
            }

            extension Cat: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                static let entity = DepotCore.Entity<Cat>("Cat", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("name", \\.name)
                    DepotCore.Attribute("age", \\.age)
                }

                static var entityName: String {
                    "Cat"
                }

                init(row: borrowing DepotCore.RecordReader<Cat>) throws {
                    self.id = try row.decode(0)
                    self.name = try row.decode(1)
                    self.age = try row.decode(2)
                }

                func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.name.storedValue())
                    row.append(try self.age.storedValue())
                }
            }
            """)
    }

    @Test func pairedRecordWithOptions() {
        assertExpansion(
            """
            @Record(name: "Cat")
            public struct CatRecord: ObjectConvertible, Hashable {
                public var id: Int64
                @Stored(.indexed) public var name: String
                @Stored(.unique, name: "nick") public var nickname: String?
                public var lives: Int = 9
                public var color: String? = nil
                @NotStored var cache: [String: Int] = [:]
                @NotStored var memo: String?
                static var count = 0
                var label: String { name }
                var observed: Int { didSet { } }
                public func toObject() -> Cat { Cat(id: id) }
            }
            """,
            expandedSource: """
            public struct CatRecord: ObjectConvertible, Hashable {
                public var id: Int64
                public var name: String
                public var nickname: String?
                public var lives: Int = 9
                public var color: String? = nil
                var cache: [String: Int] = [:]
                var memo: String?
                static var count = 0
                var label: String { name }
                var observed: Int { didSet { } }
                public func toObject() -> Cat { Cat(id: id) }
            }

            extension CatRecord: DepotCore.ManagedRecord {
                public static let entity = DepotCore.Entity<CatRecord>("Cat", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("name", \\.name, indexed: true)
                    DepotCore.Attribute("nick", \\.nickname, unique: true)
                    DepotCore.Attribute("lives", \\.lives, default: 9)
                    DepotCore.Attribute("color", \\.color)
                    DepotCore.Attribute("observed", \\.observed)
                }

                public static var entityName: String {
                    "Cat"
                }

                public init(row: borrowing DepotCore.RecordReader<CatRecord>) throws {
                    self.id = try row.decode(0)
                    self.name = try row.decode(1)
                    self.nickname = try row.decode(2)
                    self.lives = try row.decode(3)
                    self.color = try row.decode(4)
                    self.observed = try row.decode(5)
                }

                public func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.name.storedValue())
                    row.append(try self.nickname.storedValue())
                    row.append(try self.lives.storedValue())
                    row.append(try self.color.storedValue())
                    row.append(try self.observed.storedValue())
                }
            }
            """)
    }

    @Test func markedPrimaryKeyGetsAnIdentity() {
        assertExpansion(
            """
            @Record
            package struct Country {
                @PrimaryKey @Stored(name: "iso") package var code: String
                package var name: String
            }
            """,
            expandedSource: """
            package struct Country {
                package var code: String
                package var name: String
            }

            extension Country: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                package static let entity = DepotCore.Entity<Country>("Country", primaryKey: \\.code) {
                    DepotCore.Attribute("iso", \\.code)
                    DepotCore.Attribute("name", \\.name)
                }

                package static var entityName: String {
                    "Country"
                }

                /// The primary key, which makes the record `Identifiable`.
                package var id: String {
                    self.code
                }

                package init(row: borrowing DepotCore.RecordReader<Country>) throws {
                    self.code = try row.decode(0)
                    self.name = try row.decode(1)
                }

                package func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.code.storedValue())
                    row.append(try self.name.storedValue())
                }
            }
            """)
    }

    /// A public record in a module of its own (a models module): its conversions are
    /// inlinable when every stored property is a public attribute, so a fetch in another
    /// module decodes in place. `CatRecord` above keeps an internal stored property, and
    /// so plain conversions.
    @Test func publicStorageMakesTheConversionsInlinable() {
        assertExpansion(
            """
            @Record
            public struct Toy {
                public var id: Int64
                @Stored(.indexed) public var name: String
                public var label: String { name }
            }
            """,
            expandedSource: """
            public struct Toy {
                public var id: Int64
                public var name: String
                public var label: String { name }
            }

            extension Toy: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                public static let entity = DepotCore.Entity<Toy>("Toy", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("name", \\.name, indexed: true)
                }

                public static var entityName: String {
                    "Toy"
                }

                @inlinable @inline(__always) public init(row: borrowing DepotCore.RecordReader<Toy>) throws {
                    self.id = try row.decode(0)
                    self.name = try row.decode(1)
                }

                @inlinable @inline(__always) public func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.name.storedValue())
                }
            }
            """)
    }

    /// A restricted setter or a property that is not stored keeps the conversions plain:
    /// inlinable code could not set the one or initialize the other.
    @Test func restrictedStorageKeepsTheConversionsPlain() {
        assertExpansion(
            """
            @Record
            public struct Toy {
                public var id: Int64
                public private(set) var name: String
                @NotStored public var cache = 0
            }
            """,
            expandedSource: """
            public struct Toy {
                public var id: Int64
                public private(set) var name: String
                public var cache = 0
            }

            extension Toy: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                public static let entity = DepotCore.Entity<Toy>("Toy", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("name", \\.name)
                }

                public static var entityName: String {
                    "Toy"
                }

                public init(row: borrowing DepotCore.RecordReader<Toy>) throws {
                    self.id = try row.decode(0)
                    self.name = try row.decode(1)
                }

                public func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.name.storedValue())
                }
            }
            """)
    }

    @Test func declaredConformanceIsNotRepeated() {
        assertExpansion(
            """
            @Record
            struct Tag: StoredObject {
                var id: String
                var `default`: Bool
            }
            """,
            expandedSource: """
            struct Tag: StoredObject {
                var id: String
                var `default`: Bool
            }

            extension Tag {
                static let entity = DepotCore.Entity<Tag>("Tag", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("default", \\.`default`)
                }

                static var entityName: String {
                    "Tag"
                }

                init(row: borrowing DepotCore.RecordReader<Tag>) throws {
                    self.id = try row.decode(0)
                    self.`default` = try row.decode(1)
                }

                func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.`default`.storedValue())
                }
            }
            """)
    }

    @Test func referencesBecomeIndexedReferenceAttributes() {
        assertExpansion(
            """
            @Record
            struct Walk {
                var id: Int64
                @Stored(.references(Dog.self, onDelete: .cascade)) var dogID: Int64
                @Stored(.references(Walk.self), name: "previous") var previousID: Int64?
            }
            """,
            expandedSource: """
            struct Walk {
                var id: Int64
                var dogID: Int64
                var previousID: Int64?
            }

            extension Walk: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                static let entity = DepotCore.Entity<Walk>("Walk", primaryKey: \\.id) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("dogID", \\.dogID, references: Dog.self, onDelete: .cascade)
                    DepotCore.Attribute("previous", \\.previousID, references: Self.self)
                }

                static var entityName: String {
                    "Walk"
                }

                init(row: borrowing DepotCore.RecordReader<Walk>) throws {
                    self.id = try row.decode(0)
                    self.dogID = try row.decode(1)
                    self.previousID = try row.decode(2)
                }

                func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.dogID.storedValue())
                    row.append(try self.previousID.storedValue())
                }
            }
            """)
    }
}

@Suite("@Record indexes")
struct RecordIndexExpansionTests {
    @Test func indexesBecomeKeyPathsOfTheEntity() {
        assertExpansion(
            """
            @Record(indexes: [.index("species", "name"), .unique("owner", .descending("born"))])
            struct Pet {
                var id: Int64
                var species: String
                @Stored(name: "pet_name") var name: String
                var owner: Int64
                var born: Double
            }
            """,
            expandedSource: """
            struct Pet {
                var id: Int64
                var species: String
                var name: String
                var owner: Int64
                var born: Double
            }

            extension Pet: DepotCore.ManagedRecord, DepotCore.ObjectConvertible, DepotCore.ManagedConvertible, DepotCore.StoredObject {
                static let entity = DepotCore.Entity<Pet>("Pet", primaryKey: \\.id, indexes: [.index(.ascending(\\.species), .ascending(\\.name)), .unique(.ascending(\\.owner), .descending(\\.born))]) {
                    DepotCore.Attribute("id", \\.id)
                    DepotCore.Attribute("species", \\.species)
                    DepotCore.Attribute("pet_name", \\.name)
                    DepotCore.Attribute("owner", \\.owner)
                    DepotCore.Attribute("born", \\.born)
                }

                static var entityName: String {
                    "Pet"
                }

                init(row: borrowing DepotCore.RecordReader<Pet>) throws {
                    self.id = try row.decode(0)
                    self.species = try row.decode(1)
                    self.name = try row.decode(2)
                    self.owner = try row.decode(3)
                    self.born = try row.decode(4)
                }

                func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {
                    row.removeAll()
                    row.append(try self.id.storedValue())
                    row.append(try self.species.storedValue())
                    row.append(try self.name.storedValue())
                    row.append(try self.owner.storedValue())
                    row.append(try self.born.storedValue())
                }
            }
            """)
    }

    @Test func anIndexNamingNoStoredPropertyIsAnError() {
        assertExpansion(
            """
            @Record(indexes: [.index("species", "nmae")])
            struct Pet {
                var id: Int64
                var species: String
                var name: String
            }
            """,
            expandedSource: """
            struct Pet {
                var id: Int64
                var species: String
                var name: String
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "The index names 'nmae', which is not a stored property of this record (stored properties: id, species, name).",
                    line: 1, column: 37)
            ])
    }

    @Test func indexesMustBeLiterals() {
        assertExpansion(
            """
            @Record(indexes: petIndexes)
            struct Pet {
                var id: Int64
            }
            """,
            expandedSource: """
            struct Pet {
                var id: Int64
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "Declare indexes as a literal list such as [.index(\"species\", \"name\"), .unique(\"owner\", .descending(\"born\"))].",
                    line: 1, column: 18)
            ])
    }

    @Test func anAttributeTwiceInOneIndexIsAnError() {
        assertExpansion(
            """
            @Record(indexes: [.index("name", .descending("name"))])
            struct Pet {
                var id: Int64
                var name: String
            }
            """,
            expandedSource: """
            struct Pet {
                var id: Int64
                var name: String
            }
            """,
            diagnostics: [
                DiagnosticSpec(message: "The index names 'name' twice; an attribute appears once in an index.", line: 1, column: 46)
            ])
    }
}
