import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// Every way a relationship is kept, with every delete rule: libraries cascade to their books (read from the books'
/// to-one index), publishers deny while they have books, authors nullify theirs (the books' rows rewritten), books
/// cascade to their ordered chapters (a link table, the chapters' to-one its inverse) and to their cover (one-to-one),
/// and leave their tags (many-to-many) and shelves (an ordered many-to-many) when they go.
private let libraryModel: ManagedObjectModel = {
    try! ManagedObjectModel {
        EntityDescription("Library") {
            AttributeDescription("name", .string)
            RelationshipDescription("books", destination: "Book", inverse: "library", toMany: true, deleteRule: .cascade)
        }
        EntityDescription("Publisher") {
            AttributeDescription("name", .string)
            RelationshipDescription("books", destination: "Book", inverse: "publisher", toMany: true, deleteRule: .deny)
        }
        EntityDescription("Author") {
            AttributeDescription("name", .string)
            RelationshipDescription("books", destination: "Book", inverse: "author", toMany: true, deleteRule: .nullify)
        }
        EntityDescription("Book") {
            AttributeDescription("title", .string)
            AttributeDescription("pages", .integer32, defaultValue: 100)
            RelationshipDescription("library", destination: "Library", inverse: "books")
            RelationshipDescription("publisher", destination: "Publisher", inverse: "books")
            RelationshipDescription("author", destination: "Author", inverse: "books")
            RelationshipDescription("chapters", destination: "Chapter", inverse: "book", ordered: true, deleteRule: .cascade)
            RelationshipDescription("cover", destination: "Cover", inverse: "book", deleteRule: .cascade)
            RelationshipDescription("tags", destination: "Tag", inverse: "books", toMany: true)
            RelationshipDescription("shelves", destination: "Shelf", inverse: "books", toMany: true)
            FetchIndexDescription("byPages", properties: ["pages"])
        }
        EntityDescription("Chapter") {
            AttributeDescription("title", .string)
            RelationshipDescription("book", destination: "Book", inverse: "chapters")
        }
        EntityDescription("Cover") {
            AttributeDescription("color", .string)
            RelationshipDescription("book", destination: "Book", inverse: "cover")
        }
        EntityDescription("Tag") {
            AttributeDescription("name", .string)
            RelationshipDescription("books", destination: "Book", inverse: "tags", toMany: true)
            UniquenessConstraint("name")
        }
        EntityDescription("Shelf") {
            AttributeDescription("name", .string)
            RelationshipDescription("books", destination: "Book", inverse: "shelves", ordered: true)
        }
    }
}()

/// Two libraries, publishers and authors; six books B0…B5 (library, publisher and author i % 2, two chapters, a
/// cover, tags T(i % 3) and T((i + 1) % 3)); shelf S0 holds every book in order, S1 the first three.
private func loadLibrary(_ coordinator: PersistentStoreCoordinator) throws {
    let context = ManagedObjectContext(coordinator: coordinator)
    func make(_ entity: String, _ key: String, _ names: [String]) throws -> [ManagedObject] {
        try names.map { name in
            let object = try context.insertNewObject(forEntityName: entity)
            try object.setValue(name, forKey: key)
            return object
        }
    }
    let libraries = try make("Library", "name", ["L0", "L1"]), publishers = try make("Publisher", "name", ["P0", "P1"])
    let authors = try make("Author", "name", ["A0", "A1"]), tags = try make("Tag", "name", ["T0", "T1", "T2"])
    let shelves = try make("Shelf", "name", ["S0", "S1"])
    var books: [ManagedObject] = []
    for i in 0..<6 {
        let book = try make("Book", "title", ["B\(i)"])[0]
        try book.setValue(Int32(100 + i), forKey: "pages")
        try book.setValue(libraries[i % 2], forKey: "library")
        try book.setValue(publishers[i % 2], forKey: "publisher")
        try book.setValue(authors[i % 2], forKey: "author")
        try book.setValue(try make("Chapter", "title", ["B\(i)c0", "B\(i)c1"]), forKey: "chapters")
        try book.setValue(try make("Cover", "color", ["B\(i) red"])[0], forKey: "cover")
        try book.setValue(Set([tags[i % 3], tags[(i + 1) % 3]]), forKey: "tags")
        books.append(book)
    }
    try shelves[0].setValue(books, forKey: "books")
    try shelves[1].setValue(Array(books[0..<3]), forKey: "books")
    try context.save()
}

