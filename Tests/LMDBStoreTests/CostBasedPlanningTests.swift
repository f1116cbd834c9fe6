import Foundation
@testable import LMDBStore
import ObjectGraph
import Testing

/// Plans chosen by cost on a store with data: bounded probes of each candidate range against a scan, intersections,
/// unions, backward walks for descending sorts, and counts and IDs answered from index entries alone.
@Suite(.onEveryEngine) struct CostBasedPlanningTests {
    /// 3 000 people: `age` is n mod 60 (50 per age), `score` spread evenly over [-100, 100), `city` one of three.
    func loaded(_ coordinator: PersistentStoreCoordinator) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<3000 {
            let person = try context.insertNewObject(forEntityName: n % 10 == 0 ? "Student" : "Person")
            try person.setValue("P\(n)", forKey: "name")
            try person.setValue(Int32(n % 60), forKey: "age")
            try person.setValue(Double((n * 37) % 2000 - 1000) / 10, forKey: "score")
            try person.setValue(["Oslo", "Lima", "Pune"][n % 3], forKey: "city")
        }
        try context.save()
    }

    func stores() throws -> (folder: StoreFolder, lmdb: PersistentStoreCoordinator, store: LMDBIncrementalStore, memory: PersistentStoreCoordinator) {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(plannerModel, loaded)
        return (folder, lmdb, store, memory)
    }

    func request(_ format: String, sort: [FetchSortDescriptor] = [], limit: Int = 0, values: Bool = false) throws -> FetchRequest {
        FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: format), sortDescriptors: sort).with {
            $0.fetchLimit = limit
            $0.returnsObjectsAsFaults = !values
        }
    }

    @Test func theCheapestAccessPathIsChosen() throws {
        let (_, lmdb, store, memory) = try stores()
        let cases: [(FetchRequest, String)] = [
            // Every row is in the range: reading them by key costs more than one pass over the table, but faults
            // come from the index entries alone, which cost less than the pass.
            (try request("age >= 0", values: true), "Scan(Person) → Filter(age >= 0)"),
            (try request("age >= 0"), "IndexRange(Person.byAge [0, +inf))"),
            (try request("age == 30"), "IndexRange(Person.byAge [30, 30])"),
            // 500 and 750 entries, about 125 rows in both: walking both ranges and reading those rows wins.
            (try request("age < 10 AND score < -50"), "Intersection(IndexRange(Person.byAge (-inf, 10)), IndexRange(Person.byScore (-inf, -50.0)))"),
            (try request("age < 10 AND score < -50 AND name BEGINSWITH 'P1'"),
             "Intersection(IndexRange(Person.byAge (-inf, 10)), IndexRange(Person.byScore (-inf, -50.0))) → Filter(age < 10 AND score < -50 AND name BEGINSWITH \"P1\")"),
            // An OR of terms on two indexes: each range once, every row once.
            (try request("age == 30 OR score >= 99"), "Union(IndexRange(Person.byAge [30, 30]), IndexRange(Person.byScore [99.0, +inf)))"),
            (try request("age >= 1 OR score >= 99", values: true), "Scan(Person) → Filter(age >= 1 OR score >= 99)"),
            // A descending sort on an ascending index walks it backwards and stops after the limit.
            (try request("age >= 50", sort: [FetchSortDescriptor(keyPath: "age", ascending: false)], limit: 7),
             "IndexRange(Person.byAge [50, +inf) reverse) → Limit(7)"),
            (try request("age > 5", sort: [FetchSortDescriptor(keyPath: "age")], limit: 10), "IndexRange(Person.byAge (5, +inf)) → Limit(10)"),
            (try request("city == 'Oslo'", sort: [FetchSortDescriptor(keyPath: "age", ascending: false)], limit: 7),
             "IndexRange(Person.byCityAge [\"Oslo\"] reverse) → Filter(city == \"Oslo\") on index entries → Limit(7)"),
        ]
        for (request, expected) in cases {
            assertPlan(store, request, expected)
            let mine = try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(request).map(\.referenceObject)
            let theirs = try ManagedObjectContext(coordinator: memory).fetchObjectIDs(request).map(\.referenceObject)
            #expect(mine == theirs, "\(expected)")
            #expect(!mine.isEmpty, "\(expected) finds something")
            #expect(try ManagedObjectContext(coordinator: lmdb).count(for: request) == theirs.count, "count: \(expected)")
        }
    }

    /// The plan is the pipeline that runs, and prints each node that does something: a count ends in `Count` and
    /// never sorts (the order does not change a count), a window prints its offset and limit, and the counts agree
    /// with the in-memory store's for every window.
    @Test func countsEndInACountNodeThatNeverSorts() throws {
        let (_, lmdb, store, memory) = try stores()
        let byName = [FetchSortDescriptor(keyPath: "name")]
        let cases: [(FetchRequest, String)] = [
            (try request("age >= 50", sort: byName, limit: 7), "IndexRange(Person.byAge [50, +inf)) → Limit(7) → Count"),
            (try request("age >= 50 AND name BEGINSWITH 'P1'", sort: byName).with { $0.fetchOffset = 3 },
             "Intersection(IndexRange(Person.byAge [50, +inf)), IndexRange(Person.byName [\"P1\", \"P1\"…))) → Filter(age >= 50 AND name BEGINSWITH \"P1\") → Offset(3) → Count"),
            (try request("name ENDSWITH '7'", sort: byName, limit: 40).with { $0.fetchOffset = 10 },
             "Scan(Person) → Filter(name ENDSWITH \"7\") → Offset(10) → Limit(40) → Count"),
            (try request("age == 30 OR score >= 99"), "Union(IndexRange(Person.byAge [30, 30]), IndexRange(Person.byScore [99.0, +inf))) → Count"),
        ]
        for (request, expected) in cases {
            let counted = request.with { $0.resultType = .count }
            assertPlan(store, counted, expected)
            // The same request fetching objects still sorts.
            if !request.sortDescriptors.isEmpty { #expect(store.explain(request).contains("Sort(name"), "\(store.explain(request))") }
            let theirs = try ManagedObjectContext(coordinator: memory).count(for: request)
            #expect(try ManagedObjectContext(coordinator: lmdb).count(for: request) == theirs, "\(expected)")
            #expect(theirs > 0, "\(expected) counts something")
        }
    }

    /// A request shape's candidate paths are worked out once; which one wins is costed on every fetch, so the plan
    /// follows the data. A predicate holding a few objects is kept under their IDs, never the objects themselves.
    @Test func cachedShapesAreCostedAgainstTheCurrentData() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        let shape = try request("age < 10 AND score < -50", values: true)
        #expect(store.explain(shape) == "IndexRange(Person.byAge (-inf, 10)) → Filter(age < 10 AND score < -50)")
        let hits = store.lock.withLock { store.planShapeHits }
        try loaded(coordinator)
        #expect(store.explain(shape) == "Intersection(IndexRange(Person.byAge (-inf, 10)), IndexRange(Person.byScore (-inf, -50.0)))")
        #expect(store.lock.withLock { store.planShapeHits } == hits + 1, "the second plan reused the shape's analysis")
        let context = ManagedObjectContext(coordinator: coordinator)
        let someone = try #require(try context.fetch(FetchRequest(entityName: "Person")).first)
        let withObject = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF == %@ OR age == 3", someone))
        _ = try context.fetch(withObject)
        _ = try context.fetch(withObject)
        let original = try #require(withObject.predicate)
        let keyed = try #require(QueryPlanner.keyingObjectsByID(original))
        #expect(keyed == (try FetchPredicate(format: "SELF == %@ OR age == 3", someone.objectID)), "the object's ID in its place")
        #expect(store.lock.withLock { store.planShapes.keys.contains { $0.predicate == keyed } }, "kept under the ID")
        #expect(store.lock.withLock { store.planShapes.keys.allSatisfy { QueryPlanner.isCacheable($0.predicate) } }, "no object is kept")
        // A fetch with another object of the same ID reuses the analysis; a new shape's entry keeps no object alive.
        weak var released: ManagedObject?
        do {
            let other = ManagedObjectContext(coordinator: coordinator)
            let same = other.object(with: someone.objectID)
            released = same
            let hitsBefore = store.lock.withLock { store.planShapeHits }
            _ = try other.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF == %@ OR age == 3", same)))
            #expect(store.lock.withLock { store.planShapeHits } == hitsBefore + 1)
            _ = try other.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF == %@ OR age == 4", same)))
        }
        #expect(released == nil, "the plan cache keeps no object alive")
        // More objects than are worth hashing, or one inside a subquery, are not kept at all.
        let many = try context.fetch(FetchRequest(entityName: "Person")).prefix(20)
        #expect(QueryPlanner.keyingObjectsByID(try FetchPredicate(format: "SELF IN %@", Array(many))) == nil)
        #expect(!QueryPlanner.isCacheable(try FetchPredicate(format: "SUBQUERY(friends, $f, $f == %@).@count > 0", someone)))
    }

    /// A whole plan, with its compiled row checks, is run again by fetches of the same shape, window and result type
    /// that read the same commit — and costed again after any commit, so that it follows the data.
    @Test func aKeptPlanRunsAgainOnlyInReadsOfTheCommitItWasCostedIn() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        let shape = try request("age < 10 AND score < -50", values: true)
        func hits() -> Int { store.lock.withLock { store.planHits } }
        #expect(try context.fetch(shape).isEmpty)
        let first = hits()
        #expect(try context.fetch(shape).isEmpty)
        #expect(hits() == first + 1, "the same commit: the plan kept")
        // Another window or result type is another plan.
        #expect(try context.fetch(shape.with { $0.fetchLimit = 5 }).isEmpty)
        #expect(try context.count(for: shape) == 0)
        #expect(hits() == first + 1)
        // After a commit the plan is costed again (here it changes: the ranges are worth intersecting now), and the
        // fetch finds what the commit wrote.
        try loaded(coordinator)
        let reader = ManagedObjectContext(coordinator: coordinator)
        let expected = try reader.fetch(FetchRequest(entityName: "Person")).filter {
            ($0.value(forKey: "age") as! Int32) < 10 && ($0.value(forKey: "score") as! Double) < -50
        }.map(\.objectID)
        let afterCommit = hits()
        let found = try ManagedObjectContext(coordinator: coordinator).fetch(shape).map(\.objectID)
        #expect(hits() == afterCommit, "a new commit: costed again")
        #expect(Set(found) == Set(expected) && found.count == expected.count && !found.isEmpty)
        #expect(store.explain(shape) == "Intersection(IndexRange(Person.byAge (-inf, 10)), IndexRange(Person.byScore (-inf, -50.0)))")
        #expect(try ManagedObjectContext(coordinator: coordinator).fetch(shape).map(\.objectID) == found)
        #expect(hits() == afterCommit + 1)
        // A plan whose checks were compiled once still checks each row: a predicate the rows decide, fetched twice.
        let residual = try request("age < 10 AND name BEGINSWITH 'P1'", values: true)
        let once = try ManagedObjectContext(coordinator: coordinator).fetch(residual).map(\.objectID)
        let twice = try ManagedObjectContext(coordinator: coordinator).fetch(residual).map(\.objectID)
        #expect(once == twice && !once.isEmpty && hits() == afterCommit + 2)
        #expect(once.allSatisfy { id in (reader.object(with: id).value(forKey: "name") as? String)?.hasPrefix("P1") == true })
    }

    /// A request the store has not seen pass its check is checked, even when a kept plan has its key: one kept for a
    /// dictionary fetch (whose sort may name a result, not a property), or a request that differs only in what the
    /// key leaves out (prefetching key paths, the batch size). A request of a kept plan that passed is not checked
    /// again, and answers as before.
    @Test func keptPlansLetNoUncheckedRequestThrough() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try loaded(coordinator)
        func hits() -> Int { store.lock.withLock { store.planHits } }
        func ids(_ request: FetchRequest) throws -> [ManagedObjectID] {
            guard case .objectIDs(let ids) = try store.execute(.fetch(request)) else { Issue.record("no IDs"); return [] }
            return ids
        }
        // A dictionary fetch sorted by one of its results' names keeps the plan of its rows, sorted by that name.
        var dictionaries = try request("age < 3", sort: [FetchSortDescriptor(keyPath: "years")])
        dictionaries.resultType = .dictionary
        dictionaries.propertiesToFetch = [.keyPath("age", as: "years")]
        #expect(try store.executeDictionaryFetch(dictionaries)?.count == 150)
        let unchecked = try request("age < 3", sort: [FetchSortDescriptor(keyPath: "years")])
        let before = hits()
        #expect(throws: ManagedObjectContextError.self) { try ids(unchecked) }
        #expect(hits() == before + 1, "the dictionary fetch's plan was found, and the request still checked")

        let checked = try request("age < 3", sort: [FetchSortDescriptor(keyPath: "name")])
        let first = try ids(checked)
        #expect(try ids(checked) == first && first.count == 150)
        #expect(hits() == before + 2)
        var prefetching = checked
        prefetching.relationshipKeyPathsForPrefetching = ["age"]
        #expect { try ids(prefetching) } throws: { error in
            guard let error = error as? ManagedObjectContextError else { return false }
            return error.code == .invalidRequest && error.message.contains("\"age\" of Person ends at an Integer 32 attribute, not a relationship")
        }
        var batched = checked
        batched.fetchBatchSize = -1
        #expect { try ids(batched) } throws: { ($0 as? ManagedObjectContextError)?.code == .invalidRequest }
        #expect(hits() == before + 4)
        // Dictionary results are the context's to compute; a request for them still has its properties checked.
        var grouped = checked
        grouped.resultType = .dictionary
        grouped.propertiesToFetch = [.keyPath("age")]
        #expect { try store.execute(.fetch(grouped)) } throws: { ($0 as? ManagedObjectContextError)?.code == .unsupportedRequest }
        grouped.propertiesToFetch = [.keyPath("nmae")]
        #expect { try store.execute(.fetch(grouped)) } throws: { ($0 as? ManagedObjectContextError)?.code == .unknownName }
    }

    /// Ties on the sort key come in key order, as a scan then a stable sort gives them, also when the index is
    /// walked backwards (each run of equal values is reversed) and the limit falls inside a run.
    @Test func backwardWalksKeepTiesInKeyOrder() throws {
        let (_, lmdb, store, memory) = try stores()
        for limit in [1, 7, 50, 51, 120] {
            for offset in [0, 3, 49] {
                var request = try request("age >= 40", sort: [FetchSortDescriptor(keyPath: "age", ascending: false)], limit: limit)
                request.fetchOffset = offset
                #expect(store.explain(request).contains(" reverse)"))
                for resultType in [FetchRequestResultType.managedObjectID, .managedObject] {
                    request.resultType = resultType
                    let mine = try ManagedObjectContext(coordinator: lmdb).fetch(request).map(\.objectID.referenceObject)
                    let theirs = try ManagedObjectContext(coordinator: memory).fetch(request).map(\.objectID.referenceObject)
                    #expect(mine == theirs, "limit \(limit) offset \(offset) \(resultType)")
                }
            }
        }
    }

    /// When the ranges answer the whole predicate, counts and object IDs come from index entries: with every row
    /// damaged they still answer, while a fetch that needs a row fails naming it.
    @Test func coveredCountsAndIDsReadNoRow() throws {
        let (_, lmdb, store, memory) = try stores()
        let covered = [try request("age == 30"), try request("age < 10 AND score < -50"), try request("age == 30 OR score >= 99"),
                       // Ranges whose residual reads only values their keys hold: checked on the entries.
                       try request("city == 'Oslo' AND age != 30 AND age < 40"),
                       try request("score == -50.0 AND age < 50 AND city != 'Lima'")]
        let expected = try covered.map { try ManagedObjectContext(coordinator: memory).fetchObjectIDs($0).map(\.referenceObject) }
        try breakEveryRow(of: "Person", in: store)
        let context = ManagedObjectContext(coordinator: lmdb)
        #expect(store.explain(covered[3]).hasPrefix("IndexRange(Person.byCityAge"))
        #expect(store.explain(covered[4]).hasPrefix("IndexRange(Person.byScoreAgeCity"))
        for (request, ids) in zip(covered, expected) {
            let plan = store.explain(request)
            #expect(!plan.contains("Filter") || plan.contains("on index entries"), "\(plan)")
            #expect(!ids.isEmpty)
            #expect(try context.count(for: request) == ids.count)
            #expect(try context.fetchObjectIDs(request).map(\.referenceObject) == ids)
        }
        var values = covered[1]
        values.returnsObjectsAsFaults = false
        #expect(throws: ManagedObjectContextError.self) { try context.fetch(values) }
    }
}

