import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing
@testable import lmdbstore_test_helper

/// Stores written with one model version and opened with the next: every change kind lightweight migration infers,
/// custom and staged migrations, and what is refused with the store left as it was.
@Suite final class MigrationTests {
    /// The contexts of the objects ``fetch(_:_:_:_:)`` returned (a context keeps its objects' values); each test has
    /// an instance of its own.
    var contexts: [ManagedObjectContext] = []

    static let automatic = LMDBIncrementalStore.Options(migratesAutomatically: true, infersMappingModel: true, migrationBatchSize: 7)

    /// A coordinator over `model` on the folder's store, opened with `options`.
    func open(_ folder: StoreFolder, _ model: ManagedObjectModel, _ options: LMDBIncrementalStore.Options = automatic) throws
        -> (PersistentStoreCoordinator, LMDBIncrementalStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: options.dictionary)
        return (coordinator, store as! LMDBIncrementalStore)
    }

    /// The objects of `entity` (matching `format`), in a context of their own that lives as long as they do.
    func fetch(_ coordinator: PersistentStoreCoordinator, _ entity: String, _ format: String? = nil, _ arguments: any PredicateArgument...) throws -> [ManagedObject] {
        let predicate = try format.map { try FetchPredicate(format: $0, argumentArray: arguments) }
        let request = FetchRequest(entityName: entity, predicate: predicate, sortDescriptors: [])
        let context = ManagedObjectContext(coordinator: coordinator)
        contexts.append(context)
        return try context.fetch(request)
    }

    /// The names of the tables the file holds.
    func tableNames(_ folder: StoreFolder) throws -> [String] {
        let environment = try Environment.open(at: folder.file().path)
        let main = try environment.openDatabase(named: nil, create: false)
        return try environment.read { transaction in
            var names: [String] = []
            try main.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    names.append(String(decoding: entry.key, as: UTF8.self))
                    return true
                }
            }
            return names
        }
    }

    /// Every entry of the file's table `name`, in order (a fetch index's or to-one's entries are duplicate values).
    func entries(_ folder: StoreFolder, _ name: String) throws -> [[UInt8]] {
        let environment = try Environment.open(at: folder.file().path)
        let table = try environment.openDatabase(named: name, options: name.hasPrefix("rows/") ? [] : [.dupSort, .dupFixed], create: false)
        return try environment.read { transaction in
            var entries: [[UInt8]] = []
            try table.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    entries.append(Array(entry.key) + [0xFF] + Array(entry.value))
                    return true
                }
            }
            return entries
        }
    }

    /// The entity tags the rows of the table `rows/<root>` name (bytes 2–3 of a row, `Docs/FORMAT.md`, after the
    /// 8-byte key and the separator ``entries(_:_:)`` puts).
    func rowTags(_ folder: StoreFolder, root: String) throws -> Set<UInt16> {
        Set(try entries(folder, "rows/\(root)").map { UInt16($0[9 + 2]) << 8 | UInt16($0[9 + 3]) })
    }

    static let v1 = try! ManagedObjectModel(entities: [
        EntityDescription("Person", properties: [
            .attribute(AttributeDescription("name", .string)),
            .attribute(AttributeDescription("age", .integer16, isOptional: true)),
            .attribute(AttributeDescription("score", .float, isOptional: true)),
            .attribute(AttributeDescription("nickname", .string, isOptional: true)),
            .relationship(RelationshipDescription("team", destination: "Team", inverse: "members")),
        ], fetchIndexes: [FetchIndexDescription("byName", properties: ["name"])]),
        EntityDescription("Team", properties: [
            .attribute(AttributeDescription("title", .string)),
            .relationship(RelationshipDescription("members", destination: "Person", inverse: "team", toMany: true)),
        ]),
        EntityDescription("Scratch", properties: [.attribute(AttributeDescription("text", .string, isOptional: true))]),
    ])

    func fill(_ folder: StoreFolder, people: Int = 25) throws {
        let (coordinator, _) = try open(folder, Self.v1, LMDBIncrementalStore.Options())
        let context = ManagedObjectContext(coordinator: coordinator)
        var teams: [ManagedObject] = []
        for number in 0..<3 {
            let team = try context.insertNewObject(forEntityName: "Team")
            try team.setValue("team \(number)", forKey: "title")
            teams.append(team)
        }
        for number in 0..<people {
            let person = try context.insertNewObject(forEntityName: "Person")
            try person.setValue("p\(number)", forKey: "name")
            try person.setValue(Int16(number), forKey: "age")
            try person.setValue(number % 2 == 0 ? Float(number) + 0.5 : nil, forKey: "score")
            try person.setValue("nick \(number)", forKey: "nickname")
            try person.setValue(teams[number % 3], forKey: "team")
        }
        try context.insertNewObject(forEntityName: "Scratch").setValue("gone", forKey: "text")
        try context.save()
    }

    /// Entities and attributes renamed, added (indexed, with a default), removed and widened; an entity removed.
    static let v2 = try! ManagedObjectModel(entities: [
        EntityDescription("Member", properties: [
            .attribute(AttributeDescription("fullName", .string, renamingIdentifier: "name")),
            .attribute(AttributeDescription("age", .integer64, isOptional: true)),
            .attribute(AttributeDescription("score", .double, isOptional: true)),
            .attribute(AttributeDescription("level", .integer32, defaultValue: .integer(1))),
            .relationship(RelationshipDescription("team", destination: "Team", inverse: "members")),
        ], fetchIndexes: [FetchIndexDescription("byName", properties: ["fullName"]), FetchIndexDescription("byLevel", properties: ["level"])],
           renamingIdentifier: "Person"),
        EntityDescription("Team", properties: [
            .attribute(AttributeDescription("title", .string)),
            .relationship(RelationshipDescription("members", destination: "Member", inverse: "team", toMany: true)),
        ]),
    ])

    @Test func attributesAndEntitiesAddedRenamedRemovedAndWidenedAreMigratedInPlace() throws {
        let folder = StoreFolder()
        try fill(folder)
        let report = try LMDBIncrementalStore.migrationReport(at: folder.file(), to: Self.v2)
        #expect(report.rowCounts == ["Person": 25, "Team": 3, "Scratch": 1])
        #expect(report.description.contains("Member ← Person: fullName ← name; age Integer 16 → Integer 64") && report.description.contains("[25 rows]"),
                "\(report)")
        #expect(report.description.contains("Scratch: removed, with its rows"))
        #expect(report.keptTables.isEmpty && report.writtenTables.contains("rows/Team") && report.description.contains("tables kept: none"), "\(report)")

        let (coordinator, store) = try open(folder, Self.v2)
        #expect(store.metadata[PersistentStoreMetadataKey.modelVersionHash] == Self.v2.versionHashString)
        let members = try fetch(coordinator, "Member")
        #expect(members.count == 25)
        for member in members {
            let name = member.value(forKey: "fullName") as! String
            let number = Int(name.dropFirst())!
            #expect(member.value(forKey: "age") as? Int64 == Int64(number))
            #expect(member.value(forKey: "score") as? Double == (number % 2 == 0 ? Double(number) + 0.5 : nil))
            #expect(member.value(forKey: "level") as? Int32 == 1)
            #expect((member.value(forKey: "team") as? ManagedObject)?.value(forKey: "title") as? String == "team \(number % 3)")
        }
        // The indexes were built for the new model: an equality on either is answered, and agrees with a scan.
        #expect(try fetch(coordinator, "Member", "level == 1").count == 25)
        #expect(try fetch(coordinator, "Member", "fullName == %@", "p7").count == 1)
        let team = try #require(try fetch(coordinator, "Team", "title == 'team 1'").first)
        #expect(team.relatedObjects(forKey: "members").count == 8)
        #expect(try store.verify().isEmpty)
        // New objects get keys after the old ones, and the migrated store saves.
        let context = ManagedObjectContext(coordinator: coordinator)
        let added = try context.insertNewObject(forEntityName: "Member")
        try added.setValue("new", forKey: "fullName")
        try context.save()
        #expect(try fetch(coordinator, "Member").count == 26)
        // The old model's tables and the staged copies are gone.
        let names = try tableNames(folder)
        #expect(!names.contains { $0.hasPrefix("~migration/") || $0.hasPrefix("rows/Person") || $0.contains("Scratch") }, "\(names)")
        #expect(names.contains("index/Member/byLevel"))
    }

    @Test func withoutTheOptionsAStoreOfAnotherVersionIsRefusedWithWhatToDo() throws {
        let folder = StoreFolder()
        try fill(folder, people: 2)
        let before = try Data(contentsOf: folder.file())
        let refused = try #require(throws: ManagedObjectContextError.self) { try open(folder, Self.v2, LMDBIncrementalStore.Options()) }
        #expect(refused.message.contains("NSMigratePersistentStoresAutomaticallyOption") && refused.message.contains("NSInferMappingModelAutomaticallyOption"),
                "\(refused.message)")
        let noInference = try #require(throws: ManagedObjectContextError.self) {
            try open(folder, Self.v2, LMDBIncrementalStore.Options(migratesAutomatically: true))
        }
        #expect(noInference.message.contains("NSInferMappingModelAutomaticallyOption is not"), "\(noInference.message)")
        #expect(try Data(contentsOf: folder.file()) == before, "nothing was written")
        // A wrong value of a migration option is refused by name; Core Data's spellings are taken.
        let coordinator = PersistentStoreCoordinator(managedObjectModel: Self.v2)
        let bad = try #require(throws: ManagedObjectContextError.self) {
            try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(),
                                               options: ["NSMigratePersistentStoresAutomaticallyOption": "maybe"])
        }
        #expect(bad.code == .wrongValueType && bad.message.contains("NSMigratePersistentStoresAutomaticallyOption"))
        _ = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(),
                                               options: ["NSMigratePersistentStoresAutomaticallyOption": "YES", "NSInferMappingModelAutomaticallyOption": "1"])
        #expect(try ManagedObjectContext(coordinator: coordinator).fetch(FetchRequest(entityName: "Member")).count == 2)
    }

    /// A store of this process still open with the old model would read and write the old layout after the
    /// migration: the migration waits until it is released.
    @Test func aStoreOfThisProcessOpenWithTheOldModelHoldsTheMigrationBack() throws {
        let folder = StoreFolder()
        try fill(folder, people: 3)
        var (old, _) = try open(folder, Self.v1, LMDBIncrementalStore.Options()) as (PersistentStoreCoordinator?, LMDBIncrementalStore)
        let error = try #require(throws: ManagedObjectContextError.self) { try open(folder, Self.v2) }
        #expect(error.message.contains("1 other store of this process has it open"), "\(error.message)")
        #expect(try fetch(old!, "Person").count == 3, "the open store still reads the old rows")
        contexts.removeAll()
        old = nil
        let (coordinator, _) = try open(folder, Self.v2)
        #expect(try fetch(coordinator, "Member").count == 3)
    }

    /// A new uniqueness constraint the stored rows break names both rows, and the store stays the old one.
    @Test func aNewConstraintTheRowsBreakIsRefusedNamingTheRowsAndNothingChanges() throws {
        let folder = StoreFolder()
        try fill(folder, people: 10)
        var entities = Self.v1.entities
        entities[0].uniquenessConstraints = [UniquenessConstraint("age")]
        entities[0].properties[1] = .attribute(AttributeDescription("age", .integer16, isOptional: true))
        // Two people of one age.
        do {
            let (coordinator, _) = try open(folder, Self.v1, LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            let person = try #require(try context.fetch(FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "name == 'p3'"))).first)
            try person.setValue(Int16(4), forKey: "age")
            try context.save()
        }
        let constrained = try ManagedObjectModel(entities: entities)
        let error = try #require(throws: ManagedObjectContextError.self) { try open(folder, constrained) }
        #expect(error.code == .migrationFailed)
        #expect(error.message.contains("(age) of Person") && error.message.contains("age = 4") && error.message.contains("/Person/p") && error.message.contains("nothing was changed"),
                "\(error.message)")
        // Both rows: p3 (key 4, given age 4 above) and p4 (key 5).
        #expect(error.message.contains("/Person/p4 and x-coredata://") && error.message.contains("/Person/p5 (age = 4)"), "\(error.message)")
        let (coordinator, store) = try open(folder, Self.v1, LMDBIncrementalStore.Options())
        #expect(try fetch(coordinator, "Person").count == 10)
        #expect(try store.verify().isEmpty)
        #expect(!(try tableNames(folder)).contains { $0.hasPrefix("~migration/") })
    }

    /// A migration writes only the tables it changes: an attribute added to Team rewrites Team's rows and builds
    /// its index, while Person's rows, index and to-one entries and Scratch's rows stay as they are, byte for byte —
    /// and the store reads and verifies as the new model's.
    @Test func tablesAMigrationDoesNotChangeStayAsTheyAre() throws {
        let folder = StoreFolder()
        try fill(folder, people: 12)
        let kept = ["index/Person/byName", "toone/Person/team", "rows/Scratch", "rows/Person"]
        let before = try kept.map { try entries(folder, $0) }
        var entities = Self.v1.entities
        entities[1].properties.append(.attribute(AttributeDescription("rank", .integer32, defaultValue: .integer(3))))
        entities[1].fetchIndexes = [FetchIndexDescription("byRank", properties: ["rank"])]
        let v2 = try ManagedObjectModel(entities: entities)
        let report = try LMDBIncrementalStore.migrationReport(at: folder.file(), to: v2)
        #expect(report.writtenTables == ["index/Team/byRank", "rows/Team"])
        #expect(report.keptTables == ["index/Person/byName", "rows/Person", "rows/Scratch", "toone/Person/team"])
        #expect(report.description.contains("tables written: index/Team/byRank, rows/Team"), "\(report)")
        do {
            let (coordinator, store) = try open(folder, v2)
            #expect(try store.verify().isEmpty)
            #expect(try fetch(coordinator, "Team", "rank == 3").count == 3)
            #expect(try fetch(coordinator, "Person", "name == 'p7' AND team.rank == 3").count == 1)
            #expect(try kept.map { try entries(folder, $0) } == before)
            #expect(!(try tableNames(folder)).contains { $0.hasPrefix("~migration/") })
            contexts = []
        }

        // An index added alone builds the index and rewrites no row.
        let rows = try ["rows/Person", "rows/Team", "rows/Scratch"].map { try entries(folder, $0) }
        entities[0].fetchIndexes.append(FetchIndexDescription("byAge", properties: ["age"]))
        let v3 = try ManagedObjectModel(entities: entities)
        let (reopened, indexed) = try open(folder, v3)
        #expect(try indexed.verify().isEmpty)
        #expect(try fetch(reopened, "Person", "age >= 10").count == 2)
        #expect(try entries(folder, "index/Person/byAge").count == 12)
        #expect(try ["rows/Person", "rows/Team", "rows/Scratch"].map { try entries(folder, $0) } == rows)
    }

    /// A many-to-many's tables stay when an attribute is added to one side: its pairs are already the new model's.
    @Test func aManyToManyStaysWhenAnAttributeIsAdded() throws {
        func model(ranked: Bool) throws -> ManagedObjectModel {
            try ManagedObjectModel(entities: [
                EntityDescription("Post", properties: [
                    .attribute(AttributeDescription("title", .string)),
                    .relationship(RelationshipDescription("tags", destination: "Tag", inverse: "posts", toMany: true)),
                ] + (ranked ? [.attribute(AttributeDescription("rank", .integer16, defaultValue: .integer(0)))] : [])),
                EntityDescription("Tag", properties: [
                    .attribute(AttributeDescription("name", .string)),
                    .relationship(RelationshipDescription("posts", destination: "Post", inverse: "tags", toMany: true)),
                ]),
            ])
        }
        let folder = StoreFolder()
        do {
            let (coordinator, _) = try open(folder, try model(ranked: false), LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            let tags = try (0..<3).map { number in
                let tag = try context.insertNewObject(forEntityName: "Tag")
                try tag.setValue("t\(number)", forKey: "name")
                return tag
            }
            for number in 0..<8 {
                let post = try context.insertNewObject(forEntityName: "Post")
                try post.setValue("post \(number)", forKey: "title")
                try post.setValue(Set(tags.enumerated().filter { number % ($0.offset + 1) == 0 }.map(\.element)), forKey: "tags")
            }
            try context.save()
        }
        let links = ["members/Post/tags", "members/Tag/posts"]
        let before = try links.map { try entries(folder, $0) }
        let ranked = try model(ranked: true)
        let report = try LMDBIncrementalStore.migrationReport(at: folder.file(), to: ranked)
        #expect(report.writtenTables == ["rows/Post"] && report.keptTables == links + ["rows/Tag"], "\(report)")
        let (coordinator, store) = try open(folder, ranked)
        #expect(try store.verify().isEmpty)
        #expect(try links.map { try entries(folder, $0) } == before)
        #expect(try fetch(coordinator, "Post", "ANY tags.name == 't1' AND rank == 0").count == 4)
        #expect(try fetch(coordinator, "Tag", "name == 't2'").first.map { try $0.objectIDs(forRelationshipNamed: "posts").count } == 3)
    }

    /// Entity tags are in every row and entry: an entity added before the others in name order renumbers them, and
    /// every row is written again.
    @Test func anEntityThatRenumbersTheOthersRewritesEveryTable() throws {
        let folder = StoreFolder()
        try fill(folder, people: 6)
        var entities = Self.v1.entities
        entities.append(EntityDescription("Address", properties: [.attribute(AttributeDescription("street", .string, isOptional: true))]))
        let v2 = try ManagedObjectModel(entities: entities)
        let (coordinator, store) = try open(folder, v2)
        #expect(try store.verify().isEmpty)
        let layout = StoreLayout(model: v2)
        for root in ["Person", "Team", "Scratch"] {
            #expect(try rowTags(folder, root: root) == [layout.entity(root)!.tag], "rows/\(root)")
            #expect(layout.entity(root)!.tag != StoreLayout(model: Self.v1).entity(root)!.tag, "\(root) is renumbered")
        }
        #expect(try fetch(coordinator, "Person", "team.title == 'team 1'").count == 2)
    }

    @Test func aConstraintTheRowsKeepIsAddedAndEnforced() throws {
        let folder = StoreFolder()
        try fill(folder, people: 10)
        var entities = Self.v1.entities
        entities[0].uniquenessConstraints = [UniquenessConstraint("name")]
        let (coordinator, store) = try open(folder, try ManagedObjectModel(entities: entities))
        #expect(try store.verify().isEmpty)
        let context = ManagedObjectContext(coordinator: coordinator)
        try context.insertNewObject(forEntityName: "Person").setValue("p3", forKey: "name")
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
    }

    /// An attribute made required takes its default where rows hold NULL, one made optional keeps its values; a
    /// relationship, an index and a uniqueness constraint removed take their tables with them.
    @Test func attributesMadeRequiredOrOptionalAndRemovedRelationshipsIndexesAndConstraints() throws {
        let folder = StoreFolder()
        var entities = Self.v1.entities
        entities[0].uniquenessConstraints = [UniquenessConstraint("name")]
        let constrained = try ManagedObjectModel(entities: entities)
        do {
            let (coordinator, _) = try open(folder, constrained, LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            let team = try context.insertNewObject(forEntityName: "Team")
            try team.setValue("t", forKey: "title")
            for number in 0..<6 {
                let person = try context.insertNewObject(forEntityName: "Person")
                try person.setValue("p\(number)", forKey: "name")
                if number % 2 == 0 { try person.setValue("n\(number)", forKey: "nickname") }
                try person.setValue(team, forKey: "team")
            }
            try context.save()
        }
        let v2 = try ManagedObjectModel(entities: [
            EntityDescription("Person", properties: [
                .attribute(AttributeDescription("name", .string, isOptional: true)),
                .attribute(AttributeDescription("nickname", .string, defaultValue: .string("none"))),
            ]),
            EntityDescription("Team", properties: [.attribute(AttributeDescription("title", .string))]),
        ])
        let (coordinator, store) = try open(folder, v2)
        let nicknames = Dictionary(uniqueKeysWithValues: try fetch(coordinator, "Person").map {
            ($0.value(forKey: "name") as! String, $0.value(forKey: "nickname") as! String)
        })
        #expect(nicknames == ["p0": "n0", "p1": "none", "p2": "n2", "p3": "none", "p4": "n4", "p5": "none"])
        #expect(try fetch(coordinator, "Person", "nickname == 'none'").count == 3)
        #expect(try store.verify().isEmpty)
        let names = try tableNames(folder)
        #expect(!names.contains { $0.hasPrefix("index/") || $0.hasPrefix("unique/") || $0.hasPrefix("toone/") || $0.hasPrefix("~") }, "\(names)")
        // The constraint is gone: a second "p1" saves.
        let context = ManagedObjectContext(coordinator: coordinator)
        try context.insertNewObject(forEntityName: "Person").setValue("p1", forKey: "name")
        try context.save()
    }

    static let schoolsV1 = try! ManagedObjectModel(entities: [
        EntityDescription("Student", properties: [
            .attribute(AttributeDescription("name", .string)),
            .relationship(RelationshipDescription("school", destination: "School", inverse: "students")),
        ]),
        EntityDescription("School", properties: [
            .attribute(AttributeDescription("name", .string)),
            .relationship(RelationshipDescription("students", destination: "Student", inverse: "school", toMany: true)),
        ]),
    ])

    /// A to-one made to-many (many-to-one → many-to-many), and a to-many made ordered: the memberships come over.
    @Test func relationshipsMadeToManyOrOrderedKeepTheirDestinations() throws {
        let folder = StoreFolder()
        do {
            let (coordinator, _) = try open(folder, Self.schoolsV1, LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            let schools = try (0..<2).map { number in
                let school = try context.insertNewObject(forEntityName: "School")
                try school.setValue("s\(number)", forKey: "name")
                return school
            }
            for number in 0..<9 {
                let student = try context.insertNewObject(forEntityName: "Student")
                try student.setValue("st\(number)", forKey: "name")
                if number < 8 { try student.setValue(schools[number % 2], forKey: "school") }
            }
            try context.save()
        }
        let v2 = try ManagedObjectModel(entities: [
            EntityDescription("Student", properties: [
                .attribute(AttributeDescription("name", .string)),
                .relationship(RelationshipDescription("schools", destination: "School", inverse: "students", toMany: true, renamingIdentifier: "school")),
            ]),
            EntityDescription("School", properties: [
                .attribute(AttributeDescription("name", .string)),
                .relationship(RelationshipDescription("students", destination: "Student", inverse: "schools", ordered: true)),
            ]),
        ])
        let (coordinator, store) = try open(folder, v2)
        for student in try fetch(coordinator, "Student") {
            let number = Int((student.value(forKey: "name") as! String).dropFirst(2))!
            let schools = student.relatedObjects(forKey: "schools").map { $0.value(forKey: "name") as! String }
            #expect(schools == (number < 8 ? ["s\(number % 2)"] : []), "st\(number)")
        }
        let school = try #require(try fetch(coordinator, "School", "name == 's1'").first)
        let students = school.relatedObjects(forKey: "students").map { $0.value(forKey: "name") as! String }
        #expect(students == ["st1", "st3", "st5", "st7"])
        #expect(try store.verify().isEmpty)
    }

    /// A custom mapping computes what cannot be inferred; its bad values and errors leave the store as it was.
    @Test func aCustomMappingComputesValuesAndItsFailuresChangeNothing() throws {
        let folder = StoreFolder()
        try fill(folder, people: 12)
        var entities = Self.v1.entities
        entities[0].properties[0] = .attribute(AttributeDescription("name", .integer64))  // String → Integer 64
        let numbered = try ManagedObjectModel(entities: entities)
        // Not inferable, so the automatic migration refuses it by name.
        let refused = try #require(throws: ManagedObjectContextError.self) { try open(folder, numbered) }
        #expect(refused.message.contains("Person.name changes type from String"), "\(refused.message)")

        let wrongType = CustomEntityMapping(entityName: "Person", computing: ["name"]) { _ in ["name": .string("x")] }
        let error = try #require(throws: ManagedObjectContextError.self) {
            try LMDBIncrementalStore.migrateStore(at: folder.file(), through: [.custom(numbered, [wrongType])], options: Self.automatic)
        }
        #expect(error.message.contains("Person.name") && error.message.contains("not Integer 64"), "\(error.message)")
        struct Refusal: Error {}
        let throwing = CustomEntityMapping(entityName: "Person", computing: ["name"]) { row in
            guard row.string("name") != "p9" else { throw Refusal() }
            return ["name": .integer(1)]
        }
        let thrown = try #require(throws: ManagedObjectContextError.self) {
            try LMDBIncrementalStore.migrateStore(at: folder.file(), through: [.custom(numbered, [throwing])], options: Self.automatic)
        }
        #expect(thrown.message.contains("custom mapping of Person failed") && thrown.message.contains("Refusal"), "\(thrown.message)")
        do {
            let (coordinator, store) = try open(folder, Self.v1, LMDBIncrementalStore.Options())
            #expect(try fetch(coordinator, "Person", "name == 'p9'").count == 1)
            #expect(try store.verify().isEmpty)
        }
        contexts.removeAll()  // the old model's store is released before the migration
        let numbering = CustomEntityMapping(entityName: "Person", computing: ["name"]) { row in
            ["name": row.string("name").flatMap { Int64($0.dropFirst()) }.map { .integer($0 * 10) }]
        }
        let mappings = try LMDBIncrementalStore.migrateStore(at: folder.file(), through: [.custom(numbered, [numbering])], options: Self.automatic)
        #expect(mappings.count == 1 && mappings[0].description.contains("name computed"))
        let (coordinator, _) = try open(folder, numbered, LMDBIncrementalStore.Options())
        #expect(Set(try fetch(coordinator, "Person").map { $0.value(forKey: "name") as! Int64 }) == Set((0..<12).map { Int64($0 * 10) }))
        #expect(try fetch(coordinator, "Person", "name == 90").count == 1, "the index over the computed value")
    }

    /// Several versions in order, from whichever the store has; a store already at the last is left alone.
    @Test func aStagedMigrationStepsThroughEveryVersionAfterTheStores() throws {
        let folder = StoreFolder()
        try fill(folder, people: 5)
        var entities = Self.v2.entities
        entities[0].properties.append(.attribute(AttributeDescription("motto", .string, isOptional: true)))
        let v3 = try ManagedObjectModel(entities: entities)
        let motto = CustomEntityMapping(entityName: "Member", computing: ["motto"]) { row in ["motto": .string("I am \(row.string("fullName") ?? "?")")] }
        let stages: [MigrationStage] = [.lightweight(Self.v1), .lightweight(Self.v2), .custom(v3, [motto])]
        let firstStepTables = try LMDBIncrementalStore.migrationReport(at: folder.file(), to: Self.v2).writtenTables.count
        var reports: [(step: Int, steps: Int, progress: MigrationProgress)] = []
        let steps = try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages) { reports.append(($0, $1, $2)) }
        #expect(steps.count == 2)
        // Each step reports its staging parts, then each table it installs, in order, ending with the last.
        #expect(Set(reports.map(\.step)) == [1, 2] && reports.allSatisfy { $0.steps == 2 })
        for step in [1, 2] {
            let ofStep = reports.filter { $0.step == step }.map(\.progress)
            let staging = ofStep.prefix { $0.phase == .staging }, installing = ofStep.drop { $0.phase == .staging }
            #expect(staging.last.map { $0.part == $0.partCount } == true && staging.map(\.part) == staging.map(\.part).sorted(), "\(ofStep)")
            #expect(installing.allSatisfy { $0.phase == .installing && $0.table != nil } && installing.last.map { $0.part == $0.partCount } == true, "\(ofStep)")
            #expect(step != 1 || Set(installing.compactMap(\.table)).count == firstStepTables, "the first step installs the tables its report names: \(ofStep)")
        }
        do {
            let (coordinator, store) = try open(folder, v3, LMDBIncrementalStore.Options())
            let member = try #require(try fetch(coordinator, "Member", "fullName == 'p2'").first)
            #expect(member.value(forKey: "motto") as? String == "I am p2")
            #expect(member.value(forKey: "level") as? Int32 == 1)
            #expect(try store.verify().isEmpty)
            #expect(try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages).isEmpty, "nothing to do, even while it is open")
        }
        contexts.removeAll()
        // A step that cannot be inferred stops the migration there, the store keeping the version before.
        entities[0].properties[0] = .attribute(AttributeDescription("fullName", .integer64))
        let failed = try #require(throws: ManagedObjectContextError.self) {
            try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages + [.lightweight(try ManagedObjectModel(entities: entities))])
        }
        #expect(failed.code == .migrationFailed && failed.message.contains("Member.fullName"), "\(failed.message)")
        #expect(try LMDBIncrementalStore.readMetadata(at: folder.file())[PersistentStoreMetadataKey.modelVersionHash] == v3.versionHashString)
    }

    /// The fixture's two Core Data model versions: a to-many made ordered, an attribute and an entity added.
    @Test func theFixtureXcdatamodeldVersionsMigrate() throws {
        let bundle = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("ObjectGraphTests/Fixtures/Library.xcdatamodeld")
        let stages = try MigrationStage.stages(ofCoreDataModel: bundle)
        #expect(stages.count == 2)
        let folder = StoreFolder()
        do {
            let (coordinator, _) = try open(folder, stages[0].model, LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            let author = try context.insertNewObject(forEntityName: "Author")
            try author.setValue("Le Guin", forKey: "name")
            for title in ["Earthsea", "Lathe", "Dispossessed"] {
                let book = try context.insertNewObject(forEntityName: "Book")
                try book.setValue(title, forKey: "title")
                try book.setValue(author, forKey: "author")
            }
            try context.save()
        }
        try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages)
        let (coordinator, store) = try open(folder, stages[1].model, LMDBIncrementalStore.Options())
        let author = try #require(try fetch(coordinator, "Author").first)
        let books = author.relatedObjects(forKey: "books").map { $0.value(forKey: "title") as! String }
        #expect(Set(books) == ["Earthsea", "Lathe", "Dispossessed"] && books.count == 3)
        #expect(try fetch(coordinator, "Book", "isbn == nil").count == 3)
        #expect(try store.verify().isEmpty)
    }

    /// An entity moved out of its hierarchy takes its rows, with their keys, to a table of its own.
    @Test func anEntityMovedOutOfItsHierarchyKeepsItsRows() throws {
        let v1 = try ManagedObjectModel(entities: [
            EntityDescription("Vehicle", properties: [.attribute(AttributeDescription("wheels", .integer16))]),
            EntityDescription("Car", parent: "Vehicle", properties: [.attribute(AttributeDescription("brand", .string))]),
        ])
        let folder = StoreFolder()
        do {
            let (coordinator, _) = try open(folder, v1, LMDBIncrementalStore.Options())
            let context = ManagedObjectContext(coordinator: coordinator)
            for number in 0..<4 {
                let object = try context.insertNewObject(forEntityName: number % 2 == 0 ? "Car" : "Vehicle")
                try object.setValue(Int16(number), forKey: "wheels")
                if number % 2 == 0 { try object.setValue("b\(number)", forKey: "brand") }
            }
            try context.save()
        }
        let v2 = try ManagedObjectModel(entities: [
            EntityDescription("Vehicle", properties: [.attribute(AttributeDescription("wheels", .integer16))]),
            EntityDescription("Car", properties: [
                .attribute(AttributeDescription("wheels", .integer16)), .attribute(AttributeDescription("brand", .string)),
            ]),
        ])
        let (coordinator, store) = try open(folder, v2)
        #expect(try fetch(coordinator, "Vehicle").count == 2)
        #expect(Set(try fetch(coordinator, "Car").map { $0.value(forKey: "brand") as! String }) == ["b0", "b2"])
        #expect(try store.verify().isEmpty)
        let context = ManagedObjectContext(coordinator: coordinator)
        let car = try context.insertNewObject(forEntityName: "Car")
        try car.setValue("new", forKey: "brand")
        try car.setValue(Int16(4), forKey: "wheels")
        try context.save()
        #expect(try fetch(coordinator, "Car").count == 3)
    }
}

