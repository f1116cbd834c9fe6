import Foundation
import Testing
@testable import ObjectGraph

@Suite struct VersionHashTests {
    func model(_ change: (inout [EntityDescription]) -> Void = { _ in }) throws -> ManagedObjectModel {
        var entities = try companyModel().entities
        change(&entities)
        return try ManagedObjectModel(entities: entities)
    }

    func index(_ name: String, _ entities: [EntityDescription]) -> Int { entities.firstIndex { $0.name == name }! }

    func modify(_ entityName: String, _ change: @escaping (inout EntityDescription) -> Void) -> (inout [EntityDescription]) -> Void {
        { entities in change(&entities[index(entityName, entities)]) }
    }

    func modifyAttribute(_ entityName: String, _ attributeName: String, _ change: @escaping (inout AttributeDescription) -> Void) -> (inout [EntityDescription]) -> Void {
        modify(entityName) { entity in
            entity.properties = entity.properties.map { property in
                guard case .attribute(var attribute) = property, attribute.name == attributeName else { return property }
                change(&attribute)
                return .attribute(attribute)
            }
        }
    }

    @Test func theHashIsStableAcrossRunsAndBuilds() throws {
        // A pinned value: if this changes, every existing store would see a model mismatch. Change it only together
        // with a documented change to what the hash covers.
        let hash = try companyModel().versionHashString
        #expect(hash == (try model().versionHashString))
        #expect(hash == "c120364b10598e33dc97c896952c602017f7cd690febf2f1613ace92fdddc83c")
    }

    @Test(arguments: [
        "attribute type", "attribute renamed", "attribute added", "attribute removed", "to-many flag", "ordered flag",
        "destination", "inverse", "index element order", "index added", "index stores an attribute", "constraint", "abstract flag", "parent",
        "entity modifier", "attribute modifier", "transformer",
    ])
    func aPersistedChangeChangesTheHash(_ change: String) throws {
        let base = try model()
        let changed: ManagedObjectModel
        switch change {
        case "attribute type": changed = try model(modifyAttribute("Project", "code") { $0.type = .uuid })
        case "attribute renamed": changed = try model(modifyAttribute("Project", "code") { $0.name = "key" })
        case "attribute added": changed = try model(modify("Project") { $0.properties.append(.attribute(AttributeDescription("extra", .string))) })
        case "attribute removed": changed = try model(modify("Project") { $0.properties.removeAll { $0.name == "code" } })
        case "to-many flag", "ordered flag", "destination", "inverse":
            changed = try model { entities in
                let p = index("Employee", entities)
                entities[p].properties = entities[p].properties.map { property in
                    guard case .relationship(var r) = property, r.name == "projects" else { return property }
                    switch change {
                    case "to-many flag": r.isToMany = false; r.isOrdered = false; r.maximumCount = 1
                    case "ordered flag": r.isOrdered = true
                    case "destination": r.destinationEntityName = "Project"; r.inverseName = nil
                    default: r.inverseName = nil
                    }
                    return .relationship(r)
                }
                if change == "to-many flag" || change == "inverse" || change == "destination" {
                    let q = index("Project", entities)
                    entities[q].properties.removeAll { $0.name == "members" }
                    entities[q].properties.removeAll { $0.name == "activeMembers" }
                    if change == "to-many flag" {
                        entities[p].properties = entities[p].properties.map { property in
                            guard case .relationship(var r) = property, r.name == "projects" else { return property }
                            r.inverseName = nil
                            return .relationship(r)
                        }
                    }
                }
            }
        case "index element order": changed = try model(modify("Employee") { $0.fetchIndexes[0].elements[1].isAscending = true })
        case "index stores an attribute": changed = try model(modify("Employee") { $0.fetchIndexes[0].storedAttributeNames = ["ratio"] })
        case "index added": changed = try model(modify("Project") { $0.fetchIndexes.append(FetchIndexDescription("byCode", properties: ["code"])) })
        case "constraint": changed = try model(modify("Project") { $0.uniquenessConstraints.append(UniquenessConstraint("code")) })
        case "abstract flag": changed = try model(modify("Person") { $0.isAbstract = false })
        case "parent": changed = try model(modify("Employee") { $0.parentName = nil; $0.properties.insert(.attribute(AttributeDescription("name", .string)), at: 0) })
        case "entity modifier": changed = try model(modify("Department") { $0.versionHashModifier = "2" })
        case "attribute modifier": changed = try model(modifyAttribute("Department", "name") { $0.versionHashModifier = "2" })
        case "transformer": changed = try model { entities in
            entities[index("Project", entities)].properties.append(.attribute(AttributeDescription("tags", .transformable, transformerName: changedTransformerName)))
        }
        default: Issue.record("unknown change \(change)"); return
        }
        #expect(changed.versionHash != base.versionHash, "\(change)")
    }

    var changedTransformerName: String { "JSON" }

    @Test(arguments: ["user info", "transient attribute", "default value", "optionality", "validation", "delete rule",
                      "class name", "renaming identifier", "configuration", "template", "fetched property", "entity order"])
    func aChangeThatPersistsNothingKeepsTheHash(_ change: String) throws {
        let base = try model()
        let changed: ManagedObjectModel
        switch change {
        case "user info": changed = try model(modify("Person") { $0.userInfo = ["x": "y"] })
        case "transient attribute": changed = try model(modify("Project") { $0.properties.append(.attribute(AttributeDescription("cache", .string).transient())) })
        case "default value": changed = try model(modifyAttribute("Employee", "level") { $0.defaultValue = .integer(3) })
        case "optionality": changed = try model(modifyAttribute("Project", "code") { $0.isOptional = true })
        case "validation": changed = try model(modifyAttribute("Project", "code") { $0.validation.maximumLength = 3 })
        case "delete rule": changed = try model { entities in
            let d = index("Department", entities)
            entities[d].properties = entities[d].properties.map { property in
                guard case .relationship(var r) = property else { return property }
                r.deleteRule = .cascade
                return .relationship(r)
            }
        }
        case "class name": changed = try model(modify("Project") { $0.className = "ProjectMO" })
        case "renaming identifier": changed = try model(modifyAttribute("Project", "code") { $0.renamingIdentifier = "oldCode" })
        case "configuration": changed = try ManagedObjectModel(entities: base.entities, configurations: [ModelConfiguration("X", entities: ["Project"])])
        case "template": changed = try ManagedObjectModel(entities: base.entities, fetchRequestTemplates: [FetchRequestTemplate("T", entity: "Project")])
        case "fetched property": changed = try model(modify("Department") { $0.properties.append(.fetchedProperty(FetchedPropertyDescription("f", entity: "Project"))) })
        case "entity order": changed = try model { $0.reverse() }
        default: Issue.record("unknown change \(change)"); return
        }
        #expect(changed.versionHash == base.versionHash, "\(change)")
    }

    @Test func aParentsChangeReachesItsSubentitiesHash() throws {
        let base = try model()
        let changed = try model(modifyAttribute("Person", "born") { $0.type = .string })
        #expect(changed.versionHash(ofEntity: "Employee") != base.versionHash(ofEntity: "Employee"))
        #expect(changed.versionHash(ofEntity: "Department") == base.versionHash(ofEntity: "Department"))
    }
}
