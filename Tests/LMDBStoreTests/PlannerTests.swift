import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// The model the planner tests use: indexed and unindexed attributes, NULLs, a sub-entity.
let plannerModel = try! ManagedObjectModel {
    EntityDescription("Person") {
        AttributeDescription("name", .string)
        AttributeDescription("age", .integer32, isOptional: true)
        AttributeDescription("score", .double, isOptional: true)
        AttributeDescription("city", .string, isOptional: true)
        FetchIndexDescription("byName", properties: ["name"])
        FetchIndexDescription("byAge", properties: ["age"])
        FetchIndexDescription("byScore", properties: ["score"])
        FetchIndexDescription("byCityAge", elements: [.ascending("city"), .ascending("age")])
        FetchIndexDescription("byScoreAgeCity", elements: [.descending("score"), .ascending("age"), .ascending("city")])
        FetchIndexDescription("byFoldedName", elements: [FetchIndexElementDescription("name", collation: .caseAndDiacriticInsensitive)])
        FetchIndexDescription("byCaseCity", elements: [FetchIndexElementDescription("city", collation: .caseInsensitive)])
    }
    EntityDescription("Student", parent: "Person") {
        AttributeDescription("grade", .integer16, defaultValue: 1)
    }
}

func assertPlan(_ store: LMDBIncrementalStore, _ request: FetchRequest, _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(store.explain(request) == expected, sourceLocation: sourceLocation)
}

extension SplitMix64 {
    /// One of `options`, chosen by the generator.
    mutating func pick<T>(_ options: [T]) -> T { options[Int(next() % UInt64(options.count))] }
}

/// Runs `trials` random fetches on both stores and expects the same objects in the same order, and the same counts:
/// predicates nest `term()`s in AND, OR and NOT; entities, sub-entity inclusion, a sort on one of `sortKeys`, limits
/// and offsets are random too. A failure names the seed, the trial and the request. Returns each request's plan.
func compareRandomFetches(lmdb: PersistentStoreCoordinator, memory: PersistentStoreCoordinator, store: LMDBIncrementalStore,
                          seed: UInt64, trials: Int, entities: [String], sortKeys: [String],
                          term: (inout SplitMix64) -> String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String] {
    var random = SplitMix64(seed: seed)
    func predicate(_ depth: Int) -> String {
        if depth > 2 || random.next() % 3 == 0 { return term(&random) }
        switch random.next() % 3 {
        case 0: return "(\(predicate(depth + 1)) AND \(predicate(depth + 1)))"
        case 1: return "(\(predicate(depth + 1)) OR \(predicate(depth + 1)))"
        default: return "NOT \(predicate(depth + 1))"
        }
    }
    var plans: [String] = []
    for trial in 0..<trials {
        let text = random.next() % 2 == 0 ? "\(term(&random)) AND \(predicate(0))" : predicate(0)
        var request = FetchRequest(entityName: random.pick(entities), predicate: try FetchPredicate(format: text))
        request.includesSubentities = random.next() % 5 != 0
        if random.next() % 2 == 0 {
            request.sortDescriptors = [FetchSortDescriptor(keyPath: random.pick(sortKeys), ascending: random.next() % 3 != 0)]
            if random.next() % 2 == 0 { request.fetchLimit = Int(random.next() % 20) + 1; request.fetchOffset = Int(random.next() % 5) }
        } else if random.next() % 3 == 0 {
            // A window of the unsorted result (row-key order), which an equality on an index stops early for.
            request.fetchLimit = Int(random.next() % 8) + 1
            request.fetchOffset = Int(random.next() % 4)
        }
        plans.append(store.explain(request))
        let mineIDs = try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(request)
        let theirIDs = try ManagedObjectContext(coordinator: memory).fetchObjectIDs(request)
        let mine = mineIDs.map(\.referenceObject), theirs = theirIDs.map(\.referenceObject)
        let described = "trial \(trial) (seed \(seed)): \(request.entityName) \(text) sort \(request.sortDescriptors) limit \(request.fetchLimit) offset \(request.fetchOffset)"
        let rows = mine == theirs ? "" : (try? disagreement(mineIDs, theirIDs, lmdb: lmdb, memory: memory)) ?? "(unreadable)"
        #expect(mine == theirs, "\(described), plan \(plans.last!); the rows the stores disagree on:\n\(rows)", sourceLocation: sourceLocation)
        #expect(try ManagedObjectContext(coordinator: lmdb).count(for: request) == theirs.count, "\(described): count", sourceLocation: sourceLocation)
        // Loaded objects take the plan's other exits: the window's rows decoded from candidates, or the matched rows.
        let loaded = try ManagedObjectContext(coordinator: lmdb).fetch(request.with { $0.returnsObjectsAsFaults = false })
        #expect(loaded.map(\.objectID.referenceObject) == theirs && loaded.allSatisfy { !$0.isFault }, "\(described): loaded objects",
                sourceLocation: sourceLocation)
        if mine != theirs { break }
    }
    return plans
}