/// A migration killed at random moments: the store always opens as the old version (the staged copy dropped) or as
/// the new one (the migration resumed and finished), with every row and sound indexes.
@Suite(.serialized) struct MigrationKillTests {
    static let items = 1_500

    /// Checks the store at `url` holds every item, as version `version` writes it, with sound tables.
    func check(_ coordinator: PersistentStoreCoordinator, _ store: LMDBIncrementalStore, version: Int, round: Int) throws {
        #expect(try store.verify().isEmpty, "round \(round)")
        let context = ManagedObjectContext(coordinator: coordinator)
        let items = try context.fetch(FetchRequest(entityName: version == 1 ? "Item" : "Entry"))
        #expect(items.count == Self.items, "round \(round): \(items.count) rows")
        let name = version == 1 ? "label" : "title"
        let wrong = items.filter { item in
            let number = version == 1 ? Int64(item.value(forKey: "number") as! Int32) : item.value(forKey: "number") as! Int64
            return item.value(forKey: name) as? String != "item \(number)"
                || (item.value(forKey: "group") as? ManagedObject)?.value(forKey: "name") as? String != "g\(number % 10)"
                || (version == 2 && item.value(forKey: "status") as? Int16 != 3)
        }
        #expect(wrong.isEmpty, "round \(round): \(wrong.count) rows differ")
        if version == 2 {
            let indexed = try context.fetch(FetchRequest(entityName: "Entry", predicate: try FetchPredicate(format: "status == 3 AND title == 'item 77'")))
            #expect(indexed.count == 1, "round \(round)")
        }
    }

