// swift-tools-version: 6.1
// The package-benchmark suites, kept apart so the library itself has no benchmark or
// GRDB dependency. Run from this folder: swift package benchmark
import Foundation
import PackageDescription

// The root package's identity is its folder name, which differs between clones.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

let package = Package(
    name: "DepotBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
    ],
    targets: [
        .executableTarget(
            name: "DepotBenchmarks",
            dependencies: [
                .product(name: "Depot", package: root),
                .product(name: "DepotTesting", package: root),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/DepotBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]),
        .executableTarget(
            name: "PeerBenchmarks",
            dependencies: [
                .product(name: "Depot", package: root),
                .product(name: "DepotTesting", package: root),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/PeerBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]),
    ]
)
