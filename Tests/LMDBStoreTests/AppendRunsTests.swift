import Foundation
import LMDB
@testable import LMDBStore
@testable import ObjectGraph
import Testing

/// A one-transaction batch insert keeps the entries of tables empty when it began in sorted runs and appends them,
/// merged, at its end. An entry appended out of order would fall back to a put in place, so only reading the tables
/// back (every pair once, nothing else) and their page counts tell a wrong merge from a right one.
@Suite("Runs of entries appended at the end of a batch insert")
struct AppendRunsTests {
    /// Random pairs in `runs` sorted runs (each in LMDB's order, some pairs repeated within a run and across runs),
    /// and the set of them a table should end with, in order.
    private static func runs(_ count: Int, runs runCount: Int, keyLength: ClosedRange<Int>, valueLength: Int, keys: Int, seed: UInt64)
        -> (runs: [[(key: [UInt8], value: [UInt8])]], expected: [(key: [UInt8], value: [UInt8])]) {
        var state = seed
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(state >> 33) % bound
        }
        func precedes(_ lhs: (key: [UInt8], value: [UInt8]), _ rhs: (key: [UInt8], value: [UInt8])) -> Bool {
            lhs.key != rhs.key ? lhs.key.lexicographicallyPrecedes(rhs.key) : lhs.value.lexicographicallyPrecedes(rhs.value)
        }
        // Keys drawn from a small set of stems, so runs share keys and keys share prefixes.
        let stems = (0..<keys).map { _ in (0..<(keyLength.lowerBound + next(keyLength.count))).map { _ in UInt8(next(4)) } }
        var all: [(key: [UInt8], value: [UInt8])] = []
        for _ in 0..<count {
            let pair = (key: stems[next(stems.count)], value: (0..<valueLength).map { _ in UInt8(next(256)) })
            all.append(pair)
            if next(20) == 0 { all.append(pair) }  // the same pair twice (a member listed twice)
        }
        var runs = Array(repeating: [(key: [UInt8], value: [UInt8])](), count: runCount)
        for pair in all { runs[next(runCount)].append(pair) }
        var expected: [(key: [UInt8], value: [UInt8])] = []
        for pair in all.sorted(by: precedes) where expected.last.map({ $0.key != pair.key || $0.value != pair.value }) ?? true { expected.append(pair) }
        return (runs.map { $0.sorted(by: precedes) }, expected)
    }

    /// Every pair of `table`, in order.
    private static func pairs(of table: Database, in environment: Environment) throws -> [(key: [UInt8], value: [UInt8])] {
        try environment.read { transaction in
            var pairs: [(key: [UInt8], value: [UInt8])] = []
            try table.withCursor(in: transaction) { cursor in
                var entry = try cursor.first()
                while let current = entry {
                    pairs.append((Array(current.key), Array(current.value)))
                    entry = try cursor.next()
                }
            }
            return pairs
        }
    }

    /// Adds `run` to `runs` for `table`.
    private static func add(_ run: [(key: [UInt8], value: [UInt8])], to table: Database, _ runs: AppendRuns, _ transaction: any KeyValueTransaction) throws {
        var bytes: [UInt8] = []
        var ranges: [(key: Range<Int>, value: Range<Int>)] = []
        for pair in run {
            let keyStart = bytes.count
            bytes += pair.key
            ranges.append((keyStart..<bytes.count, bytes.count..<(bytes.count + pair.value.count)))
            bytes += pair.value
        }
        let kept = try bytes.withUnsafeBytes { bytes in
            try runs.add(table, count: run.count, in: transaction) { index in
                (UnsafeRawBufferPointer(rebasing: bytes[ranges[index].key]), UnsafeRawBufferPointer(rebasing: bytes[ranges[index].value]))
            }
        }
        #expect(kept, "a held table's run is kept")
    }

    @Test("runs that share keys and repeat pairs come out merged, every pair once, in dupSort and fixed-size tables",
          arguments: [(DatabaseOptions([.dupSort, .dupFixed]), 1...2), (DatabaseOptions.dupSort, 1...30)])
    func runsMergeIntoOneTable(options: DatabaseOptions, keyLength: ClosedRange<Int>) throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("runs.lmdb").path)
        let table = try environment.openDatabase(named: "table", options: options)
        let (runs, expected) = Self.runs(20_000, runs: 37, keyLength: keyLength, valueLength: 10, keys: keyLength.upperBound == 30 ? 5_000 : 40, seed: 7)
        try environment.write { transaction in
            let held = AppendRuns(memoryBudget: 1 << 30, spillFolder: folder.url)
            #expect(try held.holds(table, in: transaction))
            for run in runs { try Self.add(run, to: table, held, transaction) }
            #expect(try table.entryCount(in: transaction) == 0, "the entries wait for appendAll")
            try held.appendAll(in: transaction)
            #expect(try !held.holds(table, in: transaction), "nothing is held once the runs are put")
            #expect(held.putInPlace == 0, "every entry was appended")
        }
        let stored = try Self.pairs(of: table, in: environment)
        #expect(stored.count == expected.count)
        #expect(stored.elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value })
        #expect(try environment.checkPages().isEmpty)
    }

    @Test("past its memory budget runs go to a file the folder does not keep, and come back merged; a table written directly has its runs put first")
    func spillAndRelease() throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("runs.lmdb").path)
        let first = try environment.openDatabase(named: "first", options: [.dupSort, .dupFixed])
        let second = try environment.openDatabase(named: "second", options: [.dupSort])
        let plain = try environment.openDatabase(named: "plain")
        let filled = try environment.openDatabase(named: "filled", options: [.dupSort])
        let (runs, expected) = Self.runs(3_000, runs: 6, keyLength: 2...2, valueLength: 10, keys: 50, seed: 11)
        let (secondRuns, secondExpected) = Self.runs(2_000, runs: 5, keyLength: 1...12, valueLength: 10, keys: 300, seed: 13)
        try environment.write { transaction in
            try filled.put([1], forKey: [1], in: transaction)
            // A budget a run and a half fill: every second run sends those in memory to the file.
            let held = AppendRuns(memoryBudget: runs[0].count * 24, spillFolder: folder.url)
            #expect(try !held.holds(plain, in: transaction), "a table without duplicates is not held")
            #expect(try !held.holds(filled, in: transaction), "a table holding entries is not held")
            #expect(try held.holds(first, in: transaction) && held.holds(second, in: transaction))
            for index in 0..<max(runs.count, secondRuns.count) {
                if index < runs.count { try Self.add(runs[index], to: first, held, transaction) }
                if index < secondRuns.count { try Self.add(secondRuns[index], to: second, held, transaction) }
            }
            #expect(held.spilledBytes > 0)
            let left = try FileManager.default.contentsOfDirectory(atPath: folder.url.path).filter { $0.hasPrefix(".lmdbstore-runs-") }
            #expect(left.isEmpty, "the spill file is removed from the folder as soon as it is made: \(left)")
            // Written directly (a checked entry, say): its runs — some from the file — go in first, and it is not
            // held again.
            try held.release(second, in: transaction)
            #expect(try second.entryCount(in: transaction) == secondExpected.count)
            #expect(try !held.holds(second, in: transaction))
            try held.appendAll(in: transaction)
            #expect(held.putInPlace == 0, "every entry was appended")
        }
        for (table, expected) in [(first, expected), (second, secondExpected)] {
            let stored = try Self.pairs(of: table, in: environment)
            #expect(stored.elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value })
        }
        #expect(try environment.checkPages().isEmpty)
    }

    @Test("merged ahead on a second thread, tables in memory come out as merged here; a table that went to the file is merged here")
    func tablesMergedAhead() throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("ahead.lmdb").path)
        let fixed = try environment.openDatabase(named: "fixed", options: [.dupSort, .dupFixed])
        let sorted = try environment.openDatabase(named: "sorted", options: [.dupSort])
        let spilled = try environment.openDatabase(named: "spilled", options: [.dupSort])
        let third = try environment.openDatabase(named: "third", options: [.dupSort, .dupFixed])
        let cases = [(fixed, Self.runs(8_000, runs: 9, keyLength: 1...2, valueLength: 10, keys: 40, seed: 17)),
                     (spilled, Self.runs(3_000, runs: 4, keyLength: 1...12, valueLength: 10, keys: 300, seed: 19)),
                     (sorted, Self.runs(6_000, runs: 7, keyLength: 1...30, valueLength: 10, keys: 2_000, seed: 23)),
                     (third, Self.runs(2_000, runs: 3, keyLength: 2...2, valueLength: 10, keys: 30, seed: 29))]
        try environment.write { transaction in
            let held = AppendRuns(memoryBudget: 1 << 30, spillFolder: folder.url)
            for (table, (runs, _)) in cases {
                #expect(try held.holds(table, in: transaction))
                for run in runs { try Self.add(run, to: table, held, transaction) }
            }
            #expect(held.spilledBytes == 0)
            try held.appendAll(in: transaction, mergingAhead: true)
            #expect(held.putInPlace == 0, "every entry was appended")
        }
        for (table, (_, expected)) in cases {
            let stored = try Self.pairs(of: table, in: environment)
            #expect(stored.count == expected.count)
            #expect(stored.elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value })
        }
        #expect(try environment.checkPages().isEmpty)

        // With a table's runs in the file, that table is merged on this thread and the others ahead.
        let again = StoreFolder()
        let second = try Environment.open(at: again.file("ahead.lmdb").path)
        let tables = try ["a", "b", "c"].map { try second.openDatabase(named: $0, options: [.dupSort, .dupFixed]) }
        // The first table's runs pass the budget and go to the file; the other two, smaller, stay in memory.
        let data = (0..<3).map { Self.runs($0 == 0 ? 4_000 : 500, runs: 3, keyLength: 2...2, valueLength: 10, keys: 30, seed: 31 + UInt64($0)) }
        try second.write { transaction in
            let held = AppendRuns(memoryBudget: data[0].runs.reduce(0) { $0 + $1.count * 16 } - 1, spillFolder: again.url)
            for table in tables { #expect(try held.holds(table, in: transaction)) }
            for run in data[0].runs { try Self.add(run, to: tables[0], held, transaction) }
            let spilledBefore = held.spilledBytes
            for index in 1...2 { for run in data[index].runs { try Self.add(run, to: tables[index], held, transaction) } }
            #expect(spilledBefore > 0 && held.spilledBytes == spilledBefore, "only the first table's runs went to the file")
            try held.appendAll(in: transaction, mergingAhead: true)
            #expect(held.putInPlace == 0)
        }
        for (table, (_, expected)) in zip(tables, data) {
            #expect(try Self.pairs(of: table, in: second).elementsEqual(expected) { $0.key == $1.key && $0.value == $1.value })
        }
    }

    @Test("an entry longer than a run keeps is not held: the table's runs go in, and the caller puts it as before")
    func anEntryTooLongForARun() throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("runs.lmdb").path)
        let table = try environment.openDatabase(named: "table", options: [.dupSort])
        try environment.write { transaction in
            let held = AppendRuns(memoryBudget: 1 << 20, spillFolder: folder.url)
            #expect(try held.holds(table, in: transaction))
            try Self.add([(key: [1], value: [2, 3])], to: table, held, transaction)
            let long = [UInt8](repeating: 9, count: 70_000)
            let kept = try long.withUnsafeBytes { value in
                try [UInt8]([4]).withUnsafeBytes { key in try held.add(table, count: 1, in: transaction) { _ in (key, value) } }
            }
            #expect(!kept)
            #expect(try table.entryCount(in: transaction) == 1, "the run before it went in")
            #expect(try !held.holds(table, in: transaction))
        }
    }

    @Test("runs that cannot go to their file stop the request with an error that names the file")
    func aSpillThatFailsIsNamed() throws {
        let folder = StoreFolder()
        let environment = try Environment.open(at: folder.file("runs.lmdb").path)
        let table = try environment.openDatabase(named: "table", options: [.dupSort])
        let missing = folder.url.appendingPathComponent("no such folder")
        let error = try #require(throws: ManagedObjectContextError.self) {
            try environment.write { transaction in
                let held = AppendRuns(memoryBudget: 10, spillFolder: missing)
                #expect(try held.holds(table, in: transaction))
                try Self.add([(key: [1, 2], value: Array(repeating: 7, count: 10))], to: table, held, transaction)
            }
        }
        #expect(error.code == .storeUnusable)
        #expect(error.message.contains(missing.path) && error.message.contains("could not make") && error.message.contains("nothing was inserted"), "\(error.message)")
    }

    @Test("a batch insert whose entries go through the file answers as one whose entries stay in memory, and leaves no file",
          arguments: [true, false])
    func aStoreImportThroughTheFile(sortedOnASecondThread: Bool) throws {
        let folder = StoreFolder()
        var answers: [[Int]] = []
        for (name, budget) in [("memory.lmdb", 256 << 20), ("file.lmdb", 4_096)] {
            try LMDBIncrementalStore.$appendRunsMemoryBudget.withValue(budget) {
              try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(sortedOnASecondThread) {
                let (coordinator, store) = try folder.coordinator(batchModel, name)
                let context = ManagedObjectContext(coordinator: coordinator)
                try seed(context, departments: 5, projects: 7)
                var request = BatchInsertRequest(entityName: "Employee", objects: (0..<3_000).map { n in
                    ["name": .attribute(.string("E\(n)")), "age": .attribute(.integer(Int64(18 + (n * 7919) % 70))),
                     "department": .uniqueValue(.string("D\(n % 5)")), "projects": .uniqueValues([.string("P\(n % 7)"), .string("P\((n * 3) % 7)")])]
                })
                request.chunkSize = 250
                #expect(try context.execute(request).count == 3_000)
                #expect(try store.verify().isEmpty)
                var answer: [Int] = []
                for age in stride(from: 18, to: 88, by: 9) {
                    answer.append(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == %d", age))))
                }
                for code in ["P0", "P3", "P6"] {
                    answer.append(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "ANY projects.code == %@", code))))
                }
                answer.append(try context.count(for: FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "department.name == 'D3' AND age > 50"))))
                answers.append(answer)
              }
            }
        }
        #expect(answers[0] == answers[1], "\(answers)")
        #expect(answers[0].allSatisfy { $0 > 0 }, "\(answers[0])")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.url.path).filter { $0.hasPrefix(".lmdbstore-runs-") }
        #expect(left.isEmpty, "\(left)")
    }

    @Test("a one-transaction batch insert fills its index pages, and answers as a chunked one does")
    func aBulkLoadFillsItsPages() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Reading") {
                AttributeDescription("value", .double)
                AttributeDescription("sensor", .integer32)
                RelationshipDescription("tags", destination: "Tag", inverse: "readings", toMany: true)
                FetchIndexDescription("byValue", properties: ["value"])
                FetchIndexDescription("bySensorValue", properties: ["sensor", "value"])
            }
            EntityDescription("Tag") {
                AttributeDescription("name", .string)
                RelationshipDescription("readings", destination: "Reading", inverse: "tags", toMany: true)
                UniquenessConstraint("name")
            }
        }
        let folder = StoreFolder()
        var answers: [[Double]] = [], pages: [[String: Int]] = []
        for (name, commitsEachChunk) in [("bulk.lmdb", false), ("chunked.lmdb", true)] {
            let (coordinator, store) = try folder.coordinator(model, name)
            let context = ManagedObjectContext(coordinator: coordinator)
            _ = try context.execute(BatchInsertRequest(entityName: "Tag", objects: (0..<8).map { ["name": .attribute(.string("t\($0)"))] }))
            var state = UInt64(3), next = 0
            func draw(_ bound: Int) -> Int {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return Int(state >> 33) % bound
            }
            var request = BatchInsertRequest(entityName: "Reading", properties: ["value", "sensor", "tags"]) { row in
                guard next < 30_000 else { return true }
                next += 1
                row[0] = .attribute(.double(Double(draw(1_000_000)) / 7))
                row[1] = .attribute(.integer(Int64(draw(20))))
                // A tag listed twice is one member.
                let tag = draw(8)
                row[2] = .uniqueValues([.string("t\(tag)"), .string("t\((tag + 3) % 8)"), .string("t\(tag)")])
                return false
            }
            request.chunkSize = 1_000
            request.commitsEachChunk = commitsEachChunk
            #expect(try context.execute(request).count == 30_000)
            try #require(try store.verify().isEmpty)
            var fetch = FetchRequest(entityName: "Reading", predicate: try FetchPredicate(format: "sensor == 4 AND value > 50000"),
                                     sortDescriptors: [FetchSortDescriptor(keyPath: "value", ascending: true)])
            fetch.fetchLimit = 200
            var answer = try context.fetch(fetch).map { $0.value(forKey: "value") as! Double }
            answer.append(Double(try context.count(for: FetchRequest(entityName: "Reading", predicate: try FetchPredicate(format: "ANY tags.name == 't5'")))))
            answers.append(answer)
            try coordinator.removePersistentStore(store)
            let statistics = try LMDBIncrementalStore.statistics(at: folder.file(name))
            pages.append(Dictionary(uniqueKeysWithValues: statistics.tables.map { ($0.name, $0.pages) }))
        }
        #expect(answers[0] == answers[1] && answers[0].count == 201)
        // Random keys put a chunk at a time split pages at their middle; appended, the pages come out full.
        for table in ["index/Reading/byValue", "index/Reading/bySensorValue"] {
            let bulk = try #require(pages[0][table]), chunked = try #require(pages[1][table])
            #expect(bulk * 4 < chunked * 3, "\(table): \(bulk) pages appended, \(chunked) put a chunk at a time")
        }
    }
}
