import SwiftDiagnostics
import SwiftSyntax

/// One stored attribute of a `@Record` struct, as the macro reads it from the source.
struct StoredProperty {
    /// The property's name as written, backticks included, for generated member access.
    let identifier: String
    /// The attribute's stored name: the property name, or `@Stored(name:)`.
    let storedName: String
    let type: TypeSyntax?
    /// The property's initializer, used as the attribute's default value.
    let defaultValue: ExprSyntax?
    let isIndexed: Bool
    let isUnique: Bool
    let isPrimaryKey: Bool
    let node: Syntax
    /// `@Stored(.references(Dog.self, onDelete: .cascade))`: the referenced type's
    /// expression (`Dog.self`) and the rule's expression, as written.
    var reference: (target: ExprSyntax, onDelete: ExprSyntax?)? = nil
}

/// The markers the macros recognise on a property.
struct Markers {
    var stored: AttributeSyntax?
    var primaryKey: AttributeSyntax?
    var notStored: AttributeSyntax?

    init(_ attributes: AttributeListSyntax) {
        for element in attributes {
            guard let attribute = element.as(AttributeSyntax.self) else { continue }
            switch Markers.name(of: attribute) {
            case "Stored": stored = attribute
            case "PrimaryKey": primaryKey = attribute
            case "NotStored": notStored = attribute
            default: break
            }
        }
    }

    /// The last component of an attribute's name, so `@DepotCore.Stored` is `Stored`.
    static func name(of attribute: AttributeSyntax) -> String? {
        if let identifier = attribute.attributeName.as(IdentifierTypeSyntax.self) { return identifier.name.text }
        if let member = attribute.attributeName.as(MemberTypeSyntax.self) { return member.name.text }
        return nil
    }

    /// Any marker that asks for storage (`@Stored`, `@PrimaryKey`).
    var storageMarker: AttributeSyntax? { stored ?? primaryKey }
}

/// What the macro makes of a struct: its stored attributes in declaration order, the
/// primary key, and every problem found on the way.
struct RecordModel {
    var entityName: String
    var properties: [StoredProperty] = []
    var primaryKeyIndex: Int?
    /// Set when the key is not named `id` and the struct has no `id` of its own: the macro
    /// then writes `var id: <type> { <key> }` so the record is `Identifiable` by its key.
    var idAccessorType: TypeSyntax?
    /// True when the struct converts to a separate application type (`toObject()`), so
    /// the macro must not make it its own object.
    var isPaired = false
    /// True when every stored property of the struct is a stored attribute declared plain
    /// `public` (no `@NotStored` property, no restricted setter, no `#if`): the generated
    /// conversions may then be `@inlinable`, which reads nothing else of the struct.
    var storageIsPublic = true
    var diagnostics: [Diagnostic] = []

    var hasErrors: Bool { diagnostics.contains { $0.diagMessage.severity == .error } }

