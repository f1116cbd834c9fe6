typealias ObjectFetchRequest = ObjectGraph.FetchRequest
import Foundation
import GRDB
import Histogram
import LMDBStore
import ObjectGraph

/// One measured workload on one system.
struct Measurement: Codable {
    var workload: String
    var system: String
    var objects: Int
    var operations: Int
    var seconds: Double
    /// Latency percentiles in nanoseconds; `nil` for a workload timed as a whole (a bulk load, the mixed run),
    /// which JSON writes as no key at all.
    var p50: Double?
    var p99: Double?
    var p999: Double?
    var plan: String?

    var opsPerSecond: Double { Double(operations) / seconds }
}

/// Runs `body` repeatedly within a time budget (at least `minimum` times), recording each call's latency.
func measure(_ workload: String, _ system: String, objects: Int, budget: Double, minimum: Int = 3, maximum: Int = 1_000_000,
             _ body: (Int) throws -> Void) rethrows -> Measurement {
    var histogram = Histogram<UInt64>(numberOfSignificantValueDigits: .three)
    let clock = ContinuousClock()
    let start = clock.now
    var count = 0
    while count < maximum && (count < minimum || (clock.now - start) < .seconds(budget)) {
        let began = clock.now
        try body(count)
        let elapsed = clock.now - began
        _ = histogram.record(UInt64(max(1, elapsed.components.attoseconds / 1_000_000_000 + elapsed.components.seconds * 1_000_000_000)))
        count += 1
    }
    let total = clock.now - start
    let seconds = Double(total.components.seconds) + Double(total.components.attoseconds) / 1e18
    return Measurement(workload: workload, system: system, objects: objects, operations: count, seconds: seconds,
                       p50: Double(histogram.valueAtPercentile(50)), p99: Double(histogram.valueAtPercentile(99)),
                       p999: Double(histogram.valueAtPercentile(99.9)))
}

/// A difference between the two systems' answers: the run stops with it.
struct ResultMismatch: Error, CustomStringConvertible {
    let workload: String
    let detail: String
    var description: String { "LMDBStore and GRDB disagree in \"\(workload)\": \(detail)" }
}

/// The workloads, each run on LMDBStore and GRDB (and raw LMDB where it maps), checking that both answer the same.
struct Workloads {
    let lmdb: LMDBSide
    let grdb: GRDBSide
    let raw: RawSide
    let dataset: Dataset
    let budget: Double
    var results: [Measurement] = []
    /// Lines for the report's notes (what a workload measured besides time).
    var notes: [String] = []

    mutating func record(_ measurement: Measurement) { results.append(measurement) }

    /// Records an LMDBStore measurement with the plan the store chose for `request` (`explain`).
    mutating func record(_ measurement: Measurement, plannedFor request: ObjectFetchRequest) {
        var measurement = measurement
        measurement.plan = lmdb.store.explain(request)
        results.append(measurement)
    }

    func check(_ workload: String, _ same: Bool, _ detail: @autoclosure () -> String) throws {
        if !same { throw ResultMismatch(workload: workload, detail: detail()) }
    }

    /// What the update workloads write: a function of the key only, so both systems end with the same data however
    /// many batches each ran (datasets are reused across runs).
    func updatedSalary(_ key: Int) -> Double { Double(key) * 1.5 }

    func key(_ n: Int) -> Int { 1 + Int(UInt64(truncatingIfNeeded: n &* 2_654_435_761) % UInt64(dataset.employees)) }

    /// Reads both systems' files once, so the warm faults find every page in the kernel's page cache whatever ran
    /// before (the cold faults evict the files; without read-ahead nothing brings them back).
    func warmPageCache() {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        for path in [lmdb.url.path, grdb.url.path, grdb.url.path + "-wal"] {
            let descriptor = open(path, O_RDONLY)
            guard descriptor >= 0 else { continue }
            while buffer.withUnsafeMutableBytes({ read(descriptor, $0.baseAddress, $0.count) }) > 0 {}
            close(descriptor)
        }
    }

