import Foundation
import Testing
@testable import ObjectGraph

@Suite struct SaveValidationTests {
    @Test func everyFailureIsReportedTogetherWithEntityPropertyAndID() throws {
        let (coordinator, stores) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": String(repeating: "x", count: 41), "email": "not an address"])
        let book = try context.make("Book", ["pages": 6000])
        let chapter = try context.make("Chapter", ["title": "Orphan"])
        let tags = try (1...4).map { try context.make("Tag", ["label": "l\($0)"]) }
        for tag in tags { try (try book.mutableRelationship(forKey: "tags")).insert(tag) }
        do {
            try context.save()
            Issue.record("invalid objects were saved")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .validation)
            let found = Set(error.validationFailures.map { "\($0.entityName).\($0.propertyName ?? "")" })
            #expect(found == ["Author.name", "Author.email", "Book.title", "Book.pages", "Book.tags", "Chapter.book"])
            let messages = error.validationFailures.map(\.description).joined(separator: "\n")
            #expect(messages.contains("longer than the maximum length 40"))
            #expect(messages.contains("does not match the pattern"))
            #expect(messages.contains("Book.title (\(book.objectID)): a value is required"))
            #expect(messages.contains("above the maximum 5000"))
            #expect(messages.contains("more than the maximum 3"))
            #expect(messages.contains("Chapter.book (\(chapter.objectID)): an object is required"))
        }
        #expect(stores[0].callCounts.saves == 0)
        #expect(author.objectID.isTemporaryID && author.isInserted, "the context is unchanged")
    }

    @Test func subclassValidationRunsAfterTheModelsRules() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.insert(Author.self, entityName: "Author")
        author.name = "Fine"
        try context.save()
        author.name = "Forbidden"
        do {
            try context.save()
            Issue.record("validateForUpdate did not run")
        } catch let error as ManagedObjectContextError {
            #expect(error.validationFailures.map(\.message) == ["that name is forbidden"])
        }
        #expect(author.hasChanges)
    }

    @Test func aUniquenessViolationWritesNothing() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        _ = try context.make("Tag", ["label": "dup"])
        try context.save()
        let second = try context.make("Tag", ["label": "dup"])
        let other = try context.make("Tag", ["label": "fine"])
        do {
            try context.save()
            Issue.record("a duplicate label was saved")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .constraintViolation)
            #expect(error.message.contains("(label) = (\"dup\")"))
        }
        #expect(second.isInserted && other.isInserted)
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.count(for: FetchRequest(entityName: "Tag")) == 1)
    }

    @Test func aFailedSaveKeepsTheCleanObjectsItHoldsAndPutsTheChangedOnesBack() throws {
        let (coordinator, _) = try makeStack()
        let setup = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<20 { _ = try setup.make("Tag", ["label": "t\(n)"]) }
        try setup.save()
        let context = ManagedObjectContext(coordinator: coordinator)
        let held = try context.fetch(FetchRequest(entityName: "Tag"))
        let fault = context.object(with: held[5].objectID)
        let edited = held[0]
        try edited.setValue("renamed", forKey: "label")
        let duplicate = try context.make("Tag", ["label": "t7"])
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
        // The save recorded only what it writes; every object the context held is still there, as it was.
        for object in held { #expect(context.object(with: object.objectID) === object) }
        #expect(context.object(with: fault.objectID) === fault)
        #expect(held[3].value(forKey: "label") as? String == "t3" && !held[3].hasChanges)
        #expect(edited.isUpdated && edited.value(forKey: "label") as? String == "renamed")
        #expect(duplicate.isInserted && duplicate.objectID.isTemporaryID)
        try duplicate.setValue("t20", forKey: "label")
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.count(for: FetchRequest(entityName: "Tag")) == 21)
        #expect(fresh.object(with: edited.objectID).value(forKey: "label") as? String == "renamed")
    }
}