/// The smallest dataset that shows a disagreement: each object only one store returned, or — when both returned the
/// same objects in another order — the two at the first position where the orders part, with every attribute value
/// (`entity key {name: value, …}`); empty when the results agree.
func disagreement(_ mine: [ManagedObjectID], _ theirs: [ManagedObjectID], lmdb: PersistentStoreCoordinator,
                  memory: PersistentStoreCoordinator) throws -> String {
    let (myKeys, theirKeys) = (mine.map(\.referenceObject), theirs.map(\.referenceObject))
    guard myKeys != theirKeys else { return "" }
    var shown: [(ManagedObjectID, PersistentStoreCoordinator, String)] = []
    let onlyMine = Set(myKeys).subtracting(theirKeys), onlyTheirs = Set(theirKeys).subtracting(myKeys)
    shown += mine.filter { onlyMine.contains($0.referenceObject) }.map { ($0, lmdb, "only the LMDB store returned") }
    shown += theirs.filter { onlyTheirs.contains($0.referenceObject) }.map { ($0, memory, "only the in-memory store returned") }
    if shown.isEmpty, let split = myKeys.indices.first(where: { myKeys[$0] != theirKeys[$0] }) {
        shown = [(mine[split], lmdb, "LMDB store's object at position \(split)"), (theirs[split], memory, "in-memory store's object at position \(split)")]
    }
    return try shown.map { id, coordinator, why in
        let object = try ManagedObjectContext(coordinator: coordinator).existingObject(with: id)
        let names = coordinator.managedObjectModel.allProperties(of: id.entityName).compactMap { property -> String? in
            if case .attribute(let attribute) = property { attribute.name } else { nil }
        }.sorted()
        let values = names.map { "\($0): \(String(describing: object.value(forKey: $0)).prefix(80))" }.joined(separator: ", ")
        return "  \(why): \(id.entityName) \(id.referenceObject) {\(values)}"
    }.joined(separator: "\n")
}

/// 600 characters: with any suffix, longer than an index key may be.
let longName = String(repeating: "L", count: 600)

@Suite(.onEveryEngine) struct PlannerTests {
    func people(_ count: Int, seed: UInt64) -> [[String: Any]] {
        var random = SplitMix64(seed: seed)
        // Two names longer than LMDB's key limit that share their first 600 characters: their index keys are cut and
        // digested, so only the row check tells them apart.
        let names = ["Ann", "Anna", "Bob", "Bea", "Cy", "Dee", "Émile", "Zoe", "annie", "Ann\u{0}x", longName + "a", longName + "b"]
        return (0..<count).map { n in
            var values: [String: Any] = ["name": names[Int(random.next() % UInt64(names.count))] + (random.next() % 3 == 0 ? "" : " \(n % 7)")]
            if random.next() % 8 != 0 { values["age"] = Int32(random.next() % 60) }
            if random.next() % 6 != 0 { values["score"] = Double(Int(random.next() % 2000) - 1000) / 10 }
            if random.next() % 2 == 0 { values["city"] = ["Oslo", "Lima", "Pune"][Int(random.next() % 3)] }
            values["entity"] = random.next() % 4 == 0 ? "Student" : "Person"
            return values
        }
    }

