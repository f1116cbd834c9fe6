import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// Sorts with a limit that the rows' bytes settle (``TopRows``): every kind of value they order, on every edge of
/// ``FetchSortDescriptor``'s order, against the in-memory store's sort.
@Suite(.onEveryEngine) struct RowSortTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("flag", .boolean, isOptional: true)
            AttributeDescription("count", .integer64, isOptional: true)
            AttributeDescription("small", .integer16, isOptional: true)
            AttributeDescription("ratio", .double, isOptional: true)
            AttributeDescription("single", .float, isOptional: true)
            AttributeDescription("when", .date, isOptional: true)
            AttributeDescription("label", .string, isOptional: true)
            AttributeDescription("amount", .decimal, isOptional: true)
            FetchIndexDescription("byCount", properties: ["count"])
        }
        EntityDescription("Special", parent: "Item") {
            AttributeDescription("extra", .integer32, isOptional: true)
        }
    }

    /// Values on every edge of the order: NULLs, both zeros, infinities, the integers' ends, text that is equal only
    /// canonically (`é` precomposed and as `e` + U+0301), text whose bytes order it differently from its scalars,
    /// prefixes, the empty string, NUL — with many ties, so the row-key tie-break is exercised.
    func items(_ count: Int, seed: UInt64) -> [[String: Any]] {
        var random = SplitMix64(seed: seed)
        let doubles: [Double?] = [nil, -0.0, 0.0, 1.5, -1.5, .infinity, -.infinity, 3, 1e300, -1e-300]
        let integers: [Int64?] = [nil, .min, -1, 0, 1, .max, 7, 7]
        let labels: [String?] = [nil, "é", "e\u{301}", "e\u{301}a", "éa", "E", "e", "ab", "a", "", "Zed", "😀", "a\u{0}", "ﬁ", "\u{2126}", "Ω"]
        let dates: [Date?] = [nil, Date(timeIntervalSinceReferenceDate: -1e9), Date(timeIntervalSinceReferenceDate: 0),
                              Date(timeIntervalSinceReferenceDate: -0.0), Date(timeIntervalSinceReferenceDate: 86_400.5)]
        return (0..<count).map { _ in
            var values: [String: Any] = ["entity": random.next() % 4 == 0 ? "Special" : "Item"]
            if let flag = random.pick([nil, true, false] as [Bool?]) { values["flag"] = flag }
            if let count = random.pick(integers) { values["count"] = count }
            if let small = random.pick([nil, Int16.min, -3, 0, 3, Int16.max] as [Int16?]) { values["small"] = small }
            if let ratio = random.pick(doubles) { values["ratio"] = ratio }
            if let single = random.pick(doubles) { values["single"] = Float(single) }
            if let when = random.pick(dates) { values["when"] = when }
            if let label = random.pick(labels) { values["label"] = label }
            if random.next() % 2 == 0 { values["amount"] = Decimal(Int(random.next() % 7) - 3) / 4 }
            return values
        }
    }

    @Test func limitedSortsAgreeWithTheInMemoryStore() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(model) { try insertRows(into: $0, items(500, seed: 11)) }
        var random = SplitMix64(seed: 5)
        let keys = ["flag", "count", "small", "ratio", "single", "when", "label", "label", "amount"]
        let predicates = [nil, "count > 0", "count BETWEEN {-1, 7}", "label BEGINSWITH 'e'", "ratio < 2 OR flag == YES", "SELF IN %@"]
        var settledByRows = 0
        for trial in 0..<600 {
            let format = random.pick(predicates)
            // `SELF IN` names objects of the store each fetch asks.
            func objects(in coordinator: PersistentStoreCoordinator) -> [ManagedObjectID] {
                (1...40).map { ManagedObjectID(entityName: "Item", storeIdentifier: coordinator.persistentStores[0].identifier, referenceObject: .integer(Int64($0 * 11))) }
            }
            var request = FetchRequest(entityName: random.pick(["Item", "Item", "Special"]), predicate: try format.map { try FetchPredicate(format: $0, objects(in: lmdb)) })
            request.includesSubentities = random.next() % 4 != 0
            request.sortDescriptors = (0...(random.next() % 3)).map { _ in
                FetchSortDescriptor(keyPath: random.pick(keys), ascending: random.next() % 2 == 0,
                                    comparison: random.next() % 6 == 0 ? .caseInsensitive : .default)
            }
            request.fetchLimit = Int(random.next() % 30) + 1
            request.fetchOffset = Int(random.next() % 6)
            let fetched = request.entityName == "Special" ? ["Special"] : request.includesSubentities ? ["Item", "Special"] : ["Item"]
            let family = store.layout.tags(of: Set(fetched.map { store.layout.entity($0)!.tag }))
            if RowSort(request.sortDescriptors, family: family, layout: store.layout) != nil { settledByRows += 1 }
            let described = "trial \(trial): \(request.entityName) \(format ?? "all") sort \(request.sortDescriptors) limit \(request.fetchLimit) offset \(request.fetchOffset)"
            let mine = try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(request).map(\.referenceObject)
            let theirs = try ManagedObjectContext(coordinator: memory)
                .fetchObjectIDs(request.with { $0.predicate = try! format.map { try FetchPredicate(format: $0, objects(in: memory)) } }).map(\.referenceObject)
            #expect(mine == theirs, "\(described), plan \(store.explain(request))")
            let loaded = try ManagedObjectContext(coordinator: lmdb).fetch(request.with { $0.returnsObjectsAsFaults = false })
            #expect(loaded.map(\.objectID.referenceObject) == theirs, "\(described): loaded objects")
            if mine != theirs { break }
        }
        #expect(settledByRows >= 300, "the trials exercise sorts the rows' bytes settle (\(settledByRows) of 600)")
    }

    /// Sorts the rows' bytes cannot settle are left to the general sort: key paths through functions, strings
    /// compared ignoring case, decimals, to-ones, unknown keys.
    @Test func sortsTheBytesCannotSettleAreNotTaken() throws {
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(model)
        let family = store.layout.tags(of: [store.layout.entity("Item")!.tag, store.layout.entity("Special")!.tag])
        func settles(_ descriptors: [FetchSortDescriptor]) -> Bool { RowSort(descriptors, family: family, layout: store.layout) != nil }
        #expect(settles([FetchSortDescriptor(keyPath: "count"), FetchSortDescriptor(keyPath: "label", ascending: false)]))
        #expect(!settles([FetchSortDescriptor(keyPath: "label", comparison: .caseInsensitive)]))
        #expect(!settles([FetchSortDescriptor(keyPath: "label", comparison: .localizedStandard)]))
        #expect(!settles([FetchSortDescriptor(keyPath: "amount")]))
        #expect(!settles([FetchSortDescriptor(keyPath: "count"), FetchSortDescriptor(keyPath: "nothing")]))
        #expect(!settles([FetchSortDescriptor(keyPath: "label.length")]))
        #expect(!settles([]))
        // A sub-entity's own attribute is not in the parent's rows.
        #expect(!settles([FetchSortDescriptor(keyPath: "extra")]))
        let specials = store.layout.tags(of: [store.layout.entity("Special")!.tag])
        #expect(RowSort([FetchSortDescriptor(keyPath: "extra")], family: specials, layout: store.layout) != nil)
    }

    /// A row whose field holds another type than its attribute's (a type byte changed, the checksum made to match)
    /// stops a sorted fetch with an error naming the row and the attribute, instead of sorting it somewhere.
    @Test func aFieldOfTheWrongTypeIsAnErrorNamingTheRow() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        // Counts 0…4, four rows each: the row of key 7 (count 1) ties with three others.
        try insertRows(into: coordinator, (0..<20).map { ["entity": "Item", "count": Int64($0 / 4), "label": "n\($0)"] })
        let victim = ManagedObjectID(entityName: "Item", storeIdentifier: store.identifier, referenceObject: .integer(7))
        let field = store.layout.entity("Item")!.fieldIndex["label"]!
        try damageRow(of: victim, in: "Item", of: store) { row in
            // The text's length prefix now reads as an integer.
            let body = row.count - 4
            let types = RowHeader(row).types
            #expect(row[types + field] == RowCodec.ValueType.string)
            row[types + field] = RowCodec.ValueType.integer
            let checksum = row[..<body].withUnsafeBytes { CRC32C.checksum($0) }
            withUnsafeBytes(of: checksum.bigEndian) { row.replaceSubrange(body..., with: $0) }
        }
        var request = FetchRequest(entityName: "Item", sortDescriptors: [FetchSortDescriptor(keyPath: "label", ascending: false)])
        request.fetchLimit = 3
        // Sorted on the rows, and — streamed from the index on `count` — each run of rows tied on `count` sorted by
        // `label`, on the rows' bytes and (case-insensitively) on their values: every way names the row.
        var ties = request
        ties.predicate = try FetchPredicate(format: "count >= 1")
        ties.sortDescriptors = [FetchSortDescriptor(keyPath: "count"), FetchSortDescriptor(keyPath: "label")]
        var folded = ties
        folded.sortDescriptors[1] = FetchSortDescriptor(keyPath: "label", comparison: .caseInsensitive)
        #expect(store.explain(ties).contains("of each run of equal count") && store.explain(folded).contains("of each run of equal count"))
        for request in [request, ties, folded] {
            do {
                _ = try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(request)
                Issue.record("a row holding an integer in a text field was sorted: \(store.explain(request))")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .storeUnusable && error.message.contains("key 7") && error.message.contains("label holds"), "\(error)")
            }
        }
    }
}