/// Everything the library holds, as text, asked the same way of any store.
private func describeLibrary(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
    let context = ManagedObjectContext(coordinator: coordinator)
    var lines: [String] = []
    func all(_ entity: String, _ key: String) throws -> [ManagedObject] {
        var request = FetchRequest(entityName: entity)
        request.sortDescriptors = [FetchSortDescriptor(keyPath: key)]
        return try context.fetch(request)
    }
    func names(_ objects: [ManagedObject], _ key: String) -> String {
        objects.map { $0.value(forKey: key) as? String ?? "?" }.joined(separator: ",")
    }
    for book in try all("Book", "title") {
        let related = ["library", "publisher", "author"].map { (book.value(forKey: $0) as? ManagedObject)?.value(forKey: "name") as? String ?? "-" }
        let cover = (book.value(forKey: "cover") as? ManagedObject)?.value(forKey: "color") as? String ?? "-"
        lines.append("\(book.value(forKey: "title")!): \(related.joined(separator: " ")) cover \(cover) chapters "
                     + names(Array(book.relatedObjects(forKey: "chapters")), "title")
                     + " tags " + names(book.relatedObjects(forKey: "tags").sorted { "\($0.value(forKey: "name")!)" < "\($1.value(forKey: "name")!)" }, "name"))
    }
    for (entity, key) in [("Library", "name"), ("Publisher", "name"), ("Author", "name"), ("Tag", "name"), ("Shelf", "name")] {
        for owner in try all(entity, key) {
            var members = owner.relatedObjects(forKey: "books").map { $0.value(forKey: "title") as? String ?? "?" }
            if entity != "Shelf" { members.sort() }  // a shelf's order is its own
            lines.append("\(owner.value(forKey: key)!): \(members.joined(separator: ","))")
        }
    }
    for (entity, key) in [("Chapter", "title"), ("Cover", "color")] {
        let objects = try all(entity, key)
        lines.append("\(entity): \(objects.map { "\($0.value(forKey: key)!)→\(($0.value(forKey: "book") as? ManagedObject)?.value(forKey: "title") as? String ?? "-")" }.joined(separator: ","))")
    }
    for format in ["author == nil", "cover == nil", "pages > 102"] {
        lines.append("\(format): \(try context.count(for: FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: format))))")
    }
    return lines
}

/// The IDs of the objects of `entity` whose `key` is one of `values`, in that order.
private func ids(_ coordinator: PersistentStoreCoordinator, _ entity: String, _ key: String, _ values: [String]) throws -> [ManagedObjectID] {
    let context = ManagedObjectContext(coordinator: coordinator)
    return try values.map { value in
        try #require(try context.fetch(FetchRequest(entityName: entity, predicate: try FetchPredicate(format: "%K == %@", key, value))).first).objectID
    }
}

