import ObjectGraph
import Testing

/// Lightweight migration's inferred mapping: every change kind Core Data infers, and every one it cannot, named.
@Suite struct MappingModelTests {
    /// Version 1: people with a department; the base every case changes.
    static func person(_ extra: [PropertyDescription] = [], replacing: [String: PropertyDescription?] = [:],
                       indexes: [FetchIndexDescription] = [], unique: [UniquenessConstraint] = [], name: String = "Person",
                       renamedFrom: String? = nil) -> EntityDescription {
        var properties: [PropertyDescription] = [
            .attribute(AttributeDescription("name", .string)),
            .attribute(AttributeDescription("age", .integer16, isOptional: true)),
            .attribute(AttributeDescription("score", .float, isOptional: true)),
            .relationship(RelationshipDescription("department", destination: "Department", inverse: "people")),
        ]
        for (old, new) in replacing {
            let index = properties.firstIndex { $0.name == old }!
            if let new { properties[index] = new } else { properties.remove(at: index) }
        }
        var entity = EntityDescription(name, properties: properties + extra, fetchIndexes: indexes, uniquenessConstraints: unique)
        entity.renamingIdentifier = renamedFrom
        return entity
    }

    static func department(toMany: Bool = true, name: String = "Department", renamedFrom: String? = nil, inverseOf: String = "Person") -> EntityDescription {
        var entity = EntityDescription(name, properties: [
            .attribute(AttributeDescription("title", .string, isOptional: true)),
            .relationship(RelationshipDescription("people", destination: inverseOf, inverse: "department", toMany: toMany)),
        ])
        entity.renamingIdentifier = renamedFrom
        return entity
    }

    static let v1 = try! ManagedObjectModel(entities: [person(), department()])

    func mapping(_ entities: [EntityDescription]) throws -> MappingModel {
        try MappingModel.inferred(from: Self.v1, to: try ManagedObjectModel(entities: entities))
    }

    func refusal(_ entities: [EntityDescription]) throws -> String {
        let error = try #require(throws: ManagedObjectContextError.self) { try mapping(entities) }
        #expect(error.code == .migrationFailed)
        return error.message
    }

    @Test func theSameModelMapsEveryEntityToItself() throws {
        let same = try mapping([Self.person(), Self.department()])
        #expect(same.isIdentity)
        #expect(same.description == "no change")
        #expect(same.entityMappings.map(\.sourceEntityName) == ["Person", "Department"])
    }

    @Test func addedAttributesTakeTheirDefaultAndRemovedOnesAreDropped() throws {
        let changed = try mapping([
            Self.person([.attribute(AttributeDescription("nickname", .string, isOptional: true)),
                         .attribute(AttributeDescription("level", .integer32, defaultValue: .integer(1)))],
                        replacing: ["score": nil]),
            Self.department(),
        ])
        let person = try #require(changed.entityMappings.first)
        #expect(person.attributes.first { $0.destinationName == "nickname" }?.source == .defaultValue(nil))
        #expect(person.attributes.first { $0.destinationName == "level" }?.source == .defaultValue(.integer(1)))
        #expect(person.removedPropertyNames == ["score"])
        #expect(!person.changesIndexes && !changed.isIdentity)
        #expect(changed.description == "Person: + nickname; + level (default 1); − score", "\(changed)")
        // A new required attribute with no default leaves stored rows without a value.
        let message = try refusal([Self.person([.attribute(AttributeDescription("level", .integer32))]), Self.department()])
        #expect(message.contains("Person.level is new and required, with no default value"), "\(message)")
    }

    @Test func renamedEntitiesAndPropertiesKeepTheirData() throws {
        let renamed = try mapping([
            Self.person(replacing: ["name": .attribute(AttributeDescription("fullName", .string, renamingIdentifier: "name"))],
                        name: "Member", renamedFrom: "Person"),
            // The department's people are the renamed entity's.
            Self.department(inverseOf: "Member"),
        ])
        let member = try #require(renamed.entityMappings.first)
        #expect(member.sourceEntityName == "Person" && member.destinationEntityName == "Member")
        #expect(member.attributes.first?.source == .copied(from: "name") && member.attributes.first?.destinationName == "fullName")
        #expect(member.removedPropertyNames.isEmpty && member.changesIndexes, "a renamed entity's tables are built again under its name")
        #expect(renamed.removedEntityNames.isEmpty)
        #expect(renamed.description.hasPrefix("Member ← Person: fullName ← name"), "\(renamed)")
        // Two properties taking one's value, or two entities one's rows, cannot both be right.
        let twice = try refusal([
            Self.person([.attribute(AttributeDescription("alias", .string, renamingIdentifier: "name"))]), Self.department(),
        ])
        #expect(twice.contains("Person.alias and Person.name both take the value of Person.name"), "\(twice)")
        var copy = Self.person(name: "Copy", renamedFrom: "Person")
        copy.properties.removeAll { $0.name == "department" }
        let twoEntities = try refusal([Self.person(), Self.department(), copy])
        #expect(twoEntities.contains("Copy and Person both take the rows of Person"), "\(twoEntities)")
    }

