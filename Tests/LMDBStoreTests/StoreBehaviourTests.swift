import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import StoreConformance
import Testing

@Suite(.onEveryEngine) struct StoreMetadataTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Note") {
            AttributeDescription("title", .string, validation: AttributeValidation(maximumLength: 20))
            AttributeDescription("score", .double, isOptional: true)
        }
    }

    @Test func aNewStoreRecordsItsIdentityAndAReopenedOneKeepsIt() throws {
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(model)
        let uuid = store.identifier
        #expect(UUID(uuidString: uuid) != nil)
        #expect(store.metadata[PersistentStoreMetadataKey.modelVersionHash] == model.versionHashString)
        let metadata = try PersistentStoreCoordinator.metadataForPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file())
        #expect(metadata[PersistentStoreMetadataKey.uuid] == uuid)
        #expect(metadata[PersistentStoreMetadataKey.storeType] == "LMDB")
        let (_, again) = try folder.coordinator(model)
        #expect(again.identifier == uuid)
    }

    @Test(.lmdbOnly) func aStoreWrittenWithAnotherModelIsRefusedAndLeftAlone() throws {
        let folder = StoreFolder()
        do { _ = try folder.coordinator(model) }
        let before = try Data(contentsOf: folder.file())
        let other = try ManagedObjectModel { EntityDescription("Note") { AttributeDescription("title", .integer32) } }
        do {
            _ = try folder.coordinator(other)
            Issue.record("a store opened with another model")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable)
            #expect(error.message.contains(model.versionHashString) && error.message.contains(other.versionHashString))
            // What stands in the way, read from the model the file keeps, and what to do.
            #expect(error.message.contains("does not map to this one") && error.message.contains("Note.title changes type from String"), "\(error.message)")
            #expect(error.message.contains("storedModel(at:)"), "\(error.message)")
        }
        // A change a migration would infer is listed.
        let added = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string, validation: AttributeValidation(maximumLength: 20))
                AttributeDescription("subtitle", .string, isOptional: true)
            }
        }
        let error = try #require(throws: ManagedObjectContextError.self) { try folder.coordinator(added) }
        #expect(error.message.contains("the changes since the model it was written with:\nNote: + subtitle; − score"), "\(error.message)")
        #expect(try Data(contentsOf: folder.file()) == before, "nothing was written")
        // The question a caller can ask first.
        let metadata = try PersistentStoreCoordinator.metadataForPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file())
        #expect(model.isConfiguration(withName: nil, compatibleWithStoreMetadata: metadata))
        #expect(!added.isConfiguration(withName: nil, compatibleWithStoreMetadata: metadata))
    }

    /// A known store option with a value it cannot take is refused by name, before the file is created.
    @Test func badStoreOptionsAreRefusedByName() throws {
        let folder = StoreFolder()
        LMDBIncrementalStore.register()
        for (key, value) in [("durability", "sometimes"), ("mapSize", "-5"), ("mapSize", "lots"), ("maxMapSize", "0"), ("readAhead", "yes")] {
            let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
            do {
                _ = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file("\(key).lmdb"), options: [key: value])
                Issue.record("\(key) = \(value) was accepted")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .wrongValueType && error.message.contains("\"\(key)\"") && error.message.contains(value), "\(error)")
            }
            #expect(!FileManager.default.fileExists(atPath: folder.file("\(key).lmdb").path))
        }
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(),
                                                       options: ["readAhead": "false", "durability": "noSync", "mapSize": "67108864"])
        #expect(store is LMDBIncrementalStore)
    }

    /// The typed options and the coordinator's string options say the same, both ways; a store reports what it
    /// was opened with.
    @Test func typedOptionsAreTheStringOptionsTyped() throws {
        let typed = LMDBIncrementalStore.Options(mapSize: 1 << 20, maxMapSize: 1 << 30, durability: .noSync, readsAhead: false,
                                                 createsInForeignFile: true)
        #expect(typed.dictionary == ["mapSize": "1048576", "maxMapSize": "1073741824", "durability": "noSync",
                                     "readAhead": "false", "createInForeignFile": "true"])
        #expect(try LMDBIncrementalStore.Options(typed.dictionary) == typed)
        #expect(LMDBIncrementalStore.Options().dictionary.isEmpty)
        for durability in LMDBIncrementalStore.Options.Durability.allCases {
            #expect(try LMDBIncrementalStore.Options(["durability": durability.rawValue]).durability == durability)
        }
        // Keys of other stores, and Core Data's that this store does not take, are not this store's to refuse.
        #expect(try LMDBIncrementalStore.Options(["NSPersistentHistoryTrackingKey": "1", "SQLiteJournalMode": "WAL"]) == LMDBIncrementalStore.Options())
        // Core Data's migration options are taken, as text in Core Data's spellings too.
        let migrating = LMDBIncrementalStore.Options(migratesAutomatically: true, infersMappingModel: true, migrationBatchSize: 100)
        #expect(try LMDBIncrementalStore.Options(migrating.dictionary) == migrating)
        #expect(try LMDBIncrementalStore.Options(["NSMigratePersistentStoresAutomaticallyOption": "1", "NSInferMappingModelAutomaticallyOption": "YES",
                                                  "migrationBatchSize": "100"]) == migrating)
        #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.Options(["migrationBatchSize": "0"]) }
        let refused = #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.Options(["createInForeignFile": "yes"]) }
        #expect(refused?.code == .wrongValueType && refused?.message.contains("\"createInForeignFile\" is \"yes\"") == true)

        let folder = StoreFolder()
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let options = LMDBIncrementalStore.Options(maxMapSize: 1 << 30, durability: .skipMetaSync)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: options.dictionary)
        #expect((store as? LMDBIncrementalStore)?.storeOptions == options)
    }

    /// A save that does not fit the map fails whole, and the LMDB error underneath can be caught as itself.
    @Test(.lmdbOnly) func aFullMapIsAnErrorWhoseCauseIsTheLMDBError() throws {
        let folder = StoreFolder()
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        _ = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: ["maxMapSize": "1048576"])
        let context = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<20_000 {
            let note = try context.insertNewObject(forEntityName: "Note")
            try note.setValue("note \(n)", forKey: "title")
        }
        do {
            try context.save()
            Issue.record("20 000 notes fitted a 1 MiB map")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable, "\(error)")
            if case LMDBError.mapFull? = error.cause {} else { Issue.record("the cause is \(String(describing: error.cause))") }
            #expect(error.underlying?.contains("maxMapSize") == true, "\(error)")
        }
        // Nothing of the failed save was written.
        let reader = ManagedObjectContext(coordinator: coordinator)
        #expect(try reader.count(for: FetchRequest(entityName: "Note")) == 0)
    }

    /// A file LMDB itself refuses: the LMDB error is the cause, to be caught as itself.
    @Test(.lmdbOnly) func aForeignFileIsRefusedWithLMDBsErrorAsTheCause() throws {
        let folder = StoreFolder()
        try Data(String(repeating: "not a store ", count: 900).utf8).write(to: folder.file("text.lmdb"))
        do {
            _ = try folder.coordinator(model, "text.lmdb")
            Issue.record("a text file opened as a store")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable)
            if case LMDBError.invalid? = error.cause {} else { Issue.record("the cause is \(String(describing: error.cause))") }
        }
    }

    @Test(.lmdbOnly) func foreignFilesNewerFormatsAndOtherStoreTypesAreRefused() throws {
        let folder = StoreFolder()
        try Data(String(repeating: "not a store ", count: 900).utf8).write(to: folder.file("text.lmdb"))
        #expect(throws: ManagedObjectContextError.self) { try folder.coordinator(model, "text.lmdb") }

        // A plain LMDB file without LMDBStore's metadata.
        do {
            let environment = try Environment.open(at: folder.file("plain.lmdb").path)
            let database = try environment.openDatabase(named: "something")
            try environment.write { try database.put([1], forKey: [1], in: $0) }
        }
        do {
            _ = try PersistentStoreCoordinator.metadataForPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file("plain.lmdb"))
            Issue.record("a plain LMDB file had LMDBStore metadata")
        } catch let error as ManagedObjectContextError {
            #expect(error.message.contains("not an LMDBStore store"))
        }

        for (key, value, expected) in [("format", "99", "format version 99"), ("storeType", "SQLite", "is a SQLite store")] {
            let name = "\(key).lmdb"
            do { _ = try folder.coordinator(model, name) }
            let environment = try Environment.open(at: folder.file(name).path)
            let meta = try environment.openDatabase(named: "meta", create: false)
            try environment.write { try meta.put(Array(value.utf8), forKey: Array(key.utf8), in: $0) }
            do {
                _ = try folder.coordinator(model, name)
                Issue.record("\(key) = \(value) was accepted")
            } catch let error as ManagedObjectContextError {
                #expect(error.message.contains(expected), "\(error)")
            }
        }
    }
}

