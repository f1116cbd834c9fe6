import Foundation
import Testing
@testable import ObjectGraph

@Suite struct BatchingAndPrefetchingTests {
    func stack(books: Int) throws -> (PersistentStoreCoordinator, InMemoryStore, [ManagedObjectID]) {
        let (coordinator, stores) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        var authors: [ManagedObject] = []
        for n in 0..<10 { authors.append(try context.make("Author", ["name": "Author \(n)"])) }
        for n in 0..<books {
            let book = try context.make("Book", ["title": "Book \(n)", "pages": n % 500 + 1, "author": authors[n % 10]])
            let chapter = try context.make("Chapter", ["title": "C\(n)"])
            try chapter.setValue(book, forKey: "book")
        }
        try context.save()
        return (coordinator, stores[0], authors.map(\.objectID))
    }

    @Test func aBatchSizeLoadsFaultsABatchAtATime() throws {
        let (coordinator, store, _) = try stack(books: 250)
        let context = ManagedObjectContext(coordinator: coordinator)
        let request = FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "title")]).with { $0.fetchBatchSize = 50 }
        let books = try context.fetch(request)
        let before = store.callCounts
        for book in books { _ = book["title"] }
        let after = store.callCounts
        #expect(after.batchedObjectFaults - before.batchedObjectFaults == 5, "250 objects in batches of 50")
        #expect(after.objectFaults == before.objectFaults, "no single-object faults")
        _ = books[7]["pages"]
        #expect(store.callCounts.batchedObjectFaults == after.batchedObjectFaults)
    }

    /// Without a batch size, a fetch's faults still load together — a hundred at a time, as Core Data's row cache,
    /// filled by the fetch, lets its faults fire without a trip each to the store — and only the batch touched loads.
    @Test func fetchedFaultsLoadTogetherByDefault() throws {
        let (coordinator, store, _) = try stack(books: 250)
        let context = ManagedObjectContext(coordinator: coordinator)
        let books = try context.fetch(FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "title")]))
        #expect(books.count == 250 && books.allSatisfy(\.isFault))
        // A book of the last batch goes away elsewhere before it is touched.
        let other = ManagedObjectContext(coordinator: coordinator)
        let gone = books[230].objectID
        other.delete(other.object(with: gone))
        try other.save()

        let before = store.callCounts
        #expect(books[150]["title"] as? String != nil)
        #expect(books.filter { !$0.isFault }.count == 100 && books[100..<200].allSatisfy { !$0.isFault }, "only the touched object's batch loads")
        for book in books where book.objectID != gone { #expect(book["title"] as? String != nil) }
        let after = store.callCounts
        #expect(after.batchedObjectFaults - before.batchedObjectFaults == 3, "250 objects in batches of 100")
        #expect(after.objectFaults == before.objectFaults, "no single-object faults")
        // The gone book stayed a fault when its batch loaded; touching it reports why on its own.
        #expect(books[230]["title"] == nil && books[230].faultError?.code == .objectNotFound)
        #expect(store.callCounts.objectFaults == after.objectFaults + 1)
    }

    /// `includesPropertyValues = false` is for fetches whose values nobody reads: the results are faults, even when
    /// `returnsObjectsAsFaults` is false, and each loads alone.
    @Test func aFetchWithoutPropertyValuesHandsOutLoneFaults() throws {
        let (coordinator, store, _) = try stack(books: 30)
        let context = ManagedObjectContext(coordinator: coordinator)
        let before = store.callCounts
        let books = try context.fetch(FetchRequest(entityName: "Book").with {
            $0.includesPropertyValues = false
            $0.returnsObjectsAsFaults = false
        })
        #expect(books.count == 30 && books.allSatisfy(\.isFault))
        for book in books.prefix(5) { #expect(book["title"] as? String != nil) }
        let after = store.callCounts
        #expect(after.objectFaults - before.objectFaults == 5 && after.batchedObjectFaults == before.batchedObjectFaults)
        #expect(books.filter { !$0.isFault }.count == 5)
    }

    @Test func walkingAToManyLoadsItsObjectsAWindowAtATime() throws {
        let (coordinator, store, authors) = try stack(books: 2500)  // 250 books per author
        let context = ManagedObjectContext(coordinator: coordinator)
        let books = context.object(with: authors[3]).relatedObjects(forKey: "books")
        #expect(books.count == 250 && RelatedObjects<ManagedObject>.faultBatchSize == 100)
        // A book of the last window goes away elsewhere before the walk reaches it.
        let other = ManagedObjectContext(coordinator: coordinator)
        let gone = books.objectIDs[210]
        let goneTitle = try #require(other.object(with: gone)["title"] as? String)
        other.delete(other.object(with: gone))
        try other.save()

        let before = store.callCounts
        #expect(books[0]["title"] as? String != nil)
        #expect(context.registeredObjects.count == 1 + 100, "the author and the first window")
        var titles = Set<String>()
        for book in books where book.objectID != gone { titles.insert(try #require(book["title"] as? String)) }
        let after = store.callCounts
        #expect(after.batchedObjectFaults - before.batchedObjectFaults == 3, "250 books in windows of 100")
        #expect(after.objectFaults == before.objectFaults, "no single-object faults")
        #expect(titles == Set((0..<250).map { "Book \($0 * 10 + 3)" }).subtracting([goneTitle]))
        // The gone book stayed a fault when its window loaded; touching it reports why on its own.
        let missing = books[210]
        #expect(missing["title"] == nil && missing.faultError?.code == .objectNotFound)
        #expect(store.callCounts.objectFaults == after.objectFaults + 1)
    }

    @Test func walkingBatchedResultsKeepsMemoryBounded() throws {
        let (coordinator, store, _) = try stack(books: 2000)
        let context = ManagedObjectContext(coordinator: coordinator)
        let results = try context.fetchBatched(FetchRequest(entityName: "Book").with { $0.fetchBatchSize = 100 })
        #expect(results.count == 2000)
        let before = store.callCounts.batchedObjectFaults
        var titles = 0
        var kept: ManagedObject?
        for (index, book) in results.enumerated() {
            if book["title"] != nil { titles += 1 }
            if index == 5 { kept = book }
            #expect(context.registeredObjects.count <= 201, "at most the current batch (and the kept object) stay")
        }
        #expect(titles == 2000)
        #expect(store.callCounts.batchedObjectFaults - before == 20)
        #expect(kept.map { context.registeredObject(for: $0.objectID) === $0 } == true, "an object someone holds stays registered")
        #expect(results[1999]["title"] != nil && results[0]["title"] != nil, "random access works")
    }

    @Test func prefetchingTurnsNFaultsIntoOneReadPerStep() throws {
        let (coordinator, store, _) = try stack(books: 120)
        let context = ManagedObjectContext(coordinator: coordinator)
        let request = FetchRequest(entityName: "Chapter").with { $0.relationshipKeyPathsForPrefetching = ["book.author", "book.tags"] }
        let before = store.callCounts
        let chapters = try context.fetch(request)
        let afterFetch = store.callCounts
        for chapter in chapters {
            let book = chapter["book"] as! ManagedObject
            _ = book["title"]
            _ = (book["author"] as? ManagedObject)?["name"]
            _ = book.relatedObjects(forKey: "tags").count
        }
        let afterWalk = store.callCounts
        #expect(afterFetch.batchedObjectFaults - before.batchedObjectFaults == 3, "chapters, books, authors: one read each")
        #expect(afterFetch.batchedRelationshipFaults - before.batchedRelationshipFaults == 1, "one read for every book's tags")
        #expect(afterWalk.objectFaults == afterFetch.objectFaults && afterWalk.relationshipFaults == afterFetch.relationshipFaults,
                "walking the prefetched graph makes no store call")
        #expect(afterWalk.batchedObjectFaults == afterFetch.batchedObjectFaults)
    }
}

@Suite struct DictionaryResultTests {
    func seeded() throws -> (ManagedObjectContext, [ManagedObject]) {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let authors = try ["Ann", "Bo", "Cy"].map { try context.make("Author", ["name": $0]) }
        var books: [ManagedObject] = []
        for n in 0..<30 {
            books.append(try context.make("Book", ["title": "T\(n % 7)", "pages": (n * 37) % 400 + 10, "author": authors[n % 3],
                                                   "price": Decimal(n % 5) + Decimal(string: "0.5")!]))
        }
        try context.save()
        return (context, books)
    }

    @Test func propertiesAndToOneIDsPerObject() throws {
        let (context, books) = try seeded()
        var request = FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "pages")])
        request.resultType = .dictionary
        request.propertiesToFetch = [.keyPath("title"), .keyPath("author"), .keyPath("author.name", as: "authorName")]
        let rows = try context.fetchDictionaries(request)
        let expected = books.sorted { ($0["pages"] as! Int16) < ($1["pages"] as! Int16) }.map { book -> [String: PredicateValue] in
            let author = book["author"] as! ManagedObject
            return ["title": .string(book["title"] as! String), "author": author.objectID.predicateValue, "authorName": .string(author["name"] as! String)]
        }
        #expect(rows == expected)
        #expect(context.lastDictionaryFetchStrategy.contains("in memory"))
        let distinct = try context.fetchDictionaries(request.with { $0.propertiesToFetch = [.keyPath("title")]; $0.returnsDistinctResults = true; $0.sortDescriptors = [] })
        #expect(Set(distinct.map { $0["title"]! }) == Set((0..<7).map { PredicateValue.string("T\($0)") }))
        #expect(distinct.count == 7)
    }

    @Test func groupByWithAggregatesAndHavingEqualsAHandComputation() throws {
        let (context, books) = try seeded()
        var request = FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "author.name", ascending: false)])
        request.resultType = .dictionary
        request.propertiesToGroupBy = ["author.name"]
        request.propertiesToFetch = [.keyPath("author.name"), .aggregate(.count, of: "SELF", as: "books"), .aggregate(.sum, of: "pages", as: "pages"),
                                     .aggregate(.max, of: "price", as: "maxPrice"), .aggregate(.average, of: "pages", as: "meanPages")]
        let rows = try context.fetchDictionaries(request)
        var expected: [[String: PredicateValue]] = []
        for name in ["Cy", "Bo", "Ann"] {
            let group = books.filter { (($0["author"] as! ManagedObject)["name"] as! String) == name }
            let pages = group.map { Int64($0["pages"] as! Int16) }
            expected.append(["author.name": .string(name), "books": .integer(Int64(group.count)), "pages": .integer(pages.reduce(0, +)),
                             "maxPrice": .decimal(group.map { $0["price"] as! Decimal }.max()!),
                             "meanPages": .double(Double(pages.reduce(0, +)) / Double(pages.count))])
        }
        #expect(rows == expected)
        request.havingPredicate = try FetchPredicate(format: "pages > %@", expected[1]["pages"]!)
        let having = try context.fetchDictionaries(request)
        #expect(having.map { $0["author.name"]! } == expected.filter { $0["pages"]! > expected[1]["pages"]! }.map { $0["author.name"]! })
        let total = try context.fetchDictionaries(FetchRequest(entityName: "Book").with {
            $0.resultType = .dictionary
            $0.propertiesToFetch = [.aggregate(.count, of: "SELF", as: "n"), .aggregate(.min, of: "pages", as: "least")]
        })
        #expect(total == [["n": .integer(30), "least": .integer(books.map { Int64($0["pages"] as! Int16) }.min()!)]])
    }
}

