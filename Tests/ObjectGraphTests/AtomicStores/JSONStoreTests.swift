import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

@Suite struct JSONStoreTests {
    @Test func theJSONStorePassesEveryConformanceCheck() {
        let report = StoreConformance.runAtomicStore { coordinator, url in
            try coordinator.addPersistentStore(type: JSONStore.storeType, at: url)
        }
        #expect(report.checks == StoreConformance.checkNames + StoreConformance.atomicStoreCheckNames)
        #expect(report.passed, "\(report)")
    }

    /// The format is what `Docs/ATOMIC-STORES.md` shows: another program can rely on it.
    @Test func theFileIsTheDocumentedJSON() throws {
        let folder = ScratchFolder()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        try coordinator.addPersistentStore(type: JSONStore.storeType, at: folder.path("shop.json"), options: ["uuid": "0F6E3C1A-6B8A-4F5E-9C2D-1A2B3C4D5E6F"])
        try saveSmallGraph(coordinator)
        let text = try String(contentsOf: folder.path("shop.json"), encoding: .utf8)
        #expect(text == """
        {
          "metadata": {
            "LMDBStoreModelVersionHash": "\(StoreConformance.model.versionHashString)",
            "LMDBStoreNextReference.Item": "4",
            "LMDBStoreNextReference.Label": "2",
            "LMDBStoreNextReference.Owner": "2",
            "NSStoreType": "JSON",
            "NSStoreUUID": "0F6E3C1A-6B8A-4F5E-9C2D-1A2B3C4D5E6F"
          },
          "entities": {
            "Sample": [],
            "Owner": [
              {"@id": 1, "name": "Ann, \\"the\\" owner", "queue": [3, 1]}
            ],
            "Item": [
              {"@id": 1, "name": "item 0", "rank": 0, "owner": 1, "labels": []},
              {"@id": 2, "name": "item 1", "rank": 1, "owner": 1, "labels": [1]},
              {"@id": 3, "name": "item 2", "rank": 2, "owner": 1, "labels": []}
            ],
            "Label": [
              {"@id": 1, "name": ""}
            ],
            "Circle": [],
            "Square": []
          }
        }

        """)
        #expect(try PersistentStoreCoordinator.metadataForPersistentStore(type: JSONStore.storeType, at: folder.path("shop.json"))[PersistentStoreMetadataKey.uuid]
                == "0F6E3C1A-6B8A-4F5E-9C2D-1A2B3C4D5E6F")
    }

    /// A file another program wrote: keys of its own (strings too), relationships on the documented side only,
    /// missing columns as NULL, no metadata at all.
    @Test func aHandWrittenFileLoads() throws {
        let folder = ScratchFolder()
        let url = folder.write("""
        {"entities": {
          "Owner": [{"@id": "o-1", "name": "Bo"}],
          "Item": [{"@id": 7, "name": "x", "owner": "o-1", "labels": ["red"]}, {"@id": 9, "name": "y", "rank": -3}],
          "Label": [{"@id": "red", "name": "Red"}],
          "Sample": [{"@id": 1, "date": "2024-02-29T23:59:59.5+01:00", "dec": 0.1, "flt": 0.1, "bool": true, "data": "AAH/"}]
        }}
        """, to: "hand.json")
        let (coordinator, store) = try atomicCoordinator(JSONStore.storeType, at: url)
        #expect(!store.isNewStore)
        let context = ManagedObjectContext(coordinator: coordinator)
        let owner = try #require(try context.fetch(FetchRequest(entityName: "Owner")).first)
        #expect(owner.objectID.referenceObject == .string("o-1"))
        #expect(owner.relatedObjects(forKey: "items").map { $0.value(forKey: "name") as? String } == ["x"])
        let red = try #require(try context.fetch(FetchRequest(entityName: "Label")).first)
        #expect(red.relatedObjects(forKey: "items").count == 1)
        let sample = try #require(try context.fetch(FetchRequest(entityName: "Sample")).first)
        #expect(sample.value(forKey: "date") as? Date == AttributeText.parseDate("2024-02-29T22:59:59.5Z"))
        #expect(sample.value(forKey: "dec") as? Decimal == Decimal(string: "0.1"))
        #expect(sample.value(forKey: "flt") as? Float == Float(0.1))
        #expect(sample.value(forKey: "data") as? Data == Data([0, 1, 255]))
        // New objects do not reuse the file's integer keys, and saving keeps the hand-written ones.
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("z", forKey: "name")
        try context.save()
        #expect(item.objectID.referenceObject == .integer(10))
        let text = try String(contentsOf: url, encoding: .utf8)
        #expect(text.contains(#"{"@id": "o-1", "name": "Bo", "queue": []}"#))
        #expect(text.contains(#""NSStoreUUID": "\#(store.identifier)""#))
    }

    @Test func objectURIsResolveAfterAReload() throws {
        let folder = ScratchFolder()
        let url = folder.path("store.json")
        let (coordinator, _) = try atomicCoordinator(JSONStore.storeType, at: url)
        let graph = try saveSmallGraph(coordinator)
        let uris = ([graph.owner, graph.label] + graph.items).map(\.objectID.uriRepresentation)
        let (reopened, _) = try atomicCoordinator(JSONStore.storeType, at: url)
        let context = ManagedObjectContext(coordinator: reopened)
        for (uri, object) in zip(uris, [graph.owner, graph.label] + graph.items) {
            let id = try reopened.managedObjectID(forURIRepresentation: uri)
            #expect(id == object.objectID)
            #expect(try context.existingObject(with: id).value(forKey: "name") as? String == object.value(forKey: "name") as? String)
        }
    }

    @Test func aZeroLengthFileBecomesAStore() throws {
        let folder = ScratchFolder()
        let url = folder.write("", to: "empty.json")
        let (coordinator, store) = try atomicCoordinator(JSONStore.storeType, at: url)
        #expect(store.isNewStore)
        try saveSmallGraph(coordinator)
        let (reopened, again) = try atomicCoordinator(JSONStore.storeType, at: url)
        #expect(!again.isNewStore && again.identifier == store.identifier)
        #expect(try ManagedObjectContext(coordinator: reopened).count(for: FetchRequest(entityName: "Item")) == 3)
    }

    @Test func removingAStoreKeepsAFileItDidNotCreate() throws {
        let folder = ScratchFolder()
        let url = folder.write("", to: "mine.json")
        let (coordinator, store) = try atomicCoordinator(JSONStore.storeType, at: url)
        try coordinator.removePersistentStore(store)
        #expect(FileManager.default.fileExists(atPath: url.path), "the user's own empty file was removed")
    }

    @Test func aSaveInterruptedBeforeTheRenameLeavesTheOldFile() throws {
        let folder = ScratchFolder()
        let url = folder.path("store.json")
        let (coordinator, _) = try atomicCoordinator(JSONStore.storeType, at: url)
        let graph = try saveSmallGraph(coordinator)
        let before = try Data(contentsOf: url)
        StoreFileTesting.setInterruption(at: url) { point in
            if point == "beforeRename" { throw CancellationError() }
        }
        defer { StoreFileTesting.setInterruption(at: url, nil) }
        let context = ManagedObjectContext(coordinator: coordinator)
        try context.object(with: graph.items[0].objectID).setValue("renamed", forKey: "name")
        #expect(throws: CancellationError.self) { try context.save() }
        #expect(try Data(contentsOf: url) == before)
        #expect(FileManager.default.fileExists(atPath: folder.path(".store.json.saving").path), "the interrupted save wrote no temporary file")
        // The store in memory is as before the failed save, like the file.
        #expect(try ManagedObjectContext(coordinator: coordinator).existingObject(with: graph.items[0].objectID).value(forKey: "name") as? String == "item 0")
        let (reopened, _) = try atomicCoordinator(JSONStore.storeType, at: url)
        #expect(try ManagedObjectContext(coordinator: reopened).existingObject(with: graph.items[0].objectID).value(forKey: "name") as? String == "item 0")
        // The next save goes through.
        StoreFileTesting.setInterruption(at: url, nil)
        try context.save()
        let (third, _) = try atomicCoordinator(JSONStore.storeType, at: url)
        #expect(try ManagedObjectContext(coordinator: third).existingObject(with: graph.items[0].objectID).value(forKey: "name") as? String == "renamed")
    }

    // MARK: - Bad input

    /// Each bad file fails to open with an error naming the file, line, record and field, and is left untouched.
    @Test(arguments: [
        (#"{"entities": {"Item": [{"@id": 1, "name": "a",}]}}"#, StoreFileError.Kind.malformed, 1 as Int?, nil as String?, nil as String?, "expected a member name"),
        ("{\n\"entities\": {\n\"Item\": [\n{\"@id\": 1, \"name\": \"a\"}\n]\n}\n", .malformed, 7, nil, nil, "the text ends"),
        ("[1, 2]", .malformed, 1, nil, nil, "not a JSON store's object"),
        ("{\"entities\": {\"Item\": [\n{\"@id\": 1, \"name\": \"a\", \"rank\": \"high\"}]}}", .wrongValueType, 2, "Item 1", "rank", "string is not a Integer 32"),
        ("{\"entities\": {\"Item\": [\n{\"@id\": 1, \"name\": \"a\", \"rank\": 3000000000}]}}", .wrongValueType, 2, "Item 1", "rank", "does not fit"),
        ("{\"entities\": {\"Sample\": [\n{\"@id\": 1, \"date\": \"yesterday\"}]}}", .wrongValueType, 2, "Sample 1", "date", "ISO 8601"),
        ("{\"entities\": {\"Item\": [\n{\"@id\": 1, \"name\": \"a\", \"colour\": \"red\"}]}}", .wrongValueType, 2, "Item 1", "colour", "no stored attribute"),
        ("{\"entities\": {\"Item\": [\n{\"@id\": 1, \"name\": \"a\", \"owner\": 4}]}}", .danglingReference, 2, "Item 1", "owner", "Owner 4"),
        ("{\"entities\": {\"Owner\": [{\"@id\": 4, \"name\": \"o\"}], \"Item\": [\n{\"@id\": 1, \"name\": \"a\", \"labels\": [4]}]}}", .danglingReference, 2, "Item 1", "labels", "Label 4"),
        ("{\"entities\": {\"Owner\": [\n{\"@id\": 4, \"name\": \"o\", \"items\": []}]}}", .malformed, 2, "Owner 4", "items", "Item.owner"),
        ("{\"entities\": {\"Item\": [{\"@id\": 1, \"name\": \"a\"},\n{\"@id\": 1, \"name\": \"b\"}]}}", .malformed, 2, "Item 1", "@id", "also used"),
        ("{\"entities\": {\"Item\": [\n{\"name\": \"a\"}]}}", .malformed, 2, "Item #1", "@id", "missing"),
        ("{\"entities\": {\"Shape\": []}}", .foreignFile, 1, nil, "entities.Shape", "abstract"),
        ("{\"entities\": {\"Person\": []}}", .foreignFile, 1, nil, "entities.Person", "not an entity"),
        ("{\"metadata\": {\"NSStoreType\": \"CSV\"}, \"entities\": {}}", .foreignFile, nil, nil, "NSStoreType", "\"CSV\" store"),
        ("{\"metadata\": {\"LMDBStoreModelVersionHash\": \"00ff\"}, \"entities\": {}}", .foreignFile, nil, nil, "LMDBStoreModelVersionHash", "another model"),
        ("{\"metadata\": {\"NSStoreUUID\": 5}}", .malformed, 1, nil, "metadata.NSStoreUUID", "not a string"),
    ])
    func aBadFileIsReportedAndLeftAlone(text: String, kind: StoreFileError.Kind, line: Int?, record: String?, field: String?, reason: String) throws {
        let folder = ScratchFolder()
        let url = folder.write(text, to: "bad.json")
        let error = try #require(expectFileError(JSONStore.storeType, at: url, kind))
        #expect(error.url == url)
        #expect(error.line == line, "\(error)")
        #expect(error.record == record, "\(error)")
        #expect(error.field == field, "\(error)")
        #expect(error.reason.contains(reason), "\(error)")
        #expect(error.description.hasPrefix(url.path), "\(error)")
        #expect(try String(contentsOf: url, encoding: .utf8) == text)
    }

    @Test func aFolderIsNotAJSONStore() throws {
        let folder = ScratchFolder()
        try FileManager.default.createDirectory(at: folder.path("dir.json"), withIntermediateDirectories: true)
        let error = expectFileError(JSONStore.storeType, at: folder.path("dir.json"), .io)
        #expect(error?.reason.contains("folder") == true)
    }

    @Test func aStoreNeedsAFileURL() {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        #expect(throws: ManagedObjectContextError.self) { try coordinator.addPersistentStore(type: JSONStore.storeType) }
    }
}
