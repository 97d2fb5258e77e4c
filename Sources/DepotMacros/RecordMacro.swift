import SwiftDiagnostics
public import SwiftSyntax
import SwiftSyntaxBuilder
public import SwiftSyntaxMacros

/// `@Record`: makes a struct a managed record.
///
/// Everything is generated in an extension, not in the struct's body, so the struct keeps
/// its memberwise initializer (an `init` in the body would suppress it).
public struct RecordMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        guard let record = declaration.as(StructDeclSyntax.self) else {
            context.diagnose(notAStruct(declaration))
            return []
        }
        if let generics = record.genericParameterClause {
            context.diagnose(.error(generics, "genericRecord", "@Record cannot be applied to a generic struct: its entity is one static schema, and a generic type cannot have static stored properties. Declare a concrete struct per stored type."))
            return []
        }
        var entityName = record.name.text.trimmingBackticks
        var argumentProblem = false
        var indexesArgument: ExprSyntax?
        if case .argumentList(let arguments) = node.arguments {
            for argument in arguments where argument.label?.text == "name" {
                if let literal = RecordModel.stringLiteral(argument.expression) {
                    entityName = literal
                } else {
                    argumentProblem = true
                    context.diagnose(.error(argument.expression, "nameNotLiteral", "The entity name must be a string literal, so it is fixed at compile time."))
                }
            }
            indexesArgument = arguments.first { $0.label?.text == "indexes" }?.expression
        }
        if !argumentProblem, let problem = RecordModel.nameProblem(entityName) {
            argumentProblem = true
            context.diagnose(.error(node, "invalidName", "The entity name '\(entityName)' \(problem); give the entity another name with @Record(name: \"...\")."))
        }

        let model = RecordModel(record, entityName: entityName)
        for diagnostic in model.diagnostics { context.diagnose(diagnostic) }
        var indexes: [IndexDeclaration] = []
        if let indexesArgument {
            let parsed = IndexDeclaration.parse(indexesArgument, properties: model.properties)
            indexes = parsed.declarations
            if let problem = parsed.problem {
                argumentProblem = true
                context.diagnose(problem)
            }
        }
        guard !model.hasErrors, !argumentProblem, let keyIndex = model.primaryKeyIndex else { return [] }

        // Conform only to what the type does not conform to already (the compiler passes
        // those), and not to what its own declaration names.
        var declared = Set(record.inheritanceClause?.inheritedTypes.compactMap { RecordModel.lastName(of: $0.type) } ?? [])
        if declared.contains("StoredObject") { declared.insert("ManagedRecord") }
        let missing = Set(protocols.compactMap { RecordModel.lastName(of: $0) }).subtracting(declared)
        // The self form names every protocol StoredObject refines: a conformance that is
        // only implied by a refinement, in a macro-made extension, is not registered by the
        // compiler (6.3), and the record would not be a ManagedRecord.
        let wanted = model.isPaired ? ["ManagedRecord"] : ["ManagedRecord", "ObjectConvertible", "ManagedConvertible", "StoredObject"]
        let adopted = declared.contains("StoredObject") ? [] : wanted.filter(missing.contains)
        let conformance = adopted.isEmpty ? nil : adopted.map { "DepotCore." + $0 }.joined(separator: ", ")

        let access = accessModifier(record.modifiers)
        // A public record whose stored properties are all public attributes gets its
        // conversions inlinable: a fetch is specialized in the module that calls it, and
        // when the record lives in another module (a models module, a library) the decoding
        // then runs in the fetch's loop with the record's fields in registers, instead of a
        // call per record that returns the record through memory.
        let inlinable = access == "public " && model.storageIsPublic ? "@inlinable @inline(__always) " : ""
        let typeName = type.trimmedDescription
        let key = model.properties[keyIndex]

        var lines: [String] = []
        lines.append("extension \(typeName)\(conformance.map { ": " + $0 } ?? "") {")
        let indexList = indexes.isEmpty ? "" : ", indexes: [" + indexes.map(\.source).joined(separator: ", ") + "]"
        lines.append("    \(access)static let entity = DepotCore.Entity<\(typeName)>(\(literal(model.entityName)), primaryKey: \\.\(key.identifier)\(indexList)) {")
        for property in model.properties {
            var arguments = ["\(literal(property.storedName))", "\\.\(property.identifier)"]
            if let reference = property.reference {
                // The extension is at file scope, where a record nested in another type is
                // not found by its own name: a record referring to itself says `Self`.
                var target = reference.target.trimmedDescription
                if target == "\(record.name.text).self" { target = "Self.self" }
                arguments.append("references: \(target)")
                if let rule = reference.onDelete { arguments.append("onDelete: \(rule.trimmedDescription)") }
            }
            if property.isIndexed && !property.isUnique && property.reference == nil { arguments.append("indexed: true") }
            if property.isUnique { arguments.append("unique: true") }
            if let value = property.defaultValue { arguments.append("default: \(value.trimmedDescription)") }
            lines.append("        DepotCore.Attribute(\(arguments.joined(separator: ", ")))")
        }
        lines.append("    }")
        lines.append("")
        lines.append("    \(access)static var entityName: String { \(literal(model.entityName)) }")
        if let idType = model.idAccessorType {
            lines.append("")
            lines.append("    /// The primary key, which makes the record `Identifiable`.")
            lines.append("    \(access)var id: \(idType.trimmedDescription) { self.\(key.identifier) }")
        }
        lines.append("")
        // Positions, not key paths: the entity above is generated from the same list, so
        // they cannot drift, and a position costs no key-path lookup per record.
        lines.append("    \(inlinable)\(access)init(row: borrowing DepotCore.RecordReader<\(typeName)>) throws {")
        for (position, property) in model.properties.enumerated() {
            lines.append("        self.\(property.identifier) = try row.decode(\(position))")
        }
        lines.append("    }")
        lines.append("")
        lines.append("    \(inlinable)\(access)func encode(into row: inout DepotCore.Row) throws(DepotCore.DepotError) {")
        lines.append("        row.removeAll()")
        for property in model.properties {
            lines.append("        row.append(try self.\(property.identifier).storedValue())")
        }
        lines.append("    }")
        lines.append("}")

        let source = DeclSyntax(stringLiteral: lines.joined(separator: "\n"))
        guard let extensionDecl = source.as(ExtensionDeclSyntax.self) else { return [] }
        return [extensionDecl]
    }

    /// Members of a public record must be public to witness the protocol requirements.
    static func accessModifier(_ modifiers: DeclModifierListSyntax) -> String {
        for modifier in modifiers {
            switch modifier.name.tokenKind {
            case .keyword(.public), .keyword(.open): return "public "
            case .keyword(.package): return "package "
            default: continue
            }
        }
        return ""
    }

    static func literal(_ text: String) -> String {
        // Names passed the identifier check (ASCII letters, digits, '_'), so no escaping.
        "\"\(text)\""
    }

    static func notAStruct(_ declaration: some DeclGroupSyntax) -> Diagnostic {
        let message = "@Record applies to a struct: a record is a value that a store copies in and out."
        if let type = declaration.as(ClassDeclSyntax.self) {
            let fix = FixIt(
                message: RecordFixIt(message: "Replace 'class' with 'struct'"),
                changes: [.replace(oldNode: Syntax(type.classKeyword), newNode: Syntax(type.classKeyword.with(\.tokenKind, .keyword(.struct))))])
            return .error(type.classKeyword, "notAStruct", message, fixIts: [fix])
        }
        if let type = declaration.as(EnumDeclSyntax.self) {
            return .error(type.enumKeyword, "notAStruct", message + " To store an enum as an attribute, give it a String or integer raw value and conform it to AttributeValue.")
        }
        if let type = declaration.as(ActorDeclSyntax.self) { return .error(type.actorKeyword, "notAStruct", message) }
        if let type = declaration.as(ProtocolDeclSyntax.self) { return .error(type.protocolKeyword, "notAStruct", message) }
        if let type = declaration.as(ExtensionDeclSyntax.self) {
            return .error(type.extensionKeyword, "notAStruct", message + " Put @Record on the struct's own declaration.")
        }
        return .error(declaration, "notAStruct", message)
    }
}

