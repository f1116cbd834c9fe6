import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// A model with covering indexes: `byAge` stores a score, a date, a flag and a UUID (which sorts by the values'
/// general comparison, not as words); the compound `byCityAge` stores the
/// score; `byName` stores nothing. Students (a sub-entity) share the tables.
let coveringModel = try! ManagedObjectModel {
    EntityDescription("Person") {
        AttributeDescription("name", .string)
        AttributeDescription("age", .integer32, isOptional: true)
        AttributeDescription("score", .double, isOptional: true)
        AttributeDescription("joined", .date, isOptional: true)
        AttributeDescription("active", .boolean, defaultValue: false)
        AttributeDescription("city", .string, isOptional: true)
        AttributeDescription("badge", .uuid, isOptional: true)
        FetchIndexDescription("byAge", properties: ["age"], storing: ["score", "joined", "active", "badge"])
        FetchIndexDescription("byCityAge", elements: [.ascending("city"), .ascending("age")], storing: ["score"])
        FetchIndexDescription("byName", properties: ["name"])
        FetchIndexDescription("byActiveAge", elements: [.ascending("active"), .descending("age")], storing: ["joined"])
    }
    EntityDescription("Student", parent: "Person") {
        AttributeDescription("grade", .integer16, defaultValue: 1)
    }
}

@Suite(.onEveryEngine) struct CoveringIndexTests {
    func people(_ count: Int, seed: UInt64) -> [[String: Any]] {
        var random = SplitMix64(seed: seed)
        let start = Date(timeIntervalSinceReferenceDate: 700_000_000)
        return (0..<count).map { n in
            var values: [String: Any] = ["name": "P\(n % 37)", "active": random.next() % 3 == 0]
            if random.next() % 8 != 0 { values["age"] = Int32(random.next() % 40) }
            // Many ties, NULLs, and both zeros: ties must stay in row-key order, -0 equal to +0.
            if random.next() % 6 != 0 { values["score"] = [-0.0, 0.0, 1.5, -2.25, 99, 12.5, -1e300, 7][Int(random.next() % 8)] }
            if random.next() % 5 != 0 { values["joined"] = start.addingTimeInterval(Double(random.next() % 50) * 86_400) }
            if random.next() % 2 == 0 { values["city"] = ["Oslo", "Lima", "Pune"][Int(random.next() % 3)] }
            if random.next() % 3 != 0 { values["badge"] = UUID(uuidString: "00000000-0000-0000-0000-00000000000\(random.next() % 10)")! }
            values["entity"] = random.next() % 4 == 0 ? "Student" : "Person"
            return values
        }
    }