@Suite(.onEveryEngine) struct StoreBadInputTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Note") {
            AttributeDescription("title", .string, validation: AttributeValidation(maximumLength: 20))
            AttributeDescription("score", .double, isOptional: true)
            UniquenessConstraint("title")
        }
    }

    func save(_ store: LMDBIncrementalStore, _ change: ObjectChange) throws {
        _ = try store.execute(.save(SaveChangesRequest(insertedObjects: [change])))
    }

    /// A save given straight to the store (no context to check it first) whose to-one or many-to-many names an object
    /// of an entity the relationship does not hold is refused by name; a sub-entity of the destination is held.
    @Test func aRelationshipToAnObjectOfAnotherEntityIsRefused() throws {
        let pets = try ManagedObjectModel {
            EntityDescription("Animal") {
                AttributeDescription("name", .string)
                RelationshipDescription("owner", destination: "Owner", inverse: "pet", isOptional: true)
                RelationshipDescription("toys", destination: "Toy", inverse: "fans", toMany: true, isOptional: true)
            }
            EntityDescription("Dog", parent: "Animal") { AttributeDescription("breed", .string, isOptional: true) }
            EntityDescription("Toy") {
                AttributeDescription("name", .string)
                RelationshipDescription("fans", destination: "Animal", inverse: "toys", toMany: true, isOptional: true)
            }
            EntityDescription("Owner") {
                AttributeDescription("name", .string)
                RelationshipDescription("pet", destination: "Animal", inverse: "owner", isOptional: true)
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(pets)
        let context = ManagedObjectContext(coordinator: coordinator)
        let dog = try context.insertNewObject(forEntityName: "Dog")
        try dog.setValue("Rex", forKey: "name")
        let toy = try context.insertNewObject(forEntityName: "Toy")
        try toy.setValue("ball", forKey: "name")
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue("Ann", forKey: "name")
        // A sub-entity of the destination is held.
        try owner.setValue(dog, forKey: "pet")
        try toy.setValue(Set([dog]), forKey: "fans")
        try context.save()

        for (name, change) in [
            ("Owner.pet", ObjectChange(objectID: owner.objectID, attributes: ["name": "Ann"], toOne: ["pet": toy.objectID],
                                       expectedVersion: try store.newValuesForObject(with: owner.objectID).version)),
            ("Toy.fans", ObjectChange(objectID: toy.objectID, attributes: ["name": "ball"], toMany: ["fans": [dog.objectID, owner.objectID]],
                                      expectedVersion: try store.newValuesForObject(with: toy.objectID).version)),
        ] {
            let error = try #require(throws: ManagedObjectContextError.self, "\(name)") {
                _ = try store.execute(.save(SaveChangesRequest(updatedObjects: [change])))
            }
            #expect(error.code == .wrongValueType && error.message.contains("\(name) holds Animal objects"), "\(error)")
        }
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect((fresh.object(with: owner.objectID).value(forKey: "pet") as? ManagedObject)?.objectID == dog.objectID, "nothing written")
        #expect(fresh.object(with: toy.objectID).relatedObjects(forKey: "fans").map(\.objectID) == [dog.objectID], "nothing written")
        #expect(try store.verify().isEmpty)
    }

    @Test func wrongTypesNaNAndOverlongStringsAreRefusedAndNothingIsWritten() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let id = try store.obtainPermanentIDs(for: [ObjectReference(objectID: ManagedObjectID(entityName: "Note", storeIdentifier: "x", referenceObject: .integer(1)), entityName: "Note")])[0]
        let cases: [([String: AttributeValue], String)] = [
            (["title": .integer(5)], "Note.title is String, but the value is integer 5"),
            (["title": "ok", "score": .double(.nan)], "cannot hold a NaN double"),
            (["title": .string(String(repeating: "x", count: 21))], "longer than its maximum length 20"),
            (["title": "ok", "nope": 1], "has no stored attribute \"nope\""),
        ]
        for (attributes, message) in cases {
            do {
                try save(store, ObjectChange(objectID: id, attributes: attributes))
                Issue.record("\(attributes) was written")
            } catch let error as ManagedObjectContextError {
                #expect(error.message.contains(message), "\(error)")
            }
        }
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Note")) == 0)
        #expect(try store.verify().isEmpty)
    }

    /// Keys come from one sequence per root entity: objects of entities interleaved in one request get consecutive
    /// keys per root in request order, a sub-entity draws from its root's sequence, and the next request continues
    /// where each left off.
    @Test func permanentIDsOfInterleavedEntitiesFollowEachRootsSequence() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Shape") { AttributeDescription("name", .string, isOptional: true) }
            EntityDescription("Circle", parent: "Shape") { AttributeDescription("radius", .double, isOptional: true) }
            EntityDescription("Tag") { AttributeDescription("label", .string, isOptional: true) }
        }
        let folder = StoreFolder()
        let (_, store) = try folder.coordinator(model)
        func references(_ names: [String]) -> [ObjectReference] {
            names.enumerated().map { ObjectReference(objectID: ManagedObjectID(entityName: $1, storeIdentifier: "elsewhere", referenceObject: .integer(Int64($0 + 1))), entityName: $1) }
        }
        func keys(_ ids: [ManagedObjectID]) -> [String] {
            ids.map { id in if case .integer(let key) = id.referenceObject { "\(id.entityName) \(key)" } else { "?" } }
        }
        let first = try store.obtainPermanentIDs(for: references(["Shape", "Tag", "Circle", "Tag", "Shape", "Circle"]))
        #expect(keys(first) == ["Shape 1", "Tag 1", "Circle 2", "Tag 2", "Shape 3", "Circle 4"])
        #expect(first.allSatisfy { $0.storeIdentifier == store.identifier })
        let second = try store.obtainPermanentIDs(for: references(["Tag", "Circle", "Shape"]))
        #expect(keys(second) == ["Tag 3", "Circle 5", "Shape 6"])
    }

    @Test func rowsSavedOutOfKeyOrderAreAllKeptAndATakenKeyRefusesTheWholeSave() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        // Two contexts take keys, then save in the opposite order: the later keys are appended first, the earlier
        // ones put in place.
        let first = ManagedObjectContext(coordinator: coordinator), second = ManagedObjectContext(coordinator: coordinator)
        func note(_ context: ManagedObjectContext, _ title: String) throws -> ManagedObject {
            let note = try context.insertNewObject(forEntityName: "Note")
            try note.setValue(title, forKey: "title")
            return note
        }
        let early = try (0..<5).map { try note(first, "early \($0)") }
        try first.obtainPermanentIDs(for: early)
        let late = try (0..<5).map { try note(second, "late \($0)") }
        try second.obtainPermanentIDs(for: late)
        try second.save()
        try first.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.fetchObjectIDs(FetchRequest(entityName: "Note")) == (early + late).map(\.objectID))
        #expect(fresh.object(with: early[2].objectID).value(forKey: "title") as? String == "early 2")
        // An insert under a key the table holds (a store given someone else's ID) is refused, with nothing of it kept.
        let newcomer = try store.obtainPermanentIDs(for: [ObjectReference(objectID: early[0].objectID, entityName: "Note")])[0]
        do {
            _ = try store.execute(.save(SaveChangesRequest(insertedObjects: [
                ObjectChange(objectID: newcomer, attributes: ["title": "newcomer"]),
                ObjectChange(objectID: early[3].objectID, attributes: ["title": "impostor"]),
            ])))
            Issue.record("an insert over an existing row was written")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .constraintViolation && error.message.contains("\(early[3].objectID) is already in the store"))
        }
        let after = ManagedObjectContext(coordinator: coordinator)
        #expect(after.object(with: early[3].objectID).value(forKey: "title") as? String == "early 3")
        #expect(try after.count(for: FetchRequest(entityName: "Note")) == 10)
        #expect(try store.verify().isEmpty)
    }

    /// A new row's index entries are appended after the other rows' under the same index key, and its links after
    /// every link of older owners (its key comes from the sequence). When that does not hold — keys taken early and
    /// saved late, members given in descending key order — LMDB refuses the append and the entry is put in place:
    /// every entry is there and every fetch answers from it. A save of many new rows (400, and the early ones when
    /// they are 80: `sortedInsertThreshold`) puts their entries last, sorted, one key's values as one run, and a run
    /// refused as out of order goes in place value by value.
    @Test(arguments: [8, 80])
    func entriesOfRowsSavedOutOfKeyOrderAreAllKept(earlyCount: Int) throws {
        let model = try ManagedObjectModel {
            EntityDescription("Team") {
                AttributeDescription("name", .string)
                RelationshipDescription("players", destination: "Player", inverse: "team", toMany: true)
            }
            EntityDescription("Player") {
                AttributeDescription("name", .string)
                AttributeDescription("score", .integer32)
                RelationshipDescription("team", destination: "Team", inverse: "players")
                RelationshipDescription("tags", destination: "Tag", inverse: "players", toMany: true)
                FetchIndexDescription("byScore", properties: ["score"])
            }
            EntityDescription("Tag") {
                AttributeDescription("name", .string)
                RelationshipDescription("players", destination: "Player", inverse: "tags", toMany: true)
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        func named(_ entity: String, _ name: String) throws -> ManagedObject {
            let object = try setup.insertNewObject(forEntityName: entity)
            try object.setValue(name, forKey: "name")
            return object
        }
        let teams = try (0..<2).map { try named("Team", "team \($0)") }
        let tags = try (0..<4).map { try named("Tag", "tag \($0)") }
        try setup.save()
        // Scores 0–2 hold a few rows per index key (LMDB keeps them in a sub-page), 7 one row (a single value), 9
        // hundreds (a sub-database of their own): the three ways LMDB stores an index key's rows.
        func players(_ context: ManagedObjectContext, _ prefix: String, count: Int) throws -> [ManagedObject] {
            try (0..<count).map { n in
                let player = try context.insertNewObject(forEntityName: "Player")
                try player.setValue("\(prefix) \(n)", forKey: "name")
                try player.setValue(Int32(n < 6 ? n % 3 : n == 6 ? 7 : 9), forKey: "score")
                try player.setValue(context.object(with: teams[n % 2].objectID), forKey: "team")
                // Members in descending key order for every other player: the second below the first.
                try player.setValue([tags[3 - n % 4], tags[(n + 2) % 4]].map { context.object(with: $0.objectID) }, forKey: "tags")
                return player
            }
        }
        let first = ManagedObjectContext(coordinator: coordinator), second = ManagedObjectContext(coordinator: coordinator)
        #expect((earlyCount >= LMDBIncrementalStore.sortedInsertThreshold) == (earlyCount == 80), "8 early rows go the direct way, 80 the sorted one")
        let early = try players(first, "early", count: earlyCount)
        try first.obtainPermanentIDs(for: early)
        let late = try players(second, "late", count: 400)
        try second.save()
        try first.save()  // lower keys than the rows (and index values, and links) the second save wrote
        #expect(try store.verify().isEmpty)
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let all = early + late
        for score in [0, 1, 2, 7, 9] {
            let request = FetchRequest(entityName: "Player", predicate: try FetchPredicate(format: "score == %@", score))
            #expect(Set(try fresh.fetchObjectIDs(request)) == Set(all.filter { ($0.value(forKey: "score") as? Int32) == Int32(score) }.map(\.objectID)))
        }
        for team in teams {
            #expect(Set(fresh.object(with: team.objectID).relatedObjects(forKey: "players").map(\.objectID))
                    == Set(all.filter { ($0.value(forKey: "team") as? ManagedObject)?.objectID == team.objectID }.map(\.objectID)))
        }
        for player in all {
            #expect(Set(fresh.object(with: player.objectID).relatedObjects(forKey: "tags").map(\.objectID))
                    == Set(player.relatedObjects(forKey: "tags").map(\.objectID)), "\(player.objectID)")
        }
        for tag in tags {
            #expect(Set(fresh.object(with: tag.objectID).relatedObjects(forKey: "players").map(\.objectID))
                    == Set(all.filter { $0.relatedObjects(forKey: "tags").contains { $0.objectID == tag.objectID } }.map(\.objectID)))
        }
    }

    /// Unordered link tables are updated by difference: members added and removed across saves read back exactly,
    /// from both sides.
    @Test func manyToManyChangesReadBackExactly() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("item", forKey: "name")
        let labels = try ["a", "b", "c", "d"].map { name -> ManagedObject in
            let label = try context.insertNewObject(forEntityName: "Label")
            try label.setValue(name, forKey: "name")
            return label
        }
        func check(_ expected: [Int], _ step: String) throws {
            let fresh = ManagedObjectContext(coordinator: coordinator)
            let members = Set(fresh.object(with: item.objectID).relatedObjects(forKey: "labels").map(\.objectID))
            #expect(members == Set(expected.map { labels[$0].objectID }), "\(step): item.labels")
            for (index, label) in labels.enumerated() {
                let items = fresh.object(with: label.objectID).relatedObjects(forKey: "items").map(\.objectID)
                #expect(items == (expected.contains(index) ? [item.objectID] : []), "\(step): label \(index).items")
            }
            #expect(try store.verify().isEmpty, "\(step)")
        }
        try item.setValue([labels[0], labels[1], labels[2]], forKey: "labels")
        try context.save()
        try check([0, 1, 2], "insert")
        try item.setValue([labels[1], labels[2], labels[3]], forKey: "labels")
        try context.save()
        try check([1, 2, 3], "one removed, one added")
        try labels[0].setValue([item], forKey: "items")
        try context.save()
        try check([0, 1, 2, 3], "added from the other side")
        try item.setValue([ManagedObject](), forKey: "labels")
        try context.save()
        try check([], "emptied")
    }

    /// A to-one marked `indexed` (as Xcode writes `indexed="YES"` on a relationship) needs no index of its own: the
    /// store keeps every to-one indexed from destination to owners, one entry per object that has a destination,
    /// none after the destination is deleted.
    @Test func aToOneMarkedIndexedIsIndexedByItsToOneTable() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Device") {
                AttributeDescription("name", .string)
                RelationshipDescription("readings", destination: "Reading", inverse: "device", toMany: true)
            }
            EntityDescription("Reading") {
                AttributeDescription("value", .double)
                RelationshipDescription("device", destination: "Device", inverse: "readings", isIndexed: true)
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        func entries() throws -> Int {
            let state = try store.open
            let index = store.database(StoreLayout.toOneDatabase(entity: "Reading", relationship: "device"), in: state)
            return try state.environment.read { try index.entryCount(in: $0) }
        }
        let context = ManagedObjectContext(coordinator: coordinator)
        let device = try context.insertNewObject(forEntityName: "Device")
        try device.setValue("probe", forKey: "name")
        for value in 0..<5 {
            let reading = try context.insertNewObject(forEntityName: "Reading")
            try reading.setValue(Double(value), forKey: "value")
            if value < 3 { try reading.setValue(device, forKey: "device") }
        }
        try context.save()
        #expect(model.fetchIndexes(of: "Reading").isEmpty)
        #expect(try entries() == 3)
        #expect(try store.verify().isEmpty)
        context.delete(device)
        try context.save()
        #expect(try entries() == 0)
        #expect(try store.verify().isEmpty)
    }

    /// Names stored decomposed (`e` + U+0301) and precomposed compare and sort as one string in the LMDB store as in
    /// memory, through an index and through a scan: the row check, the sort and the index keys agree.
    @Test(arguments: [true, false])
    func decomposedStringsCompareAndSortLikeTheirComposedForm(indexed: Bool) throws {
        let model = try ManagedObjectModel {
            EntityDescription("Person") {
                AttributeDescription("name", .string, isIndexed: indexed)
            }
        }
        let names = ["Rene\u{301}e", "Ren\u{E9}e", "Renee", "Renf", "e\u{301}e\u{301}e\u{301}", "\u{E9}\u{E9}\u{E9}\u{E9}", "Z"]
        let folder = StoreFolder()
        let (lmdb, _, memory) = try folder.twinStores(model) { coordinator in
            let context = ManagedObjectContext(coordinator: coordinator)
            for name in names { try context.insertNewObject(forEntityName: "Person").setValue(name, forKey: "name") }
            try context.save()
        }
        for format in ["name < %@", "name >= %@", "name == %@", "name BETWEEN {%@, 'Rf'}"] {
            let request = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: format, "Ren\u{E9}eb"),
                                       sortDescriptors: [FetchSortDescriptor(keyPath: "name")])
            func answer(_ coordinator: PersistentStoreCoordinator) throws -> [[UInt32]] {
                let context = ManagedObjectContext(coordinator: coordinator)
                return try context.fetch(request).map {
                    ($0.value(forKey: "name") as! String).precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value)
                }
            }
            #expect(try answer(lmdb) == answer(memory), "\(format)")
        }
        let all = FetchRequest(entityName: "Person", sortDescriptors: [FetchSortDescriptor(keyPath: "name")])
        let reader = ManagedObjectContext(coordinator: lmdb)
        let sorted = try reader.fetch(all).map { $0.value(forKey: "name") as! String }
        #expect(sorted.map { $0.precomposedStringWithCanonicalMapping } == ["Renee", "Renf", "Ren\u{E9}e", "Ren\u{E9}e", "Z", "\u{E9}\u{E9}\u{E9}", "\u{E9}\u{E9}\u{E9}\u{E9}"])
        let below = FetchRequest(entityName: "Person", predicate: try FetchPredicate(format: "name < %@", "Ren\u{E9}eb"))
        #expect(try ManagedObjectContext(coordinator: lmdb).count(for: below) == 4, "Renee, Renf (f sorts before é) and both Renée")
    }

    final class AwokenNote: ManagedObject {
        nonisolated(unsafe) static var awakenings = 0
        override func awakeFromFetch() { AwokenNote.awakenings += 1 }
    }

    /// A fetch with `returnsObjectsAsFaults = false` loads each object once, and the rows it loaded stay in the
    /// coordinator's cache while the objects are registered: fetching them again finds them current, so nothing is
    /// refaulted, read or awoken a second time. (Objects register with the coordinator before their rows are read,
    /// or the rows would not be cached and every later fetch would refault them.)
    @Test func aFetchOfLoadedObjectsLoadsEachOnceAndKeepsTheirRowsCached() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Note") { AttributeDescription("text", .string) }
        }
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        coordinator.registerClass(AwokenNote.self, forEntityName: "Note")
        do {
            // Saved from a context that is gone before the fetch, so the coordinator caches none of the rows.
            let writer = ManagedObjectContext(coordinator: coordinator)
            for n in 0..<50 { try writer.insertNewObject(forEntityName: "Note").setValue("note \(n)", forKey: "text") }
            try writer.save()
        }
        let reader = ManagedObjectContext(coordinator: coordinator)
        let before = AwokenNote.awakenings
        let notes = try reader.fetch(FetchRequest(entityName: "Note").with { $0.returnsObjectsAsFaults = false })
        #expect(notes.count == 50 && notes.allSatisfy { !$0.isFault })
        #expect(AwokenNote.awakenings - before == 50, "each object was loaded once")
        // Fetched again, nothing has changed: nothing is refaulted, read or awoken again.
        _ = try reader.fetch(FetchRequest(entityName: "Note").with { $0.returnsObjectsAsFaults = false })
        #expect(AwokenNote.awakenings - before == 50, "the second fetch refaulted objects whose rows were not cached")
    }

    @Test(arguments: [500, 511, 512, 10_000])
    func longUniqueStringsAreCheckedExactlyAndFetchLikeTheEvaluator(length: Int) throws {
        let folder = StoreFolder()
        let longModel = try ManagedObjectModel {
            EntityDescription("Doc") {
                AttributeDescription("body", .string)
                AttributeDescription("n", .integer32, defaultValue: 0)
                FetchIndexDescription("byBody", elements: [.ascending("body"), .descending("n")])
                UniquenessConstraint("body")
            }
        }
        let (coordinator, store) = try folder.coordinator(longModel)
        let context = ManagedObjectContext(coordinator: coordinator)
        let base = String(repeating: "é", count: length / 2)
        for (n, suffix) in ["a", "b", "c"].enumerated() {
            let doc = try context.insertNewObject(forEntityName: "Doc")
            try doc.setValue(base + suffix, forKey: "body")
            try doc.setValue(n, forKey: "n")
        }
        try context.save()
        #expect(try store.verify().isEmpty)
        let duplicate = try context.insertNewObject(forEntityName: "Doc")
        try duplicate.setValue(base + "b", forKey: "body")
        do {
            try context.save()
            Issue.record("a duplicate \(length)-byte string was saved")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .constraintViolation)
        }
        context.rollback()
        let predicate = try FetchPredicate(format: "body >= %@", base + "b")
        let fetched = try context.fetch(FetchRequest(entityName: "Doc", predicate: predicate, sortDescriptors: [FetchSortDescriptor(keyPath: "body")]))
        #expect(fetched.map { ($0.value(forKey: "body") as! String).last! } == ["b", "c"])
        #expect(try store.verify().isEmpty)
    }

    @Test(.lmdbOnly) func aCorruptedRowIsAnErrorNamingTheObject() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let note = try context.insertNewObject(forEntityName: "Note")
        try note.setValue("fine", forKey: "title")
        try context.save()
        try damageRow(of: note.objectID, in: "Note", of: store) { $0[$0.count / 2] ^= 0xFF }
        do {
            _ = try store.newValuesForObject(with: note.objectID)
            Issue.record("a corrupted row decoded")
        } catch let error as ManagedObjectContextError {
            #expect(error.message.contains("\(note.objectID)") && error.message.contains("checksum"))
        }
        // A save reading the row — to check an update's version, to drop a deletion's entries, or only its header
        // for an object gaining members — refuses it the same way, naming the object, and writes nothing.
        let before = try Data(contentsOf: folder.file())
        var membersOnly = ObjectChange(objectID: note.objectID)
        membersOnly.keepsStoredValues = true
        for (name, request) in [("update", SaveChangesRequest(updatedObjects: [ObjectChange(objectID: note.objectID, attributes: ["title": "new"], expectedVersion: 1)])),
                                ("delete", SaveChangesRequest(deletedObjects: [ObjectChange(objectID: note.objectID)])),
                                ("members only", SaveChangesRequest(updatedObjects: [membersOnly]))] {
            do {
                _ = try store.execute(.save(request))
                Issue.record("\(name): a save over a corrupted row went through")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .storeUnusable && error.message.contains("\(note.objectID)") && error.message.contains("checksum"), "\(name): \(error)")
            }
        }
        #expect(try Data(contentsOf: folder.file()) == before, "nothing written")
        #expect(try store.verify().first?.contains("checksum") == true)
    }

    @Test func aFetchOfEveryIDReadsOnlyRowHeadersAndRefusesADamagedTag() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let notes = try (0..<10).map { n -> ManagedObject in
            let note = try context.insertNewObject(forEntityName: "Note")
            try note.setValue("note \(n)", forKey: "title")
            return note
        }
        try context.save()
        func damage(_ note: ManagedObject, _ change: (inout [UInt8]) -> Void) throws {
            try damageRow(of: note.objectID, in: "Note", of: store, change)
        }
        // A damaged value: a fetch of IDs (or of faults, or a count) does not read it; loading the object does.
        try damage(notes[3]) { $0[$0.count / 2] ^= 0xFF }
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(try fresh.fetchObjectIDs(FetchRequest(entityName: "Note")) == notes.map(\.objectID))
        var window = FetchRequest(entityName: "Note")
        window.fetchOffset = 2
        window.fetchLimit = 3
        #expect(try fresh.fetchObjectIDs(window) == notes[2..<5].map(\.objectID))
        #expect(try fresh.count(for: window) == 3)
        #expect(try fresh.count(for: FetchRequest(entityName: "Note")) == 10)
        #expect(throws: ManagedObjectContextError.self) { try store.newValuesForObject(with: notes[3].objectID) }
        // A damaged entity tag would drop the row from the answer: it is an error naming the row instead.
        try damage(notes[7]) { $0[3] ^= 0x40 }
        do {
            _ = try fresh.fetchObjectIDs(FetchRequest(entityName: "Note"))
            Issue.record("a row with a damaged tag was passed over")
        } catch let error as ManagedObjectContextError {
            let key = try store.key(of: notes[7].objectID)
            #expect(error.code == .storeUnusable && error.message.contains("entity tag") && error.message.contains("with key \(key)"))
        }
    }
}

