import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import Testing

/// Files written in older formats are upgraded when a store opens them — format 1 (each index row under its own
/// key) to a key's rows as its duplicate values, format 2 (Foundation's string folding, no model in the file) to
/// folded indexes rebuilt by the stated rule and the model kept in `meta`; the rows are never touched.
@Suite(.onEveryEngine) struct FormatUpgradeTests {
    let books = ToManyJoinTests()

    /// A store of `books`' data whose many-to-many (`Book.authors` ↔ `Author.books`) is kept as format 4 kept it —
    /// `link/…` tables of owner key + member key → member key + tag, no `members/…` tables — with format 4 recorded.
    /// Returns the pairs each side holds, by table name of format 5.
    func formatFourStore(_ folder: StoreFolder) throws -> [String: [[UInt8]]] {
        let (coordinator, store) = try folder.coordinator(books.model)
        try books.load(coordinator)
        let state = try store.open
        let environment = state.environment
        let names = state.databases.keys.filter { $0.hasPrefix("members/") }.sorted()
        #expect(names == ["members/Author/books", "members/Book/authors"])
        let pairs: [String: [[UInt8]]] = try environment.read { transaction in
            var pairs: [String: [[UInt8]]] = [:]
            for name in names {
                try store.database(name, in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { pairs[name, default: []].append($0.keyBytes + $0.valueBytes); return true }
                }
            }
            return pairs
        }
        var links: [String: Database] = [:]
        for name in names { links[name] = try environment.openDatabase(named: "link/" + name.dropFirst("members/".count)) }
        try environment.write { transaction in
            for name in names {
                for pair in pairs[name]! { try links[name]!.put(Array(pair[8...]), forKey: Array(pair[0..<16]), in: transaction) }
                try store.database(name, in: state).drop(in: transaction)
            }
            try store.database("meta", in: state).put(Array("4".utf8), forKey: Array("format".utf8), in: transaction)
        }
        return pairs
    }

    /// Every pair of the store's `members/…` tables (key + value), by table.
    func memberPairs(_ store: LMDBIncrementalStore) throws -> [String: [[UInt8]]] {
        let state = try store.open
        return try state.environment.read { transaction in
            var pairs: [String: [[UInt8]]] = [:]
            for (name, table) in state.databases where name.hasPrefix("members/") {
                try table.withCursor(in: transaction) { cursor in
                    try cursor.forEach { pairs[name, default: []].append($0.keyBytes + $0.valueBytes); return true }
                }
            }
            return pairs
        }
    }

