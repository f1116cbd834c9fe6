import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// The comparisons Core Data apps write most about relationships — `department == %@`, `department IN %@`,
/// `ANY tags == %@`, `%@ IN tags` — answered from the table that keeps the relationship from the objects' side
/// (`toone/…`, or the inverse's `members/…` or `link/…`) instead of a scan. Every answer is checked against the objects themselves.
@Suite(.onEveryEngine) struct RelationshipLookupTests {
    let fixture = ToManyJoinTests()

    /// What `request` fetches, by key, with its count and its IDs, all three ways; expects them to agree with
    /// `expected` (IDs in key order, as a fetch without a sort gives them).
    func expectAnswers(_ coordinator: PersistentStoreCoordinator, _ request: FetchRequest, _ expected: [ManagedObjectID],
                       sourceLocation: SourceLocation = #_sourceLocation) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        let objects = try context.fetch(request).map(\.objectID)
        #expect(objects == expected, "\(request.predicate?.description ?? "")", sourceLocation: sourceLocation)
        #expect(try context.count(for: request) == expected.count, sourceLocation: sourceLocation)
        #expect(try context.fetchObjectIDs(request) == expected, sourceLocation: sourceLocation)
    }

    /// The objects of `entity` (and its sub-entities, unless `subentities` is false) that `matches` keeps, in key order.
    func oracle(_ coordinator: PersistentStoreCoordinator, _ entity: String, subentities: Bool = true,
                _ matches: (ManagedObject) -> Bool) throws -> [ManagedObjectID] {
        let context = ManagedObjectContext(coordinator: coordinator)
        var request = FetchRequest(entityName: entity)
        request.includesSubentities = subentities
        return try context.fetch(request).filter(matches).map(\.objectID).sorted { rowKey($0) < rowKey($1) }
    }

    func rowKey(_ id: ManagedObjectID) -> Int64 {
        if case .integer(let key) = id.referenceObject { return key }
        return 0
    }