    mutating func pointFaults() throws {
        warmPageCache()
        let name = "point fault by random ID (warm)"
        for n in 0..<20 {
            let k = key(n * 7919)
            lmdb.resetContext()
            let mine = lmdb.context.object(with: lmdb.id("Employee", k)).value(forKey: "name") as? String
            let theirs = try grdb.queue.read { try String.fetchOne($0, sql: "SELECT name FROM employee WHERE id = ?", arguments: [k]) }
            try check(name, mine == theirs, "employee \(k): \(mine ?? "nil") vs \(theirs ?? "nil")")
        }
        var context = ManagedObjectContext(coordinator: lmdb.coordinator)
        record(measure(name, "LMDBStore", objects: dataset.employees, budget: budget, maximum: 200_000) { n in
            if n % 1000 == 0 { context = ManagedObjectContext(coordinator: lmdb.coordinator) }
            _ = context.object(with: lmdb.id("Employee", key(n))).value(forKey: "name")
        })
        record(try grdb.queue.read { db in
            let select = try db.cachedStatement(sql: "SELECT * FROM employee WHERE id = ?")
            return try measure(name, "GRDB", objects: dataset.employees, budget: budget, maximum: 200_000) { n in
                _ = try Row.fetchOne(select, arguments: [key(n)])?["name"] as String?
            }
        })
        record(try measure(name, "raw LMDB", objects: dataset.employees, budget: budget, maximum: 200_000) { n in
            _ = try raw.pointRead(key(n))
        })
    }

