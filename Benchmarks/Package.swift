// swift-tools-version: 6.1
// Comparison-only and measurement dependencies live here, so users of LMDBStore never resolve them.
import PackageDescription
import class Foundation.ProcessInfo
import struct Foundation.URL

// The root package is a path dependency; its identity is the name of the folder it was cloned into.
let rootIdentity = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "LMDBStoreBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "StoreBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "LMDB", package: rootIdentity),
                .product(name: "LMDBStore", package: rootIdentity),
                .product(name: "ObjectGraph", package: rootIdentity),
            ],
            path: "Benchmarks/StoreBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
