import Foundation
import LMDB
import LMDBStore
import ObjectGraph
import Testing

/// The `lmdbstore` tool, run as a process on stores the tests write: each subcommand's output, its exit status, and
/// what it says for bad arguments, a predicate typo and a damaged store.
@Suite struct CommandLineToolTests {
    /// What a run of the tool printed and how it ended.
    struct Run {
        let status: Int32
        let output: String
        let errors: String
        var lines: [String] { output.split(separator: "\n").map(String.init) }
    }

    /// Runs `lmdbstore` with `arguments` (its output a pipe, so it writes the machine-readable forms by default).
    func tool(_ arguments: String...) throws -> Run {
        try tool(arguments)
    }

    func tool(_ arguments: [String]) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("lmdbstore")
        process.arguments = arguments
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let said = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(status: process.terminationStatus, output: String(decoding: printed, as: UTF8.self), errors: String(decoding: said, as: UTF8.self))
    }

    static let model = try! ManagedObjectModel(entities: [
        EntityDescription("Person", properties: [
            .attribute(AttributeDescription("name", .string)),
            .attribute(AttributeDescription("age", .integer32)),
            .relationship(RelationshipDescription("team", destination: "Team", inverse: "members")),
        ], fetchIndexes: [FetchIndexDescription("byName", properties: ["name"]), FetchIndexDescription("byAge", properties: ["age"])]),
        EntityDescription("Team", properties: [
            .attribute(AttributeDescription("title", .string)),
            .relationship(RelationshipDescription("members", destination: "Person", inverse: "team", toMany: true)),
        ]),
    ])

    /// A store of 3 teams and 30 people (`p0` … `p29`, age 20 + n % 10, team n % 3), closed.
    func fixture() throws -> StoreFolder {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(Self.model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let teams = try (0..<3).map { number in
            let team = try context.insertNewObject(forEntityName: "Team")
            try team.setValue("team \(number)", forKey: "title")
            return team
        }
        for number in 0..<30 {
            let person = try context.insertNewObject(forEntityName: "Person")
            try person.setValue("p\(number)", forKey: "name")
            try person.setValue(Int32(20 + number % 10), forKey: "age")
            try person.setValue(teams[number % 3], forKey: "team")
        }
        try context.save()
        return folder
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], "\(text)")
    }

    @Test func everySubcommandHasHelp() throws {
        for command in ["stat", "model", "query", "verify", "import", "export", "dump", "migrate", "upgrade", "copy", "compact"] {
            let run = try tool(command, "--help")
            #expect(run.status == 0 && run.output.contains("USAGE: lmdbstore \(command) "), "\(command): \(run.output)\(run.errors)")
        }
        let top = try tool("--help")
        #expect(["stat", "model", "query", "verify", "import", "migrate", "copy"].allSatisfy { top.output.contains($0) })
    }

    @Test func statReportsRowsTablesAndTheFile() throws {
        let folder = try fixture()
        let run = try tool("stat", folder.file().path)
        #expect(run.status == 0, "\(run.errors)")
        let stat = try json(run.output)
        #expect(stat["rows"] as? [String: Int] == ["Person": 30, "Team": 3])
        #expect(stat["uuid"] as? String == (try LMDBIncrementalStore.readMetadata(at: folder.file()))[PersistentStoreMetadataKey.uuid])
        #expect(stat["modelHash"] as? String == Self.model.versionHashString)
        let tables = try #require(stat["tables"] as? [[String: Any]])
        let entries = Dictionary(uniqueKeysWithValues: tables.map { ($0["name"] as! String, $0["entries"] as! Int) })
        #expect(entries["rows/Person"] == 30 && entries["index/Person/byName"] == 30 && entries["toone/Person/team"] == 30)
        #expect((stat["fileSize"] as? Int ?? 0) > 0 && (stat["usedPages"] as? Int ?? 0) > 0 && stat["freePages"] is Int)

        let text = try tool("stat", folder.file().path, "--format", "text")
        #expect(text.output.contains("Person") && text.output.contains("rows/Person") && text.output.contains("free"), "\(text.output)")
        let wrong = try tool("stat", folder.file().path, "--format", "csv")
        #expect(wrong.status != 0 && wrong.errors.contains("stat writes text or json, not csv"), "\(wrong.errors)")
        // Every command names the formats it takes.
        let query = try tool("query", folder.file().path, "Person", "--format", "json")
        #expect(query.status != 0 && query.errors.contains("query writes table, jsonl or csv, not json"), "\(query.errors)")
        let imported = try tool("import", folder.file().path, "Person", "rows.txt", "--format", "table")
        #expect(imported.status != 0 && imported.errors.contains("import reads jsonl or csv, not table"), "\(imported.errors)")
    }

    @Test func modelPrintsTheKeptModelAsJSONOrAnOutline() throws {
        let folder = try fixture()
        let run = try tool("model", folder.file().path)
        #expect(run.status == 0, "\(run.errors)")
        #expect(try ManagedObjectModel(json: Data(run.output.utf8)).versionHash == Self.model.versionHash)
        let outline = try tool("model", folder.file().path, "--format", "outline")
        #expect(outline.lines.contains("Person") && outline.lines.contains("  age: Integer 32") && outline.lines.contains("  index byName (name)"),
                "\(outline.output)")
        #expect(outline.output.contains("  team -> Team, inverse members"))

        // A Core Data model file, not a store.
        let library = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("ObjectGraphTests/Fixtures/Library.xcdatamodeld")
        let coreData = try tool("model", library.path, "--format", "outline")
        #expect(coreData.status == 0 && coreData.lines.contains { !$0.hasPrefix(" ") }, "\(coreData.errors)")
        #expect(try ManagedObjectModel(json: Data(try tool("model", library.path).output.utf8)).versionHash
                == (try ManagedObjectModel(contentsOfCoreDataModel: library)).versionHash)
    }

    @Test func queryFiltersSortsWindowsCountsAndGroups() throws {
        let folder = try fixture()
        let path = folder.file().path
        let rows = try tool("query", path, "Person", "age >= 28 AND team.title == 'team 0'", "--sort", "-age,name", "--keys", "name,age")
        #expect(rows.status == 0, "\(rows.errors)")
        // Ages 28 and 29 are n % 10 == 8, 9; team 0 is n % 3 == 0: p9 (29), p18 (28).
        #expect(rows.lines == [#"{"name":"p9","age":29}"#, #"{"name":"p18","age":28}"#], "\(rows.output)")
        // Repeated options add to each other, as a comma does (the last one alone used to win, silently).
        let repeated = try tool("query", path, "Person", "age >= 28 AND team.title == 'team 0'", "--sort", "-age", "--sort", "name",
                                "--keys", "name", "--keys", "age")
        #expect(repeated.lines == rows.lines, "\(repeated.output)\(repeated.errors)")

        let window = try tool("query", path, "Person", "--sort", "name", "--limit", "2", "--offset", "1", "--format", "csv", "--keys", "name,team")
        #expect(window.lines.count == 3 && window.lines[0] == "name,team" && window.lines[1].hasPrefix("p1,x-coredata://")
                && window.lines[1].hasSuffix("/Team/p2"), "\(window.output)")

        #expect(try tool("query", path, "Person", "age < 22", "--count").output == "6\n")
        let groups = try tool("query", path, "Person", "--group-by", "team.title", "--sort", "team.title")
        #expect(groups.lines == [#"{"team.title":"team 0","count":10}"#, #"{"team.title":"team 1","count":10}"#, #"{"team.title":"team 2","count":10}"#],
                "\(groups.output)\(groups.errors)")
        let everything = try tool("query", path, "Team", "--sort", "title", "--format", "table")
        #expect(everything.lines.first?.split(separator: " ") == ["title"] && everything.lines.last == "(3 rows)", "\(everything.output)")

        let plan = try tool("query", path, "Person", "name == 'p3'", "--explain")
        #expect(plan.status == 0 && plan.output.contains("Person.byName") && plan.output.contains("→ Aggregate"), "\(plan.output)")
    }

    @Test func badArgumentsAndTyposSayWhatIsWrong() throws {
        let folder = try fixture()
        let path = folder.file().path
        let typo = try tool("query", path, "Person", "age >")
        #expect(typo.status != 0 && typo.errors.contains("the predicate does not parse") && typo.errors.contains("column"), "\(typo.errors)")
        let entity = try tool("query", path, "Persn")
        #expect(entity.status != 0 && entity.errors.contains("no entity Persn; it has Person, Team"), "\(entity.errors)")
        let key = try tool("query", path, "Person", "agee > 3")
        #expect(key.status != 0 && key.errors.contains("agee"), "\(key.errors)")
        let limit = try tool("query", path, "Person", "--limit=-1")
        #expect(limit.status != 0 && limit.errors.contains("--limit must be 0 or more"), "\(limit.errors)")
        let missing = try tool("stat", folder.file("nothing.lmdb").path)
        #expect(missing.status != 0 && missing.errors.contains("there is no store at"), "\(missing.errors)")
        let notAStore = folder.file("text.lmdb")
        try Data("not a store".utf8).write(to: notAStore)
        let foreign = try tool("verify", notAStore.path)
        #expect(foreign.status != 0 && foreign.errors.contains(notAStore.path), "\(foreign.errors)")
        let unknown = try tool("stats", path)
        #expect(unknown.status != 0 && unknown.errors.contains("stats"), "\(unknown.errors)")
    }

    @Test func verifyNamesAFlippedByteAndAMissingIndexEntry() throws {
        let folder = try fixture()
        let path = folder.file().path
        let sound = try tool("verify", path)
        #expect(sound.status == 0, "\(sound.errors)")
        #expect(try json(sound.output)["problems"] as? [String] == [], "\(sound.output)")

        // One byte of the last person's row flipped, and the first person's entry of the name index deleted.
        do {
            let environment = try Environment.open(at: path)
            let rows = try environment.openDatabase(named: "rows/Person", create: false)
            let index = try environment.openDatabase(named: "index/Person/byName", options: [.dupSort, .dupFixed], create: false)
            try environment.write { transaction in
                let (key, value) = try rows.withCursor(in: transaction) { cursor in
                    let entry = try #require(try cursor.last())
                    return (Array(entry.key), Array(entry.value))
                }
                var damaged = value
                damaged[damaged.count / 2] ^= 0x10
                try rows.put(damaged, forKey: key, in: transaction)
                try index.withCursor(in: transaction) { cursor in
                    _ = try #require(try cursor.first())
                    try cursor.deleteCurrent()
                }
            }
        }
        let damaged = try tool("verify", path, "--format", "text")
        #expect(damaged.status == 1, "\(damaged.output)\(damaged.errors)")
        #expect(damaged.lines.contains("Person row 30: the row's checksum does not match its bytes"), "\(damaged.output)")
        #expect(damaged.lines.contains("index/Person/byName: 1 entry is missing for existing rows"), "\(damaged.output)")
        #expect(damaged.lines.last?.hasSuffix("problems") == true, "\(damaged.output)")
    }

    @Test func verifyChecksThePagesFirstAndReadsNoRowThroughDamagedOnes() throws {
        let folder = try fixture()
        let path = folder.file().path
        let quick = try tool("verify", path, "--quick", "--format", "text")
        #expect(quick.status == 0 && quick.lines.last == "\(path): sound", "\(quick.output)\(quick.errors)")

        // The root page of Person's rows made a branch page: LMDB would follow its entries as child page numbers.
        var image = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let root = try #require(Self.tableRoot("rows/Person", in: image))
        image.withUnsafeMutableBytes { $0.storeBytes(of: UInt16(0x01), toByteOffset: root * 4096 + 10, as: UInt16.self) }
        try Data(image).write(to: URL(fileURLWithPath: path))
        for arguments in [[path, "--quick"], [path]] {
            let damaged = try tool(["verify"] + arguments + ["--format", "text"])
            #expect(damaged.status == 1, "\(damaged.output)\(damaged.errors)")
            #expect(damaged.lines.first == "table 'rows/Person': page \(root) at level 1 of 1 has flags 1, not those of a leaf page (2)", "\(damaged.output)")
            #expect(damaged.lines.contains { $0.hasPrefix("the rows and entries were not checked") }, "\(damaged.output)")
        }
    }

    /// The root page of table `name` in a store file's image, from its newest meta page's table of tables (one leaf).
    static func tableRoot(_ name: String, in image: [UInt8]) -> Int? {
        func load<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T { image.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: T.self) } }
        let newest = load(144, UInt64.self) > load(4096 + 144, UInt64.self) ? 0 : 4096
        let main = Int(load(newest + 88 + 40, UInt64.self)) * 4096
        guard load(main + 10, UInt16.self) == 0x02 else { return nil }
        for index in 0..<(Int(load(main + 12, UInt16.self)) - 16) / 2 {
            let node = main + Int(load(main + 16 + 2 * index, UInt16.self))
            let keySize = Int(load(node + 6, UInt16.self))
            if image[node + 8..<node + 8 + keySize].elementsEqual(name.utf8) { return Int(load(node + 8 + keySize + 40, UInt64.self)) }
        }
        return nil
    }

    @Test func importAddsRowsOrStopsNamingTheLineAndColumn() throws {
        let folder = try fixture()
        let path = folder.file().path
        let good = folder.file("people.csv"), bad = folder.file("bad.jsonl")
        try Data("years,name\n41,Ada\n36,\"Hopper, Grace\"\n".utf8).write(to: good)
        let imported = try tool("import", path, "Person", good.path, "--map", "years=age")
        #expect(imported.status == 0 && imported.output.contains("imported 2 Person rows"), "\(imported.output)\(imported.errors)")
        #expect(try tool("query", path, "Person", "age > 30", "--sort", "name", "--keys", "name,age").lines
                == [#"{"name":"Ada","age":41}"#, #"{"name":"Hopper, Grace","age":36}"#])

        try Data("{\"name\": \"Bo\", \"age\": 50}\n{\"name\": \"Cy\", \"age\": \"old\"}\n".utf8).write(to: bad)
        let refused = try tool("import", path, "Person", bad.path)
        #expect(refused.status != 0 && refused.errors.contains("line 2") && refused.errors.contains("age"), "\(refused.errors)")
        #expect(try tool("query", path, "Person", "--count").output == "32\n")
        let unknown = try tool("import", path, "Person", folder.file("people.txt").path)
        #expect(unknown.status != 0 && unknown.errors.contains("there is no file at"), "\(unknown.errors)")
        try Data("x".utf8).write(to: folder.file("people.txt"))
        let format = try tool("import", path, "Person", folder.file("people.txt").path)
        #expect(format.status != 0 && format.errors.contains("--format jsonl or --format csv"), "\(format.errors)")
    }

    @Test func migrateReportsByDefaultAndMigratesWithApply() throws {
        let folder = try fixture()
        let path = folder.file().path
        var entities = Self.model.entities
        entities[1].properties.append(.attribute(AttributeDescription("rank", .integer16, defaultValue: .integer(2))))
        let newer = try ManagedObjectModel(entities: entities)
        let modelFile = folder.file("v2.json")
        try newer.jsonData().write(to: modelFile)

        let dryRun = try tool("migrate", path, "--to", modelFile.path)
        #expect(dryRun.status == 0 && dryRun.output.contains("Team: + rank") && dryRun.output.contains("tables written: rows/Team")
                && dryRun.output.contains("dry run"), "\(dryRun.output)\(dryRun.errors)")
        #expect(try json(try tool("stat", path).output)["modelHash"] as? String == Self.model.versionHashString)

        let applied = try tool("migrate", path, "--to", modelFile.path, "--apply", "--batch-size", "2")
        #expect(applied.status == 0 && applied.output.contains("migrated"), "\(applied.output)\(applied.errors)")
        #expect(try json(try tool("stat", path).output)["modelHash"] as? String == newer.versionHashString)
        #expect(try tool("verify", path).status == 0)
        #expect(try tool("query", path, "Team", "rank == 2", "--count").output == "3\n")
        let notAModel = try tool("migrate", path, "--to", path)
        #expect(notAModel.status != 0 && notAModel.errors.contains("is not a model file"), "\(notAModel.errors)")
    }

    @Test func copyAndCompactWriteASoundCopy() throws {
        let folder = try fixture()
        let path = folder.file().path
        let copy = folder.file("copy.lmdb").path, compacted = folder.file("compacted.lmdb").path
        let copied = try tool("copy", path, copy)
        #expect(copied.status == 0 && copied.output.contains("copied"), "\(copied.errors)")
        let compact = try tool("compact", path, compacted)
        #expect(compact.status == 0 && compact.output.contains("compacted"), "\(compact.errors)")
        for file in [copy, compacted] {
            #expect(try tool("verify", file).status == 0)
            #expect(try json(try tool("stat", file).output)["rows"] as? [String: Int] == ["Person": 30, "Team": 3])
        }
        let exists = try tool("copy", path, copy)
        #expect(exists.status != 0 && exists.errors.contains("already exists"), "\(exists.errors)")

        // Renaming every person in saves of one leaves free pages behind; stat points at compact for them.
        do {
            let (coordinator, _) = try folder.coordinator(Self.model, "copy.lmdb")
            let context = ManagedObjectContext(coordinator: coordinator)
            for person in try context.fetch(FetchRequest(entityName: "Person")) {
                try person.setValue((person.value(forKey: "name") as! String) + " renamed", forKey: "name")
                try context.save()
            }
        }
        let before = try json(try tool("stat", copy).output)
        let freeBytes = (before["freePages"] as! Int) * (before["pageSize"] as! Int)
        #expect(freeBytes * 4 >= before["fileSize"] as! Int, "\(before)")
        #expect(try tool("stat", copy, "--format", "text").output.contains("lmdbstore compact \(copy)` gives it back"))

        // In place: the store itself is replaced, and stays a sound store with every row.
        let inPlace = try tool("compact", copy)
        #expect(inPlace.status == 0 && inPlace.output.contains("compacted \(copy) in place"), "\(inPlace.errors)")
        #expect(try tool("verify", copy).status == 0)
        #expect(try json(try tool("stat", copy).output)["rows"] as? [String: Int] == ["Person": 30, "Team": 3])
        #expect(try json(try tool("stat", copy).output)["freePages"] as? Int == 0)
        #expect(try !tool("stat", copy, "--format", "text").output.contains("gives it back"))
    }

    /// The fixture as an older LMDBStore left it: `format` set back (this model has no many-to-many and no constraint
    /// an index keeps, so formats 4 and 5 lay it out alike) and, before format 3, no model kept.
    func olderFormat(_ path: String, _ format: Int) throws {
        let environment = try Environment.open(at: path)
        let meta = try environment.openDatabase(named: "meta", create: false)
        try environment.write { transaction in
            try meta.put(Array(String(format).utf8), forKey: Array("format".utf8), in: transaction)
            if format < 3 { #expect(try meta.delete(key: Array("model".utf8), in: transaction)) }
        }
    }

    @Test func upgradeRewritesAnOlderFormatOnlyWhenAsked() throws {
        let folder = try fixture()
        let path = folder.file().path
        try olderFormat(path, 4)
        let before = try Data(contentsOf: folder.file())
        let refused = try tool("query", path, "Person", "--count")
        #expect(refused.status != 0 && refused.errors.contains("file format 4") && refused.errors.contains("lmdbstore upgrade \(path)"), "\(refused.errors)")
        #expect(try Data(contentsOf: folder.file()) == before, "a query does not upgrade the file")

        let upgraded = try tool("upgrade", path)
        #expect(upgraded.status == 0 && upgraded.output == "upgraded \(path) from file format 4 to \(LMDBIncrementalStore.formatVersion)\n", "\(upgraded.output)\(upgraded.errors)")
        #expect(try tool("query", path, "Person", "--count").output == "30\n")
        #expect(try tool("verify", path).status == 0)
        #expect(try tool("upgrade", path).output == "\(path) is already in file format \(LMDBIncrementalStore.formatVersion)\n")
    }

    @Test func upgradeOfAFileWithoutAModelTakesTheModelItWasWrittenWith() throws {
        let folder = try fixture()
        let path = folder.file().path
        try olderFormat(path, 2)
        let modelFile = folder.file("model.json"), otherFile = folder.file("other.json")
        try Self.model.jsonData().write(to: modelFile)
        try ManagedObjectModel(entities: [Self.model.entities[1]].map { entity in
            var entity = entity
            entity.properties.removeAll { if case .relationship = $0 { true } else { false } }
            return entity
        }).jsonData().write(to: otherFile)

        let noModel = try tool("upgrade", path)
        #expect(noModel.status != 0 && noModel.errors.contains("keeps no model") && noModel.errors.contains("--model"), "\(noModel.errors)")
        let query = try tool("query", path, "Person")
        #expect(query.status != 0 && query.errors.contains("file format 2"), "\(query.errors)")
        let wrong = try tool("upgrade", path, "--model", otherFile.path)
        #expect(wrong.status != 0 && wrong.errors.contains("another model"), "\(wrong.errors)")

        let upgraded = try tool("upgrade", path, "--model", modelFile.path)
        #expect(upgraded.status == 0 && upgraded.output.contains("from file format 2 to \(LMDBIncrementalStore.formatVersion)"), "\(upgraded.output)\(upgraded.errors)")
        #expect(try tool("model", path, "--format", "json").output == String(decoding: Self.model.jsonData(), as: UTF8.self) + "\n")
        #expect(try tool("query", path, "Team", "ANY members.age == 29", "--count").output == "3\n")
    }

    /// Teams and tags named by a unique title or name; people with a team, dates with fractions of a second, doubles
    /// (one infinite), and tags as an ordered many-to-many.
    static let keyedModel = try! ManagedObjectModel(entities: [
        EntityDescription("Person", properties: [
            .attribute(AttributeDescription("name", .string)),
            .attribute(AttributeDescription("born", .date, isOptional: true)),
            .attribute(AttributeDescription("score", .double)),
            .relationship(RelationshipDescription("team", destination: "Team", inverse: "members")),
            .relationship(RelationshipDescription("tags", destination: "Tag", inverse: "people", ordered: true)),
        ]),
        EntityDescription("Team", properties: [
            .attribute(AttributeDescription("title", .string)),
            .relationship(RelationshipDescription("members", destination: "Person", inverse: "team", toMany: true)),
        ], uniquenessConstraints: [UniquenessConstraint("title")]),
        EntityDescription("Tag", properties: [
            .attribute(AttributeDescription("name", .string)),
            .relationship(RelationshipDescription("people", destination: "Person", inverse: "tags", toMany: true)),
        ], uniquenessConstraints: [UniquenessConstraint("name")]),
    ])

    /// 2 teams, 3 tags, 8 people (`k0` … `k7`: team n % 2, tags n % 3 then (n + 1) % 3, born n + 0.25 s after
    /// 2001, score n / 3, and k7's score infinite); `filled: false` leaves the store empty.
    func keyedStore(_ folder: StoreFolder, _ name: String, filled: Bool = true) throws -> String {
        let (coordinator, _) = try folder.coordinator(Self.keyedModel, name)
        guard filled else { return folder.file(name).path }
        let context = ManagedObjectContext(coordinator: coordinator)
        func make(_ entity: String, _ key: String, _ values: [String]) throws -> [ManagedObject] {
            try values.map { value in
                let object = try context.insertNewObject(forEntityName: entity)
                try object.setValue(value, forKey: key)
                return object
            }
        }
        let teams = try make("Team", "title", ["red", "blue"]), tags = try make("Tag", "name", ["t0", "t1", "t2"])
        for (number, person) in try make("Person", "name", (0..<8).map { "k\($0)" }).enumerated() {
            try person.setValue(Date(timeIntervalSinceReferenceDate: Double(number) + 0.25), forKey: "born")
            try person.setValue(number == 7 ? Double.infinity : Double(number) / 3, forKey: "score")
            try person.setValue(teams[number % 2], forKey: "team")
            try person.setValue([tags[number % 3], tags[(number + 1) % 3]], forKey: "tags")
        }
        try context.save()
        return folder.file(name).path
    }

    /// What the tests compare between a store and its copy: every person's values and team, and each tag's people.
    func contents(_ path: String) throws -> [String] {
        try tool("query", path, "Person", "--sort", "name", "--keys", "name,born,score,team.title").lines
            + (0..<3).map { try tool("query", path, "Person", "ANY tags.name == 't\($0)'", "--sort", "name", "--keys", "name").output }
    }

    @Test func exportWritesWhatImportReadsBack() throws {
        let folder = StoreFolder()
        let source = try keyedStore(folder, "source.lmdb"), copy = try keyedStore(folder, "copy.lmdb", filled: false)
        for entity in ["Team", "Tag", "Person"] {
            let file = folder.file("\(entity).jsonl").path
            let exported = try tool("export", source, entity, "--output", file)
            #expect(exported.status == 0 && exported.errors.isEmpty, "\(entity): \(exported.errors)")
            let imported = try tool("import", copy, entity, file)
            #expect(imported.status == 0, "\(entity): \(imported.errors)")
        }
        let original = try contents(source)
        #expect(try contents(copy) == original && original.count == 11, "\(original)")
        let lines = try tool("export", source, "Person", "name == 'k7'").lines
        #expect(lines == [#"{"name":"k7","born":"2001-01-01T00:00:07.25Z","score":"Infinity","team":"blue","tags":["t1","t2"]}"#], "\(lines)")

        let csv = try tool("export", source, "Person", "score < 1", "--format", "csv")
        #expect(csv.lines == ["name,born,score,team", "k0,2001-01-01T00:00:00.25Z,0.0,red", "k1,2001-01-01T00:00:01.25Z,0.3333333333333333,blue",
                              "k2,2001-01-01T00:00:02.25Z,0.6666666666666666,red"], "\(csv.output)")
        #expect(csv.errors.contains("left out: tags (a CSV field cannot list"), "\(csv.errors)")
        let unkeyed = try fixture()
        let people = try tool("export", unkeyed.file().path, "Person")
        #expect(people.lines.count == 30 && people.errors.contains("left out: team (Team has no single uniqueness constraint"), "\(people.errors)")
        let exists = try tool("export", source, "Person", "--output", folder.file("Team.jsonl").path)
        #expect(exists.status != 0 && exists.errors.contains("already exists"), "\(exists.errors)")
        let typo = try tool("export", source, "Person", "name ==")
        #expect(typo.status != 0 && typo.errors.contains("the predicate does not parse"), "\(typo.errors)")
    }

    @Test func aDumpImportsIntoAnEmptyStoreWithEveryRelationshipAndOrder() throws {
        let folder = StoreFolder()
        let source = try keyedStore(folder, "source.lmdb")
        for (dump, format) in [("dump.json", "json"), ("dump-csv", "csv")] {
            let dumped = try tool("dump", source, folder.file(dump).path)
            #expect(dumped.status == 0 && dumped.output.contains("dumped 13 objects"), "\(dumped.output)\(dumped.errors)")
            let copy = try keyedStore(folder, "\(format).lmdb", filled: false)
            let imported = try tool("import", copy, folder.file(dump).path)
            #expect(imported.status == 0 && imported.output.contains("imported 13 objects"), "\(imported.output)\(imported.errors)")
            let original = try contents(source)
            #expect(try contents(copy) == original, "\(format)")
            #expect(try tool("verify", copy).status == 0)
            // Each person's tags in their order, read back through the store.
            let coordinator = PersistentStoreCoordinator(managedObjectModel: Self.keyedModel)
            try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file("\(format).lmdb"))
            let context = ManagedObjectContext(coordinator: coordinator)
            let people = try context.fetch(FetchRequest(entityName: "Person", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
            #expect(people.map { $0.relatedObjects(forKey: "tags").map { $0.value(forKey: "name") as? String ?? "?" } }
                    == (0..<8).map { ["t\($0 % 3)", "t\(($0 + 1) % 3)"] }, "\(format)")
        }
        let json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: folder.file("dump.json"))) as? [String: Any])
        #expect((json["entities"] as? [String: [Any]])?.mapValues(\.count) == ["Person": 8, "Team": 2, "Tag": 3])
        let again = try tool("dump", source, folder.file("dump.json").path)
        #expect(again.status != 0 && again.errors.contains("already exists"), "\(again.errors)")
        let foreign = try tool("import", source, folder.file("Missing.json").path)
        #expect(foreign.status != 0 && foreign.errors.contains("there is no dump at"), "\(foreign.errors)")
        let unkeyed = try fixture()
        let other = try tool("dump", unkeyed.file().path, folder.file("other.json").path)
        #expect(other.status == 0, "\(other.errors)")
        let mismatch = try tool("import", source, folder.file("other.json").path)
        #expect(mismatch.status != 0 && mismatch.errors.contains("is not a dump of a store with this store's model"), "\(mismatch.errors)")
    }
}
