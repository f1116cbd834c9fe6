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
            dependencies: ["LMDBStore", "LMDB", "ObjectGraph", "StoreConformance", "TestSupport", "lmdbstore-test-helper"]
        ),
        .testTarget(
            name: "ObjectGraphTests",
            dependencies: ["ObjectGraph", "StoreConformance", "TestSupport"],
            resources: [.copy("Fixtures")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
