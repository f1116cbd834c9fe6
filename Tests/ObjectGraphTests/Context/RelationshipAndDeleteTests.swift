import Foundation
import Testing
@testable import ObjectGraph

@Suite struct RelationshipAndDeleteTests {
    @Test func settingEitherSideUpdatesTheInverse() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let a = try context.make("Author", ["name": "A"]), b = try context.make("Author", ["name": "B"])
        let book = try context.make("Book", ["title": "T", "author": a])
        #expect(Array(a.relatedObjects(forKey: "books")) == [book])
        try book.setValue(b, forKey: "author")
        #expect(a.relatedObjects(forKey: "books").isEmpty)
        #expect(Array(b.relatedObjects(forKey: "books")) == [book])
        try a.mutableRelationship(forKey: "books").insert(book)
        #expect((book["author"] as? ManagedObject) === a, "adding to a to-many sets the to-one inverse")
        #expect(b.relatedObjects(forKey: "books").isEmpty, "and takes the book from its previous author")
        try book.setValue(nil, forKey: "author")
        #expect(a.relatedObjects(forKey: "books").isEmpty)
    }

    @Test func aToManyMakesEachObjectOnlyWhenItIsReached() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "A"])
        let books = try (1...3).map { try context.make("Book", ["title": "T\($0)", "author": author]) }
        try context.save()

        let fresh = ManagedObjectContext(coordinator: coordinator)
        let reloaded = fresh.object(with: author.objectID)
        let related = reloaded.relatedObjects(forKey: "books")
        #expect(related.count == 3)
        #expect(Set(related.objectIDs) == Set(books.map(\.objectID)))
        #expect(fresh.registeredObjects.count == 1, "counting a to-many makes none of its objects")
        let second = related[1]
        #expect(fresh.registeredObjects.count == 2, "reaching one object makes that one")
        #expect(second === fresh.object(with: related.objectIDs[1]) && second === related[1], "the context's object, every time")
        #expect(second.isFault && (second["title"] as? String).map { $0.hasPrefix("T") } == true)
        #expect(Set(related.map(\.objectID)) == Set(books.map(\.objectID)))
    }

    @Test func objectIDsForARelationshipFireNoDestinationFault() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "A"])
        let book = try context.make("Book", ["title": "T", "author": author])
        let lonely = try context.make("Book", ["title": "Alone"])
        try context.save()

        let toMany = ManagedObjectContext(coordinator: coordinator)
        #expect(try toMany.object(with: author.objectID).objectIDs(forRelationshipNamed: "books") == [book.objectID])
        #expect(toMany.registeredObjects.count == 1, "no book was made")
        let toOne = ManagedObjectContext(coordinator: coordinator)
        #expect(try toOne.object(with: book.objectID).objectIDs(forRelationshipNamed: "author") == [author.objectID])
        #expect(try toOne.object(with: lonely.objectID).objectIDs(forRelationshipNamed: "author") == [])
        #expect(toOne.registeredObjects.count == 2, "no author was made")
        let fresh = ManagedObjectContext(coordinator: coordinator)
        for name in ["nonsense", "title"] {
            let error = #expect(throws: ManagedObjectContextError.self) { try fresh.object(with: book.objectID).objectIDs(forRelationshipNamed: name) }
            #expect(error?.code == .unknownName && error?.message.contains(name) == true)
        }
    }

    @Test func manyToManyAndOrderedRelationshipsSurviveASaveAndAFreshContext() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let book = try context.make("Book", ["title": "Ordered"])
        let tags = try (1...3).map { try context.make("Tag", ["label": "t\($0)"]) }
        let chapters = try ["One", "Two", "Three"].map { try context.make("Chapter", ["title": $0]) }
        let tagSet = try book.mutableRelationship(forKey: "tags")
        for tag in tags { try tagSet.insert(tag) }
        let chapterList = try book.mutableRelationship(forKey: "chapters")
        for chapter in chapters { try chapterList.insert(chapter) }
        try chapterList.insert(chapters[2], at: 0)
        #expect(chapterList.objects.map { $0["title"] as? String } == ["Three", "One", "Two"])
        #expect(Array(tags[0].relatedObjects(forKey: "books")) == [book])
        try context.save()

        let fresh = ManagedObjectContext(coordinator: coordinator)
        let reloaded = fresh.object(with: book.objectID)
        #expect(reloaded.relatedObjects(forKey: "chapters").map { $0["title"] as? String } == ["Three", "One", "Two"])
        #expect(Set(reloaded.relatedObjects(forKey: "tags").map { $0["label"] as? String }) == ["t1", "t2", "t3"])
        let tag = fresh.object(with: tags[1].objectID)
        #expect(tag.relatedObjects(forKey: "books").map(\.objectID) == [book.objectID])
        (try reloaded.mutableRelationship(forKey: "tags")).remove(tag)
        try fresh.save()
        let third = ManagedObjectContext(coordinator: coordinator)
        #expect(third.object(with: tags[1].objectID).relatedObjects(forKey: "books").isEmpty)
        #expect(third.object(with: book.objectID).relatedObjects(forKey: "tags").count == 2)
    }

    /// A to-many set from a list that names an object more than once holds it once, first place kept — for a few
    /// members (compared pairwise) and for many (through a set) — and each inverse gains the owner once.
    @Test func aToManySetWithRepeatedObjectsHoldsEachOnce() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let book = try context.make("Book", ["title": "Repeats"])
        let tags = try (0..<40).map { try context.make("Tag", ["label": "t\($0)"]) }
        for (given, expected) in [([2, 0, 2, 1, 0], [2, 0, 1]), ([3, 3], [3]), ([5, 4], [5, 4]),
                                  (Array(0..<20) + [7, 19, 0], Array(0..<20)), (Array(0..<40) + Array(0..<40), Array(0..<40))] {
            try book.setValue(given.map { tags[$0] }, forKey: "tags")
            let held = book.relatedObjects(forKey: "tags").map(\.objectID)
            #expect(Set(held) == Set(expected.map { tags[$0].objectID }) && held.count == expected.count, "\(given)")
            for (index, tag) in tags.enumerated() {
                #expect(tag.relatedObjects(forKey: "books").map(\.objectID) == (expected.contains(index) ? [book.objectID] : []), "\(given): tag \(index)")
            }
        }
        let chapters = try (0..<3).map { try context.make("Chapter", ["title": "c\($0)"]) }
        try book.setValue([chapters[2], chapters[0], chapters[2], chapters[1]], forKey: "chapters")
        #expect(book.relatedObjects(forKey: "chapters").map(\.objectID) == [2, 0, 1].map { chapters[$0].objectID }, "ordered: first place kept")
    }

    @Test func cascadeDeletesTheWholeTree() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Cascade"])
        let book = try context.make("Book", ["title": "B", "author": author])
        let chapter = try context.make("Chapter", ["title": "C", "book": book])
        try context.save()
        context.delete(author)
        try context.save()
        for entity in ["Author", "Book", "Chapter"] {
            #expect(try context.count(for: FetchRequest(entityName: entity)) == 0, "\(entity)")
        }
        #expect(book.managedObjectContext == nil && chapter.managedObjectContext == nil)
    }

    @Test func nullifyTakesTheDeletedObjectOutOfItsInverse() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Keeps"])
        let book = try context.make("Book", ["title": "Goes", "author": author])
        let keep = try context.make("Book", ["title": "Stays", "author": author])
        try context.save()
        context.delete(book)
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(fresh.object(with: author.objectID).relatedObjects(forKey: "books").map(\.objectID) == [keep.objectID])
    }

    @Test func aDenyRuleBlocksTheSaveAndChangesNothing() throws {
        let (coordinator, stores) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let tag = try context.make("Tag", ["label": "classic"])
        let book = try context.make("Book", ["title": "Tagged"])
        try (try book.mutableRelationship(forKey: "tags")).insert(tag)
        try context.save()
        let saves = stores[0].callCounts.saves
        context.delete(tag)
        do {
            try context.save()
            Issue.record("a deny rule did not block the delete")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .validation)
            #expect(error.validationFailures.first?.propertyName == "books")
            #expect(error.description.contains("delete rule deny"))
        }
        #expect(stores[0].callCounts.saves == saves, "nothing reached the store")
        #expect(tag.isDeleted, "the context is as it was before the save")
        #expect(Array(book.relatedObjects(forKey: "tags")) == [tag])
        context.rollback()
        #expect(try context.count(for: FetchRequest(entityName: "Tag")) == 1)
    }

    @Test func deletingAnUnsavedObjectJustForgetsIt() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Saved"])
        let draft = try context.make("Book", ["title": "Draft", "author": author])
        context.delete(draft)
        #expect(author.relatedObjects(forKey: "books").isEmpty)
        #expect(context.insertedObjects == [author])
        try context.save()
        #expect(try context.count(for: FetchRequest(entityName: "Book")) == 0)
    }
}