@Suite("Batch updates and deletes in the store")
struct BatchChangeTests {
    @Test("a batch delete honours every delete rule from the rows and tables alone, as a context deleting objects does")
    func deleteRules() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(libraryModel, loadLibrary)
        // Both sides run the same requests: the LMDB store natively, the in-memory store through objects.
        func run(_ request: (PersistentStoreCoordinator) throws -> BatchDeleteRequest) throws -> [BatchResult] {
            let results = try [lmdb, memory].map { coordinator in
                try ManagedObjectContext(coordinator: coordinator).execute(try request(coordinator), fallback: .throughObjects)
            }
            #expect(try store.verify() == [])
            #expect(try describeLibrary(lmdb) == describeLibrary(memory))
            return results
        }
        func fetch(_ entity: String, _ format: String, _ type: BatchResultType = .count) throws -> BatchDeleteRequest {
            var request = BatchDeleteRequest(fetchRequest: FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format)))
            request.resultType = type
            return request
        }
        let before = try describeLibrary(lmdb)

        // A publisher with books is kept by its deny rule: an error that names it, and nothing deleted.
        for coordinator in [lmdb, memory] {
            let denied = try #require(throws: ManagedObjectContextError.self) {
                try ManagedObjectContext(coordinator: coordinator).execute(try fetch("Publisher", "name == 'P0'"), fallback: .throughObjects)
            }
            #expect(denied.code == .validation && denied.validationFailures.first?.propertyName == "books", "\(denied)")
            #expect(denied.validationFailures.first?.message.contains("3 objects") == true, "\(denied)")
        }
        #expect(try describeLibrary(lmdb) == before)
        #expect(try store.verify() == [])

        // An author's books stay, without their author (their rows rewritten, the index on it kept).
        #expect(try run { _ in try fetch("Author", "name == 'A0'") }.map(\.count) == [1, 1])
        #expect(try describeLibrary(lmdb).contains("author == nil: 3"))

        // A cover nullifies its book's to-one (a one-to-one).
        #expect(try run { try BatchDeleteRequest(objectIDs: ids($0, "Cover", "color", ["B0 red"])) }.map(\.count) == [1, 1])

        // A library cascades to its books, which cascade to their chapters and covers and leave their tags and shelves.
        let cascaded = try run { _ in try fetch("Library", "name == 'L1'", .objectIDs) }
        for result in cascaded {
            #expect(result.count == 1 + 3 + 6 + 3)
            #expect(result.objectIDs?.first?.entityName == "Library")
            #expect(Dictionary(grouping: result.objectIDs ?? [], by: \.entityName).mapValues(\.count) == ["Library": 1, "Book": 3, "Chapter": 6, "Cover": 3])
        }
        let after = try describeLibrary(lmdb)
        #expect(after.contains("S0: B0,B2,B4") && after.contains("S1: B0,B2") && after.contains("T1: B0,B4"), "\(after)")

        // Deny is satisfied when the related objects go too (the publisher, three books, their six chapters and the
        // two covers left).
        #expect(try run { try BatchDeleteRequest(objectIDs: ids($0, "Publisher", "name", ["P0"]) + ids($0, "Book", "title", ["B0", "B2", "B4"])) }
            .map(\.count) == [12, 12])
        #expect(try run { try BatchDeleteRequest(objectIDs: ids($0, "Publisher", "name", ["P1"])) }.map(\.count) == [1, 1])
        #expect(try describeLibrary(lmdb).contains("Chapter: "))
    }

    @Test("a batch update keeps uniqueness, sees every object's values from before, and checks every rule before writing")
    func updates() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(libraryModel, loadLibrary)
        for coordinator in [lmdb, memory] {
            let context = ManagedObjectContext(coordinator: coordinator)
            // Two tags given one name: the second is refused, and no tag changes.
            let clash = try #require(throws: ManagedObjectContextError.self) {
                try context.execute(BatchUpdateRequest(entityName: "Tag", propertiesToUpdate: ["name": .constant(.string("same"))]), fallback: .throughObjects)
            }
            #expect(clash.code == .constraintViolation && clash.message.contains("same"), "\(clash)")
            // Names passed along (T0 takes T1's, T1 T2's, T2 T0's) are free once every old one is given up.
            let rotate = try PredicateExpression(format: "TERNARY(name == 'T0', 'T1', TERNARY(name == 'T1', 'T2', 'T0'))")
            var update = BatchUpdateRequest(entityName: "Tag", propertiesToUpdate: ["name": rotate])
            update.resultType = .objectIDs
            #expect(try context.execute(update, fallback: .throughObjects).objectIDs?.count == 3)
            // A book's pages from its author's name length, read through a relationship, and a constant.
            let pages = BatchUpdateRequest(entityName: "Book", predicate: try FetchPredicate(format: "pages >= 103"),
                                           propertiesToUpdate: ["pages": try PredicateExpression(format: "pages * 10 + author.name.length"),
                                                                "title": try PredicateExpression(format: "title")])
            #expect(try context.execute(pages, fallback: .throughObjects).count == 3)
            // A required attribute set to nil: refused, naming the object; nothing written.
            let required = try #require(throws: ManagedObjectContextError.self) {
                try context.execute(BatchUpdateRequest(entityName: "Book", predicate: try FetchPredicate(format: "title == 'B5'"),
                                                       propertiesToUpdate: ["pages": .constant(.integer(1)), "title": .constant(.null)]),
                                    fallback: .throughObjects)
            }
            #expect(required.code == .validation && required.message.contains("Book.title") && required.message.contains("Book/"), "\(required)")
            // An attribute the entity lacks is refused before any store is asked.
            let unknown = try #require(throws: ManagedObjectContextError.self) {
                try context.execute(BatchUpdateRequest(entityName: "Book", propertiesToUpdate: ["author": .constant(.null)]), fallback: .throughObjects)
            }
            #expect(unknown.code == .unknownName, "\(unknown)")
        }
        #expect(try store.verify() == [])
        let described = try describeLibrary(lmdb)
        #expect(described == (try describeLibrary(memory)))
        #expect(described.contains("T0: B1,B2,B4,B5") && described.contains("pages > 102: 3"), "\(described)")
        let context = ManagedObjectContext(coordinator: lmdb)
        let paged = try context.fetch(FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "pages > 1000")))
        #expect(Set(paged.map { $0.value(forKey: "pages") as? Int32 }) == [1032, 1042, 1052])
    }

    @Test("verify finds a link only one side of a relationship holds: a many-to-many's table, an ordered to-many's, a one-to-one's row")
    func verifyComparesBothSidesOfEveryRelationship() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(libraryModel)
        try loadLibrary(coordinator)
        #expect(try store.verify().isEmpty)
        let state = try store.open
        try state.environment.write { transaction in
            // Tag T0 forgets its first book; book B0 forgets it is on a shelf; B0 loses its first chapter's position.
            for table in ["members/Tag/books", "members/Book/shelves", "link/Book/chapters"] {
                let database = store.database(table, in: state)
                let first = try #require(try database.withCursor(in: transaction) { cursor in try cursor.first().map { ($0.keyBytes, $0.valueBytes) } })
                #expect(try database.delete(key: first.0, value: first.1, in: transaction))
            }
            // B0's cover no longer names B0, while B0's row still names the cover.
            let covers = store.database("rows/Cover", in: state)
            let (key, blob) = try #require(try covers.withCursor(in: transaction) { cursor in try cursor.first().map { ($0.keyBytes, $0.valueBytes) } })
            var row = try blob.withUnsafeBytes { try RowCodec.decode($0, layout: store.layout) }
            let cover = try #require(store.layout.entity("Cover"))
            row.fields[try #require(cover.fieldIndex["book"])] = nil
            try covers.put(RowCodec.encode(row), forKey: key, in: transaction)
        }
        let problems = try store.verify()
        for (side, other) in [("Book.tags", "Tag.books"), ("Shelf.books", "Book.shelves"), ("Chapter.book", "Book.chapters"), ("Book.cover", "Cover.book")] {
            let names = [side, other].sorted()
            #expect(problems.contains { $0.hasPrefix("\(side) ↔ \(other): 1 link is on the \(side) side only") || $0.hasPrefix("\(names[0]) ↔ \(names[1])") && $0.contains("on the \(side) side only") },
                    "\(side): \(problems)")
        }
        #expect(problems.filter { $0.contains("side only") }.count == 4, "\(problems)")
        #expect(problems.contains { $0.contains("(the first: Book row 1 → Tag row 1; Tag.books does not hold it)") }, "\(problems)")
        #expect(problems.contains { $0.contains("toone/Cover/book") }, "the cover's to-one entry is left without its row's reference: \(problems)")
    }

    @Test("a damaged row stops a batch update or delete with an error naming it, and nothing is written")
    func damagedRowsStopBatches() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(libraryModel)
        try loadLibrary(coordinator)
        try breakEveryRow(of: "Book", in: store)
        let context = ManagedObjectContext(coordinator: coordinator)
        let update = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchUpdateRequest(entityName: "Book", propertiesToUpdate: ["pages": .constant(.integer(1))]))
        }
        #expect(update.code == .storeUnusable && update.message.contains("Book"), "\(update)")
        // The library's cascade reaches its books through their to-one index, then cannot read them.
        let delete = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Library", predicate: try FetchPredicate(format: "name == 'L0'"))))
        }
        #expect(delete.code == .storeUnusable && delete.message.contains("corrupted"), "\(delete)")
        #expect(try context.count(for: FetchRequest(entityName: "Library")) == 2)
        #expect(try context.count(for: FetchRequest(entityName: "Chapter")) == 12)
    }

    @Test("a batch insert into one side of a many-to-many whose other side is ordered is refused, and goes through objects when asked")
    func orderedInverseOfAManyToMany() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(libraryModel)
        try loadLibrary(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let s0 = try context.fetch(FetchRequest(entityName: "Shelf", predicate: try FetchPredicate(format: "name == 'S0'")))[0]
        let before = s0.relatedObjects(forKey: "books").map { $0.value(forKey: "title") as? String }
        let request = BatchInsertRequest(entityName: "Book", objects: [["title": "B6", "shelves": .objects([s0.objectID])],
                                                                       ["title": "B7", "shelves": .objects([s0.objectID])]])
        // The new book's place on the shelf is not the row's to give: refused, nothing written.
        let refused = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(refused.code == .unsupportedRequest && refused.message.contains("shelves") && refused.message.contains("ordered"), "\(refused)")
        #expect(try context.count(for: FetchRequest(entityName: "Book")) == 6)
        // Through objects, each new book joins the end of the shelf and the books already on it keep their places.
        _ = try context.execute(request, fallback: .throughObjects)
        let reader = ManagedObjectContext(coordinator: coordinator)
        let shelf = try reader.fetch(FetchRequest(entityName: "Shelf", predicate: try FetchPredicate(format: "name == 'S0'")))[0]
        #expect(shelf.relatedObjects(forKey: "books").map { $0.value(forKey: "title") as? String } == before + ["B6", "B7"])
        #expect(try store.verify() == [])
        // A handler's rows are read once: they cannot go through objects after the store refused one.
        var given = 0
        let handled = BatchInsertRequest(entityName: "Book") { row in
            guard given < 3 else { return true }
            row["title"] = .attribute(.string("H\(given)"))
            row["shelves"] = .objects([s0.objectID])
            given += 1
            return false
        }
        let unread = try #require(throws: ManagedObjectContextError.self) { try context.execute(handled, fallback: .throughObjects) }
        #expect(unread.code == .unsupportedRequest && unread.message.contains("give them as an array"), "\(unread)")
        #expect(try context.count(for: FetchRequest(entityName: "Book")) == 8)
    }
}