    @Test func addedAndRemovedEntities() throws {
        let changed = try mapping([Self.person(replacing: ["department": nil]), EntityDescription("Badge", properties: [.attribute(AttributeDescription("code", .string))])])
        #expect(changed.removedEntityNames == ["Department"])
        #expect(changed.entityMappings.last?.sourceEntityName == nil)
        #expect(changed.description == "Person: − department\nBadge: new entity\nDepartment: removed, with its rows", "\(changed)")
    }

    @Test func typesWidenWithoutLossAndNoOtherConversionIsInferred() throws {
        let wider = try mapping([
            Self.person(replacing: ["age": .attribute(AttributeDescription("age", .integer64, isOptional: true)),
                                   "score": .attribute(AttributeDescription("score", .double, isOptional: true))]),
            Self.department(),
        ])
        let attributes = try #require(wider.entityMappings.first).attributes
        #expect(attributes.first { $0.destinationName == "age" }?.source == .widened(from: "age", type: .integer16, to: .integer64))
        #expect(attributes.first { $0.destinationName == "score" }?.source == .widened(from: "score", type: .float, to: .double))
        #expect(wider.description == "Person: age Integer 16 → Integer 64; score Float → Double", "\(wider)")
        #expect(wider.entityMappings.first?.changesIndexes == false, "no index keeps them")
        // An index keeping a widened attribute is built again: its entries hold the values.
        let byAge = [FetchIndexDescription("byAge", properties: ["age"])]
        let indexedV1 = try ManagedObjectModel(entities: [Self.person(indexes: byAge), Self.department()])
        let indexedV2 = try ManagedObjectModel(entities: [
            Self.person(replacing: ["age": .attribute(AttributeDescription("age", .integer64, isOptional: true))], indexes: byAge), Self.department(),
        ])
        #expect(try MappingModel.inferred(from: indexedV1, to: indexedV2).entityMappings.first?.changesIndexes == true)
        for (name, type) in [("age", AttributeType.string), ("score", .integer64), ("name", .integer32)] {
            let message = try refusal([Self.person(replacing: [name: .attribute(AttributeDescription(name, type, isOptional: true))]), Self.department()])
            #expect(message.contains("Person.\(name) changes type") && message.contains("to \(type.coreDataName)"), "\(message)")
        }
        // Narrowing loses values.
        let narrower = try refusal([Self.person(replacing: ["score": .attribute(AttributeDescription("score", .integer16, isOptional: true))]), Self.department()])
        #expect(narrower.contains("from Float"), "\(narrower)")
    }

    @Test func anAttributeMadeRequiredNeedsADefaultForTheRowsWithout() throws {
        let required = try mapping([
            Self.person(replacing: ["age": .attribute(AttributeDescription("age", .integer16, defaultValue: .integer(18)))]), Self.department(),
        ])
        let age = try #require(required.entityMappings.first?.attributes.first { $0.destinationName == "age" })
        #expect(age.source == .copied(from: "age") && age.nullReplacement == .integer(18))
        #expect(!required.isIdentity && required.description == "Person: age required (NULL becomes 18)", "\(required)")
        let message = try refusal([Self.person(replacing: ["age": .attribute(AttributeDescription("age", .integer16))]), Self.department()])
        #expect(message.contains("Person.age became required with no default value"), "\(message)")
        // Made optional: nothing to do.
        let optional = try mapping([Self.person(replacing: ["name": .attribute(AttributeDescription("name", .string, isOptional: true))]), Self.department()])
        #expect(optional.isIdentity)
    }

    @Test func relationshipsAddedRenamedAndMadeToMany() throws {
        var team = Self.department(name: "Team")
        team.properties = [.relationship(RelationshipDescription("members", destination: "Person", toMany: true))]
        let added = try mapping([
            Self.person([.relationship(RelationshipDescription("mentor", destination: "Person"))]), Self.department(), team,
        ])
        #expect(added.entityMappings.first?.relationships.first { $0.destinationName == "mentor" }?.source == .empty)
        // A department becomes a to-many of departments (Core Data infers to-one → to-many).
        let toMany = try mapping([
            Self.person(replacing: ["department": .relationship(RelationshipDescription("department", destination: "Department", inverse: "people", toMany: true))]),
            Self.department(),
        ])
        #expect(toMany.entityMappings.first?.relationships.first?.source == .copied(from: "department"))
        let renamed = try mapping([
            Self.person(replacing: ["department": .relationship(RelationshipDescription("unit", destination: "Department", inverse: "people", renamingIdentifier: "department"))]),
            { var d = Self.department(); d.properties[1] = .relationship(RelationshipDescription("people", destination: "Person", inverse: "unit", toMany: true)); return d }(),
        ])
        #expect(renamed.entityMappings.first?.relationships.first?.source == .copied(from: "department"))
        #expect(renamed.description == "Person: unit ← department", "\(renamed)")
    }