/// A fetch of loaded objects whose predicate an index answers reads the rows of its window only, each once.
@Suite(.onEveryEngine) struct LoadedFetchTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("name", .string)
            AttributeDescription("rank", .integer16)
            RelationshipDescription("owner", destination: "Owner", inverse: "items")
            FetchIndexDescription("byRank", properties: ["rank"])
        }
        EntityDescription("Owner") {
            AttributeDescription("name", .string)
            RelationshipDescription("items", destination: "Item", inverse: "owner", toMany: true)
        }
    }

    @Test func versionsAndBatchReadsAnswerInTheOrderAskedAndLeaveOutWhatIsNoRow() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let owner = try context.insertNewObject(forEntityName: "Owner")
        try owner.setValue("O", forKey: "name")
        let items = try (0..<3).map { n in
            let item = try context.insertNewObject(forEntityName: "Item")
            try item.setValue("I\(n)", forKey: "name")
            try item.setValue(Int16(n), forKey: "rank")
            try item.setValue(owner, forKey: "owner")
            return item
        }
        try context.save()
        try items[2].setValue("I2 again", forKey: "name")
        context.delete(items[1])
        try context.save()

        let unsaved = try context.insertNewObject(forEntityName: "Item").objectID
        let foreign = ManagedObjectID(entityName: "Item", storeIdentifier: "another store", referenceObject: .integer(1))
        // Two tables, keys out of order: answered in the order asked all the same.
        let asked = [items[2].objectID, owner.objectID, unsaved, items[1].objectID, foreign, items[0].objectID]
        #expect(try store.versionsOfObjects(with: asked) == [2, 1, nil, nil, nil, 1])
        let nodes = try store.newValuesForObjects(with: asked)
        #expect(nodes.map(\.objectID) == [items[2].objectID, owner.objectID, items[0].objectID])
        #expect(nodes.map { $0.attributes["name"] } == [.string("I2 again"), .string("O"), .string("I0")])
    }

    @Test func theWindowsRowsAreLoadedWithTheirValuesAndOnlyThoseAreRead() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let owner = try setup.insertNewObject(forEntityName: "Owner")
        try owner.setValue("Ada", forKey: "name")
        let items = try (0..<2000).map { n -> ManagedObject in
            let item = try setup.insertNewObject(forEntityName: "Item")
            try item.setValue("item \(n)", forKey: "name")
            try item.setValue(Int16(n % 100), forKey: "rank")
            try item.setValue(owner, forKey: "owner")
            return item
        }
        try setup.save()
        var request = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank == 1"))
        request.returnsObjectsAsFaults = false
        request.fetchOffset = 2
        request.fetchLimit = 5
        let expected = items.filter { ($0.value(forKey: "rank") as? Int16) == 1 }.map(\.objectID)[2..<7]
        // A damaged row outside the window is never read.
        try damageRow(of: items[1].objectID, in: "Item", of: store) { $0[$0.count / 2] ^= 0xFF }
        #expect(store.explain(request).hasPrefix("IndexRange"))
        let context = ManagedObjectContext(coordinator: coordinator)
        let loaded = try context.fetch(request)
        #expect(loaded.map(\.objectID) == Array(expected))
        #expect(loaded.allSatisfy { !$0.isFault })
        #expect(loaded.map { $0.value(forKey: "name") as? String } == expected.map { id in "item \(items.firstIndex { $0.objectID == id }!)" })
        #expect(loaded.allSatisfy { ($0.value(forKey: "owner") as? ManagedObject)?.objectID == owner.objectID })
        // A damaged row inside the window is an error naming it.
        request.fetchOffset = 0
        do {
            _ = try ManagedObjectContext(coordinator: coordinator).fetch(request)
            Issue.record("a damaged row was loaded")
        } catch let error as ManagedObjectContextError {
            let key = try store.key(of: items[1].objectID)
            #expect(error.code == .storeUnusable && error.message.contains("with key \(key)") && error.message.contains("checksum"))
        }
    }
}