extension CostBasedPlanningTests {
    /// A plan is kept for each of as many shapes as an app asks about one object or value at a time — a thousand, where
    /// 512 was outgrown by a workload over a thousand departments — and when the table fills up, the plans of older
    /// commits go first: a plan of the current commit stays.
    @Test func keptPlansHoldAThousandShapesAndLoseStaleOnesFirst() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        func hits() -> Int { store.lock.withLock { store.planHits } }
        func fetch(_ n: Int) throws { _ = try context.fetch(try request("age == \(n)")) }
        for n in 0..<1_000 { try fetch(n) }
        let before = hits()
        for n in 0..<1_000 { try fetch(n) }
        #expect(hits() == before + 1_000, "every shape's plan was kept")

        // One short of full with this commit's plans; then a commit makes them all stale.
        let capacity = LMDBIncrementalStore.planCacheCapacity
        for n in 1_000..<(capacity - 1) { try fetch(n) }
        #expect(store.lock.withLock { store.plans.count } == capacity - 1)
        try context.insertNewObject(forEntityName: "Person").setValue("new", forKey: "name")
        try context.save()
        try fetch(-1)  // the table is full now, with one plan of the new commit
        try fetch(-2)  // full: the stale plans go, the current one stays
        #expect(store.lock.withLock { store.plans.count } == 2)
        let kept = hits()
        try fetch(-1)
        #expect(hits() == kept + 1, "the current commit's plan survived the eviction")
    }
}
