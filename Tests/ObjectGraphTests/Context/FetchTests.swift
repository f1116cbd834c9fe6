import Foundation
import Testing
@testable import ObjectGraph

@Suite struct FetchTests {
    func seeded() throws -> (ManagedObjectContext, PersistentStoreCoordinator, [InMemoryStore]) {
        let (coordinator, stores) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        let author = try context.make("Author", ["name": "Iain"])
        for (title, pages) in [("Consider Phlebas", 471), ("Excession", 451), ("Inversions", 345), ("Matter", 593), ("Surface Detail", 627)] {
            _ = try context.make("Book", ["title": title, "pages": pages, "author": author])
        }
        try context.save()
        return (context, coordinator, stores)
    }

    func titles(_ objects: [ManagedObject]) -> [String] { objects.compactMap { $0["title"] as? String } }

    @Test func predicateSortOffsetAndLimit() throws {
        let (context, _, _) = try seeded()
        var request = FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "pages > %@", 400),
                                   sortDescriptors: [FetchSortDescriptor(keyPath: "pages", ascending: false)])
        #expect(titles(try context.fetch(request)) == ["Surface Detail", "Matter", "Consider Phlebas", "Excession"])
        request.fetchOffset = 1
        request.fetchLimit = 2
        #expect(titles(try context.fetch(request)) == ["Matter", "Consider Phlebas"])
        #expect(try context.count(for: request) == 2)
        #expect(try context.fetchObjectIDs(request).count == 2)
        let byAuthor = FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "author.name == 'Iain' AND title BEGINSWITH[c] 'e'"))
        #expect(titles(try context.fetch(byAuthor)) == ["Excession"])
    }

    @Test func fetchedObjectsAreFaultsUnlessAskedOtherwise() throws {
        let (_, coordinator, _) = try seeded()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let faults = try fresh.fetch(FetchRequest(entityName: "Book"))
        let allFaults = faults.allSatisfy { $0.isFault }
        #expect(allFaults)
        let other = ManagedObjectContext(coordinator: coordinator)
        let loaded = try other.fetch(FetchRequest(entityName: "Book").with { $0.returnsObjectsAsFaults = false })
        let noneFaults = loaded.allSatisfy { !$0.isFault }
        #expect(noneFaults)
    }

    @Test func pendingInsertsUpdatesAndDeletesAreReflected() throws {
        let (context, _, _) = try seeded()
        let request = FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "pages >= 450"),
                                   sortDescriptors: [FetchSortDescriptor(keyPath: "title")])
        let all = try context.fetch(FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "title")]))
        _ = try context.make("Book", ["title": "Against a Dark Background", "pages": 500])
        try all.first { $0["title"] as? String == "Inversions" }!.setValue(460, forKey: "pages")
        try all.first { $0["title"] as? String == "Excession" }!.setValue(100, forKey: "pages")
        context.delete(all.first { $0["title"] as? String == "Matter" }!)
        let pendingTitles = titles(try context.fetch(request))
        #expect(pendingTitles == ["Against a Dark Background", "Consider Phlebas", "Inversions", "Surface Detail"])
        #expect(try context.count(for: request) == 4)
        #expect(titles(try context.fetch(request.with { $0.fetchLimit = 2 })) == ["Against a Dark Background", "Consider Phlebas"])
        let ignoring = request.with { $0.includesPendingChanges = false }
        #expect(titles(try context.fetch(ignoring)) == ["Consider Phlebas", "Excession", "Matter", "Surface Detail"])
        #expect(try context.count(for: ignoring) == 4)
    }

    @Test func subentitiesAreIncludedUnlessTurnedOff() throws {
        let (coordinator, _) = try makeStack()
        let context = ManagedObjectContext(coordinator: coordinator)
        _ = try context.make("Magazine", ["title": "Analog"])
        _ = try context.make("Journal", ["title": "Nature"])
        try context.save()
        #expect(try context.count(for: FetchRequest(entityName: "Publication")) == 2)
        #expect(try context.count(for: FetchRequest(entityName: "Publication").with { $0.includesSubentities = false }) == 0)
        #expect(try context.fetch(FetchRequest(entityName: "Magazine")).map(\.entity.name) == ["Magazine"])
        #expect(throws: ManagedObjectContextError.self) { try context.insertNewObject(forEntityName: "Publication") }
    }

    @Test func storesHoldTheirConfigurationsEntities() throws {
        let (coordinator, stores) = try makeStack(splitConfigurations: true)
        let context = ManagedObjectContext(coordinator: coordinator)
        let magazine = try context.make("Magazine", ["title": "Asimov's"])
        let author = try context.make("Author", ["name": "Routed"])
        try context.save()
        #expect(magazine.objectID.storeIdentifier == stores[1].identifier)
        #expect(author.objectID.storeIdentifier == stores[0].identifier)
        #expect(stores[0].callCounts.saves == 1 && stores[1].callCounts.saves == 1)
        #expect(try context.count(for: FetchRequest(entityName: "Magazine")) == 1)
        #expect(stores[0].callCounts.fetches == 0)
    }

    @Test func templatesBecomeFetchRequests() throws {
        let (context, coordinator, _) = try seeded()
        let request = try coordinator.managedObjectModel.fetchRequest(fromTemplateNamed: "LongBooks", substitutionVariables: ["MIN": 590])
        #expect(Set(titles(try context.fetch(request))) == ["Matter", "Surface Detail"])
        #expect(throws: ManagedObjectContextError.self) { try coordinator.managedObjectModel.fetchRequest(fromTemplateNamed: "Nope") }
    }

    @Test func objectArgumentsMatchByObjectID() throws {
        let (context, _, _) = try seeded()
        let author = try context.fetch(FetchRequest(entityName: "Author"))[0]
        #expect(try context.count(for: FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "author == %@", author))) == 5)
        #expect(try context.count(for: FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "author == %@", author.objectID))) == 5)
        #expect(try context.count(for: FetchRequest(entityName: "Author", predicate: try FetchPredicate(format: "SELF == %@", author))) == 1)
    }

    @Test func requestsForUnknownEntitiesOrBadPredicatesAreErrors() throws {
        let (context, _, _) = try seeded()
        do {
            _ = try context.fetch(FetchRequest(entityName: "Nope"))
            Issue.record("an unknown entity was fetched")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .unknownName)
        }
        #expect(throws: PredicateEvaluationError.self) {
            try context.fetch(FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "title < 5")))
        }
    }

    /// Objects have no order: a sort by a to-one or by `SELF` would hand the results back in no order at all, so it is
    /// refused and names what to sort by; a sort by the to-one's attribute runs.
    @Test func sortingByObjectsIsRefused() throws {
        let (context, _, _) = try seeded()
        for (entity, keyPath, mentions) in [("Book", "author", "ends at a to-one relationship to Author, and objects have no order; sort by one of its attributes (\"author.…\")"),
                                            ("Author", "SELF", "ends at an Author object, and objects have no order; sort by an attribute")] {
            let request = FetchRequest(entityName: entity, sortDescriptors: [FetchSortDescriptor(keyPath: keyPath)])
            do {
                _ = try context.fetch(request)
                Issue.record("a sort by \(keyPath) was run")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .invalidRequest)
                #expect(error.message.contains(mentions), "\(error.message)")
            }
        }
        let byAuthorName = FetchRequest(entityName: "Book", sortDescriptors: [FetchSortDescriptor(keyPath: "author.name"), FetchSortDescriptor(keyPath: "pages")])
        #expect(titles(try context.fetch(byAuthorName)) == ["Inversions", "Excession", "Consider Phlebas", "Matter", "Surface Detail"])
    }

    /// A comparison whose constant no value of the key ever equals would find nothing (or, with `!=`, everything)
    /// without a word: the request is refused, naming the key, what it holds and the constant's kind.
    @Test func comparingAKeyWithAConstantItNeverEqualsIsRefused() throws {
        let (context, _, _) = try seeded()
        let author = try context.fetch(FetchRequest(entityName: "Author"))[0]
        let refused: [(entity: String, format: String, arguments: [any PredicateArgument], mentions: String)] = [
            ("Book", "pages == '471'", [], "\"pages\" (an Integer 16 attribute) with a string"),
            ("Book", "title != 5", [], "\"title\" (a String attribute) with an integer"),
            ("Book", "author == 3", [], "\"author\" (a to-one relationship to Author) with an integer"),
            ("Book", "author == 'Iain'", [], "a to-one relationship to Author"),
            ("Book", "tags == 'sf'", [], "\"tags\" (a to-many relationship to Tag) with a string"),
            ("Book", "ANY tags == %@", ["sf"], "a to-many relationship to Tag"),
            ("Book", "%@ IN tags", [7], "a to-many relationship to Tag"),
            ("Book", "tags CONTAINS 'sf'", [], "a to-many relationship to Tag"),
            ("Book", "pages IN {471, '451'}", [], "with a string"),
            ("Book", "title == %@", [author], "with an object"),
            ("Book", "ANY tags.label == 3", [], "a String attribute, reached through a to-many relationship"),
            ("Author", "born == 0", [], "\"born\" (a Date attribute) with an integer"),
            ("Author", "SELF == 2", [], "(an Author object) with an integer"),
            ("Author", "SUBQUERY(books, $b, $b.pages == 'many').@count > 0", [], "\"pages\" (an Integer 16 attribute) with a string"),
        ]
        for (entity, format, arguments, mentions) in refused {
            let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format, argumentArray: arguments))
            do {
                _ = try context.count(for: request)
                Issue.record("\(format) was run")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .invalidRequest, "\(format)")
                #expect(error.message.contains(mentions), "\(format): \(error.message)")
            }
        }
        // Comparisons whose kinds can be equal still run: numbers of any kind (Booleans too), objects and their IDs,
        // NULL, a list compared whole, substrings, and keys the values decide.
        let allowed: [(entity: String, format: String, arguments: [any PredicateArgument], count: Int)] = [
            ("Book", "pages == 471.0", [], 1),
            ("Book", "pages IN {471, 451.0}", [], 2),
            ("Book", "author == %@", [author], 5),
            ("Book", "author == %@", [author.objectID], 5),
            ("Book", "author != nil AND rating == nil", [], 5),
            ("Book", "ANY tags == nil", [], 0),
            ("Book", "title CONTAINS 'e' AND 'Matter' IN title", [], 1),
            ("Book", "price == 0", [], 0),
            ("Author", "SELF IN %@", [[author]], 1),
            ("Author", "books.@count == 5", [], 1),
        ]
        for (entity, format, arguments, count) in allowed {
            let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format, argumentArray: arguments))
            #expect(try context.count(for: request) == count, "\(format)")
        }
    }
}
