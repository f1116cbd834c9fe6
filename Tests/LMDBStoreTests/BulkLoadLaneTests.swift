import Foundation
import LMDB
@_spi(Benchmarks) @testable import LMDBStore
@testable import ObjectGraph
import Testing

/// A one-transaction batch insert hands each chunk's entries for the tables it bulk-loads to a second thread, which
/// makes, sorts and keeps them while the transaction's thread goes on. The tables must come out as the single-thread
/// way writes them, byte for byte; a request that fails or stops meanwhile must write nothing and leave no thread.
@Suite("A second thread for a bulk load's entries")
struct BulkLoadLaneTests {
    /// Every pair of each of the `entity` tables a batch insert writes (rows, index, uniqueness, to-one and link
    /// tables, and the inverse links), by table name.
    private static func tables(of store: LMDBIncrementalStore, entity: String = "Employee") throws -> [String: [[UInt8]]] {
        let (environment, tables) = try store.batchInsertTablesForBenchmark(entity: entity)
        return try environment.read { transaction in
            var contents: [String: [[UInt8]]] = [:]
            for (name, table) in tables {
                var pairs: [[UInt8]] = []
                try table.withCursor(in: transaction) { cursor in
                    var entry = try cursor.first()
                    while let current = entry {
                        pairs.append(Array(current.key) + [0xFF] + Array(current.value))
                        entry = try cursor.next()
                    }
                }
                contents[name] = pairs
            }
            return contents
        }
    }

    /// Runs `load` on a new store over `model` with the second thread and on another without it, expects the
    /// `entity` tables the two wrote to be the same, byte for byte, and returns them.
    private static func sameTablesWithAndWithoutLane(_ model: ManagedObjectModel, entity: String,
                                                     _ load: (ManagedObjectContext, LMDBIncrementalStore) throws -> Void) throws -> [String: [[UInt8]]] {
        let folder = StoreFolder()
        var written: [[String: [[UInt8]]]] = []
        for (name, usesLane) in [("lane.lmdb", true), ("alone.lmdb", false)] {
            try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(usesLane) {
                let (coordinator, store) = try folder.coordinator(model, name)
                try load(ManagedObjectContext(coordinator: coordinator), store)
                #expect(try store.verify().isEmpty)
                written.append(try tables(of: store, entity: entity))
            }
        }
        let lane = written[0], alone = written[1]
        #expect(lane.keys.sorted() == alone.keys.sorted())
        for (table, pairs) in alone {
            let same = lane[table] == pairs
            #expect(same, "\(table): \(lane[table]?.count ?? 0) pairs with the lane, \(pairs.count) without")
        }
        return alone
    }

    /// Employee `n`: a unique email (every seventh has none), a department by unique name (every eleventh none),
    /// zero to three projects by unique code.
    private static func employee(_ n: Int) -> [String: BatchValue] {
        var row: [String: BatchValue] = ["name": .attribute(.string("E\(n)")), "age": .attribute(.integer(Int64(18 + (n * 7919) % 70))),
                                         "salary": .attribute(.double(Double((n * 104_729) % 90_000)))]
        if n % 7 != 0 { row["email"] = .attribute(.string("e\(n)@example.com")) }
        if n % 11 != 0 { row["department"] = .uniqueValue(.string("D\(n % 5)")) }
        row["projects"] = .uniqueValues((0..<(n % 4)).map { .string("P\((n + $0 * 3) % 7)") })
        return row
    }

    @Test("a bulk load whose entries a second thread makes and sorts writes every table as the single-thread way does, byte for byte")
    func theLaneWritesWhatOneThreadWrites() throws {
        let alone = try Self.sameTablesWithAndWithoutLane(batchModel, entity: "Employee") { context, _ in
            try seed(context, departments: 5, projects: 7)
            var request = BatchInsertRequest(entityName: "Employee", objects: (0..<4_000).map(Self.employee))
            request.chunkSize = 300
            #expect(try context.execute(request).count == 4_000)
        }
        // Every kind of table held something: the rows, the age index and the to-one (the lane's), the email
        // constraint (this thread's), the links both ways (the lane's).
        #expect(alone.values.filter { !$0.isEmpty }.count >= 5, "\(alone.mapValues(\.count))")
    }