extension LoadedFetchTests {
    @Test func everyObjectLoadedComesFromOneWalkOfTheTable() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let owners = try (0..<30).map { n -> ManagedObject in
            let owner = try setup.insertNewObject(forEntityName: "Owner")
            try owner.setValue("owner \(n)", forKey: "name")
            return owner
        }
        try setup.save()
        var request = FetchRequest(entityName: "Owner")
        request.returnsObjectsAsFaults = false
        request.fetchOffset = 5
        request.fetchLimit = 10
        #expect(store.explain(request).hasPrefix("Scan"))
        let loaded = try ManagedObjectContext(coordinator: coordinator).fetch(request)
        #expect(loaded.map(\.objectID) == owners[5..<15].map(\.objectID))
        #expect(loaded.allSatisfy { !$0.isFault })
        #expect(loaded.map { $0.value(forKey: "name") as? String } == (5..<15).map { "owner \($0)" })
        // A damaged row before the window is passed over; one inside it is an error naming it.
        try damageRow(of: owners[2].objectID, in: "Owner", of: store) { $0[$0.count / 2] ^= 0xFF }
        #expect(try ManagedObjectContext(coordinator: coordinator).fetch(request).count == 10)
        try damageRow(of: owners[9].objectID, in: "Owner", of: store) { $0[$0.count / 2] ^= 0xFF }
        do {
            _ = try ManagedObjectContext(coordinator: coordinator).fetch(request)
            Issue.record("a damaged row was loaded")
        } catch let error as ManagedObjectContextError {
            let key = try store.key(of: owners[9].objectID)
            #expect(error.code == .storeUnusable && error.message.contains("with key \(key)"))
        }
    }
}

