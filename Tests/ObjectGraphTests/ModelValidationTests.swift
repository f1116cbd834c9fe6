import Foundation
import Testing
@testable import ObjectGraph

@Suite struct ModelValidationTests {
    /// Builds a model that must fail, and returns its problems.
    func problems(_ entities: [EntityDescription], configurations: [ModelConfiguration] = [],
                  templates: [FetchRequestTemplate] = []) -> [ModelProblem] {
        do {
            _ = try ManagedObjectModel(entities: entities, configurations: configurations, fetchRequestTemplates: templates)
            Issue.record("the model was accepted")
            return []
        } catch {
            return error.problems
        }
    }

    @Test func aMissingDestinationIsNamed() {
        let found = problems([EntityDescription("A") { RelationshipDescription("b", destination: "Ghost") }])
        #expect(found == [ModelProblem(.unknownDestination, entity: "A", property: "b", message: "the destination entity \"Ghost\" does not exist")])
    }

    @Test func aMissingInverseIsNamed() {
        let found = problems([
            EntityDescription("A") { RelationshipDescription("b", destination: "B", inverse: "a") },
            EntityDescription("B") { AttributeDescription("x", .string) },
        ])
        #expect(found.map(\.code) == [.unknownInverse])
        #expect(found[0].description == "A.b: the inverse \"a\" is not a relationship of \"B\" [unknownInverse]")
    }

    @Test func anInverseThatDoesNotPointBackIsNamed() {
        let found = problems([
            EntityDescription("A") { RelationshipDescription("b", destination: "B", inverse: "owner") },
            EntityDescription("B") { RelationshipDescription("owner", destination: "C", inverse: "items") },
            EntityDescription("C") { RelationshipDescription("items", destination: "B", inverse: "owner", toMany: true) },
        ])
        #expect(found.map(\.code) == [.inverseMismatch])
        #expect(found[0].message.contains("points at \"C.items\", not back at \"A.b\""))
    }

