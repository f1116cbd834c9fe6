import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// A company: departments and projects found by unique name or code, employees with a required name, a unique
/// email, an age within bounds, a hire date, a to-one department (inverse derived from it) and many-to-many projects.
let batchModel: ManagedObjectModel = {
    try! ManagedObjectModel {
        EntityDescription("Department") {
            AttributeDescription("name", .string)
            AttributeDescription("budget", .integer64, defaultValue: 1000)
            RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true, deleteRule: .cascade)
            UniquenessConstraint("name")
        }
        EntityDescription("Project") {
            AttributeDescription("code", .string)
            RelationshipDescription("members", destination: "Employee", inverse: "projects", toMany: true)
            UniquenessConstraint("code")
        }
        EntityDescription("Employee") {
            AttributeDescription("name", .string)
            AttributeDescription("email", .string, isOptional: true)
            AttributeDescription("age", .integer16, defaultValue: 30, validation: AttributeValidation(minimumValue: 18, maximumValue: 99))
            AttributeDescription("salary", .double, isOptional: true)
            AttributeDescription("hired", .date, isOptional: true)
            RelationshipDescription("department", destination: "Department", inverse: "employees", deleteRule: .nullify)
            RelationshipDescription("projects", destination: "Project", inverse: "members", toMany: true)
            UniquenessConstraint("email")
            FetchIndexDescription("byAge", properties: ["age"])
        }
    }
}()

/// Departments D0…D(n-1) and projects P0…P(n-1), by batch insert.
func seed(_ context: ManagedObjectContext, departments: Int = 3, projects: Int = 4, fallback: BatchFallback = .fail) throws {
    _ = try context.execute(BatchInsertRequest(entityName: "Department", objects: (0..<departments).map { ["name": .attribute(.string("D\($0)"))] }),
                            fallback: fallback)
    _ = try context.execute(BatchInsertRequest(entityName: "Project", objects: (0..<projects).map { ["code": .attribute(.string("P\($0)"))] }),
                            fallback: fallback)
}

/// Employee `n`'s row: department by unique name, two projects by unique code.
private func employee(_ n: Int) -> [String: BatchValue] {
    ["name": .attribute(.string("E\(n)")), "email": .attribute(.string("e\(n)@example.com")), "age": .attribute(.integer(Int64(18 + n % 60))),
     "salary": .attribute(.double(Double(n) * 10)), "department": .uniqueValue(.string("D\(n % 3)")),
     "projects": .uniqueValues([.string("P\(n % 4)"), .string("P\((n + 1) % 4)")])]
}

/// A coordinator over `batchModel` with an in-memory store, or an LMDB store in `folder`.
private func batchCoordinator(inMemory: Bool, _ folder: StoreFolder) throws -> PersistentStoreCoordinator {
    guard inMemory else { return try folder.coordinator(batchModel).0 }
    let coordinator = PersistentStoreCoordinator(managedObjectModel: batchModel)
    try coordinator.addPersistentStore(type: InMemoryStore.storeType)
    return coordinator
}

/// The error a batch insert of `objects` into Person stops with, read in chunks of `chunkSize` (each its own
/// transaction when `commitsEachChunk`).
private func refusedInsert(_ context: ManagedObjectContext, _ objects: [[String: BatchValue]], chunkSize: Int,
                           commitsEachChunk: Bool = false) throws -> ManagedObjectContextError {
    var request = BatchInsertRequest(entityName: "Person", objects: objects)
    request.chunkSize = chunkSize
    request.commitsEachChunk = commitsEachChunk
    return try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
}

private func count(_ context: ManagedObjectContext, _ entity: String, _ format: String? = nil, _ arguments: any PredicateArgument...) throws -> Int {
    try context.count(for: FetchRequest(entityName: entity, predicate: try format.map { try FetchPredicate(format: $0, argumentArray: arguments) }))
}

