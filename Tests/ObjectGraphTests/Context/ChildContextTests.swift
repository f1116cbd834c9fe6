import Foundation
import Testing
@testable import ObjectGraph

@Suite struct ChildContextTests {
    @Test func aChildSeesItsParentsUnsavedState() throws {
        let (coordinator, _) = try makeStack()
        let parent = ManagedObjectContext(coordinator: coordinator)
        let saved = try parent.make("Author", ["name": "Saved"])
        let doomed = try parent.make("Author", ["name": "Doomed"])
        try parent.save()
        let unsaved = try parent.make("Author", ["name": "Unsaved"])
        try saved.setValue("Edited", forKey: "name")
        parent.delete(doomed)
        let child = ManagedObjectContext(parent: parent)
        let names = try child.fetch(FetchRequest(entityName: "Author", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
            .map { $0["name"] as? String }
        #expect(names == ["Edited", "Unsaved"])
        #expect(try child.existingObject(with: unsaved.objectID)["name"] as? String == "Unsaved")
        #expect(try child.count(for: FetchRequest(entityName: "Author")) == 2)
    }

    @Test func aChildsSaveReachesOnlyItsParent() throws {
        let (coordinator, stores) = try makeStack()
        let parent = ManagedObjectContext(coordinator: coordinator)
        let author = try parent.make("Author", ["name": "A"])
        try parent.save()
        let child = ManagedObjectContext(parent: parent)
        let mine = child.object(with: author.objectID)
        try mine.setValue("Child edit", forKey: "name")
        let book = try child.make("Book", ["title": "Child book", "author": mine])
        let saves = stores[0].callCounts.saves
        try child.save()
        #expect(stores[0].callCounts.saves == saves, "nothing reached the store")
        #expect(!child.hasChanges && parent.hasChanges)
        #expect(author["name"] as? String == "Child edit")
        let pushed = try #require(parent.registeredObject(for: book.objectID))
        #expect(pushed.isInserted && (pushed["author"] as? ManagedObject) === author)
        #expect(Array(author.relatedObjects(forKey: "books")) == [pushed], "both sides of the relationship arrived")
        try parent.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.count(for: FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "author.name == 'Child edit'"))) == 1)
    }

    @Test func discardingAChildLeavesTheParentUntouched() throws {
        let (coordinator, _) = try makeStack()
        let parent = ManagedObjectContext(coordinator: coordinator)
        let author = try parent.make("Author", ["name": "Stable"])
        try parent.save()
        do {
            let child = ManagedObjectContext(parent: parent)
            try child.object(with: author.objectID).setValue("Scratch", forKey: "name")
            _ = try child.make("Author", ["name": "Scratch too"])
            child.delete(child.object(with: author.objectID))
        }
        #expect(!parent.hasChanges)
        #expect(author["name"] as? String == "Stable" && !author.isDeleted)
        #expect(try parent.count(for: FetchRequest(entityName: "Author")) == 1)
    }

    @Test func permanentIDsObtainedInAChildSurviveBothSaves() throws {
        let (coordinator, _) = try makeStack()
        let parent = ManagedObjectContext(coordinator: coordinator)
        let child = ManagedObjectContext(parent: parent)
        let tag = try child.make("Tag", ["label": "early"])
        try child.obtainPermanentIDs(for: [tag])
        let id = tag.objectID
        #expect(!id.isTemporaryID)
        try child.save()
        #expect(parent.registeredObject(for: id)?.isInserted == true)
        try parent.save()
        #expect(parent.registeredObject(for: id)?.objectID == id)
        #expect(try ManagedObjectContext(coordinator: coordinator).existingObject(with: id)["label"] as? String == "early")
    }

    @Test func aChildDeletesAndValidatesBeforePushing() throws {
        let (coordinator, _) = try makeStack()
        let parent = ManagedObjectContext(coordinator: coordinator)
        let author = try parent.make("Author", ["name": "Parent"])
        _ = try parent.make("Book", ["title": "B", "author": author])
        try parent.save()
        let child = ManagedObjectContext(parent: parent)
        child.delete(child.object(with: author.objectID))
        _ = try child.make("Book", [:])
        #expect(throws: ManagedObjectContextError.self) { try child.save() }
        #expect(!parent.hasChanges, "a failed child save pushes nothing")
        child.rollback()
        child.delete(child.object(with: author.objectID))
        try child.save()
        #expect(author.isDeleted)
        try parent.save()
        #expect(try parent.count(for: FetchRequest(entityName: "Book")) == 0, "the cascade ran")
    }
}
