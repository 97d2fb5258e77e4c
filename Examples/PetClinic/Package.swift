// swift-tools-version: 6.1
import PackageDescription

// An example service on Depot: a Hummingbird 2 JSON API over owners, their pets and the
// pets' visits, on whichever store DEPOT_STORE_URL names. Its own package, so Depot's users
// never resolve Hummingbird; it depends on Depot by path, as an app vendoring it would.
let package = Package(
    name: "PetClinic",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pet-clinic", targets: ["PetClinicServer"]),
    ],
    dependencies: [
        // The PostgreSQL trait: the example serves every backend, postgres:// URLs included.
        .package(name: "Depot", path: "../..", traits: ["PostgreSQL"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.8.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // The service as a library, so the tests build the same application the server runs.
        .target(
            name: "PetClinic",
            dependencies: [
                .product(name: "Depot", package: "Depot"),
                .product(name: "DepotServiceLifecycle", package: "Depot"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(
            name: "PetClinicServer",
            dependencies: ["PetClinic"]),
        .testTarget(
            name: "PetClinicTests",
            dependencies: [
                "PetClinic",
                .product(name: "DepotTesting", package: "Depot"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]),
    ]
)
