import Foundation
import Testing
@testable import LMDBStore
@testable import ObjectGraph

/// A row's values travel as slot arrays shared by the node, the coordinator's cache, the object and its snapshot:
/// these tests hold that sharing to copy-on-write (a change reaches only the object that made it) and that the
/// by-name views of the store contract still say what is stored.
@Suite(.onEveryEngine) struct SlotValueTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Team") {
            AttributeDescription("title", .string)
            RelationshipDescription("members", destination: "Player", inverse: "team", toMany: true)
        }
        EntityDescription("Player") {
            AttributeDescription("name", .string)
            AttributeDescription("mood", .string, isOptional: true).transient()
            AttributeDescription("score", .integer32, isOptional: true)
            AttributeDescription("joined", .date, isOptional: true)
            RelationshipDescription("team", destination: "Team", inverse: "members")
        }
    }

    /// A store with one team and one player in it; returns the player's ID.
    private func seeded(_ coordinator: PersistentStoreCoordinator) throws -> ManagedObjectID {
        let context = ManagedObjectContext(coordinator: coordinator)
        let team = try context.insertNewObject(forEntityName: "Team")
        try team.setValue("Reds", forKey: "title")
        let player = try context.insertNewObject(forEntityName: "Player")
        try player.setValue("Ada", forKey: "name")
        try player.setValue(Int32(7), forKey: "score")
        try player.setValue(team, forKey: "team")
        try context.save()
        return player.objectID
    }

    @Test func aChangeReachesOnlyTheObjectThatMadeIt() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let writer = ManagedObjectContext(coordinator: coordinator)
        let player = writer.object(with: id)
        #expect(player["name"] as? String == "Ada")
        try player.setValue("Grace", forKey: "name")
        try player.setValue(nil, forKey: "score")
        // The snapshot the object shared its values with is untouched, and so is the row the coordinator caches for
        // every other context.
        #expect(player.committedValues(forKeys: ["name"])["name"] as? String == "Ada")
        #expect(player.committedValues(forKeys: ["score"])["score"] as? Int32 == 7)
        let reader = ManagedObjectContext(coordinator: coordinator)
        #expect(reader.object(with: id)["name"] as? String == "Ada")
        #expect(reader.object(with: id)["score"] as? Int32 == 7)
        try writer.save()
        #expect(player.committedValues(forKeys: ["name"])["name"] as? String == "Grace")
        let later = ManagedObjectContext(coordinator: coordinator)
        #expect(later.object(with: id)["name"] as? String == "Grace")
        #expect(later.object(with: id)["score"] == nil)
        // A rollback puts back the saved values, not the ones before them.
        try player.setValue("Hedy", forKey: "name")
        writer.rollback()
        #expect(player["name"] as? String == "Grace")
    }

    @Test func transientValuesOutliveAFaultFiring() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let context = ManagedObjectContext(coordinator: coordinator)
        let player = context.object(with: id)
        try player.setValue("cheerful", forKey: "mood")  // set on a fault: no load needed
        #expect(player.isFault)
        #expect(player["name"] as? String == "Ada")
        #expect(player["mood"] as? String == "cheerful", "firing the fault dropped the transient value")
        // A transient value is never stored.
        try context.save()
        let other = ManagedObjectContext(coordinator: coordinator)
        #expect(other.object(with: id)["mood"] == nil)
    }

    @Test func theStoresNodesAndChangesStillReadByName() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        var node = try store.newValuesForObject(with: id)
        #expect(node.attributes == ["name": .string("Ada"), "score": .integer(7)])
        #expect(node.toOne.keys.sorted() == ["team"])
        #expect(node.version == 1)
        // Written through the by-name view, a node holds what it was given.
        node.attributes["score"] = .integer(8)
        #expect(node.attributes == ["name": .string("Ada"), "score": .integer(8)])
        #expect(node.toOne.keys.sorted() == ["team"])
        // A change given by name is saved like one the context sends in slots.
        let team = node.toOne["team"]!
        let update = ObjectChange(objectID: id, attributes: ["name": .string("Ada L."), "score": .integer(9)], toOne: ["team": team],
                                  expectedVersion: 1)
        _ = try store.execute(.save(SaveChangesRequest(updatedObjects: [update])))
        let saved = try store.newValuesForObject(with: id)
        #expect(saved.attributes == ["name": .string("Ada L."), "score": .integer(9)] && saved.toOne == ["team": team] && saved.version == 2)
        // A name the entity does not store is refused by name, transient ones included.
        let transient = ObjectChange(objectID: id, attributes: ["name": .string("x"), "mood": .string("sad")], toOne: ["team": team], expectedVersion: 2)
        let error = #expect(throws: ManagedObjectContextError.self) { try store.execute(.save(SaveChangesRequest(updatedObjects: [transient]))) }
        #expect(error?.message.contains("has no stored attribute \"mood\"") == true)
        let toOne = ObjectChange(objectID: id, attributes: ["name": .string("x")], toOne: ["name": team], expectedVersion: 2)
        let refused = #expect(throws: ManagedObjectContextError.self) { try store.execute(.save(SaveChangesRequest(updatedObjects: [toOne]))) }
        #expect(refused?.message.contains("has no to-one relationship \"name\"") == true)
        #expect(try store.newValuesForObject(with: id).attributes["name"] == .string("Ada L."))
    }

    @Test func aNodeByNameAndANodeInSlotsOfTheSameValuesAreEqual() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let id = try seeded(coordinator)
        let slotted = try store.newValuesForObject(with: id)
        let named = IncrementalStoreNode(objectID: id, attributes: slotted.attributes, toOne: slotted.toOne, version: slotted.version)
        #expect(slotted == named)
        #expect(Set([slotted, named]).count == 1)
        var other = named
        other.attributes["name"] = .string("Eve")
        #expect(slotted != other)
    }

    /// The batch read a to-many's window makes: nodes come back in the order asked for, in key order or not, across
    /// entities, leaving out the gone; walking a relationship reads each window's rows in one call.
    @Test func manyRowsComeBackInTheOrderAskedFor() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        let team = try context.insertNewObject(forEntityName: "Team")
        try team.setValue("Blues", forKey: "title")
        var players: [ManagedObject] = []
        for n in 0..<250 {
            let player = try context.insertNewObject(forEntityName: "Player")
            try player.setValue("P\(n)", forKey: "name")
            try player.setValue(team, forKey: "team")
            players.append(player)
        }
        try context.save()
        let ids = players.map(\.objectID)
        context.delete(players[5])
        try context.save()

        func names(_ asked: [ManagedObjectID]) throws -> [String?] {
            try store.newValuesForObjects(with: asked).map { if case .string(let name)? = $0.attributes["name"] { name } else { nil } }
        }
        #expect(try names(Array(ids[0..<8])) == ["P0", "P1", "P2", "P3", "P4", "P6", "P7"])
        #expect(try names([ids[9], ids[3], ids[5], ids[7]]) == ["P9", "P3", "P7"])
        #expect(try store.newValuesForObjects(with: [ids[2], team.objectID, ids[1]]).map(\.objectID) == [ids[2], team.objectID, ids[1]])

        let reader = ManagedObjectContext(coordinator: coordinator)
        let members = reader.object(with: team.objectID).relatedObjects(forKey: "members")
        #expect(members.count == 249)
        #expect(Set(members.map { $0["name"] as? String }) == Set((0..<250).filter { $0 != 5 }.map { "P\($0)" }))
    }
}