/// A batch that removes every value of an index key removes the key in one delete (``IndexUpdates``'s whole-key
/// removal); one that removes part of a key's values, or as many values as the key holds but not the same ones,
/// removes them one by one — and never a value it does not name.
@Suite(.onEveryEngine) struct WholeKeyRemovalTests {
    static let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("group", .integer64)
            AttributeDescription("n", .integer64)
            FetchIndexDescription("byGroup", properties: ["group"])
        }
    }

    /// Each key of the `byGroup` index with the row keys its values name, in the table's order.
    static func entries(_ store: LMDBIncrementalStore) throws -> [[UInt8]: [UInt64]] {
        let state = try store.open
        let table = store.database("index/Item/byGroup", in: state)
        return try state.environment.read { transaction in
            var found: [[UInt8]: [UInt64]] = [:]
            try table.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    found[entry.keyBytes, default: []].append(entry.valueBytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) })
                    return true
                }
            }
            return found
        }
    }

    @Test("every value of a key goes with the key; part of a key, value by value; a key holding other values keeps them")
    func wholeKeys() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(Self.model)
        let context = ManagedObjectContext(coordinator: coordinator)
        var groups: [Int: [ManagedObjectID]] = [:]
        var items: [(group: Int, object: ManagedObject)] = []
        for (group, count) in [(1, 20), (2, 20), (3, 5), (4, 8)] {
            for n in 0..<count {
                let item = try context.insertNewObject(forEntityName: "Item")
                try item.setValue(Int64(group), forKey: "group")
                try item.setValue(Int64(n), forKey: "n")
                items.append((group, item))
            }
        }
        try context.save()
        for (group, item) in items { groups[group, default: []].append(item.objectID) }
        func rowKeys(_ group: Int) throws -> [UInt64] { try groups[group]!.map { try store.key(of: $0) } }
        func delete(_ request: BatchDeleteRequest) throws -> Int { try ManagedObjectContext(coordinator: coordinator).execute(request).count }
        func deleting(_ format: String) throws -> BatchDeleteRequest {
            BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: format)))
        }

        // All twenty of group 1 (the whole key), then ten of group 2's twenty (ten removals, the key keeps ten).
        #expect(try delete(deleting("group == 1")) == 20)
        #expect(try delete(deleting("group == 2 AND n >= 10")) == 10)
        let after = try Self.entries(store)
        #expect(Set(after.values) == [Array(try rowKeys(2).prefix(10)), try rowKeys(3), try rowKeys(4)])
        #expect(try store.verify() == [])
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "group == 2"))) == 10)

        // Damage: one of group 4's eight entries replaced by one naming a row that does not exist, so the key still
        // holds eight values. Deleting group 4's eight items by ID removes the seven entries held; the stranger stays.
        let fourth = try #require(after.first { $0.value == (try? rowKeys(4)) }?.key)
        let state = try store.open
        let table = store.database("index/Item/byGroup", in: state)
        try state.environment.write { transaction in
            let held = try table.withCursor(in: transaction) { cursor in try fourth.withUnsafeBytes { try cursor.seek(exactly: $0)?.valueBytes } }
            let first = try #require(held)
            #expect(try table.delete(key: fourth, value: first, in: transaction))
            try table.put(withUnsafeBytes(of: UInt64(999).bigEndian) { Array($0) } + first.suffix(2), forKey: fourth, in: transaction)
        }
        #expect(try delete(BatchDeleteRequest(objectIDs: groups[4]!)) == 8)
        #expect(try Self.entries(store)[fourth] == [999])
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Item")) == 15)
    }
}

