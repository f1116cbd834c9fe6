import Foundation
import ObjectGraph

extension StoreConformance {
    static let atomicChecks: [Check] = [
        Check(name: "aMissingLocationIsANewStore", body: aMissingLocationIsANewStore),
        Check(name: "everythingSurvivesAReload", body: everythingSurvivesAReload),
        Check(name: "referenceObjectsAreNeverReused", body: referenceObjectsAreNeverReused),
        Check(name: "aFailedSaveLeavesTheFileAsItWas", body: aFailedSaveLeavesTheFileAsItWas),
        Check(name: "removingANeverSavedStoreLeavesNothing", body: removingANeverSavedStoreLeavesNothing),
    ]

    static func atomicStore(_ h: Harness) throws -> AtomicStore {
        guard let store = h.coordinator.persistentStores.first as? AtomicStore else {
            throw CheckFailure(message: "the store is not an AtomicStore")
        }
        return store
    }

    static func reopened(_ h: Harness) throws -> PersistentStoreCoordinator {
        let store = h.coordinator.persistentStores[0]
        try h.coordinator.removePersistentStore(store)
        return try h.reopen!()
    }

    /// Every file under the location (or the file itself), with its bytes.
    static func contents(of url: URL) -> [String: Data] {
        var result: [String: Data] = [:]
        if let data = try? Data(contentsOf: url) { return [url.lastPathComponent: data] }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: url.path)) ?? [] {
            for (inner, data) in contents(of: url.appendingPathComponent(name)) { result[name + "/" + inner] = data }
        }
        return result
    }

    static func aMissingLocationIsANewStore(_ h: Harness) throws {
        let store = try atomicStore(h)
        try h.require(store.isNewStore, "a store added at a missing location does not say it is new")
        try h.require(UUID(uuidString: store.metadata[PersistentStoreMetadataKey.uuid] ?? "") != nil, "a new store's metadata has no UUID")
        try h.require(try h.context().count(for: FetchRequest(entityName: "Item")) == 0, "a new store holds objects")
    }

    static func everythingSurvivesAReload(_ h: Harness) throws {
        let context = h.context()
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue("o \"quoted\", with comma\nand newline", forKey: "name")
        let items = try (0..<5).map { n -> ManagedObject in
            let item = try context.insertNewObject(forEntityName: "Item")
            try item.setValue("item \(n)", forKey: "name")
            try item.setValue(Int32(n * 3), forKey: "rank")
            try item.setValue(owner, forKey: "owner")
            return item
        }
        try owner.setValue([items[3], items[1], items[4]], forKey: "queue")
        let labels = try (0..<3).map { n -> ManagedObject in
            let label = try context.insertNewObject(forEntityName: "Label")
            try label.setValue("label \(n)", forKey: "name")
            return label
        }
        try items[0].setValue([labels[0], labels[2]], forKey: "labels")
        try items[2].setValue([labels[2]], forKey: "labels")
        let sample = try context.insertNewObject(forEntityName: "Sample")
        let values: [String: Any] = [
            "i16": Int16.min, "i32": Int32.max, "i64": Int64.min, "dec": Decimal(string: "-1234.5678")!, "dbl": 0.1 + 0.2,
            "flt": Float(3.3), "str": "", "bool": false, "date": Date(timeIntervalSinceReferenceDate: 7.000123456789),
            "data": Data([0, 1, 255]), "uuid": UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!,
            "uri": URL(string: "https://example.com/a?b=c,d")!, "ref": owner.objectID,
        ]
        try context.obtainPermanentIDs(for: [owner])
        for (key, value) in values { try sample.setValue(key == "ref" ? owner.objectID : value, forKey: key) }
        let circle = try context.insertNewObject(forEntityName: "Circle")
        try circle.setValue(2.5, forKey: "radius")
        try context.save()
        let uuid = h.coordinator.persistentStores[0].identifier

        let fresh = try reopened(h)
        try h.require(fresh.persistentStores[0].identifier == uuid, "the store's UUID changed across a reload")
        let reloaded = ManagedObjectContext(coordinator: fresh)
        let loadedOwner = try reloaded.existingObject(with: owner.objectID)
        try h.require(loadedOwner.value(forKey: "name") as? String == owner.value(forKey: "name") as? String, "a string with quotes, comma and newline came back as \(loadedOwner.value(forKey: "name") ?? "nil")")
        try h.require(Set(loadedOwner.relatedObjects(forKey: "items").map(\.objectID)) == Set(items.map(\.objectID)), "a to-many derived from its inverse came back wrong")
        try h.require(loadedOwner.relatedObjects(forKey: "queue").map(\.objectID) == [items[3], items[1], items[4]].map(\.objectID), "an ordered to-many lost its order")
        try h.require((try reloaded.existingObject(with: items[1].objectID).value(forKey: "queuedBy") as? ManagedObject)?.objectID == owner.objectID,
                      "the inverse of an ordered to-many came back wrong")
        try h.require(Set(try reloaded.existingObject(with: labels[2].objectID).relatedObjects(forKey: "items").map(\.objectID)) == [items[0].objectID, items[2].objectID],
                      "a many-to-many came back wrong")
        for item in items {
            let loaded = try reloaded.existingObject(with: item.objectID)
            try h.require(loaded.value(forKey: "rank") as? Int32 == item.value(forKey: "rank") as? Int32, "\(item.objectID)'s rank came back wrong")
        }
        let loadedSample = try reloaded.existingObject(with: sample.objectID)
        for (key, value) in values {
            let expected = key == "ref" ? owner.objectID : value
            try h.require("\(loadedSample.value(forKey: key) ?? "nil")" == "\(expected)", "\(key) came back as \(loadedSample.value(forKey: key) ?? "nil"), not \(expected)")
        }
        try h.require(try reloaded.existingObject(with: circle.objectID).value(forKey: "radius") as? Double == 2.5, "a sub-entity's object came back wrong")
        try h.require(try reloaded.count(for: FetchRequest(entityName: "Shape")) == 1, "a parent fetch after a reload missed its sub-entity")
    }

    static func referenceObjectsAreNeverReused(_ h: Harness) throws {
        let context = h.context()
        let owners = try (0..<3).map { n -> ManagedObject in
            let owner = try context.insertNewObject(forEntityName: "Owner")
            try owner.setValue("owner \(n)", forKey: "name")
            return owner
        }
        try context.save()
        context.delete(owners[2])
        try context.save()
        let fresh = ManagedObjectContext(coordinator: try reopened(h))
        let newcomer = try fresh.insertNewObject(forEntityName: "Owner")
        try newcomer.setValue("new", forKey: "name")
        try fresh.save()
        try h.require(!owners.map(\.objectID).contains(newcomer.objectID), "a new object after a reload got the ID \(newcomer.objectID) of an earlier one")
    }

    static func aFailedSaveLeavesTheFileAsItWas(_ h: Harness) throws {
        let context = h.context()
        let label = try context.insertNewObject(forEntityName: "Label")
        try label.setValue("same", forKey: "name")
        try context.save()
        let before = contents(of: h.location!)
        try h.require(!before.isEmpty, "nothing was written at the store's location")
        let other = h.context()
        let duplicate = try other.insertNewObject(forEntityName: "Label")
        try duplicate.setValue("same", forKey: "name")
        try h.requireError(.constraintViolation, "saving a duplicate unique name") { try other.save() }
        try h.require(contents(of: h.location!) == before, "a failed save changed the files")
        let fresh = ManagedObjectContext(coordinator: try reopened(h))
        try h.require(try fresh.count(for: FetchRequest(entityName: "Label")) == 1, "after a failed save, a reload found other objects")
    }

    static func removingANeverSavedStoreLeavesNothing(_ h: Harness) throws {
        try h.coordinator.removePersistentStore(h.coordinator.persistentStores[0])
        try h.require(!FileManager.default.fileExists(atPath: h.location!.path), "removing a store that was never saved left \(h.location!.lastPathComponent) behind")
    }
}
