public import DepotCore
import Foundation

/// What the cross-process schema tests run in a second process (`depot-crash-writer
/// retype URL` and `rename URL`): one process changes an entity's schema while another
/// holds a handle of the old layout, and two processes run the same migration at once.
public enum CrossProcessSchema {
    /// The layout before the retyping step: `code` is text.
    @Record(name: "Gizmo")
    public struct GizmoV1: Hashable {
        /// The primary key.
        public var id: Int64
        /// The code, as text.
        public var code: String

        /// A gizmo with the given values.
        public init(id: Int64, code: String) {
            self.id = id
            self.code = code
        }
    }

    /// The layout after it: `code` is an integer.
    @Record(name: "Gizmo")
    public struct GizmoV2: Hashable {
        /// The primary key.
        public var id: Int64
        /// The code, as an integer.
        public var code: Int64

        /// A gizmo with the given values.
        public init(id: Int64, code: Int64) {
            self.id = id
            self.code = code
        }
    }

    /// The layout the renaming step starts from.
    @Record(name: "Widget")
    public struct Widget: Hashable {
        /// The primary key.
        public var id: Int64
        /// The name, which the renaming step renames to `label`.
        public var name: String

        /// A widget with the given values.
        public init(id: Int64, name: String) {
            self.id = id
            self.name = name
        }
    }

    /// The layout after the renaming step.
    @Record(name: "Widget")
    public struct RenamedWidget: Hashable {
        /// The primary key.
        public var id: Int64
        /// The renamed `name`.
        public var label: String

        /// A widget with the given values.
        public init(id: Int64, label: String) {
            self.id = id
            self.label = label
        }
    }

    /// Turns `code` into an integer (every stored code is the text of one) and registers
    /// ``GizmoV2``.
    public static func retype(_ store: any Store) async throws {
        var migrator = Migrator()
        migrator.changeType("gizmo-code-to-integer", of: "code", in: "Gizmo", to: .int64) { value in
            guard case .string(let text) = value, let number = Int64(text) else {
                throw DepotError(.conversionFailed, "Gizmo.code \(value) is not the text of an integer")
            }
            return .int(number)
        }
        try await migrator.migrate(store, registering: GizmoV2.self)
    }

    /// Renames `Widget.name` to `label` and registers ``RenamedWidget``: what two processes
    /// run at once.
    public static func rename(_ store: any Store) async throws -> [String] {
        var migrator = Migrator()
        migrator.renameAttribute("widget-name-to-label", in: "Widget", from: "name", to: "label")
        return try await migrator.migrate(store, registering: RenamedWidget.self)
    }
}