    @Test func anInverseDeclaredOnAParentEntityCountsAsPointingBack() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Item") { RelationshipDescription("owner", destination: "Box", inverse: "items") }
            EntityDescription("Box") { RelationshipDescription("items", destination: "Item", inverse: "owner", toMany: true) }
            EntityDescription("Crate", parent: "Box") { AttributeDescription("size", .integer16) }
        }
        #expect(model.relationship(named: "items", in: "Crate") != nil)
    }

    @Test func duplicatePropertyNamesAreFoundAlsoAcrossInheritance() {
        let found = problems([
            EntityDescription("Base") { AttributeDescription("name", .string) },
            EntityDescription("Child", parent: "Base") {
                AttributeDescription("name", .string)
                AttributeDescription("size", .integer32)
                AttributeDescription("size", .integer64)
            },
        ])
        #expect(found.map(\.message) == [
            "the property \"name\" is declared again (\"Base\" already has it)",
            "the property \"size\" is declared twice",
        ])
        #expect(found.allSatisfy { $0.code == .duplicateProperty && $0.entity == "Child" })
    }

    @Test func namesManagedObjectUsesAreRejected() {
        let found = problems([EntityDescription("A") {
            AttributeDescription("objectID", .string)
            AttributeDescription("isDeleted", .boolean)
        }])
        #expect(found.map(\.code) == [.reservedPropertyName, .reservedPropertyName])
        #expect(found.map(\.property) == ["objectID", "isDeleted"])
    }

    @Test func indexesAndConstraintsMustNameRealSingleValuedProperties() {
        let found = problems([
            EntityDescription("A") {
                AttributeDescription("x", .string)
                AttributeDescription("temp", .string).transient()
                RelationshipDescription("bs", destination: "B", inverse: "a", toMany: true)
                FetchIndexDescription("byGhost", properties: ["ghost"])
                FetchIndexDescription("byBs", properties: ["bs"])
                FetchIndexDescription("empty", elements: [])
                UniquenessConstraint("x", "nope")
                UniquenessConstraint("temp")
            },
            EntityDescription("B") { RelationshipDescription("a", destination: "A", inverse: "bs") },
        ])
        #expect(found.map(\.message) == [
            "the fetch index \"byGhost\" names the unknown property \"ghost\"",
            "the fetch index \"byBs\" names the to-many relationship \"bs\"",
            "the fetch index \"empty\" has no elements",
            "the uniqueness constraint (x, nope) names the unknown property \"nope\"",
            "the uniqueness constraint (temp) names the transient attribute \"temp\"",
        ])
    }

    @Test func aCoveringIndexStoresOnlyAttributesOfFixedSize() throws {
        func entity(storing names: [String]) -> EntityDescription {
            EntityDescription("A") {
                AttributeDescription("age", .integer32)
                AttributeDescription("score", .double)
                AttributeDescription("name", .string)
                AttributeDescription("memo", .integer64).transient()
                RelationshipDescription("b", destination: "B")
                FetchIndexDescription("byAge", properties: ["age"], storing: names)
            }
        }
        let b = EntityDescription("B") { AttributeDescription("x", .integer16) }
        let found = problems([entity(storing: ["score", "name", "memo", "b", "ghost", "age", "score"]), b])
        #expect(found.allSatisfy { $0.code == .invalidIndex && $0.entity == "A" && $0.index == "byAge" })
        #expect(found.map(\.message) == [
            "the fetch index \"byAge\" stores \"name\", a string attribute; an index stores only attributes of fixed size (integers, floating point, Booleans, dates, UUIDs)",
            "the fetch index \"byAge\" stores the transient attribute \"memo\"",
            "the fetch index \"byAge\" stores \"b\", which is not an attribute",
            "the fetch index \"byAge\" stores the unknown attribute \"ghost\"",
            "the fetch index \"byAge\" stores \"age\", which is already one of its elements",
            "the fetch index \"byAge\" stores \"score\" twice",
        ])
        #expect(found.map(\.property) == ["name", "memo", "b", "ghost", "age", "score"])
        // Too many: one problem naming the count.
        let many = (0..<17).map { "n\($0)" }
        let tooMany = problems([EntityDescription("A") {
            AttributeDescription("age", .integer32)
            for name in many { AttributeDescription(name, .integer16) }
            FetchIndexDescription("byAge", properties: ["age"], storing: many)
        }])
        #expect(tooMany.map(\.message) == ["the fetch index \"byAge\" stores 17 attributes; an index stores at most 16"])
        // Every fixed-size type is accepted, and an inherited attribute too.
        let fixed: [AttributeType] = [.integer16, .integer32, .integer64, .double, .float, .boolean, .date, .uuid]
        let accepted = try ManagedObjectModel(entities: [
            EntityDescription("P") { AttributeDescription("inherited", .integer64) },
            EntityDescription("C", parent: "P") {
                AttributeDescription("key", .string)
                for (offset, type) in fixed.enumerated() { AttributeDescription("v\(offset)", type, isOptional: true) }
                FetchIndexDescription("byKey", properties: ["key"], storing: fixed.indices.map { "v\($0)" } + ["inherited"])
            },
        ])
        #expect(accepted.fetchIndexes(of: "C").first { $0.name == "byKey" }?.storedAttributeNames.count == fixed.count + 1)
    }

    @Test func aCoveringIndexRoundTripsThroughJSON() throws {
        let model = try ManagedObjectModel(entities: [EntityDescription("A") {
            AttributeDescription("age", .integer32)
            AttributeDescription("score", .double)
            AttributeDescription("seen", .date)
            FetchIndexDescription("byAge", properties: ["age"], storing: ["score", "seen"])
            FetchIndexDescription("plain", properties: ["score"])
        }])
        let json = String(decoding: model.jsonData(), as: UTF8.self)
        #expect(json.contains(#""storedAttributes":["score","seen"]"#) || json.contains(#""storedAttributes" : ["#), "\(json)")
        let reloaded = try ManagedObjectModel(json: model.jsonData())
        #expect(reloaded == model && reloaded.versionHash == model.versionHash)
        #expect(reloaded.fetchIndexes(of: "A").map(\.storedAttributeNames) == [["score", "seen"], []])
        // An index that stores nothing writes no key for it.
        #expect(json.components(separatedBy: "storedAttributes").count == 2)
    }

    @Test func aDefaultOfTheWrongTypeIsNamed() {
        let found = problems([EntityDescription("A") {
            AttributeDescription("count", .integer16, defaultValue: "many")
            AttributeDescription("small", .integer16, defaultValue: 70_000)
            AttributeDescription("flag", .boolean, defaultValue: 1)
        }])
        #expect(found.map(\.message) == [
            "the default value \"many\" (string) is not a valid Integer 16",
            "the default value 70000 (integer) is not a valid Integer 16",
            "the default value 1 (integer) is not a valid Boolean",
        ])
        #expect(found.allSatisfy { $0.code == .defaultValueType })
    }

    @Test func anInheritanceCycleAndAMissingParentAreNamed() {
        let found = problems([
            EntityDescription("A", parent: "B"),
            EntityDescription("B", parent: "A"),
            EntityDescription("C", parent: "Nobody"),
        ])
        #expect(found.map(\.code) == [.inheritanceCycle, .inheritanceCycle, .unknownParent])
        #expect(found[0].message == "inherits from itself: A → B → A")
        #expect(found[2].message == "the parent entity \"Nobody\" does not exist")
    }

    /// Found by fuzzing the model loader: two entities of one name, one in a cycle and one without a parent, made
    /// validation follow the cycle forever (the check of cycles is by name).
    @Test func aCycleBehindADuplicatedNameIsNamedAndEnds() {
        let found = problems([
            EntityDescription("Party", parent: "Person"),
            EntityDescription("Person", parent: "Party"),
            EntityDescription("Employee", parent: "Person"),
            EntityDescription("Employee"),
        ])
        #expect(found.map(\.code).contains(.inheritanceCycle))
        #expect(found.map(\.code).contains(.duplicateEntity))
    }

    @Test func validationRulesThatCannotHoldAreNamed() {
        let found = problems([EntityDescription("A") {
            AttributeDescription("n", .integer32, validation: AttributeValidation(minimumValue: 10, maximumValue: 1))
            AttributeDescription("s", .string, validation: AttributeValidation(minimumLength: 5, maximumLength: 2, pattern: "(["))
            AttributeDescription("d", .double, validation: AttributeValidation(minimumLength: 1))
            AttributeDescription("b", .boolean, validation: AttributeValidation(minimumValue: "low"))
        }])
        #expect(found.map(\.message) == [
            "the minimum value is above the maximum value",
            "the minimum length 5 is above the maximum length 2",
            "the regular expression \"([\" does not compile",
            "length rules apply to strings and binary data, not Double",
            "the minimum value \"low\" does not fit a Boolean attribute",
        ])
    }

    @Test func storedAttributesNeedATypeAndCountsMustBePossible() {
        let found = problems([
            EntityDescription("A") {
                AttributeDescription("blob", .undefined)
                AttributeDescription("scratch", .undefined).transient()
                RelationshipDescription("bs", destination: "B", toMany: true, minimumCount: 5, maximumCount: 2)
            },
            EntityDescription("B"),
        ])
        #expect(found.map(\.code) == [.missingType, .invalidCount])
    }

    @Test func configurationsAndTemplatesMustNameRealEntities() {
        let found = problems([EntityDescription("A")],
                             configurations: [ModelConfiguration("Main", entities: ["A", "Z"])],
                             templates: [FetchRequestTemplate("All", entity: "Q")])
        #expect(found.map(\.message) == [
            "the configuration \"Main\" names the unknown entity \"Z\"",
            "the fetch request template \"All\" names the unknown entity \"Q\"",
        ])
    }

    @Test func everyProblemIsReportedAtOnce() {
        let found = problems([
            EntityDescription("A") {
                RelationshipDescription("b", destination: "Ghost")
                AttributeDescription("entity", .string)
                AttributeDescription("n", .integer16, defaultValue: "x")
            },
            EntityDescription("A"),
        ])
        #expect(Set(found.map(\.code)) == [.duplicateEntity, .unknownDestination, .reservedPropertyName, .defaultValueType])
        let error = ModelError(problems: found)
        #expect(error.description.hasPrefix("The model has \(found.count) problems:\n- "))
    }
}
