import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// `ANY toMany.attr op constant` through the destination's index and the relationship's inverse: the inverse's
/// link table for many-to-many, the destination rows' to-one for one-to-many.
@Suite(.onEveryEngine) struct ToManyJoinTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Shelf") {
            AttributeDescription("label", .string)
            RelationshipDescription("books", destination: "Book", inverse: "shelf", toMany: true)
        }
        EntityDescription("Book") {
            AttributeDescription("title", .string)
            AttributeDescription("year", .integer32, isOptional: true)
            RelationshipDescription("shelf", destination: "Shelf", inverse: "books", isOptional: true)
            RelationshipDescription("authors", destination: "Author", inverse: "books", toMany: true)
            FetchIndexDescription("byTitle", properties: ["title"])
            FetchIndexDescription("byYear", properties: ["year"])
        }
        EntityDescription("Novel", parent: "Book") {
            AttributeDescription("genre", .string, isOptional: true)
        }
        EntityDescription("Author") {
            AttributeDescription("name", .string)
            AttributeDescription("born", .integer32, isOptional: true)
            RelationshipDescription("books", destination: "Book", inverse: "authors", toMany: true)
            FetchIndexDescription("byName", properties: ["name"])
        }
        EntityDescription("Editor", parent: "Author") {
            AttributeDescription("house", .string, isOptional: true)
        }
    }

    /// 30 shelves, 600 books (a fifth of them novels; some on no shelf, some without a year), 200 authors with
    /// zero to three books each.
    func load(_ coordinator: PersistentStoreCoordinator) throws {
        var random = SplitMix64(seed: 11)
        let context = ManagedObjectContext(coordinator: coordinator)
        let shelves = try (0..<30).map { n in
            let shelf = try context.insertNewObject(forEntityName: "Shelf")
            try shelf.setValue("S\(n)", forKey: "label")
            return shelf
        }
        let books = try (0..<600).map { n in
            let book = try context.insertNewObject(forEntityName: random.next() % 5 == 0 ? "Novel" : "Book")
            try book.setValue(["Ada", "Bees", "Cats", "Dune", "Eel"][Int(random.next() % 5)] + " \(n % 13)", forKey: "title")
            if random.next() % 7 != 0 { try book.setValue(Int32(1950 + random.next() % 70), forKey: "year") }
            if random.next() % 6 != 0 { try book.setValue(shelves[Int(random.next() % 30)], forKey: "shelf") }
            return book
        }
        for n in 0..<200 {
            let author = try context.insertNewObject(forEntityName: random.next() % 4 == 0 ? "Editor" : "Author")
            try author.setValue(["Ann", "Bo", "Cy"][Int(random.next() % 3)] + " \(n % 17)", forKey: "name")
            if random.next() % 5 != 0 { try author.setValue(Int32(1900 + random.next() % 90), forKey: "born") }
            let written = Set((0..<Int(random.next() % 4)).map { _ in books[Int(random.next() % 600)] })
            try author.setValue(written, forKey: "books")
        }
        try context.save()
    }

    @Test func anyComparisonsJoinThroughTheDestinationsIndex() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        try load(coordinator)
        func request(_ entity: String, _ format: String) throws -> FetchRequest {
            FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format)).with { $0.returnsObjectsAsFaults = false }
        }
        assertPlan(store, try request("Shelf", "ANY books.year == 1960"),
                   "AnyJoin(IndexRange(Book.byYear [1960, 1960]) → Shelf.books) → Filter(ANY books.year == 1960)")
        assertPlan(store, try request("Author", "ANY books.title BEGINSWITH 'Dune 1'"),
                   "AnyJoin(IndexRange(Book.byTitle [\"Dune 1\", \"Dune 1\"…)) → Author.books) → Filter(ANY books.title BEGINSWITH \"Dune 1\")")
        assertPlan(store, try request("Book", "ANY authors.name == 'Cy 3'"),
                   "AnyJoin(IndexRange(Author.byName [\"Cy 3\", \"Cy 3\"]) → Book.authors) → Filter(ANY authors.name == \"Cy 3\")")
        // Not a superset through the destinations: ALL and NONE hold for owners with no member at all.
        assertPlan(store, try request("Shelf", "ALL books.year == 1960"), "Scan(Shelf) → Filter(ALL books.year == 1960)")
        assertPlan(store, try request("Shelf", "NONE books.year == 1960"), "Scan(Shelf) → Filter(NONE books.year == 1960)")
        assertPlan(store, try request("Shelf", "NOT ANY books.year == 1960"), "Scan(Shelf) → Filter(NOT ANY books.year == 1960)")
    }

    @Test func randomToManyComparisonsGiveTheInMemoryStoresResults() throws {
        let folder = StoreFolder()
        let (lmdbCoordinator, store, memoryCoordinator) = try folder.twinStores(model, load)
        var plans: [String] = []
        for (entity, relationship, sortKeys) in [("Shelf", "books", ["label"]), ("Author", "books", ["name", "born"]), ("Book", "authors", ["title", "year"])] {
            plans += try compareRandomFetches(lmdb: lmdbCoordinator, memory: memoryCoordinator, store: store, seed: 23, trials: 150,
                                              entities: entity == "Book" ? ["Book", "Novel"] : entity == "Author" ? ["Author", "Editor"] : [entity],
                                              sortKeys: sortKeys) { random in
                let modifier = random.pick(["ANY", "ANY", "ANY", "SOME", "ALL", "NONE"])
                if relationship == "books" {
                    switch random.next() % 3 {
                    case 0:
                        if random.next() % 4 == 0 { return "\(modifier) books.year BETWEEN \(random.pick(["{1955, 1965}", "{2000, 2010}"]))" }
                        return "\(modifier) books.year \(random.pick(["==", "<", ">=", "!="])) \(random.pick(["1960", "2000", "nil", "1960.5"]))"
                    case 1: return "\(modifier) books.title \(random.pick(["BEGINSWITH", "==", "<", "BEGINSWITH[c]", "CONTAINS"])) '\(random.pick(["Ada 1", "Dune", "eel", "Cats 12", ""]))'"
                    default:
                        return random.pick(["books.@count > 1", "ANY books.year IN {1960, 1961, 1999}"]
                            + (entity == "Shelf" ? ["label == 'S3'", "label BEGINSWITH 'S1'"] : ["name BEGINSWITH 'A'", "born < 1950"]))
                    }
                }
                switch random.next() % 3 {
                case 0: return "\(modifier) authors.name \(random.pick(["==", "BEGINSWITH", ">", "==[c]"])) '\(random.pick(["Ann 3", "Bo", "cy 1", "Cy 16"]))'"
                case 1: return "year \(random.pick(["<", ">="])) \(random.pick(["1970", "2000"]))"
                default: return random.pick(["ANY authors.name IN {'Ann 1', 'Bo 2'}", "title BEGINSWITH 'B'", "shelf.label == 'S2'", "authors.@count == 0"])
                }
            }
        }
        let joins = plans.filter { $0.hasPrefix("AnyJoin(") }.count
        #expect(joins > 60, "the trials exercise to-many joins (\(joins) of 450)")
    }
}