    @Test func commonShapesGetTheirPlans() throws {
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(plannerModel)
        func request(_ format: String, sort: [FetchSortDescriptor] = [], limit: Int = 0) throws -> FetchRequest {
            FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: format), sortDescriptors: sort).with { $0.fetchLimit = limit }
        }
        assertPlan(store, try request("age == 30"), "IndexRange(Person.byAge [30, 30])")
        assertPlan(store, try request("age >= 30 AND age < 40", sort: [FetchSortDescriptor(keyPath: "age")], limit: 20),
                   "IndexRange(Person.byAge [30, 40)) → Limit(20)")
        assertPlan(store, try request("age BETWEEN {18, 30} AND city == 'Oslo'"),
                   "IndexRange(Person.byCityAge [\"Oslo\" × [18, 30]]) → Filter(age BETWEEN {18, 30} AND city == \"Oslo\") on index entries")
        assertPlan(store, try request("city == 'Oslo' AND age > 30"), "IndexRange(Person.byCityAge [\"Oslo\" × (30, +inf)]) → Filter(city == \"Oslo\" AND age > 30) on index entries")
        assertPlan(store, try request("city == 'Lima'", sort: [FetchSortDescriptor(keyPath: "age")], limit: 5),
                   "IndexRange(Person.byCityAge [\"Lima\"]) → Filter(city == \"Lima\") on index entries → Limit(5)")
        assertPlan(store, try request("score == 2.5 AND age == 3 AND city == 'Oslo'"),
                   "IndexRange(Person.byScoreAgeCity [2.5, 3, \"Oslo\"]) → Filter(score == 2.5 AND age == 3 AND city == \"Oslo\") on index entries")
        assertPlan(store, try request("name BEGINSWITH 'An'"), "IndexRange(Person.byName [\"An\", \"An\"…)) → Filter(name BEGINSWITH \"An\") on index entries")
        assertPlan(store, try request("score > 10 AND age == 3"), "IndexRange(Person.byAge [3, 3]) → Filter(score > 10 AND age == 3)")
        assertPlan(store, try request("city == 'Oslo'"), "IndexRange(Person.byCityAge [\"Oslo\", \"Oslo\"]) → Filter(city == \"Oslo\") on index entries")
        // [c] and [cd] use an index folded the same way, with the constant folded; other options scan.
        assertPlan(store, try request("name BEGINSWITH[cd] 'ÉM'"), "IndexRange(Person.byFoldedName [\"em\", \"em\"…)) → Filter(name BEGINSWITH[cd] \"ÉM\")")
        assertPlan(store, try request("city ==[c] 'OSLO'"), "IndexRange(Person.byCaseCity [\"oslo\", \"oslo\"]) → Filter(city ==[c] \"OSLO\")")
        assertPlan(store, try request("city IN[c] {'Oslo', 'LIMA'}"), "IndexRange(Person.byCaseCity {\"oslo\", \"lima\"}) → Filter(city IN[c] {\"Oslo\", \"LIMA\"})")
        assertPlan(store, try request("name BEGINSWITH[c] 'an'"), "Scan(Person) → Filter(name BEGINSWITH[c] \"an\")")
        // A comparison that folds less than an index does uses it as a superset for == and IN: [d] and [c] on a
        // [cd] index, an exact comparison on a [c] one when no binary index exists.
        assertPlan(store, try request("name ==[d] 'EMILE'"), "IndexRange(Person.byFoldedName [\"emile\", \"emile\"]) → Filter(name ==[d] \"EMILE\")")
        assertPlan(store, try request("name IN[c] {'Émile', 'ann'}"), "IndexRange(Person.byFoldedName {\"emile\", \"ann\"}) → Filter(name IN[c] {\"Émile\", \"ann\"})")
        assertPlan(store, try request("name >[d] 'a'"), "Scan(Person) → Filter(name >[d] \"a\")")
        assertPlan(store, try request("city ==[cd] 'Oslo' OR city == 'Lima'"), "Scan(Person) → Filter(city ==[cd] \"Oslo\" OR city == \"Lima\")")
        assertPlan(store, try request("age == 30 OR age == 31"), "IndexRange(Person.byAge {30, 31})")
        assertPlan(store, try request("age IN {31, 30, 31}", sort: [FetchSortDescriptor(keyPath: "age")], limit: 3),
                   "IndexRange(Person.byAge {31, 30, 31}) → Limit(3)")
        assertPlan(store, try request("name IN {'Bob', 'Ann'}"), "IndexRange(Person.byName {\"Bob\", \"Ann\"}) → Filter(name IN {\"Bob\", \"Ann\"}) on index entries")
        assertPlan(store, try request("age == 30 OR city == 'Oslo'"),
                   "Union(IndexRange(Person.byAge [30, 30]), IndexRange(Person.byCityAge [\"Oslo\", \"Oslo\"])) → Filter(age == 30 OR city == \"Oslo\")")
        assertPlan(store, try request("age == 30 OR name CONTAINS 'x'"), "Scan(Person) → Filter(age == 30 OR name CONTAINS \"x\")")
        assertPlan(store, try request("age > 30.5"), "Scan(Person) → Filter(age > 30.5)")
        // NOT moves inward when the answers stay the same; an optional attribute keeps its NOT (NULL orders against nothing).
        assertPlan(store, try request("NOT age != 30"), "IndexRange(Person.byAge [30, 30])")
        assertPlan(store, try request("NOT (age != 30 OR city == 'Oslo')"), "IndexRange(Person.byAge [30, 30]) → Filter(NOT (age != 30 OR city == \"Oslo\"))")
        assertPlan(store, try request("NOT name < 'B'"), "IndexRange(Person.byName [\"B\", +inf)) → Filter(NOT name < \"B\") on index entries")
        assertPlan(store, try request("NOT (age != 3 AND age != 4)"), "IndexRange(Person.byAge {3, 4})")
        assertPlan(store, try request("NOT age < 30"), "Scan(Person) → Filter(NOT age < 30)")
        assertPlan(store, try request("NOT name < nil"), "Scan(Person) → Filter(NOT name < nil)")
        // Constants fold away: FALSE decides an AND (nothing is read), TRUE drops out of it.
        assertPlan(store, try request("age == 30 AND FALSEPREDICATE"), "Empty(Person)")
        assertPlan(store, try request("NOT TRUEPREDICATE OR (FALSEPREDICATE AND age > 3)"), "Empty(Person)")
        assertPlan(store, try request("TRUEPREDICATE AND age == 30"), "IndexRange(Person.byAge [30, 30])")
        assertPlan(store, try request("age == 30 OR TRUEPREDICATE"), "Scan(Person) → Filter(age == 30 OR TRUEPREDICATE)")
        assertPlan(store, try request("score < 0", sort: [FetchSortDescriptor(keyPath: "name")], limit: 5),
                   "IndexRange(Person.byScore (-inf, 0.0)) → Sort(name ascending) → Limit(5)")
    }

    @Test func aCountOverAnIndexRangeReadsNoRow() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try insertRows(into: coordinator, people(500, seed: 1))
        let context = ManagedObjectContext(coordinator: coordinator)
        let request = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "age >= 20 AND age <= 29"))
        let counted = try context.count(for: request)
        let fetched = try context.fetchObjectIDs(request).count
        #expect(counted == fetched && counted > 0)
        #expect(store.explain(request).hasPrefix("IndexRange(Person.byAge [20, 29])"))
    }

    /// A range that answers the predicate exactly and streams the requested order stops after offset + limit
    /// entries, where every other path reads each match: under a limit it is chosen without probing any range (the
    /// fixed cost of the small fetches apps make most). Without a limit, or for a count, the sizes are still probed.
    @Test func aCoveredStreamUnderALimitIsChosenWithoutProbing() throws {
        let model = RelationshipLookupTests().packages
        let layout = StoreLayout(model: model)
        let section = ManagedObjectID(entityName: "Section", storeIdentifier: "S", referenceObject: .integer(2))
        var probed: [String] = []
        let statistics = PlanStatistics(entries: { _ in 100_000 }, probe: { range, limit in probed.append(range.table); return limit })
        func plan(_ format: String, _ arguments: [any PredicateArgument], sort: String, limit: Int, type: FetchRequestResultType = .managedObject) throws -> String {
            let request = FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: format, argumentArray: arguments),
                                       sortDescriptors: [FetchSortDescriptor(keyPath: sort, ascending: false)]).with {
                $0.fetchLimit = limit
                $0.resultType = type
            }
            let analysis = QueryPlanner.analyze(request, layout: layout, model: model, storeIdentifier: "S")
            return QueryPlanner.plan(request, layout: layout, model: model, statistics: statistics, analysis: analysis).description
        }
        // The section's largest packages: the compound index led by the to-one.
        #expect(try plan("section == %@", [section], sort: "size", limit: 20) == "IndexRange(Package.bySectionSize [2] reverse) → Limit(20)")
        #expect(probed.isEmpty, "\(probed)")
        #expect(try plan("section == %@", [section], sort: "size", limit: 20, type: .managedObjectID).hasPrefix("IndexRange(Package.bySectionSize [2] reverse)"))
        // A one-attribute range streaming its own attribute.
        #expect(try plan("rank >= 3", [], sort: "rank", limit: 5) == "IndexRange(Package.byRank [3, +inf) reverse) → Limit(5)")
        #expect(probed.isEmpty, "\(probed)")
        // Without a limit the other paths are costed, and so is a count; so is a range that does not answer the
        // predicate (the rows must check the rest).
        _ = try plan("section == %@", [section], sort: "size", limit: 0)
        #expect(!probed.isEmpty)
        probed.removeAll()
        _ = try plan("section == %@", [section], sort: "size", limit: 20, type: .count)
        #expect(!probed.isEmpty)
        probed.removeAll()
        _ = try plan("section == %@ AND name BEGINSWITH 'lib'", [section], sort: "size", limit: 20)
        #expect(!probed.isEmpty)
    }

    @Test func randomPredicatesGiveTheInMemoryStoresResults() throws {
        let folder = StoreFolder()
        let rows = people(400, seed: 99)
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(plannerModel) { try insertRows(into: $0, rows) }
        let plans = try compareRandomFetches(lmdb: lmdbCoordinator, memory: memoryCoordinator, store: store, seed: 7, trials: 1000,
                                             entities: ["Person", "Person", "Student"], sortKeys: ["age", "score", "name", "city"]) { random in
            switch random.next() % 8 {
            case 7:
                // Operators no index answers: the evaluator decides on every row either store reads.
                return "name \(random.pick(["ENDSWITH", "LIKE", "LIKE[c]", "MATCHES", "CONTAINS[cd]"])) '\(random.pick(["n", "Ann*", "Bo.*", "É.*", "Zoe 3"]))'"
            case 0: return "age \(random.pick(["==", "!=", "<", "<=", ">", ">="])) \(random.pick(["0", "17", "30", "59", "60", "-1", "30.5", "nil"]))"
            case 1: return "age BETWEEN {\(random.pick(["10", "20", "45"])), \(random.pick(["15", "30", "59"]))}"
            case 2: return "score \(random.pick(["<", ">=", "==", ">"])) \(random.pick(["0", "-50.5", "12.3", "99.9", "nil", "100"]))"
            case 3:
                let op = random.pick(["BEGINSWITH", "==", "<", ">=", ">", "<=", "BEGINSWITH[c]", "CONTAINS", "BEGINSWITH[cd]", "==[cd]", ">[cd]", "BEGINSWITH[d]",
                                      "==[d]", "==[c]"])
                return "name \(op) '\(random.pick(["An", "Ann", "Ann 3", "B", "É", "Émile 2", "z", "", longName, longName + "a", longName + "b 2", "LLL"]))'"
            case 4:
                if random.next() % 4 == 0 { return "city IN[c] {\(random.pick(["'LIMA', 'oslo'", "'pune'", "'Oslo', 'OSLO', nil"]))}" }
                return "city \(random.pick(["==", "!=", "==[c]", "<[c]", "BEGINSWITH[c]", ">=[c]"])) \(random.pick(["'Oslo'", "'Lima'", "nil", "'OSLO'", "'pU'"]))"
            case 5: return "\(random.pick(["age", "score"])) IN {\(random.pick(["1, 30", "17", "59, 0, 59", "nil, 3", "30.5, 30"]))}"
            default: return random.pick(["30 <= age", "0 > score", "'Bob' == name", "name IN {'Bob', 'Ann', 'Zoe 3'}", "(age == 3 OR age == 40)",
                                         "TRUEPREDICATE", "FALSEPREDICATE", "name IN[d] {'emile 2', 'ANN', 'Zoe'}"])
            }
        }
        let folded = plans.filter { $0.hasPrefix("IndexRange(Person.byFoldedName") || $0.hasPrefix("IndexRange(Person.byCaseCity") }.count
        #expect(folded >= 10, "the trials exercise folded indexes (\(folded) of 1000)")
        // The cost model picks every kind of access path somewhere in the trials.
        for kind in ["Union(", "Intersection(", "IndexRange(", "Scan("] {
            let count = plans.filter { $0.hasPrefix(kind) }.count
            #expect(count >= 10, "the trials exercise \(kind)…) plans (\(count) of 1000)")
        }
        #expect(plans.filter { $0.contains(" reverse)") }.count >= 5)
        #expect(plans.filter { $0.contains("on index entries") }.count >= 20, "the trials exercise residuals checked on index entries")
    }

    /// A string that continues its prefix with a NUL sorts, escaped, between the prefix's own keys and their
    /// successor; a `>` range must not skip it.
    @Test func stringsContinuingWithANulAreGreaterThanTheirPrefix() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(plannerModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        for name in ["Ann", "Ann\u{0}x", "ANN\u{0}", "Anna", "Am"] { try context.insertNewObject(forEntityName: "Person").setValue(name, forKey: "name") }
        try context.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        func names(_ format: String) throws -> [String] {
            try reader.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: format)))
                .map { $0.value(forKey: "name") as! String }.sorted()
        }
        #expect(try names("name > 'Ann'") == ["Ann\u{0}x", "Anna"])
        #expect(try names("name >[cd] 'ann'") == ["ANN\u{0}", "Ann\u{0}x", "Anna"])
        #expect(try names("name <= 'Ann'") == ["ANN\u{0}", "Am", "Ann"])
    }

    /// Text sorted by its own index streams in index order; values too long for a key, cut to a shared prefix and
    /// ordered by digest in the index, are put back in value order (ties in key order), both ways, at every limit.
    @Test func longTextStreamsInValueOrder() throws {
        let folder = StoreFolder()
        let names = [longName + "b", "Zed", longName + "a", longName, "Al", longName + "ab", longName + "a", String(repeating: "L", count: 495), "Lx"]
        let (lmdb, store, memory) = try folder.twinStores(plannerModel) { coordinator in
            let context = ManagedObjectContext(coordinator: coordinator)
            for name in names { try context.insertNewObject(forEntityName: "Person").setValue(name, forKey: "name") }
            try context.save()
        }
        for ascending in [true, false] {
            for limit in [0, 1, 2, 3, 5, 8] {
                let request = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "name >= 'A'"),
                                           sortDescriptors: [FetchSortDescriptor(keyPath: "name", ascending: ascending)]).with { $0.fetchLimit = limit }
                #expect(!store.explain(request).contains("Sort("), "\(store.explain(request))")
                let mine = try ManagedObjectContext(coordinator: lmdb).fetch(request).map { $0.objectID.referenceObject }
                let theirs = try ManagedObjectContext(coordinator: memory).fetch(request).map { $0.objectID.referenceObject }
                #expect(mine == theirs, "ascending \(ascending) limit \(limit)")
            }
        }
    }

    /// `SELF == %@` and `SELF IN %@` read exactly those rows by key, and answer as a scan with the same predicate does.
    @Test func selfComparisonsBecomeKeyLookups() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(plannerModel)
        try insertRows(into: coordinator, people(60, seed: 4))
        let context = ManagedObjectContext(coordinator: coordinator)
        let all = try context.fetch(FetchRequest(entityName: "Person", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
        let student = try #require(all.first { $0.entity.name == "Student" })
        let person = try #require(all.first { $0.entity.name == "Person" })
        let gone = all.last { $0.entity.name == "Person" && $0 !== person }!
        let goneID = gone.objectID
        context.delete(gone)
        try context.save()
        let foreign = ManagedObjectID(entityName: "Person", storeIdentifier: UUID().uuidString, referenceObject: person.objectID.referenceObject)
        let keys = [person, student].map { object -> Int64 in
            if case .integer(let key) = object.objectID.referenceObject { return key }
            return -1
        }.sorted()

        assertPlan(store, FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF == %@", person)),
                   "KeyLookup(Person {\(keys.first { "\($0)" == person.objectID.referenceObject.description }!)})")
        let set = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF IN %@ AND age > 3", [student.objectID, person.objectID]))
        // Only the other operand is left to check on the rows read.
        #expect(store.explain(set) == "KeyLookup(Person {\(keys.map(String.init).joined(separator: ", "))}) → Filter(age > 3)")

        let ids: [ManagedObjectID] = [person.objectID, student.objectID, goneID, foreign, person.objectID]
        for (format, entity, includesSubentities) in [("SELF IN %@", "Person", true), ("SELF IN %@", "Person", false), ("SELF IN %@", "Student", true),
                                                       ("SELF IN %@ AND age >= 10", "Person", true), ("NOT SELF IN %@", "Person", true)] {
            let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format, ids)).with { $0.includesSubentities = includesSubentities }
            // The same predicate ORed with a term no index answers is no conjunction of terms: the planner scans.
            let scanned = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "(\(format)) OR name CONTAINS 'no such name'", ids))
                .with { $0.includesSubentities = includesSubentities }
            #expect(store.explain(scanned).hasPrefix("Scan("))
            let fresh = ManagedObjectContext(coordinator: coordinator)
            #expect(try fresh.fetchObjectIDs(request) == fresh.fetchObjectIDs(scanned), "\(format) on \(entity)")
            #expect(try fresh.count(for: request) == fresh.count(for: scanned), "count of \(format) on \(entity)")
        }
        let one = try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "SELF == %@", goneID)))
        #expect(one.isEmpty, "a deleted object was found by key")
    }

    /// Twelve thousand objects are still read by key (a scan comparing every row with every object took minutes),
    /// and the plan prints the first keys and how many more.
    @Test func aLookupOfManyObjectsIsStillAKeyLookup() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Tag") { AttributeDescription("n", .integer32) }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<12_500 { try setup.insertNewObject(forEntityName: "Tag").setValue(Int32(n), forKey: "n") }
        try setup.save()
        let all = try setup.fetchObjectIDs(FetchRequest(entityName: "Tag"))
        let wanted = all.enumerated().filter { $0.offset % 25 != 3 }.map(\.element)  // 12 000 of them
        #expect(wanted.count == 12_000)
        let request = FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "SELF IN %@", wanted.reversed() as [ManagedObjectID]))
        let plan = store.explain(request)
        #expect(plan.hasPrefix("KeyLookup(Tag {1, 2, 3, 5,") && plan.hasSuffix(", … 11980 more})"), "\(plan)")
        let context = ManagedObjectContext(coordinator: coordinator)
        #expect(try context.fetchObjectIDs(request) == wanted, "in key order, each once")
        #expect(try context.count(for: request) == 12_000)
        let filtered = FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "SELF IN %@ AND n < 100", wanted))
        #expect(try context.fetchObjectIDs(filtered) == Array(wanted.prefix { (setup.object(with: $0)["n"] as! Int32) < 100 }))
        // Two lookups, one inside a nested AND: only the one that chose the rows is left unchecked.
        let few = Array(all.prefix(10))
        let nested = FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "(n < 100 AND SELF IN %@) AND SELF IN %@", wanted, few))
        let both = Set(wanted).intersection(few)
        // Built by combining predicates, the AND nests: the lookup's operand is found wherever it is.
        let combined = FetchRequest(entityName: "Tag", predicate: FetchPredicate.and([
            try FetchPredicate(format: "n < 100 AND SELF IN %@", wanted), try FetchPredicate(format: "SELF IN %@", few)]))
        #expect(try context.fetchObjectIDs(combined) == few.filter { both.contains($0) }, "\(store.explain(combined))")
        let doubled = FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "NOT (NOT (n < 100 AND SELF IN %@)) AND SELF IN %@", wanted, few))
        #expect(try context.fetchObjectIDs(doubled) == few.filter { both.contains($0) }, "\(store.explain(doubled))")
        #expect(try context.fetchObjectIDs(nested) == few.filter { both.contains($0) }, "\(store.explain(nested))")
        let swapped = FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "SELF IN %@ AND (n < 100 AND SELF IN %@)", few, wanted))
        #expect(try context.fetchObjectIDs(swapped) == few.filter { both.contains($0) }, "\(store.explain(swapped))")
    }

    /// A lookup that answers the whole predicate reads each row's entity tag only: a value damaged elsewhere is found
    /// when that object loads, a damaged tag is an error naming the row, and an ID naming another entity of the
    /// table is no object.
    @Test func aLookupReadsTagsOnlyAndStillNamesADamagedOne() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Shape") { AttributeDescription("name", .string) }
            EntityDescription("Circle", parent: "Shape") { AttributeDescription("radius", .double, isOptional: true) }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let shapes = try (0..<4).map { n -> ManagedObject in
            let shape = try setup.insertNewObject(forEntityName: n == 3 ? "Circle" : "Shape")
            try shape.setValue("shape \(n)", forKey: "name")
            return shape
        }
        try setup.save()
        let ids = shapes.map(\.objectID)
        setup.reset()  // no row stays cached: each load below reads the file
        // The circle's key under the name of the parent entity: not that object.
        guard case .integer(let circleKey) = ids[3].referenceObject else { Issue.record("not an integer key"); return }
        let misnamed = ManagedObjectID(entityName: "Shape", storeIdentifier: store.identifier, referenceObject: .integer(circleKey))
        let request = FetchRequest(entityName: "Shape", predicate: try FetchPredicate(format: "SELF IN %@", ids + [misnamed]))
        #expect(store.explain(request).hasPrefix("KeyLookup"))
        try damageRow(of: ids[1], in: "Shape", of: store) { $0[$0.count - 6] ^= 0xFF }  // a value, not the tag
        let context = ManagedObjectContext(coordinator: coordinator)
        let fetched = try context.fetchObjectIDs(request)
        #expect(fetched == ids, "\(fetched) vs \(ids)")
        #expect(try context.count(for: request) == 4)
        let damaged = context.object(with: ids[1])
        _ = damaged.value(forKey: "name")
        #expect(damaged.faultError?.message.contains("checksum") == true, "\(String(describing: damaged.faultError))")
        try damageRow(of: ids[2], in: "Shape", of: store) { $0[2] = 0x7F }  // the entity tag
        do {
            _ = try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(request)
            Issue.record("a row with a damaged entity tag was taken for an object")
        } catch let error as ManagedObjectContextError {
            let key = try store.key(of: ids[2])
            #expect(error.code == .storeUnusable && error.message.contains("with key \(key)"), "\(error)")
        }
    }

    /// The IDs of a lookup come out each once and in ID order, whether they are of one entity with integer keys (ordered
    /// by key) or not (ordered by comparing IDs).
    @Test func aLookupsIDsAreOrderedAndUnique() {
        let store = "6B1E0D16-0000-4000-8000-000000000001"
        func id(_ entity: String, _ key: Int64) -> ManagedObjectID { ManagedObjectID(entityName: entity, storeIdentifier: store, referenceObject: .integer(key)) }
        let mixed = [id("B", 9), id("A", 3), id("B", 2), id("A", 3), id("B", 9), id("A", 1)]
        #expect(QueryPlanner.keyOrdered(mixed) == [id("A", 1), id("A", 3), id("B", 2), id("B", 9)])
        let one = [7, 3, 7, 10, 1, 3].map { id("A", Int64($0)) }
        #expect(QueryPlanner.keyOrdered(one) == [1, 3, 7, 10].map { id("A", Int64($0)) })
        let named = ManagedObjectID(entityName: "A", storeIdentifier: store, referenceObject: .string("x"))
        #expect(QueryPlanner.keyOrdered([named, id("A", 5), id("A", 5)]) == [id("A", 5), named])
        #expect(QueryPlanner.keyOrdered([]).isEmpty)
    }
}


