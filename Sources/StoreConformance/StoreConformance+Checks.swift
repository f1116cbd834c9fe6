import Foundation
import ObjectGraph

extension StoreConformance {
    static let checks: [Check] = [
        Check(name: "metadataHasUUIDAndType", body: metadataHasUUIDAndType),
        Check(name: "everyAttributeTypeRoundTrips", body: everyAttributeTypeRoundTrips),
        Check(name: "permanentIDsAreUniqueAndResolve", body: permanentIDsAreUniqueAndResolve),
        Check(name: "fetchResultTypesAgree", body: fetchResultTypesAgree),
        Check(name: "predicatesSortsAndWindowsMatchTheEvaluator", body: predicatesSortsAndWindowsMatchTheEvaluator),
        Check(name: "faultsLoadOneObject", body: faultsLoadOneObject),
        Check(name: "relationshipsOfEveryKindPersist", body: relationshipsOfEveryKindPersist),
        Check(name: "inheritanceFollowsIncludesSubentities", body: inheritanceFollowsIncludesSubentities),
        Check(name: "updatesAndDeletesPersist", body: updatesAndDeletesPersist),
        Check(name: "conflictingSavesAreDetected", body: conflictingSavesAreDetected),
        Check(name: "uniquenessViolationsWriteNothing", body: uniquenessViolationsWriteNothing),
        Check(name: "missingObjectsAreReported", body: missingObjectsAreReported),
        Check(name: "batchedReadsAgreeWithSingleReads", body: batchedReadsAgreeWithSingleReads),
        Check(name: "batchedFetchesAndPrefetchingLoadTheRightObjects", body: batchedFetchesAndPrefetchingLoadTheRightObjects),
        Check(name: "dictionaryResultsMatchTheObjects", body: dictionaryResultsMatchTheObjects),
        Check(name: "savesAreAnnouncedWithTheirIDs", body: savesAreAnnouncedWithTheirIDs),
        Check(name: "fetchedPropertiesFetchAndKeepTheirResultsUntilRefreshed", body: fetchedPropertiesFetchAndKeepTheirResultsUntilRefreshed),
    ]

    /// A fetched property is a fetch with `$FETCH_SOURCE` (the object) and `$FETCHED_PROPERTY` (its description)
    /// bound; its result stays on the object, as Core Data keeps it, until the object is refreshed.
    static func fetchedPropertiesFetchAndKeepTheirResultsUntilRefreshed(_ h: Harness) throws {
        let items = try seedItems(h)
        let owner = try saveOwner("fetcher", of: items.prefix(12), h)
        func names(_ objects: [ManagedObject]) -> Set<String> { Set(objects.compactMap { $0.value(forKey: "name") as? String }) }
        let expected = Set(items.prefix(12).compactMap { $0.value(forKey: "name") as? String }.filter { $0.hasPrefix("alpha") })

        let context = h.context()
        let reader = context.object(with: owner.objectID)
        let found = try reader.fetchedObjects(forKey: "itemsNamedLikeMe")
        try h.require(names(found) == expected, "the fetched property found \(names(found)), not \(expected)")
        try h.require((reader.value(forKey: "itemsNamedLikeMe") as? [ManagedObject]).map(names) == expected,
                      "value(forKey:) of a fetched property differs from fetchedObjects(forKey:)")
        let viaPredicate = try FetchPredicate(format: "itemsNamedLikeMe.@count == %@", expected.count).evaluate(with: reader)
        try h.require(viaPredicate, "a predicate does not see the fetched property's objects")

        // Another item joins in another context: the kept result does not change until the object is refreshed.
        let writer = h.context()
        let late = try writer.insertNewObject(forEntityName: "Item")
        try late.setValue("alpha late", forKey: "name")
        try late.setValue(writer.object(with: owner.objectID), forKey: "owner")
        try writer.save()
        try h.require(names(try reader.fetchedObjects(forKey: "itemsNamedLikeMe")) == expected, "a kept fetched property changed by itself")
        context.refresh(reader, mergeChanges: false)
        let refreshed = names(try reader.fetchedObjects(forKey: "itemsNamedLikeMe"))
        try h.require(refreshed == expected.union(["alpha late"]), "after a refresh the fetched property found \(refreshed)")
        do {
            _ = try reader.fetchedObjects(forKey: "name")
            throw CheckFailure(message: "fetchedObjects(forKey:) answered for an attribute")
        } catch let error as ManagedObjectContextError where error.code == .unknownName {}
    }

