import Foundation
import Synchronization
@testable import LMDBStore
import ObjectGraph
import Testing

/// A scan of a large table is read in parts on several threads (`ParallelScan`): it must answer exactly what one
/// thread answers — the same objects in the same order, counts, sorts with limits, loaded objects, dictionaries —
/// and every part must read the same commit while a writer commits beside it.
@Suite(.onEveryEngine) struct ParallelScanTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("name", .string)
            AttributeDescription("rank", .integer32)
            AttributeDescription("weight", .double, isOptional: true)
            RelationshipDescription("owner", destination: "Owner", inverse: "items")
        }
        EntityDescription("Special", parent: "Item") {
            AttributeDescription("note", .string, isOptional: true)
        }
        EntityDescription("Owner") {
            AttributeDescription("name", .string)
            RelationshipDescription("items", destination: "Item", inverse: "owner", toMany: true)
        }
    }

    /// Two stores with the same 3 000 items (every seventh a Special, some deleted, so keys have gaps): one reading
    /// scans with four threads, the other with one.
    func stores(_ folder: StoreFolder) throws -> (parallel: PersistentStoreCoordinator, single: PersistentStoreCoordinator) {
        func make(_ name: String, threads: Int) throws -> PersistentStoreCoordinator {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(name),
                                               options: LMDBIncrementalStore.Options(scanThreads: threads).dictionary)
            let context = ManagedObjectContext(coordinator: coordinator)
            let owners = try (0..<5).map { n -> ManagedObject in
                let owner = try context.insertNewObject(forEntityName: "Owner")
                try owner.setValue("owner \(n)", forKey: "name")
                return owner
            }
            var items: [ManagedObject] = []
            for n in 0..<3_000 {
                let item = try context.insertNewObject(forEntityName: n % 7 == 0 ? "Special" : "Item")
                try item.setValue(["Ada", "Grace", "grace hopper", "Émile", "Zoë"][n % 5] + " \(n % 211)", forKey: "name")
                try item.setValue(Int32((n * 7_919) % 1_000), forKey: "rank")
                try item.setValue(n % 11 == 0 ? nil : Double(n % 97) / 4, forKey: "weight")
                try item.setValue(owners[n % 5], forKey: "owner")
                if n % 7 == 0 { try item.setValue(n % 2 == 0 ? "even" : nil, forKey: "note") }
                items.append(item)
            }
            try context.save()
            for item in items where (item.value(forKey: "rank") as! Int32) % 13 == 5 { context.delete(item) }
            try context.save()
            return coordinator
        }
        return (try make("parallel.lmdb", threads: 4), try make("single.lmdb", threads: 1))
    }

    @Test func aScanReadInPartsAnswersWhatOneThreadAnswers() throws {
        let folder = StoreFolder()
        let (parallel, single) = try stores(folder)
        try ParallelScan.$rowsPerPart.withValue(100) {
            let formats = ["name BEGINSWITH 'Grace'", "name CONTAINS[c] 'grace'", "rank > 500", "weight == nil OR weight < 3",
                           "name ENDSWITH '7' AND rank < 900", "owner.name == 'owner 3'", "NOT (rank BETWEEN {100, 800})",
                           "name MATCHES '.*1[0-9]'", "TRUEPREDICATE"]
            var requests: [FetchRequest] = []
            for format in formats {
                requests.append(FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: format)))
                var sorted = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: format),
                                          sortDescriptors: [FetchSortDescriptor(keyPath: "weight", ascending: false), FetchSortDescriptor(keyPath: "name")])
                sorted.fetchLimit = 25
                sorted.fetchOffset = 3
                requests.append(sorted)
                var byName = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: format), sortDescriptors: [FetchSortDescriptor(keyPath: "name")])
                byName.includesSubentities = false
                requests.append(byName)
            }
            for request in requests {
                let same = try ids(request, parallel) == ids(request, single)
                #expect(same, "\(request.predicate!) sorted by \(request.sortDescriptors)")
                #expect(try ManagedObjectContext(coordinator: parallel).count(for: request) == ManagedObjectContext(coordinator: single).count(for: request))
                var loaded = request
                loaded.returnsObjectsAsFaults = false
                let names = { (coordinator: PersistentStoreCoordinator) in
                    try ManagedObjectContext(coordinator: coordinator).fetch(loaded).map { $0.value(forKey: "name") as? String ?? "-" }
                }
                let sameNames = try names(parallel) == names(single)
                #expect(sameNames, "\(request.predicate!)")
            }
            // Dictionaries grouped by a value, from the rows the scan reads.
            var grouped = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank >= 100"))
            grouped.resultType = .dictionary
            grouped.propertiesToGroupBy = ["weight"]
            grouped.propertiesToFetch = [.keyPath("weight"), .aggregate(.count, of: "rank", as: "n"), .aggregate(.sum, of: "rank", as: "r")]
            grouped.sortDescriptors = [FetchSortDescriptor(keyPath: "weight")]
            let dictionaries = try ManagedObjectContext(coordinator: parallel).fetchDictionaries(grouped)
            #expect(dictionaries.count > 50)
            #expect(dictionaries == (try ManagedObjectContext(coordinator: single).fetchDictionaries(grouped)))
        }
    }

    /// Each object's ID as its entity and key: the two stores have their own store identifiers.
    func ids(_ request: FetchRequest, _ coordinator: PersistentStoreCoordinator) throws -> [String] {
        try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(request).map { "\($0.entityName)/\($0.referenceObject)" }
    }

    /// A writer commits batches of 100 rows while scans read in parts: every scan must see whole batches — a part
    /// that read another commit than the others would show a batch in part, or miss one between two parts.
    @Test func everyPartReadsTheSameCommitWhileAWriterCommits() async throws {
        let folder = StoreFolder()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(),
                                           options: LMDBIncrementalStore.Options(scanThreads: 4).dictionary)
        func insertBatch(_ batch: Int) throws {
            let context = ManagedObjectContext(coordinator: coordinator)
            for n in 0..<100 {
                let item = try context.insertNewObject(forEntityName: "Item")
                try item.setValue("batch \(batch)", forKey: "name")
                try item.setValue(Int32(batch), forKey: "rank")
                try item.setValue(Double(n), forKey: "weight")
            }
            try context.save()
        }
        for batch in 0..<20 { try insertBatch(batch) }
        let writer = Task.detached {
            for batch in 20..<80 { try insertBatch(batch) }
        }
        try ParallelScan.$rowsPerPart.withValue(50) {
            let request = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "weight >= 0 AND name BEGINSWITH 'batch'"))
            for _ in 0..<60 {
                let ranks = try ManagedObjectContext(coordinator: coordinator).fetch(request.with { $0.returnsObjectsAsFaults = false })
                    .map { $0.value(forKey: "rank") as! Int32 }
                let batches = Dictionary(grouping: ranks, by: { $0 }).mapValues(\.count)
                #expect(batches.values.allSatisfy { $0 == 100 }, "a scan saw part of a batch: \(batches.filter { $0.value != 100 })")
                #expect(batches.keys.sorted() == Array(0..<Int32(batches.count)), "a scan missed a batch between two parts")
                #expect(ranks == ranks.sorted(), "the parts' matches are not handed on in key order")
            }
        }
        try await writer.value
    }

    /// A commit between the run's read and its parts' reads (made there by the test): the parts that would read it
    /// are read in the run's own transaction, so the scan answers the store as it was when the fetch began.
    @Test func aPartThatWouldReadALaterCommitIsReadInTheRunsOwnRead() throws {
        let folder = StoreFolder()
        let (parallel, _) = try stores(folder)
        let request = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank >= 0"))
        let before = try ids(request, parallel)
        let changed = Mutex(false)
        let change: @Sendable () throws -> Void = {
            guard changed.withLock({ done in defer { done = true }; return !done }) else { return }
            // Every third item (of every part's range) deleted, and new ones added after the last.
            let context = ManagedObjectContext(coordinator: parallel)
            for item in try context.fetch(request) where (item.value(forKey: "rank") as! Int32) % 3 == 0 { context.delete(item) }
            for n in 0..<50 {
                let item = try context.insertNewObject(forEntityName: "Item")
                try item.setValue("late \(n)", forKey: "name")
                try item.setValue(Int32(n), forKey: "rank")
            }
            try context.save()
        }
        let during = try ParallelScan.$rowsPerPart.withValue(100) {
            try ParallelScan.$beforePartReads.withValue(change) { try ids(request, parallel) }
        }
        #expect(changed.withLock { $0 }, "the parts were not read in parallel")
        let answeredAsBegun = during == before, changedAfter = try ids(request, parallel) != before
        #expect(answeredAsBegun, "\(during.count) objects, \(before.count) when the fetch began")
        #expect(changedAfter, "the change is committed")
    }

    @Test func scanThreadsIsAStoreOption() throws {
        #expect(try LMDBIncrementalStore.Options(["scanThreads": "2"]).scanThreads == 2)
        #expect(LMDBIncrementalStore.Options(scanThreads: 3).dictionary["scanThreads"] == "3")
        #expect(LMDBIncrementalStore.Options().dictionary["scanThreads"] == nil)
        for bad in ["0", "-1", "many"] {
            #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.Options(["scanThreads": bad]) }
        }
    }
}
