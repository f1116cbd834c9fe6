// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "LMDBStore",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "LMDB", targets: ["LMDB"]),
        .library(name: "ObjectGraph", targets: ["ObjectGraph"]),
        .library(name: "StoreConformance", targets: ["StoreConformance"]),
        .library(name: "LMDBStore", targets: ["LMDBStore"]),
        .executable(name: "lmdbstore", targets: ["lmdbstore"]),
    ],
    dependencies: [
        // For the command-line tool only: the libraries depend on nothing but liblmdb.
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CLMDB",
            path: "Sources/CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]
        ),
        .target(
            name: "LMDB",
            dependencies: ["CLMDB"]
        ),
        .target(
            name: "ObjectGraph"
        ),
        // The row checksum with the CPU's CRC-32C instruction (C: Swift has no portable way to emit it).
        .target(
            name: "CChecksum",
            path: "Sources/CChecksum"
        ),
        .target(
            name: "LMDBStore",
            dependencies: ["LMDB", "ObjectGraph", "CChecksum"]
        ),
        .target(
            name: "StoreConformance",
            dependencies: ["ObjectGraph"]
        ),
        // The command-line tool: inspect, query, verify and copy a store (`Docs/CLI.md`).
        .executableTarget(
            name: "lmdbstore",
            dependencies: ["LMDB", "LMDBStore", "ObjectGraph", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // A small program the tests spawn as a second OS process (multi-process writes, crash tests).
        .executableTarget(
            name: "lmdbstore-test-helper",
            dependencies: ["LMDB", "LMDBStore", "ObjectGraph"],
            path: "Tests/TestHelper"
        ),
        // Helpers shared by the test targets.
        .target(
            name: "TestSupport",
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "LMDBTests",
            dependencies: ["LMDB", "lmdbstore-test-helper", "TestSupport"]
        ),
        .testTarget(
            name: "LMDBStoreTests",
            dependencies: ["LMDBStore", "LMDB", "ObjectGraph", "StoreConformance", "TestSupport", "lmdbstore-test-helper", "lmdbstore"]
        ),
        .testTarget(
            name: "ObjectGraphTests",
            dependencies: ["ObjectGraph", "StoreConformance", "TestSupport"],
            resources: [.copy("Fixtures")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