    /// A format-4 file opens as format 5: each unordered to-many's pairs move from its `link/…` table to a
    /// `members/…` table (the owner's members as the duplicate values of its key), the old table is dropped, and
    /// every answer is the same.
    @Test func aFormatFourFileMovesItsPairsToMembersTables() throws {
        let folder = StoreFolder()
        let pairs = try formatFourStore(folder)
        #expect(pairs.values.map(\.count).reduce(0, +) > 0)
        let (coordinator, store) = try folder.coordinator(books.model)
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try memberPairs(store) == pairs, "every pair, under its owner's key")
        #expect(try store.verify().isEmpty)
        let environment = try store.open.environment
        for name in ["link/Book/authors", "link/Author/books"] {
            #expect(throws: LMDBError.notFound) { try environment.openDatabase(named: name, create: false) }
        }
        #expect(try environment.read { try environment.openDatabase(named: "meta").value(forKey: Array("leftoverTables".utf8), in: $0) } == nil)
        let memory = PersistentStoreCoordinator(managedObjectModel: books.model)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        try books.load(memory)
        for (entity, format, key) in [("Book", "ANY authors.name == 'Cy 3'", "title"), ("Author", "ANY books.year > 1962", "name")] {
            let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format))
            func answer(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
                try ManagedObjectContext(coordinator: coordinator).fetch(request).map { object in
                    let members = (object.value(forKey: entity == "Book" ? "authors" : "books") as? Set<ManagedObject> ?? [])
                    return "\(object.value(forKey: key) ?? ""): \(members.map { "\($0.value(forKey: entity == "Book" ? "name" : "title") ?? "")" }.sorted())"
                }.sorted()
            }
            let upgraded = try answer(coordinator), expected = try answer(memory)
            #expect(!upgraded.isEmpty && upgraded == expected, "\(format)")
        }
    }

    /// A format-4 upgrade interrupted while copying leaves format 4 and a partly filled `members/…` table: the next
    /// open empties it and copies again. Interrupted after recording format 5, it leaves the old tables listed in
    /// `meta`: the next open drops them.
    @Test func anInterruptedFormatFourUpgradeIsFinishedByTheNextOpen() throws {
        let folder = StoreFolder()
        let pairs = try formatFourStore(folder)
        do {
            let environment = try KeyValueEngines.open(at: folder.file().path, options: .init())
            let partial = try environment.openDatabase(named: "members/Book/authors", options: [.dupSort, .dupFixed])
            try environment.write { try partial.put([0, 0, 0, 0, 0, 0, 0, 1, 0, 0], forKey: [0, 0, 0, 0, 0, 0, 0, 99], in: $0) }
        }
        do {
            let (_, store) = try folder.coordinator(books.model)
            #expect(try memberPairs(store) == pairs, "the stray pair is gone, every pair is there once")
            // Back to the moment after format 5 was recorded: an old table still there, and listed.
            let environment = try store.open.environment
            let old = try environment.openDatabase(named: "link/Book/authors")
            try environment.write { transaction in
                try old.put([0, 0, 0, 0, 0, 0, 0, 1, 0, 1], forKey: Array(repeating: 1, count: 16), in: transaction)
                try environment.openDatabase(named: "meta").put(Array(#"["link/Book/authors"]"#.utf8), forKey: Array("leftoverTables".utf8), in: transaction)
            }
        }
        let (_, store) = try folder.coordinator(books.model, "store.lmdb")
        let environment = try store.open.environment
        #expect(throws: LMDBError.notFound) { try environment.openDatabase(named: "link/Book/authors", create: false) }
        #expect(try environment.read { try environment.openDatabase(named: "meta").value(forKey: Array("leftoverTables".utf8), in: $0) } == nil)
        #expect(try memberPairs(store) == pairs)
        #expect(try store.verify().isEmpty)
    }

    /// A store of `books`' data whose `index/…` and `toone/…` tables are laid out as format 1 laid them out, with
    /// format 1 recorded; `damage` runs last, in the same write transaction.
    func formatOneStore(_ folder: StoreFolder, damage: (any KeyValueEngine, [String: Database], any KeyValueTransaction) throws -> Void = { _, _, _ in })
        throws -> (rowCount: Int, indexEntries: Int)
    {
        let (coordinator, store) = try folder.coordinator(books.model)
        try books.load(coordinator)
        let state = try store.open
        let environment = state.environment
        let names = state.databases.keys.filter { $0.hasPrefix("index/") || $0.hasPrefix("toone/") }.sorted()
        let entries: [String: [(key: [UInt8], value: [UInt8])]] = try environment.read { transaction in
            var entries: [String: [(key: [UInt8], value: [UInt8])]] = [:]
            for name in names {
                try store.database(name, in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { entries[name, default: []].append(($0.keyBytes, $0.valueBytes)); return true }
                }
            }
            return entries
        }
        try environment.write { transaction in for name in names { try store.database(name, in: state).drop(in: transaction) } }
        var tables: [String: Database] = [:]
        for name in names { tables[name] = try environment.openDatabase(named: name) }
        let meta = try environment.openDatabase(named: "meta")
        let rows = try environment.openDatabase(named: "rows/Book")
        try environment.write { transaction in
            for (name, list) in entries {
                // Format 1: tuple (or destination key) + row key → entity tag.
                for entry in list { try tables[name]!.put(Array(entry.value[8..<10]), forKey: entry.key + entry.value[0..<8], in: transaction) }
            }
            try meta.put(Array("1".utf8), forKey: Array("format".utf8), in: transaction)
            _ = try meta.delete(key: Array("model".utf8), in: transaction)
            try damage(environment, tables.merging(["rows/Book": rows]) { $1 }, transaction)
        }
        let rowCount = try environment.read { try rows.entryCount(in: $0) }
        return (rowCount, entries.values.reduce(0) { $0 + $1.count })
    }

    @Test func aFormatOneFileIsUpgradedWhenOpened() throws {
        let folder = StoreFolder()
        let before = try formatOneStore(folder)
        let (coordinator, store) = try folder.coordinator(books.model)
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try store.verify().isEmpty, "every index entry was rebuilt from the rows")
        #expect(try LMDBIncrementalStore.storedModel(at: folder.file()) == books.model, "the upgrade records the model")
        let state = try store.open
        #expect(throws: Never.self) { try state.environment.openDatabase(named: "index/Book/byYear", options: [.dupSort, .dupFixed], create: false) }
        let rebuilt = try state.environment.read { transaction in
            try state.databases.filter { $0.key.hasPrefix("index/") || $0.key.hasPrefix("toone/") }.values.reduce(0) { $0 + (try $1.entryCount(in: transaction)) }
        }
        #expect(rebuilt == before.indexEntries)
        // The upgraded indexes answer as a fresh store's do.
        let memory = PersistentStoreCoordinator(managedObjectModel: books.model)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        try books.load(memory)
        for (entity, format) in [("Shelf", "ANY books.year == 1960"), ("Book", "year BETWEEN {1960, 1965}"), ("Book", "ANY authors.name == 'Cy 3'"),
                                 ("Author", "ANY books.title BEGINSWITH 'Dune'")] {
            let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format))
            #expect(!store.explain(request).hasPrefix("Scan("), "\(format) uses an index")
            #expect(try ManagedObjectContext(coordinator: coordinator).fetchObjectIDs(request).map(\.referenceObject)
                == ManagedObjectContext(coordinator: memory).fetchObjectIDs(request).map(\.referenceObject), "\(format)")
        }
    }

    /// A format-2 file (strings in folded indexes folded as Foundation folds them; no model in `meta`) opens as
    /// format 3: its folded indexes rebuilt by the stated rule, its other tables left alone, the model recorded.
    @Test func aFormatTwoFileGetsItsFoldedIndexesRebuiltAndItsModelRecorded() throws {
        let model = try ManagedObjectModel {
            EntityDescription("City") {
                AttributeDescription("name", .string)
                AttributeDescription("population", .integer64)
                FetchIndexDescription("byName", elements: [FetchIndexElementDescription("name", collation: .caseAndDiacriticInsensitive)])
                FetchIndexDescription("byPopulation", properties: ["population"])
            }
        }
        let names = ["Straße", "STRASSE", "İstanbul", "Zürich", "ZURICH", "Ørsted", "ΟΔΟΣ", "e\u{301}cole", "ÉCOLE"]
        let folder = StoreFolder()
        do {
            let (coordinator, store) = try folder.coordinator(model)
            let context = ManagedObjectContext(coordinator: coordinator)
            for (offset, name) in names.enumerated() {
                let city = try context.insertNewObject(forEntityName: "City")
                try city.setValue(name, forKey: "name")
                try city.setValue(Int64(offset), forKey: "population")
            }
            try context.save()
            // Back to format 2: no model, and the folded index holds keys folded some other way.
            let state = try store.open
            let byName = store.database("index/City/byName", in: state)
            let meta = store.database("meta", in: state)
            try state.environment.write { transaction in
                try byName.clear(in: transaction)
                try byName.put(Array(repeating: 0, count: 10), forKey: [0x30, 0x7A, 0x00], in: transaction)
                try meta.put(Array("2".utf8), forKey: Array("format".utf8), in: transaction)
                _ = try meta.delete(key: Array("model".utf8), in: transaction)
            }
            #expect(try !store.verify().isEmpty)
        }
        #expect(try LMDBIncrementalStore.storedModel(at: folder.file()) == nil, "a format-2 file keeps no model")
        let (coordinator, store) = try folder.coordinator(model, "store.lmdb")
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try store.verify().isEmpty, "the folded index was rebuilt from the rows")
        #expect(try LMDBIncrementalStore.storedModel(at: folder.file()) == model)
        let request = FetchRequest(entityName: "City", predicate: try FetchPredicate(format: "name ==[cd] %@", "strasse"))
        #expect(store.explain(request).contains("byName"))
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: request) == 2)
        let zurich = FetchRequest(entityName: "City", predicate: try FetchPredicate(format: "name ==[cd] 'zurich'"))
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: zurich) == 2)
    }

    /// An index that keeps a uniqueness constraint is rebuilt with every row's entry — those whose constrained values
    /// are set (the entries that check the constraint) as well as those with a NULL — and keeps checking it.
    @Test func aRebuiltIndexThatKeepsAConstraintHoldsEveryRow() throws {
        let model = try ManagedObjectModel {
            EntityDescription("City") {
                AttributeDescription("code", .string, isOptional: true)
                AttributeDescription("population", .integer64)
                FetchIndexDescription("byCode", properties: ["code"])
                UniquenessConstraint("code")
            }
        }
        let folder = StoreFolder()
        do {
            let (coordinator, store) = try folder.coordinator(model)
            let context = ManagedObjectContext(coordinator: coordinator)
            for (offset, code) in ["ams", "ber", nil, "cph", nil].enumerated() {
                let city = try context.insertNewObject(forEntityName: "City")
                if let code { try city.setValue(code, forKey: "code") }
                try city.setValue(Int64(offset), forKey: "population")
            }
            try context.save()
            // Back to format 1: the index emptied (the upgrade makes it again from the rows), no model recorded.
            let state = try store.open
            try state.environment.write { transaction in
                try store.database("index/City/byCode", in: state).clear(in: transaction)
                let meta = store.database("meta", in: state)
                try meta.put(Array("1".utf8), forKey: Array("format".utf8), in: transaction)
                _ = try meta.delete(key: Array("model".utf8), in: transaction)
            }
        }
        let (coordinator, store) = try folder.coordinator(model, "store.lmdb")
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try store.verify().isEmpty, "every row's entry was rebuilt")
        let state = try store.open
        #expect(try state.environment.read { try store.database("index/City/byCode", in: state).entryCount(in: $0) } == 5)
        let berlin = FetchRequest(entityName: "City", predicate: try FetchPredicate(format: "code == 'ber'"))
        #expect(store.explain(berlin).contains("byCode"))
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: berlin) == 1)
        let context = ManagedObjectContext(coordinator: coordinator)
        try context.insertNewObject(forEntityName: "City").setValue("ber", forKey: "code")
        #expect(throws: ManagedObjectContextError.self, "the rebuilt index still checks the constraint") { try context.save() }
    }

    /// A format-3 file holds every row in row format 1 (fields as number, type, value), a format-5 file in row
    /// format 2 (a field table after a 22-byte header): either opens as the current format without a row or an
    /// index being touched, reads and filters those rows as before, and a save writes the rows it changes in row
    /// format 3 (a short header) beside the old ones.
    @Test(arguments: [(3, 1), (5, 2)] as [(Int, UInt8)])
    func anOlderFileKeepsItsRowsAndSavesWriteTheNewRowFormat(fileFormat: Int, rowFormat: UInt8) throws {
        let folder = StoreFolder()
        var oldRows = 0
        do {
            let (coordinator, store) = try folder.coordinator(books.model)
            try books.load(coordinator)
            let state = try store.open
            let layout = StoreLayout(model: books.model)
            try state.environment.write { transaction in
                for (name, rows) in state.databases where name.hasPrefix("rows/") {
                    var rewritten: [([UInt8], [UInt8])] = []
                    try rows.withCursor(in: transaction) { cursor in
                        try cursor.forEach { entry in
                            let row = try RowCodec.decode(entry.value, layout: layout)
                            let hash = books.model.versionHash.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
                            rewritten.append((entry.keyBytes, rowFormat == 1 ? RowCodec.encodeFormatOne(row, modelHash: hash)
                                                                             : RowCodec.encodeFormatTwo(row, modelHash: hash)))
                            return true
                        }
                    }
                    for (key, value) in rewritten { try rows.put(value, forKey: key, in: transaction) }
                    oldRows += rewritten.count
                }
                try store.database("meta", in: state).put(Array(String(fileFormat).utf8), forKey: Array("format".utf8), in: transaction)
            }
        }
        func rowFormats(_ store: LMDBIncrementalStore) throws -> [UInt8: Int] {
            let state = try store.open
            return try state.environment.read { transaction in
                var formats: [UInt8: Int] = [:]
                for (name, rows) in state.databases where name.hasPrefix("rows/") {
                    try rows.withCursor(in: transaction) { cursor in
                        try cursor.forEach { formats[$0.value[0], default: 0] += 1; return true }
                    }
                }
                return formats
            }
        }
        let (coordinator, store) = try folder.coordinator(books.model)
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try rowFormats(store) == [rowFormat: oldRows], "opening touches no row")
        #expect(try store.verify().isEmpty)
        let memory = PersistentStoreCoordinator(managedObjectModel: books.model)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        try books.load(memory)
        func sameAnswers() throws {
            for (entity, format, key) in [("Book", "title ENDSWITH ' 1'", "title"), ("Book", "year BETWEEN {1960, 1965}", "title"),
                                          ("Author", "name ENDSWITH '3' AND born > 1950", "name"), ("Shelf", "ANY books.title == 'Dune Messiah'", "label")] {
                let request = FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format))
                func answer(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
                    try ManagedObjectContext(coordinator: coordinator).fetch(request).map { "\($0.value(forKey: key) ?? "")" }.sorted()
                }
                #expect(try answer(coordinator) == answer(memory), "\(format)")
            }
        }
        try sameAnswers()
        var changed = 0
        for target in [coordinator, memory] {
            let context = ManagedObjectContext(coordinator: target)
            let books = try context.fetch(FetchRequest(entityName: "Book", predicate: try FetchPredicate(format: "title == 'Dune 1'")))
            for book in books { try book.setValue("Dune Messiah", forKey: "title") }
            try context.save()
            changed = books.count
        }
        #expect(changed > 0)
        #expect(try rowFormats(store) == [rowFormat: oldRows - changed, 3: changed], "the saved rows alone are rewritten, in row format 3")
        #expect(try store.verify().isEmpty)
        try sameAnswers()
    }

    /// A new store keeps its model in `meta`; a model there that does not load is an error naming the file.
    @Test func aStoreDescribesItselfAndADamagedModelIsNamed() throws {
        let folder = StoreFolder()
        do {
            let (_, store) = try folder.coordinator(books.model)
            #expect(try LMDBIncrementalStore.storedModel(at: folder.file()) == books.model)
            let state = try store.open
            let meta = store.database("meta", in: state)
            try state.environment.write { transaction in
                try meta.put(Array(#"{"formatVersion": 1, "entities": [{"name": "Book", "parent": "Nowhere"}]}"#.utf8), forKey: Array("model".utf8), in: transaction)
            }
        }
        do {
            _ = try LMDBIncrementalStore.storedModel(at: folder.file())
            Issue.record("a damaged stored model loaded")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable)
            #expect(error.message.contains("store.lmdb keeps a model that does not load") && error.message.contains("meta/model"), "\(error.message)")
        }
        #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.storedModel(at: folder.file("missing.lmdb")) }
    }

    /// Rows are re-indexed a batch at a time: with batches of 7 rows, every row's entries are still written once.
    @Test func theUpgradeRebuildsTheIndexesInBatches() throws {
        let folder = StoreFolder()
        let before = try formatOneStore(folder)
        let (_, store) = try folder.coordinator(ToManyJoinTests().model, "other.lmdb")
        let environment = try KeyValueEngines.open(at: folder.file().path, options: .init())
        try store.upgrade(environment, from: 1, path: folder.file().path, rowsPerTransaction: 7)
        let (_, upgraded) = try folder.coordinator(books.model)
        #expect(upgraded.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try upgraded.verify().isEmpty)
        let state = try upgraded.open
        let entries = try state.environment.read { transaction in
            try state.databases.filter { $0.key.hasPrefix("index/") || $0.key.hasPrefix("toone/") }.values.reduce(0) { $0 + (try $1.entryCount(in: transaction)) }
        }
        #expect(entries == before.indexEntries)
    }

    /// An upgrade interrupted after dropping the old tables left format 1 and no index tables: the next open
    /// finishes it.
    @Test func anInterruptedUpgradeIsFinishedByTheNextOpen() throws {
        let folder = StoreFolder()
        _ = try formatOneStore(folder) { _, tables, transaction in
            for (name, table) in tables where name.hasPrefix("index/") { try table.drop(in: transaction) }
        }
        let (_, store) = try folder.coordinator(books.model)
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        #expect(try store.verify().isEmpty)
    }

    /// A row that cannot be decoded stops the upgrade with an error naming it; format 1 stays recorded and no row
    /// is lost.
    @Test func anUndecodableRowStopsTheUpgradeNamingIt() throws {
        let folder = StoreFolder()
        var damagedKey: UInt64 = 0
        let before = try formatOneStore(folder) { _, tables, transaction in
            let rows = tables["rows/Book"]!
            let (key, blob) = try rows.withCursor(in: transaction) { cursor in
                let entry = try #require(try cursor.first())
                return (entry.keyBytes, entry.valueBytes)
            }
            damagedKey = key.reduce(0) { $0 << 8 | UInt64($1) }
            var damaged = blob
            damaged[damaged.count / 2] ^= 0xFF
            try rows.put(damaged, forKey: key, in: transaction)
        }
        do {
            _ = try folder.coordinator(books.model)
            Issue.record("a file with a damaged row was upgraded")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable)
            #expect(error.message.contains("key \(damagedKey)") && error.message.contains("format 1"), "\(error.message)")
        }
        let environment = try KeyValueEngines.open(at: folder.file().path, options: .init())
        let meta = try environment.openDatabase(named: "meta", create: false)
        let rows = try environment.openDatabase(named: "rows/Book", create: false)
        try environment.read { transaction throws in
            #expect(try meta.value(forKey: Array("format".utf8), in: transaction) == Array("1".utf8))
            #expect(try rows.entryCount(in: transaction) == before.rowCount)
        }
    }
}
