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
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
    ],
    targets: [
        .executableTarget(
            name: "lmdbstore-bench",
            dependencies: [
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "LMDB", package: rootIdentity),
                .product(name: "LMDBStore", package: rootIdentity),
                .product(name: "ObjectGraph", package: rootIdentity),
            ],
            path: "Sources/lmdbstore-bench"
        ),
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
