// swift-tools-version: 6.1
import PackageDescription

// Every target is compiled in Swift 6 language mode (the default for tools 6.x) with
// these settings, applied in one loop at the end so no target can drift.
let sharedSettings: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Depot",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Depot", targets: ["Depot"]),
        .library(name: "DepotCore", targets: ["DepotCore"]),
        .library(name: "DepotTesting", targets: ["DepotTesting"]),
    ],
    dependencies: [],
    targets: [
        .target(name: "DepotCore"),
        .target(name: "Depot", dependencies: ["DepotCore"]),
        .target(name: "DepotTesting", dependencies: ["DepotCore"]),
        .testTarget(name: "DepotCoreTests", dependencies: ["DepotCore", "DepotTesting"]),
        .testTarget(name: "DepotTests", dependencies: ["Depot", "DepotTesting"]),
    ]
)

for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + sharedSettings
}
