import Foundation
import Testing
@testable import ObjectGraph

/// What a store that answers batch inserts reads (``BatchInsertRows``): chunks of checked rows whose values — kept
/// side by side for a whole chunk — read back by name as they were given, with the model's defaults.
@Suite struct BatchInsertRowsTests {
    private static let model: ManagedObjectModel = try! ManagedObjectModel {
        EntityDescription("Team") {
            AttributeDescription("name", .string)
            RelationshipDescription("members", destination: "Person", inverse: "team", toMany: true)
        }
        EntityDescription("Person") {
            AttributeDescription("name", .string)
            AttributeDescription("age", .integer16, defaultValue: 30)
            AttributeDescription("score", .double, isOptional: true)
            RelationshipDescription("team", destination: "Team", inverse: "members")
            RelationshipDescription("friends", destination: "Person", inverse: "friendOf", toMany: true)
            RelationshipDescription("friendOf", destination: "Person", inverse: "friends", toMany: true)
        }
    }

    private static func team(_ n: Int) -> ManagedObjectID {
        ManagedObjectID(entityName: "Team", storeIdentifier: "S", referenceObject: .integer(Int64(n)))
    }

    @Test("each row of each chunk reads back its values, defaults, targets and members by name, and its position in the request")
    func rowsReadBackByName() throws {
        var next = 0
        var request = BatchInsertRequest(entityName: "Person", properties: ["name", "score", "team", "friends", "age"]) { row in
            guard next < 7 else { return true }
            row[0] = .attribute(.string("P\(next)"))
            if next % 2 == 0 { row[1] = .attribute(.integer(Int64(next))) }  // an integer for a double: converted
            if next % 3 == 0 { row[2] = .object(Self.team(next)) } else { row[2] = .uniqueValue(.string("T\(next)")) }
            if next > 0 { row[3] = .uniqueValues((0..<next).map { .string("P\($0)") }) }
            if next == 6 { row[4] = .attribute(.integer(41)) }
            next += 1
            return false
        }
        request.chunkSize = 3
        let rows = try BatchInsertRows(request, model: Self.model)
        var seen: [BatchInsertRow] = []
        var sizes: [Int] = []
        while let chunk = try rows.nextChunk() {
            sizes.append(chunk.count)
            seen += chunk
        }
        #expect(sizes == [3, 3, 1])
        #expect(seen.map(\.position) == Array(0..<7))
        for row in seen {
            let n = row.position
            var expected: [String: AttributeValue] = ["name": .string("P\(n)"), "age": .integer(n == 6 ? 41 : 30)]
            if n % 2 == 0 { expected["score"] = .double(Double(n)) }
            #expect(row.attributeValues == expected, "row \(n)")
            #expect(row.toOneTargets == ["team": n % 3 == 0 ? .object(Self.team(n)) : .uniqueValue(.string("T\(n)"))], "row \(n)")
            #expect(row.toManyTargets == (n > 0 ? ["friends": (0..<n).map { .uniqueValue(.string("P\($0)")) }] : [:]), "row \(n)")
        }
    }

    @Test("a row that breaks the rules stops the chunk with an error naming it, whatever the rows before it in the chunk")
    func aBadRowNamesItself() throws {
        var request = BatchInsertRequest(entityName: "Person", objects: (0..<5).map { n in
            ["name": n == 3 ? .attribute(.integer(3)) : .attribute(.string("P\(n)")), "team": .object(Self.team(1))]
        })
        request.chunkSize = 2
        let rows = try BatchInsertRows(request, model: Self.model)
        #expect(try rows.nextChunk()?.map(\.position) == [0, 1])
        let error = try #require(throws: ManagedObjectContextError.self) { try rows.nextChunk() }
        #expect(error.code == .wrongValueType && error.message.contains("row 3") && error.message.contains("Person.name"), "\(error.message)")
    }
}
