import Foundation
import Testing
@testable import ObjectGraph

@Suite struct ObjectStateTests {
    /// A change the context makes keeps to-manys in the entity's to-many positions; stores that read them by name
    /// (`toMany`, `toManyChanges`) see the same members, a store given another model's handle finds them by name,
    /// and setting either dictionary keeps both parts.
    @Test func toManysInSlotsReadTheSameByNameAndBySlot() throws {
        let model = try libraryModel()
        let book = model.handle(forEntityNamed: "Book")
        let tags = book.slot(named: "tags")!, chapters = book.slot(named: "chapters")!
        let t1 = ManagedObjectID(entityName: "Tag", storeIdentifier: "S", referenceObject: .integer(1))
        let t2 = ManagedObjectID(entityName: "Tag", storeIdentifier: "S", referenceObject: .integer(2))
        let c1 = ManagedObjectID(entityName: "Chapter", storeIdentifier: "S", referenceObject: .integer(3))
        var members = book.newToMany(), changes = book.newToManyChanges()
        members[tags.position] = [t1, t2]
        changes[chapters.position] = ToManyChange(added: [c1])
        var change = ObjectChange(objectID: ManagedObjectID(entityName: "Book", storeIdentifier: "S", referenceObject: .integer(9)),
                                  entity: book, attributes: book.newAttributes(), toOne: book.newToOne(),
                                  relationships: .slots(book, members: members, changes: changes))
        #expect(change.toMany == ["tags": [t1, t2]])
        #expect(change.toManyChanges == ["chapters": ToManyChange(added: [c1])])
        #expect(change.relationships.members(tags, of: book) == [t1, t2])
        #expect(change.relationships.members(chapters, of: book) == nil)
        #expect(change.relationships.changes(chapters, of: book) == ToManyChange(added: [c1]))
        // Another model's handle of the same entity: found by name.
        let other = try libraryModel().handle(forEntityNamed: "Book")
        #expect(other !== book)
        #expect(change.relationships.members(other.slot(named: "tags")!, of: other) == [t1, t2])
        // Set by name: both parts kept, by name.
        change.toMany["tags"] = [t2]
        #expect(change.toMany == ["tags": [t2]])
        #expect(change.toManyChanges == ["chapters": ToManyChange(added: [c1])])
        #expect(change.relationships.members(tags, of: book) == [t2])
        // Nothing given: empty arrays in either position read as nothing.
        let bare = ObjectChange(objectID: change.objectID, entity: book, attributes: book.newAttributes(), toOne: book.newToOne(),
                                relationships: .slots(book, members: [], changes: []))
        #expect(bare.toMany.isEmpty && bare.toManyChanges.isEmpty && bare.relationships.members(tags, of: book) == nil)
    }

    final class Counting: ManagedObject {
        nonisolated(unsafe) static var fetched = 0
        override func awakeFromFetch() { Counting.fetched += 1 }
    }