    init(_ declaration: StructDeclSyntax, entityName: String) {
        self.entityName = entityName
        isPaired = declaration.inheritanceClause?.inheritedTypes.contains { Self.lastName(of: $0.type) == "ObjectConvertible" } ?? false
        var hasComputedID = false
        var storedID: (index: Int, node: Syntax)?
        var firstStored: VariableDeclSyntax?

        for member in declaration.memberBlock.members {
            if let function = member.decl.as(FunctionDeclSyntax.self), function.name.text == "toObject" {
                isPaired = true
            }
            if let conditional = member.decl.as(IfConfigDeclSyntax.self) {
                storageIsPublic = false
                checkConditional(conditional)
                continue
            }
            guard let variable = member.decl.as(VariableDeclSyntax.self) else { continue }
            let markers = Markers(variable.attributes)
            if variable.modifiers.contains(where: { $0.name.tokenKind == .keyword(.static) || $0.name.tokenKind == .keyword(.class) }) {
                // Static properties belong to the type, not to a record: never stored.
                if let marker = markers.storageMarker {
                    diagnostics.append(.error(marker, "staticStored", "A static property is not part of a record and cannot be stored; remove '\(marker.trimmedDescription)'.", fixIts: [.remove(marker, from: variable)]))
                }
                continue
            }
            if variable.modifiers.contains(where: { $0.name.tokenKind == .keyword(.lazy) }) {
                if let marker = markers.storageMarker {
                    diagnostics.append(.error(marker, "lazyStored", "A lazy property cannot be stored: a record is read whole from the store. Make it a plain 'var', or remove '\(marker.trimmedDescription)'.", fixIts: [.remove(marker, from: variable)]))
                }
                continue
            }
            if let notStored = markers.notStored, let marker = markers.storageMarker {
                diagnostics.append(.error(marker, "storedAndNotStored", "'\(marker.trimmedDescription)' and '\(notStored.trimmedDescription)' contradict each other; keep one.", fixIts: [.remove(notStored, from: variable)]))
                continue
            }
            let isLet = variable.bindingSpecifier.tokenKind == .keyword(.let)
            if markers.notStored != nil || !Self.isPlainPublic(variable.modifiers),
                variable.bindings.contains(where: { !Self.isComputed($0) })
            {
                storageIsPublic = false
            }
            let bindings = Array(variable.bindings)
            for (position, binding) in bindings.enumerated() {
                guard let pattern = binding.pattern.as(IdentifierPatternSyntax.self) else {
                    if markers.notStored == nil {
                        diagnostics.append(.error(binding.pattern, "tuplePattern", "@Record stores named properties; declare each property of '\(binding.pattern.trimmedDescription)' on its own line."))
                    }
                    continue
                }
                let identifier = pattern.identifier.text
                let name = identifier.trimmingBackticks
                // `var a, b: Int`: a binding without its own annotation takes the next one's.
                let type = binding.typeAnnotation?.type ?? bindings[(position + 1)...].lazy.compactMap { $0.typeAnnotation?.type }.first

                if Self.isComputed(binding) {
                    if let marker = markers.storageMarker {
                        diagnostics.append(.error(marker, "computedStored", "'\(name)' is a computed property, so there is nothing to store; remove '\(marker.trimmedDescription)' or make '\(name)' a stored property.", fixIts: [.remove(marker, from: variable)]))
                    }
                    if name == "id" { hasComputedID = true }
                    continue
                }
                if let notStored = markers.notStored {
                    let optionalVar = !isLet && type.map(Self.isOptional) == true
                    if binding.initializer == nil && !optionalVar {
                        diagnostics.append(.error(notStored, "notStoredWithoutValue", "'\(name)' is not stored, so it needs an initial value for records read from the store; write '= <value>' after its type."))
                    }
                    continue
                }
                if isLet, binding.initializer != nil {
                    diagnostics.append(.error(variable.bindingSpecifier, "letWithValue", "'let \(name)' has an initial value, so a record read from the store could not set it; make it 'var', or mark it '@NotStored' if it is not stored.", fixIts: [
                        FixIt(message: RecordFixIt(message: "Replace 'let' with 'var'"), changes: [.replace(oldNode: Syntax(variable.bindingSpecifier), newNode: Syntax(variable.bindingSpecifier.with(\.tokenKind, .keyword(.var))))])
                    ]))
                    continue
                }
                if let type, let what = Self.unstorableKind(type) {
                    let advice = what == "a set"
                        ? "its JSON order changes from one process to the next, so equality could not find it; store an Array"
                        : "use a type that conforms to AttributeValue"
                    diagnostics.append(.error(type, "unstorableType", "Depot cannot store \(what) ('\(type.trimmedDescription)' of '\(name)'); \(advice), or mark the property '@NotStored'."))
                    continue
                }

                var storedName = name
                var isIndexed = false
                var isUnique = false
                var reference: (target: ExprSyntax, onDelete: ExprSyntax?)?
                if let stored = markers.stored {
                    parseStoredArguments(stored, storedName: &storedName, isIndexed: &isIndexed, isUnique: &isUnique, reference: &reference)
                }
                if let problem = Self.nameProblem(storedName) {
                    let node = markers.stored.map(Syntax.init) ?? Syntax(pattern)
                    diagnostics.append(.error(node, "invalidName", "The stored name '\(storedName)' \(problem); give the attribute another name with @Stored(name: \"...\")."))
                    continue
                }
                if let earlier = properties.first(where: { $0.storedName.lowercased() == storedName.lowercased() }) {
                    diagnostics.append(.error(markers.stored.map(Syntax.init) ?? Syntax(pattern), "duplicateName", "'\(name)' is stored under the name '\(storedName)', which '\(earlier.identifier.trimmingBackticks)' already uses (names are compared without case); give one of them another name with @Stored(name: \"...\")."))
                    continue
                }
                let isPrimaryKey = markers.primaryKey != nil
                if isPrimaryKey, let keyIndex = primaryKeyIndex, let marker = markers.primaryKey {
                    diagnostics.append(.error(marker, "twoPrimaryKeys", "'\(properties[keyIndex].identifier.trimmingBackticks)' is already the primary key; a record has exactly one.", fixIts: [.remove(marker, from: variable)]))
                    continue
                }
                var defaultValue = binding.initializer?.value
                if defaultValue?.is(NilLiteralExprSyntax.self) == true || isPrimaryKey || name == "id" {
                    // nil is what a new optional attribute gets anyway; a key is never defaulted.
                    defaultValue = nil
                }
                if isPrimaryKey { primaryKeyIndex = properties.count }
                if name == "id" { storedID = (properties.count, Syntax(pattern)) }
                if firstStored == nil { firstStored = variable }
                properties.append(StoredProperty(
                    identifier: identifier, storedName: storedName, type: type, defaultValue: defaultValue,
                    isIndexed: isIndexed, isUnique: isUnique, isPrimaryKey: isPrimaryKey, node: Syntax(binding),
                    reference: reference))
            }
        }

        resolvePrimaryKey(declaration, storedID: storedID, hasComputedID: hasComputedID, firstStored: firstStored)
    }