extension LoadedFetchTests {
    /// An index entry moved to another value (a flipped byte in its key) points at a row that does not match the
    /// predicate the entry stands for. Where the fetch reads that row anyway — loaded objects, a sort on the rows —
    /// the row is checked against the predicate: the fetch stops with an error naming the object instead of
    /// answering it; where the row decides part of the predicate, the row is left out, as it should be.
    @Test func anEntryThatNoLongerAgreesWithItsRowStopsAFetchThatReadsTheRow() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let items = try (0..<200).map { n -> ManagedObject in
            let item = try setup.insertNewObject(forEntityName: "Item")
            try item.setValue("item \(n)", forKey: "name")
            try item.setValue(Int16(n % 50), forKey: "rank")
            return item
        }
        try setup.save()
        // items[3] (rank 3) is entered under rank 7 instead.
        let moved = items[3].objectID
        let state = try store.open
        let index = store.database("index/Item/byRank", in: state)
        try state.environment.write { transaction in
            var value = LMDBIncrementalStore.keyBytes(try store.key(of: moved))
            TupleEncoding.appendBigEndian(try #require(store.layout.entity("Item")).tag, to: &value)
            func key(_ rank: Int64) -> [UInt8] {
                var key: [UInt8] = []
                TupleEncoding.append(.integer(rank), to: &key)
                return key
            }
            #expect(try index.delete(key: key(3), value: value, in: transaction))
            try index.put(value, forKey: key(7), in: transaction)
        }
        #expect(try store.verify().isEmpty == false, "verify(.full) finds the entry")
        func expectStopped(_ request: FetchRequest, sourceContains source: String) {
            do {
                let fetched = try ManagedObjectContext(coordinator: coordinator).fetch(request)
                Issue.record("\(request.predicate!) answered \(fetched.count) objects through a damaged entry")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .storeUnusable, "\(error)")
                #expect(error.message.contains(moved.uriRepresentation.absoluteString), "\(error)")
                #expect(error.message.contains(source) && error.message.contains("does not match the predicate"), "\(error)")
            } catch {
                Issue.record("\(error)")
            }
        }
        // Loaded objects of an equality the index answers.
        var loaded = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank == 7"))
        loaded.returnsObjectsAsFaults = false
        #expect(store.explain(loaded).hasPrefix("IndexRange"), "\(store.explain(loaded))")
        expectStopped(loaded, sourceContains: "byRank")
        // A range the index answers, sorted on the rows by another key.
        var sorted = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank BETWEEN {6, 8}"))
        sorted.sortDescriptors = [FetchSortDescriptor(keyPath: "name")]
        sorted.fetchLimit = 5
        #expect(store.explain(sorted).hasPrefix("IndexRange"), "\(store.explain(sorted))")
        expectStopped(sorted, sourceContains: "byRank")
        // Where the rows decide part of the predicate, the row is checked and left out: the answer is right.
        var residual = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank == 7 AND name BEGINSWITH 'item'"))
        residual.returnsObjectsAsFaults = false
        let answered = try ManagedObjectContext(coordinator: coordinator).fetch(residual).map(\.objectID)
        #expect(answered == [7, 57, 107, 157].map { items[$0].objectID })
        // Fetches that never reach the damaged entry answer as before.
        var other = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: "rank == 4"))
        other.returnsObjectsAsFaults = false
        #expect(try ManagedObjectContext(coordinator: coordinator).fetch(other).map(\.objectID) == [4, 54, 104, 154].map { items[$0].objectID })
    }
}

@Suite(.onEveryEngine) struct LazyRowReadingTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Price") {
            AttributeDescription("label", .string)
            AttributeDescription("amount", .decimal)
        }
    }

    /// A store with three prices, the second one's amount overwritten with a well-sealed row holding "x" as the
    /// decimal: the checksum agrees, only reading that value can tell.
    func damagedStore() throws -> (StoreFolder, ManagedObjectContext, [ManagedObjectID]) {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        var prices: [ManagedObject] = []
        for (label, amount) in [("a", 1), ("b", 7), ("c", 3)] {
            let price = try context.insertNewObject(forEntityName: "Price")
            try price.setValue(label, forKey: "label")
            try price.setValue(Decimal(amount), forKey: "amount")
            prices.append(price)
        }
        try context.save()
        let ids = prices.map(\.objectID)
        let state = try store.open
        let rows = store.database("rows/Price", in: state)
        try state.environment.write { transaction in
            let key = LMDBIncrementalStore.keyBytes(try store.key(of: ids[1]))
            var blob = try rows.value(forKey: key, in: transaction)!
            blob[blob.lastIndex(of: UInt8(ascii: "7"))!] = UInt8(ascii: "x")
            try rows.put(RowCodecTests.resealed(blob), forKey: key, in: transaction)
        }
        return (folder, ManagedObjectContext(coordinator: coordinator), ids)
    }

    @Test func aFetchReadsOnlyTheValuesItNeeds() throws {
        let (_, context, ids) = try damagedStore()
        let byLabel = try context.fetch(FetchRequest(entityName: "Price", predicate: FetchPredicate(format: "label != 'a'"),
                                                     sortDescriptors: [FetchSortDescriptor(keyPath: "label")]))
        #expect(byLabel.map(\.objectID) == [ids[1], ids[2]], "the damaged amount is never read")
    }

    @Test func aDamagedValueAFetchNeedsIsAnErrorNamingTheRow() throws {
        let (_, context, ids) = try damagedStore()
        guard case .integer(let key) = ids[1].referenceObject else { return }
        for request in [FetchRequest(entityName: "Price", predicate: try FetchPredicate(format: "amount > 2")),
                        FetchRequest(entityName: "Price", sortDescriptors: [FetchSortDescriptor(keyPath: "amount")]),
                        FetchRequest(entityName: "Price", sortDescriptors: [FetchSortDescriptor(keyPath: "amount")]).with { $0.fetchLimit = 1 },
                        FetchRequest(entityName: "Price", predicate: try FetchPredicate(format: "label == 'b'")).with { $0.returnsObjectsAsFaults = false }] {
            do {
                _ = try context.fetch(request)
                Issue.record("\(request) read a malformed decimal")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .storeUnusable)
                #expect(error.message.contains("key \(key)") || error.message.contains("\(ids[1])"), "names the row: \(error.message)")
                #expect(error.message.contains("amount holds a malformed decimal"), "\(error.message)")
            }
        }
    }
}

@Suite(.onEveryEngine) struct FoldedIndexTests {
    @Test func foldedIndexesHoldFoldedStringsAndFetchesMatchTheEvaluator() throws {
        let folder = StoreFolder()
        let model = try ManagedObjectModel {
            EntityDescription("City") {
                AttributeDescription("name", .string)
                FetchIndexDescription("byFoldedName", elements: [FetchIndexElementDescription("name", collation: .caseAndDiacriticInsensitive)])
                FetchIndexDescription("byCaseName", elements: [FetchIndexElementDescription("name", ascending: false, collation: .caseInsensitive)])
            }
        }
        #expect(try ManagedObjectModel(json: model.jsonData()) == model)
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let names = ["Zürich", "zurich", "ZURICH", "Århus", "aarhus", "Köln", "koln"]
        for name in names { try context.insertNewObject(forEntityName: "City").setValue(name, forKey: "name") }
        try context.save()
        #expect(try store.verify().isEmpty)
        let state = try store.open
        let keys: [[UInt8]] = try state.environment.read { transaction in
            var keys: [[UInt8]] = []
            try store.database("index/City/byFoldedName", in: state).withCursor(in: transaction) { cursor in
                try cursor.forEach { keys.append($0.keyBytes); return true }
            }
            return keys
        }
        let folded = Set(keys.map { String(decoding: $0.dropFirst().prefix { $0 != 0 }, as: UTF8.self) })
        #expect(folded == ["zurich", "arhus", "aarhus", "koln"])
        for format in ["name ==[cd] 'zurich'", "name BEGINSWITH[c] 'k'", "name ==[c] 'ZÜRICH'"] {
            let predicate = try FetchPredicate(format: format)
            let expected = try names.filter { try predicate.evaluate(with: ["name": PredicateValue.string($0)]) }
            let fetched = try context.fetch(FetchRequest(entityName: "City", predicate: predicate)).map { $0.value(forKey: "name") as! String }
            #expect(Set(fetched) == Set(expected), "\(format)")
        }
    }
}

