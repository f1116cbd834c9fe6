import Foundation
import FuzzSupport
import LMDB
@testable import LMDBStore
import ObjectGraph

// Damaged store files, at the level of LMDB's entries: the input is a program of edits — delete an entry, replace,
// cut or flip bits of its value or key, add an entry, or rewrite a row's bytes under a valid checksum — applied to a
// copy of a small store that has every kind of table (rows of several roots, single, compound, descending,
// case-folded and covering indexes, a uniqueness constraint, to-one, members and link tables, meta, seq, changes).
//
// Then the store is opened as an app opens it and used: every object of every entity loaded with its relationships,
// fetches that take each kind of index, counts, `verify()`, and a save. Any of these may refuse with an error; none
// may trap. And where `verify()` finds nothing wrong, damage must not have become a wrong answer: each fetch finds
// exactly the objects that evaluating its predicate over every object finds, its count agrees, and a save leaves
// `verify()` clean.

private struct Table {
    let name: String
    let isDuplicateSorted: Bool
    var entries: [(key: [UInt8], value: [UInt8])]
}

private struct Template {
    let folder: URL
    let file: [UInt8]
    let tables: [Table]
}

private let template: Template = makeTemplate()

/// The folder of this process's store copies, removed when the fuzzer exits.
nonisolated(unsafe) private var folderToRemove: String?

private func makeTemplate() -> Template {
    LMDBIncrementalStore.register()
    let folder = URL(fileURLWithPath: FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
        .appendingPathComponent("lmdbstore-fuzz-\(getpid())")
    try? FileManager.default.removeItem(at: folder)
    try! FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    folderToRemove = folder.path
    atexit { if let folder = folderToRemove { try? FileManager.default.removeItem(atPath: folder) } }
    let url = folder.appendingPathComponent("template.lmdb")
    do {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: fuzzModel)
        _ = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: ["durability": "noSync"])
        let context = ManagedObjectContext(coordinator: coordinator)
        try fill(context)
        try context.save()
        // A second save, so that the change log and row versions have more than one entry.
        let samples = try context.fetch(FetchRequest(entityName: "Sample", predicate: try FetchPredicate(format: "i32 > 4")))
        for sample in samples { try sample.setValue((sample.value(forKey: "i32") as! Int32) * 3, forKey: "i32") }
        try context.save()
    } catch {
        preconditionFailure("the fuzz template store cannot be written: \(error)")
    }
    let environment = try! Environment.open(at: url.path, options: { var options = Environment.Options(); options.isReadOnly = true; return options }())
    let main = try! environment.openDatabase(named: nil, create: false)
    let names: [String] = try! environment.read { transaction in
        try main.withCursor(in: transaction) { cursor in
            var names: [String] = []
            var entry = try cursor.first()
            while let current = entry {
                names.append(String(decoding: current.keyBytes, as: UTF8.self))
                entry = try cursor.next()
            }
            return names
        }
    }
    var tables: [Table] = []
    for name in names {
        let isDuplicateSorted = isDuplicateSortedTable(name)
        let database = try! environment.openDatabase(named: name, options: isDuplicateSorted ? [.dupSort, .dupFixed] : [], create: false)
        var table = Table(name: name, isDuplicateSorted: isDuplicateSorted, entries: [])
        try! environment.read { transaction in
            try database.withCursor(in: transaction) { cursor in
                var entry = try cursor.first()
                while let current = entry {
                    table.entries.append((current.keyBytes, current.valueBytes))
                    entry = try cursor.next()
                }
            }
        }
        tables.append(table)
    }
    let file = try! [UInt8](Data(contentsOf: url))
    return Template(folder: folder, file: file, tables: tables)
}

private func isDuplicateSortedTable(_ name: String) -> Bool {
    name.hasPrefix("index/") || name.hasPrefix("toone/") || name.hasPrefix("members/")
}

