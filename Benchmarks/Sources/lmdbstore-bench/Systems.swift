import Foundation
import GRDB
import LMDB
@_spi(Benchmarks) import LMDBStore
import ObjectGraph

/// The LMDB object store, used the way an app would: through contexts.
final class LMDBSide: @unchecked Sendable {
    let coordinator: PersistentStoreCoordinator
    let store: LMDBIncrementalStore
    let url: URL
    var context: ManagedObjectContext

    /// Opens the store at `url` with the store options the run chose (`durability`, `readAhead`).
    init(url: URL, options: [String: String]) throws {
        LMDBIncrementalStore.register()
        self.url = url
        coordinator = PersistentStoreCoordinator(managedObjectModel: BenchModel.model)
        store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: url, options: options)
            as! LMDBIncrementalStore
        context = ManagedObjectContext(coordinator: coordinator)
    }

    func id(_ entity: String, _ key: Int) -> ManagedObjectID {
        ManagedObjectID(entityName: entity, storeIdentifier: store.identifier, referenceObject: .integer(Int64(key)))
    }

    /// A fresh context, so no earlier read is cached.
    func resetContext() { context = ManagedObjectContext(coordinator: coordinator) }

    func load(_ dataset: Dataset, batchSize: Int, progress: (Int) -> Void) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        for n in 1...dataset.departments {
            let department = try context.insertNewObject(forEntityName: "Department")
            try department.setValue("Department \(n)", forKey: "name")
            try department.setValue(Int64(n * 1000), forKey: "budget")
        }
        for n in 1...dataset.projects {
            try context.insertNewObject(forEntityName: "Project").setValue("P-\(n)", forKey: "code")
        }
        try context.save()
        var start = 0
        while start < dataset.employees {
            let batch = ManagedObjectContext(coordinator: coordinator)
            for index in start..<min(start + batchSize, dataset.employees) {
                let e = dataset.employee(index)
                let employee = try batch.insertNewObject(forEntityName: "Employee")
                try employee.setValue(e.name, forKey: "name")
                try employee.setValue(e.email, forKey: "email")
                try employee.setValue(e.age, forKey: "age")
                try employee.setValue(e.salary, forKey: "salary")
                try employee.setValue(e.hired, forKey: "hired")
                try employee.setValue(batch.object(with: id("Department", e.department)), forKey: "department")
                if !e.projects.isEmpty {
                    try employee.setValue(e.projects.map { batch.object(with: id("Project", $0)) }, forKey: "projects")
                }
            }
            try batch.save()
            start += batchSize
            progress(start)
        }
    }
}

/// SQLite through GRDB, with the same schema, indexes and durability.
final class GRDBSide: @unchecked Sendable {
    let queue: DatabasePool
    let url: URL

    init(url: URL, durability: String) throws {
        self.url = url
        var configuration = Configuration()
        let synchronous = durability == "full" ? "FULL" : "OFF"
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
        }
        queue = try DatabasePool(path: url.path, configuration: configuration)
    }

    static func settings(durability: String) -> String {
        "SQLite \(sqliteVersion()) via GRDB (DatabasePool), WAL, synchronous=\(durability == "full" ? "FULL" : "OFF")"
    }

    static func sqliteVersion() -> String {
        (try? DatabaseQueue().read { try String.fetchOne($0, sql: "SELECT sqlite_version()") }) ?? "?"
    }

    func load(_ dataset: Dataset, batchSize: Int, progress: (Int) -> Void) throws {
        try queue.write { db in
            try db.execute(sql: BenchModel.sqliteSchema)
            for n in 1...dataset.departments {
                try db.execute(sql: "INSERT INTO department(id, name, budget) VALUES (?, ?, ?)", arguments: [n, "Department \(n)", n * 1000])
            }
            for n in 1...dataset.projects {
                try db.execute(sql: "INSERT INTO project(id, code) VALUES (?, ?)", arguments: [n, "P-\(n)"])
            }
        }
        var start = 0
        while start < dataset.employees {
            try queue.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO employee(id, name, email, age, salary, hired, departmentId) VALUES (?, ?, ?, ?, ?, ?, ?)")
                let link = try db.cachedStatement(sql: "INSERT INTO employee_project(employeeId, projectId) VALUES (?, ?)")
                for index in start..<min(start + batchSize, dataset.employees) {
                    let e = dataset.employee(index)
                    try insert.execute(arguments: [index + 1, e.name, e.email, Int(e.age), e.salary, e.hired.timeIntervalSinceReferenceDate, e.department])
                    for project in e.projects { try link.execute(arguments: [index + 1, project]) }
                }
            }
            start += batchSize
            progress(start)
        }
    }
}

/// Raw LMDB: the same rows read with one `mdb_get` and one decode, no object layer — the floor.
struct RawSide {
    let store: LMDBIncrementalStore

    func pointRead(_ key: Int) throws -> Int {
        try store.decodeRowForBenchmark(rawKey: UInt64(key), root: "Employee")
    }

    /// The row keys of the employees aged `low...high`, from the age index's entries in one read transaction (a page
    /// of an age's entries at a time, as the store walks them).
    func employeeKeys(agedFrom low: Int, through high: Int) throws -> [UInt64] {
        let (environment, index, range) = try store.integerIndexRangeForBenchmark(entity: "Employee", index: "byAge", from: Int64(low), through: Int64(high))
        return try environment.read { transaction in
            try index.withCursor(in: transaction) { cursor in
                var keys: [UInt64] = []
                try cursor.forEachValue(in: range) { entry in
                    keys.append(entry.value.loadUnaligned(as: UInt64.self).bigEndian)
                    return true
                }
                return keys
            }
        }
    }

    /// The first `limit` employees aged `age` on the age index, each row read and decoded, in one read transaction:
    /// the floor of a fetch of loaded objects.
    func loadEmployees(aged age: Int, limit: Int) throws -> Int {
        let (environment, index, range) = try store.integerIndexRangeForBenchmark(entity: "Employee", index: "byAge", from: Int64(age), through: Int64(age))
        return try environment.read { transaction in
            var keys: [UInt64] = []
            keys.reserveCapacity(limit)
            try index.withCursor(in: transaction) { cursor in
                try cursor.forEachValue(in: range) { entry in
                    keys.append(entry.value.loadUnaligned(as: UInt64.self).bigEndian)
                    return keys.count < limit
                }
            }
            return try store.decodeRowsForBenchmark(rawKeys: keys, root: "Employee", in: transaction)
        }
    }

    /// How many employees are aged `low...high`, counted on the age index (a step per age).
    func countEmployees(agedFrom low: Int, through high: Int) throws -> Int {
        let (environment, index, range) = try store.integerIndexRangeForBenchmark(entity: "Employee", index: "byAge", from: Int64(low), through: Int64(high))
        return try environment.read { transaction in try index.withCursor(in: transaction) { try $0.count(in: range) } }
    }
}

func fileSize(_ url: URL) -> Int {
    let paths = [url.path, url.path + "-lock", url.path + "-wal", url.path + "-shm"]
    return paths.reduce(0) { $0 + ((try? FileManager.default.attributesOfItem(atPath: $1)[.size] as? Int) ?? 0) }
}

func peakResidentBytes() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Int(usage.ru_maxrss) * 1024
}

/// The process's resident anonymous memory now (`RssAnon` in `/proc/self/status`: heap and stacks, not the pages
/// of mapped files such as an LMDB map); 0 where that file does not exist.
func anonymousResidentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("RssAnon:") }),
          let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") else { return 0 }
    return kilobytes * 1024
}