    private mutating func resolvePrimaryKey(
        _ declaration: StructDeclSyntax, storedID: (index: Int, node: Syntax)?, hasComputedID: Bool,
        firstStored: VariableDeclSyntax?
    ) {
        if let keyIndex = primaryKeyIndex {
            let key = properties[keyIndex]
            guard key.identifier.trimmingBackticks != "id" else { return }
            if let storedID {
                diagnostics.append(.error(storedID.node, "idIsNotKey", "'\(key.identifier.trimmingBackticks)' is the primary key, so 'id' must return it (a record is Identifiable by its key); rename the stored 'id', or mark it @PrimaryKey instead."))
            } else if !hasComputedID {
                if let type = key.type {
                    idAccessorType = type
                } else {
                    diagnostics.append(.error(key.node, "keyNeedsType", "The primary key '\(key.identifier.trimmingBackticks)' needs an explicit type, so @Record can declare 'id' with it."))
                }
            }
            return
        }
        if let storedID {
            primaryKeyIndex = storedID.index
            properties[storedID.index] = properties[storedID.index].asPrimaryKey
            return
        }
        var fixIts: [FixIt] = []
        if let firstStored {
            let marker = AttributeSyntax(attributeName: IdentifierTypeSyntax(name: .identifier("PrimaryKey")), trailingTrivia: .space)
            // Move the declaration's indentation from its old first token to the marker.
            var fixed = firstStored
            fixed.leadingTrivia = []
            fixed.attributes = AttributeListSyntax([.attribute(marker)] + Array(fixed.attributes))
            fixed.leadingTrivia = firstStored.leadingTrivia
            let name = firstStored.bindings.first?.pattern.trimmedDescription ?? "it"
            fixIts.append(FixIt(message: RecordFixIt(message: "Mark '\(name)' with @PrimaryKey"), changes: [.replace(oldNode: Syntax(firstStored), newNode: Syntax(fixed))]))
        }
        diagnostics.append(.error(declaration.name, "missingPrimaryKey", "'\(declaration.name.text)' has no primary key: add a stored property 'id', or mark the key property with @PrimaryKey.", fixIts: fixIts))
    }