private func fill(_ context: ManagedObjectContext) throws {
    let names = ["Ada", "björn", "Cy", "Dee"]
    var owners: [ManagedObject] = []
    for (n, name) in names.enumerated() {
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue(name, forKey: "name")
        try owner.setValue(Int32(n), forKey: "rank")
        owners.append(owner)
        let badge = try context.insertNewObject(forEntityName: n % 2 == 0 ? "Gold" : "Silver")
        try badge.setValue(Int16(n), forKey: "level")
        if n % 2 == 0 { try badge.setValue(Double(n) * 1.5, forKey: "carats") } else { try badge.setValue("high", forKey: "polish") }
        try badge.setValue(owner, forKey: "holder")
    }
    let strings = ["École", "ecole", "Zebra", "apple", "Äpfel", "", nil]
    for n in 0..<14 {
        let sample = try context.insertNewObject(forEntityName: "Sample")
        try sample.setValue(n % 5 == 4 ? nil : Int16(n - 7), forKey: "i16")
        try sample.setValue(n % 6 == 5 ? nil : Int32(n * 3 % 11), forKey: "i32")
        try sample.setValue(Int64(n) << 40, forKey: "i64")
        try sample.setValue(n % 3 == 0 ? nil : Decimal(string: "\(n).25"), forKey: "dec")
        try sample.setValue(n % 4 == 0 ? Double.infinity : Double(n) / 3, forKey: "dbl")
        try sample.setValue(Float(n) * 0.5, forKey: "flt")
        try sample.setValue(strings[n % strings.count], forKey: "str")
        try sample.setValue(n % 3 == 2 ? nil : n % 2 == 0, forKey: "bool")
        try sample.setValue(Date(timeIntervalSinceReferenceDate: Double(n * 86_400 - 300_000)), forKey: "date")
        try sample.setValue(Data(repeating: UInt8(n), count: n), forKey: "data")
        try sample.setValue(UUID(uuid: (UInt8(n), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)), forKey: "uuid")
        try sample.setValue(URL(string: "https://example.com/\(n)"), forKey: "uri")
        try sample.setValue(n % 5 == 0 ? nil : owners[n % owners.count], forKey: "owner")
    }
    var labels: [ManagedObject] = []
    for name in ["red", "green", "blue"] {
        let label = try context.insertNewObject(forEntityName: "Label")
        try label.setValue(name, forKey: "name")
        labels.append(label)
    }
    for n in 0..<8 {
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("item \(n)", forKey: "name")
        if n % 4 != 3 { try item.setValue(owners[n % 3], forKey: "queuedBy") }
        try item.setValue(Set(labels.enumerated().filter { (n >> $0.offset) & 1 == 1 }.map(\.element)), forKey: "labels")
    }
}

// MARK: - Damage

private func damage(_ file: URL, with input: inout FuzzBytes) -> Bool {
    do {
        let environment = try Environment.open(at: file.path, options: { var options = Environment.Options(); options.durability = .noSync; return options }())
        let databases = try template.tables.map { table in
            try environment.openDatabase(named: table.name, options: table.isDuplicateSorted ? [.dupSort, .dupFixed] : [], create: false)
        }
        try environment.write { transaction in
            let edits = 1 + input.number(below: 4)
            for _ in 0..<edits {
                let chosen = input.number(below: template.tables.count)
                try edit(template.tables[chosen], databases[chosen], transaction, &input)
            }
        }
        return true
    } catch {
        return false  // an edit LMDB refuses (a key too long or empty): nothing to open
    }
}

