// swift-tools-version: 6.1
import CompilerPluginSupport
import PackageDescription

// Every target is compiled in Swift 6 language mode (the default for tools 6.x) with
// these settings, applied in one loop at the end so no target can drift.
var sharedSettings: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
]
// DEPOT_WARNINGS_AS_ERRORS=1 (set by .ci/run and `make warnings`) turns every warning in
// Depot's own targets into an error. Only this package's targets get the flag, never its
// dependencies (their warnings are not ours to fix). It is off by default: SwiftPM refuses
// unsafe flags in a package that others depend on by version, so the flag must never be in
// the manifest as an application sees it.
if Context.environment["DEPOT_WARNINGS_AS_ERRORS"] == "1" {
    sharedSettings.append(.unsafeFlags(["-warnings-as-errors"]))
}

// DEPOT_MACRO_PLUGIN=<path of a built DepotMacros-tool> (set by the Makefile for its
// release, Thread Sanitizer and fuzzing builds, to the debug build's plugin): Depot's targets
// load that plugin for @Record instead of having SwiftPM build the macro target. Such a build
// otherwise compiles swift-syntax optimized or instrumented for the plugin, although the
// plugin only expands source at compile time and nothing of it is linked into Depot: the
// expansions, and so the built code, are the same. Like the flag above, never set for a
// package that others depend on by version.
let macroPlugin = Context.environment["DEPOT_MACRO_PLUGIN"].flatMap { $0.isEmpty ? nil : $0 }
if let macroPlugin {
    sharedSettings.append(.unsafeFlags(["-Xfrontend", "-load-plugin-executable", "-Xfrontend", "\(macroPlugin)#DepotMacros"]))
}