    @Test func changedAndCommittedValuesTrackEdits() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let book = try context.make("Book", ["title": "First", "pages": 10])
        #expect(book.committedValues().isEmpty, "a new object has no saved values")
        try context.save()
        try book.setValue("Second", forKey: "title")
        #expect(book.isUpdated && book.hasChanges && context.updatedObjects == [book])
        #expect(book.changedValues.keys.sorted() == ["title"])
        #expect(book.changedValues["title"] as? String == "Second")
        #expect(book.committedValues(forKeys: ["title", "pages"])["title"] as? String == "First")
        #expect(book.committedValues(forKeys: ["pages"])["pages"] as? Int16 == 10)
        try book.setValue("First", forKey: "title")
        try context.save()
        #expect(book.committedValues(forKeys: ["title"])["title"] as? String == "First")
    }

    @Test func awakeFromFetchRunsWhenAFaultLoads() throws {
        let (coordinator, _) = try makeStack()
        coordinator.registerClass(Counting.self, forEntityName: "Tag")
        let context = ManagedObjectContext(coordinator: coordinator)
        let tag = try context.make("Tag", ["label": "x"])
        try context.save()
        let before = Counting.fetched
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let fault = fresh.object(with: tag.objectID)
        #expect(fault is Counting)
        #expect(Counting.fetched == before)
        _ = fault["label"]
        #expect(Counting.fetched == before + 1)
    }

    @Test func aClassRegisteredLaterIsUsedForObjectsMadeAfterIt() throws {
        final class Late: ManagedObject {}
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let tags = try (0..<3).map { try context.make("Tag", ["label": "t\($0)"]) }
        try context.save()
        let before = ManagedObjectContext(coordinator: coordinator)
        #expect(type(of: before.object(with: tags[0].objectID)) == ManagedObject.self)
        coordinator.registerClass(Late.self, forEntityName: "Tag")
        let after = ManagedObjectContext(coordinator: coordinator)
        let fetched = try after.fetch(FetchRequest(entityName: "Tag"))
        #expect(fetched.count == 3 && fetched.allSatisfy { $0 is Late }, "the class looked up before registration is not kept")
        #expect(fetched.allSatisfy { after.object(with: $0.objectID) === $0 }, "a fetch hands out the registered objects")
        // Inserting: a context that made objects of the entity before the registration makes them of the new class
        // after it.
        final class Later: ManagedObject {}
        #expect(try context.insertNewObject(forEntityName: "Tag") is Late)
        coordinator.registerClass(Later.self, forEntityName: "Tag")
        #expect(try context.insertNewObject(forEntityName: "Tag") is Later, "the class looked up for the last insert is not kept")
    }

    @Test func anObjectAndItsIDAreTheSameObjectInPredicateValues() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let tags = try (0..<2).map { try context.make("Tag", ["label": "t\($0)"]) }
        try context.save()
        let asObject = PredicateValue.object(PredicateObject(tags[0]))
        let asID = PredicateValue.object(PredicateObject(tags[0].objectID))
        #expect(asObject == asID && asObject.hashValue == asID.hashValue)
        #expect(asID != .object(PredicateObject(tags[1].objectID)) && asObject != .object(PredicateObject(tags[1])))
        #expect(Set([asObject, asID, .object(PredicateObject(tags[1].objectID)), .object(PredicateObject(tags[1]))]).count == 2)
        #expect(try FetchPredicate(format: "SELF == %@", tags[0].objectID).evaluate(with: tags[0]))
    }

    @Test func noActionLeavesTheOtherSideAlone() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Parent") { RelationshipDescription("kids", destination: "Kid", inverse: "parent", toMany: true, deleteRule: .noAction) }
            EntityDescription("Kid") { RelationshipDescription("parent", destination: "Parent", inverse: "kids") }
        }
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        let context = ManagedObjectContext(coordinator: coordinator)
        let parent = try context.insertNewObject(forEntityName: "Parent")
        let kid = try context.insertNewObject(forEntityName: "Kid")
        try kid.setValue(parent, forKey: "parent")
        try context.save()
        let parentID = parent.objectID
        context.delete(parent)
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let reloaded = try fresh.existingObject(with: kid.objectID)
        #expect((reloaded["parent"] as? ManagedObject)?.objectID == parentID, "no action: the kid still points at the deleted parent")
    }

    @Test func removingAStoreStopsRoutingToIt() throws {
        let (coordinator, stores) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        _ = try context.make("Tag", ["label": "gone"])
        try coordinator.removePersistentStore(stores[0])
        #expect(coordinator.persistentStores.isEmpty)
        do {
            try context.save()
            Issue.record("a save went to a removed store")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .noStore)
        }
        #expect(throws: ManagedObjectContextError.self) { try coordinator.removePersistentStore(stores[0]) }
    }

    @Test func aRemovedStoreIsLetGoAndItsFaultsFindNoStore() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        weak var removed: InMemoryStore?
        let reader = ManagedObjectContext(coordinator: coordinator)
        var fault: ManagedObject?
        do {
            let store = try coordinator.addPersistentStore(type: InMemoryStore.storeType) as! InMemoryStore
            removed = store
            let writer = ManagedObjectContext(coordinator: coordinator)
            let tags = try (0..<2).map { try writer.make("Tag", ["label": "t\($0)"]) }
            try writer.save()
            // A fault fired before the removal found the store by its route; another is left to fire after it.
            #expect(reader.object(with: tags[0].objectID).value(forKey: "label") as? String == "t0")
            fault = reader.object(with: tags[1].objectID)
            try coordinator.removePersistentStore(store)
        }
        #expect(removed == nil, "the coordinator kept a removed store alive")
        #expect(fault?.value(forKey: "label") == nil)
        #expect(fault?.faultError?.code == .noStore)
    }

    @Test func unknownStoreTypesAndConfigurationsAreErrors() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        #expect(throws: ManagedObjectContextError.self) { try coordinator.addPersistentStore(type: "NoSuchType") }
        #expect(throws: ManagedObjectContextError.self) { try coordinator.addPersistentStore(type: InMemoryStore.storeType, configuration: "Nope") }
        #expect(throws: ManagedObjectContextError.self) {
            try PersistentStoreCoordinator.metadataForPersistentStore(type: InMemoryStore.storeType, at: URL(fileURLWithPath: "/tmp/x"))
        }
    }

    @Test func aConflictCarriesBothSnapshots() throws {
        let (coordinator, _) = try makeStack()
        let setup = ManagedObjectContext(coordinator: coordinator)
        let tag = try setup.make("Tag", ["label": "v1"])
        try setup.save()
        let other = ManagedObjectContext(coordinator: coordinator)
        try other.object(with: tag.objectID).setValue("v2", forKey: "label")
        try tag.setValue("mine", forKey: "label")
        try other.save()
        do {
            try setup.save()
            Issue.record("no conflict")
        } catch let error as ManagedObjectContextError {
            #expect(error.conflicts.first?.cachedSnapshot?.attributes["label"] == .string("v1"))
            #expect(error.conflicts.first?.persistedSnapshot?.attributes["label"] == .string("v2"))
            #expect(error.description.contains("read at version 1, the store has version 2"))
        }
    }
}