    static func batchedReadsAgreeWithSingleReads(_ h: Harness) throws {
        let items = try seedItems(h)
        let owner = try saveOwner("o", of: items.prefix(5), h)
        guard let store = h.coordinator.persistentStores[0] as? any IncrementalStore else {
            throw CheckFailure(message: "the store is not an incremental store")
        }
        let ids = items.map(\.objectID)
        let missing = ManagedObjectID(entityName: "Item", storeIdentifier: store.identifier, referenceObject: .integer(9_999_999))
        // Asked in an order of their own (not the store's), with a missing object among them.
        let asked = Array(ids.reversed())
        let batched = try store.newValuesForObjects(with: Array(asked.prefix(2)) + [missing] + asked.dropFirst(2))
        try h.require(batched.map(\.objectID) == asked, "a batched read returned other objects, kept a missing one or changed the order")
        for node in batched {
            try h.require(node == (try store.newValuesForObject(with: node.objectID)), "\(node.objectID): batched and single reads differ")
        }
        let relationship = StoreConformance.model.relationship(named: "items", in: "Owner")!
        let members = try store.newValues(forRelationship: relationship, forObjectsWith: [owner.objectID])
        try h.require(Set(members[owner.objectID] ?? []) == Set(ids.prefix(5)), "a batched relationship read returned other members")
    }

    static func batchedFetchesAndPrefetchingLoadTheRightObjects(_ h: Harness) throws {
        let items = try seedItems(h)
        _ = try saveOwner("prefetched", of: items, h)
        let fresh = h.context()
        let request = FetchRequest(entityName: "Item", sortDescriptors: [FetchSortDescriptor(keyPath: "name")])
            .with { $0.fetchBatchSize = 7; $0.relationshipKeyPathsForPrefetching = ["owner"] }
        let fetched = try fresh.fetch(request)
        try h.require(fetched.count == items.count, "a batched fetch returned \(fetched.count) of \(items.count) objects")
        try h.require((fetched[0].value(forKey: "owner") as? ManagedObject).map { !$0.isFault } == true, "a prefetched to-one is still a fault")
        let batched = try h.context().fetchBatched(request)
        let names = batched.map { $0.value(forKey: "name") as? String }
        try h.require(names == fetched.map { $0.value(forKey: "name") as? String }, "walking batched results gave other objects")
    }

    static func dictionaryResultsMatchTheObjects(_ h: Harness) throws {
        let items = try seedItems(h)
        var request = FetchRequest(entityName: "Item", sortDescriptors: [FetchSortDescriptor(keyPath: "rank")])
        request.resultType = .dictionary
        request.propertiesToGroupBy = ["rank"]
        request.propertiesToFetch = [.keyPath("rank"), .aggregate(.count, of: "SELF", as: "n")]
        let rows = try h.context().fetchDictionaries(request)
        var expected: [Int32: Int] = [:]
        for item in items { expected[item.value(forKey: "rank") as! Int32, default: 0] += 1 }
        let got = Dictionary(uniqueKeysWithValues: rows.map { row -> (Int32, Int) in
            guard case .integer(let rank)? = row["rank"], case .integer(let n)? = row["n"] else { return (-1, -1) }
            return (Int32(rank), Int(n))
        })
        try h.require(got == expected, "group-by counts \(got) differ from the objects' \(expected)")
    }

    static func savesAreAnnouncedWithTheirIDs(_ h: Harness) throws {
        let context = h.context()
        var saved: [ContextChanges] = []
        context.addObserver { if case .didSave(let changes) = $0 { saved.append(changes) } }
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue("announced", forKey: "name")
        try context.save()
        try h.require(saved == [ContextChanges(inserted: [owner.objectID])], "didSave named \(saved), not the inserted object")
    }

