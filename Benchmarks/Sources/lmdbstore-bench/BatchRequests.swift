import Foundation
import GRDB
import LMDB
@_spi(Benchmarks) import LMDBStore
import ObjectGraph

extension Workloads {
    /// Batch requests on fresh files, each timed against GRDB doing the same in one transaction (the import, above
    /// 2 000 000 employees, in one per 10 000 rows on both sides):
    ///
    /// - the dataset's employees imported: LMDBStore with one ``BatchInsertRequest`` (rows made by a values handler,
    ///   by position, a chunk at a time, one transaction; the department and projects given by ID), GRDB with prepared `INSERT`s —
    ///   the same rows, indexes and links (departments and projects are put first, untimed);
    /// - a tenth of them (aged 58 or more, found by the age index on both sides) given a salary 10 % higher: a
    ///   ``BatchUpdateRequest`` against `UPDATE … WHERE` (three indexes hold the salary on each side);
    /// - the same employees deleted with their project links: a ``BatchDeleteRequest`` against `DELETE … WHERE` on
    ///   the links and the rows.
    ///
    /// After each request both stores are checked to hold the same rows; the files are removed at the end.
    mutating func batchRequests(lmdbOptions: [String: String], durability: String) throws {
        // Above 2 000 000 employees both sides commit every chunk (10 000 rows): the shape of an import whose memory
        // is bounded by its chunk, and whose chunks stay when it stops. (Since session 48 a one-transaction import into
        // empty tables is LMDBStore's bulk load, which the release probe measured at 77 s for 10 000 000 employees
        // against 151 s in chunks; before it, one transaction ran several times slower than chunks.)
        let commitsEachChunk = dataset.employees > 2_000_000
        let name = "batch insert (\(dataset.employees) employees, \(commitsEachChunk ? "a commit per 10 000" : "one request"))"
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-bench-batch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let clock = ContinuousClock()
        func seconds(_ duration: Duration) -> Double { Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18 }

        // One transaction may hold the whole import, and LMDB cannot grow its map inside a transaction: the store
        // starts with room for it (about 420 bytes an employee are written; 1 KiB each leaves room for the pages
        // the transaction copies), as an import of this size needs.
        var lmdbOptions = lmdbOptions
        lmdbOptions["mapSize"] = lmdbOptions["mapSize"] ?? String(dataset.employees * 1024 + (256 << 20))
        let employees = dataset.employees, data = dataset
        /// A store at `name` holding the departments and projects, with a context on it.
        func lmdbStore(_ name: String) throws -> (LMDBSide, ManagedObjectContext) {
            let lmdb = try LMDBSide(url: folder.appendingPathComponent(name), options: lmdbOptions)
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            _ = try context.execute(BatchInsertRequest(entityName: "Department", objects: (1...dataset.departments).map {
                ["name": .attribute(.string("Department \($0)")), "budget": .attribute(.integer(Int64($0 * 1000)))]
            }))
            _ = try context.execute(BatchInsertRequest(entityName: "Project", objects: (1...dataset.projects).map { ["code": .attribute(.string("P-\($0)"))] }))
            return (lmdb, context)
        }
        /// The import into `lmdb`: the rows by position, as the prepared INSERT on the other side takes them.
        func employeeRequest(_ lmdb: LMDBSide) -> BatchInsertRequest {
            var next = 0
            var request = BatchInsertRequest(entityName: "Employee", properties: ["name", "email", "age", "salary", "hired", "department", "projects"]) { row in
                guard next < employees else { return true }
                let e = data.employee(next)
                row[0] = .attribute(.string(e.name))
                row[1] = BatchValue(e.email.map(AttributeValue.string))
                row[2] = .attribute(.integer(Int64(e.age)))
                row[3] = .attribute(.double(e.salary))
                row[4] = .attribute(.date(e.hired))
                row[5] = .object(lmdb.id("Department", e.department))
                if !e.projects.isEmpty { row[6] = .objects(e.projects.map { lmdb.id("Project", $0) }) }
                next += 1
                return false
            }
            request.commitsEachChunk = commitsEachChunk
            return request
        }
        let (lmdb, context) = try lmdbStore("store.lmdb")
        var request = employeeRequest(lmdb)
        // The process's anonymous memory (not the map's file pages) after each chunk: what the import holds.
        let anonymousBefore = anonymousResidentBytes()
        var anonymousPeak = anonymousBefore
        request.progressHandler = { _ in
            anonymousPeak = max(anonymousPeak, anonymousResidentBytes())
            return true
        }
        let lmdbStart = clock.now
        let result = try context.execute(request)
        let lmdbSeconds = seconds(clock.now - lmdbStart)
        notes.append("Batch insert of \(employees) employees: anonymous memory \(formatBytes(anonymousBefore)) before, at most \(formatBytes(anonymousPeak)) after any chunk "
                     + "(chunks of \(request.chunkSize)); LMDB file \(formatBytes(fileSize(lmdb.url))).")
        try check(name, result.isComplete, "the batch insert stopped early")

        let grdb = try GRDBSide(url: folder.appendingPathComponent("store.sqlite"), durability: durability)
        try grdb.queue.write { db in
            try db.execute(sql: BenchModel.sqliteSchema)
            for n in 1...dataset.departments {
                try db.execute(sql: "INSERT INTO department(id, name, budget) VALUES (?, ?, ?)", arguments: [n, "Department \(n)", n * 1000])
            }
            for n in 1...dataset.projects { try db.execute(sql: "INSERT INTO project(id, code) VALUES (?, ?)", arguments: [n, "P-\(n)"]) }
        }
        let grdbStart = clock.now
        let transactions = commitsEachChunk ? stride(from: 0, to: employees, by: request.chunkSize).map { $0..<min($0 + request.chunkSize, employees) } : [0..<employees]
        for rows in transactions {
            try grdb.queue.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO employee(id, name, email, age, salary, hired, departmentId) VALUES (?, ?, ?, ?, ?, ?, ?)")
                let link = try db.cachedStatement(sql: "INSERT INTO employee_project(employeeId, projectId) VALUES (?, ?)")
                for index in rows {
                    let e = data.employee(index)
                    try insert.execute(arguments: [index + 1, e.name, e.email, Int(e.age), e.salary, e.hired.timeIntervalSinceReferenceDate, e.department])
                    for project in e.projects { try link.execute(arguments: [index + 1, project]) }
                }
            }
        }
        let grdbSeconds = seconds(clock.now - grdbStart)