    func request(_ entity: String, _ format: String, _ arguments: [any PredicateArgument], subentities: Bool = true) throws -> FetchRequest {
        var request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format, argumentArray: arguments))
        request.includesSubentities = subentities
        return request
    }

    @Test func aToOneComparedWithObjectsReadsItsTable() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(fixture.model)
        try fixture.load(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let shelves = try context.fetch(FetchRequest(entityName: "Shelf", sortDescriptors: [FetchSortDescriptor(keyPath: "label")]))
        let shelf = shelves[3]
        func onShelf(_ wanted: Set<ManagedObjectID>) -> (ManagedObject) -> Bool {
            { book in (book["shelf"] as? ManagedObject).map { wanted.contains($0.objectID) } ?? false }
        }

        let equal = try request("Book", "shelf == %@", [shelf])
        assertPlan(store, equal, "IndexRange(Book.shelf == p\(rowKey(shelf.objectID)))")
        try expectAnswers(coordinator, equal, try oracle(coordinator, "Book", onShelf([shelf.objectID])))
        #expect(try oracle(coordinator, "Book", onShelf([shelf.objectID])).count > 5, "the shelf holds books")
        // An object ID does as well as the object; `IN` takes both, each destination's rows once.
        let some = [shelves[1].objectID, shelves[7].objectID, shelves[12].objectID]
        for within in [try request("Book", "shelf IN %@", [some]), try request("Book", "shelf IN %@", [[shelves[1], shelves[7], shelves[12]]])] {
            #expect(store.explain(within).hasPrefix("IndexRange(Book.shelf IN {"))
            try expectAnswers(coordinator, within, try oracle(coordinator, "Book", onShelf(Set(some))))
        }
        try expectAnswers(coordinator, try request("Book", "%@ == shelf", [shelf.objectID]), try oracle(coordinator, "Book", onShelf([shelf.objectID])))

        // Only the fetched entities' rows: the sub-entity alone, or the entity without its sub-entity.
        try expectAnswers(coordinator, try request("Novel", "shelf == %@", [shelf]), try oracle(coordinator, "Novel", onShelf([shelf.objectID])))
        try expectAnswers(coordinator, try request("Book", "shelf == %@", [shelf], subentities: false),
                          try oracle(coordinator, "Book", subentities: false, onShelf([shelf.objectID])))
        // With other terms, negated, or compared with nil, the answers stay right (the last two scan).
        try expectAnswers(coordinator, try request("Book", "shelf == %@ AND year > 1970", [shelf]), try oracle(coordinator, "Book") {
            onShelf([shelf.objectID])($0) && (($0["year"] as? Int32).map { $0 > 1970 } ?? false)
        })
        let negated = try request("Book", "NOT shelf == %@", [shelf])
        #expect(store.explain(negated).hasPrefix("Scan(Book)"))
        try expectAnswers(coordinator, negated, try oracle(coordinator, "Book") { !onShelf([shelf.objectID])($0) })
        try expectAnswers(coordinator, try request("Book", "shelf == nil", []), try oracle(coordinator, "Book") { $0["shelf"] == nil })
    }

    @Test func objectsThatPointAtNoRowMatchNothing() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(fixture.model)
        try fixture.load(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let shelf = try #require(try context.fetch(FetchRequest(entityName: "Shelf")).first)
        guard case .integer(let key) = shelf.objectID.referenceObject else { Issue.record("an integer key"); return }
        // The same key in another store, an object of another entity with a shelf's key, an unsaved shelf.
        let foreign = ManagedObjectID(entityName: "Shelf", storeIdentifier: UUID().uuidString, referenceObject: .integer(key))
        let author = try #require(try context.fetch(FetchRequest(entityName: "Author")).first)
        let unsaved = try context.insertNewObject(forEntityName: "Shelf")
        for stranger in [foreign, author.objectID, unsaved.objectID] {
            let lookup = try request("Book", "shelf == %@", [stranger])
            #expect(store.explain(lookup) == "IndexRange(Book.shelf == nothing)")
            try expectAnswers(coordinator, lookup, [])
        }
        // Among real ones, strangers are left out.
        let mixed = try request("Book", "shelf IN %@", [[foreign, shelf.objectID, unsaved.objectID]])
        try expectAnswers(coordinator, mixed, try oracle(coordinator, "Book") { ($0["shelf"] as? ManagedObject)?.objectID == shelf.objectID })
    }

    @Test func aManyToManyComparedWithObjectsReadsTheInversesLinks() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(fixture.model)
        try fixture.load(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let authors = try context.fetch(FetchRequest(entityName: "Author", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
            .filter { !$0.relatedObjects(forKey: "books").isEmpty }
        let (first, second) = (authors[0], authors[5])
        func writtenBy(_ wanted: Set<ManagedObjectID>) -> (ManagedObject) -> Bool {
            { book in book.relatedObjects(forKey: "authors").objectIDs.contains { wanted.contains($0) } }
        }
        for format in ["ANY authors == %@", "%@ IN authors"] {
            let lookup = try request("Book", format, [first])
            #expect(store.explain(lookup).hasPrefix("Union(IndexRange(Book.authors == p"), "\(format)")
            try expectAnswers(coordinator, lookup, try oracle(coordinator, "Book", writtenBy([first.objectID])))
        }
        // A book by both authors comes once.
        let either = try request("Book", "ANY authors IN %@", [[first, second]])
        try expectAnswers(coordinator, either, try oracle(coordinator, "Book", writtenBy([first.objectID, second.objectID])))
        // From the other side, and for a sub-entity of the owners.
        let book = try #require(first.relatedObjects(forKey: "books").first { $0["shelf"] != nil })
        let byBook = { (author: ManagedObject) in author.relatedObjects(forKey: "books").objectIDs.contains(book.objectID) }
        try expectAnswers(coordinator, try request("Author", "ANY books == %@", [book]), try oracle(coordinator, "Author", byBook))
        try expectAnswers(coordinator, try request("Editor", "ANY books == %@", [book]), try oracle(coordinator, "Editor", byBook))
        try expectAnswers(coordinator, try request("Author", "ANY books == %@", [book], subentities: false),
                          try oracle(coordinator, "Author", subentities: false, byBook))
        // ALL and NONE hold for owners without members: never through the links.
        let none = try request("Book", "NONE authors == %@", [first])
        #expect(store.explain(none).hasPrefix("Scan(Book)"))
        try expectAnswers(coordinator, none, try oracle(coordinator, "Book") { !writtenBy([first.objectID])($0) })
        // A one-to-many seen from its to-many side has no table keyed by the member: it is scanned, and right.
        let shelf = try #require(book["shelf"] as? ManagedObject)
        let shelfLookup = try request("Shelf", "ANY books == %@", [book])
        #expect(store.explain(shelfLookup).hasPrefix("Scan(Shelf)"))
        try expectAnswers(coordinator, shelfLookup, [shelf.objectID])
    }

    /// Packages in sections, as in Debian's index: a compound index led by the to-one, and a one-attribute index.
    let packages = try! ManagedObjectModel {
        EntityDescription("Section") {
            AttributeDescription("name", .string)
            RelationshipDescription("packages", destination: "Package", inverse: "section", toMany: true)
        }
        EntityDescription("Package") {
            AttributeDescription("name", .string)
            AttributeDescription("size", .integer64)
            AttributeDescription("rank", .integer32, isOptional: true)
            RelationshipDescription("section", destination: "Section", inverse: "packages")
            FetchIndexDescription("bySectionSize", elements: [.ascending("section"), .ascending("size")])
            FetchIndexDescription("byRank", properties: ["rank"])
        }
    }

    /// A sort whose first key an index yields and whose other keys it does not (the largest packages of a section,
    /// ties by name): the index is walked in its order and each run of ties is sorted by the rest, run by run, the
    /// walk stopping once the window is full — the same answers as a full sort, for objects, IDs, windows, both
    /// directions, and a one-attribute index with a range.
    @Test func aStreamOfTheFirstSortKeySortsEachRunOfTiesByTheRest() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(packages)
        let memory = PersistentStoreCoordinator(managedObjectModel: packages)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        for target in [coordinator, memory] {
            var random = SplitMix64(seed: 23)  // the same data in both
            let setup = ManagedObjectContext(coordinator: target)
            let sections = try (0..<3).map { n in
                let section = try setup.insertNewObject(forEntityName: "Section")
                try section.setValue("section \(n)", forKey: "name")
                return section
            }
            for n in 0..<600 {
                let package = try setup.insertNewObject(forEntityName: "Package")
                // Names out of key order, few sizes and ranks (long runs of ties), some ranks NULL.
                try package.setValue("package \((n * 7919) % 600)", forKey: "name")
                try package.setValue(Int64(random.next() % 12), forKey: "size")
                if n % 5 != 0 { try package.setValue(Int64(random.next() % 9), forKey: "rank") }
                try package.setValue(sections[n % 3], forKey: "section")
            }
            try setup.save()
        }
        func names(_ target: PersistentStoreCoordinator, _ request: FetchRequest) throws -> [String] {
            let context = ManagedObjectContext(coordinator: target)
            return try withExtendedLifetime(context) { try context.fetch(request).map { $0["name"] as? String ?? "?" } }
        }
        func section(_ target: PersistentStoreCoordinator) throws -> ManagedObject {
            let context = ManagedObjectContext(coordinator: target)
            return try context.fetch(request("Section", "name == 'section 1'", []))[0]
        }
        for ascending in [false, true] {
            for (limit, offset) in [(20, 0), (7, 5), (0, 0), (1, 199)] {
                func largest(_ target: PersistentStoreCoordinator) throws -> FetchRequest {
                    var request = try request("Package", "section == %@", [section(target)])
                    request.sortDescriptors = [FetchSortDescriptor(keyPath: "size", ascending: ascending), FetchSortDescriptor(keyPath: "name")]
                    request.fetchLimit = limit
                    request.fetchOffset = offset
                    return request
                }
                let plan = store.explain(try largest(coordinator))
                #expect(plan.hasPrefix("IndexRange(Package.bySectionSize") && plan.contains("of each run of equal size"), "\(plan)")
                let expected = try names(memory, try largest(memory))
                #expect(try names(coordinator, try largest(coordinator)) == expected, "ascending \(ascending), limit \(limit), offset \(offset)")
                #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(try largest(coordinator)).count == expected.count)
            }
            var ranked = try request("Package", "rank >= 2 AND rank <= 6", [])
            ranked.sortDescriptors = [FetchSortDescriptor(keyPath: "rank", ascending: ascending), FetchSortDescriptor(keyPath: "size", ascending: false),
                                      FetchSortDescriptor(keyPath: "name")]
            ranked.fetchLimit = 30
            #expect(store.explain(ranked).contains("of each run of equal rank"), "\(store.explain(ranked))")
            #expect(try names(coordinator, ranked) == (try names(memory, ranked)), "ascending \(ascending)")
        }
    }

    /// Debian's question "the largest packages of one section": a compound fetch index whose first element is a
    /// to-one is walked under the section's key, in size order, and stops after the limit.
    @Test func aCompoundIndexThatStartsWithAToOneAnswersEqualitySortedByItsNextElement() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(packages)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let sections = try (0..<4).map { n in
            let section = try setup.insertNewObject(forEntityName: "Section")
            try section.setValue("section \(n)", forKey: "name")
            return section
        }
        var random = SplitMix64(seed: 19)
        for n in 0..<400 {
            let package = try setup.insertNewObject(forEntityName: "Package")
            try package.setValue("package \(n)", forKey: "name")
            try package.setValue(Int64(random.next() % 50), forKey: "size")  // ties, so the order among equal sizes counts too
            try package.setValue(sections[n % 3], forKey: "section")  // the last section stays empty
        }
        try setup.save()

        let section = sections[1]
        let key = rowKey(section.objectID)
        for ascending in [false, true] {
            var largest = try request("Package", "section == %@", [section])
            largest.sortDescriptors = [FetchSortDescriptor(keyPath: "size", ascending: ascending)]
            largest.fetchLimit = 20
            #expect(store.explain(largest).hasPrefix("IndexRange(Package.bySectionSize [\(key)]"), "\(store.explain(largest))")
            // The prefix answers `section == %@` exactly (the index holds the section's key): no row is read to check it.
            #expect(!store.explain(largest).contains("Filter"), "\(store.explain(largest))")
            // The oracle: every package of the section, sorted by size, ties in key order, as a sorted scan orders them.
            let expected = try oracle(coordinator, "Package") { ($0["section"] as? ManagedObject)?.objectID == section.objectID }
                .map { (id: $0, size: setup.object(with: $0)["size"] as! Int64) }
                .enumerated().sorted { ascending ? ($0.element.size, $0.offset) < ($1.element.size, $1.offset)
                                                 : ($0.element.size, $1.offset) > ($1.element.size, $0.offset) }
                .prefix(20).map(\.element.id)
            let context = ManagedObjectContext(coordinator: coordinator)
            #expect(try context.fetch(largest).map(\.objectID) == Array(expected), "ascending: \(ascending)")
            #expect(try context.fetchObjectIDs(largest) == Array(expected))
            largest.fetchOffset = 5
            #expect(try context.fetchObjectIDs(largest) == Array(expected.dropFirst(5)) + (try context.fetchObjectIDs({
                var rest = largest; rest.fetchOffset = 20; rest.fetchLimit = 5; return rest }())))
        }
        // An empty section, a section of another store's kind of object, and an extra term still answer right.
        var empty = try request("Package", "section == %@", [sections[3]])
        empty.sortDescriptors = [FetchSortDescriptor(keyPath: "size", ascending: false)]
        #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(empty).isEmpty)
        var stranger = try request("Package", "section == %@", [setup.object(with: try setup.fetchObjectIDs(FetchRequest(entityName: "Package"))[0])])
        stranger.sortDescriptors = [FetchSortDescriptor(keyPath: "size")]
        #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(stranger).isEmpty)
        var between = try request("Package", "section == %@ AND #size BETWEEN {10, 20}", [section])
        between.sortDescriptors = [FetchSortDescriptor(keyPath: "name")]
        #expect(store.explain(between).hasPrefix("IndexRange(Package.bySectionSize [\(key) × "), "\(store.explain(between))")
        let inRange = try oracle(coordinator, "Package") {
            ($0["section"] as? ManagedObject)?.objectID == section.objectID && (10...20).contains($0["size"] as! Int64)
        }
        #expect(Set(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(between)) == Set(inRange))
        #expect(!inRange.isEmpty)
        // A term the prefix does not answer is still checked on the rows; a count from the prefix alone is LMDB's.
        var named = try request("Package", "section == %@ AND name ENDSWITH '7'", [section])
        named.sortDescriptors = [FetchSortDescriptor(keyPath: "size", ascending: false)]
        #expect(store.explain(named).contains("Filter"), "\(store.explain(named))")
        let endsWith7 = try oracle(coordinator, "Package") {
            ($0["section"] as? ManagedObject)?.objectID == section.objectID && ($0["name"] as! String).hasSuffix("7")
        }
        #expect(Set(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(named)) == Set(endsWith7) && !endsWith7.isEmpty)
        let all = try request("Package", "section == %@", [section])
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: all)
                == (try oracle(coordinator, "Package") { ($0["section"] as? ManagedObject)?.objectID == section.objectID }).count)
    }
}