    mutating func indexedEquality() throws {
        let name = "fetch by indexed equality (age == x)"
        let ages = [20, 25, 33, 41, 59]
        for age in ages {
            let mine = try lmdbIDs(ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == %@", age))).sorted()
            let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: "SELECT id FROM employee WHERE age = ? ORDER BY id", arguments: [age]) }
            try check(name, mine == theirs, "age \(age): \(mine.count) vs \(theirs.count) rows")
        }
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            _ = try lmdb.context.fetchObjectIDs(ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == %@", ages[n % ages.count])))
        }, plannedFor: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == %@", ages[0])))
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try Int.fetchAll(db, sql: "SELECT id FROM employee WHERE age = ?", arguments: [ages[n % ages.count]])
            }
        })
        try check(name, try raw.employeeKeys(agedFrom: ages[0], through: ages[0]).count == (try lmdbIDs(ObjectFetchRequest(
            entityName: "Employee", predicate: try FetchPredicate(format: "age == %@", ages[0])))).count, "raw LMDB's count of age \(ages[0])")
        record(try measure(name, "raw LMDB", objects: dataset.employees, budget: budget) { n in
            _ = try raw.employeeKeys(agedFrom: ages[n % ages.count], through: ages[n % ages.count])
        })
    }

    mutating func rangeSortLimit() throws {
        let name = "indexed range, sorted, limit 100"
        func request(_ low: Int) throws -> ObjectFetchRequest {
            var request = ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age >= %@ AND age < %@", low, low + 5),
                                       sortDescriptors: [FetchSortDescriptor(keyPath: "salary", ascending: false)])
            request.fetchLimit = 100
            return request
        }
        for low in [20, 30, 45] {
            let mine = try lmdbIDs(try request(low))
            let theirs = try grdb.queue.read {
                try Int.fetchAll($0, sql: "SELECT id FROM employee WHERE age >= ? AND age < ? ORDER BY salary DESC, id LIMIT 100", arguments: [low, low + 5])
            }
            try check(name, mine == theirs, "ages \(low)..<\(low + 5): \(mine.count) vs \(theirs.count) results, first difference at \(zip(mine, theirs).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(mine.count, theirs.count)) (LMDBStore \(mine.prefix(5)), GRDB \(theirs.prefix(5)))")
        }
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            _ = try lmdb.context.fetchObjectIDs(try request([20, 30, 45][n % 3]))
        }, plannedFor: try request(20))
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
                let low = [20, 30, 45][n % 3]
                _ = try Int.fetchAll(db, sql: "SELECT id FROM employee WHERE age >= ? AND age < ? ORDER BY salary DESC, id LIMIT 100", arguments: [low, low + 5])
            }
        })
    }

    mutating func countRange() throws {
        let name = "count over an indexed range"
        let mine = try lmdb.context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age BETWEEN {30, 39}")))
        let theirs = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee WHERE age BETWEEN 30 AND 39")! }
        try check(name, mine == theirs, "\(mine) vs \(theirs)")
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { _ in
            _ = try lmdb.context.count(for: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age BETWEEN {30, 39}")))
        }, plannedFor: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age BETWEEN {30, 39}")).with { $0.resultType = .count })
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { _ in
                _ = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM employee WHERE age BETWEEN 30 AND 39")
            }
        })
        try check(name, try raw.countEmployees(agedFrom: 30, through: 39) == theirs, "raw LMDB's count")
        record(try measure(name, "raw LMDB", objects: dataset.employees, budget: budget) { _ in
            _ = try raw.countEmployees(agedFrom: 30, through: 39)
        })
    }

    mutating func unindexedFilter() throws {
        let name = "unindexed filter (name BEGINSWITH)"
        let mine = try lmdbIDs(ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name BEGINSWITH %@", "Grace H"))).sorted()
        let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: "SELECT id FROM employee WHERE name GLOB 'Grace H*' ORDER BY id") }
        try check(name, mine == theirs, "\(mine.count) vs \(theirs.count) rows")
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { _ in
            _ = try lmdb.context.fetchObjectIDs(ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name BEGINSWITH %@", "Grace H")))
        }, plannedFor: ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name BEGINSWITH %@", "Grace H")))
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { _ in
                _ = try Int.fetchAll(db, sql: "SELECT id FROM employee WHERE name GLOB 'Grace H*'")
            }
        })
    }
    /// A substring search, case-insensitive (`CONTAINS[c]`), which no index serves: against SQLite's `LIKE`, which
    /// folds ASCII case too.
    mutating func unindexedContains() throws {
        let name = "unindexed filter (name CONTAINS[c])"
        let request = ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "name CONTAINS[c] %@", "grace h"))
        let mine = try lmdbIDs(request).sorted()
        let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: "SELECT id FROM employee WHERE name LIKE '%grace h%' ORDER BY id") }
        try check(name, mine == theirs && !mine.isEmpty, "\(mine.count) vs \(theirs.count) rows")
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { _ in
            _ = try lmdb.context.fetchObjectIDs(request)
        }, plannedFor: request)
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { _ in
                _ = try Int.fetchAll(db, sql: "SELECT id FROM employee WHERE name LIKE '%grace h%'")
            }
        })
    }


    mutating func loadedFetch() throws {
        let name = "fetch 1 000 loaded objects (age == x, not faults)"
        let ages = [20, 25, 33, 41, 59]
        func request(_ age: Int) throws -> ObjectFetchRequest {
            var request = ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "age == %@", age))
            request.returnsObjectsAsFaults = false
            request.fetchLimit = 1000
            return request
        }
        for age in ages {
            lmdb.resetContext()
            let objects = try lmdb.context.fetch(try request(age))
            let mine = objects.map { key($0.objectID) }.sorted()
            let names = Dictionary(uniqueKeysWithValues: objects.map { (key($0.objectID), $0.value(forKey: "name") as? String) })
            let theirs = try grdb.queue.read { try Row.fetchAll($0, sql: "SELECT id, name FROM employee WHERE age = ? ORDER BY id LIMIT 1000", arguments: [age]) }
            try check(name, mine == theirs.map { $0["id"] as Int }, "age \(age): \(mine.count) vs \(theirs.count) rows")
            try check(name, theirs.allSatisfy { names[$0["id"] as Int] == $0["name"] as String? }, "age \(age): names differ")
            try check(name, try raw.loadEmployees(aged: age, limit: 1000) == mine.count, "raw LMDB's rows of age \(age)")
        }
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            _ = try context.fetch(try request(ages[n % ages.count]))
        }, plannedFor: try request(ages[0]))
        record(try grdb.queue.read { db in
            let select = try db.cachedStatement(sql: "SELECT * FROM employee WHERE age = ? LIMIT 1000")
            return try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try Row.fetchAll(select, arguments: [ages[n % ages.count]])
            }
        })
        record(try measure(name, "raw LMDB", objects: dataset.employees, budget: budget) { n in
            _ = try raw.loadEmployees(aged: ages[n % ages.count], limit: 1000)
        })
    }

    /// The predicate Core Data apps write most about relationships: `department == %@` (IDs), against GRDB's
    /// `WHERE departmentId = ?` on its indexed foreign key.
    mutating func relationshipEquality() throws {
        try relatedEmployees("relationship equality (department == %@)", format: "department == %@", of: "Department",
                             count: dataset.departments, sql: "SELECT id FROM employee WHERE departmentId = ?", column: "id")
    }

    /// The 20 best-paid employees of one department: `department == %@` sorted by salary (descending), limit 20 —
    /// a compound index led by a to-one (`byDepartmentSalary`), walked backwards from the department's last entry,
    /// against GRDB's `(departmentId, salary)` index.
    mutating func topOfToOne() throws {
        let name = "top 20 of a to-one (department == %@ by salary)"
        let count = dataset.departments
        let sql = "SELECT id FROM employee WHERE departmentId = ? ORDER BY salary DESC, id LIMIT 20"
        func request(_ n: Int) throws -> ObjectFetchRequest {
            var request = ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "department == %@", lmdb.id("Department", n)),
                                             sortDescriptors: [FetchSortDescriptor(keyPath: "salary", ascending: false)])
            request.fetchLimit = 20
            return request
        }
        for n in [1, count / 2 + 1, count] {
            let mine = try lmdbIDs(try request(n))
            let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: sql, arguments: [n]) }
            try check(name, mine == theirs && !mine.isEmpty, "department \(n): LMDBStore \(mine.prefix(5)), GRDB \(theirs.prefix(5))")
        }
        let measured = try measureIDFetches(name, count: count, request: request, sql: sql)
        record(measured.lmdb, plannedFor: measured.planned)
        record(measured.grdb)

        // What a screen does with them: fetch the objects (faults, the default) in a new context and show each
        // one's name, against GRDB reading the same rows whole.
        let reading = "top 20 of a to-one, reading each name"
        let rowsSQL = "SELECT * FROM employee WHERE departmentId = ? ORDER BY salary DESC, id LIMIT 20"
        func names(_ n: Int) throws -> [String] {
            lmdb.resetContext()
            return try lmdb.context.fetch(try request(n)).map { $0.value(forKey: "name") as? String ?? "" }
        }
        for n in [1, count] {
            let mine = try names(n), theirs = try grdb.queue.read { try Row.fetchAll($0, sql: rowsSQL, arguments: [n]).map { $0["name"] as String } }
            try check(reading, mine == theirs && !mine.isEmpty, "department \(n): LMDBStore \(mine.prefix(3)), GRDB \(theirs.prefix(3))")
        }
        record(try measure(reading, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            _ = try names(1 + n % count)
        }, plannedFor: try request(1))
        record(try grdb.queue.read { db in
            let statement = try db.cachedStatement(sql: rowsSQL)
            return try measure(reading, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try Row.fetchAll(statement, arguments: [1 + n % count]).map { $0["name"] as String }
            }
        })
    }

    /// A search inside one department — `department == %@ AND name CONTAINS[c] %@`, what the search field of a
    /// master–detail screen asks — against GRDB's `departmentId = ? AND name LIKE ?` on its foreign-key index (`LIKE`
    /// folds ASCII case, as `[c]` does on the dataset's ASCII names).
    mutating func searchWithinToOne() throws {
        try relatedEmployees("search within a to-one (department == %@ AND name CONTAINS[c])", format: "department == %@ AND name CONTAINS[c] 'AN'",
                             of: "Department", count: dataset.departments,
                             sql: "SELECT id FROM employee WHERE departmentId = ? AND name LIKE '%an%'", column: "id")
    }

    /// Measures `request(n)` fetched as object IDs against GRDB's `sql` (one `?`) bound to `n`, with `n` going round
    /// 1…`count`; `planned` is the request whose plan the report prints.
    private func measureIDFetches(_ name: String, count: Int, request: (Int) throws -> ObjectFetchRequest, sql: String) throws
        -> (lmdb: Measurement, grdb: Measurement, planned: ObjectFetchRequest)
    {
        let mine = try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            _ = try lmdb.context.fetchObjectIDs(try request(1 + n % count))
        }
        let theirs = try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try Int.fetchAll(db, sql: sql, arguments: [1 + n % count])
            }
        }
        return (mine, theirs, try request(1))
    }

    /// Membership of a many-to-many, the predicate Core Data apps write for "the employees on this project":
    /// `ANY projects == %@` (IDs), against GRDB's indexed link table.
    mutating func toManyMembership() throws {
        try relatedEmployees("to-many membership (ANY projects == %@)", format: "ANY projects == %@", of: "Project",
                             count: dataset.projects, sql: "SELECT employeeId FROM employee_project WHERE projectId = ?", column: "employeeId")
    }

    /// The IDs of the employees `format` (one `%@`) relates to object `n` of `destination` (1…`count`), against GRDB's
    /// `sql` (one `?`, selecting `column`): checked on the first, a middle and the last object, then measured.
    private mutating func relatedEmployees(_ name: String, format: String, of destination: String, count: Int, sql: String,
                                           column: String) throws {
        func request(_ n: Int) throws -> ObjectFetchRequest {
            ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: format, lmdb.id(destination, n)))
        }
        for n in [1, count / 2 + 1, count] {
            let mine = try lmdbIDs(try request(n)).sorted()
            let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: sql + " ORDER BY \(column)", arguments: [n]) }
            try check(name, mine == theirs && !mine.isEmpty, "\(destination) \(n): \(mine.count) vs \(theirs.count)")
        }
        let measured = try measureIDFetches(name, count: count, request: request, sql: sql)
        record(measured.lmdb, plannedFor: measured.planned)
        record(measured.grdb)
    }

    /// Half the employees (at most 50 000) by ID: `SELF IN %@`, against GRDB's `id IN (SELECT value FROM
    /// json_each(?))` (one bound array, as SQLite limits the number of parameters).
    mutating func keyLookupOfMany() throws {
        let count = min(50_000, dataset.employees / 2)
        let name = "key lookup of \(count) (SELF IN %@)"
        let keys = (0..<count).map { 1 + ($0 * 2) % dataset.employees }
        let request = ObjectFetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: "SELF IN %@", keys.map { lmdb.id("Employee", $0) }))
        let json = "[" + keys.map(String.init).joined(separator: ",") + "]"
        let sql = "SELECT id FROM employee WHERE id IN (SELECT value FROM json_each(?))"
        let mine = try lmdbIDs(request).sorted()
        let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: sql + " ORDER BY id", arguments: [json]) }
        try check(name, mine == theirs && mine.count == count, "\(mine.count) vs \(theirs.count) of \(count)")
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { _ in
            _ = try lmdb.context.fetchObjectIDs(request)
        }, plannedFor: request)
        record(try grdb.queue.read { db in
            let statement = try db.makeStatement(sql: sql)
            return try measure(name, "GRDB", objects: dataset.employees, budget: budget) { _ in
                _ = try Int.fetchAll(statement, arguments: [json])
            }
        })
    }

    mutating func toManyTraversal() throws {
        let name = "to-many traversal (department.employees)"
        for department in [1, dataset.departments / 2 + 1, dataset.departments] {
            lmdb.resetContext()
            let mine = lmdb.context.object(with: lmdb.id("Department", department)).relatedObjects(forKey: "employees")
                .map { key($0.objectID) }.sorted()
            let theirs = try grdb.queue.read { try Int.fetchAll($0, sql: "SELECT id FROM employee WHERE departmentId = ? ORDER BY id", arguments: [department]) }
            try check(name, mine == theirs, "department \(department): \(mine.count) vs \(theirs.count)")
        }
        record(measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            lmdb.resetContext()
            _ = lmdb.context.object(with: lmdb.id("Department", 1 + n % dataset.departments)).relatedObjects(forKey: "employees").count
        })
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try Int.fetchAll(db, sql: "SELECT id FROM employee WHERE departmentId = ?", arguments: [1 + n % dataset.departments])
            }
        })

        // What an app does with the relationship: walk the employees and read each one (GRDB: fetch the rows).
        let reading = "to-many traversal reading each name"
        func lmdbNames(_ department: Int) -> [String] {
            lmdb.context.object(with: lmdb.id("Department", department)).relatedObjects(forKey: "employees").map { $0.value(forKey: "name") as? String ?? "" }
        }
        func grdbNames(_ db: Database, _ department: Int) throws -> [String] {
            try Row.fetchAll(db, sql: "SELECT * FROM employee WHERE departmentId = ?", arguments: [department]).map { $0["name"] as String }
        }
        for department in [1, dataset.departments] {
            lmdb.resetContext()
            let mine = lmdbNames(department).sorted(), theirs = try grdb.queue.read { try grdbNames($0, department) }.sorted()
            try check(reading, mine == theirs, "department \(department): \(mine.count) vs \(theirs.count) names")
        }
        record(measure(reading, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            lmdb.resetContext()
            _ = lmdbNames(1 + n % dataset.departments)
        })
        record(try grdb.queue.read { db in
            try measure(reading, "GRDB", objects: dataset.employees, budget: budget) { n in
                _ = try grdbNames(db, 1 + n % dataset.departments)
            }
        })
    }

    mutating func groupBy() throws {
        let name = "dictionary fetch, group by department"
        var request = ObjectFetchRequest(entityName: "Employee")
        request.resultType = .dictionary
        request.propertiesToGroupBy = ["department"]
        request.propertiesToFetch = [.keyPath("department"), .aggregate(.count, of: "SELF", as: "n")]
        lmdb.resetContext()
        let mine = try lmdb.context.fetchDictionaries(request).reduce(into: [Int: Int]()) { result, row in
            guard case .object(let object)? = row["department"], let id = object.base as? ManagedObjectID, case .integer(let n)? = row["n"] else { return }
            result[key(id)] = Int(n)
        }
        let theirs = try grdb.queue.read { db in
            try Row.fetchAll(db, sql: "SELECT departmentId, COUNT(*) AS n FROM employee GROUP BY departmentId").reduce(into: [Int: Int]()) {
                $0[$1["departmentId"] as Int] = $1["n"] as Int
            }
        }
        try check(name, mine == theirs, "\(mine.count) vs \(theirs.count) groups")
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget, minimum: 1) { _ in
            lmdb.resetContext()
            _ = try lmdb.context.fetchDictionaries(request)
        })
        record(try grdb.queue.read { db in
            try measure(name, "GRDB", objects: dataset.employees, budget: budget) { _ in
                _ = try Row.fetchAll(db, sql: "SELECT departmentId, COUNT(*) AS n FROM employee GROUP BY departmentId")
            }
        })
    }

    mutating func updateBatch() throws {
        let name = "update batch (1 000 objects, one save)"
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget) { n in
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            for i in 0..<1000 {
                let k = key(n * 1000 + i)
                try context.object(with: lmdb.id("Employee", k)).setValue(updatedSalary(k), forKey: "salary")
            }
            try context.save()
        })
        record(try measure(name, "GRDB", objects: dataset.employees, budget: budget) { n in
            try grdb.queue.write { db in
                let update = try db.cachedStatement(sql: "UPDATE employee SET salary = ? WHERE id = ?")
                for i in 0..<1000 { let k = key(n * 1000 + i); try update.execute(arguments: [updatedSalary(k), k]) }
            }
        })
        // Each system updated the keys of its own number of batches; bring the other up to the same set, so both hold
        // the same data for the workloads after this one and for the next run on this dataset.
        let counts = results.suffix(2).map(\.operations)
        try equalizeSalaries(lmdbUpdated: counts[0] * 1000, grdbUpdated: counts[1] * 1000)
        lmdb.resetContext()
        for i in [0, 1, 499, 999] {
            let mine = lmdb.context.object(with: lmdb.id("Employee", key(i))).value(forKey: "salary") as? Double
            let theirs = try grdb.queue.read { try Double.fetchOne($0, sql: "SELECT salary FROM employee WHERE id = ?", arguments: [key(i)]) }
            try check(name, mine == theirs, "employee \(key(i)): \(String(describing: mine)) vs \(String(describing: theirs))")
        }
    }

    /// Writes `updatedSalary(key(i))` for the `i` one system reached and the other did not.
    func equalizeSalaries(lmdbUpdated: Int, grdbUpdated: Int) throws {
        for start in stride(from: lmdbUpdated, to: grdbUpdated, by: 10_000) {
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            for i in start..<min(start + 10_000, grdbUpdated) {
                try context.object(with: lmdb.id("Employee", key(i))).setValue(updatedSalary(key(i)), forKey: "salary")
            }
            try context.save()
        }
        if lmdbUpdated > grdbUpdated {
            try grdb.queue.write { db in
                let update = try db.cachedStatement(sql: "UPDATE employee SET salary = ? WHERE id = ?")
                for i in grdbUpdated..<lmdbUpdated { try update.execute(arguments: [updatedSalary(key(i)), key(i)]) }
            }
        }
    }

    mutating func insertAndDeleteBatch() throws {
        let name = "delete batch (100 objects, one save)"
        var lmdbIDs: [[ManagedObjectID]] = []
        record(try measure(name, "LMDBStore", objects: dataset.employees, budget: budget / 2) { n in
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            var created: [ManagedObject] = []
            for i in 0..<100 {
                let employee = try context.insertNewObject(forEntityName: "Employee")
                try employee.setValue("Temp \(n)-\(i)", forKey: "name")
                try employee.setValue(Int16(30), forKey: "age")
                try employee.setValue(1.0, forKey: "salary")
                try employee.setValue(Date(), forKey: "hired")
                created.append(employee)
            }
            try context.save()
            lmdbIDs.append(created.map(\.objectID))
            for employee in created { context.delete(employee) }
            try context.save()
        })
        record(try measure(name, "GRDB", objects: dataset.employees, budget: budget / 2) { n in
            let base = 100_000_000 + n * 100
            try grdb.queue.write { db in
                for i in 0..<100 {
                    try db.execute(sql: "INSERT INTO employee(id, name, age, salary, hired) VALUES (?, ?, 30, 1.0, 0)", arguments: [base + i, "Temp \(n)-\(i)"])
                }
            }
            try grdb.queue.write { db in try db.execute(sql: "DELETE FROM employee WHERE id >= ? AND id < ?", arguments: [base, base + 100]) }
        })
        let mine = try lmdb.context.count(for: ObjectFetchRequest(entityName: "Employee"))
        let theirs = try grdb.queue.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM employee")! }
        try check(name, mine == theirs && mine == dataset.employees, "\(mine) vs \(theirs) employees after insert-then-delete")
    }

    mutating func mixedReadWrite(readers: Int) throws {
        let name = "mixed: \(readers) reader threads + 1 writer"
        let employees = dataset.employees
        let lmdbSide = lmdb, grdbSide = grdb, seconds = budget
        let keyOf: @Sendable (Int) -> Int = { n in 1 + Int(UInt64(truncatingIfNeeded: n &* 2_654_435_761) % UInt64(employees)) }
        var written: [Int] = []
        for system in ["LMDBStore", "GRDB"] {
            let counter = Counter(), writes = Counter()
            let group = DispatchGroup()
            let deadline = Date().addingTimeInterval(seconds)
            for reader in 0..<readers {
                DispatchQueue.global().async(group: group) {
                    var n = reader * 1_000_003
                    var context = ManagedObjectContext(coordinator: lmdbSide.coordinator)
                    while Date() < deadline {
                        if system == "LMDBStore" {
                            if n % 1000 == 0 { context = ManagedObjectContext(coordinator: lmdbSide.coordinator) }
                            _ = context.object(with: lmdbSide.id("Employee", keyOf(n))).value(forKey: "name")
                        } else {
                            _ = try? grdbSide.queue.read { try String.fetchOne($0, sql: "SELECT name FROM employee WHERE id = ?", arguments: [keyOf(n)]) }
                        }
                        n += 1
                        counter.add(1)
                    }
                }
            }
            DispatchQueue.global().async(group: group) {
                var n = 0
                while Date() < deadline {
                    if system == "LMDBStore" {
                        let context = ManagedObjectContext(coordinator: lmdbSide.coordinator)
                        try? context.object(with: lmdbSide.id("Employee", keyOf(n))).setValue(Double(keyOf(n)) * 1.5, forKey: "salary")
                        try? context.save()
                    } else {
                        try? grdbSide.queue.write { try $0.execute(sql: "UPDATE employee SET salary = ? WHERE id = ?", arguments: [Double(keyOf(n)) * 1.5, keyOf(n)]) }
                    }
                    n += 1
                    counter.add(1)
                    writes.add(1)
                }
            }
            group.wait()
            written.append(writes.value)
            record(Measurement(workload: name, system: system, objects: dataset.employees, operations: counter.value, seconds: seconds,
                               p50: nil, p99: nil, p999: nil))
        }
        // The writer updates key(0), key(1), … with `updatedSalary`; give both systems the same set.
        try equalizeSalaries(lmdbUpdated: written[0], grdbUpdated: written[1])
    }

    private func lmdbIDs(_ request: ObjectFetchRequest) throws -> [Int] {
        try lmdb.context.fetchObjectIDs(request).map(key)
    }

    private func key(_ id: ManagedObjectID) -> Int {
        if case .integer(let value) = id.referenceObject { Int(value) } else { -1 }
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add(_ n: Int) { lock.withLock { count += n } }
    var value: Int { lock.withLock { count } }
}