let package = Package(
    name: "Depot",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Depot", targets: ["Depot"]),
        .library(name: "DepotCore", targets: ["DepotCore"]),
        .library(name: "DepotSQLite", targets: ["DepotSQLite"]),
        .library(name: "DepotLMDB", targets: ["DepotLMDB"]),
        .library(name: "DepotPostgres", targets: ["DepotPostgres"]),
        .library(name: "DepotServiceLifecycle", targets: ["DepotServiceLifecycle"]),
        .library(name: "DepotCommands", targets: ["DepotCommands"]),
        .library(name: "DepotTesting", targets: ["DepotTesting"]),
        .executable(name: "depot", targets: ["depot"]),
    ],
    // PostgreSQL is opt-in: the `Depot` umbrella links libpq (and opens `postgres://` URLs)
    // only with this trait on, so an application on SQLite or LMDB neither links libpq nor
    // needs its headers to build. The DepotPostgres product itself works either way.
    traits: [
        .trait(
            name: "PostgreSQL",
            description: "The PostgreSQL backend in the Depot umbrella: postgres:// URLs open a PostgresStore (links libpq)."),
    ],
    dependencies: [
        // NIOLockedValueBox: a pthread-based lock that Thread Sanitizer understands (the
        // standard library's Mutex uses raw futexes on Linux, which TSan cannot see).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // TreeDictionary (HashTreeCollections): MemoryStore's unique-value maps, persistent
        // hash tries, so a commit copies only the changed paths while readers hold snapshots.
        // Its rows are in a B+ tree of its own (RowTree.swift).
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        // 1.14: Logger.current and withLogger, the task-local logger Depot logs a call to.
        .package(url: "https://github.com/apple/swift-log", from: "1.14.0"),
        // Metrics and spans, off unless a store is given a StoreTelemetry.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.8.0"),
        // Property-based differential tests (DepotReliabilityTests): random records and
        // requests checked against the memory reference, with shrinking.
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
        // `make docs`: builds the DocC catalogues, warnings (broken links) failing the build.
        // A command plugin only: nothing of it is linked into Depot.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
        // The @Record macro. Its major version follows the toolchain (603 = Swift 6.3).
        .package(url: "https://github.com/swiftlang/swift-syntax.git", from: "603.0.1"),
    ],
    targets: [
        .target(
            name: "DepotCore",
            dependencies: [
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "HashTreeCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ] + (macroPlugin == nil ? ["DepotMacros"] : [])),
        // The compiler plugin behind @Record and its property markers (declared in DepotCore).
        .macro(
            name: "DepotMacros",
            dependencies: [
                .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxBuilder", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftDiagnostics", package: "swift-syntax"),
                .product(name: "SwiftCompilerPlugin", package: "swift-syntax"),
            ]),
        // What the two SQL backends share: the query compiler over a dialect each.
        .target(name: "DepotSQL", dependencies: ["DepotCore"]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .target(
            name: "DepotSQLite",
            dependencies: [
                "DepotCore", "DepotSQL", "CSQLite", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        .systemLibrary(name: "CLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .target(
            name: "DepotLMDB",
            dependencies: [
                "DepotCore", "CLMDB", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        // libpq, PostgreSQL's C client: blocking calls on the store's own threads, no package
        // to build (see DepotPostgres' documentation for the choice).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(
            name: "DepotPostgres",
            dependencies: [
                "DepotCore", "DepotSQL", "CLibPQ", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
        .target(
            name: "Depot",
            dependencies: [
                "DepotCore", "DepotSQLite", "DepotLMDB", .product(name: "Logging", package: "swift-log"),
                .target(name: "DepotPostgres", condition: .when(traits: ["PostgreSQL"])),
                .product(name: "Configuration", package: "swift-configuration"),
            ]),
        .target(
            name: "DepotServiceLifecycle",
            dependencies: ["DepotCore", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]),
        .target(name: "DepotTesting", dependencies: ["DepotCore", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        .testTarget(
            name: "DepotCoreTests",
            dependencies: ["DepotCore", "DepotTesting", .product(name: "PropertyBased", package: "swift-property-based")]),
        // A backend written outside Depot: a sorted-array engine (the one "Writing a backend"
        // walks through) under EngineStore, through the whole conformance suite. It imports
        // the public products only, with plain imports; Examples/SortedArrayEngine compiles
        // the same file in a package of its own, where nothing `package` is in reach.
        .testTarget(name: "OutsideEngineTests", dependencies: ["DepotCore", "DepotTesting"]),
        .testTarget(
            name: "DepotSQLiteTests",
            dependencies: [
                "DepotSQLite", "DepotTesting", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]),
        // The @Record macro's expansion tests are a package of their own (Tools/MacroTests):
        // a test target here that depended on the macro target would move every test target,
        // and a second copy of Depot and its dependencies, into the host build.
        .testTarget(
            name: "DepotPostgresTests",
            dependencies: [
                "DepotPostgres", "DepotTesting", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]),
        .testTarget(
            name: "DepotLMDBTests",
            dependencies: ["DepotLMDB", "DepotTesting", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        .testTarget(
            name: "DepotTests",
            dependencies: [
                "Depot", "DepotTesting", "DepotSQLite", "DepotLMDB", "DepotCommands",
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]),
        // A `migrate` command for an application's own executable (its steps are its code).
        .target(
            name: "DepotCommands",
            dependencies: ["Depot", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "depot",
            dependencies: ["Depot", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .testTarget(
            name: "DepotReliabilityTests",
            dependencies: [
                "Depot", "DepotTesting", .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            exclude: ["FaultShim"]),
        .testTarget(
            name: "DepotServiceLifecycleTests",
            dependencies: [
                "DepotServiceLifecycle", "DepotTesting", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]),
    ]
)

// With a prebuilt plugin the macro target goes too: building this package's every target
// (`swift build --build-tests`, the TSan run's) would otherwise compile swift-syntax for it.
if macroPlugin != nil {
    package.targets.removeAll { $0.type == .macro }
}

for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + sharedSettings
}
