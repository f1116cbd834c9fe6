import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// An object loaded from the LMDB store reads its values from a copy of its row, decoding each value when it is
/// first read. These tests hold that to the behaviour of an object holding decoded values: every type reads the
/// same, in any order; a write, a snapshot, a rollback, a refresh and a failed save see the row's values; a row whose
/// values are damaged is refused when the object loads, not answered later as NULL.
@Suite(.onEveryEngine) struct RowBackedObjectTests {
    static let uuid = UUID(uuidString: "5B2E4C1A-3F0D-4E7B-9A61-2C8D7E5F4A3B")!
    static let hired = Date(timeIntervalSinceReferenceDate: 700_000_000.25)

    let model = try! ManagedObjectModel {
        EntityDescription("Team") {
            AttributeDescription("title", .string)
            RelationshipDescription("members", destination: "Member", inverse: "team", toMany: true)
            RelationshipDescription("tags", destination: "Tag", inverse: "teams", toMany: true)
        }
        EntityDescription("Tag") {
            AttributeDescription("name", .string)
            RelationshipDescription("teams", destination: "Team", inverse: "tags", toMany: true)
        }
        EntityDescription("Member") {
            AttributeDescription("name", .string)
            AttributeDescription("small", .integer16, isOptional: true)
            AttributeDescription("medium", .integer32, isOptional: true)
            AttributeDescription("large", .integer64, isOptional: true)
            AttributeDescription("ratio", .double, isOptional: true)
            AttributeDescription("weight", .float, isOptional: true)
            AttributeDescription("price", .decimal, isOptional: true)
            AttributeDescription("active", .boolean, isOptional: true)
            AttributeDescription("hired", .date, isOptional: true)
            AttributeDescription("photo", .binaryData, isOptional: true)
            AttributeDescription("badge", .uuid, isOptional: true)
            AttributeDescription("page", .uri, isOptional: true)
            AttributeDescription("note", .string, isOptional: true)
            AttributeDescription("mood", .string, isOptional: true).transient()
            RelationshipDescription("team", destination: "Team", inverse: "members", isOptional: true)
        }
    }

    static let values: [(String, any Sendable)] = [
        ("name", "Ada Lovelace, Countess of Lovelace"), ("small", Int16(-7)), ("medium", Int32(1 << 20)), ("large", Int64.min),
        ("ratio", 0.1), ("weight", Float(2.5)), ("price", Decimal(string: "19.99")!), ("active", true), ("hired", hired),
        ("photo", Data([0, 1, 2, 0xFF])), ("badge", uuid), ("page", URL(string: "https://example.com/a%20b")!),
    ]

    /// A store with a team and a member holding every value of ``values`` (`note` left NULL).
    private func seeded(_ coordinator: PersistentStoreCoordinator) throws -> (team: ManagedObjectID, member: ManagedObjectID) {
        let context = ManagedObjectContext(coordinator: coordinator)
        let team = try context.insertNewObject(forEntityName: "Team")
        try team.setValue("Reds", forKey: "title")
        let member = try context.insertNewObject(forEntityName: "Member")
        for (key, value) in Self.values { try member.setValue(value, forKey: key) }
        try member.setValue(team, forKey: "team")
        try context.save()
        return (team.objectID, member.objectID)
    }

    /// Whether `object` holds exactly ``values``, read by key, with `note` NULL and `team` the team.
    private func holdsTheSeededValues(_ object: ManagedObject, team: ManagedObjectID, order: [Int]) -> Bool {
        var same = true
        for index in order {
            let (key, expected) = Self.values[index]
            let value = object.value(forKey: key)
            let equal: Bool = switch expected {
            case let expected as String: value as? String == expected
            case let expected as Int16: value as? Int16 == expected
            case let expected as Int32: value as? Int32 == expected
            case let expected as Int64: value as? Int64 == expected
            case let expected as Double: value as? Double == expected
            case let expected as Float: value as? Float == expected
            case let expected as Decimal: value as? Decimal == expected
            case let expected as Bool: value as? Bool == expected
            case let expected as Date: value as? Date == expected
            case let expected as Data: value as? Data == expected
            case let expected as UUID: value as? UUID == expected
            case let expected as URL: value as? URL == expected
            default: false
            }
            if !equal { Issue.record("\(key): \(String(describing: value)) instead of \(expected)") }
            same = same && equal
        }
        return same && object.value(forKey: "note") == nil && (object.value(forKey: "team") as? ManagedObject)?.objectID == team
    }

