import Foundation
import Testing
@testable import ObjectGraph

/// A book that rates itself while it is validated: code of the app that changes an inserted object during a save.
final class SelfRatingBook: ManagedObject {
    override func validateForInsert() throws { self["rating"] = 4.5 }
}

/// The context's registry of objects by ID across saves: inserted objects under their temporary IDs, then under
/// their permanent ones, and exactly as they were after a save that failed.
@Suite struct RegistryTests {
    /// Fifty tags and a book that holds three of them, and a fifty-first tag whose label repeats the first's (the
    /// store refuses it, after the permanent IDs were taken).
    func insertWithDuplicate(_ context: ManagedObjectContext) throws -> (tags: [ManagedObject], book: ManagedObject, duplicate: ManagedObject) {
        let tags = try (0..<50).map { try context.make("Tag", ["label": "t\($0)"]) }
        let book = try context.make("Book", ["title": "Tagged"])
        try book.setValue(Array(tags.prefix(3)), forKey: "tags")
        let duplicate = try context.make("Tag", ["label": "t0"])
        return (tags, book, duplicate)
    }

    @Test func insertedObjectsStayRegisteredUnderTheirTemporaryIDsAfterAFailedSaveAndMoveOnTheNextOne() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let (tags, book, duplicate) = try insertWithDuplicate(context)
        let temporaryIDs = (tags + [book, duplicate]).map(\.objectID)
        #expect(throws: ManagedObjectContextError.self) { try context.save() }

        for (object, id) in zip(tags + [book, duplicate], temporaryIDs) {
            #expect(object.objectID == id && id.isTemporaryID && object.isInserted)
            #expect(context.registeredObject(for: id) === object)
        }
        #expect(context.registeredObjects.count == 52)
        #expect(tags[7].value(forKey: "label") as? String == "t7")
        #expect(Set(book.relatedIDs(forKey: "tags")) == Set(temporaryIDs.prefix(3)))
        #expect(book.value(forKey: "rating") == nil)

