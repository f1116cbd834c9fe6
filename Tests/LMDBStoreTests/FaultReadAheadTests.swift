import Foundation
@testable import LMDBStore
import ObjectGraph
import Testing

/// A fetch of faults that reads their rows anyway (to sort or check them) keeps those rows for when the faults fire,
/// as Core Data's fetches fill the row cache with `includesPropertyValues`: the faults then fire without reading
/// the rows again — but only in a read of the same commit, so a fault never shows a row older than the store's.
@Suite(.onEveryEngine) struct FaultReadAheadTests {
    /// 300 people; names sort differently from keys, and no index holds them, so a sort by name reads every row.
    func loaded(_ coordinator: PersistentStoreCoordinator) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<300 {
            let person = try context.insertNewObject(forEntityName: "Person")
            try person.setValue("P\((n * 7919) % 1000)", forKey: "name")
            try person.setValue(Int32(n % 60), forKey: "age")
        }
        try context.save()
    }

    func firstByName(_ limit: Int) -> FetchRequest {
        FetchRequest(entityName: "Person", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]).with { $0.fetchLimit = limit }
    }

    func hits(_ store: LMDBIncrementalStore) -> Int { store.lock.withLock { store.readAheadHits } }

    @Test func faultsOfRowsAFetchReadFireWithoutReadingThemAgain() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try loaded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let people = try context.fetch(firstByName(20))
        #expect(people.count == 20 && people.allSatisfy(\.isFault), "still faults, as the request asked")
        let before = hits(store)
        let names = people.map { $0.value(forKey: "name") as? String ?? "" }
        #expect(hits(store) == before + 1, "the batch took the rows the fetch read")
        #expect(names == names.sorted() && names.count == 20)
        // The same answers as faults that read their rows.
        let reader = ManagedObjectContext(coordinator: coordinator)
        let all = try reader.fetch(FetchRequest(entityName: "Person")).map { ($0.objectID, $0.value(forKey: "name") as! String, $0.value(forKey: "age") as! Int32) }
        let expected = all.sorted { $0.1 < $1.1 }.prefix(20)
        #expect(people.map(\.objectID) == expected.map(\.0))
        #expect(people.map { $0.value(forKey: "age") as? Int32 } == expected.map(\.2))
        // Object IDs, loaded objects and requests without property values keep nothing.
        _ = try context.fetchObjectIDs(firstByName(20))
        _ = try context.fetch(firstByName(20).with { $0.includesPropertyValues = false })
        #expect(store.lock.withLock { store.readAhead == nil })
    }

    /// A commit between the fetch and the faults — through this coordinator or another one on the same file, which
    /// this one hears nothing of — makes the kept rows old: the faults read the rows as they are now.
    @Test func keptRowsOfAnOlderCommitAreNeverShown() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try loaded(coordinator)
        let other = PersistentStoreCoordinator(managedObjectModel: plannerModel)
        try other.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file())
        for writer in [coordinator, other] {
            let context = ManagedObjectContext(coordinator: coordinator)
            let people = try context.fetch(firstByName(10))
            let changing = ManagedObjectContext(coordinator: writer)
            let target = changing.object(with: people[3].objectID)
            let renamed = "changed by \(writer === coordinator ? "this" : "another") coordinator"
            try target.setValue(renamed, forKey: "name")
            try changing.save()
            let before = hits(store)
            #expect(people[3].value(forKey: "name") as? String == renamed)
            #expect(hits(store) == before, "the kept rows were of an older commit")
        }
    }

    /// A store loaded again (its file may have been put back from a copy, whose commit numbers can repeat those
    /// already seen) keeps neither plans nor rows from before: both are known only by their commit number.
    @Test func loadingTheStoreAgainForgetsKeptPlansAndRows() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try loaded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        _ = try context.fetch(firstByName(20))
        #expect(store.lock.withLock { store.readAhead != nil && !store.plans.isEmpty })
        try store.loadMetadata()
        #expect(store.lock.withLock { store.readAhead == nil && store.plans.isEmpty })
        let names = try ManagedObjectContext(coordinator: coordinator).fetch(firstByName(20)).map { $0.objectID }
        #expect(names.count == 20)
    }
}
