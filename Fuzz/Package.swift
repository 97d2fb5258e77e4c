// swift-tools-version: 6.1
// Coverage-guided fuzz targets (libFuzzer), kept apart so the library itself has no
// fuzzing build. Built and run by `make fuzz` (see README.md here): the sanitizer flags
// come from the command line so that every Depot module is instrumented, not only this one.
import Foundation
import PackageDescription

// The root package's identity is its folder name, which differs between clones.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "DepotFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "DepotFuzz",
            dependencies: [
                .product(name: "Depot", package: root),
                .product(name: "DepotCore", package: root),
                .product(name: "DepotLMDB", package: root),
                .product(name: "DepotSQLite", package: root),
                .product(name: "DepotTesting", package: root),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/DepotFuzz",
            // libFuzzer's runtime, for this executable only (see fuzz.sh).
            linkerSettings: [.unsafeFlags(["-sanitize=fuzzer"])]),
    ]
)
