// swift-tools-version: 6.1
import PackageDescription

// A storage engine written outside Depot, against its public API only: a package of its
// own, so nothing `package`-visible in Depot is in reach. Its tests run Depot's whole
// conformance suite on it. The "Writing a backend" article walks through it.
let package = Package(
    name: "SortedArrayEngine",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SortedArrayEngine", targets: ["SortedArrayEngine"]),
    ],
    dependencies: [
        // The engine needs none of the PostgreSQL trait; it is on so that this package builds
        // in Depot's own .build with the flags `make test` used, compiling no module twice.
        .package(name: "Depot", path: "../..", traits: ["PostgreSQL"]),
    ],
    targets: [
        .target(
            name: "SortedArrayEngine",
            dependencies: [.product(name: "DepotCore", package: "Depot")]),
        .testTarget(
            name: "SortedArrayEngineTests",
            dependencies: [
                "SortedArrayEngine",
                .product(name: "DepotTesting", package: "Depot"),
            ]),
    ]
)