@Suite(.onEveryEngine) struct ChangeLogTests {
    let model = try! ManagedObjectModel { EntityDescription("Note") { AttributeDescription("title", .string) } }

    @Test func theLogNamesEachSavesObjectsAndAForgottenPastMeansRefreshEverything() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let first = try context.insertNewObject(forEntityName: "Note")
        try first.setValue("1", forKey: "title")
        try context.save()
        let second = try context.insertNewObject(forEntityName: "Note")
        try second.setValue("2", forKey: "title")
        try first.setValue("1b", forKey: "title")
        try context.save()
        context.delete(second)
        try context.save()
        #expect(try store.currentChangeToken() == 3)
        #expect(try store.changes(since: 0)?.changes == ContextChanges(inserted: [first.objectID], deleted: [second.objectID]))
        #expect(try store.changes(since: 1)?.changes == ContextChanges(updated: [first.objectID], deleted: [second.objectID]))
        #expect(try store.changes(since: 3)?.changes == ContextChanges())
        // Forget the first save, as the log does after 10 000 saves.
        let state = try store.open
        _ = try state.environment.write { try store.database("changes", in: state).delete(key: LMDBIncrementalStore.keyBytes(1), in: $0) }
        #expect(try store.changes(since: 0) == nil)
        var token: UInt64 = 0
        let other = ManagedObjectContext(coordinator: coordinator)
        let copy = other.object(with: first.objectID)
        _ = copy.value(forKey: "title")
        #expect(try other.mergeRemoteChanges(from: store, since: &token).isEmpty)
        #expect(token == 3 && copy.isFault, "everything was refreshed instead")
    }

    /// A bulk import leaves a bounded log: past `changeLogRecords` records the oldest saves are forgotten (the last
    /// save always kept, however large), the count the log keeps of its records stays true — also in a file whose
    /// log was written before that count was kept — and what is still there merges as before.
    @Test func theLogHoldsABoundedNumberOfRecords() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let budget = Int(StoreLayout.changeLogRecords)
        let state = try store.open
        func held() throws -> (counted: UInt64, actual: Int, saves: [UInt64]) {
            try state.environment.read { transaction in
                var actual = 0, saves: [UInt64] = []
                try store.database("changes", in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        actual += entry.value.count / 11
                        saves.append(TupleEncoding.readBigEndianUInt64(entry.key, at: 0))
                        return true
                    }
                }
                return (try state.sequences.counter(StoreLayout.changeRecordsKey, in: transaction), actual, saves)
            }
        }
        func insert(_ count: Int) throws -> [ManagedObjectID] {
            let context = ManagedObjectContext(coordinator: coordinator)
            let notes = try (0..<count).map { _ in try context.insertNewObject(forEntityName: "Note") }
            for note in notes { try note.setValue("n", forKey: "title") }
            try context.save()
            return notes.map(\.objectID)
        }
        _ = try insert(10)
        // A file whose log was written before the count was kept: the next save counts the log once.
        _ = try state.environment.write { try store.database("seq", in: state).delete(key: Array(StoreLayout.changeRecordsKey.utf8), in: $0) }
        _ = try insert(budget / 2)
        #expect(try held() == (UInt64(10 + budget / 2), 10 + budget / 2, [1, 2]))
        _ = try insert(budget / 2)
        #expect(try held() == (UInt64(budget), budget, [2, 3]), "the first save went: the log held one more than it keeps")
        #expect(try store.changes(since: 1)?.changes.inserted.count == budget)
        #expect(try store.changes(since: 0) == nil, "the first save is forgotten")
        let fourth = try insert(budget + 5)
        #expect(try held() == (UInt64(budget + 5), budget + 5, [4]), "the last save stays whole, the others go")
        #expect(try store.changes(since: 3)?.changes == ContextChanges(inserted: Set(fourth)))
        #expect(try store.changes(since: 2) == nil)
        // A small save after it: the big one goes, since keeping both is over the budget.
        let fifth = try insert(1)
        #expect(try held() == (1, 1, [5]))
        #expect(try store.changes(since: 4)?.changes == ContextChanges(inserted: Set(fifth)))
    }
}

@Suite(.onEveryEngine) struct DerivedInverseTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Team") {
            AttributeDescription("name", .string)
            RelationshipDescription("players", destination: "Player", inverse: "team", toMany: true)
        }
        EntityDescription("Player") {
            AttributeDescription("name", .string)
            RelationshipDescription("team", destination: "Team", inverse: "players")
        }
    }

    @Test func anUnloadedDerivedToManyIsKeptUpToDateWithoutLoadingIt() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        #expect(store.derivesRelationship(model.relationship(named: "players", in: "Team")!))
        let setup = ManagedObjectContext(coordinator: coordinator)
        let red = try setup.insertNewObject(forEntityName: "Team"), blue = try setup.insertNewObject(forEntityName: "Team")
        try red.setValue("red", forKey: "name")
        try blue.setValue("blue", forKey: "name")
        let first = try setup.insertNewObject(forEntityName: "Player")
        try first.setValue("first", forKey: "name")
        try first.setValue(red, forKey: "team")
        try setup.save()

        let context = ManagedObjectContext(coordinator: coordinator)
        let redFault = context.object(with: red.objectID), blueFault = context.object(with: blue.objectID)
        let newcomer = try context.insertNewObject(forEntityName: "Player")
        try newcomer.setValue("newcomer", forKey: "name")
        try newcomer.setValue(redFault, forKey: "team")
        try context.object(with: first.objectID).setValue(blueFault, forKey: "team")
        #expect(redFault.isFault && blueFault.isFault, "keeping the inverse up to date loaded nothing")
        #expect(redFault.relatedObjects(forKey: "players").map { $0.value(forKey: "name") as? String } == ["newcomer"],
                "reading it before the save shows the pending changes")
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(fresh.object(with: red.objectID).relatedObjects(forKey: "players").map { $0.value(forKey: "name") as? String } == ["newcomer"])
        #expect(fresh.object(with: blue.objectID).relatedObjects(forKey: "players").map { $0.value(forKey: "name") as? String } == ["first"])
        #expect(blueFault.relatedObjects(forKey: "players").map(\.objectID) == [first.objectID], "the saved context reads the store afresh")
        #expect(try store.verify().isEmpty)
    }

    @Test func aDerivedChangeLeavesTheDestinationsRowAndVersionAlone() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let team = try setup.insertNewObject(forEntityName: "Team")
        try team.setValue("red", forKey: "name")
        try setup.save()
        // Another context edits the team meanwhile; players joining it elsewhere must not make that a conflict.
        let editor = ManagedObjectContext(coordinator: coordinator)
        try editor.object(with: team.objectID).setValue("crimson", forKey: "name")
        for batch in 0..<3 {
            let context = ManagedObjectContext(coordinator: coordinator)
            let teamFault = context.object(with: team.objectID)
            for n in 0..<10 {
                let player = try context.insertNewObject(forEntityName: "Player")
                try player.setValue("p\(batch)-\(n)", forKey: "name")
                try player.setValue(teamFault, forKey: "team")
            }
            #expect(teamFault.isUpdated, "the team's players changed, as Core Data reports")
            var notified: Set<ManagedObjectID> = []
            let token = context.addObserver { if case .didSave(let changes) = $0 { notified = changes.updated } }
            try context.save()
            context.removeObserver(token)
            #expect(notified.contains(team.objectID), "the save still reports the team as updated")
            #expect(!teamFault.hasChanges)
        }
        #expect(try store.newValuesForObject(with: team.objectID).version == 1, "30 players joined; the team's row was never rewritten")
        try editor.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let reloaded = fresh.object(with: team.objectID)
        #expect(reloaded.value(forKey: "name") as? String == "crimson")
        #expect(reloaded.relatedObjects(forKey: "players").count == 30)
        #expect(try store.newValuesForObject(with: team.objectID).version == 2)
        #expect(try store.verify().isEmpty)
    }
}

/// The inverse of a many-to-many is kept by added and removed members, without loading it.
@Suite(.onEveryEngine) struct ManyToManyDeltaTests {
    /// Saves labels red, green and blue, and an item "cup" labelled with the one at `position`; their IDs.
    private static func cupLabelled(_ position: Int, in coordinator: PersistentStoreCoordinator) throws -> (labels: [ManagedObjectID], item: ManagedObjectID) {
        let setup = ManagedObjectContext(coordinator: coordinator)
        let labels = try ["red", "green", "blue"].map { name in
            let label = try setup.insertNewObject(forEntityName: "Label")
            try label.setValue(name, forKey: "name")
            return label
        }
        let item = try setup.insertNewObject(forEntityName: "Item")
        try item.setValue("cup", forKey: "name")
        try item.setValue([labels[position]], forKey: "labels")
        try setup.save()
        return (labels.map(\.objectID), item.objectID)
    }

    @Test func anUnloadedManyToManyInverseIsChangedWithoutLoadingIt() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let items = StoreConformance.model.relationship(named: "items", in: "Label")!
        #expect(store.acceptsToManyChanges(for: items) && !store.derivesRelationship(items))
        let setup = ManagedObjectContext(coordinator: coordinator)
        let label = try setup.insertNewObject(forEntityName: "Label")
        try label.setValue("red", forKey: "name")
        let old = try (0..<3).map { n -> ManagedObject in
            let item = try setup.insertNewObject(forEntityName: "Item")
            try item.setValue("old \(n)", forKey: "name")
            try item.setValue([label], forKey: "labels")
            return item
        }
        try setup.save()