/// One entry of `@Record(indexes: [.index("species", .descending("born"))])`, read from the
/// source: the properties it names, each with its direction.
struct IndexDeclaration {
    var isUnique: Bool
    var components: [(identifier: String, isDescending: Bool)]

    /// The entry as the generated entity declares it, with key paths, so the compiler checks
    /// the properties again.
    var source: String {
        let keys = components.map { ".\($0.isDescending ? "descending" : "ascending")(\\.\($0.identifier))" }
        return ".\(isUnique ? "unique" : "index")(\(keys.joined(separator: ", ")))"
    }

    /// The entries of the `indexes:` argument. Names must be string literals naming stored
    /// properties (by the property's name or its stored name), so the index is fixed at
    /// compile time and a typo is an error there, not at the first open.
    static func parse(_ expression: ExprSyntax, properties: [StoredProperty]) -> (declarations: [IndexDeclaration], problem: Diagnostic?) {
        let shape = "Declare indexes as a literal list such as [.index(\"species\", \"name\"), .unique(\"owner\", .descending(\"born\"))]."
        guard let array = expression.as(ArrayExprSyntax.self) else {
            return ([], Diagnostic.error(expression, "indexesNotLiteral", shape))
        }
        var result: [IndexDeclaration] = []
        for element in array.elements {
            guard let call = element.expression.as(FunctionCallExprSyntax.self),
                let member = call.calledExpression.as(MemberAccessExprSyntax.self),
                ["index", "unique"].contains(member.declName.baseName.text)
            else {
                return ([], Diagnostic.error(element.expression, "indexesNotLiteral", shape))
            }
            var declaration = IndexDeclaration(isUnique: member.declName.baseName.text == "unique", components: [])
            for argument in call.arguments {
                var nameExpression = argument.expression
                var isDescending = false
                if let inner = argument.expression.as(FunctionCallExprSyntax.self),
                    let direction = inner.calledExpression.as(MemberAccessExprSyntax.self)?.declName.baseName.text,
                    ["ascending", "descending"].contains(direction), inner.arguments.count == 1, let first = inner.arguments.first
                {
                    isDescending = direction == "descending"
                    nameExpression = first.expression
                }
                guard let name = RecordModel.stringLiteral(nameExpression) else {
                    return ([], Diagnostic.error(argument.expression, "indexesNotLiteral", shape))
                }
                guard let property = properties.first(where: { $0.identifier.trimmingBackticks == name })
                    ?? properties.first(where: { $0.storedName == name })
                else {
                    let known = properties.map { $0.identifier.trimmingBackticks }.joined(separator: ", ")
                    return ([], Diagnostic.error(nameExpression, "unknownIndexAttribute", "The index names '\(name)', which is not a stored property of this record (stored properties: \(known))."))
                }
                if declaration.components.contains(where: { $0.identifier == property.identifier }) {
                    return ([], Diagnostic.error(nameExpression, "duplicateIndexAttribute", "The index names '\(name)' twice; an attribute appears once in an index."))
                }
                declaration.components.append((property.identifier, isDescending))
            }
            if declaration.components.isEmpty {
                return ([], Diagnostic.error(element.expression, "emptyIndex", "An index needs at least one attribute."))
            }
            result.append(declaration)
        }
        return (result, nil)
    }
}

/// The property markers carry options for `@Record` to read; they expand to nothing. Used
/// outside a `@Record` struct they would silently do nothing, so they warn there.
protocol PropertyMarkerMacro: PeerMacro {
    static var markerName: String { get }
}

extension PropertyMarkerMacro {
    public static func expansion(
        of node: AttributeSyntax, providingPeersOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        if let enclosing = context.lexicalContext.first {
            let insideRecord = enclosing.as(StructDeclSyntax.self)?.attributes.contains {
                $0.as(AttributeSyntax.self).flatMap(Markers.name(of:)) == "Record"
            } ?? false
            if !insideRecord {
                context.diagnose(.warning(node, "markerOutsideRecord", "@\(markerName) has an effect only on a property of a @Record struct."))
            }
        }
        return []
    }
}

/// `@Stored(.indexed, .unique, name:)`.
public struct StoredMacro: PropertyMarkerMacro {
    static let markerName = "Stored"
}

/// `@PrimaryKey`.
public struct PrimaryKeyMacro: PropertyMarkerMacro {
    static let markerName = "PrimaryKey"
}

/// `@NotStored`.
public struct NotStoredMacro: PropertyMarkerMacro {
    static let markerName = "NotStored"
}