private func edit(_ table: Table, _ database: Database, _ transaction: Transaction, _ input: inout FuzzBytes) throws {
    let action = input.byte() % 8
    let fixedSize = table.isDuplicateSorted ? table.entries.first?.value.count : nil
    if action == 4 || table.entries.isEmpty {
        // A new entry.
        var key = input.bytes(upTo: 24)
        if key.isEmpty { key = [input.byte()] }
        var value = input.bytes(upTo: 40)
        if let fixedSize { value = Array((value + Array(repeating: 0, count: fixedSize)).prefix(fixedSize)) }
        try database.put(value, forKey: key, in: transaction)
        return
    }
    let (key, value) = table.entries[input.number(below: table.entries.count)]
    func remove() throws {
        if table.isDuplicateSorted { _ = try database.delete(key: key, value: value, in: transaction) } else { _ = try database.delete(key: key, in: transaction) }
    }
    func replace(key newKey: [UInt8] = key, value newValue: [UInt8]) throws {
        try remove()
        try database.put(newValue, forKey: newKey, in: transaction)
    }
    switch action {
    case 0:
        try remove()
    case 1 where fixedSize == nil:
        try replace(value: input.bytes(upTo: 64))
    case 1, 2:
        guard !value.isEmpty else { return try remove() }
        var changed = value
        let bit = input.number(below: value.count * 8)
        changed[bit / 8] ^= 1 << (bit % 8)
        try replace(value: changed)
    case 3:
        var changed = key
        let bit = input.number(below: key.count * 8)
        changed[bit / 8] ^= 1 << (bit % 8)
        try replace(key: changed, value: value)
    case 5 where fixedSize == nil:
        try replace(value: Array(value.prefix(input.number(below: value.count))))
    case 6:
        guard !value.isEmpty else { return try remove() }
        var changed = value
        changed[input.number(below: value.count)] = input.byte()
        try replace(value: changed)
    case 7 where table.name.hasPrefix("rows/") && value.count > 4:
        // Damage under a valid checksum: a buggy writer, or a file made to look sound.
        var body = Array(value.dropLast(4))
        for _ in 0..<(1 + input.number(below: 3)) { body[input.number(below: body.count)] = input.byte() }
        let crc = body.withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: crc.bigEndian) { body.append(contentsOf: $0) }
        try replace(value: body)
    default:
        try remove()
    }
}

// MARK: - Use

private struct Query {
    let entity: String
    let format: String
    let argument: String?  // the entity of the object passed as %@, its first object by name or key
}

private let queries: [Query] = [
    Query(entity: "Sample", format: "i32 > 3", argument: nil),
    Query(entity: "Sample", format: "i32 == 6 OR i32 == nil", argument: nil),
    Query(entity: "Sample", format: "str ==[cd] 'ECOLE'", argument: nil),
    Query(entity: "Sample", format: "str BEGINSWITH[cd] 'a'", argument: nil),
    Query(entity: "Sample", format: "bool == YES AND date < CAST(100000, 'NSDate')", argument: nil),
    Query(entity: "Sample", format: "owner == %@", argument: "Owner"),
    Query(entity: "Sample", format: "owner == %@ AND i64 > 1000", argument: "Owner"),
    Query(entity: "Sample", format: "owner.name == 'Cy'", argument: nil),
    Query(entity: "Sample", format: "owner == nil", argument: nil),
    Query(entity: "Owner", format: "name == 'Dee'", argument: nil),
    Query(entity: "Owner", format: "ANY queue.name == 'item 2'", argument: nil),
    Query(entity: "Owner", format: "badge.level > 1", argument: nil),
    Query(entity: "Owner", format: "samples.@count > 2", argument: nil),
    Query(entity: "Item", format: "name BEGINSWITH 'item'", argument: nil),
    Query(entity: "Item", format: "ANY labels == %@", argument: "Label"),
    Query(entity: "Item", format: "NOT (%@ IN labels)", argument: "Label"),
    Query(entity: "Item", format: "queuedBy == %@", argument: "Owner"),
    Query(entity: "Label", format: "ANY items.name == 'item 5'", argument: nil),
    Query(entity: "Badge", format: "level >= 2", argument: nil),
    Query(entity: "Badge", format: "holder.name == 'Ada'", argument: nil),
]

/// Every property name of the model; an object answers `nil` for those it does not have.
private let propertyNames = Set(fuzzModel.entities.flatMap { $0.properties.map(\.name) }).sorted()