/// Comparisons through a to-one: the destination's index and the to-one table find the candidates.
@Suite(.onEveryEngine) struct JoinPlannerTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Team") {
            AttributeDescription("name", .string)
            AttributeDescription("size", .integer32, isOptional: true)
            RelationshipDescription("members", destination: "Member", inverse: "team", toMany: true)
            FetchIndexDescription("byName", properties: ["name"])
            FetchIndexDescription("bySize", properties: ["size"])
        }
        EntityDescription("Squad", parent: "Team") {
            AttributeDescription("motto", .string, isOptional: true)
        }
        EntityDescription("Member") {
            AttributeDescription("name", .string)
            AttributeDescription("age", .integer32, isOptional: true)
            RelationshipDescription("team", destination: "Team", inverse: "members")
        }
        EntityDescription("Captain", parent: "Member") {
            AttributeDescription("rank", .integer16, defaultValue: 1)
        }
    }

    func load(_ coordinator: PersistentStoreCoordinator) throws {
        var random = SplitMix64(seed: 5)
        let context = ManagedObjectContext(coordinator: coordinator)
        let teams = try (0..<20).map { n in
            let team = try context.insertNewObject(forEntityName: n % 4 == 0 ? "Squad" : "Team")
            try team.setValue(["Red", "Blue", "Green", "Gold", "Grey", "Ruby"][Int(random.next() % 6)] + (n % 3 == 0 ? "" : " \(n)"), forKey: "name")
            if random.next() % 5 != 0 { try team.setValue(Int32(random.next() % 12), forKey: "size") }
            return team
        }
        for n in 0..<300 {
            let member = try context.insertNewObject(forEntityName: random.next() % 5 == 0 ? "Captain" : "Member")
            try member.setValue(["Ann", "Bob", "Cy"][Int(random.next() % 3)] + " \(n % 11)", forKey: "name")
            if random.next() % 6 != 0 { try member.setValue(Int32(random.next() % 50), forKey: "age") }
            if random.next() % 8 != 0 { try member.setValue(teams[Int(random.next() % 20)], forKey: "team") }
        }
        try context.save()
    }

    @Test func comparisonsThroughAToOneJoinThroughItsIndex() throws {
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(model)
        func request(_ format: String) throws -> FetchRequest { FetchRequest(entityName: "Member", predicate: try FetchPredicate(format: format)) }
        assertPlan(store, try request("team.name == 'Red'"), "Join(IndexRange(Team.byName [\"Red\", \"Red\"]) → Member.team) → Filter(team.name == \"Red\")")
        assertPlan(store, try request("age > 3 AND team.size BETWEEN {2, 4}"),
                   "Join(IndexRange(Team.bySize [2, 4]) → Member.team) → Filter(age > 3 AND team.#size BETWEEN {2, 4})")
        assertPlan(store, try request("team.size IN {1, 3}"), "Join(IndexRange(Team.bySize {1, 3}) → Member.team) → Filter(team.#size IN {1, 3})")
        // True for members without a team, or not a comparison with a constant: no join.
        assertPlan(store, try request("team.name != 'Red'"), "Scan(Member) → Filter(team.name != \"Red\")")
        assertPlan(store, try request("team.name == nil"), "Scan(Member) → Filter(team.name == nil)")
        // No index answers the comparison: the 20 teams are scanned and checked, not the 300 members — and that
        // answers it exactly, so the members' rows are not read to check it again (unless another term needs them).
        assertPlan(store, try request("team.name ==[c] 'red'"), "Join(Scan(Team) → Filter(name ==[c] \"red\") → Member.team)")
        assertPlan(store, try request("team.name ==[c] 'red' AND age > 3"),
                   "Join(Scan(Team) → Filter(name ==[c] \"red\") → Member.team) → Filter(team.name ==[c] \"red\" AND age > 3)")
        assertPlan(store, try request("team.members.@count > 2"), "Scan(Member) → Filter(team.members.@count > 2)")
    }

    /// Object IDs of one key of a one-attribute index (`size == k`), made as the entries come: the window (offsets and
    /// limits past the end too), the fetched entity's family (a sub-entity alone, or a parent without its
    /// sub-entities) — as the in-memory store answers.
    @Test func idsOfOneIndexKeyKeepTheirWindowAndFamily() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(model, load)
        var checked = 0
        for entity in ["Team", "Squad"] {
            for subentities in [true, false] {
                for size in 0..<12 {
                    for (offset, limit) in [(0, 0), (1, 0), (0, 1), (1, 2), (3, 0), (20, 0), (0, 20)] {
                        var request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "#size == %@", size))
                        request.includesSubentities = subentities
                        request.fetchOffset = offset
                        request.fetchLimit = limit
                        #expect(store.explain(request).hasPrefix("IndexRange(Team.bySize"), "\(store.explain(request))")
                        let mine = try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(request).map(\.referenceObject)
                        let theirs = try ManagedObjectContext(coordinator: memory).fetchObjectIDs(request).map(\.referenceObject)
                        #expect(mine == theirs, "\(entity) size \(size), subentities \(subentities), offset \(offset), limit \(limit)")
                        if !theirs.isEmpty { checked += 1 }
                    }
                }
            }
        }
        #expect(checked > 40, "the windows hold IDs (\(checked))")
    }

    @Test func randomJoinsGiveTheInMemoryStoresResults() throws {
        let folder = StoreFolder()
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(model, load)
        let plans = try compareRandomFetches(lmdb: lmdbCoordinator, memory: memoryCoordinator, store: store, seed: 17, trials: 400,
                                             entities: ["Member", "Member", "Captain"], sortKeys: ["age", "name", "team.name"]) { random in
            switch random.next() % 6 {
            case 0: return "team.name \(random.pick(["==", "BEGINSWITH", "<", ">=", "!=", "=="])) '\(random.pick(["Red", "Gr", "Gold 4", "Ruby 10", "B", "", "Zed"]))'"
            case 1: return "team.size \(random.pick(["==", "<", ">", "<=", "!="])) \(random.pick(["0", "3", "11", "nil", "5.5"]))"
            case 2: return random.pick(["team.size BETWEEN {2, 6}", "team.name IN {'Red', 'Blue 2', 'Gold'}", "team.size IN {1, nil, 7}", "'Red' == team.name",
                                        "team.name ==[c] 'red'", "team.name BEGINSWITH[cd] 'gr'"])
            case 3: return "age \(random.pick(["<", ">=", "=="])) \(random.pick(["10", "25", "nil"]))"
            case 4: return "name BEGINSWITH '\(random.pick(["A", "Bob 1", "C"]))'"
            default: return random.pick(["team == nil", "team != nil", "NOT team.name BEGINSWITH 'R'"])
            }
        }
        let joins = plans.filter { $0.hasPrefix("Join(") }.count
        #expect(joins > 50, "the trials exercise joins (\(joins) of 400)")
        let scans = plans.filter { $0.hasPrefix("Join(Scan(") }.count
        #expect(scans > 5, "and joins through a scan of the teams (\(scans) of 400)")
    }
}
