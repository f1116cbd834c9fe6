import Benchmark
import Foundation
import LMDB
@_spi(Benchmarks) import LMDBStore
import ObjectGraph

/// Microbenchmarks of the store's hot paths. Run with `swift package benchmark` in `Benchmarks/`.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .throughput, .mallocCountTotal], maxDuration: .seconds(3))

    let objectCount = 100_000
    let fixture = try! Fixture(objectCount: objectCount)

    Benchmark("Point fault (LMDBStore newValuesForObject)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        var random = SystemRandomNumberGenerator()
        for _ in benchmark.scaledIterations {
            let id = fixture.ids[Int.random(in: 0..<objectCount, using: &random)]
            blackHole(try fixture.store.newValuesForObject(with: id))
        }
    }

    Benchmark("Raw mdb_get + row decode (floor)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        var random = SystemRandomNumberGenerator()
        for _ in benchmark.scaledIterations {
            let key = fixture.keys[Int.random(in: 0..<objectCount, using: &random)]
            blackHole(try fixture.store.decodeRowForBenchmark(rawKey: key, root: "Person"))
        }
    }

    Benchmark("Point fault through a context (object(with:), value(forKey:))", configuration: .init(scalingFactor: .kilo)) { benchmark in
        var random = SystemRandomNumberGenerator()
        let context = ManagedObjectContext(coordinator: fixture.coordinator)
        for n in benchmark.scaledIterations {
            let id = fixture.ids[Int.random(in: 0..<objectCount, using: &random)]
            blackHole(context.object(with: id).value(forKey: "age"))
            if n % 1_000 == 999 { context.reset() }
        }
    }

    Benchmark("Register 1 000 faults in a new context", configuration: .init(maxIterations: 1_000)) { benchmark in
        for _ in benchmark.scaledIterations {
            let context = ManagedObjectContext(coordinator: fixture.coordinator)
            for id in fixture.ids.prefix(1_000) { blackHole(context.object(with: id)) }
        }
    }

    Benchmark("Save 10 000 new objects in one context save", configuration: .init(maxIterations: 20)) { benchmark in
        for _ in benchmark.scaledIterations {
            let context = ManagedObjectContext(coordinator: fixture.coordinator)
            for n in 0..<10_000 {
                let object = try context.insertNewObject(forEntityName: "Person")
                try object.setValue("Person \(n)", forKey: "name")
                try object.setValue(n % 90, forKey: "age")
                try object.setValue("p\(n)@example.com", forKey: "email")
            }
            try context.save()
        }
    }

    // A batch insert into a fresh store each time (its tables empty: the bulk load), rows by position as an
    // importer gives them; the allocations, divided by 10 000, are the per-row work outside LMDB.
    Benchmark("Batch insert of 10 000 rows into a fresh store (one request)", configuration: .init(maxIterations: 20)) { benchmark in
        for _ in benchmark.scaledIterations {
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-bench-batch-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let coordinator = PersistentStoreCoordinator(managedObjectModel: fixture.coordinator.managedObjectModel)
            try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.appendingPathComponent("store.lmdb"),
                                               options: ["durability": "noSync"])
            var next = 0
            let request = BatchInsertRequest(entityName: "Person", properties: ["name", "age", "email"]) { row in
                guard next < 10_000 else { return true }
                row[0] = .attribute(.string("Person \(next)"))
                row[1] = .attribute(.integer(Int64(next % 90)))
                row[2] = .attribute(.string("p\(next)@example.com"))
                next += 1
                return false
            }
            benchmark.startMeasurement()
            blackHole(try ManagedObjectContext(coordinator: coordinator).execute(request))
            benchmark.stopMeasurement()
        }
    }

    Benchmark("Key codec (string + integer tuple)", configuration: .init(scalingFactor: .kilo)) { benchmark in
        for n in benchmark.scaledIterations {
            blackHole(LMDBIncrementalStore.encodeKeyForBenchmark("Person \(n % 1000)", Int64(n)))
        }
    }

    Benchmark("Predicate parse", configuration: .init(scalingFactor: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try FetchPredicate(format: "age >= %@ AND name BEGINSWITH[cd] %@ OR ANY tags.name IN %@", 18, "a", ["x", "y"]))
        }
    }
}

/// A store with `objectCount` people, written once per benchmark run.
struct Fixture: @unchecked Sendable {
    let coordinator: PersistentStoreCoordinator
    let store: LMDBIncrementalStore
    let ids: [ManagedObjectID]
    let keys: [UInt64]

    init(objectCount: Int) throws {
        LMDBIncrementalStore.register()
        let model = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("name", .string)
                AttributeDescription("age", .integer32)
                AttributeDescription("email", .string, isOptional: true)
                FetchIndexDescription("byAge", properties: ["age"])
            }
        }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-bench-\(UUID().uuidString).lmdb")
        coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: ["durability": "noSync"]) as! LMDBIncrementalStore
        let context = ManagedObjectContext(coordinator: coordinator)
        var objects: [ManagedObject] = []
        for n in 0..<objectCount {
            let object = try context.insertNewObject(forEntityName: "Person")
            try object.setValue("Person \(n)", forKey: "name")
            try object.setValue(n % 90, forKey: "age")
            objects.append(object)
        }
        try context.save()
        ids = objects.map(\.objectID)
        keys = ids.map { if case .integer(let key) = $0.referenceObject { UInt64(key) } else { 0 } }
    }
}