        let mine = try context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == 30")))
        let theirs = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee WHERE age = 30")! }
        let members = try context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "ANY projects == %@", lmdb.id("Project", 7))))
        let theirMembers = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee_project WHERE projectId = 7")! }
        try check(name, result.count == employees && mine == theirs && members == theirMembers,
                  "\(result.count) rows, \(mine) vs \(theirs) aged 30, \(members) vs \(theirMembers) members of project 7")
        record(Measurement(workload: name, system: "LMDBStore", objects: employees, operations: employees, seconds: lmdbSeconds))
        record(Measurement(workload: name, system: "GRDB", objects: employees, operations: employees, seconds: grdbSeconds))
        let rawSeconds = try Self.rawInsertFloor(lmdb.store, into: folder.appendingPathComponent("raw.lmdb"), durability: durability)
        record(Measurement(workload: name, system: "raw LMDB", objects: employees, operations: employees, seconds: rawSeconds))
        // Both imports above include making each row's values from the dataset's generator; the floor puts bytes
        // made beforehand. What making the values alone costs, so the floor's ratio can be read without it.
        let inputStart = clock.now
        var made = 0
        for index in 0..<employees {
            let e = data.employee(index)
            let values: [BatchValue] = [.attribute(.string(e.name)), BatchValue(e.email.map(AttributeValue.string)), .attribute(.integer(Int64(e.age))),
                                        .attribute(.double(e.salary)), .attribute(.date(e.hired)), .object(lmdb.id("Department", e.department)),
                                        e.projects.isEmpty ? .null : .objects(e.projects.map { lmdb.id("Project", $0) })]
            made &+= values.count
        }
        let inputSeconds = seconds(clock.now - inputStart)
        try check(name, made == employees * 7, "\(made) values made")
        notes.append("Batch insert of \(employees) employees: making the rows' values from the dataset's generator alone (in both imports' time, "
                     + "not in the floor's) takes \(String(format: "%.2f", inputSeconds)) s of LMDBStore's \(String(format: "%.2f", lmdbSeconds)) s; "
                     + "without it the import is \(String(format: "%.2f", (lmdbSeconds - inputSeconds) / rawSeconds))× the floor's time.")
        if !commitsEachChunk && LMDBIncrementalStore.bulkLoadUsesLane {
            // The one-transaction import sorts its entries on a second thread (a bulk load's lane); the same import
            // on one thread, into a store of its own, shows what the second thread is worth.
            let (alone, aloneContext) = try lmdbStore("alone.lmdb")
            let aloneStart = clock.now
            let aloneResult = try LMDBIncrementalStore.$bulkLoadUsesLane.withValue(false) { try aloneContext.execute(employeeRequest(alone)) }
            let aloneSeconds = seconds(clock.now - aloneStart)
            try check(name, aloneResult.isComplete && aloneResult.count == employees, "the one-thread import stopped early")
            notes.append("Batch insert of \(employees) employees on one thread (its entries not sorted on a second): \(String(format: "%.2f", aloneSeconds)) s, "
                         + "\(String(format: "%.2f", (aloneSeconds - inputSeconds) / rawSeconds))× the floor's time without making the values.")
        }

        // A tenth of the employees: P(age ≥ 58) = 1 - √(40/50) ≈ 10.6 % (ages are 18 + 50u², u uniform).
        let cut = 58
        let older = try FetchPredicate(format: "age >= %d", cut)
        func sameRows(_ step: String) throws {
            let mine = try context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "salary > 100000")))
            let theirs = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee WHERE salary > 100000")! }
            let members = try context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "ANY projects == %@", lmdb.id("Project", 7))))
            let theirMembers = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee_project WHERE projectId = 7")! }
            let all = try context.count(for: ObjectFetchRequest(entityName: "Employee"))
            let theirAll = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee")! }
            try check(step, mine == theirs && members == theirMembers && all == theirAll,
                      "\(mine) vs \(theirs) paid over 100 000, \(members) vs \(theirMembers) members of project 7, \(all) vs \(theirAll) employees")
        }

        /// The rows `body` changed, and how long it took.
        func timed(_ body: () throws -> Int) rethrows -> (count: Int, seconds: Double) {
            let start = clock.now
            let result = try body()
            return (result, seconds(clock.now - start))
        }
        /// Records a request's two timings once both changed as many rows and hold the same rows.
        func compare(_ step: String, mine: (count: Int, seconds: Double), theirs: (count: Int, seconds: Double)) throws {
            try check(step, mine.count == theirs.count, "\(mine.count) vs \(theirs.count) rows changed")
            try sameRows(step)
            record(Measurement(workload: step, system: "LMDBStore", objects: employees, operations: mine.count, seconds: mine.seconds))
            record(Measurement(workload: step, system: "GRDB", objects: employees, operations: theirs.count, seconds: theirs.seconds))
        }

        var update = BatchUpdateRequest(entityName: "Employee", predicate: older, propertiesToUpdate: ["salary": try PredicateExpression(format: "salary * 1.1")])
        update.resultType = .count
        let updated = try timed { try context.execute(update).count }
        try compare("batch update (10 % of \(employees) employees, salary × 1.1)", mine: updated, theirs: try timed {
            try grdb.queue.write { db in
                try db.execute(sql: "UPDATE employee SET salary = salary * 1.1 WHERE age >= ?", arguments: [cut])
                return db.changesCount
            }
        })

        var delete = BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Employee", predicate: older))
        delete.resultType = .count
        let deleted = try timed { try context.execute(delete).count }
        try check("batch delete", deleted.count == updated.count, "\(deleted.count) rows deleted, \(updated.count) updated")
        try compare("batch delete (10 % of \(employees) employees, with their links)", mine: deleted, theirs: try timed {
            try grdb.queue.write { db in
                try db.execute(sql: "DELETE FROM employee_project WHERE employeeId IN (SELECT id FROM employee WHERE age >= ?)", arguments: [cut])
                try db.execute(sql: "DELETE FROM employee WHERE age >= ?", arguments: [cut])
                return db.changesCount
            }
        })
    }

    /// The raw-LMDB floor of the import: every entry the batch insert wrote — the employees' rows, index entries and
    /// links — copied out of the store's tables, then put again into a fresh file with the same tables in one write
    /// transaction, each table's entries in key order and appended (`MDB_APPEND`), a key's values in tables of
    /// fixed-size values as one run (`MDB_MULTIPLE` with `MDB_APPENDDUP`). Only the puts and the commit are timed: the
    /// bytes as the store wrote them, without making a row or an entry.
    static func rawInsertFloor(_ store: LMDBIncrementalStore, into url: URL, durability: String) throws -> Double {
        struct Copy {
            let name: String
            let options: DatabaseOptions
            var bytes: [UInt8] = []
            var entries: [(key: Range<Int>, value: Range<Int>)] = []
        }
        let (environment, tables) = try store.batchInsertTablesForBenchmark(entity: "Employee")
        let copies = try environment.read { transaction in
            try tables.map { table in
                var copy = Copy(name: table.name, options: table.database.options)
                try table.database.withCursor(in: transaction) { cursor in
                    var entry = try cursor.first()
                    while let current = entry {
                        let keyStart = copy.bytes.count
                        copy.bytes.append(contentsOf: current.key)
                        let valueStart = copy.bytes.count
                        copy.bytes.append(contentsOf: current.value)
                        copy.entries.append((keyStart..<valueStart, valueStart..<copy.bytes.count))
                        entry = try cursor.next()
                    }
                }
                return copy
            }
        }
        var options = Environment.Options()
        options.durability = durability == "full" ? .full : .noSync
        options.mapSize = copies.reduce(0) { $0 + $1.bytes.count } * 4 + (64 << 20)
        options.maxDatabases = copies.count + 8
        let raw = try Environment.open(at: url.path, options: options)
        let databases = try copies.map { try raw.openDatabase(named: $0.name, options: $0.options) }
        // Each dupFixed table's values of one key, side by side, for one put.
        let runs = copies.map { copy -> [(key: Range<Int>, values: [UInt8], size: Int)] in
            guard copy.options.contains(.dupFixed) else { return [] }
            var runs: [(key: Range<Int>, values: [UInt8], size: Int)] = []
            for entry in copy.entries {
                if let last = runs.last, copy.bytes[last.key] == copy.bytes[entry.key] {
                    runs[runs.count - 1].values += copy.bytes[entry.value]
                } else {
                    runs.append((entry.key, Array(copy.bytes[entry.value]), entry.value.count))
                }
            }
            return runs
        }
        let clock = ContinuousClock()
        let start = clock.now
        try raw.write { transaction in
            for ((copy, database), runs) in zip(zip(copies, databases), runs) {
                try copy.bytes.withUnsafeBytes { bytes in
                    guard runs.isEmpty else {
                        try database.withCursor(in: transaction) { cursor in
                            for run in runs {
                                try run.values.withUnsafeBytes {
                                    try cursor.putDuplicates($0, size: run.size, forKey: UnsafeRawBufferPointer(rebasing: bytes[run.key]), options: [.append, .appendDuplicate])
                                }
                            }
                        }
                        return
                    }
                    let append: PutOptions = copy.options.contains(.dupSort) ? .appendDuplicate : .append
                    for entry in copy.entries {
                        try database.put(UnsafeRawBufferPointer(rebasing: bytes[entry.value]), forKey: UnsafeRawBufferPointer(rebasing: bytes[entry.key]),
                                         in: transaction, options: append)
                    }
                }
            }
        }
        let elapsed = clock.now - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}
