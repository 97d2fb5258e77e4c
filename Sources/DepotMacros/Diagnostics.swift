import SwiftDiagnostics
import SwiftSyntax

/// A diagnostic of the record macros; the id is stable so tests and tools can match it.
struct RecordMessage: DiagnosticMessage {
    let id: String
    let message: String
    let severity: DiagnosticSeverity

    var diagnosticID: MessageID { MessageID(domain: "DepotMacros", id: id) }

    static func error(_ id: String, _ message: String) -> RecordMessage {
        RecordMessage(id: id, message: message, severity: .error)
    }

    static func warning(_ id: String, _ message: String) -> RecordMessage {
        RecordMessage(id: id, message: message, severity: .warning)
    }
}

struct RecordFixIt: FixItMessage {
    let message: String
    var fixItID: MessageID { MessageID(domain: "DepotMacros", id: message) }
}

extension Diagnostic {
    static func error(
        _ node: some SyntaxProtocol, _ id: String, _ message: String, fixIts: [FixIt] = []
    ) -> Diagnostic {
        Diagnostic(node: Syntax(node), message: RecordMessage.error(id, message), fixIts: fixIts)
    }

    static func warning(
        _ node: some SyntaxProtocol, _ id: String, _ message: String, fixIts: [FixIt] = []
    ) -> Diagnostic {
        Diagnostic(node: Syntax(node), message: RecordMessage.warning(id, message), fixIts: fixIts)
    }
}

extension FixIt {
    /// Removes one attribute from a property declaration, keeping the declaration's own
    /// leading trivia (its indentation and doc comment) in place.
    static func remove(_ attribute: AttributeSyntax, from declaration: VariableDeclSyntax) -> FixIt {
        let kept = declaration.attributes.filter { $0.as(AttributeSyntax.self) != attribute }
        var fixed = declaration.with(\.attributes, kept)
        fixed.leadingTrivia = declaration.leadingTrivia
        return FixIt(
            message: RecordFixIt(message: "Remove '\(attribute.trimmedDescription)'"),
            changes: [.replace(oldNode: Syntax(declaration), newNode: Syntax(fixed))])
    }
}
