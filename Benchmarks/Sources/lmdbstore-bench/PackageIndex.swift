import ArgumentParser
import Foundation
import GRDB
@_spi(Benchmarks) import LMDBStore
import ObjectGraph

/// `lmdbstore-bench packages`: a real dataset, as a new user would try it — Debian's package index (a `Packages` file:
/// packages, their sections and maintainers as to-ones, their dependencies as a many-to-many) imported through the
/// public API into LMDBStore and into SQLite (GRDB), then the questions such a user asks, on both, answers compared.
struct Packages: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import a Debian Packages file into both systems and time the questions a user asks of it.",
        discussion: """
            FILE is an uncompressed Packages file, e.g.
              lz4 -dc /var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages.lz4 > Packages
            Both stores are written to a new temporary folder and removed afterwards, or to --keep's folder and kept
            (packages.lmdb and packages.sqlite, for profiling a question on its own).
            """)

    @Argument(help: "The Packages file.")
    var file: String

    @Option(help: "Seconds each question may run on each system.")
    var seconds: Double = 1

    @Flag(help: "Print the results as JSON instead of tables.")
    var json = false

    @Option(help: "A new folder to write both stores to and keep them in.")
    var keep: String?

    func run() throws {
        let text = try String(contentsOfFile: file, encoding: .utf8)
        let index = try PackageIndex(parsing: text)
        guard index.packages.count >= 100 else { throw ValidationError("\(file) holds \(index.packages.count) packages: is it a Packages file?") }
        let folder = keep.map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-packages-\(UUID().uuidString)")
        if FileManager.default.fileExists(atPath: folder.path) { throw ValidationError("\(folder.path) exists: --keep takes a new folder") }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { if keep == nil { try? FileManager.default.removeItem(at: folder) } }
        var trial = try PackageTrial(index: index, folder: folder, budget: seconds)
        try trial.run()
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(trial.results), as: UTF8.self))
        } else {
            print(Table.render(trial.results, notes: trial.notes, settings: "the Debian package index in \(file)"))
        }
    }
}

/// The parts of a `Packages` file the trial uses: each package once (the first stanza of a name), with its section,
/// maintainer, installed size, and the packages it depends on (`Depends` and `Pre-Depends`, every alternative that
/// names a package of the file; versions and architecture qualifiers dropped).
struct PackageIndex {
    struct Package {
        var name: String
        var version: String
        var size: Int
        var section: Int
        var maintainer: Int
        var dependsOn: [Int] = []
    }

    var packages: [Package] = []
    var sections: [String] = []
    var maintainers: [String] = []
    var dependencyCount: Int { packages.reduce(0) { $0 + $1.dependsOn.count } }

    init(parsing text: String) throws {
        var sectionIndex: [String: Int] = [:], maintainerIndex: [String: Int] = [:], packageIndex: [String: Int] = [:]
        var dependencies: [[String]] = []
        // The fields a stanza gives, read line by line as UTF-8 (a Packages file is ~50 MB: no Foundation splitting);
        // continuation lines (a description's) are skipped.
        var name: Substring?, section: Substring?, maintainer: Substring?, version: Substring?, size: Substring?
        var relations: [Substring] = []
        func endStanza() {
            defer { (name, section, maintainer, version, size, relations) = (nil, nil, nil, nil, nil, []) }
            guard let name = name.map(String.init), packageIndex[name] == nil else { return }
            let sectionName = String(section ?? "unknown"), maintainerName = String(maintainer ?? "unknown")
            if sectionIndex[sectionName] == nil { sectionIndex[sectionName] = sections.count; sections.append(sectionName) }
            if maintainerIndex[maintainerName] == nil { maintainerIndex[maintainerName] = maintainers.count; maintainers.append(maintainerName) }
            packageIndex[name] = packages.count
            packages.append(Package(name: name, version: String(version ?? ""), size: size.flatMap { Int($0) } ?? 0,
                                    section: sectionIndex[sectionName]!, maintainer: maintainerIndex[maintainerName]!))
            dependencies.append(relations.flatMap { $0.split(separator: ",") }.flatMap { $0.split(separator: "|") }.compactMap { alternative in
                alternative.split(whereSeparator: { $0 == " " || $0 == "(" }).first.map { String($0.split(separator: ":").first ?? $0) }
            })
        }
        for line in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            guard let first = line.first else { endStanza(); continue }
            guard first != UInt8(ascii: " "), first != UInt8(ascii: "\t"), let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let value = Substring(line[line.index(after: colon)...]).drop { $0 == " " }
            switch Substring(line[..<colon]) {
            case "Package": name = value
            case "Section": section = value
            case "Maintainer": maintainer = value
            case "Version": version = value
            case "Installed-Size": size = value
            case "Depends", "Pre-Depends": relations.append(value)
            default: break
            }
        }
        endStanza()
        for (position, names) in dependencies.enumerated() {
            var seen = Set<Int>()
            packages[position].dependsOn = names.compactMap { packageIndex[$0] }.filter { $0 != position && seen.insert($0).inserted }
        }
    }
}