    func request(_ format: String, sort: [FetchSortDescriptor] = [], limit: Int = 0, offset: Int = 0) throws -> FetchRequest {
        FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: format), sortDescriptors: sort)
            .with { $0.fetchLimit = limit; $0.fetchOffset = offset }
    }

    @Test func sortsAndFiltersOnStoredValuesGetEntryPlans() throws {
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(coveringModel)
        assertPlan(store, try request("age >= 20 AND age < 30", sort: [FetchSortDescriptor(keyPath: "score", ascending: false)], limit: 10),
                   "IndexRange(Person.byAge [20, 30)) → Sort(score descending) on index entries → Limit(10)")
        assertPlan(store, try request("age == 20 AND score > 5"), "IndexRange(Person.byAge [20, 20]) → Filter(age == 20 AND score > 5) on index entries")
        assertPlan(store, try request("age == 20 AND score < 1", sort: [FetchSortDescriptor(keyPath: "joined"), FetchSortDescriptor(keyPath: "score")]),
                   "IndexRange(Person.byAge [20, 20]) → Filter(age == 20 AND score < 1) on index entries → Sort(joined ascending, score ascending) on index entries")
        assertPlan(store, try request("city == 'Oslo'", sort: [FetchSortDescriptor(keyPath: "score")], limit: 3),
                   "IndexRange(Person.byCityAge [\"Oslo\", \"Oslo\"]) → Filter(city == \"Oslo\") on index entries → Sort(score ascending) on index entries → Limit(3)")
        // What the entries do not hold is read from the rows: a sort by name, a filter on name.
        assertPlan(store, try request("age == 20", sort: [FetchSortDescriptor(keyPath: "name")], limit: 10),
                   "IndexRange(Person.byAge [20, 20]) → Sort(name ascending) → Limit(10)")
        assertPlan(store, try request("age == 20 AND name == 'P1'"), "IndexRange(Person.byAge [20, 20]) → Filter(age == 20 AND name == \"P1\")")
    }

    @Test func theIndexStoringWhatTheRequestReadsIsChosen() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("age", .integer32, isOptional: true)
                AttributeDescription("score", .double, isOptional: true)
                AttributeDescription("rank", .integer16, isOptional: true)
                FetchIndexDescription("byAge", properties: ["age"])
                FetchIndexDescription("byAgeRank", properties: ["age"], storing: ["rank"])
                FetchIndexDescription("byAgeScore", properties: ["age"], storing: ["score"])
            }
        }
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(model)
        // Nothing stored is read: the plain index, whose entries are smallest.
        assertPlan(store, try request("age == 3"), "IndexRange(Person.byAge [3, 3])")
        assertPlan(store, try request("age >= 3", sort: [FetchSortDescriptor(keyPath: "score")], limit: 5),
                   "IndexRange(Person.byAgeScore [3, +inf)) → Sort(score ascending) on index entries → Limit(5)")
        assertPlan(store, try request("age == 3 AND rank > 1"), "IndexRange(Person.byAgeRank [3, 3]) → Filter(age == 3 AND rank > 1) on index entries")
    }

    @Test func fetchesAnsweredFromEntriesReadNoRow() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(coveringModel)
        try insertRows(into: coordinator, people(300, seed: 5))
        let sorted = try request("age >= 10 AND age < 30 AND score >= 0", sort: [FetchSortDescriptor(keyPath: "score", ascending: false),
                                                                             FetchSortDescriptor(keyPath: "joined")], limit: 25, offset: 3)
        let expected = try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(sorted)
        let count = try ManagedObjectContext(coordinator: coordinator).count(for: sorted)
        #expect(expected.count == 25)
        // With every row unreadable, the IDs, their count and the faults still come: only the entries were read.
        try breakEveryRow(of: "Person", in: store)
        let context = ManagedObjectContext(coordinator: coordinator)
        #expect(try context.fetchObjectIDs(sorted) == expected)
        #expect(try context.count(for: sorted) == count)
        #expect(try context.fetch(sorted).map(\.objectID) == expected)
        // A fetch that needs a row's value says the row is damaged.
        #expect(throws: ManagedObjectContextError.self) {
            try context.fetchObjectIDs(try request("age == 12", sort: [FetchSortDescriptor(keyPath: "name")], limit: 5))
        }
    }

    @Test func randomFetchesGiveTheInMemoryStoresResults() throws {
        let folder = StoreFolder()
        let rows = people(400, seed: 41)
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(coveringModel) { try insertRows(into: $0, rows) }
        let plans = try compareRandomFetches(lmdb: lmdbCoordinator, memory: memoryCoordinator, store: store, seed: 43, trials: 500,
                                             entities: ["Person", "Person", "Student"], sortKeys: ["score", "joined", "active", "badge", "age", "name"]) { random in
            switch random.next() % 6 {
            case 0: return "age \(random.pick(["==", "<", ">=", "!="])) \(random.pick(["0", "12", "20", "39", "nil"]))"
            case 1: return "age BETWEEN {\(random.pick(["5", "20"])), \(random.pick(["15", "30"]))}"
            case 2: return "score \(random.pick(["<", ">=", "==", ">", "!="])) \(random.pick(["0", "-0.0", "7", "-2.25", "nil", "1e301"]))"
            case 3: return "joined \(random.pick(["<", ">=", "=="])) CAST(\(random.pick(["700000000", "701000000", "703000000"])), 'NSDate')"
            case 4: return "city \(random.pick(["==", "!="])) \(random.pick(["'Oslo'", "'Lima'", "nil"]))"
            default: return random.pick(["active == YES", "active == NO", "name == 'P3'", "name BEGINSWITH 'P1'", "TRUEPREDICATE"])
            }
        }
        #expect(plans.filter { $0.contains("on index entries → Limit") || $0.hasSuffix("on index entries") && $0.contains("Sort(") }.count >= 20,
                "the trials sort on index entries")
        #expect(plans.filter { $0.contains("Sort(") && $0.contains(") on index entries") }.count >= 20)
        // A UUID key sorts on the entries too, through the values' general comparison.
        #expect(plans.filter { $0.contains("Sort(badge") && $0.contains(") on index entries") }.count >= 3)
    }

    @Test func sortsOfSeveralKeysReadElementsAndStoredValues() throws {
        let folder = StoreFolder()
        let rows = people(300, seed: 12)
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(coveringModel) { try insertRows(into: $0, rows) }
        let sorts: [[FetchSortDescriptor]] = [
            // A descending key element (stored inverted) and a stored date; then the reverse directions.
            [FetchSortDescriptor(keyPath: "age"), FetchSortDescriptor(keyPath: "joined", ascending: false)],
            [FetchSortDescriptor(keyPath: "age", ascending: false), FetchSortDescriptor(keyPath: "joined")],
            [FetchSortDescriptor(keyPath: "joined"), FetchSortDescriptor(keyPath: "age")],
        ]
        for active in ["YES", "NO"] {
            for sort in sorts {
                for (limit, offset) in [(0, 0), (7, 0), (5, 3)] {
                    let request = try request("active == \(active)", sort: sort, limit: limit, offset: offset)
                    #expect(store.explain(request).hasPrefix("IndexRange(Person.byActiveAge"), "\(store.explain(request))")
                    #expect(store.explain(request).contains("on index entries"), "\(store.explain(request))")
                    let mine = try ManagedObjectContext(coordinator: lmdbCoordinator).fetchObjectIDs(request).map(\.referenceObject)
                    let theirs = try ManagedObjectContext(coordinator: memoryCoordinator).fetchObjectIDs(request).map(\.referenceObject)
                    #expect(mine == theirs && !mine.isEmpty, "active \(active), \(sort), limit \(limit) offset \(offset)")
                }
            }
        }
    }

    @Test func dictionaryFetchesOfStoredValuesComeFromEntries() throws {
        let folder = StoreFolder()
        let rows = people(200, seed: 8)
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(coveringModel) { try insertRows(into: $0, rows) }
        var request = try request("age >= 10 AND age <= 20 AND score > 1", sort: [FetchSortDescriptor(keyPath: "score"), FetchSortDescriptor(keyPath: "age")])
        request.resultType = .dictionary
        request.propertiesToFetch = [.keyPath("age"), .keyPath("score"), .keyPath("joined")]
        let theirs = try ManagedObjectContext(coordinator: memoryCoordinator).fetchDictionaries(request)
        let mine = try ManagedObjectContext(coordinator: lmdbCoordinator).fetchDictionaries(request)
        #expect(mine == theirs && !mine.isEmpty)
        try breakEveryRow(of: "Person", in: store)
        #expect(try ManagedObjectContext(coordinator: lmdbCoordinator).fetchDictionaries(request) == theirs, "answered by the entries alone")
    }

    @Test func savesKeepTheStoredValuesCurrent() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(coveringModel)
        try insertRows(into: coordinator, people(120, seed: 3))
        let byScore = try request("age >= 0", sort: [FetchSortDescriptor(keyPath: "score", ascending: false)], limit: 1)
        let context = ManagedObjectContext(coordinator: coordinator)
        let ids = try context.fetchObjectIDs(try request("age >= 0"))
        // An update of a stored attribute alone moves the entry's value; one of an element moves its key.
        let chosen = context.object(with: ids[17])
        try chosen.setValue(1e6, forKey: "score")
        try context.save()
        #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(byScore) == [ids[17]])
        try chosen.setValue(Int32(39), forKey: "age")
        try chosen.setValue(nil, forKey: "score")
        try context.save()
        #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(byScore) != [ids[17]])
        #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(
            try request("age == 39 AND score == nil")).contains(ids[17]))
        context.delete(context.object(with: ids[3]))
        try context.save()
        #expect(try store.verify().isEmpty)
        #expect(try !ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(try request("age >= 0", sort: [FetchSortDescriptor(keyPath: "joined")]))
            .contains(ids[3]))
    }

    @Test func aDamagedStoredValueIsFoundAndNeverSortedSilently() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(coveringModel)
        try insertRows(into: coordinator, people(60, seed: 9))
        let state = try store.open
        let table = store.database("index/Person/byAge", in: state)
        // The stored score of one entry with an age: its 0x21 (double) tag replaced by 0x30 (text), so it no longer decodes.
        try state.environment.write { transaction in
            var found: (key: [UInt8], value: [UInt8])?
            try table.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    if entry.key.first == 0x20, entry.value.count > 10, entry.value[10] == 0x21 { found = (entry.keyBytes, Array(entry.value)); return false }
                    return true
                }
            }
            let (key, value) = try #require(found)
            var damaged = value
            damaged[10] = 0x30
            _ = try table.delete(key: key, value: value, in: transaction)
            try table.put(damaged, forKey: key, in: transaction)
        }
        #expect(try store.verify().contains { $0.hasPrefix("index/Person/byAge:") })
        let sorted = try request("age >= 0", sort: [FetchSortDescriptor(keyPath: "score")], limit: 5)
        #expect(store.explain(sorted).contains("Sort(score ascending) on index entries"))
        let error = try #require(throws: ManagedObjectContextError.self) { try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(sorted) }
        #expect(error.message.contains("index/Person/byAge") && error.message.contains("damaged"))
        // A value shorter than a row's reference is damage too, named with its table.
        try state.environment.write { transaction in
            try table.put([1, 2, 3], forKey: [0x20, 0x80, 0, 0, 0, 0, 0, 0, 5], in: transaction)
        }
        let short = try #require(throws: ManagedObjectContextError.self) {
            try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(try request("age == 5"))
        }
        #expect(short.message.contains("index/Person/byAge") && short.message.contains("3-byte value"))
    }
}
