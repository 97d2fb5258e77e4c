public import DepotCore

/// A violated expectation in a conformance check.
public struct ConformanceFailure: Error, CustomStringConvertible {
    /// What was expected and what happened.
    public let message: String
    /// The source file of the expectation.
    public let file: String
    /// The line of the expectation.
    public let line: Int

    /// `file:line: message`.
    public var description: String { "\(file):\(line): \(message)" }
}

/// One behaviour every backend must share, runnable against any `Store`.
public struct ConformanceCheck: Sendable, CustomStringConvertible {
    /// A short name, used as the test case's name.
    public let name: String
    let body: @Sendable (any Store) async throws -> Void

    /// A check named `name` that runs `body` against a store.
    public init(_ name: String, _ body: @escaping @Sendable (any Store) async throws -> Void) {
        self.name = name
        self.body = body
    }

    /// Runs the check against a fresh, empty store.
    ///
    /// - Throws: ``ConformanceFailure`` describing the first violated expectation, or the
    ///   unexpected error the store threw.
    public func run(on store: any Store) async throws {
        try await body(store)
    }

    /// Runs the check against a fresh store, then closes the store whether the check passed
    /// or not.
    public func runAndClose(_ store: any Store) async throws {
        do {
            try await body(store)
        } catch {
            await store.close()
            throw error
        }
        await store.close()
    }

    /// The check's ``name``.
    public var description: String { name }
}

/// The conformance suite: the semantics every Depot backend shares, as a list of checks.
///
/// Run it from Swift Testing with one test case per check, each on a fresh store:
///
/// ```swift
/// @Test(arguments: ConformanceSuite.checks)
/// func conformance(_ check: ConformanceCheck) async throws {
///     try await check.runAndClose(try makeStore())
/// }
/// ```
///
/// A third-party backend passes the same suite to show it behaves like the others.
public enum ConformanceSuite {
    /// Every check.
    public static let checks: [ConformanceCheck] =
        CRUDChecks.all + PredicateChecks.all + OrderChecks.all + TransactionChecks.all + ErrorChecks.all
        + SchemaChecks.all + ChangeFeedChecks.all + LiveChecks.all + RobustnessChecks.all + EnumChecks.all
        + MappingChecks.all + CodableChecks.all + AggregateChecks.all + RelationshipChecks.all + JSONChecks.all + MigrationChecks.all + WriteAnswerChecks.all
        + CompositeIndexChecks.all + IndexChecks.all + UnionChecks.all + ClosingChecks.all
}

// MARK: - Expectations

func expect(
    _ condition: Bool, _ message: @autoclosure () -> String, file: String = #fileID, line: Int = #line
) throws {
    if !condition { throw ConformanceFailure(message: message(), file: file, line: line) }
}

func expectEqual<T: Equatable>(
    _ actual: T, _ expected: T, _ what: @autoclosure () -> String = "", file: String = #fileID, line: Int = #line
) throws {
    if actual != expected {
        let label = what()
        throw ConformanceFailure(
            message: "\(label.isEmpty ? "" : label + ": ")expected \(expected), got \(actual)", file: file, line: line)
    }
}

/// Expects `body` to throw `expected`'s code with its message, word for word.
func expectError<T>(
    _ expected: DepotError, _ what: String, file: String = #fileID, line: Int = #line,
    _ body: () async throws -> T
) async throws {
    do {
        let value = try await body()
        throw ConformanceFailure(message: "\(what): expected \(expected), got success \(value)", file: file, line: line)
    } catch let error as DepotError {
        if error.code != expected.code || error.message != expected.message {
            throw ConformanceFailure(message: "\(what): expected \(expected), got \(error)", file: file, line: line)
        }
    } catch let failure as ConformanceFailure {
        throw failure
    } catch {
        throw ConformanceFailure(message: "\(what): expected \(expected), got \(type(of: error)): \(error)", file: file, line: line)
    }
}

/// Expects `body` to throw a ``DepotError`` with `code` (and, when `containing` is given, a
/// message that contains it).
func expectError<T>(
    _ code: DepotError.Code, containing text: String? = nil, _ what: String, file: String = #fileID, line: Int = #line,
    _ body: () async throws -> T
) async throws {
    do {
        let value = try await body()
        throw ConformanceFailure(message: "\(what): expected DepotError.\(code), got success \(value)", file: file, line: line)
    } catch let error as DepotError {
        if error.code != code {
            throw ConformanceFailure(message: "\(what): expected DepotError.\(code), got \(error)", file: file, line: line)
        }
        if error.message.isEmpty {
            throw ConformanceFailure(message: "\(what): the error has no message", file: file, line: line)
        }
        if let text, !error.message.contains(text) {
            throw ConformanceFailure(message: "\(what): expected a message containing \"\(text)\", got \(error)", file: file, line: line)
        }
    } catch let failure as ConformanceFailure {
        throw failure
    } catch {
        throw ConformanceFailure(message: "\(what): expected DepotError.\(code), got \(type(of: error)): \(error)", file: file, line: line)
    }
}

typealias Cats = Controller<Cat, CatRecord>
typealias Samples = Controller<Sample, Sample>
typealias Accounts = Controller<Account, Account>

extension Cat {
    /// A small, fixed set of cats with ties (equal ages and weights, names that differ by
    /// case and by non-ASCII bytes), for predicate and order checks.
    public static let fixtures: [Cat] = fixtureCats
}

/// A small, fixed set of cats with ties, for predicate and order checks.
let fixtureCats: [Cat] = [
    Cat(id: 5, name: "Tom", weight: 4.5, age: 3),
    Cat(id: 2, name: "Felix", weight: 3.25, age: 7),
    Cat(id: 9, name: "tom", weight: 5, age: 3),
    Cat(id: 1, name: "Garfield", weight: 9.75, age: 12),
    Cat(id: 7, name: "Éclair", weight: 2.5, age: 1),
    Cat(id: 3, name: "Zed", weight: 4.5, age: 7),
    Cat(id: 8, name: "Ab", weight: 6, age: 15),
    Cat(id: 4, name: "", weight: 0, age: 0),
    Cat(id: 6, name: "Tomasz", weight: 4.5, age: 12),
    Cat(id: 10, name: "A", weight: -1.5, age: 7),
]

func seededCats(_ store: any Store) async throws -> Cats {
    let cats = Cats(store: store)
    try await cats.save(fixtureCats)
    return cats
}

/// Byte-order comparison of strings, written independently of ``Value``.
func utf8Less(_ a: String, _ b: String) -> Bool {
    Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8))
}