        let context = ManagedObjectContext(coordinator: coordinator)
        let labelFault = context.object(with: label.objectID)
        let newcomer = try context.insertNewObject(forEntityName: "Item")
        try newcomer.setValue("new", forKey: "name")
        try newcomer.setValue([labelFault], forKey: "labels")
        try context.object(with: old[1].objectID).setValue([ManagedObject](), forKey: "labels")
        #expect(labelFault.isFault, "keeping the inverse up to date loaded the label")
        try context.save()

        let fresh = ManagedObjectContext(coordinator: coordinator)
        let reloaded = fresh.object(with: label.objectID)
        #expect(reloaded.value(forKey: "name") as? String == "red", "the label's own values survived the save")
        #expect(Set(reloaded.relatedObjects(forKey: "items").map(\.objectID)) == [old[0].objectID, old[2].objectID, newcomer.objectID])
        #expect(labelFault.relatedObjects(forKey: "items").count == 3, "the saving context reads the store afresh")
        #expect(try store.verify().isEmpty)
    }

    /// A context that read an item's labels before another context added one, then changes them, saves what it
    /// changed — the members it added and removed — not its whole, stale list: the other context's label stays, and
    /// both sides of every link agree (a whole list written over the stored one dropped the label from the item but
    /// left the item among the label's).
    @Test func aContextSavesTheMembersItChangedNotItsStaleList() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let (labels, item) = try Self.cupLabelled(2, in: coordinator)

        let stale = ManagedObjectContext(coordinator: coordinator)
        let staleItem = stale.object(with: item)
        #expect(staleItem.relatedObjects(forKey: "labels").map(\.objectID) == [labels[2]])
        let other = ManagedObjectContext(coordinator: coordinator)
        try other.object(with: item).setValue([other.object(with: labels[2]), other.object(with: labels[0])], forKey: "labels")
        try other.save()

        // Blue out, green in; red, which the stale context never saw, is not its change.
        try staleItem.setValue([stale.object(with: labels[1])], forKey: "labels")
        try stale.save()

        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(Set(fresh.object(with: item).relatedObjects(forKey: "labels").map(\.objectID)) == [labels[0], labels[1]])
        #expect(fresh.object(with: labels[0]).relatedObjects(forKey: "items").map(\.objectID) == [item])
        #expect(fresh.object(with: labels[2]).relatedObjects(forKey: "items").isEmpty)
        #expect(try store.verify().isEmpty)
    }

    /// A loaded object whose only change is its members is saved without its values (they stay as stored, and a row
    /// it still reads is not decoded to validate or send them) but still with the version the context read: its
    /// next change of members goes on top of the saved one, and another context's change to its name meanwhile is a
    /// conflict, as for any update, with nothing written — which a merge policy then resolves as for any update.
    @Test func aLoadedObjectSavingOnlyItsMembersStillExpectsTheVersionItRead() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let (labels, item) = try Self.cupLabelled(0, in: coordinator)
        func stored() -> (name: String?, labels: Set<ManagedObjectID>) {
            let fresh = ManagedObjectContext(coordinator: coordinator)
            let object = fresh.object(with: item)
            return (object.value(forKey: "name") as? String, Set(object.relatedObjects(forKey: "labels").map(\.objectID)))
        }

        let context = ManagedObjectContext(coordinator: coordinator)
        let loaded = context.object(with: item)
        #expect(loaded.value(forKey: "name") as? String == "cup")
        try loaded.setValue([context.object(with: labels[0]), context.object(with: labels[1])], forKey: "labels")
        try context.save()
        #expect(loaded.value(forKey: "name") as? String == "cup")
        #expect(loaded.committedValues(forKeys: ["name"])["name"] as? String == "cup")
        try loaded.setValue([context.object(with: labels[1])], forKey: "labels")
        try context.save()
        #expect(stored().labels == [labels[1]], "the second change went on top of the first")

        let other = ManagedObjectContext(coordinator: coordinator)
        try other.object(with: item).setValue("mug", forKey: "name")
        try other.save()
        try loaded.setValue([context.object(with: labels[2])], forKey: "labels")
        do {
            try context.save()
            Issue.record("a save of members over another context's rename went through")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .mergeConflict)
            #expect(error.conflicts.first?.persistedSnapshot?.values.attributeDictionary["name"] == .string("mug"))
        }
        #expect(stored().labels == [labels[1]], "nothing of the refused save was written")
        #expect(stored().name == "mug")
        // Merged property by property, the members go on top of the other context's rename.
        context.mergePolicy = .mergeByPropertyObjectTrump
        try context.save()
        #expect(stored().labels == [labels[2]] && stored().name == "mug")
        #expect(loaded.value(forKey: "name") as? String == "mug" && !loaded.hasChanges)
        #expect(try store.verify().isEmpty)
    }

    @Test func permanentIDsTakenBeforeTheSaveReachTheChangesRecordedOnUnloadedRelationships() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let label = try setup.insertNewObject(forEntityName: "Label")
        try label.setValue("red", forKey: "name")
        try setup.save()
        let context = ManagedObjectContext(coordinator: coordinator)
        let labelFault = context.object(with: label.objectID)
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("new", forKey: "name")
        try item.setValue([labelFault], forKey: "labels")
        #expect(labelFault.isFault, "the label's side was recorded without loading it")
        try context.obtainPermanentIDs(for: [item])
        try context.save()
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(fresh.object(with: label.objectID).relatedObjects(forKey: "items").map(\.objectID) == [item.objectID])
        #expect(try store.verify().isEmpty)
    }

    @Test func aMembershipChangeKeepsTheOwnersRowAndVersion() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let label = try setup.insertNewObject(forEntityName: "Label")
        try label.setValue("red", forKey: "name")
        try setup.save()
        let editor = ManagedObjectContext(coordinator: coordinator)
        try editor.object(with: label.objectID).setValue("crimson", forKey: "name")

        let context = ManagedObjectContext(coordinator: coordinator)
        let labelFault = context.object(with: label.objectID)
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("new", forKey: "name")
        try item.setValue([labelFault], forKey: "labels")
        try context.save()
        #expect(try store.newValuesForObject(with: label.objectID).version == 1, "only the link table changed")
        // The context was told the version the store kept: a later change of its own saves without a conflict.
        try labelFault.setValue("scarlet", forKey: "name")
        try context.save()
        #expect(try store.newValuesForObject(with: label.objectID).version == 2)
        #expect(throws: ManagedObjectContextError.self, "the editor read version 1, which another save replaced") { try editor.save() }
        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(fresh.object(with: label.objectID).relatedObjects(forKey: "items").map(\.objectID) == [item.objectID])
        #expect(try store.verify().isEmpty)
    }

    @Test func objectsChangedOnlyByRecordedMembersStayFaultsThroughTheSaveUnlessTheyAreGone() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Label") {
                AttributeDescription("name", .string)
                RelationshipDescription("items", destination: "Item", inverse: "labels", toMany: true)
                RelationshipDescription("pinned", destination: "Item", inverse: "pins", toMany: true, maximumCount: 2)
            }
            EntityDescription("Item") {
                AttributeDescription("name", .string)
                RelationshipDescription("labels", destination: "Label", inverse: "items", toMany: true)
                RelationshipDescription("pins", destination: "Label", inverse: "pinned", toMany: true)
            }
        }
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let labels = try ["red", "blue"].map { name in
            let label = try setup.insertNewObject(forEntityName: "Label")
            try label.setValue(name, forKey: "name")
            return label
        }
        try setup.save()
        func addItems(_ count: Int, to label: ManagedObject, in context: ManagedObjectContext, key: String = "labels") throws {
            for n in 0..<count {
                let item = try context.insertNewObject(forEntityName: "Item")
                try item.setValue("item \(n)", forKey: "name")
                try item.setValue([label], forKey: key)
            }
        }

        // Validation and the save leave the label unloaded; its row keeps its bytes and version.
        let context = ManagedObjectContext(coordinator: coordinator)
        let red = context.object(with: labels[0].objectID)
        try addItems(2, to: red, in: context)
        try context.save()
        #expect(red.isFault, "saving members recorded without loading loaded the label")
        #expect(try store.newValuesForObject(with: red.objectID).version == 1)
        #expect(red.value(forKey: "name") as? String == "red" && red.relatedObjects(forKey: "items").count == 2)

        // A count rule on a changed relationship still holds: checking it loads the members.
        let second = ManagedObjectContext(coordinator: coordinator)
        try addItems(2, to: second.object(with: labels[0].objectID), in: second, key: "pins")
        try second.save()
        let third = ManagedObjectContext(coordinator: coordinator)
        try addItems(1, to: third.object(with: labels[0].objectID), in: third, key: "pins")
        let tooMany = #expect(throws: ManagedObjectContextError.self) { try third.save() }
        #expect(tooMany?.code == .validation && tooMany?.message.contains("validation failure") == true)
        #expect(tooMany?.validationFailures.first?.message.contains("more than the maximum 2") == true)

        // A label deleted elsewhere since: the save names it and writes nothing.
        let late = ManagedObjectContext(coordinator: coordinator)
        try addItems(1, to: late.object(with: labels[1].objectID), in: late)
        let remover = ManagedObjectContext(coordinator: coordinator)
        remover.delete(remover.object(with: labels[1].objectID))
        try remover.save()
        let gone = #expect(throws: ManagedObjectContextError.self) { try late.save() }
        #expect(gone?.code == .objectNotFound && gone?.message.contains("\(labels[1].objectID)") == true, "\(String(describing: gone))")
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Item")) == 4, "nothing of the refused saves was written")
        #expect(try store.verify().isEmpty)
    }

    /// Members recorded without loading a relationship (a many-to-many the store takes as deltas) are applied when
    /// the relationship loads — by a prefetch too — so what is shown and what a save writes include them.
    @Test func aPrefetchKeepsMembersRecordedBeforeTheRelationshipLoaded() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(StoreConformance.model)
        let setup = ManagedObjectContext(coordinator: coordinator)
        let label = try setup.insertNewObject(forEntityName: "Label")
        try label.setValue("red", forKey: "name")
        let old = try setup.insertNewObject(forEntityName: "Item")
        try old.setValue("old", forKey: "name")
        try old.setValue([label], forKey: "labels")
        try setup.save()

        let context = ManagedObjectContext(coordinator: coordinator)
        let red = context.object(with: label.objectID)
        let new = try context.insertNewObject(forEntityName: "Item")
        try new.setValue("new", forKey: "name")
        try new.setValue([red], forKey: "labels")  // recorded on red.items, which is not loaded
        try context.obtainPermanentIDs(for: [new])
        var request = FetchRequest(entityName: "Label")
        request.relationshipKeyPathsForPrefetching = ["items"]
        _ = try context.fetch(request)
        #expect(Set(red.relatedObjects(forKey: "items").map(\.objectID)) == [old.objectID, new.objectID])
        try red.setValue("crimson", forKey: "name")
        try context.save()

        let fresh = ManagedObjectContext(coordinator: coordinator)
        #expect(Set(fresh.object(with: label.objectID).relatedObjects(forKey: "items").map(\.objectID)) == [old.objectID, new.objectID])
        #expect(try store.verify().isEmpty)
    }
}