    @Test func everyTypeReadsTheSameFromTheRowInAnyOrderAndReadingDecodesNothingElse() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        var random = SystemRandomNumberGenerator()
        for round in 0..<6 {
            let context = ManagedObjectContext(coordinator: coordinator)
            let member = context.object(with: ids.member)
            let order = round == 0 ? Array(Self.values.indices) : Self.values.indices.shuffled(using: &random)
            #expect(holdsTheSeededValues(member, team: ids.team, order: order))
            // Read twice: the second read gives the kept value (strings, data, decimals, URIs) or decodes again.
            #expect(holdsTheSeededValues(member, team: ids.team, order: order.reversed()))
            // The values the object gives as a whole are the row's.
            #expect(member.committedValues(forKeys: ["name", "large"])["large"] as? Int64 == Int64.min)
            #expect(member.row == nil)
            #expect(holdsTheSeededValues(member, team: ids.team, order: order))
        }
        // Numbers, dates, Booleans, UUIDs, to-ones and one string are read from the row without decoding the rest; a
        // second value that has to be kept (data) makes the object decode its whole row.
        let context = ManagedObjectContext(coordinator: coordinator)
        let member = context.object(with: ids.member)
        #expect(holdsTheSeededValues(member, team: ids.team, order: [3, 1, 2, 4, 5, 7, 8, 10, 0, 0]))
        #expect(member.row != nil && member.rowKeptIndex >= 0, "reading one string made the object decode its whole row")
        #expect(member.attributeStorage.isEmpty && member.toOneStorage.isEmpty)
        #expect(member.value(forKey: "photo") as? Data == Data([0, 1, 2, 0xFF]))
        #expect(member.row == nil && member.rowKept == nil)
        #expect(holdsTheSeededValues(member, team: ids.team, order: Array(Self.values.indices)))
        // Typed keys read the same way.
        let typedContext = ManagedObjectContext(coordinator: coordinator)
        let typedMember = typedContext.object(with: ids.member)
        #expect(typedMember[AttributeKey<String>("name")] == "Ada Lovelace, Countess of Lovelace")
        #expect(typedMember[AttributeKey<Int64>("large")] == Int64.min)
        #expect(typedMember[AttributeKey<Date>("hired")] == Self.hired)
        #expect(typedMember[AttributeKey<String>("note")] == nil)
        #expect(typedMember.row != nil)
    }

    /// Whether a value is there is read from the row's field table, for every type, as decoding the value would
    /// answer; and an object whose save changed only its members — validated, sent without its values, made clean —
    /// still reads its row, decoding nothing on the way.
    @Test func aRowTellsWhetherItHoldsAValueAndAMembersOnlySaveDecodesNothing() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let member = context.object(with: ids.member)
        member.willAccessValues()
        #expect(member.row != nil)
        for slot in member.handle.attributeSlots where !slot.isTransient {
            #expect(member.holdsAttributeValue(slot) == (slot.name != "note"), "\(slot.name)")
        }
        #expect(member.row != nil && member.rowKeptIndex < 0, "telling decoded nothing")

        // A team gains a member (a relationship its store derives from the member's to-one) and a tag (a
        // many-to-many, sent as the members added).
        let team = context.object(with: ids.team)
        team.willAccessValues()
        let newcomer = try context.insertNewObject(forEntityName: "Member")
        try newcomer.setValue("Grace", forKey: "name")
        let tag = try context.insertNewObject(forEntityName: "Tag")
        try tag.setValue("fast", forKey: "name")
        try team.setValue(team.relatedObjects(forKey: "members") + [newcomer], forKey: "members")
        try team.setValue([tag], forKey: "tags")
        try context.save()
        #expect(team.row != nil && team.rowKeptIndex < 0 && team.attributeStorage.isEmpty, "the team's row was not decoded")
        #expect(!team.hasChanges && team.value(forKey: "title") as? String == "Reds")
        #expect(team.committedValues(forKeys: ["tags"])["tags"] as? [ManagedObjectID] == [tag.objectID])
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let stored = fresh.object(with: ids.team)
        #expect(Set(stored.relatedObjects(forKey: "members").map(\.objectID)) == [ids.member, newcomer.objectID])
        #expect(stored.relatedObjects(forKey: "tags").map(\.objectID) == [tag.objectID])
        #expect(fresh.object(with: tag.objectID).relatedObjects(forKey: "teams").map(\.objectID) == [ids.team])
    }

    @Test func aFetchOfLoadedObjectsHandsOutObjectsReadingTheirRows() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        var request = FetchRequest(entityName: "Member", predicate: try FetchPredicate(format: "large < 0"))
        request.returnsObjectsAsFaults = false
        let fetched = try context.fetch(request)
        #expect(fetched.count == 1 && !fetched[0].isFault && fetched[0].row != nil)
        #expect(holdsTheSeededValues(fetched[0], team: ids.team, order: Array(Self.values.indices)))
        // In-memory evaluation (a predicate over the registered object) reads the row too.
        #expect(try FetchPredicate(format: "name BEGINSWITH 'Ada' AND price > 19 AND team.title == 'Reds'").evaluate(with: fetched[0]))
    }

    @Test func aBatchOfFaultsSharesBlocksOfRowsAndEachObjectReadsItsOwn() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        // Rows of many sizes, some larger than a block: each is read back as written, whatever block it lands in.
        let notes = (0..<90).map { index in String(repeating: Character(UnicodeScalar(UInt8(65 + index % 26))), count: index % 15 == 7 ? 6_000 + index : index * 9) }
        let team: ManagedObjectID = try {
            let writer = ManagedObjectContext(coordinator: coordinator)
            let team = try writer.insertNewObject(forEntityName: "Team")
            try team.setValue("Blues", forKey: "title")
            for (index, note) in notes.enumerated() {
                let member = try writer.insertNewObject(forEntityName: "Member")
                try member.setValue("m\(index)", forKey: "name")
                try member.setValue(Int64(index), forKey: "large")
                try member.setValue(note, forKey: "note")
                try member.setValue(team, forKey: "team")
            }
            try writer.save()
            return team.objectID
        }()

        var kept: ManagedObject?
        do {
            let context = ManagedObjectContext(coordinator: coordinator)
            let members = Array(context.object(with: team).relatedObjects(forKey: "members"))
            #expect(members.count == notes.count)
            for member in members {
                let index = Int(member.value(forKey: "large") as! Int64)
                #expect(member.value(forKey: "name") as? String == "m\(index)")
                #expect(member.row != nil, "reading one string keeps the object reading its row")
                #expect((member.value(forKey: "team") as? ManagedObject)?.objectID == team)
            }
            // Rows that fit share a block; a row larger than a block has one of its own.
            let small = members.filter { ($0.value(forKey: "large") as! Int64) % 15 != 7 }
            let large = members.filter { ($0.value(forKey: "large") as! Int64) % 15 == 7 }
            let blocks = Set(small.map { ObjectIdentifier($0.row!.block) })
            #expect(blocks.count > 1 && blocks.count < small.count / 4)
            for member in large { #expect(!members.contains { $0 !== member && $0.row!.block === member.row!.block }) }
            kept = small.first { $0.value(forKey: "large") as? Int64 == 40 }
        }
        // The context and the rest of the batch are gone; the object kept reads its values from the block it keeps.
        #expect(kept?.managedObjectContext == nil)
        #expect(kept?.value(forKey: "note") as? String == notes[40])
        #expect(kept?.value(forKey: "name") as? String == "m40")
        // Every note reads back whole, the large ones included.
        let context = ManagedObjectContext(coordinator: coordinator)
        for member in context.object(with: team).relatedObjects(forKey: "members") {
            let index = Int(member.value(forKey: "large") as! Int64)
            #expect(member.value(forKey: "note") as? String == notes[index], "note of m\(index)")
        }
    }

    /// A member that, as it awakes, counts the faults left among the context's members and reads its team (a fault of
    /// its own to fire).
    final class AwakeningMember: ManagedObject {
        var faultsLeftAtAwake = -1
        var teamTitleAtAwake: String?
        override func awakeFromFetch() {
            faultsLeftAtAwake = managedObjectContext!.registeredObjects.filter { $0.entityName == "Member" && $0.isFault }.count
            teamTitleAtAwake = (value(forKey: "team") as? ManagedObject)?.value(forKey: "title") as? String
        }
    }

    @Test func aBatchAwakesOnceEveryObjectHasItsValuesAndAnAwakeningObjectMayFireFaults() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        coordinator.registerClass(AwakeningMember.self, forEntityName: "Member")
        let team: ManagedObjectID = try {
            let writer = ManagedObjectContext(coordinator: coordinator)
            let team = try writer.insertNewObject(forEntityName: "Team")
            try team.setValue("Greens", forKey: "title")
            for index in 0..<30 {
                let member = try writer.insertNewObject(forEntityName: "Member")
                try member.setValue("m\(index)", forKey: "name")
                try member.setValue(team, forKey: "team")
            }
            try writer.save()
            return team.objectID
        }()
        let context = ManagedObjectContext(coordinator: coordinator)
        let members = context.object(with: team).relatedObjects(forKey: "members").map { $0 as! AwakeningMember }
        #expect(members.allSatisfy { $0.isFault })
        _ = members[0].value(forKey: "name")
        for member in members {
            #expect(member.faultsLeftAtAwake == 0, "\(member.objectID) awoke while members of its batch were faults")
            #expect(member.teamTitleAtAwake == "Greens")
        }
    }

    @Test func writesChangesRollbackAndRefreshSeeTheRowsValues() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let member = context.object(with: ids.member)
        #expect(member.value(forKey: "name") as? String == "Ada Lovelace, Countess of Lovelace")
        try member.setValue(Int32(5), forKey: "medium")
        #expect(member.changedValues.keys.sorted() == ["medium"])
        #expect(member.committedValues(forKeys: ["medium"])["medium"] as? Int32 == 1 << 20)
        #expect(holdsTheSeededValues(member, team: ids.team, order: [0, 3, 4, 6, 9, 11]))
        context.rollback()
        #expect(member.value(forKey: "medium") as? Int32 == 1 << 20)
        #expect(!member.hasChanges)

        // A save writes the change and keeps every other value as the row had it.
        try member.setValue("Grace", forKey: "note")
        try context.save()
        let other = ManagedObjectContext(coordinator: coordinator)
        let reread = other.object(with: ids.member)
        #expect(reread.value(forKey: "note") as? String == "Grace")
        #expect(holdsTheSeededValues(reread, team: ids.team, order: [1, 2, 5, 7, 8, 10]) == false, "note is no longer NULL")
        #expect(reread.value(forKey: "price") as? Decimal == Decimal(string: "19.99")!)

        // A refresh merging changes takes the store's row and keeps the object's own change on top.
        try reread.setValue(Int16(1), forKey: "small")
        try member.setValue(Int64(42), forKey: "large")
        try context.save()
        other.refresh(reread, mergeChanges: true)
        #expect(reread.value(forKey: "small") as? Int16 == 1)
        #expect(reread.value(forKey: "large") as? Int64 == 42)
        #expect(reread.changedValues.keys.sorted() == ["small"])
    }

    @Test func aTransientValueSetOnAnObjectReadingItsRowStaysAndIsNeverStored() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let member = context.object(with: ids.member)
        #expect(member.value(forKey: "ratio") as? Double == 0.1)
        try member.setValue("calm", forKey: "mood")
        #expect(member.row != nil, "a transient value is not the row's: setting it need not decode the row")
        #expect(member.value(forKey: "mood") as? String == "calm")
        #expect(member.value(forKey: "name") as? String == "Ada Lovelace, Countess of Lovelace")
        try member.setValue("Ada", forKey: "name")
        #expect(member.row == nil && member.value(forKey: "mood") as? String == "calm")
        try context.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let stored = reader.object(with: ids.member)
        #expect(stored.value(forKey: "name") as? String == "Ada" && stored.value(forKey: "mood") == nil)
    }

    @Test func aFailedSavePutsBackObjectsReadingTheirRows() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let team = context.object(with: ids.team)
        let member = context.object(with: ids.member)
        #expect(member.value(forKey: "name") as? String == "Ada Lovelace, Countess of Lovelace")
        #expect(team.value(forKey: "title") as? String == "Reds")
        // Another context changes the member; this one deletes the team (so the save records every object) and
        // changes the member too: a conflict, and the default merge policy refuses the save.
        let other = ManagedObjectContext(coordinator: coordinator)
        try other.object(with: ids.member).setValue("Hedy", forKey: "note")
        try other.save()
        try member.setValue(Int32(9), forKey: "medium")
        context.delete(team)
        #expect(throws: ManagedObjectContextError.self) { try context.save() }
        #expect(member.value(forKey: "medium") as? Int32 == 9)
        #expect(member.committedValues(forKeys: ["note"])["note"] == nil)
        #expect(team.isDeleted)
        context.rollback()
        #expect(team.value(forKey: "title") as? String == "Reds")
        #expect(member.value(forKey: "medium") as? Int32 == 1 << 20)
    }

    @Test func aDamagedValueUnderAValidChecksumIsRefusedWhenTheObjectLoads() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let ids = try seeded(coordinator)
        // A decimal that is not a number and a string that is not UTF-8, each sealed with a checksum that agrees: the
        // row's layout is sound, so only reading the value could tell — and the object reads values lazily.
        let damages: [(String, (inout [UInt8]) -> Void)] = [
            ("price holds a malformed decimal", { blob in
                let digits = Array("19.99".utf8)
                let at = (0...(blob.count - digits.count)).first { Array(blob[$0..<$0 + digits.count]) == digits }!
                blob[at] = UInt8(ascii: "x")
            }),
            ("not UTF-8", { blob in
                let text = Array("Countess".utf8)
                let at = (0...(blob.count - text.count)).first { Array(blob[$0..<$0 + text.count]) == text }!
                blob[at] = 0xFF
            }),
        ]
        for (reason, damage) in damages {
            let original = try store.open.environment.read { transaction in
                try store.database("rows/Member", in: try store.open).value(forKey: LMDBIncrementalStore.keyBytes(try store.key(of: ids.member)), in: transaction)!
            }
            try damageRow(of: ids.member, in: "Member", of: store) { blob in
                damage(&blob)
                blob = RowCodecTests.resealed(blob)
            }
            let context = ManagedObjectContext(coordinator: coordinator)
            let member = context.object(with: ids.member)
            // Reading an undamaged value fires the fault, which refuses the whole row.
            #expect(member.value(forKey: "large") == nil)
            let error = try #require(member.faultError)
            #expect(error.message.contains(reason) && error.message.contains("\(ids.member)"), "\(error.message)")
            var loaded = FetchRequest(entityName: "Member")
            loaded.returnsObjectsAsFaults = false
            let thrown = #expect(throws: ManagedObjectContextError.self) { try ManagedObjectContext(coordinator: coordinator).fetch(loaded) }
            #expect(thrown?.message.contains(reason) == true, "\(thrown?.message ?? "")")
            try damageRow(of: ids.member, in: "Member", of: store) { $0 = original }
        }
        let repairedContext = ManagedObjectContext(coordinator: coordinator)
        #expect(repairedContext.object(with: ids.member).value(forKey: "price") as? Decimal == Decimal(string: "19.99")!)
    }

    @Test func anEntityOfMoreThanSixtyFourPropertiesReadsEveryOne() throws {
        let names = (0..<70).map { String(format: "p%02d", $0) }
        let wide = try ManagedObjectModel {
            EntityDescription("Wide", properties: names.map { .attribute(AttributeDescription($0, $0.hasSuffix("7") ? .string : .integer64, isOptional: true)) })
        }
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(wide)
        let writer = ManagedObjectContext(coordinator: coordinator)
        let object = try writer.insertNewObject(forEntityName: "Wide")
        for (index, name) in names.enumerated() { try object.setValue(name.hasSuffix("7") ? "v\(index)" as Any : Int64(index) as Any, forKey: name) }
        try writer.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let loaded = reader.object(with: object.objectID)
        for (index, name) in names.enumerated().reversed() {
            let value = loaded.value(forKey: name)
            #expect(name.hasSuffix("7") ? value as? String == "v\(index)" : value as? Int64 == Int64(index), "\(name)")
        }
    }
}