    private mutating func checkConditional(_ conditional: IfConfigDeclSyntax) {
        for clause in conditional.clauses {
            guard case .decls(let members) = clause.elements else { continue }
            for member in members {
                guard let variable = member.decl.as(VariableDeclSyntax.self),
                    !variable.modifiers.contains(where: { $0.name.tokenKind == .keyword(.static) }),
                    !variable.bindings.allSatisfy(Self.isComputed),
                    Markers(variable.attributes).notStored == nil
                else { continue }
                diagnostics.append(.error(variable, "conditionalProperty", "@Record cannot see stored properties inside '#if': a record's attributes must be the same in every build. Move it out of the '#if', or mark it '@NotStored'."))
            }
        }
    }

    private mutating func parseStoredArguments(
        _ attribute: AttributeSyntax, storedName: inout String, isIndexed: inout Bool, isUnique: inout Bool,
        reference: inout (target: ExprSyntax, onDelete: ExprSyntax?)?
    ) {
        guard case .argumentList(let arguments) = attribute.arguments else { return }
        for argument in arguments {
            if argument.label?.text == "name" {
                if let literal = Self.stringLiteral(argument.expression) {
                    storedName = literal
                } else {
                    diagnostics.append(.error(argument.expression, "nameNotLiteral", "The stored name must be a string literal, so it is fixed at compile time."))
                }
                continue
            }
            if let call = argument.expression.as(FunctionCallExprSyntax.self),
                call.calledExpression.as(MemberAccessExprSyntax.self)?.declName.baseName.text == "references"
            {
                // The arguments are passed on as written; the compiler checks them (and the
                // property's type against the referenced key) in the generated Attribute.
                let target = call.arguments.first(where: { $0.label == nil })?.expression
                let rule = call.arguments.first(where: { $0.label?.text == "onDelete" })?.expression
                if let target, call.arguments.count == (rule == nil ? 1 : 2) {
                    reference = (target, rule)
                } else {
                    diagnostics.append(.error(argument.expression, "invalidReference", "Write a reference as .references(Target.self) or .references(Target.self, onDelete: .cascade)."))
                }
                continue
            }
            let option = argument.expression.as(MemberAccessExprSyntax.self)?.declName.baseName.text
            switch option {
            case "indexed": isIndexed = true
            case "unique": isUnique = true
            default:
                diagnostics.append(.error(argument.expression, "unknownOption", "'\(argument.expression.trimmedDescription)' is not an option of @Stored; use .indexed, .unique, .references(Target.self, onDelete: ...) or name: \"...\"."))
            }
        }
    }
}

extension StoredProperty {
    var asPrimaryKey: StoredProperty {
        StoredProperty(
            identifier: identifier, storedName: storedName, type: type, defaultValue: nil, isIndexed: isIndexed,
            isUnique: isUnique, isPrimaryKey: true, node: node, reference: reference)
    }
}

extension RecordModel {
    static func lastName(of type: TypeSyntax) -> String? {
        if let identifier = type.as(IdentifierTypeSyntax.self) { return identifier.name.text }
        if let member = type.as(MemberTypeSyntax.self) { return member.name.text }
        return nil
    }

    /// Whether `modifiers` make a property `public` for reading and writing alike.
    static func isPlainPublic(_ modifiers: DeclModifierListSyntax) -> Bool {
        modifiers.contains { $0.name.tokenKind == .keyword(.public) && $0.detail == nil }
            && !modifiers.contains { $0.detail != nil }
    }

    /// A property with a getter (or `_read`/`_modify`) is computed; `willSet`/`didSet`
    /// alone observe a stored property.
    static func isComputed(_ binding: PatternBindingSyntax) -> Bool {
        guard let block = binding.accessorBlock else { return false }
        switch block.accessors {
        case .getter: return true
        case .accessors(let accessors):
            return accessors.contains {
                $0.accessorSpecifier.tokenKind != .keyword(.willSet) && $0.accessorSpecifier.tokenKind != .keyword(.didSet)
            }
        }
    }