    static func metadataHasUUIDAndType(_ h: Harness) throws {
        let store = h.coordinator.persistentStores[0]
        try h.require(UUID(uuidString: store.metadata[PersistentStoreMetadataKey.uuid] ?? "") != nil, "the metadata has no UUID: \(store.metadata)")
        try h.require(store.metadata[PersistentStoreMetadataKey.storeType] == store.type, "the metadata's store type is not \(store.type)")
    }

    static func everyAttributeTypeRoundTrips(_ h: Harness) throws {
        let context = h.context()
        let sample = try context.insertNewObject(forEntityName: "Sample")
        let empty = try context.insertNewObject(forEntityName: "Sample")
        let reference = try context.insertNewObject(forEntityName: "Owner")
        try reference.setValue("ref", forKey: "name")
        try context.obtainPermanentIDs(for: [reference])
        let values: [String: Any] = [
            "i16": Int16.min, "i32": Int32.max, "i64": Int64.min, "dec": Decimal(string: "-1234.5678")!, "dbl": -0.1,
            "flt": Float(3.25), "str": "naïve 🙂 \"quoted\"\n", "bool": true, "date": Date(timeIntervalSinceReferenceDate: -12.5),
            "data": Data([0, 1, 255]), "uuid": UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!,
            "uri": URL(string: "https://example.com/a?b=c")!, "ref": reference.objectID,
        ]
        for (key, value) in values { try sample.setValue(value, forKey: key) }
        try context.save()
        let fresh = h.context()
        let loaded = try fresh.existingObject(with: sample.objectID)
        for (key, value) in values {
            try h.require("\(loaded.value(forKey: key) ?? "nil")" == "\(value)", "\(key) came back as \(loaded.value(forKey: key) ?? "nil"), not \(value)")
        }
        let none = try fresh.existingObject(with: empty.objectID)
        for key in values.keys { try h.require(none.value(forKey: key) == nil, "an unset \(key) came back as \(none.value(forKey: key)!)") }
    }

    static func permanentIDsAreUniqueAndResolve(_ h: Harness) throws {
        let context = h.context()
        let objects = try (0..<20).map { n -> ManagedObject in
            let owner = try context.insertNewObject(forEntityName: "Owner")
            try owner.setValue("owner \(n)", forKey: "name")
            return owner
        }
        try context.save()
        let ids = objects.map(\.objectID)
        try h.require(ids.allSatisfy { !$0.isTemporaryID }, "saved objects kept temporary IDs")
        try h.require(Set(ids).count == ids.count, "permanent IDs are not unique")
        for id in ids {
            try h.require(try h.coordinator.managedObjectID(forURIRepresentation: id.uriRepresentation) == id, "\(id)'s URI does not resolve to it")
        }
        let fetched = try h.context().fetchObjectIDs(FetchRequest(entityName: "Owner"))
        try h.require(Set(fetched) == Set(ids), "a fetch returned other IDs than the saved ones")
    }

    /// Saves a new owner named `name` of `items`, from a context of its own.
    static func saveOwner(_ name: String, of items: some Sequence<ManagedObject>, _ h: Harness) throws -> ManagedObject {
        let context = h.context()
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue(name, forKey: "name")
        for item in items { try context.object(with: item.objectID).setValue(owner, forKey: "owner") }
        try context.save()
        return owner
    }

    static func seedItems(_ h: Harness) throws -> [ManagedObject] {
        let context = h.context()
        let items = try (0..<30).map { n -> ManagedObject in
            let item = try context.insertNewObject(forEntityName: "Item")
            try item.setValue(["alpha", "Beta", "gamma", "delta", "Émile"][n % 5] + " \(n)", forKey: "name")
            try item.setValue(Int32((n * 7) % 11), forKey: "rank")
            return item
        }
        try context.save()
        return items
    }