    /// People who point at one another: a mentor (a to-one whose inverse is a to-many), friends (a many-to-many with
    /// itself) and a pet of another entity; an index on age and no uniqueness constraint, so that every entry of a
    /// bulk load is made on the second thread, which also encodes the rows of each full chunk.
    private static let peopleModel: ManagedObjectModel = try! ManagedObjectModel {
        EntityDescription("Person") {
            AttributeDescription("name", .string)
            AttributeDescription("age", .integer16)
            RelationshipDescription("mentor", destination: "Person", inverse: "mentees")
            RelationshipDescription("mentees", destination: "Person", inverse: "mentor", toMany: true)
            RelationshipDescription("friends", destination: "Person", inverse: "friendOf", toMany: true)
            RelationshipDescription("friendOf", destination: "Person", inverse: "friends", toMany: true)
            RelationshipDescription("pet", destination: "Pet", inverse: "owners")
            FetchIndexDescription("byAge", properties: ["age"])
        }
        EntityDescription("Pet") {
            AttributeDescription("name", .string)
            RelationshipDescription("owners", destination: "Person", inverse: "pet", toMany: true)
        }
    }

    /// A request for `count` people by position, in chunks of 300, each pointing by object ID at people before it
    /// in the same batch — in its own chunk or in one before — unless `values` says otherwise for a row.
    private static func people(_ count: Int, in store: LMDBIncrementalStore,
                               values: @escaping (Int, inout BatchRowValues) -> Void = { _, _ in }) -> BatchInsertRequest {
        func person(_ key: Int) -> ManagedObjectID {
            ManagedObjectID(entityName: "Person", storeIdentifier: store.identifier, referenceObject: .integer(Int64(key)))
        }
        var next = 0
        var request = BatchInsertRequest(entityName: "Person", properties: ["name", "age", "mentor", "friends", "pet"]) { row in
            guard next < count else { return true }
            let n = next, key = n + 1  // the store is new: row n gets key n + 1
            row[0] = .attribute(.string("P\(n)"))
            row[1] = .attribute(.integer(Int64(20 + (n * 7919) % 50)))
            if n > 0 { row[2] = .object(person(key / 2)) }
            row[3] = .objects([key - 1, key - 299, key - 640].filter { $0 >= 1 }.map(person))
            if n % 5 == 0 { row[4] = .object(ManagedObjectID(entityName: "Pet", storeIdentifier: store.identifier, referenceObject: .integer(Int64(1 + n % 3)))) }
            values(n, &row)
            next += 1
            return false
        }
        request.chunkSize = 300
        return request
    }

    @Test("rows pointing by object ID at rows before them in the same batch find them while the second thread still holds their chunk")
    func objectIDsOfRowsTheLaneHolds() throws {
        _ = try Self.sameTablesWithAndWithoutLane(Self.peopleModel, entity: "Person") { context, store in
            _ = try context.execute(BatchInsertRequest(entityName: "Pet", objects: (0..<3).map { ["name": .attribute(.string("Pet \($0)"))] }))
            #expect(try context.execute(Self.people(2_500, in: store)).count == 2_500)
            // Person 1 001 (key 1 002) has mentor 501 and friends 1 001, 703 and 362 (by key).
            let person = try #require(try context.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "name == 'P1001'"))).first)
            let mentor = try #require(person.value(forKey: "mentor") as? ManagedObject)
            #expect(mentor.value(forKey: "name") as? String == "P500")
            let friends = person.relatedObjects(forKey: "friends").compactMap { $0.value(forKey: "name") as? String }.sorted()
            #expect(friends == ["P1000", "P361", "P702"])
            #expect(try context.count(for: FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "mentor.name == 'P500'"))) == 2)
        }
    }