    static func isOptional(_ type: TypeSyntax) -> Bool {
        if type.is(OptionalTypeSyntax.self) || type.is(ImplicitlyUnwrappedOptionalTypeSyntax.self) { return true }
        if let identifier = type.as(IdentifierTypeSyntax.self), identifier.name.text == "Optional" { return true }
        return false
    }

    /// What a type written in the source certainly is not storable as, or nil when the
    /// syntax alone cannot tell (a named type: the generated code's `AttributeValue`
    /// constraint makes the compiler check it).
    static func unstorableKind(_ type: TypeSyntax) -> String? {
        if let optional = type.as(OptionalTypeSyntax.self) { return unstorableKind(optional.wrappedType) }
        if let optional = type.as(ImplicitlyUnwrappedOptionalTypeSyntax.self) { return unstorableKind(optional.wrappedType) }
        if let attributed = type.as(AttributedTypeSyntax.self) { return unstorableKind(attributed.baseType) }
        if let tuple = type.as(TupleTypeSyntax.self) {
            if tuple.elements.count == 1, let only = tuple.elements.first, only.firstName == nil {
                return unstorableKind(only.type)
            }
            return "a tuple"
        }
        if type.is(FunctionTypeSyntax.self) { return "a function" }
        if type.is(MetatypeTypeSyntax.self) { return "a metatype" }
        if let existential = type.as(SomeOrAnyTypeSyntax.self) {
            return existential.someOrAnySpecifier.tokenKind == .keyword(.some) ? "an opaque type" : "an existential type"
        }
        if type.is(CompositionTypeSyntax.self) { return "a protocol composition" }
        // Arrays and dictionaries are stored as JSON when their elements can be (the
        // generated code's `AttributeValue` constraint makes the compiler check that).
        if let array = type.as(ArrayTypeSyntax.self) { return unstorableKind(array.element) }
        if let dictionary = type.as(DictionaryTypeSyntax.self) { return unstorableKind(dictionary.value) }
        if let identifier = type.as(IdentifierTypeSyntax.self) {
            switch identifier.name.text {
            case "Optional":
                if let arguments = identifier.genericArgumentClause?.arguments, arguments.count == 1,
                    case .type(let wrapped) = arguments.first?.argument
                {
                    return unstorableKind(wrapped)
                }
            case "ContiguousArray", "ArraySlice": return "an array slice or contiguous array (store an Array)"
            case "Set": return "a set"
            case "Any", "AnyObject": return "an existential type"
            default: break
            }
        }
        return nil
    }

    /// The rules every backend's schema check applies to names, checked here so a bad name
    /// is a compile error rather than a run-time `invalidSchema`.
    static func nameProblem(_ name: String) -> String? {
        let utf8 = Array(name.utf8)
        guard let first = utf8.first, utf8.count <= 64 else { return "must have 1 to 64 characters" }
        func isLetter(_ c: UInt8) -> Bool { (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 }
        func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }
        guard isLetter(first), utf8.allSatisfy({ isLetter($0) || isDigit($0) }) else {
            return "may contain only ASCII letters, digits and '_', and must not start with a digit"
        }
        let lowered = name.lowercased()
        if lowered.hasPrefix("depot_") || lowered.hasPrefix("sqlite_") { return "uses a reserved prefix (depot_, sqlite_)" }
        return nil
    }

    /// The value of a plain string literal (no interpolation), if that is what `expression` is.
    static func stringLiteral(_ expression: ExprSyntax) -> String? {
        guard let literal = expression.as(StringLiteralExprSyntax.self) else { return nil }
        var text = ""
        for segment in literal.segments {
            guard let plain = segment.as(StringSegmentSyntax.self) else { return nil }
            text += plain.content.text
        }
        return text
    }
}

extension String {
    var trimmingBackticks: String {
        hasPrefix("`") && hasSuffix("`") && count >= 2 ? String(dropFirst().dropLast()) : self
    }
}