    @Test func relationshipChangesTheDataCannotCarryAreNamed() throws {
        let required = try refusal([Self.person([.relationship(RelationshipDescription("mentor", destination: "Person", isOptional: false))]), Self.department()])
        #expect(required.contains("Person.mentor is a new required to-one"), "\(required)")
        let toOne = try refusal([Self.person(), Self.department(toMany: false)])
        #expect(toOne.contains("Department.people becomes a to-one from the to-many Department.people"), "\(toOne)")
        var withoutInverse = Self.department()
        withoutInverse.properties[1] = .relationship(RelationshipDescription("people", destination: "Person", toMany: true))
        let elsewhere = try refusal([
            Self.person(replacing: ["department": .relationship(RelationshipDescription("department", destination: "Badge"))]), withoutInverse,
            EntityDescription("Badge", properties: [.attribute(AttributeDescription("code", .string))]),
        ])
        #expect(elsewhere.contains("Person.department points at Badge, which does not take the rows of Person.department's destination Department"), "\(elsewhere)")
        let kind = try refusal([Self.person(replacing: ["department": .attribute(AttributeDescription("department", .string, isOptional: true))]), withoutInverse])
        #expect(kind.contains("Person.department is an attribute, but Person.department, whose value it would take, is not"), "\(kind)")
    }

    @Test func indexesAndConstraintsAddedAreBuiltAndChecked() throws {
        let changed = try mapping([
            Self.person(indexes: [FetchIndexDescription("byAge", properties: ["age"])], unique: [UniquenessConstraint(["name"])]), Self.department(),
        ])
        let person = try #require(changed.entityMappings.first)
        #expect(person.changesIndexes && person.addedConstraints == [["name"]])
        #expect(changed.description == "Person: indexes rebuilt; unique (name) checked", "\(changed)")
        // A constraint the old model had, on a renamed attribute, is not new.
        let v2 = try ManagedObjectModel(entities: [Self.person(unique: [UniquenessConstraint(["name"])]), Self.department()])
        var renamedPerson = Self.person(replacing: ["name": .attribute(AttributeDescription("fullName", .string, renamingIdentifier: "name"))],
                                        unique: [UniquenessConstraint(["fullName"])])
        renamedPerson.renamingIdentifier = nil
        let v3 = try ManagedObjectModel(entities: [renamedPerson, Self.department()])
        #expect(try MappingModel.inferred(from: v2, to: v3).entityMappings.first?.addedConstraints == [])
        // A constraint dropped drops its table.
        let dropped = try MappingModel.inferred(from: v2, to: Self.v1)
        #expect(dropped.entityMappings.first?.changesIndexes == true && dropped.entityMappings.first?.addedConstraints == [])
    }

    @Test func aModelIsCompatibleWithTheMetadataOfStoresWrittenWithIt() throws {
        let metadata = [PersistentStoreMetadataKey.modelVersionHash: Self.v1.versionHashString]
        #expect(Self.v1.isConfiguration(withName: nil, compatibleWithStoreMetadata: metadata))
        #expect(!Self.v1.isConfiguration(withName: "Nowhere", compatibleWithStoreMetadata: metadata))
        let v2 = try ManagedObjectModel(entities: [Self.person([.attribute(AttributeDescription("nickname", .string, isOptional: true))]), Self.department()])
        #expect(!v2.isConfiguration(withName: nil, compatibleWithStoreMetadata: metadata))
        #expect(!Self.v1.isConfiguration(withName: nil, compatibleWithStoreMetadata: [:]))
    }

    /// Rows keep their keys, unique within their old hierarchy: two hierarchies cannot share a root afterwards.
    @Test func twoHierarchiesMergedUnderOneRootAreRefused() throws {
        var department = Self.department()
        department.parentName = "Person"
        let person = Self.person(replacing: ["department": nil])
        department.properties.removeAll { $0.name == "people" }
        let merged = try refusal([person, department])
        #expect(merged.contains("share the root Person") && merged.contains("separate hierarchies"), "\(merged)")
    }

    /// An attribute a custom mapping computes maps as computed, whatever change the rules would refuse.
    @Test func computedAttributesAreNotInferred() throws {
        let changed = try ManagedObjectModel(entities: [Self.person(replacing: ["age": .attribute(AttributeDescription("age", .string))]), Self.department()])
        #expect(throws: ManagedObjectContextError.self) { try MappingModel.inferred(from: Self.v1, to: changed) }
        let mapping = try MappingModel.inferred(from: Self.v1, to: changed, computing: ["Person": ["age"]])
        #expect(mapping.entityMappings[0].attributes.first { $0.destinationName == "age" }?.source == .computed)
        #expect(mapping.description == "Person: age computed")
    }
}
