import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// Objects that read some of their values and change others: every path that reads, writes, saves, restores or hands
/// on an object's values keeps the values its row has — whether the object read them yet or not — for every
/// attribute type a row holds.
@Suite(.onEveryEngine) struct PartialReadTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("name", .string)
            AttributeDescription("count", .integer64, isOptional: true)
            AttributeDescription("price", .decimal, isOptional: true)
            AttributeDescription("link", .uri, isOptional: true)
            AttributeDescription("blob", .binaryData, isOptional: true)
            AttributeDescription("tag", .uuid, isOptional: true)
            AttributeDescription("seen", .date, isOptional: true)
            AttributeDescription("note", .string, isOptional: true).transient()
        }
    }

    private let tag = UUID(uuidString: "3F2504E0-4F89-11D3-9A0C-0305E82C3301")!

    /// A store holding one item with every attribute set; returns its ID.
    private func seeded(_ coordinator: PersistentStoreCoordinator) throws -> ManagedObjectID {
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("lamp", forKey: "name")
        try item.setValue(Int64(3), forKey: "count")
        try item.setValue(Decimal(string: "19.99")!, forKey: "price")
        try item.setValue(URL(string: "https://example.com/lamp")!, forKey: "link")
        try item.setValue(Data([1, 2, 3]), forKey: "blob")
        try item.setValue(tag, forKey: "tag")
        try item.setValue(Date(timeIntervalSinceReferenceDate: 1000), forKey: "seen")
        try context.save()
        return item.objectID
    }

    private func expectSeededValues(_ item: ManagedObject, name: String = "lamp", count: Int64 = 3, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(item["name"] as? String == name, sourceLocation: sourceLocation)
        #expect(item["count"] as? Int64 == count, sourceLocation: sourceLocation)
        #expect(item["price"] as? Decimal == Decimal(string: "19.99")!, sourceLocation: sourceLocation)
        #expect(item["link"] as? URL == URL(string: "https://example.com/lamp")!, sourceLocation: sourceLocation)
        #expect(item["blob"] as? Data == Data([1, 2, 3]), sourceLocation: sourceLocation)
        #expect(item["tag"] as? UUID == tag, sourceLocation: sourceLocation)
        #expect(item["seen"] as? Date == Date(timeIntervalSinceReferenceDate: 1000), sourceLocation: sourceLocation)
    }

    @Test func aFaultReadsEachValueOfItsRow() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = context.object(with: id)
        #expect(item["count"] as? Int64 == 3)
        #expect(!item.isFault)
        expectSeededValues(item)
    }

    @Test func aSaveWritesTheValuesTheObjectNeverRead() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = context.object(with: id)
        try item.setValue(Int64(4), forKey: "count")  // loads the row, reads nothing else
        #expect(item.changedValues.keys.sorted() == ["count"])
        #expect(item.committedValues(forKeys: ["count", "name"])["count"] as? Int64 == 3)
        #expect(item.committedValues(forKeys: ["count", "name"])["name"] as? String == "lamp")
        try context.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        expectSeededValues(reader.object(with: id), count: 4)
        expectSeededValues(item, count: 4)
    }

    @Test func rollbackAndRefreshPutBackTheRowsValues() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = context.object(with: id)
        try item.setValue("lantern", forKey: "name")
        try item.setValue("fragile", forKey: "note")
        context.rollback()
        expectSeededValues(item)

        try item.setValue(Int64(9), forKey: "count")
        context.refresh(item, mergeChanges: true)
        expectSeededValues(item, count: 9)
        context.refresh(item, mergeChanges: false)
        #expect(item.isFault)
        expectSeededValues(item)
    }

    @Test func aTransientValueSetOnAFaultSurvivesTheRow() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = context.object(with: id)
        try item.setValue("fragile", forKey: "note")
        #expect(item.isFault)
        #expect(item["name"] as? String == "lamp")
        #expect(item["note"] as? String == "fragile")
        expectSeededValues(item)
    }

    /// A conflicting save: the values the losing context never read come from the store's newer row when its
    /// changes win property by property, and stay its own snapshot's when the save is refused.
    @Test func aConflictResolvesTheValuesAnObjectNeverRead() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let mine = ManagedObjectContext(coordinator: coordinator)
        let item = mine.object(with: id)
        try item.setValue(Int64(5), forKey: "count")

        let theirs = ManagedObjectContext(coordinator: coordinator)
        try theirs.object(with: id).setValue("lantern", forKey: "name")
        try theirs.save()

        #expect(throws: ManagedObjectContextError.self) { try mine.save() }
        // The failed save left the object as it was: its change, and the row it loaded.
        #expect(item["count"] as? Int64 == 5)
        #expect(item.committedValues(forKeys: ["name"])["name"] as? String == "lamp")

        mine.mergePolicy = .mergeByPropertyObjectTrump
        try mine.save()
        expectSeededValues(item, name: "lantern", count: 5)
        let reader = ManagedObjectContext(coordinator: coordinator)
        expectSeededValues(reader.object(with: id), name: "lantern", count: 5)
    }

    @Test func aChildReadsItsParentsObjectWhetherOrNotTheParentReadIt() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let parent = ManagedObjectContext(coordinator: coordinator)
        let item = parent.object(with: id)
        #expect(item["count"] as? Int64 == 3)
        let child = ManagedObjectContext(parent: parent)
        expectSeededValues(child.object(with: id))
        // With an unsaved change in the parent, the child sees it and the row's other values.
        try item.setValue("lantern", forKey: "name")
        let secondChild = ManagedObjectContext(parent: parent)
        expectSeededValues(secondChild.object(with: id), name: "lantern")
    }

    @Test func aLoadedFetchHandsOutEveryValue() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        _ = try seeded(coordinator)
        var request = FetchRequest(entityName: "Item")
        request.returnsObjectsAsFaults = false
        let context = ManagedObjectContext(coordinator: coordinator)
        let items = try context.fetch(request)
        #expect(items.count == 1)
        expectSeededValues(items[0])
    }

    /// An entity with more attributes than a 64-bit set of positions holds (the change bits' first word).
    @Test func anEntityOfManyAttributesLoadsEveryValue() throws {
        let wide = try ManagedObjectModel {
            EntityDescription("Wide") {
                for n in 0..<70 { AttributeDescription("a\(n)", .integer32, isOptional: true) }
            }
        }
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(wide)
        let context = ManagedObjectContext(coordinator: coordinator)
        let object = try context.insertNewObject(forEntityName: "Wide")
        for n in stride(from: 0, to: 70, by: 3) { try object.setValue(Int32(n * 10), forKey: "a\(n)") }
        try context.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let loaded = reader.object(with: object.objectID)
        for n in 0..<70 {
            #expect(loaded["a\(n)"] as? Int32 == (n % 3 == 0 ? Int32(n * 10) : nil), "a\(n)")
        }
    }
}