/// The package index in both systems, and the questions asked of it.
struct PackageTrial {
    static let model: ManagedObjectModel = try! ManagedObjectModel {
        EntityDescription("Section") {
            AttributeDescription("name", .string)
            RelationshipDescription("packages", destination: "Package", inverse: "section", toMany: true)
        }
        EntityDescription("Maintainer") {
            AttributeDescription("name", .string)
            RelationshipDescription("packages", destination: "Package", inverse: "maintainer", toMany: true)
        }
        EntityDescription("Package") {
            AttributeDescription("name", .string)
            AttributeDescription("version", .string)
            AttributeDescription("size", .integer64)
            RelationshipDescription("section", destination: "Section", inverse: "packages")
            RelationshipDescription("maintainer", destination: "Maintainer", inverse: "packages")
            RelationshipDescription("dependsOn", destination: "Package", inverse: "dependents", toMany: true)
            RelationshipDescription("dependents", destination: "Package", inverse: "dependsOn", toMany: true)
            FetchIndexDescription("byName", properties: ["name"])
            FetchIndexDescription("bySectionSize", properties: ["section", "size"])
        }
    }

    static let schema = """
        CREATE TABLE section(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE maintainer(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE package(id INTEGER PRIMARY KEY, name TEXT NOT NULL, version TEXT NOT NULL, size INTEGER NOT NULL,
                             sectionId INTEGER REFERENCES section(id), maintainerId INTEGER REFERENCES maintainer(id));
        CREATE INDEX package_name ON package(name);
        CREATE INDEX package_section_size ON package(sectionId, size);
        CREATE INDEX package_maintainer ON package(maintainerId);
        CREATE TABLE dependency(packageId INTEGER NOT NULL, dependsOnId INTEGER NOT NULL, PRIMARY KEY(packageId, dependsOnId)) WITHOUT ROWID;
        CREATE INDEX dependency_target ON dependency(dependsOnId, packageId);
        """

    let index: PackageIndex
    let budget: Double
    let coordinator: PersistentStoreCoordinator
    let store: LMDBIncrementalStore
    let queue: DatabasePool
    let lmdbURL: URL, sqliteURL: URL
    /// Object IDs by position in ``index``: packages, sections, maintainers.
    var packageIDs: [ManagedObjectID] = [], sectionIDs: [ManagedObjectID] = [], maintainerIDs: [ManagedObjectID] = []
    var results: [Measurement] = []
    var notes: [String] = []

