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
}