extension ObjectStateTests {
    @Test func slotSetsHoldIndicesPastOneWordInOrder() {
        var set = SlotSet()
        #expect(set.isEmpty && Array(set).isEmpty)
        for index in [0, 5, 63, 64, 130, 129] { set.insert(index) }
        #expect(Array(set) == [0, 5, 63, 64, 129, 130])
        #expect(set.contains(130) && !set.contains(128) && !set.contains(500))
        set.remove(64)
        set.remove(0)
        set.remove(999)
        #expect(Array(set) == [5, 63, 129, 130])
        set.removeAll()
        #expect(set.isEmpty)
    }

    /// An entity with more properties than one word of change bits: changes to its last properties are tracked,
    /// saved and reported like the first ones'.
    @Test func changesToAWideEntitysLastPropertiesAreTrackedAndSaved() throws {
        let model = try ManagedObjectModel(entities: [EntityDescription("Wide", properties: (0..<100).map {
            .attribute(AttributeDescription(String(format: "p%03d", $0), .integer64, isOptional: true))
        })])
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        let context = ManagedObjectContext(coordinator: coordinator)
        let wide = try context.insertNewObject(forEntityName: "Wide")
        try context.save()
        try wide.setValue(Int64(99), forKey: "p099")
        try wide.setValue(Int64(70), forKey: "p070")
        try wide.setValue(Int64(1), forKey: "p001")
        #expect(wide.isUpdated && wide.changedValues.keys.sorted() == ["p001", "p070", "p099"])
        try context.save()
        #expect(!wide.hasChanges)
        let other = ManagedObjectContext(coordinator: coordinator)
        let copy = other.object(with: wide.objectID)
        #expect(copy["p099"] as? Int64 == 99 && copy["p070"] as? Int64 == 70 && copy["p001"] as? Int64 == 1 && copy["p050"] == nil)
    }
}

extension ObjectStateTests {
    /// The coordinator keeps an object's row while some context holds the object loaded, and only then: a fault
    /// registers the object and reads its row in one visit, and each context's reset gives back exactly what its
    /// faults took.
    @Test func aCachedRowLivesWhileSomeContextHoldsItsObject() throws {
        let (coordinator, _) = try makeStack()
        let store = coordinator.persistentStores[0] as! InMemoryStore
        let writer = ManagedObjectContext(coordinator: coordinator)
        let book = try writer.make("Book", ["title": "Kept", "pages": 3])
        try writer.save()
        let id = book.objectID
        writer.reset()
        func faults() -> Int { store.callCounts.objectFaults }
        let start = faults()
        let first = ManagedObjectContext(coordinator: coordinator), second = ManagedObjectContext(coordinator: coordinator)
        #expect(first.object(with: id)["title"] as? String == "Kept")
        #expect(second.object(with: id)["title"] as? String == "Kept")
        #expect(faults() - start == 1, "the second context read the row again instead of taking the cached one")
        first.reset()
        let third = ManagedObjectContext(coordinator: coordinator)
        #expect(third.object(with: id)["pages"] as? Int16 == 3)
        #expect(faults() - start == 1, "a reset of one context dropped a row another still holds")
        second.reset()
        third.reset()
        let fourth = ManagedObjectContext(coordinator: coordinator)
        #expect(fourth.object(with: id)["pages"] as? Int16 == 3)
        #expect(faults() - start == 2, "the row stayed cached after every context holding it let go")
    }
}
