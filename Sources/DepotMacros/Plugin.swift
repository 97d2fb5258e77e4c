import SwiftCompilerPlugin
import SwiftSyntaxMacros

/// The compiler plugin that DepotCore's macro declarations point at.
@main
struct DepotMacrosPlugin: CompilerPlugin {
    let providingMacros: [any Macro.Type] = [
        RecordMacro.self, StoredMacro.self, PrimaryKeyMacro.self, NotStoredMacro.self,
    ]
}
