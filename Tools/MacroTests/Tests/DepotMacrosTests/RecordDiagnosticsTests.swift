import SwiftSyntaxMacrosGenericTestSupport
import Testing

/// Every mistake @Record can see in the source is a compile error at the property (with a
/// fix-it where the fix is obvious), and nothing is generated, so no second error follows.
@Suite("@Record diagnostics")
struct RecordDiagnosticsTests {
    @Test func missingPrimaryKey() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var name: String
                var age: Int
            }
            """,
            expandedSource: """
            struct Cat {
                var name: String
                var age: Int
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "'Cat' has no primary key: add a stored property 'id', or mark the key property with @PrimaryKey.",
                    line: 2, column: 8, fixIts: [FixItSpec(message: "Mark 'name' with @PrimaryKey")])
            ],
            fixedSource: """
            @Record
            struct Cat {
                @PrimaryKey var name: String
                var age: Int
            }
            """)
    }

    @Test func computedPropertyMarkedForStorage() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var id: Int64
                @Stored(.indexed) var label: String { "cat" }
            }
            """,
            expandedSource: """
            struct Cat {
                var id: Int64
                var label: String { "cat" }
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "'label' is a computed property, so there is nothing to store; remove '@Stored(.indexed)' or make 'label' a stored property.",
                    line: 4, column: 5, fixIts: [FixItSpec(message: "Remove '@Stored(.indexed)'")])
            ],
            fixedSource: """
            @Record
            struct Cat {
                var id: Int64
                var label: String { "cat" }
            }
            """)
    }

    @Test func unstorableTypes() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var id: Int64
                var position: (x: Int, y: Int)
                var onChange: @Sendable () -> Void
                var tags: Set<String>?
                var owner: any Sendable
                var weight: (Double)
            }
            """,
            expandedSource: """
            struct Cat {
                var id: Int64
                var position: (x: Int, y: Int)
                var onChange: @Sendable () -> Void
                var tags: Set<String>?
                var owner: any Sendable
                var weight: (Double)
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "Depot cannot store a tuple ('(x: Int, y: Int)' of 'position'); use a type that conforms to AttributeValue, or mark the property '@NotStored'.",
                    line: 4, column: 19),
                DiagnosticSpec(
                    message: "Depot cannot store a function ('@Sendable () -> Void' of 'onChange'); use a type that conforms to AttributeValue, or mark the property '@NotStored'.",
                    line: 5, column: 19),
                DiagnosticSpec(
                    message: "Depot cannot store a set ('Set<String>?' of 'tags'); its JSON order changes from one process to the next, so equality could not find it; store an Array, or mark the property '@NotStored'.",
                    line: 6, column: 15),
                DiagnosticSpec(
                    message: "Depot cannot store an existential type ('any Sendable' of 'owner'); use a type that conforms to AttributeValue, or mark the property '@NotStored'.",
                    line: 7, column: 16),
            ])
    }

    @Test func notAStruct() {
        assertExpansion(
            """
            @Record
            final class Cat {
                var id: Int64 = 0
            }
            """,
            expandedSource: """
            final class Cat {
                var id: Int64 = 0
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "@Record applies to a struct: a record is a value that a store copies in and out.",
                    line: 2, column: 7, fixIts: [FixItSpec(message: "Replace 'class' with 'struct'")])
            ],
            fixedSource: """
            @Record
            final struct Cat {
                var id: Int64 = 0
            }
            """)
        assertExpansion(
            """
            @Record
            enum Mood: String {
                case calm
            }
            """,
            expandedSource: """
            enum Mood: String {
                case calm
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "@Record applies to a struct: a record is a value that a store copies in and out. To store an enum as an attribute, give it a String or integer raw value and conform it to AttributeValue.",
                    line: 2, column: 1)
            ])
    }

    @Test func letWithInitialValue() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var id: Int64
                let lives: Int = 9
            }
            """,
            expandedSource: """
            struct Cat {
                var id: Int64
                let lives: Int = 9
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "'let lives' has an initial value, so a record read from the store could not set it; make it 'var', or mark it '@NotStored' if it is not stored.",
                    line: 4, column: 5, fixIts: [FixItSpec(message: "Replace 'let' with 'var'")])
            ],
            fixedSource: """
            @Record
            struct Cat {
                var id: Int64
                var lives: Int = 9
            }
            """)
    }

    @Test func staticPropertiesAreIgnoredAndCannotBeMarked() {
        assertExpansion(
            """
            @Record
            struct Cat {
                static let shared = 1
                var id: Int64
                @Stored static var count = 0
            }
            """,
            expandedSource: """
            struct Cat {
                static let shared = 1
                var id: Int64
                static var count = 0
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "A static property is not part of a record and cannot be stored; remove '@Stored'.",
                    line: 5, column: 5, fixIts: [FixItSpec(message: "Remove '@Stored'")])
            ],
            fixedSource: """
            @Record
            struct Cat {
                static let shared = 1
                var id: Int64
                static var count = 0
            }
            """)
    }

    @Test func notStoredNeedsAValue() {
        assertExpansion(
            """
            @Record
            struct Cat {
                var id: Int64
                @NotStored var cache: Int
            }
            """,
            expandedSource: """
            struct Cat {
                var id: Int64
                var cache: Int
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "'cache' is not stored, so it needs an initial value for records read from the store; write '= <value>' after its type.",
                    line: 4, column: 5)
            ])
    }

    @Test func keyAndNameProblems() {
        assertExpansion(
            """
            @Record
            struct Cat {
                @PrimaryKey var code: String
                @PrimaryKey var other: String
                @Stored(name: "Code") var alias: String
                @Stored(name: "sqlite_age") var age: Int
                @Stored(.fast) var weight: Double
            }
            """,
            expandedSource: """
            struct Cat {
                var code: String
                var other: String
                var alias: String
                var age: Int
                var weight: Double
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "'code' is already the primary key; a record has exactly one.", line: 4, column: 5,
                    fixIts: [FixItSpec(message: "Remove '@PrimaryKey'")]),
                DiagnosticSpec(
                    message: "'alias' is stored under the name 'Code', which 'code' already uses (names are compared without case); give one of them another name with @Stored(name: \"...\").",
                    line: 5, column: 5),
                DiagnosticSpec(
                    message: "The stored name 'sqlite_age' uses a reserved prefix (depot_, sqlite_); give the attribute another name with @Stored(name: \"...\").",
                    line: 6, column: 5),
                DiagnosticSpec(
                    message: "'.fast' is not an option of @Stored; use .indexed, .unique, .references(Target.self, onDelete: ...) or name: \"...\".",
                    line: 7, column: 13),
            ])
    }

    @Test func malformedReference() {
        assertExpansion(
            """
            @Record
            struct Walk {
                var id: Int64
                @Stored(.references(onDelete: .cascade)) var dogID: Int64
            }
            """,
            expandedSource: """
            struct Walk {
                var id: Int64
                var dogID: Int64
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "Write a reference as .references(Target.self) or .references(Target.self, onDelete: .cascade).",
                    line: 4, column: 13)
            ])
    }

    @Test func genericStruct() {
        assertExpansion(
            """
            @Record
            struct Box<Value> {
                var id: Int64
            }
            """,
            expandedSource: """
            struct Box<Value> {
                var id: Int64
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "@Record cannot be applied to a generic struct: its entity is one static schema, and a generic type cannot have static stored properties. Declare a concrete struct per stored type.",
                    line: 2, column: 11)
            ])
    }

    @Test func markerOutsideRecordWarns() {
        assertExpansion(
            """
            struct Plain {
                @Stored(.indexed) var name: String
            }
            """,
            expandedSource: """
            struct Plain {
                var name: String
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "@Stored has an effect only on a property of a @Record struct.", line: 2, column: 5,
                    severity: .warning)
            ])
    }
}