/// A uniqueness constraint whose properties an index of the same entity holds in the same order, compared exactly,
/// is kept in that index's table (no `unique/…` table of the same keys): a clash is still refused — with a stored
/// row, within one save, by an update — and names the constraint; NULLs never clash; two rows may swap their values
/// in one save; a value a save deletes is free for the same save's inserts. A case-insensitive index keeps no
/// constraint (its keys fold values the constraint tells apart).
@Suite(.onEveryEngine) struct SharedUniquenessTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Package") {
            AttributeDescription("name", .string, isOptional: true)
            AttributeDescription("version", .integer64, isOptional: true)
            AttributeDescription("label", .string, isOptional: true)
            FetchIndexDescription("byNameVersion", elements: [.ascending("name"), .descending("version")])
            FetchIndexDescription("byLabel", elements: [FetchIndexElementDescription("label", collation: .caseInsensitive)])
            UniquenessConstraint("name", "version")
            UniquenessConstraint("label")
        }
    }

    @discardableResult
    func insert(_ context: ManagedObjectContext, _ name: String?, _ version: Int64?, label: String? = nil) throws -> ManagedObject {
        let package = try context.insertNewObject(forEntityName: "Package")
        try package.setValue(name, forKey: "name")
        try package.setValue(version, forKey: "version")
        try package.setValue(label, forKey: "label")
        return package
    }

    func names(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
        let context = ManagedObjectContext(coordinator: coordinator)
        return try context.fetch(FetchRequest(entityName: "Package")).map {
            "\($0.value(forKey: "name") as? String ?? "nil") \($0.value(forKey: "version") as? Int64 ?? -1)"
        }.sorted()
    }

    @Test func anIndexKeepsTheConstraintItCovers() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let entity = try #require(StoreLayout(model: model).entity("Package"))
        #expect(entity.indexOfConstraint == [0, -1], "(name, version) is kept by byNameVersion; label's folded index keeps nothing")
        let tables = try store.open.databases.keys.filter { $0.hasPrefix("unique/") || $0.hasPrefix("index/") }.sorted()
        #expect(tables == ["index/Package/byLabel", "index/Package/byNameVersion", "unique/Package/1"])

        let context = ManagedObjectContext(coordinator: coordinator)
        try insert(context, "libc6", 1)
        try insert(context, "libc6", 2)
        try insert(context, nil, 1)
        try insert(context, nil, 1)  // NULLs never clash
        try context.save()
        let listed = try names(coordinator); #expect(listed == ["libc6 1", "libc6 2", "nil 1", "nil 1"], "\(listed)")

        func refused(_ change: (ManagedObjectContext) throws -> Void) throws -> String {
            let context = ManagedObjectContext(coordinator: coordinator)
            try change(context)
            do {
                try context.save()
                Issue.record("a clash was saved")
                return ""
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .constraintViolation)
                return error.message
            }
        }
        let stored = try refused { try insert($0, "libc6", 2) }
        #expect(stored.contains(#"Package (name, version) = ("libc6", 2) is already taken"#), "\(stored)")
        let twice = try refused { try insert($0, "apt", 1); try insert($0, "apt", 1) }
        #expect(twice.contains(#"("apt", 1) is already taken"#), "\(twice)")
        let update = try refused { context in
            let second = try context.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "version == 2")))[0]
            try second.setValue(Int64(1), forKey: "version")
        }
        #expect(update.contains(#"("libc6", 1) is already taken"#), "\(update)")
        #expect(try names(coordinator) == ["libc6 1", "libc6 2", "nil 1", "nil 1"], "nothing of a refused save is written")

        // Swapping two rows' values, and taking a value the same save frees, are no clash.
        let swap = ManagedObjectContext(coordinator: coordinator)
        let libc = try swap.fetch(FetchRequest(entityName: "Package", predicate: try FetchPredicate(format: "name == 'libc6'")))
        let one = try #require(libc.first { $0.value(forKey: "version") as? Int64 == 1 })
        let two = try #require(libc.first { $0.value(forKey: "version") as? Int64 == 2 })
        try one.setValue(Int64(2), forKey: "version")
        try two.setValue(Int64(1), forKey: "version")
        try swap.save()
        let free = ManagedObjectContext(coordinator: coordinator)
        free.delete(free.object(with: one.objectID))
        try insert(free, "libc6", 2)
        try free.save()
        let after = try names(coordinator); #expect(after == ["libc6 1", "libc6 2", "nil 1", "nil 1"], "\(after)")
        #expect(try store.verify().isEmpty)

        // The folded index keeps no constraint: "Main" and "main" share its key but are different labels.
        let labels = ManagedObjectContext(coordinator: coordinator)
        try insert(labels, "a", 1, label: "Main")
        try insert(labels, "b", 1, label: "main")
        try labels.save()
        let label = try refused { try insert($0, "c", 1, label: "main") }
        #expect(label.contains(#"Package (label) = ("main") is already taken"#), "\(label)")
    }

    /// A format-4 file kept such a constraint in its own `unique/…` table as well: opening it as format 5 drops
    /// that table and keeps the others, and the constraint still holds.
    @Test func theUpgradeDropsTheTableOfAConstraintAnIndexKeeps() throws {
        let folder = StoreFolder()
        do {
            let (coordinator, store) = try folder.coordinator(model)
            let context = ManagedObjectContext(coordinator: coordinator)
            try insert(context, "libc6", 1)
            try context.save()
            let environment = try store.open.environment
            let old = try environment.openDatabase(named: "unique/Package/0")
            try environment.write { transaction in
                try old.put([0, 0, 0, 0, 0, 0, 0, 1, 0, 1], forKey: Array("libc6 1".utf8), in: transaction)
                try environment.openDatabase(named: "meta").put(Array("4".utf8), forKey: Array("format".utf8), in: transaction)
            }
        }
        let (coordinator, store) = try folder.coordinator(model)
        #expect(store.metadata["LMDBStoreFormatVersion"] == String(LMDBIncrementalStore.formatVersion))
        let environment = try store.open.environment
        #expect(throws: LMDBError.notFound) { try environment.openDatabase(named: "unique/Package/0", create: false) }
        #expect(throws: Never.self) { try environment.openDatabase(named: "unique/Package/1", create: false) }
        #expect(try store.verify().isEmpty)
        let context = ManagedObjectContext(coordinator: coordinator)
        try insert(context, "libc6", 1)
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
    }

    /// Two rows holding one key of an index that keeps a constraint (only damage or another program can do that) is
    /// a problem `verify()` names.
    @Test func verifyNamesTwoRowsUnderAKeptConstraintsKey() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        try insert(context, "libc6", 1)
        try insert(context, "apt", 1)
        try context.save()
        let state = try store.open
        let index = store.database("index/Package/byNameVersion", in: state)
        let rows = store.database("rows/Package", in: state)
        try state.environment.write { transaction in
            // The row of apt becomes a second libc6 1 (its entry moved with it), as a foreign writer could leave it.
            let (aptKey, aptEntry, libcKey, libcEntry) = try index.withCursor(in: transaction) { cursor in
                let first = try #require(try cursor.first()), second = try #require(try cursor.nextKey())  // one row per name and version
                return (first.keyBytes, first.valueBytes, second.keyBytes, second.valueBytes)
            }
            _ = try index.delete(key: aptKey, value: aptEntry, in: transaction)
            try index.put(aptEntry, forKey: libcKey, in: transaction)
            let libcRow = try #require(try rows.value(forKey: Array(libcEntry[0..<8]), in: transaction))
            try rows.put(libcRow, forKey: Array(aptEntry[0..<8]), in: transaction)
        }
        let problems = try store.verify()
        #expect(problems.contains { $0.contains("index/Package/byNameVersion") && $0.contains("uniqueness constraint") }, "\(problems)")
    }
}
