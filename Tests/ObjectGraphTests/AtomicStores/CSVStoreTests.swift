import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

@Suite struct CSVStoreTests {
    @Test func theCSVStorePassesEveryConformanceCheck() {
        let report = StoreConformance.runAtomicStore { coordinator, url in
            try coordinator.addPersistentStore(type: CSVStore.storeType, at: url)
        }
        #expect(report.checks == StoreConformance.checkNames + StoreConformance.atomicStoreCheckNames)
        #expect(report.passed, "\(report)")
    }

    /// The format is what `Docs/ATOMIC-STORES.md` shows: a spreadsheet can rely on it.
    @Test func theFilesAreTheDocumentedCSV() throws {
        let folder = ScratchFolder()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        let url = folder.path("shop")
        try coordinator.addPersistentStore(type: CSVStore.storeType, at: url, options: ["uuid": "0F6E3C1A-6B8A-4F5E-9C2D-1A2B3C4D5E6F"])
        let graph = try saveSmallGraph(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let sample = try context.insertNewObject(forEntityName: "Sample")
        try sample.setValue("two\nlines", forKey: "str")
        try sample.setValue(Date(timeIntervalSinceReferenceDate: 7.25), forKey: "date")
        try sample.setValue(-Double.infinity, forKey: "dbl")
        try sample.setValue(true, forKey: "bool")
        try sample.setValue(graph.owner.objectID, forKey: "ref")
        try context.save()
        func file(_ name: String) throws -> String { try String(contentsOf: url.appendingPathComponent(name), encoding: .utf8) }
        #expect(try file("Owner.csv") == "@id,name,queue\r\n1,\"Ann, \"\"the\"\" owner\",3 1\r\n")
        #expect(try file("Item.csv") == "@id,name,rank,owner,labels\r\n1,item 0,0,1,\r\n2,item 1,1,1,1\r\n3,item 2,2,1,\r\n")
        #expect(try file("Label.csv") == "@id,name\r\n1,\"\"\r\n")
        #expect(try file("Circle.csv") == "@id,area,radius\r\n")
        #expect(try file("Sample.csv") == """
            @id,i16,i32,i64,dec,dbl,flt,str,bool,date,data,uuid,uri,ref\r
            1,,,,,-Infinity,,"two
            lines",true,2001-01-01T00:00:07.25Z,,,,\(graph.owner.objectID.uriRepresentation.absoluteString)\r

            """)
        #expect(try file("metadata.json").contains(#""NSStoreType": "CSV""#))
        #expect(try CSVStore.metadata(at: url)[PersistentStoreMetadataKey.uuid] == "0F6E3C1A-6B8A-4F5E-9C2D-1A2B3C4D5E6F")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "a save left \(leftovers) behind")
    }

    /// Files a spreadsheet wrote: columns in another order or missing, LF line ends, string keys, a quoted line break.
    @Test func handWrittenFilesLoad() throws {
        let folder = ScratchFolder()
        folder.write("name,@id\nBo,o-1\n", to: "shop/Owner.csv")
        folder.write("owner,name,@id,labels\no-1,\"x\ny\",7,red blue\n,,9,\n\n", to: "shop/Item.csv")
        folder.write("@id,name\r\nred,Red\r\nblue,\"\"\r\n", to: "shop/Label.csv")
        let (coordinator, store) = try atomicCoordinator(CSVStore.storeType, at: folder.path("shop"))
        #expect(!store.isNewStore)
        let context = ManagedObjectContext(coordinator: coordinator)
        let items = try context.fetch(FetchRequest(entityName: "Item", sortDescriptors: [FetchSortDescriptor(keyPath: "rank")]))
        #expect(items.count == 2)
        let seven = try context.existingObject(with: store.objectID(forEntityName: "Item", withReferenceObject: .integer(7)))
        #expect(seven.value(forKey: "name") as? String == "x\ny")
        #expect(Set(seven.relatedObjects(forKey: "labels").map { $0.objectID.referenceObject }) == [.string("red"), .string("blue")])
        #expect((seven.value(forKey: "owner") as? ManagedObject)?.value(forKey: "name") as? String == "Bo")
        let nine = try context.existingObject(with: store.objectID(forEntityName: "Item", withReferenceObject: .integer(9)))
        #expect(nine.value(forKey: "name") == nil, "an empty unquoted field is NULL")
        let blue = try context.existingObject(with: store.objectID(forEntityName: "Label", withReferenceObject: .string("blue")))
        #expect(blue.value(forKey: "name") as? String == "", "a quoted empty field is an empty string")
    }

    @Test func anEmptyFolderOrAnEmptyMetadataFileIsANewStore() throws {
        let folder = ScratchFolder()
        try FileManager.default.createDirectory(at: folder.path("empty"), withIntermediateDirectories: true)
        folder.write("", to: "blank/metadata.json")
        for name in ["empty", "blank"] {
            let (coordinator, store) = try atomicCoordinator(CSVStore.storeType, at: folder.path(name))
            #expect(store.isNewStore)
            try saveSmallGraph(coordinator)
            let (reopened, again) = try atomicCoordinator(CSVStore.storeType, at: folder.path(name))
            #expect(again.identifier == store.identifier)
            #expect(try ManagedObjectContext(coordinator: reopened).count(for: FetchRequest(entityName: "Item")) == 3)
            try coordinator.removePersistentStore(store)
            #expect(FileManager.default.fileExists(atPath: folder.path(name).path), "removing a saved store removed its folder")
        }
    }

    /// A crash before the commit marker leaves the last save; a crash after it is finished when the store opens.
    @Test(arguments: [("beforeCommit", "item 0"), ("afterCommit", "renamed")])
    func anInterruptedSaveReadsAsOneWholeSave(point: String, expectedName: String) throws {
        let folder = ScratchFolder()
        let url = folder.path("shop")
        let (coordinator, _) = try atomicCoordinator(CSVStore.storeType, at: url)
        let graph = try saveSmallGraph(coordinator)
        let before = folder.snapshot()
        StoreFileTesting.setInterruption(at: url) { reached in
            if reached == point { throw CancellationError() }
        }
        defer { StoreFileTesting.setInterruption(at: url, nil) }
        let context = ManagedObjectContext(coordinator: coordinator)
        try context.object(with: graph.items[0].objectID).setValue("renamed", forKey: "name")
        let extra = try context.insertNewObject(forEntityName: "Label")
        try extra.setValue("new", forKey: "name")
        #expect(throws: CancellationError.self) { try context.save() }
        if point == "beforeCommit" {
            #expect(folder.snapshot().filter { !$0.key.contains(".saving") } == before, "an uncommitted save changed a file")
        }
        StoreFileTesting.setInterruption(at: url, nil)
        let (reopened, _) = try atomicCoordinator(CSVStore.storeType, at: url)
        let fresh = ManagedObjectContext(coordinator: reopened)
        #expect(try fresh.existingObject(with: graph.items[0].objectID).value(forKey: "name") as? String == expectedName)
        #expect(try fresh.count(for: FetchRequest(entityName: "Label")) == (point == "afterCommit" ? 2 : 1))
        let hidden = try FileManager.default.contentsOfDirectory(atPath: url.path).filter { $0.hasPrefix(".") }
        #expect(hidden.isEmpty, "opening the store left \(hidden) behind")
    }

    // MARK: - Bad input

    /// Each bad folder fails to open with an error naming the file, line, record and field, and is left untouched.
    @Test(arguments: [
        ("Item.csv", "@id,name\n1,\"open\n", StoreFileError.Kind.malformed, 2 as Int?, nil as String?, nil as String?, "not closed"),
        ("Item.csv", "@id,name\n1,a\"b\n", .malformed, 2, nil, nil, "quote inside an unquoted field"),
        ("Item.csv", "@id,name\n1,\"a\"b\n", .malformed, 2, nil, nil, "after a closing quote"),
        ("Item.csv", "@id,name\n1,a,extra\n", .malformed, 2, nil, nil, "3 fields"),
        ("Item.csv", "@id,name,rank\n1,a,high\n", .wrongValueType, 2, "Item 1", "rank", "not an integer"),
        ("Item.csv", "@id,name,rank\n1,a,1.5\n", .wrongValueType, 2, "Item 1", "rank", "not an integer"),
        ("Sample.csv", "@id,bool\n1,yes\n", .wrongValueType, 2, "Sample 1", "bool", "true or false"),
        ("Sample.csv", "@id,uuid\n1,not-a-uuid\n", .wrongValueType, 2, "Sample 1", "uuid", "UUID"),
        ("Sample.csv", "@id,dbl\n1,nan\n", .wrongValueType, 2, "Sample 1", "dbl", "number"),
        ("Item.csv", "@id,name,colour\n1,a,red\n", .wrongValueType, 1, nil, "colour", "no stored attribute"),
        ("Item.csv", "@id,name,owner\n1,a,4\n", .danglingReference, 2, "Item 1", "owner", "Owner 4"),
        ("Item.csv", "@id,name,owner\n1,a,4 5\n", .wrongValueType, 2, "Item 1", "owner", "a to-one holds one"),
        ("Owner.csv", "@id,name,items\n1,o,\n", .malformed, 1, nil, "items", "Item.owner"),
        ("Item.csv", "@id,name,name\n", .malformed, 1, nil, "name", "twice"),
        ("Item.csv", "name\na\n", .malformed, 1, nil, nil, "no @id column"),
        ("Item.csv", "@id,name\nx y,a\n", .malformed, 2, nil, "@id", "space"),
        ("Item.csv", "@id,name\n,a\n", .malformed, 2, nil, "@id", "no key"),
        ("Item.csv", "@id,name\n1,a\n1,b\n", .malformed, 3, "Item 1", "@id", "also used"),
        ("Shape.csv", "@id,area\n", .foreignFile, nil, nil, nil, "abstract"),
        ("Person.csv", "@id,name\n", .foreignFile, nil, nil, nil, "not an entity"),
        ("metadata.json", "{\"LMDBStoreModelVersionHash\": \"00ff\"}", .foreignFile, nil, nil, "LMDBStoreModelVersionHash", "another model"),
        ("metadata.json", "{\"NSStoreType\": \"JSON\"}", .foreignFile, nil, nil, "NSStoreType", "\"JSON\" store"),
        ("metadata.json", "{\"NSStoreUUID\": \"12\"}", .foreignFile, nil, nil, "NSStoreUUID", "not a UUID"),
        ("metadata.json", "{oops}", .malformed, 1, nil, nil, "not JSON"),
    ])
    func aBadFileIsReportedAndLeftAlone(name: String, text: String, kind: StoreFileError.Kind, line: Int?, record: String?, field: String?, reason: String) throws {
        let folder = ScratchFolder()
        folder.write("@id,name\n1,kept\n", to: "shop/Label.csv")
        let bad = folder.write(text, to: "shop/" + name)
        let before = folder.snapshot()
        let error = try #require(expectFileError(CSVStore.storeType, at: folder.path("shop"), kind))
        #expect(error.url.lastPathComponent == name, "\(error)")
        #expect(error.line == line, "\(error)")
        #expect(error.record == record, "\(error)")
        #expect(error.field == field, "\(error)")
        #expect(error.reason.contains(reason), "\(error)")
        #expect(folder.snapshot() == before)
        _ = bad
    }

    @Test func aFileIsNotACSVStore() {
        let folder = ScratchFolder()
        let url = folder.write("x", to: "file.csv")
        let error = expectFileError(CSVStore.storeType, at: url, .io)
        #expect(error?.reason.contains("folder") == true)
    }
}