    static func fetchResultTypesAgree(_ h: Harness) throws {
        _ = try seedItems(h)
        let context = h.context()
        let request = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank >= 5"))
        let objects = try context.fetch(request)
        let ids = try context.fetchObjectIDs(request)
        let count = try context.count(for: request)
        try h.require(objects.map(\.objectID) == ids, "objects and object IDs disagree")
        try h.require(count == ids.count, "count \(count) disagrees with \(ids.count) fetched IDs")
        try h.require(objects.allSatisfy { ($0.value(forKey: "rank") as? Int32 ?? -1) >= 5 }, "a fetched object does not match the predicate")
    }

    static func predicatesSortsAndWindowsMatchTheEvaluator(_ h: Harness) throws {
        let items = try seedItems(h)
        let context = h.context()
        let formats = ["rank > 3 AND name BEGINSWITH[c] 'b'", "name CONTAINS[cd] 'emile'", "rank IN {1, 2, 3} OR name ENDSWITH '9'",
                       "NOT rank BETWEEN {2, 8}", "name LIKE '*a 1?'", "TRUEPREDICATE"]
        let sorts = [FetchSortDescriptor(keyPath: "rank", ascending: false), FetchSortDescriptor(keyPath: "name")]
        for format in formats {
            let predicate = try FetchPredicate(format: format)
            var expected = try items.filter { try predicate.evaluate(with: $0) }
            expected = FetchSortDescriptor.sorted(expected, using: sorts)
            let request = FetchRequest(entityName: "Item", predicate: predicate, sortDescriptors: sorts)
            let got = try context.fetchObjectIDs(request)
            try h.require(got == expected.map(\.objectID), "\(format): \(got.count) results, expected \(expected.count), or out of order")
            let window = try context.fetchObjectIDs(request.with { $0.fetchOffset = 2; $0.fetchLimit = 3 })
            try h.require(window == Array(expected.map(\.objectID).dropFirst(2).prefix(3)), "\(format): offset 2 limit 3 gave the wrong window")
            try h.require(try context.count(for: request) == expected.count, "\(format): count disagrees")
        }
    }

    static func faultsLoadOneObject(_ h: Harness) throws {
        let items = try seedItems(h)
        let context = h.context()
        let fault = context.object(with: items[3].objectID)
        try h.require(fault.isFault, "object(with:) did not return a fault")
        try h.require(fault.value(forKey: "name") as? String == items[3].value(forKey: "name") as? String, "the fault loaded other values")
        try h.require(!fault.isFault, "the object is still a fault after its values were read")
    }

