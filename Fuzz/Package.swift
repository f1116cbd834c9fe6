// swift-tools-version: 6.0
import PackageDescription

// The fuzz targets (issue 23): libFuzzer entry points over the predicate language, the model loaders, the row and key
// codecs and damaged store files. Each target has no `main.swift`: libFuzzer supplies `main`, so the targets link only
// when built for fuzzing, which `Fuzz/run` does:
//
//     swift build --package-path Fuzz --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address --product FuzzPredicate
//
// They reach the libraries' internal codecs through `@testable import`, which a debug build allows.
let package = Package(
    name: "LMDBStoreFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "LMDBStore", path: ".."),
    ],
    targets: [
        .target(
            name: "FuzzSupport",
            dependencies: [.product(name: "ObjectGraph", package: "LMDBStore")]
        ),
        .executableTarget(
            name: "FuzzPredicate",
            dependencies: ["FuzzSupport", .product(name: "ObjectGraph", package: "LMDBStore")]
        ),
        .executableTarget(
            name: "FuzzModel",
            dependencies: ["FuzzSupport", .product(name: "ObjectGraph", package: "LMDBStore")]
        ),
        .executableTarget(
            name: "FuzzCodecs",
            dependencies: ["FuzzSupport", .product(name: "ObjectGraph", package: "LMDBStore"),
                           .product(name: "LMDBStore", package: "LMDBStore")]
        ),
        .executableTarget(
            name: "FuzzStore",
            dependencies: ["FuzzSupport", .product(name: "ObjectGraph", package: "LMDBStore"),
                           .product(name: "LMDBStore", package: "LMDBStore"), .product(name: "LMDB", package: "LMDBStore")]
        ),
        .executableTarget(
            name: "FuzzFile",
            dependencies: ["FuzzSupport", .product(name: "LMDB", package: "LMDBStore")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