        try duplicate.setValue("t50", forKey: "label")
        try context.save()
        for (object, old) in zip(tags + [book, duplicate], temporaryIDs) {
            #expect(!object.objectID.isTemporaryID && !object.isInserted)
            #expect(context.registeredObject(for: object.objectID) === object)
            #expect(context.registeredObject(for: old) == nil, "still registered under its temporary ID")
            #expect(context.object(with: object.objectID) === object)
        }
        #expect(context.registeredObjects.count == 52)
        #expect(Set(book.relatedIDs(forKey: "tags")) == Set(tags.prefix(3).map(\.objectID)))
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.count(for: FetchRequest(entityName: "Tag")) == 51)
        #expect(Set(fresh.object(with: book.objectID).relatedIDs(forKey: "tags")) == Set(tags.prefix(3).map(\.objectID)))
    }

    @Test func aSubclassThatChangesItselfWhileValidatedIsPutBackWhenTheSaveFails() throws {
        let (coordinator, _) = try makeStack()
        coordinator.registerClass(SelfRatingBook.self, forEntityName: "Book")
        let context = ManagedObjectContext(coordinator: coordinator)
        let (_, book, duplicate) = try insertWithDuplicate(context)
        #expect(book is SelfRatingBook)
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
        #expect(book.value(forKey: "rating") == nil, "the rating its validation set during the failed save stayed")
        #expect(context.registeredObject(for: book.objectID) === book && book.isInserted)

        try duplicate.setValue("t50", forKey: "label")
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.existingObject(with: book.objectID).value(forKey: "rating") as? Double == 4.5)
    }

    @Test func anObserversChangeToAnInsertedObjectDuringAFailedSaveIsPutBack() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let (tags, book, duplicate) = try insertWithDuplicate(context)
        var events = 0
        context.addObserver { event in
            guard case .objectsDidChange = event else { return }
            events += 1
            try? book.setValue(1.5, forKey: "rating")
            try? tags[9].setValue("renamed", forKey: "label")
        }
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
        #expect(events == 1)
        #expect(book.value(forKey: "rating") == nil && tags[9].value(forKey: "label") as? String == "t9")
        #expect(context.registeredObject(for: tags[9].objectID) === tags[9] && tags[9].isInserted)
        _ = duplicate
    }

    @Test func permanentIDsForSomeInsertedObjectsLeaveTheOthersUnderTheirTemporaryIDs() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let tags = try (0..<6).map { try context.make("Tag", ["label": "t\($0)"]) }
        let gone = tags[5]
        let goneID = gone.objectID
        context.delete(gone)
        let before = tags.map(\.objectID)
        // A deleted inserted object is no longer registered: it is left as it is.
        try context.obtainPermanentIDs(for: [tags[1], tags[3], gone])
        for index in 0..<5 {
            let object = tags[index]
            #expect(object.objectID.isTemporaryID == (index != 1 && index != 3))
            #expect(context.registeredObject(for: object.objectID) === object)
            if index == 1 || index == 3 { #expect(context.registeredObject(for: before[index]) == nil) }
        }
        #expect(gone.objectID == goneID && context.registeredObject(for: goneID) == nil)
        #expect(context.registeredObjects.count == 5)

        // The save moves the rest; the two with permanent IDs keep theirs.
        let early = [tags[1].objectID, tags[3].objectID]
        try context.save()
        #expect([tags[1].objectID, tags[3].objectID] == early)
        for object in tags.prefix(5) {
            #expect(!object.objectID.isTemporaryID && context.registeredObject(for: object.objectID) === object)
        }
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Tag")) == 5)
    }

    @Test func aFaultForAnotherContextsTemporaryIDDoesNotHideItsInsertedObjects() throws {
        let (coordinator, _) = try makeStack()
        let other = ManagedObjectContext(coordinator: coordinator)
        let foreign = try other.make("Tag", ["label": "elsewhere"])
        let context = ManagedObjectContext(coordinator: coordinator)
        let tags = try (0..<3).map { try context.make("Tag", ["label": "t\($0)"]) }
        // Registered under a temporary ID, yet not inserted here: the save must not drop it with its own.
        let stranger = context.object(with: foreign.objectID)
        try context.save()
        #expect(context.registeredObject(for: foreign.objectID) === stranger)
        for object in tags { #expect(context.registeredObject(for: object.objectID) === object && !object.objectID.isTemporaryID) }
    }

    /// A store that records what contexts tell it they hold, implementing only the array forms of the calls (as a
    /// store written before the one-object form would).
    final class RegistrationRecordingStore: IncrementalStore, @unchecked Sendable {
        let inner: InMemoryStore
        private let lock = NSLock()
        private var recorded: [(registered: Bool, ids: [ManagedObjectID])] = []
        init(_ description: PersistentStoreCoordinator.StoreDescription) throws { inner = try InMemoryStore(description: description) }
        var type: String { "RecordingRegistrations" }
        var configurationName: String? { nil }
        var url: URL? { nil }
        var metadata: [String: String] { inner.metadata.merging([PersistentStoreMetadataKey.storeType: type]) { _, new in new } }
        var usesCoordinatorRowCache: Bool { false }
        func loadMetadata() throws { try inner.loadMetadata() }
        func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult { try inner.execute(request) }
        func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode { try inner.newValuesForObject(with: objectID) }
        func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
            try inner.newValue(forRelationship: relationship, forObjectWith: objectID)
        }
        func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] { try inner.obtainPermanentIDs(for: objects) }
        func managedObjectContextDidRegisterObjects(with objectIDs: [ManagedObjectID]) { lock.withLock { recorded.append((true, objectIDs)) } }
        func managedObjectContextDidUnregisterObjects(with objectIDs: [ManagedObjectID]) { lock.withLock { recorded.append((false, objectIDs)) } }
        /// What was recorded since the last call.
        func takeRecorded() -> [(registered: Bool, ids: [ManagedObjectID])] { lock.withLock { defer { recorded = [] }; return recorded } }
    }

    /// A store that answers a batch of faults with only the array form of the call, its nodes in reverse order (as a
    /// store reading rows in key order may), and counts the batches it is asked for.
    final class ReversingStore: IncrementalStore, @unchecked Sendable {
        let inner: InMemoryStore
        let usesCoordinatorRowCache: Bool
        private let lock = NSLock()
        private var batchCalls = 0
        init(_ description: PersistentStoreCoordinator.StoreDescription) throws {
            inner = try InMemoryStore(description: description)
            usesCoordinatorRowCache = description.options["rowCache"] == "true"
        }
        var type: String { "Reversing" }
        var configurationName: String? { nil }
        var url: URL? { nil }
        var metadata: [String: String] { inner.metadata.merging([PersistentStoreMetadataKey.storeType: type]) { _, new in new } }
        func loadMetadata() throws { try inner.loadMetadata() }
        func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult { try inner.execute(request) }
        func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode { try inner.newValuesForObject(with: objectID) }
        func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode] {
            lock.withLock { batchCalls += 1 }
            return try inner.newValuesForObjects(with: objectIDs).reversed()
        }
        func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
            try inner.newValue(forRelationship: relationship, forObjectWith: objectID)
        }
        func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] { try inner.obtainPermanentIDs(for: objects) }
        /// The batches asked for since the last call.
        func takeBatchCalls() -> Int { lock.withLock { defer { batchCalls = 0 }; return batchCalls } }
    }

    @Test(arguments: [false, true])
    func aStoreAnsweringABatchOutOfOrderFillsEachFaultWithItsOwnValues(rowCache: Bool) throws {
        PersistentStoreCoordinator.registerStoreType("Reversing") { try ReversingStore($0) }
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        let store = try coordinator.addPersistentStore(type: "Reversing", options: ["rowCache": rowCache ? "true" : "false"]) as! ReversingStore
        let writer = ManagedObjectContext(coordinator: coordinator)
        // Magazines and journals: a batch of publications holds IDs of two entities, handed to the store together.
        let made = try (0..<8).map { try writer.make($0 % 3 == 0 ? "Journal" : "Magazine", ["title": "p\($0)"]) }
        try writer.save()
        let context = ManagedObjectContext(coordinator: coordinator)
        var request = FetchRequest(entityName: "Publication")
        request.fetchBatchSize = 20
        let faults = try context.fetch(request)
        #expect(faults.count == 8 && faults.allSatisfy(\.isFault))
        // One of them goes before the batch is read: the store leaves it out, and only it stays a fault.
        writer.delete(made[5])
        try writer.save()
        _ = store.takeBatchCalls()
        let gone = faults.first { $0.objectID == made[5].objectID }!
        let first = faults.first { $0 !== gone }!
        #expect(first.value(forKey: "title") != nil)
        #expect(store.takeBatchCalls() == 1, "the batch is read in one call")
        for object in faults where object !== gone {
            let index = made.firstIndex { $0.objectID == object.objectID }!
            #expect(!object.isFault && object.value(forKey: "title") as? String == "p\(index)")
            #expect(object.entityName == (index % 3 == 0 ? "Journal" : "Magazine"))
        }
        #expect(gone.isFault)
        #expect(throws: ManagedObjectContextError.self) { try context.existingObject(with: gone.objectID) }
    }

    @Test func nodesReadFromTwoStoresReachThePositionsOfTheirIDs() throws {
        let (coordinator, _) = try makeStack(splitConfigurations: true)
        // Saved by a context that is gone, so no row is cached: the stores are read.
        let (tags, magazines) = try {
            let writer = ManagedObjectContext(coordinator: coordinator)
            let tags = try (0..<3).map { try writer.make("Tag", ["label": "t\($0)"]) }
            let magazines = try (0..<3).map { try writer.make("Magazine", ["title": "m\($0)"]) }
            try writer.save()
            return (tags.map(\.objectID), magazines.map(\.objectID))
        }()
        // Interleaved, and one temporary ID among them: each store is asked for its own, and each node comes back to
        // the position its ID has in the list.
        let temporary = try ManagedObjectContext(coordinator: coordinator).make("Tag", ["label": "new"]).objectID
        let ids = [magazines[2], tags[0], temporary, magazines[0], tags[2], tags[1], magazines[1]]
        var found: [Int: String] = [:]
        try coordinator.registeringNodes(for: ids) { index, node, _ in
            #expect(node.objectID == ids[index])
            found[index] = (node.attributes["label"] ?? node.attributes["title"]).flatMap { if case .string(let text) = $0 { text } else { nil } }
        }
        #expect(found == [0: "m2", 1: "t0", 3: "m0", 4: "t2", 5: "t1", 6: "m1"])
        coordinator.unregister(ids)
    }

    @Test func aStoreThatImplementsOnlyTheArrayCallsHearsOfEveryLoneFault() throws {
        PersistentStoreCoordinator.registerStoreType("RecordingRegistrations") { try RegistrationRecordingStore($0) }
        let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
        let store = try coordinator.addPersistentStore(type: "RecordingRegistrations") as! RegistrationRecordingStore
        do {
            let writer = ManagedObjectContext(coordinator: coordinator)
            _ = try (0..<3).map { try writer.make("Tag", ["label": "t\($0)"]) }
            try writer.save()
        }
        let ids = try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(FetchRequest(entityName: "Tag")).sorted { "\($0)" < "\($1)" }
        _ = store.takeRecorded()

        do {
            let context = ManagedObjectContext(coordinator: coordinator)
            let faults = ids.map { context.object(with: $0) }
            #expect(store.takeRecorded().isEmpty, "a fault that has not fired is not reported")
            #expect(faults[1].value(forKey: "label") as? String != nil)
            let lone = store.takeRecorded()
            #expect(lone.count == 1 && lone.first?.registered == true && lone.first?.ids == [ids[1]])
            _ = faults[1].value(forKey: "label")
            #expect(store.takeRecorded().isEmpty, "a loaded object is reported once")
        }
        let released = store.takeRecorded()
        #expect(released.count == 1 && released.first?.registered == false && released.first?.ids == [ids[1]])
    }

    @Test func anObjectThatOutlivesItsContextNeitherKeepsItNorReachesIt() throws {
        let (coordinator, _) = try makeStack()
        let writer = ManagedObjectContext(coordinator: coordinator)
        let saved = try writer.make("Tag", ["label": "kept"])
        try writer.save()
        let id = saved.objectID

        weak var gone: ManagedObjectContext?
        var loaded: ManagedObject?, fault: ManagedObject?
        do {
            let context = ManagedObjectContext(coordinator: coordinator)
            gone = context
            loaded = try context.existingObject(with: id)
            fault = ManagedObjectContext(coordinator: coordinator).object(with: id)
            #expect(loaded?.managedObjectContext === context)
        }
        #expect(gone == nil, "an object kept its context alive")
        #expect(loaded?.managedObjectContext == nil && fault?.managedObjectContext == nil)
        // What an object loaded before its context went it still shows; a fault left without its context stays one.
        #expect(loaded?.value(forKey: "label") as? String == "kept")
        #expect(fault?.value(forKey: "label") == nil && fault?.isFault == true)
    }
}