    static func relationshipsOfEveryKindPersist(_ h: Harness) throws {
        let context = h.context()
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue("o", forKey: "name")
        let items = try (0..<4).map { n -> ManagedObject in
            let item = try context.insertNewObject(forEntityName: "Item")
            try item.setValue("i\(n)", forKey: "name")
            try item.setValue(owner, forKey: "owner")
            return item
        }
        try owner.setValue([items[2], items[0], items[3]], forKey: "queue")
        let labels = try (0..<2).map { n -> ManagedObject in
            let label = try context.insertNewObject(forEntityName: "Label")
            try label.setValue("l\(n)", forKey: "name")
            return label
        }
        try items[0].setValue(labels, forKey: "labels")
        try items[1].setValue([labels[1]], forKey: "labels")
        try context.save()

        let fresh = h.context()
        let loadedOwner = fresh.object(with: owner.objectID)
        try h.require(Set(loadedOwner.relatedObjects(forKey: "items").map(\.objectID)) == Set(items.map(\.objectID)), "the to-many came back wrong")
        try h.require(loadedOwner.relatedObjects(forKey: "queue").map(\.objectID) == [items[2], items[0], items[3]].map(\.objectID),
                      "the ordered to-many lost its order")
        try h.require((fresh.object(with: items[1].objectID).value(forKey: "owner") as? ManagedObject)?.objectID == owner.objectID, "the to-one came back wrong")
        try h.require(Set(fresh.object(with: labels[1].objectID).relatedObjects(forKey: "items").map(\.objectID)) == [items[0].objectID, items[1].objectID],
                      "the many-to-many's inverse came back wrong")
        let byOwner = try fresh.count(for: FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "owner.name == 'o'")))
        try h.require(byOwner == 4, "a predicate through a to-one found \(byOwner) items, not 4")
        let byLabel = try fresh.count(for: FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "ANY labels.name == 'l1'")))
        try h.require(byLabel == 2, "ANY through a to-many found \(byLabel) items, not 2")
    }

    static func inheritanceFollowsIncludesSubentities(_ h: Harness) throws {
        let context = h.context()
        for (entity, count) in [("Circle", 3), ("Square", 2)] {
            for n in 0..<count {
                let shape = try context.insertNewObject(forEntityName: entity)
                try shape.setValue(Double(n), forKey: "area")
            }
        }
        try context.save()
        let fresh = h.context()
        try h.require(try fresh.count(for: FetchRequest(entityName: "Shape")) == 5, "a parent fetch did not include its sub-entities")
        try h.require(try fresh.count(for: FetchRequest(entityName: "Shape").with { $0.includesSubentities = false }) == 0,
                      "includesSubentities = false still returned sub-entities")
        let circles = try fresh.fetch(FetchRequest(entityName: "Circle", predicate: try FetchPredicate(format: "area >= 1")))
        try h.require(circles.count == 2 && circles.allSatisfy { $0.entity.name == "Circle" }, "a sub-entity fetch returned the wrong objects")
    }

    static func updatesAndDeletesPersist(_ h: Harness) throws {
        let items = try seedItems(h)
        let context = h.context()
        let changed = context.object(with: items[0].objectID)
        try changed.setValue("renamed", forKey: "name")
        context.delete(context.object(with: items[1].objectID))
        try context.save()
        let fresh = h.context()
        try h.require(try fresh.existingObject(with: items[0].objectID).value(forKey: "name") as? String == "renamed", "an update was not saved")
        try h.requireError(.objectNotFound, "reading a deleted object") { _ = try fresh.existingObject(with: items[1].objectID) }
        try h.require(try fresh.count(for: FetchRequest(entityName: "Item")) == items.count - 1, "the deleted object is still fetched")
    }

    static func conflictingSavesAreDetected(_ h: Harness) throws {
        let items = try seedItems(h)
        let first = h.context(), second = h.context()
        let a = first.object(with: items[0].objectID), b = second.object(with: items[0].objectID)
        _ = a.value(forKey: "name")
        _ = b.value(forKey: "name")
        try a.setValue("first", forKey: "name")
        try first.save()
        try b.setValue("second", forKey: "name")
        try h.requireError(.mergeConflict, "saving over a newer version") { try second.save() }
        try h.require(try h.context().existingObject(with: items[0].objectID).value(forKey: "name") as? String == "first",
                      "a conflicting save changed the stored object")
    }

    static func uniquenessViolationsWriteNothing(_ h: Harness) throws {
        let context = h.context()
        let label = try context.insertNewObject(forEntityName: "Label")
        try label.setValue("same", forKey: "name")
        try context.save()
        let other = h.context()
        let duplicate = try other.insertNewObject(forEntityName: "Label")
        try duplicate.setValue("same", forKey: "name")
        let innocent = try other.insertNewObject(forEntityName: "Label")
        try innocent.setValue("different", forKey: "name")
        try h.requireError(.constraintViolation, "saving a duplicate unique name") { try other.save() }
        try h.require(try h.context().count(for: FetchRequest(entityName: "Label")) == 1, "part of a failed save was written")
    }

    static func missingObjectsAreReported(_ h: Harness) throws {
        let items = try seedItems(h)
        let context = h.context()
        context.delete(context.object(with: items[5].objectID))
        try context.save()
        try h.requireError(.objectNotFound, "fetching the values of a deleted object") {
            _ = try h.context().existingObject(with: items[5].objectID)
        }
        try h.requireError(.unknownName, "fetching an unknown entity") { _ = try h.context().fetch(FetchRequest(entityName: "NoSuchEntity")) }
    }
}