@Suite struct ConflictTests {
    /// Saves an author, then edits it in two contexts; the second save conflicts.
    func conflict(_ policy: MergePolicy) throws -> (ManagedObjectContext, ManagedObject, PersistentStoreCoordinator, Result<Void, any Error>) {
        let (coordinator, _) = try makeStack()
        let setup = ManagedObjectContext(coordinator: coordinator)
        let author = try setup.make("Author", ["name": "Original", "email": "o@x.y"])
        try setup.save()
        let first = ManagedObjectContext(coordinator: coordinator)
        let second = ManagedObjectContext(coordinator: coordinator)
        second.mergePolicy = policy
        let mine = second.object(with: author.objectID)
        _ = mine["name"]
        let theirs = first.object(with: author.objectID)
        try theirs.setValue("Theirs", forKey: "name")
        try theirs.setValue("t@x.y", forKey: "email")
        try first.save()
        try mine.setValue("Mine", forKey: "name")
        try mine.setValue(Date(timeIntervalSinceReferenceDate: 5), forKey: "born")
        return (second, mine, coordinator, Result { try second.save() })
    }

    func stored(_ coordinator: PersistentStoreCoordinator, _ id: ManagedObjectID) throws -> ManagedObject {
        try ManagedObjectContext(coordinator: coordinator).existingObject(with: id)
    }

    @Test func theDefaultPolicyReportsTheConflictAndChangesNothing() throws {
        let (context, mine, coordinator, result) = try conflict(.error)
        guard case .failure(let error as ManagedObjectContextError) = result else { Issue.record("no conflict"); return }
        #expect(error.code == .mergeConflict)
        #expect(error.conflicts.count == 1)
        #expect(error.conflicts[0].objectID == mine.objectID)
        #expect(error.conflicts[0].oldVersion == 1 && error.conflicts[0].newVersion == 2)
        #expect(error.conflicts[0].persistedSnapshot?.attributes["name"] == .string("Theirs"))
        #expect(mine.hasChanges && context.hasChanges)
        #expect(try stored(coordinator, mine.objectID)["name"] as? String == "Theirs")
    }

    @Test func storeTrumpKeepsTheStoresChangedValuesAndMyOthers() throws {
        let (_, mine, coordinator, result) = try conflict(.mergeByPropertyStoreTrump)
        try result.get()
        let saved = try stored(coordinator, mine.objectID)
        #expect(saved["name"] as? String == "Theirs")
        #expect(saved["email"] as? String == "t@x.y")
        #expect(saved["born"] as? Date == Date(timeIntervalSinceReferenceDate: 5))
    }

    @Test func objectTrumpKeepsMyChangedValuesAndTheStoresOthers() throws {
        let (_, mine, coordinator, result) = try conflict(.mergeByPropertyObjectTrump)
        try result.get()
        let saved = try stored(coordinator, mine.objectID)
        #expect(saved["name"] as? String == "Mine")
        #expect(saved["email"] as? String == "t@x.y")
        #expect(saved["born"] as? Date == Date(timeIntervalSinceReferenceDate: 5))
    }

    @Test func overwriteWritesMyObjectWhole() throws {
        let (_, mine, coordinator, result) = try conflict(.overwrite)
        try result.get()
        let saved = try stored(coordinator, mine.objectID)
        #expect(saved["name"] as? String == "Mine")
        #expect(saved["email"] as? String == "o@x.y")
    }

    @Test func rollbackDropsMyChangesToTheConflictingObject() throws {
        let (context, mine, coordinator, result) = try conflict(.rollback)
        try result.get()
        #expect(mine["name"] as? String == "Theirs" && !mine.hasChanges && !context.hasChanges)
        let saved = try stored(coordinator, mine.objectID)
        #expect(saved["name"] as? String == "Theirs")
        #expect(saved["born"] == nil)
    }

    @Test func aSaveAfterResolvingTheConflictSeesTheNewVersion() throws {
        let (context, mine, coordinator, result) = try conflict(.mergeByPropertyObjectTrump)
        try result.get()
        try mine.setValue("Again", forKey: "name")
        try context.save()
        #expect(try stored(coordinator, mine.objectID)["name"] as? String == "Again")
    }
}