/// The facts a batch of `n` employees should leave, asked the same way of any store.
private func summary(_ context: ManagedObjectContext, _ n: Int) throws -> [Int] {
    let d1 = try context.fetch(FetchRequest(entityName: "Department", predicate: try FetchPredicate(format: "name == 'D1'")))[0]
    let p2 = try context.fetch(FetchRequest(entityName: "Project", predicate: try FetchPredicate(format: "code == 'P2'")))[0]
    return [try count(context, "Employee"), try count(context, "Employee", "department == %@", d1.objectID),
            try count(context, "Employee", "ANY projects == %@", p2.objectID), p2.relatedObjects(forKey: "members").count,
            d1.relatedObjects(forKey: "employees").count, try count(context, "Employee", "age == 30"),
            try count(context, "Employee", "salary > 100 AND department.name == 'D2'")]
}

@Suite("Batch requests")
struct BatchRequestTests {
    @Test("a batch insert writes rows, defaults, indexes and both sides of its relationships, as objects saved would")
    func aBatchInsertWritesWhatASaveWould() throws {
        let folder = StoreFolder()
        let (lmdb, lmdbStore) = try folder.coordinator(batchModel)
        let memory = PersistentStoreCoordinator(managedObjectModel: batchModel)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        let n = 250
        var answers: [[Int]] = []
        for (coordinator, fallback) in [(lmdb, BatchFallback.fail), (memory, .throughObjects)] {
            let context = ManagedObjectContext(coordinator: coordinator)
            try seed(context, fallback: fallback)
            var request = BatchInsertRequest(entityName: "Employee", objects: (0..<n).map(employee))
            request.resultType = .objectIDs
            request.chunkSize = 64
            let result = try context.execute(request, fallback: fallback)
            #expect(result.isComplete && result.count == n && result.objectIDs?.count == n)
            // The IDs are the rows', in request order.
            let fresh = ManagedObjectContext(coordinator: coordinator)
            let third = try fresh.existingObject(with: result.objectIDs![3])
            #expect(third.value(forKey: "name") as? String == "E3")
            #expect((third.value(forKey: "department") as? ManagedObject)?.value(forKey: "name") as? String == "D0")
            #expect(third.value(forKey: "age") as? Int16 == 21)
            answers.append(try summary(fresh, n))
        }
        #expect(answers[0] == answers[1])
        #expect(answers[0][0] == n && answers[0][1] == 83 && answers[0][3] == 125, "\(answers)")
        // A row that leaves an attribute out gets its default.
        let context = ManagedObjectContext(coordinator: lmdb)
        _ = try context.execute(BatchInsertRequest(entityName: "Employee", objects: [["name": "Defaulted", "department": .uniqueValue("D0")]]))
        let defaulted = try context.fetch(FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name == 'Defaulted'")))
        #expect(defaulted.first?.value(forKey: "age") as? Int16 == 30)
        #expect(try lmdbStore.verify().isEmpty)
    }

    @Test("a bad row is named by its position, and nothing of the request is written", arguments: [
        (employee(7).merging(["age": "old"]) { $1 }, "row 7", "age is Integer 16, but the value is string \"old\""),
        (employee(7).merging(["name": nil]) { $1 }, "row 7", "name: a value is required"),
        (employee(7).merging(["age": 120]) { $1 }, "row 7", "above the maximum"),
        // An optional attribute without rules is still refused NaN (it is not equal to itself).
        (employee(7).merging(["salary": .attribute(.double(.nan))]) { $1 }, "row 7", "salary: NaN is not a"),
        (employee(7).merging(["hired": .attribute(.date(Date(timeIntervalSinceReferenceDate: .nan)))]) { $1 }, "row 7", "hired: NaN is not a"),
        (employee(7).merging(["nickname": "x"]) { $1 }, "row 7", "no property \"nickname\""),
        (employee(7).merging(["email": "e2@example.com"]) { $1 }, "row 7", "(email) = (\"e2@example.com\") is already taken"),
        (employee(7).merging(["department": .uniqueValue("Nowhere")]) { $1 }, "row 7", "whose name is \"Nowhere\", and there is none"),
        (employee(7).merging(["projects": .uniqueValues(["P1", "P9"])]) { $1 }, "row 7", "whose code is \"P9\""),
        (employee(7).merging(["department": .object(ManagedObjectID(entityName: "Department", storeIdentifier: "x", referenceObject: .integer(99)))]) { $1 },
         "row 7", "which is not in the store"),
    ])
    func aBadRowIsNamed(bad: [String: BatchValue], position: String, reason: String) throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        var rows = (0..<20).map(employee)
        // Unique-constraint and missing-ID cases need this store's identifier in the ID.
        if case .object(let id)? = bad["department"] {
            rows[7] = bad.merging(["department": .object(ManagedObjectID(entityName: id.entityName, storeIdentifier: store.identifier, referenceObject: .integer(99)))]) { $1 }
        } else {
            rows[7] = bad
        }
        var request = BatchInsertRequest(entityName: "Employee", objects: rows)
        request.chunkSize = 5
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message.contains(position), "\(error.message)")
        #expect(error.message.contains(reason), "\(error.message)")
        #expect(error.message.contains("nothing was inserted"), "\(error.message)")
        #expect(try count(context, "Employee") == 0)
        #expect(try store.verify().isEmpty)
        // The keys the failed transaction took are taken again: the next batch starts at key 1.
        var good = BatchInsertRequest(entityName: "Employee", objects: [employee(1)])
        good.resultType = .objectIDs
        #expect(try context.execute(good).objectIDs?.first?.referenceObject == .integer(1))
    }

    @Test("with each chunk committed, an error keeps the chunks before the bad row's and says so")
    func eachChunkCommitsOnItsOwn() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        var rows = (0..<300).map(employee)
        rows[250]["age"] = 5
        var request = BatchInsertRequest(entityName: "Employee", objects: rows)
        request.chunkSize = 100
        request.commitsEachChunk = true
        var reports: [BatchProgress] = []
        request.progressHandler = { reports.append($0); return true }
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message.contains("row 250") && error.message.contains("the 200 rows before its chunk were inserted and stay"), "\(error.message)")
        #expect(try count(context, "Employee") == 200)
        #expect(reports == [BatchProgress(written: 100, committed: 100, total: 300), BatchProgress(written: 200, committed: 200, total: 300)])
    }

    @Test("a stopped import leaves only whole committed chunks — none when the request commits at once")
    func aStoppedImportLeavesWholeChunks() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        for commitsEachChunk in [true, false] {
            var made = 0
            var request = BatchInsertRequest(entityName: "Employee") { row in
                guard made < 1_000 else { return true }
                row = employee(made + (commitsEachChunk ? 0 : 10_000))
                made += 1
                return false
            }
            request.chunkSize = 70
            request.commitsEachChunk = commitsEachChunk
            request.resultType = .objectIDs
            request.progressHandler = { progress in progress.written < 210 }
            let result = try context.execute(request)
            #expect(!result.isComplete)
            #expect(result.count == (commitsEachChunk ? 210 : 0))
            #expect(result.objectIDs?.count == result.count)
            #expect(made == 210, "rows are made a chunk at a time: the handler ran only for the chunks written")
        }
        #expect(try count(context, "Employee") == 210)
        #expect(try store.verify().isEmpty)
    }

    @Test("rows a handler makes are read a chunk at a time, and progress reports each chunk")
    func handlerRowsStream() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        var made = 0, highest = 0
        var request = BatchInsertRequest(entityName: "Employee") { row in
            guard made < 5_000 else { return true }
            row = employee(made)
            made += 1
            return false
        }
        request.chunkSize = 500
        request.resultType = .count
        request.progressHandler = { progress in
            // The handler has made at most the next chunk beyond what was written when progress is reported.
            highest = max(highest, made - progress.written)
            #expect(progress.total == nil && progress.committed == 0)
            return true
        }
        let result = try context.execute(request)
        #expect(result == BatchResult(count: 5_000))
        #expect(highest == 0)
        #expect(try count(context, "Employee", "age == 18") == 84)
    }

    @Test("rows given by position write what the same rows as dictionaries write; an empty position takes the default", arguments: [false, true])
    func valuesHandlerRows(inMemory: Bool) throws {
        let folder = StoreFolder()
        let coordinator = try batchCoordinator(inMemory: inMemory, folder)
        let context = ManagedObjectContext(coordinator: coordinator)
        let fallback: BatchFallback = inMemory ? .throughObjects : .fail
        try seed(context, fallback: fallback)
        let properties = ["projects", "name", "email", "age", "salary", "department"]
        let n = 250
        var made = 0
        var request = BatchInsertRequest(entityName: "Employee", properties: properties) { row in
            guard made < n else { return true }
            #expect(row.count == properties.count && (0..<row.count).allSatisfy { row[$0] == nil }, "each row starts empty")
            let values = employee(made)
            for (position, name) in properties.enumerated() where !(name == "age" && made % 10 == 0) { row[position] = values[name] }
            if made % 7 == 0 { row[2] = .null }
            made += 1
            return false
        }
        request.chunkSize = 64
        request.resultType = .objectIDs
        let result = try context.execute(request, fallback: fallback)
        #expect(result.isComplete && result.count == n && result.objectIDs?.count == n)
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let twentieth = try fresh.existingObject(with: result.objectIDs![20])
        #expect(twentieth.value(forKey: "age") as? Int16 == 30, "a position left empty takes the default")
        #expect(twentieth.value(forKey: "name") as? String == "E20")
        #expect(try fresh.existingObject(with: result.objectIDs![14]).value(forKey: "email") == nil, ".null sets NULL")
        #expect((twentieth.value(forKey: "department") as? ManagedObject)?.value(forKey: "name") as? String == "D2")

        // The same rows as dictionaries, into a second store, answer every question alike.
        let otherFolder = StoreFolder()
        let other = try batchCoordinator(inMemory: inMemory, otherFolder)
        let otherContext = ManagedObjectContext(coordinator: other)
        try seed(otherContext, fallback: fallback)
        let dictionaries = (0..<n).map { made -> [String: BatchValue] in
            var values = employee(made)
            if made % 10 == 0 { values["age"] = nil }
            if made % 7 == 0 { values["email"] = BatchValue.null }
            return values
        }
        _ = try otherContext.execute(BatchInsertRequest(entityName: "Employee", objects: dictionaries), fallback: fallback)
        #expect(try summary(fresh, n) == summary(ManagedObjectContext(coordinator: other), n))
        #expect(try count(fresh, "Employee", "email == nil") == 36)
    }

    @Test("a values handler's bad property list stops the request before any row; a bad value names its row", arguments: [
        (["name", "nickname"], "property 1 of the batch insert into Employee: Employee has no property \"nickname\""),
        (["name", "age", "name"], "property 2 of the batch insert into Employee: \"name\" is listed twice"),
    ])
    func valuesHandlerBadProperties(properties: [String], reason: String) throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        var calls = 0
        let request = BatchInsertRequest(entityName: "Employee", properties: properties) { _ in
            calls += 1
            return calls > 3
        }
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message == reason)
        #expect(calls == 0, "no row is made")
        #expect(try count(context, "Employee") == 0)
        #expect(try store.verify().isEmpty)
    }

    @Test("a value of the wrong kind, or set at a position the request does not list, stops the request at its row", arguments: [
        (1, BatchValue.attribute(.string("old")), "row 5 of the batch insert into Employee: Employee.age is Integer 16, but the value is string \"old\""),
        (2, .uniqueValue(.string("D1")), "row 5 of the batch insert into Employee: Employee.email is an attribute; it takes a value, not the unique value"),
        (3, .attribute(.integer(3)), "row 5 of the batch insert into Employee: a value is set at position 3, but the request lists 3 properties"),
        (-1, .attribute(.integer(3)), "row 5 of the batch insert into Employee: a value is set at position -1, but the request lists 3 properties"),
    ])
    func valuesHandlerBadValue(position: Int, value: BatchValue, reason: String) throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        var made = 0
        var request = BatchInsertRequest(entityName: "Employee", properties: ["name", "age", "email"]) { row in
            guard made < 20 else { return true }
            row[0] = .attribute(.string("E\(made)"))
            row[1] = .attribute(.integer(40))
            if made == 5 { row[position] = value }
            made += 1
            return false
        }
        request.chunkSize = 4
        let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
        #expect(error.message.hasPrefix(reason), "\(error.message)")
        #expect(error.message.hasSuffix("; nothing was inserted"), "\(error.message)")
        #expect(try count(context, "Employee") == 0)
        #expect(try store.verify().isEmpty)
    }

    @Test("an object handler fills a new object per row; its values, to-one and to-many become the row", arguments: [false, true])
    func objectHandlerRows(inMemory: Bool) throws {
        let folder = StoreFolder()
        let coordinator = try batchCoordinator(inMemory: inMemory, folder)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context, fallback: .throughObjects)
        let departments = try context.fetch(FetchRequest(entityName: "Department", predicate: try FetchPredicate(format: "name == 'D1'")))
        let projects = try context.fetch(FetchRequest(entityName: "Project", predicate: try FetchPredicate(format: "code IN {'P0', 'P3'}")))
        var n = 0
        var request = BatchInsertRequest(entityName: "Employee") { object in
            guard n < 2_500 else { return true }
            defer { n += 1 }
            object["name"] = "E\(n)"
            object["email"] = "e\(n)@example.com"
            object["salary"] = Double(n)
            // Related objects of the handler's own context, by ID.
            let own = object.managedObjectContext!
            object["department"] = own.object(with: departments[0].objectID)
            object["projects"] = projects.map { own.object(with: $0.objectID) }
            return false
        }
        request.chunkSize = 1_000
        request.resultType = .count
        #expect(try context.execute(request, fallback: .throughObjects).count == 2_500)
        #expect(try count(context, "Employee", "department.name == 'D1' AND age == 30") == 2_500, "the age's default applies")
        #expect(try count(context, "Employee", "ANY projects.code == 'P3'") == 2_500)
        #expect(try count(context, "Employee", "salary >= 2000") == 500)

        // A row the model refuses is named; an unsaved related object is refused.
        var m = 0
        let bad = BatchInsertRequest(entityName: "Employee") { object in
            defer { m += 1 }
            object["name"] = "F\(m)"
            if m == 3 { object["age"] = Int16(120) }
            return m == 5
        }
        let refused = try #require(throws: ManagedObjectContextError.self) { try context.execute(bad, fallback: .throughObjects) }
        #expect(refused.message.contains("row 3 of the batch insert into Employee") && refused.message.contains("above the maximum"), "\(refused)")
        let unsaved = BatchInsertRequest(entityName: "Employee") { object in
            object["name"] = "G"
            object["department"] = try! object.managedObjectContext!.insertNewObject(forEntityName: "Department")
            return false
        }
        let unsavedError = try #require(throws: ManagedObjectContextError.self) { try context.execute(unsaved, fallback: .throughObjects) }
        #expect(unsavedError.code == .objectNotFound && unsavedError.message.contains("row 0") && unsavedError.message.contains("unsaved"), "\(unsavedError)")
        #expect(try count(context, "Employee") == 2_500)
    }

    @Test("a batch that fills the map loses no row: chunks, arrays and updates run again after it grows; a handler's all-at-once insert stops clearly")
    func aFullMapLosesNoRows() throws {
        let folder = StoreFolder()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: batchModel)
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file("small.lmdb"), options: ["mapSize": "1048576"])
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        func rows(_ range: Range<Int>) -> [[String: BatchValue]] {
            range.map { n in ["name": .attribute(.string("E\(n) \(String(repeating: "x", count: 100))")), "email": .attribute(.string("e\(n)@example.com")),
                              "department": .uniqueValue(.string("D\(n % 3)"))] }
        }
        // All at once from a handler: the rows a first run read cannot be read again, so the request stops and writes
        // nothing.
        let all = rows(0..<20_000)
        var next = 0
        let fromHandler = BatchInsertRequest(entityName: "Employee") { row in
            guard next < all.count else { return true }
            row = all[next]
            next += 1
            return false
        }
        let whole = try #require(throws: ManagedObjectContextError.self) { try context.execute(fromHandler) }
        #expect(whole.code == .storeUnusable && whole.message.contains("commitsEachChunk"), "\(whole)")
        #expect(try count(context, "Employee") == 0)
        // All at once from an array: read again from the first row once the map has grown.
        var fromArray = BatchInsertRequest(entityName: "Employee", objects: all)
        fromArray.resultType = .objectIDs
        let written = try context.execute(fromArray)
        #expect(written.count == 20_000 && written.objectIDs?.count == 20_000 && written.isComplete)
        #expect(try count(context, "Employee") == 20_000)
        // A chunk at a time: a chunk whose transaction filled the map is written again whole once it has grown.
        var chunked = BatchInsertRequest(entityName: "Employee", objects: rows(20_000..<40_000))
        chunked.commitsEachChunk = true
        chunked.chunkSize = 2_000
        chunked.resultType = .count
        #expect(try context.execute(chunked).count == 20_000)
        #expect(try count(context, "Employee") == 40_000)
        // An update that fills the map runs again and counts each row once.
        // (Every row rewritten: the transaction holds a copy of every page it touches, so the map fills again.)
        var update = BatchUpdateRequest(entityName: "Employee", propertiesToUpdate: ["salary": try PredicateExpression(format: "age * 1000.5")])
        update.resultType = .count
        #expect(try context.execute(update).count == 40_000)
        #expect(try count(context, "Employee", "salary == 30015") == 40_000)
        #expect(try (coordinator.persistentStores[0] as! LMDBIncrementalStore).verify() == [])
    }

    @Test("a relationship kept in other rows is refused with what to do instead")
    func relationshipsKeptElsewhereAreRefused() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(batchModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        try seed(context)
        let e = ManagedObjectID(entityName: "Employee", storeIdentifier: store.identifier, referenceObject: .integer(1))
        let error = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchInsertRequest(entityName: "Department", objects: [["name": "D9", "employees": .objects([e])]]))
        }
        #expect(error.code == .unsupportedRequest)
        #expect(error.message.contains("cannot set employees") && error.message.contains("fallback: .throughObjects"), "\(error.message)")
        #expect(try count(context, "Department") == 3)
    }

    @Test("a to-one by unique value may point at a row later in the batch; one no row gives stops it, naming the row")
    func referencesToLaterRows() throws {
        let people = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("email", .string)
                RelationshipDescription("manager", destination: "Person", inverse: "reports", isOptional: true, deleteRule: .nullify)
                RelationshipDescription("reports", destination: "Person", inverse: "manager", toMany: true)
                UniquenessConstraint("email")
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(people)
        let context = ManagedObjectContext(coordinator: coordinator)
        func person(_ email: String, _ manager: String?) -> [String: BatchValue] {
            var row: [String: BatchValue] = ["email": .attribute(.string(email))]
            if let manager { row["manager"] = .uniqueValue(.string(manager)) }
            return row
        }
        func managers(_ emails: [String]) throws -> [String: String] {
            let reader = ManagedObjectContext(coordinator: coordinator)
            let found = try reader.fetch(FetchRequest(entityName: "Person"))
            return Dictionary(uniqueKeysWithValues: found.compactMap { object in
                guard let email = object.value(forKey: "email") as? String, emails.contains(email) else { return nil }
                return (email, (object.value(forKey: "manager") as? ManagedObject)?.value(forKey: "email") as? String ?? "-")
            })
        }

        // Managers listed after their reports, within a chunk and across chunks of one transaction, and one before.
        var request = BatchInsertRequest(entityName: "Person", objects: [
            person("a", "d"), person("b", "a"), person("c", "e"), person("d", nil), person("e", "d"),
        ])
        request.chunkSize = 2
        #expect(try context.execute(request).isComplete)
        let firstManagers = try managers(["a", "b", "c", "d", "e"])
        #expect(firstManagers == ["a": "d", "b": "a", "c": "e", "d": "-", "e": "d"], "\(firstManagers)")
        let d = try context.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "email == 'd'")))[0]
        #expect(Set(d.relatedObjects(forKey: "reports").map { $0.value(forKey: "email") as? String }) == ["a", "e"])
        #expect(try count(context, "Person", "manager.email == 'd'") == 2)
        #expect(try store.verify().isEmpty)

        // A manager no row of the request gives: the request stops at that row and writes nothing.
        let error = try refusedInsert(context, [person("f", "g"), person("h", "zz"), person("g", nil)], chunkSize: 1)
        #expect(error.code == .objectNotFound)
        #expect(error.message.contains("row 1") && error.message.contains("whose email is \"zz\", and there is none in the store or among the batch's rows"),
                "\(error.message)")
        #expect(try count(context, "Person") == 5)

        // Each chunk committed: a manager later in the chunk is found; one in a later chunk is not, and the chunks
        // before stay.
        let chunkError = try refusedInsert(context, [person("i", "j"), person("j", nil), person("k", "m"), person("l", nil), person("m", nil)],
                                           chunkSize: 2, commitsEachChunk: true)
        #expect(chunkError.message.contains("row 2") && chunkError.message.contains("up to the end of its chunk"), "\(chunkError.message)")
        #expect(try managers(["i", "j"]) == ["i": "j", "j": "-"])
        #expect(try count(context, "Person") == 7)
        #expect(try store.verify().isEmpty)
    }

    @Test("a to-many member by unique value may be a row later in the batch, in order; one no row gives stops it, naming the row")
    func membersFromLaterRows() throws {
        let people = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("email", .string)
                RelationshipDescription("follows", destination: "Person", inverse: "followers", toMany: true)
                RelationshipDescription("followers", destination: "Person", inverse: "follows", toMany: true)
                RelationshipDescription("favorites", destination: "Person", inverse: "favoredBy", ordered: true)
                RelationshipDescription("favoredBy", destination: "Person", inverse: "favorites", toMany: true)
                UniquenessConstraint("email")
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(people)
        let context = ManagedObjectContext(coordinator: coordinator)
        func person(_ email: String, follows: [String] = [], favorites: [String] = []) -> [String: BatchValue] {
            ["email": .attribute(.string(email)),
             "follows": .uniqueValues(follows.map { .string($0) }), "favorites": .uniqueValues(favorites.map { .string($0) })]
        }
        func emails(of email: String, _ key: String) throws -> [String] {
            let reader = ManagedObjectContext(coordinator: coordinator)
            let found = try reader.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "email == %@", email)))
            return try #require(found.first).relatedObjects(forKey: key).map { $0.value(forKey: "email") as? String ?? "?" }
        }

        // Members listed before and after their row, within a chunk and across chunks of one transaction; an ordered
        // to-many keeps the order given whichever of its members came later.
        var request = BatchInsertRequest(entityName: "Person", objects: [
            person("a", follows: ["c", "b"]), person("b", follows: ["a"], favorites: ["e", "a", "d"]),
            person("c", follows: ["e"]), person("d"), person("e", follows: ["a", "b", "c", "d"]),
        ])
        request.chunkSize = 2
        #expect(try context.execute(request).isComplete)
        #expect(try Set(emails(of: "a", "follows")) == ["b", "c"])
        #expect(try Set(emails(of: "a", "followers")) == ["b", "e"])
        #expect(try Set(emails(of: "e", "followers")) == ["c"])
        #expect(try emails(of: "b", "favorites") == ["e", "a", "d"])
        #expect(try Set(emails(of: "d", "favoredBy")) == ["b"])
        #expect(try count(context, "Person", "ANY follows.email == 'a'") == 2)
        #expect(try count(context, "Person", "ANY followers.email == 'e'") == 4)
        #expect(try store.verify().isEmpty)

        // A member no row of the request gives: the request stops at that row and writes nothing.
        let error = try refusedInsert(context, [person("f", follows: ["g"]), person("h", follows: ["g", "zz"]), person("g")], chunkSize: 1)
        #expect(error.code == .objectNotFound)
        #expect(error.message.contains("row 1") && error.message.contains("whose email is \"zz\", and there is none in the store or among the batch's rows"),
                "\(error.message)")
        #expect(try count(context, "Person") == 5)
        #expect(try count(context, "Person", "ANY followers.email == 'h'") == 0)

        // Each chunk committed: a member later in the chunk is found; one in a later chunk is not, and the chunks
        // before stay with their links.
        let chunkError = try refusedInsert(context, [person("i", follows: ["j"]), person("j"), person("k", follows: ["m"]), person("l"), person("m")],
                                           chunkSize: 2, commitsEachChunk: true)
        #expect(chunkError.message.contains("row 2") && chunkError.message.contains("up to the end of its chunk"), "\(chunkError.message)")
        #expect(try emails(of: "i", "follows") == ["j"])
        #expect(try emails(of: "j", "followers") == ["i"])
        #expect(try count(context, "Person") == 7)
        #expect(try store.verify().isEmpty)
    }

    @Test("a store without batch requests fails clearly, or runs them through objects when asked")
    func storesWithoutBatchesFallBack() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: batchModel)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        let context = ManagedObjectContext(coordinator: coordinator)
        let error = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchInsertRequest(entityName: "Department", objects: [["name": "D0"]]))
        }
        #expect(error.code == .unsupportedRequest && error.message.contains("fallback: .throughObjects"), "\(error.message)")
        #expect(try count(context, "Department") == 0)
        try seed(context, fallback: .throughObjects)
        #expect(try count(context, "Department") == 3)
        // A unique violation through objects is the save's error, naming the rows' range.
        let duplicate = try #require(throws: ManagedObjectContextError.self) {
            try context.execute(BatchInsertRequest(entityName: "Project", objects: [["code": "P1"]]), fallback: .throughObjects)
        }
        #expect(duplicate.message.contains("rows 0..<1"), "\(duplicate.message)")
    }

    @Test("batch updates and deletes change the store, honour delete rules, and merge into live contexts", arguments: [false, true])
    func updatesAndDeletes(inMemory: Bool) throws {
        let folder = StoreFolder()
        let coordinator = try batchCoordinator(inMemory: inMemory, folder)
        let writer = ManagedObjectContext(coordinator: coordinator)
        try seed(writer, fallback: .throughObjects)
        _ = try writer.execute(BatchInsertRequest(entityName: "Employee", objects: (0..<60).map(employee)), fallback: .throughObjects)
        // A live context holding an employee that will change and one that will go.
        let live = ManagedObjectContext(coordinator: coordinator)
        let e40 = try live.fetch(FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name == 'E40'")))[0]
        let e1 = try live.fetch(FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name == 'E1'")))[0]
        let e3 = try live.fetch(FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name == 'E3'")))[0]
        #expect(e40.value(forKey: "salary") as? Double == 400)

        var update = BatchUpdateRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age >= 50"),
                                        propertiesToUpdate: ["salary": try PredicateExpression(format: "salary * 2 + 1"), "email": .constant(.null)])
        update.resultType = .objectIDs
        let updated = try writer.execute(update, fallback: .throughObjects)
        #expect(updated.count == 28 && updated.objectIDs?.count == 28)
        #expect(e40.value(forKey: "salary") as? Double == 400, "a live context keeps what it loaded until it merges")
        ManagedObjectContext.mergeChanges(fromRemoteContextSave: ContextChanges(updated: Set(updated.objectIDs!)), into: [live])
        #expect(e40.value(forKey: "salary") as? Double == 801)
        #expect(e40.value(forKey: "email") == nil)
        // A value that breaks a rule stops the update, naming the object; nothing changes.
        let tooOld = try #require(throws: ManagedObjectContextError.self) {
            try writer.execute(BatchUpdateRequest(entityName: "Employee", propertiesToUpdate: ["age": try PredicateExpression(format: "age + 50")]),
                               fallback: .throughObjects)
        }
        #expect(tooOld.code == .validation, "\(tooOld)")
        #expect(try count(writer, "Employee", "age > 99") == 0)
        let fractional = try #require(throws: ManagedObjectContextError.self) {
            try writer.execute(BatchUpdateRequest(entityName: "Employee", propertiesToUpdate: ["age": try PredicateExpression(format: "age / 4")]),
                               fallback: .throughObjects)
        }
        #expect(fractional.code == .wrongValueType && fractional.message.contains("age (Integer 16)"), "\(fractional)")

        // Deleting department D1 cascades to its 20 employees, who leave their projects' members; the result counts
        // every object deleted.
        var delete = BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Department", predicate: try FetchPredicate(format: "name == 'D1'")))
        delete.resultType = .count
        #expect(try writer.execute(delete, fallback: .throughObjects).count == 21)
        let reader = ManagedObjectContext(coordinator: coordinator)
        #expect(try count(reader, "Employee") == 40)
        #expect(try count(reader, "Employee", "department == nil") == 0)
        let p1 = try reader.fetch(FetchRequest(entityName: "Project", predicate: try FetchPredicate(format: "code == 'P1'")))[0]
        #expect(p1.relatedObjects(forKey: "members").count == 20)
        ManagedObjectContext.mergeChanges(fromRemoteContextSave: ContextChanges(deleted: [e1.objectID]), into: [live])
        #expect(e1.managedObjectContext == nil && e1.isDeleted)
        // By ID: gone ones are passed over.
        var byID = BatchDeleteRequest(objectIDs: [e3.objectID, e1.objectID])
        byID.resultType = .count
        #expect(try writer.execute(byID, fallback: .throughObjects).count == 1)
        #expect(try count(reader, "Employee") == 39)
    }
}
