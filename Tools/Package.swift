// swift-tools-version: 6.1
// Depot's own programs, kept apart so that the root package declares only the library and
// the `depot` command: the backend comparison (depot-bench), the conformance suite against
// a release build (depot-conformance), the helper processes of the reliability tests
// (depot-crash-writer, depot-fault-writer), and the SQLite disk-fault VFS with its tests. The Makefile builds them in the root package's
// build folder (`--scratch-path .build`), where the modules they share with the tests are
// already built with the same flags; the reliability tests find the helpers there, beside
// the test runner.
import Foundation
import PackageDescription

// The root package's identity is its folder name, which differs between clones.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

// The same settings as the root package's targets (see its Package.swift).
var settings: [SwiftSetting] = [.enableUpcomingFeature("InternalImportsByDefault")]
if Context.environment["DEPOT_WARNINGS_AS_ERRORS"] == "1" {
    settings.append(.unsafeFlags(["-warnings-as-errors"]))
}
// A prebuilt @Record plugin for release builds (see the root Package.swift): depot-bench
// expands @Record too.
if let macroPlugin = Context.environment["DEPOT_MACRO_PLUGIN"], !macroPlugin.isEmpty {
    settings.append(.unsafeFlags(["-Xfrontend", "-load-plugin-executable", "-Xfrontend", "\(macroPlugin)#DepotMacros"]))
}

let package = Package(
    name: "DepotTools",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "..", traits: ["PostgreSQL"]),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        // The engines' C APIs, for the benchmark's raw baselines and the fault tests. Named
        // apart from the library's own system modules (CSQLite, CLMDB, CLibPQ), which a
        // second package cannot declare again in one build.
        .systemLibrary(name: "ToolsCSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "ToolsCLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "ToolsCLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .executableTarget(
            name: "depot-bench",
            dependencies: [
                .product(name: "Depot", package: root), .product(name: "DepotTesting", package: root),
                "ToolsCSQLite", "ToolsCLMDB", "ToolsCLibPQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: settings),
        // The conformance suite as a program, to check a release build (`make conformance`).
        .executableTarget(
            name: "depot-conformance",
            dependencies: [
                .product(name: "Depot", package: root), .product(name: "DepotTesting", package: root),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: settings),
        // The crash-safety helper: writes transactions to a store and logs each acknowledged
        // commit until DepotReliabilityTests kills it with SIGKILL.
        .executableTarget(
            name: "depot-crash-writer",
            dependencies: [.product(name: "Depot", package: root), .product(name: "DepotTesting", package: root)],
            swiftSettings: settings),
        // The fault-injection helper: commits transactions with an LD_PRELOAD shim loaded
        // and reports each commit's outcome, for DepotReliabilityTests. The shim
        // (Tests/DepotReliabilityTests/FaultShim/FaultShim.c) is compiled by the test with
        // the C compiler: a dynamic library target would have to be a public product.
        .executableTarget(
            name: "depot-fault-writer",
            dependencies: [.product(name: "Depot", package: root), .product(name: "DepotTesting", package: root)],
            swiftSettings: settings),
        // An SQLite VFS that makes writes, syncs and truncations fail on demand, and the
        // tests of what SQLiteStore does when the disk fails (public API only).
        .target(name: "CSQLiteFaultVFS", dependencies: ["ToolsCSQLite"], linkerSettings: [.linkedLibrary("sqlite3")]),
        .testTarget(
            name: "DepotFaultTests",
            dependencies: [
                .product(name: "DepotCore", package: root), .product(name: "DepotSQLite", package: root),
                .product(name: "DepotTesting", package: root), "CSQLiteFaultVFS", "ToolsCSQLite",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: settings),
    ]
)
