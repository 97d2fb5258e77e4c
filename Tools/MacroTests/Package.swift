// swift-tools-version: 6.1
// The @Record macro's expansion and diagnostics tests (swift-syntax's own test support,
// checked as text), kept out of the root package on purpose. A test target that depends on
// a macro target is built for the host, and SwiftPM links every test target of a package
// into one test product: in the root package, that put all of its tests, and so Depot and
// every dependency, in a second ("tool") build beside the one the library, the example and
// Depot's programs use. Here the macro's sources (a link to Sources/DepotMacros, under a
// module name of its own so that it cannot collide with the root package's DepotMacros in
// the shared build folder) and these tests build on the host copy of swift-syntax that the
// compiler plugin needs anyway. `make test` runs them in the root package's build folder.
import CompilerPluginSupport
import PackageDescription

// The same settings as the root package's targets (see its Package.swift).
var settings: [SwiftSetting] = [.enableUpcomingFeature("InternalImportsByDefault")]
if Context.environment["DEPOT_WARNINGS_AS_ERRORS"] == "1" {
    settings.append(.unsafeFlags(["-warnings-as-errors"]))
}

let package = Package(
    name: "DepotMacroTests",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(url: "https://github.com/swiftlang/swift-syntax.git", from: "603.0.1"),
    ],
    targets: [
        .macro(
            name: "DepotMacrosUnderTest",
            dependencies: [
                .product(name: "SwiftSyntax", package: "swift-syntax"),
                .product(name: "SwiftSyntaxBuilder", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacros", package: "swift-syntax"),
                .product(name: "SwiftDiagnostics", package: "swift-syntax"),
                .product(name: "SwiftCompilerPlugin", package: "swift-syntax"),
            ],
            swiftSettings: settings),
        .testTarget(
            name: "DepotMacrosTests",
            dependencies: [
                "DepotMacrosUnderTest",
                .product(name: "SwiftSyntaxMacrosGenericTestSupport", package: "swift-syntax"),
                .product(name: "SwiftSyntaxMacroExpansion", package: "swift-syntax"),
            ],
            swiftSettings: settings),
    ]
)