/// A batch update over an inheritance tree: the entity's rows and its sub-entities' share their root's table and are
/// rewritten through one cursor on it; each keeps its own entity, its indexes follow, and a request for a
/// sub-entity leaves its siblings and parent alone.
@Suite(.onEveryEngine) struct InheritedBatchUpdateTests {
    static let model = try! ManagedObjectModel {
        EntityDescription("Animal") {
            AttributeDescription("name", .string)
            AttributeDescription("weight", .integer64)
            FetchIndexDescription("byWeight", properties: ["weight"])
        }
        EntityDescription("Dog", parent: "Animal") {
            AttributeDescription("breed", .string, isOptional: true)
        }
        EntityDescription("Cat", parent: "Animal") {
            AttributeDescription("lives", .integer16, defaultValue: 9)
        }
    }

    @Test("a batch update of a parent rewrites every sub-entity's rows in place; one of a sub-entity, only its own")
    func inheritedRows() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(Self.model) { coordinator in
            let context = ManagedObjectContext(coordinator: coordinator)
            for (n, entity) in ["Animal", "Dog", "Cat", "Dog", "Animal", "Cat", "Dog"].enumerated() {
                let animal = try context.insertNewObject(forEntityName: entity)
                try animal.setValue("\(entity) \(n)", forKey: "name")
                try animal.setValue(Int64(n + 1), forKey: "weight")
            }
            try context.save()
        }
        func describe(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
            let context = ManagedObjectContext(coordinator: coordinator)
            let heavy = try context.fetch(FetchRequest(entityName: "Animal", predicate: try FetchPredicate(format: "weight >= 20"),
                                                       sortDescriptors: [FetchSortDescriptor(keyPath: "weight", ascending: true)]))
            return heavy.map { "\($0.entity.name) \($0.value(forKey: "name") as! String) \($0.value(forKey: "weight") as! Int64)" }
        }
        for coordinator in [lmdb, memory] {
            let context = ManagedObjectContext(coordinator: coordinator)
            var all = BatchUpdateRequest(entityName: "Animal", propertiesToUpdate: ["weight": try PredicateExpression(format: "weight * 10")])
            all.resultType = .count
            #expect(try context.execute(all, fallback: .throughObjects).count == 7)
            let dogs = BatchUpdateRequest(entityName: "Dog", propertiesToUpdate: ["weight": try PredicateExpression(format: "weight + 1")])
            #expect(try context.execute(dogs, fallback: .throughObjects).count == 3)
        }
        let described = try describe(lmdb)
        #expect(described == ["Dog Dog 1 21", "Cat Cat 2 30", "Dog Dog 3 41", "Animal Animal 4 50", "Cat Cat 5 60", "Dog Dog 6 71"])
        #expect(try describe(memory) == described)
        #expect(try store.verify() == [])
    }
}