    @Test("a row pointing by object ID at a row not written yet, or at one of the batch's rows for another entity, is refused the same way with the second thread")
    func objectIDsOfRowsNotWritten() throws {
        for usesLane in [true, false] {
            try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(usesLane) {
                let folder = StoreFolder()
                let (coordinator, store) = try folder.coordinator(Self.peopleModel)
                let context = ManagedObjectContext(coordinator: coordinator)
                _ = try context.execute(BatchInsertRequest(entityName: "Pet", objects: (0..<3).map { ["name": .attribute(.string("Pet \($0)"))] }))
                func person(_ key: Int) -> BatchValue {
                    .object(ManagedObjectID(entityName: "Person", storeIdentifier: store.identifier, referenceObject: .integer(Int64(key))))
                }
                // Row 1 000 (key 1 001, in the fourth chunk) names key 1 001 — itself, not written yet — as mentor.
                let ahead = try #require(throws: ManagedObjectContextError.self) {
                    try context.execute(Self.people(2_000, in: store) { n, row in if n == 1_000 { row[2] = person(1_001) } })
                }
                #expect(ahead.code == .objectNotFound && ahead.message.contains("row 1000") && ahead.message.contains("not in the store"), "\(ahead.message)")
                // Row 950 names person 900 (written, in the lane's hands) as its pet.
                let notAPet = try #require(throws: ManagedObjectContextError.self) {
                    try context.execute(Self.people(2_000, in: store) { n, row in if n == 950 { row[4] = person(901) } })
                }
                #expect(notAPet.code == .wrongValueType && notAPet.message.contains("row 950"), "\(notAPet.message)")
                #expect(try context.count(for: FetchRequest(entityName: "Person")) == 0)
                #expect(try store.verify().isEmpty)
            }
        }
    }

    @Test("the first chunks read in parts for the second thread still report progress a whole chunk at a time", arguments: [true, false])
    func progressByWholeChunks(usesLane: Bool) throws {
        try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(usesLane) {
            let folder = StoreFolder()
            let (coordinator, store) = try folder.coordinator(Self.peopleModel)
            let context = ManagedObjectContext(coordinator: coordinator)
            _ = try context.execute(BatchInsertRequest(entityName: "Pet", objects: (0..<3).map { ["name": .attribute(.string("Pet \($0)"))] }))
            var request = Self.people(1_000, in: store)
            var written: [Int] = []
            request.progressHandler = { progress in
                written.append(progress.written)
                return true
            }
            #expect(try context.execute(request).count == 1_000)
            #expect(written == [300, 600, 900, 1_000])
            #expect(try context.count(for: FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "mentor.name == 'P10'"))) == 2)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test("a request that fails while the second thread holds a chunk writes nothing, names the row, and the next request runs")
    func aFailureWhileTheLaneWorks() throws {
        try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(true) {
            let folder = StoreFolder()
            let (coordinator, store) = try folder.coordinator(batchModel, "failing.lmdb")
            let context = ManagedObjectContext(coordinator: coordinator)
            try seed(context, departments: 5, projects: 7)
            // Row 2 500 (in the ninth chunk of 300) takes row 1's email.
            var rows = (0..<3_000).map(Self.employee)
            rows[2_500]["email"] = .attribute(.string("e1@example.com"))
            var request = BatchInsertRequest(entityName: "Employee", objects: rows)
            request.chunkSize = 300
            let error = try #require(throws: ManagedObjectContextError.self) { try context.execute(request) }
            #expect(error.code == .constraintViolation)
            #expect(error.message.contains("2500"), "\(error.message)")
            #expect(try context.count(for: FetchRequest(entityName: "Employee")) == 0)
            #expect(try store.verify().isEmpty)

            // Stopped by its progress handler after three chunks: nothing either.
            var stopped = BatchInsertRequest(entityName: "Employee", objects: (0..<3_000).map(Self.employee))
            stopped.chunkSize = 300
            var chunks = 0
            stopped.progressHandler = { _ in
                chunks += 1
                return chunks < 3
            }
            let result = try context.execute(stopped)
            #expect(!result.isComplete && result.count == 0, "\(result)")
            #expect(try context.count(for: FetchRequest(entityName: "Employee")) == 0)

            // The same store takes the whole request afterwards.
            var whole = BatchInsertRequest(entityName: "Employee", objects: (0..<3_000).map(Self.employee))
            whole.chunkSize = 300
            #expect(try context.execute(whole).count == 3_000)
            #expect(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "ANY projects.code == 'P3'"))) > 0)
            #expect(try store.verify().isEmpty)
        }
    }

    @Test("entries the runs cannot take are left for the transaction's thread, which puts them")
    func entriesOfATableNotHeldAreLeft() throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("left.lmdb").path)
        let held = try environment.openDatabase(named: "held", options: [.dupSort, .dupFixed])
        let filled = try environment.openDatabase(named: "filled", options: [.dupSort, .dupFixed])
        try environment.write { transaction in
            try filled.put([0, 0], forKey: [9], in: transaction)
            let runs = AppendRuns(memoryBudget: 1 << 20, spillFolder: folder.url)
            #expect(try runs.holds(held, in: transaction))
            #expect(try !runs.holds(filled, in: transaction))
            var updates = IndexUpdates(sortingEntries: true, runs: runs)
            for n in (0..<200).reversed() {
                let key: [UInt8] = [UInt8(n % 13)], value: [UInt8] = [UInt8(n >> 8), UInt8(n & 0xFF)]
                key.withUnsafeBytes { key in value.withUnsafeBytes { value in
                    updates.putSorted(value, forKey: key, into: held, row: n)
                    updates.putSorted(value, forKey: key, into: filled, row: n)
                } }
            }
            // The second thread's part: the held table's entries go to its runs, the other's stay.
            let lane = BulkLoadLane<IndexUpdates>()
            lane.submit { [updates] in
                var moved = updates
                try moved.keepHeldInRuns()
                return moved
            }
            var left = try #require(try lane.finish())
            lane.close()
            #expect(try held.entryCount(in: transaction) == 0 && filled.entryCount(in: transaction) == 1)
            try left.putPending(in: transaction) { row, _ in ManagedObjectContextError(.constraintViolation, message: "row \(row)") }
            #expect(try filled.entryCount(in: transaction) == 201)
            #expect(try held.entryCount(in: transaction) == 0, "the held table's entries wait in the runs")
            try runs.appendAll(in: transaction)
            #expect(try held.entryCount(in: transaction) == 200)
            #expect(runs.putInPlace == 0)
        }
        #expect(try environment.checkPages().isEmpty)
    }

    @Test("a lane runs its jobs one at a time, passes on a job's error, and has nothing to finish when idle")
    func aLaneHandsBackOutputAndErrors() throws {
        let lane = BulkLoadLane<Int>()
        #expect(try lane.finish() == nil)
        lane.submit { 41 + 1 }
        #expect(try lane.finish() == 42)
        #expect(try lane.finish() == nil, "the output is taken once")
        struct Broken: Error, Equatable {}
        lane.submit { throw Broken() }
        #expect(throws: Broken.self) { try lane.finish() }
        // A job whose output no one takes is waited for by close.
        let done = Flag()
        lane.submit {
            Thread.sleep(forTimeInterval: 0.05)
            done.set()
            return 0
        }
        lane.close()
        #expect(done.isSet, "close waits for the running job")
    }

    /// A flag one thread sets and another reads, behind a lock.
    private final class Flag: @unchecked Sendable {
        private let lock = NSLock()
        private var value = false
        func set() { lock.withLock { value = true } }
        var isSet: Bool { lock.withLock { value } }
    }
}
