import Foundation
import Testing
@testable import ObjectGraph

@Suite(.serialized) struct ContextBasicsTests {
    @Test func insertAppliesDefaultsAndAwakeFromInsertThenSaveGivesPermanentIDs() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.insert(Author.self, entityName: "Author")
        #expect(author.awakenings == 1)
        #expect(author["scratch"] as? String == "fresh")
        author.name = "Ursula"
        let book = try context.make("Book", ["title": "The Dispossessed", "author": author])
        #expect(book["pages"] as? Int16 == 1, "default value")
        #expect(book.objectID.isTemporaryID && book.isInserted && context.hasChanges)
        #expect(book.objectID.uriRepresentation.absoluteString.hasPrefix("x-coredata:///Book/t"))
        try context.save()
        #expect(!book.objectID.isTemporaryID && !book.isInserted && !book.hasChanges && !context.hasChanges)
        #expect(book.objectID.uriRepresentation.absoluteString.hasPrefix("x-coredata://\(coordinator.persistentStores[0].identifier)/Book/p"))
        #expect((book["author"] as? ManagedObject) === author, "the relationship followed the new IDs")
        #expect(author.books.count == 1)
    }

    @Test func urisRoundTripAndForeignOrMalformedOnesAreRejected() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Le Guin"])
        try context.save()
        let uri = author.objectID.uriRepresentation
        #expect(try coordinator.managedObjectID(forURIRepresentation: uri) == author.objectID)
        let temporary = try context.make("Author", ["name": "T"]).objectID
        #expect(try coordinator.managedObjectID(forURIRepresentation: temporary.uriRepresentation) == temporary)
        for bad in ["https://example.com/Author/p1", "x-coredata://\(UUID().uuidString)/Author/p1",
                    "x-coredata://\(coordinator.persistentStores[0].identifier)/Nope/p1", "x-coredata:///Author/p1", "x-coredata://x/Author"] {
            #expect(throws: ManagedObjectContextError.self, "\(bad)") { try coordinator.managedObjectID(forURIRepresentation: URL(string: bad)!) }
        }
        do {
            _ = try coordinator.managedObjectID(forURIRepresentation: URL(string: "x-coredata://\(UUID().uuidString)/Author/p1")!)
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .invalidURI)
            #expect(error.message.contains("which this coordinator does not have"))
        }
    }

    @Test func stringReferenceObjectsRoundTripThroughURIs() {
        let id = ManagedObjectID(entityName: "Note", storeIdentifier: "S", referenceObject: .string("a/b c%"))
        #expect(ManagedObjectID.parse(id.uriRepresentation) == id)
    }

    @Test func idsHashConsistentlyAndSpreadOverATable() {
        func id(_ entity: String, _ key: Int64) -> ManagedObjectID {
            ManagedObjectID(entityName: entity, storeIdentifier: "S", referenceObject: .integer(key))
        }
        // Equal IDs made apart hash alike, for every table seed; IDs of other entities with the same key do not
        // collide as a rule.
        for key: Int64 in [0, 1, 42, -7, .max] {
            for seed in [0, 1, 991, -5] { #expect(id("Book", key)._rawHashValue(seed: seed) == id("Book", key)._rawHashValue(seed: seed)) }
        }
        #expect((1...64).filter { id("Book", $0).hashValue == id("Author", $0).hashValue }.count <= 1)
        #expect(Set([0, 1, 2].map { id("Book", 7)._rawHashValue(seed: $0) }).count == 3, "the table's seed changes the hash")
        // Consecutive keys (what stores hand out) fill a table's buckets as random ones would: 4 096 keys into 4 096
        // buckets reach about 63 % of them; a weak mix leaves most buckets empty.
        let buckets = Set((0..<4096).map { id("Book", Int64($0)).hashValue & 4095 })
        #expect(buckets.count > 2400)
        let keysSpacedByPowersOfTwo = Set((0..<4096).map { id("Book", Int64($0) << 12).hashValue & 4095 })
        #expect(keysSpacedByPowersOfTwo.count > 2400)
        // String keys hash alike for equal IDs.
        let text = ManagedObjectID(entityName: "Note", storeIdentifier: "S", referenceObject: .string("k"))
        #expect(text.hashValue == ManagedObjectID(entityName: "Note", storeIdentifier: "S", referenceObject: .string("k")).hashValue)
        #expect(Set((0..<1000).map { id("Book", Int64($0)) }).count == 1000)
    }

    /// An ID holds a string key by its number among the interned keys: the key it gives back is the string it was
    /// made with, equal strings (made apart) give equal IDs, and a string key never equals an integer one — not even
    /// the integer that is its number, nor the integer the string spells.
    @Test func stringKeysAreTheirOwnKindOfKey() {
        func id(_ key: ReferenceObject, _ entity: String = "Note") -> ManagedObjectID {
            ManagedObjectID(entityName: entity, storeIdentifier: "S", referenceObject: key)
        }
        let made = String(["x", "-", "7"])
        #expect(id(.string(made)).referenceObject == .string("x-7"))
        #expect(id(.string(made)) == id(.string("x-7")))
        #expect(Set([id(.string(made)), id(.string("x-7")), id(.string("x-8"))]).count == 2)
        #expect(id(.string("x-7"), "Book") != id(.string("x-7")))
        #expect(id(.integer(5)) != id(.string("5")))
        #expect(id(.integer(5)).referenceObject == .integer(5))
        let numbered = (0..<200).map { id(.string("key \($0)")) }
        #expect(Set(numbered).count == 200)
        #expect(!numbered.contains(id(.integer(0))) && !numbered.contains(id(.integer(1))))
        #expect(numbered.map(\.referenceObject) == (0..<200).map { .string("key \($0)") })
        // Integers order before strings, strings by their text (not by when they were first seen).
        let seenFirst = id(.string("order b")), seenNext = id(.string("order a"))
        #expect([seenFirst, id(.integer(9)), seenNext].sortedByID() == [id(.integer(9)), seenNext, seenFirst])
        #expect(seenNext < seenFirst && id(.integer(9)) < seenNext)
    }

    /// IDs are made through a small cache of recently used namespaces (eight), then the process-wide table: whichever
    /// way an ID's namespace is found, IDs of one entity and store are one namespace, and IDs of others are not —
    /// also with more namespaces in turn than the cache holds, names that share a prefix, and a store identifier made
    /// at run time (equal text, other storage).
    @Test func idsOfOneEntityAndStoreShareANamespaceHoweverManyAreInUse() {
        let entities = (0..<12).map { "Entity\($0)" } + ["Émile", "Emile", ""]
        let stores: [String] = ["S", "T", String(["S"])]
        var first: [String: ManagedObjectID] = [:]
        for round in 0..<3 {
            for entity in entities {
                for store in stores {
                    let id = ManagedObjectID(entityName: entity, storeIdentifier: store, referenceObject: .integer(Int64(round)))
                    #expect(id.entityName == entity && id.storeIdentifier == store)
                    let again = ManagedObjectID(entityName: entity, storeIdentifier: store, referenceObject: .integer(0))
                    if let earlier = first["\(entity)|\(store)"] {
                        #expect(again == earlier && again.hashValue == earlier.hashValue, "\(entity) in \(store), round \(round)")
                    } else {
                        first["\(entity)|\(store)"] = again
                    }
                }
            }
        }
        // Distinct (entity, store) pairs never share a namespace: "S" and a run-time "S" are one store.
        #expect(Set(first.values).count == entities.count * 2)
    }

    /// A save orders its changed objects with `sortedByID()`, which ranks the entities once instead of comparing
    /// names per pair; it must give exactly the order `<` gives, across entities, stores, key kinds and temporary IDs.
    @Test func idsSortedByRankedNamespacesMatchTheirComparableOrder() {
        var generator = SystemRandomNumberGenerator()
        let namespaces: [(String, String?)] = [("Book", "S"), ("Author", "S"), ("Book", "T"), ("Émile", "S"), ("Zed", nil), ("Book", nil)]
        let ids = (0..<2_000).map { _ -> ManagedObjectID in
            let (entity, store) = namespaces.randomElement(using: &generator)!
            let reference: ReferenceObject = Bool.random(using: &generator)
                ? .integer(Int64.random(in: -50...50, using: &generator)) : .string(String(Int.random(in: 0...50, using: &generator)))
            guard let store else { return ManagedObjectID.temporary(in: .shared(entityName: entity, storeIdentifier: nil)) }
            return ManagedObjectID(entityName: entity, storeIdentifier: store, referenceObject: reference)
        }
        #expect(ids.sortedByID() == ids.sorted())
        #expect(Set(ids).sortedByID() == Set(ids).sorted())
        #expect([ManagedObjectID]().sortedByID().isEmpty)
    }

    @Test func valuesAreTypeCheckedAndAWrongTypeChangesNothing() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let book = try context.make("Book", ["title": "A", "pages": 10])
        #expect(book["pages"] as? Int16 == 10)
        for (key, value) in [("pages", "ten" as Any), ("pages", 70_000 as Any), ("title", 5 as Any), ("rating", Double.nan as Any),
                             ("author", "someone" as Any), ("price", "1.5" as Any)] {
            do {
                try book.setValue(value, forKey: key)
                Issue.record("\(key) accepted \(value)")
            } catch {
                #expect(error.code == .wrongValueType)
                let expected = key == "rating" ? "Book.rating cannot hold NaN"
                    : value as? Int == 70_000 ? "Book.pages is Integer 16, and 70000 is outside its range -32768...32767" : "Book.\(key) takes"
                #expect(error.message.contains(expected), "\(error)")
            }
        }
        #expect(book["pages"] as? Int16 == 10 && book["title"] as? String == "A")
        #expect(throws: ManagedObjectContextError.self) { try book.setValue(1, forKey: "nope") }
        try book.setValue(2.0, forKey: "rating")
        try book.setValue(Decimal(string: "9.99")!, forKey: "price")
        try book.setValue(Int64(12), forKey: "pages")
        #expect(book["rating"] as? Double == 2 && book["price"] as? Decimal == Decimal(string: "9.99"))
        let author = try context.make("Author", ["name": "X"])
        let tag = try context.make("Tag", ["label": "t"])
        #expect(throws: ManagedObjectContextError.self) { try book.setValue(tag, forKey: "author") }
        try book.setValue(author, forKey: "author")
    }

    @Test func typedKeysReadAndWriteWithoutKeyStrings() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.insert(Author.self, entityName: "Author")
        author.name = "Octavia"
        #expect(author.name == "Octavia")
        #expect(author[AttributeKey<Int>("born")] == nil)
        _ = try context.make("Book", ["title": "Kindred", "author": author])
        #expect(author.books.map { $0["title"] as? String } == ["Kindred"])
    }

    @Test func objectWithIsAFaultAndExistingObjectThrowsWhenGone() throws {
        let (coordinator, stores) = try makeStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let author = try writer.make("Author", ["name": "N. K."])
        try writer.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let fault = reader.object(with: author.objectID)
        #expect(fault.isFault)
        #expect(reader.registeredObject(for: author.objectID) === fault)
        #expect(reader.object(with: author.objectID) === fault, "one object per ID")
        #expect(fault["name"] as? String == "N. K.")
        #expect(!fault.isFault)
        let missing = ManagedObjectID(entityName: "Author", storeIdentifier: stores[0].identifier, referenceObject: .integer(999))
        do {
            _ = try reader.existingObject(with: missing)
            Issue.record("a missing object was returned")
        } catch {
            #expect(error.code == .objectNotFound)
        }
        #expect(try reader.existingObject(with: author.objectID) === fault)
    }

    @Test func aSecondFaultOnACachedRowMakesNoStoreCall() throws {
        let (coordinator, stores) = try makeStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let author = try writer.make("Author", ["name": "Cached"])
        try writer.save()
        writer.reset()  // no context holds the row now, so the cache lets it go
        let first = ManagedObjectContext(coordinator: coordinator)
        let a = first.object(with: author.objectID)
        let before = stores[0].callCounts.objectFaults
        _ = a["name"]
        #expect(stores[0].callCounts.objectFaults == before + 1)
        let second = ManagedObjectContext(coordinator: coordinator)
        let b = second.object(with: author.objectID)
        #expect(b["name"] as? String == "Cached")
        #expect(stores[0].callCounts.objectFaults == before + 1, "served from the coordinator's row cache")
        first.refresh(a, mergeChanges: false)
        #expect(a.isFault)
    }

    /// A coordinator whose one in-memory store keeps its rows out of the coordinator's row cache.
    private func uncachedStack() throws -> (PersistentStoreCoordinator, InMemoryStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        let store = try coordinator.addPersistentStore(type: InMemoryStore.storeType, options: ["usesCoordinatorRowCache": "false"]) as! InMemoryStore
        #expect(!store.usesCoordinatorRowCache)
        return (coordinator, store)
    }

    @Test func aStoreOutOfTheRowCacheIsReadOnEveryFaultAndShowsItsLatestRow() throws {
        let (coordinator, store) = try uncachedStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let author = try writer.make("Author", ["name": "First"])
        try writer.save()
        let first = ManagedObjectContext(coordinator: coordinator)
        let a = first.object(with: author.objectID)
        let before = store.callCounts.objectFaults
        #expect(a["name"] as? String == "First")
        #expect(store.callCounts.objectFaults == before + 1)

        author["name"] = "Second"
        try writer.save()
        let second = ManagedObjectContext(coordinator: coordinator)
        let b = second.object(with: author.objectID)
        #expect(b["name"] as? String == "Second", "the fault read the store, not a row cached for the first context")
        #expect(store.callCounts.objectFaults == before + 2)
        #expect(a["name"] as? String == "First", "a loaded object keeps its row until it is fetched or refreshed")
    }

    @Test func aFetchRefreshesStaleObjectsOfAStoreOutOfTheRowCache() throws {
        let (coordinator, store) = try uncachedStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let changing = try writer.make("Author", ["name": "Before"])
        _ = try writer.make("Author", ["name": "Steady"])
        try writer.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let loaded = try reader.fetch(FetchRequest(entityName: "Author", sortDescriptors: [FetchSortDescriptor(keyPath: "name", ascending: true)]))
        #expect(loaded.map { $0["name"] as? String } == ["Before", "Steady"])
        let reads = store.callCounts.batchedObjectFaults
        _ = try reader.fetch(FetchRequest(entityName: "Author"))
        #expect(store.callCounts.batchedObjectFaults == reads, "no save since the rows were read: nothing to check")
        #expect(loaded.allSatisfy { !$0.isFault })

        changing["name"] = "After"
        try writer.save()
        let again = try reader.fetch(FetchRequest(entityName: "Author", sortDescriptors: [FetchSortDescriptor(keyPath: "name", ascending: true)]))
        #expect(again.map(ObjectIdentifier.init) == loaded.map(ObjectIdentifier.init), "one object per ID")
        #expect(loaded[0].isFault, "the changed row's object was turned back into a fault")
        #expect(!loaded[1].isFault, "the unchanged one kept its values")
        #expect(loaded[0]["name"] as? String == "After")
        #expect(store.callCounts.batchedObjectFaults == reads + 1, "after a save the loaded objects' rows were checked, in one call")

        loaded[1]["name"] = "Edited here"
        let third = ManagedObjectContext(coordinator: coordinator)
        try third.fetch(FetchRequest(entityName: "Author")).forEach { $0["name"] = ($0["name"] as! String) + "!" }
        try third.save()
        _ = try reader.fetch(FetchRequest(entityName: "Author"))
        #expect(loaded[1]["name"] as? String == "Edited here", "an object with unsaved changes is left as it is")
    }

    @Test func theInMemoryStoreRefusesABadRowCacheOption() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        do {
            _ = try coordinator.addPersistentStore(type: InMemoryStore.storeType, options: ["usesCoordinatorRowCache": "no"])
            Issue.record("a bad option value was accepted")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .wrongValueType)
            #expect(error.message.contains("usesCoordinatorRowCache") && error.message.contains("\"no\""))
        }
        #expect(coordinator.persistentStores.isEmpty)
    }

    @Test func rollbackResetAndRefresh() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Before"])
        try context.save()
        author["name"] = "After"
        let extra = try context.make("Author", ["name": "New"])
        context.delete(author)
        context.rollback()
        #expect(author["name"] as? String == "Before" && !author.isDeleted && !author.hasChanges)
        #expect(extra.managedObjectContext == nil || !context.registeredObjects.contains(extra))
        #expect(!context.hasChanges)

        author["name"] = "Local"
        let other = ManagedObjectContext(coordinator: coordinator)
        let theirs = other.object(with: author.objectID)
        theirs["email"] = "x@y.z"
        try other.save()
        context.refresh(author, mergeChanges: true)
        #expect(author["name"] as? String == "Local", "local change kept")
        #expect(author["email"] as? String == "x@y.z", "store change merged")
        context.refresh(author, mergeChanges: false)
        #expect(author.isFault && !author.hasChanges)
        #expect(author["name"] as? String == "Before")

        context.reset()
        #expect(context.registeredObjects.isEmpty && !context.hasChanges)
    }

    @Test func obtainPermanentIDsBeforeSaving() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Early"])
        let book = try context.make("Book", ["title": "B", "author": author])
        try context.obtainPermanentIDs(for: [author, book])
        #expect(!author.objectID.isTemporaryID && !book.objectID.isTemporaryID)
        #expect(context.registeredObject(for: author.objectID) === author)
        #expect((book["author"] as? ManagedObject) === author)
        try context.save()
        let other = ManagedObjectContext(coordinator: coordinator)
        #expect(try other.existingObject(with: book.objectID)["title"] as? String == "B")
    }

    @Test func contextsWorkThroughPerformFromOtherTasks() async throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<8 {
                group.addTask {
                    try await context.perform {
                        _ = try context.make("Author", ["name": "Writer \(n)"])
                    }
                }
            }
            try await group.waitForAll()
        }
        let count = try await context.perform {
            try context.save()
            return try context.count(for: FetchRequest(entityName: "Author"))
        }
        #expect(count == 8)
    }
}