    init(index: PackageIndex, folder: URL, budget: Double) throws {
        self.index = index
        self.budget = budget
        LMDBIncrementalStore.register()
        lmdbURL = folder.appendingPathComponent("packages.lmdb")
        sqliteURL = folder.appendingPathComponent("packages.sqlite")
        coordinator = PersistentStoreCoordinator(managedObjectModel: Self.model)
        store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: lmdbURL, options: ["durability": "noSync"])
            as! LMDBIncrementalStore
        var configuration = Configuration()
        configuration.prepareDatabase { try $0.execute(sql: "PRAGMA synchronous = OFF") }
        queue = try DatabasePool(path: sqliteURL.path, configuration: configuration)
    }

    mutating func run() throws {
        try importBoth()
        try ask()
        notes.append("\(index.packages.count) packages, \(index.sections.count) sections, \(index.maintainers.count) maintainers, "
                     + "\(index.dependencyCount) dependencies. LMDB file \(formatBytes(fileSize(lmdbURL))) (\(ratio(fileSize(lmdbURL), fileSize(sqliteURL))) SQLite's), "
                     + "\(formatBytes(try compactedSize(of: lmdbURL))) compacted, SQLite files \(formatBytes(fileSize(sqliteURL))).")
    }

    // MARK: Import

    /// Sections and maintainers, then packages in saves of 10 000 with their to-ones, then the dependencies in saves
    /// of 10 000 packages — the same rows, in the same order, into both.
    private mutating func importBoth() throws {
        let clock = ContinuousClock()
        var start = clock.now
        var context = ManagedObjectContext(coordinator: coordinator)
        let sections = try index.sections.map { name in
            let section = try context.insertNewObject(forEntityName: "Section")
            try section.setValue(name, forKey: "name")
            return section
        }
        let maintainers = try index.maintainers.map { name in
            let maintainer = try context.insertNewObject(forEntityName: "Maintainer")
            try maintainer.setValue(name, forKey: "name")
            return maintainer
        }
        try context.save()
        sectionIDs = sections.map(\.objectID)
        maintainerIDs = maintainers.map(\.objectID)
        for batch in stride(from: 0, to: index.packages.count, by: 10_000) {
            context = ManagedObjectContext(coordinator: coordinator)
            let objects = try index.packages[batch..<min(batch + 10_000, index.packages.count)].map { package in
                let object = try context.insertNewObject(forEntityName: "Package")
                try object.setValue(package.name, forKey: "name")
                try object.setValue(package.version, forKey: "version")
                try object.setValue(Int64(package.size), forKey: "size")
                try object.setValue(context.object(with: sectionIDs[package.section]), forKey: "section")
                try object.setValue(context.object(with: maintainerIDs[package.maintainer]), forKey: "maintainer")
                return object
            }
            try context.save()
            packageIDs += objects.map(\.objectID)
        }
        let lmdbRows = clock.now - start
        let linksStart = clock.now
        for batch in stride(from: 0, to: index.packages.count, by: 10_000) {
            context = ManagedObjectContext(coordinator: coordinator)
            for position in batch..<min(batch + 10_000, index.packages.count) where !index.packages[position].dependsOn.isEmpty {
                try context.object(with: packageIDs[position])
                    .setValue(index.packages[position].dependsOn.map { context.object(with: packageIDs[$0]) }, forKey: "dependsOn")
            }
            try context.save()
        }
        let total = index.packages.count + index.sections.count + index.maintainers.count
        let lmdbLinks = clock.now - linksStart
        results.append(Measurement(workload: "import through the public API", system: "LMDBStore", objects: index.packages.count,
                                   operations: total, seconds: Self.seconds(clock.now - start), p50: nil, p99: nil, p999: nil))
        start = clock.now
        try queue.write { db in
            try db.execute(sql: Self.schema)
            for (position, name) in index.sections.enumerated() {
                try db.execute(sql: "INSERT INTO section(id, name) VALUES (?, ?)", arguments: [position + 1, name])
            }
            for (position, name) in index.maintainers.enumerated() {
                try db.execute(sql: "INSERT INTO maintainer(id, name) VALUES (?, ?)", arguments: [position + 1, name])
            }
        }
        for batch in stride(from: 0, to: index.packages.count, by: 10_000) {
            try queue.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO package(id, name, version, size, sectionId, maintainerId) VALUES (?, ?, ?, ?, ?, ?)")
                for position in batch..<min(batch + 10_000, index.packages.count) {
                    let package = index.packages[position]
                    try insert.execute(arguments: [position + 1, package.name, package.version, package.size, package.section + 1, package.maintainer + 1])
                }
            }
        }
        let grdbRows = clock.now - start
        let grdbLinksStart = clock.now
        for batch in stride(from: 0, to: index.packages.count, by: 10_000) {
            try queue.write { db in
                let insert = try db.cachedStatement(sql: "INSERT INTO dependency(packageId, dependsOnId) VALUES (?, ?)")
                for position in batch..<min(batch + 10_000, index.packages.count) {
                    for target in index.packages[position].dependsOn { try insert.execute(arguments: [position + 1, target + 1]) }
                }
            }
        }
        let grdbLinks = clock.now - grdbLinksStart
        results.append(Measurement(workload: "import through the public API", system: "GRDB", objects: index.packages.count,
                                   operations: total, seconds: Self.seconds(clock.now - start), p50: nil, p99: nil, p999: nil))
        // The two phases apart: which one a change of the save path moves.
        for (system, seconds) in [("LMDBStore", lmdbRows), ("GRDB", grdbRows)] {
            results.append(Measurement(workload: "↳ import: rows with their to-ones", system: system, objects: index.packages.count,
                                       operations: total, seconds: Self.seconds(seconds), p50: nil, p99: nil, p999: nil))
        }
        for (system, seconds) in [("LMDBStore", lmdbLinks), ("GRDB", grdbLinks)] {
            results.append(Measurement(workload: "↳ import: many-to-many links", system: system, objects: index.packages.count,
                                       operations: index.dependencyCount, seconds: Self.seconds(seconds), p50: nil, p99: nil, p999: nil))
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    // MARK: Questions

    /// The package and section positions the questions are about: the section with most packages, the package most
    /// depended on.
    private var busiestSection: Int {
        var counts = [Int](repeating: 0, count: index.sections.count)
        for package in index.packages { counts[package.section] += 1 }
        return counts.indices.max { counts[$0] < counts[$1] }!
    }

    private var mostDependedOn: Int {
        var counts = [Int](repeating: 0, count: index.packages.count)
        for package in index.packages { for target in package.dependsOn { counts[target] += 1 } }
        return counts.indices.max { counts[$0] < counts[$1] }!
    }

    private mutating func ask() throws {
        let section = busiestSection, target = mostDependedOn
        let sectionName = index.sections[section], targetName = index.packages[target].name
        notes.append("Questions about section \"\(sectionName)\" and the package most depended on, \"\(targetName)\".")
        let context = ManagedObjectContext(coordinator: coordinator)
        let sectionObject = context.object(with: sectionIDs[section]), targetObject = context.object(with: packageIDs[target])

        // Answers as sorted package positions (LMDB) and ids (SQLite, position + 1).
        let positions = Dictionary(uniqueKeysWithValues: packageIDs.enumerated().map { ($1, $0 + 1) })
        func ids(_ request: ObjectFetchRequest) throws -> [Int] { try context.fetchObjectIDs(request).map { positions[$0] ?? -1 }.sorted() }
        func sqlIDs(_ sql: String, _ arguments: StatementArguments = []) throws -> [Int] {
            try queue.read { try Int.fetchAll($0, sql: sql, arguments: arguments) }.sorted()
        }

        let bySection = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "section == %@", sectionObject))
        try compare("to-one equality with an object (section == %@)", bySection, try ids(bySection),
                    sql: "SELECT id FROM package WHERE sectionId = ?", [section + 1], try sqlIDs("SELECT id FROM package WHERE sectionId = ?", [section + 1]))
        let bySectionName = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "section.name == %@", sectionName))
        try compare("to-one key path (section.name == %@)", bySectionName, try ids(bySectionName),
                    sql: "SELECT package.id FROM package JOIN section ON section.id = package.sectionId WHERE section.name = ?", [sectionName],
                    try sqlIDs("SELECT package.id FROM package JOIN section ON section.id = package.sectionId WHERE section.name = ?", [sectionName]))
        let anyDepends = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "ANY dependsOn == %@", targetObject))
        let dependents = try sqlIDs("SELECT packageId FROM dependency WHERE dependsOnId = ?", [target + 1])
        try compare("reverse dependencies (ANY dependsOn == %@)", anyDepends, try ids(anyDepends),
                    sql: "SELECT packageId FROM dependency WHERE dependsOnId = ?", [target + 1], dependents)
        let inDepends = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "%@ IN dependsOn", targetObject))
        try compare("reverse dependencies (%@ IN dependsOn)", inDepends, try ids(inDepends),
                    sql: "SELECT packageId FROM dependency WHERE dependsOnId = ?", [target + 1], dependents)

        var largest = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "section == %@", sectionObject),
                                         sortDescriptors: [FetchSortDescriptor(keyPath: "size", ascending: false), FetchSortDescriptor(keyPath: "name")])
        largest.fetchLimit = 20
        let largestNames = try context.fetch(largest).map { $0.value(forKey: "name") as? String ?? "" }
        let largestSQL = "SELECT name FROM package WHERE sectionId = ? ORDER BY size DESC, name LIMIT 20"
        try check("top 20 of a section by size", largestNames == (try queue.read { try String.fetchAll($0, sql: largestSQL, arguments: [section + 1]) }))
        try time("top 20 of a section by size (names)", largest, readName: true, sql: largestSQL, [section + 1])

        var firstDependents = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "ANY dependsOn == %@", targetObject),
                                                 sortDescriptors: [FetchSortDescriptor(keyPath: "name")])
        firstDependents.fetchLimit = 50
        let firstSQL = "SELECT package.name FROM dependency JOIN package ON package.id = dependency.packageId WHERE dependency.dependsOnId = ? ORDER BY package.name LIMIT 50"
        try check("first 50 reverse dependencies by name",
                  try context.fetch(firstDependents).map { $0.value(forKey: "name") as? String ?? "" } == (try queue.read { try String.fetchAll($0, sql: firstSQL, arguments: [target + 1]) }))
        try time("first 50 reverse dependencies by name", firstDependents, readName: true, sql: firstSQL, [target + 1])

        let chosen = stride(from: 0, to: index.packages.count, by: 5).map { $0 }
        let selfIn = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "SELF IN %@", chosen.map { packageIDs[$0] }))
        let selfInSQL = "SELECT id FROM package WHERE id IN (\(chosen.map { String($0 + 1) }.joined(separator: ",")))"
        try compare("SELF IN \(chosen.count) objects", selfIn, try ids(selfIn), sql: selfInSQL, [], try sqlIDs(selfInSQL))

        let contains = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "name CONTAINS[c] %@", "python"))
        let likeSQL = "SELECT id FROM package WHERE name LIKE '%python%'"
        try compare("name CONTAINS[c] (no index)", contains, try ids(contains), sql: likeSQL, [], try sqlIDs(likeSQL))

        var loaded = ObjectFetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "section == %@", sectionObject))
        loaded.returnsObjectsAsFaults = false
        try time("a section's packages as loaded objects (names)", loaded, readName: true, sql: "SELECT * FROM package WHERE sectionId = ?", [section + 1])
    }

    private func check(_ question: String, _ same: Bool) throws {
        if !same { throw ResultMismatch(workload: question, detail: "the two systems answered differently") }
    }

    /// Checks that both answered the same, then times the request's object IDs against the SQL's ids.
    private mutating func compare(_ question: String, _ request: ObjectFetchRequest, _ mine: [Int], sql: String, _ arguments: StatementArguments,
                                  _ theirs: [Int]) throws {
        try check(question, mine == theirs && !mine.isEmpty)
        let context = ManagedObjectContext(coordinator: coordinator)
        var measurement = try measure(question + " → \(mine.count)", "LMDBStore", objects: index.packages.count, budget: budget) { _ in
            _ = try context.fetchObjectIDs(request)
        }
        measurement.plan = store.explain(request)
        results.append(measurement)
        let budget = budget
        results.append(try queue.read { db in
            let statement = try db.cachedStatement(sql: sql)
            return try measure(question + " → \(mine.count)", "GRDB", objects: index.packages.count, budget: budget) { _ in
                _ = try Int.fetchAll(statement, arguments: arguments)
            }
        })
    }

    /// Times a fetch of objects (reading each one's name when `readName`) against the SQL's rows.
    private mutating func time(_ question: String, _ request: ObjectFetchRequest, readName: Bool, sql: String, _ arguments: StatementArguments) throws {
        let coordinator = coordinator
        var measurement = try measure(question, "LMDBStore", objects: index.packages.count, budget: budget) { _ in
            let context = ManagedObjectContext(coordinator: coordinator)
            for object in try context.fetch(request) where readName { _ = object.value(forKey: "name") }
        }
        measurement.plan = store.explain(request)
        results.append(measurement)
        let budget = budget
        results.append(try queue.read { db in
            let statement = try db.cachedStatement(sql: sql)
            return try measure(question, "GRDB", objects: index.packages.count, budget: budget) { _ in
                for row in try Row.fetchAll(statement, arguments: arguments) where readName { _ = row["name"] as String? }
            }
        })
    }
}