private let entities = ["Sample", "Owner", "Item", "Label", "Badge", "Gold", "Silver"]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzStore(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzBytes(start, count)
    let file = template.folder.appendingPathComponent("store.lmdb")
    try? FileManager.default.removeItem(at: file)
    guard FileManager.default.createFile(atPath: file.path, contents: Data(template.file)) else { finding("cannot write \(file.path)") }
    guard damage(file, with: &input) else { return 0 }
    // Four of the queries, chosen by the input: all of them on every input would make each run five times longer.
    let chosen = (0..<4).map { _ in queries[input.number(below: queries.count)] }
    use(file, chosen)
    return 0
}

private func use(_ file: URL, _ queries: [Query]) {
    let coordinator = PersistentStoreCoordinator(managedObjectModel: fuzzModel)
    guard let store = try? coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: file, options: ["durability": "noSync"]) as? LMDBIncrementalStore
    else { return }
    let context = ManagedObjectContext(coordinator: coordinator)
    var everything: [String: [ManagedObject]] = [:]
    for entity in entities {
        guard let objects = try? context.fetch(FetchRequest(entityName: entity)) else { continue }
        everything[entity] = objects
        for object in objects { touch(object) }
    }
    let problems = (try? store.verify()) ?? ["verify failed"]
    for query in queries { check(query, context, everything, sound: problems.isEmpty) }
    _ = try? context.fetchDictionaries(FetchRequest(entityName: "Sample").with {
        $0.propertiesToGroupBy = ["bool"]
        $0.propertiesToFetch = [.keyPath("bool"), .aggregate(.count, of: "i32", as: "n")]
        $0.resultType = .dictionary
    })
    save(context, everything)
    if problems.isEmpty, let after = try? store.verify(), !after.isEmpty {
        finding("a save into a sound store left it unsound: \(after)")
    }
}

/// Loads an object's values and relationships, as an app reading it would.
private func touch(_ object: ManagedObject) {
    for name in propertyNames {
        let value = object.value(forKey: name)
        if let many = value as? [ManagedObject] { for related in many { _ = related.value(forKey: "name") } }
    }
}

private func check(_ query: Query, _ context: ManagedObjectContext, _ everything: [String: [ManagedObject]], sound: Bool) {
    var arguments: [any PredicateArgument] = []
    if let entity = query.argument {
        guard let first = everything[entity]?.min(by: { ($0.value(forKey: "name") as? String ?? "") < ($1.value(forKey: "name") as? String ?? "") })
        else { return }
        arguments.append(first)
    }
    guard let predicate = try? FetchPredicate(format: query.format, argumentArray: arguments) else {
        finding("the query \(query.format) does not parse")
    }
    let request = FetchRequest(entityName: query.entity, predicate: predicate)
    let found = try? context.fetchObjectIDs(request)
    let counted = try? context.count(for: request)
    guard sound, let all = everything[query.entity] else { return }
    guard let found, let counted else { finding("\(query.entity) where \(query.format) fails in a store verify() finds sound") }
    let expected = Set(all.filter { (try? predicate.evaluate(with: $0)) == true }.map(\.objectID))
    guard Set(found) == expected, found.count == expected.count else {
        finding("\(query.entity) where \(query.format) finds \(found.count) objects in a store verify() finds sound; evaluating it over every object finds \(expected.count)")
    }
    guard counted == expected.count else {
        finding("\(query.entity) where \(query.format) counts \(counted) in a store verify() finds sound; evaluating it finds \(expected.count)")
    }
}

private func save(_ context: ManagedObjectContext, _ everything: [String: [ManagedObject]]) {
    do {
        if let sample = everything["Sample"]?.first {
            try sample.setValue(Int32(99), forKey: "i32")
            try sample.setValue("Ünïcode", forKey: "str")
        }
        if let owner = everything["Owner"]?.last { try owner.setValue("Eve", forKey: "name") }
        if let item = everything["Item"]?.first { context.delete(item) }
        if let owner = everything["Owner"]?.first { context.delete(owner) }
        let label = try context.insertNewObject(forEntityName: "Label")
        try label.setValue("violet", forKey: "name")
        if let items = everything["Item"], items.count > 2 { try label.setValue(Set(items[1...2]), forKey: "items") }
        try context.save()
    } catch {
        return
    }
}
