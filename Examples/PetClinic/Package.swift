// swift-tools-version: 6.1
import PackageDescription

// An example service on Depot: a Hummingbird 2 JSON API over owners, their pets and the
// pets' visits, on whichever store its configuration names. Its own package, so Depot's users
// never resolve Hummingbird or swift-otel; it depends on Depot by path, as an app vendoring
// it would.
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
        // Configuration from the command line as well as the environment: the
        // CommandLineArguments trait adds CommandLineArgumentsProvider.
        .package(url: "https://github.com/apple/swift-configuration", from: "1.0.0", traits: [.defaults, "CommandLineArguments"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.1.0"),
        // Traces and metrics to an OpenTelemetry collector, over OTLP/HTTP only: the OTLPGRPC
        // trait (on by default) would build gRPC and its HTTP/2 stack for an exporter this
        // service does not offer.
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
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
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
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
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]),
    ]
)