    /// Another process with the store open would go on using the old layout: the migration is refused, naming why,
    /// and runs once that process has closed it.
    @Test func aStoreOpenInAnotherProcessIsNotMigrated() throws {
        let folder = StoreFolder()
        do {
            let (coordinator, _) = try folder.coordinator(migrationModel(version: 1))
            let context = ManagedObjectContext(coordinator: coordinator)
            let group = try context.insertNewObject(forEntityName: "Group")
            try group.setValue("g0", forKey: "name")
            try context.save()
        }
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: helperPath())
        holder.arguments = ["read-concurrently", folder.file().path, "1", "30"]
        let pipe = Pipe()
        holder.standardOutput = pipe
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        var line: [UInt8] = []
        while let byte = try pipe.fileHandleForReading.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") { line.append(byte) }
        #expect(String(decoding: line, as: UTF8.self).hasPrefix("ready"))
        let stages: [MigrationStage] = [.lightweight(migrationModel(version: 2))]
        let refused = try #require(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages) }
        #expect(refused.message.contains("while another process has it open"), "\(refused.message)")
        kill(holder.processIdentifier, SIGKILL)
        holder.waitUntilExit()
        #expect(try LMDBIncrementalStore.migrateStore(at: folder.file(), through: stages).count == 1)
    }

    @Test func killingAMigrationAtRandomMomentsLeavesTheOldStoreOrAResumableOne() throws {
        let folder = StoreFolder()
        let pristine = folder.file("pristine.lmdb")
        do {
            let (coordinator, _) = try folder.coordinator(migrationModel(version: 1), "pristine.lmdb")
            let context = ManagedObjectContext(coordinator: coordinator)
            let groups = try (0..<10).map { number in
                let group = try context.insertNewObject(forEntityName: "Group")
                try group.setValue("g\(number)", forKey: "name")
                return group
            }
            for number in 0..<Self.items {
                let item = try context.insertNewObject(forEntityName: "Item")
                try item.setValue(Int32(number), forKey: "number")
                try item.setValue("item \(number)", forKey: "label")
                try item.setValue(groups[number % 10], forKey: "group")
            }
            try context.save()
        }
        let path = folder.file().path
        func resetStore() throws {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
            try FileManager.default.copyItem(at: pristine, to: folder.file())
        }
        func line(_ output: FileHandle) throws -> String {
            var line: [UInt8] = []
            while let byte = try output.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") { line.append(byte) }
            return String(decoding: line, as: UTF8.self)
        }
        /// Starts the helper's migration and returns once it is about to open the store, so that the time it takes
        /// to start (much longer under a sanitizer) does not decide where a kill lands.
        func startMigration() throws -> (Process, FileHandle) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: helperPath())
            process.arguments = ["migrate", path, "40"]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            #expect(try line(pipe.fileHandleForReading) == "opening")
            return (process, pipe.fileHandleForReading)
        }
        // One migration left to finish measures how long one takes on this machine (and build), from opening the
        // store to having opened it; kills then land at random moments of that span and a little beyond it.
        try resetStore()
        let clock = ContinuousClock()
        let (timed, output) = try startMigration()
        let began = clock.now
        #expect(try line(output) == "done")
        let span = clock.now - began
        timed.waitUntilExit()
        #expect(timed.terminationStatus == 0)
        let spanMicroseconds = span.components.seconds * 1_000_000 + span.components.attoseconds / 1_000_000_000_000
        let window = UInt64(max(2_000, spanMicroseconds * 5 / 4))
        var random = SplitMix64(seed: 21)
        var outcomes: [String: Int] = [:]
        // Under a sanitizer (`make sanitize`) a migration takes several times as long: fewer rounds, the same spread.
        let kills = ProcessInfo.processInfo.environment["LMDBSTORE_SANITIZER"] == nil ? 110 : 40
        for round in 0..<kills {
            try resetStore()
            let (process, _) = try startMigration()
            usleep(UInt32(random.next() % window))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal || process.terminationStatus == 0, "round \(round)")
            // Every other round first opens with the old model: the store is old (the staged copy dropped) unless the
            // migration had committed; then with the new one, which resumes or finishes it.
            if round % 2 == 0 {
                let coordinator = PersistentStoreCoordinator(managedObjectModel: migrationModel(version: 1))
                if let store = try? coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file()) as? LMDBIncrementalStore {
                    try check(coordinator, store, version: 1, round: round)
                    outcomes["old", default: 0] += 1
                    continue
                }
            }
            let pending = try LMDBIncrementalStore.storedMetadata(at: folder.file())["migration"]
            let migrated = try LMDBIncrementalStore.readMetadata(at: folder.file())[PersistentStoreMetadataKey.modelVersionHash]
                == migrationModel(version: 2).versionHashString
            let outcome = pending.map { $0.contains("\"install\"") ? "installing" : "staging" } ?? (migrated ? "finished" : "not begun")
            outcomes[outcome, default: 0] += 1
            let coordinator = PersistentStoreCoordinator(managedObjectModel: migrationModel(version: 2))
            let options = LMDBIncrementalStore.Options(migratesAutomatically: true, infersMappingModel: true)
            let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: options.dictionary)
            try check(coordinator, store as! LMDBIncrementalStore, version: 2, round: round)
        }
        // Kills landed in the middle of migrations, and stores killed before the commit opened as old.
        #expect(outcomes["staging", default: 0] + outcomes["installing", default: 0] > 0 && outcomes["old", default: 0] > 0, "\(outcomes)")
        print("migration kills (window \(window) µs): \(outcomes)")
    }
}