extension PredicateValue {
    static func > (lhs: PredicateValue, rhs: PredicateValue) -> Bool {
        FetchSortDescriptor(keyPath: "x").compare(lhs, rhs) > 0
    }
}

@Suite struct NotificationTests {
    @Test func observersSeeExactlyTheChangedAndSavedIDs() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let kept = try context.make("Author", ["name": "Kept"])
        let gone = try context.make("Author", ["name": "Gone"])
        try context.save()
        var events: [ContextEvent] = []
        let token = context.addObserver { events.append($0) }
        let added = try context.make("Author", ["name": "New"])
        try kept.setValue("Renamed", forKey: "name")
        context.delete(gone)
        context.processPendingChanges()
        #expect(events == [.objectsDidChange(ContextChanges(inserted: [added.objectID], updated: [kept.objectID], deleted: [gone.objectID]))])
        events.removeAll()
        try context.save()
        #expect(events == [.didSave(ContextChanges(inserted: [added.objectID], updated: [kept.objectID], deleted: [gone.objectID]))])
        #expect(!added.objectID.isTemporaryID, "the saved IDs are permanent")
        context.removeObserver(token)
        try kept.setValue("Again", forKey: "name")
        try context.save()
        #expect(events.count == 1)
    }

    /// An object that already has changes is not reported to its context again for each further change — until a
    /// notification was posted, a save ran, or a refresh dropped its changes: then its next change is reported,
    /// shows in the next notification and is saved.
    @Test func furtherChangesAreReportedAfterEachNotificationSaveAndRefresh() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "One"])
        try context.save()
        var events: [ContextEvent] = []
        let token = context.addObserver { events.append($0) }
        defer { context.removeObserver(token) }
        try author.setValue("Two", forKey: "name")
        try author.setValue("a@b.c", forKey: "email")
        context.processPendingChanges()
        #expect(events == [.objectsDidChange(ContextChanges(updated: [author.objectID]))])
        events.removeAll()
        // Changed again after the notification: in the next one.
        try author.setValue("Three", forKey: "name")
        context.processPendingChanges()
        #expect(events == [.objectsDidChange(ContextChanges(updated: [author.objectID]))])
        events.removeAll()
        try context.save()
        #expect(events == [.didSave(ContextChanges(updated: [author.objectID]))])
        events.removeAll()
        // Changed after the save: saved again.
        try author.setValue("Four", forKey: "name")
        try author.setValue("Five", forKey: "name")
        try context.save()
        #expect(events.last == .didSave(ContextChanges(updated: [author.objectID])))
        // Changed, refreshed (changes dropped), changed twice: saved with the last value.
        try author.setValue("Six", forKey: "name")
        context.refresh(author, mergeChanges: false)
        try author.setValue("Seven", forKey: "name")
        try author.setValue("e@ight", forKey: "email")
        #expect(context.hasChanges)
        try context.save()
        let other = ManagedObjectContext(coordinator: coordinator)
        let stored = other.object(with: author.objectID)
        #expect(stored.value(forKey: "name") as? String == "Seven")
        #expect(stored.value(forKey: "email") as? String == "e@ight")
    }

    @Test func eventsArriveAsAnAsyncSequence() async throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let stream = context.events()
        let author = try context.make("Author", ["name": "Streamed"])
        try context.save()
        var iterator = stream.makeAsyncIterator()
        let first = await iterator.next()
        let second = await iterator.next()
        guard case .objectsDidChange(let changes)? = first else { Issue.record("no objectsDidChange first"); return }
        #expect(changes.inserted.count == 1 && changes.updated.isEmpty && changes.deleted.isEmpty)
        #expect(second == .didSave(ContextChanges(inserted: [author.objectID])))
    }

    @Test func mergingASaveRefreshesObjectsAndKeepsLocalEdits() throws {
        let (coordinator, _) = try makeStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let author = try writer.make("Author", ["name": "One", "email": "a@b.c"])
        let doomed = try writer.make("Author", ["name": "Doomed"])
        try writer.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let mine = reader.object(with: author.objectID)
        let theirsDoomed = reader.object(with: doomed.objectID)
        _ = mine["name"]
        try mine.setValue("x@y.z", forKey: "email")
        var saved = ContextChanges()
        writer.addObserver { if case .didSave(let changes) = $0 { saved = changes } }
        try author.setValue("Two", forKey: "name")
        writer.delete(doomed)
        try writer.save()
        reader.mergeChanges(fromContextDidSave: saved)
        #expect(mine["name"] as? String == "Two")
        #expect(mine["email"] as? String == "x@y.z", "the local edit survives the merge")
        #expect(theirsDoomed.managedObjectContext == nil && reader.registeredObject(for: doomed.objectID) == nil)
        try reader.save()
    }

    @Test func automaticMergingFollowsOtherContextsSaves() throws {
        let (coordinator, _) = try makeStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let author = try writer.make("Author", ["name": "Before"])
        try writer.save()
        let follower = ManagedObjectContext(coordinator: coordinator)
        follower.automaticallyMergesChangesFromParent = true
        let copy = follower.object(with: author.objectID)
        #expect(copy["name"] as? String == "Before")
        try author.setValue("After", forKey: "name")
        try writer.save()
        #expect(copy["name"] as? String == "After")
        let bystander = ManagedObjectContext(coordinator: coordinator)
        let stale = bystander.object(with: author.objectID)
        _ = stale["name"]
        try author.setValue("Later", forKey: "name")
        try writer.save()
        #expect(stale["name"] as? String == "After", "a context that does not merge keeps what it read")
    }
}
