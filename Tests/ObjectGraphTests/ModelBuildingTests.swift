import Foundation
import Testing
@testable import ObjectGraph

@Suite struct ModelBuildingTests {
    @Test func aModelBuiltInCodeResolvesInheritanceAndRelationships() throws {
        let model = try companyModel()
        #expect(model.entityNames == ["Person", "Employee", "Department", "Project"])
        #expect(model.allProperties(of: "Employee").map(\.name) == ["name", "email", "born", "nickname", "salary", "level", "ratio", "department", "projects"])
        #expect(model.rootEntityName(of: "Employee") == "Person")
        #expect(model.directSubentities(of: "Person") == ["Employee"])
        #expect(model.entity("Employee", isKindOf: "Person"))
        #expect(!model.entity("Department", isKindOf: "Person"))
        let employees = try #require(model.relationship(named: "employees", in: "Department"))
        #expect(employees.isToMany && employees.isOrdered && employees.deleteRule == .deny)
        #expect(model.inverse(of: employees)?.name == "department")
        #expect(model.relationship(named: "department", in: "Employee")?.isToMany == false)
        #expect(model.fetchIndexes(of: "Employee").map(\.name) == ["nameIndex", "byLevelSalary"])
        #expect(model.uniquenessConstraints(of: "Employee") == [UniquenessConstraint("email")])
        #expect(model.entityNames(inConfiguration: "Directory") == ["Person", "Employee"])
        #expect(model.fetchRequestTemplate(named: "RichEmployees")?.fetchLimit == 10)
    }

    /// An inverse is found by its slot index in the destination, which holds in sub-entities too; an entity that is
    /// not the destination (an object a damaged store pointed at wrongly) has no inverse, so no other property of it
    /// is changed in the inverse's name.
    @Test func inversesAreFoundBySlotOnlyInTheirDestination() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Department") {
                AttributeDescription("name", .string)
                RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true)
            }
            EntityDescription("Employee") {
                AttributeDescription("name", .string)
                RelationshipDescription("department", destination: "Department", inverse: "employees")
            }
            EntityDescription("Manager", parent: "Employee") {
                AttributeDescription("level", .integer16)
            }
            EntityDescription("Project") {
                AttributeDescription("code", .string)
                RelationshipDescription("lead", destination: "Employee")
            }
        }
        let employees = try #require(model.handle(forEntityNamed: "Department").slot(named: "employees"))
        let department = try #require(model.handle(forEntityNamed: "Employee").slot(named: "department"))
        #expect(model.handle(forEntityNamed: "Employee").inverse(of: employees)?.name == "department")
        #expect(model.handle(forEntityNamed: "Manager").inverse(of: employees)?.name == "department", "a sub-entity inherits the inverse's slot")
        #expect(model.handle(forEntityNamed: "Department").inverse(of: department)?.name == "employees")
        #expect(model.handle(forEntityNamed: "Project").inverse(of: employees) == nil, "Project's slot 1 is its own to-one, not the inverse")
        #expect(model.handle(forEntityNamed: "Department").inverse(of: try #require(model.handle(forEntityNamed: "Project").slot(named: "lead"))) == nil)
    }

    @Test func literalDefaultsBecomeTheAttributesType() throws {
        let model = try companyModel()
        #expect(model.attribute(named: "salary", in: "Employee")?.defaultValue == .decimal(0))
        #expect(model.attribute(named: "ratio", in: "Employee")?.defaultValue == .double(1))
        #expect(model.attribute(named: "level", in: "Employee")?.defaultValue == .integer(1))
    }

    @Test func aModelFromJSONEqualsTheSameModelBuiltInCode() throws {
        let built = try companyModel()
        let loaded = try ManagedObjectModel(json: built.jsonData())
        #expect(loaded == built)
        #expect(loaded.versionHash == built.versionHash)
    }

    @Test func jsonRoundTripsByteForByte() throws {
        for model in [try companyModel(), try ManagedObjectModel(contentsOfCoreDataModel: fixture("AllTypes.xcdatamodel")),
                      try ManagedObjectModel(contentsOfCoreDataModel: fixture("Indexes.xcdatamodel"))] {
            let first = model.jsonData()
            let second = try ManagedObjectModel(json: first).jsonData()
            #expect(first == second)
        }
    }

    @Test func jsonLeavesDefaultsOutAndReadsThemBack() throws {
        let json = """
        {"formatVersion": 1, "entities": [{"name": "Tag", "properties": [
            {"kind": "attribute", "name": "label", "type": "string"},
            {"kind": "relationship", "name": "parent", "destination": "Tag"}]}]}
        """
        let model = try ManagedObjectModel(json: Data(json.utf8))
        let label = try #require(model.attribute(named: "label", in: "Tag"))
        #expect(!label.isOptional && !label.isTransient && label.defaultValue == nil)
        let parent = try #require(model.relationship(named: "parent", in: "Tag"))
        #expect(parent.isOptional && !parent.isToMany && parent.deleteRule == .nullify && parent.maximumCount == 1)
        let written = String(decoding: model.jsonData(), as: UTF8.self)
        #expect(!written.contains("optional") && !written.contains("deleteRule"))
    }

    @Test func everyAttributeValueRoundTripsThroughJSON() throws {
        let values: [(AttributeType, AttributeValue)] = [
            (.integer16, .integer(-7)), (.integer32, .integer(70_000)), (.integer64, .integer(Int64.max)),
            (.double, .double(0.1)), (.float, .float(1.5)), (.decimal, .decimal(Decimal(string: "123.4500")!)),
            (.string, .string("naïve \"quoted\"")), (.boolean, .boolean(true)),
            (.date, .date(Date(timeIntervalSinceReferenceDate: 12345.678))), (.binaryData, .data(Data([0, 255, 7]))),
            (.uuid, .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!)), (.uri, .uri(URL(string: "https://a.example/b?c=d")!)),
        ]
        let model = try ManagedObjectModel {
            EntityDescription("Values", properties: values.enumerated().map { index, pair in
                .attribute(AttributeDescription("v\(index)", pair.0, defaultValue: pair.1))
            })
        }
        let loaded = try ManagedObjectModel(json: model.jsonData())
        for (index, pair) in values.enumerated() {
            #expect(loaded.attribute(named: "v\(index)", in: "Values")?.defaultValue == pair.1, "\(pair.0)")
        }
    }

    @Test func malformedJSONNamesWhereDecodingStopped() throws {
        let json = #"{"formatVersion": 1, "entities": [{"name": "A", "properties": [{"kind": "attribute", "name": "x"}]}]}"#
        do {
            _ = try ManagedObjectModel(json: Data(json.utf8), file: "model.json")
            Issue.record("JSON without an attribute type loaded")
        } catch {
            #expect(error.problems.first?.code == .malformedFile)
            #expect(error.problems.first?.file == "model.json")
            #expect(error.description.contains("missing key \"type\" at entities[0].properties[0]"))
        }
        #expect(throws: ModelError.self) { try ManagedObjectModel(json: Data("not json".utf8)) }
        do {
            _ = try ManagedObjectModel(json: Data(#"{"formatVersion": 99, "entities": []}"#.utf8))
            Issue.record("a newer JSON format loaded")
        } catch {
            #expect(error.description.contains("format version 99"))
        }
    }

    @Test func aBadDefaultInJSONNamesTheAttribute() throws {
        let json = #"{"formatVersion": 1, "entities": [{"name": "A", "properties": [{"kind": "attribute", "name": "id", "type": "uuid", "default": "nope"}]}]}"#
        do {
            _ = try ManagedObjectModel(json: Data(json.utf8))
            Issue.record("an unparsable UUID default loaded")
        } catch {
            #expect(error.description.contains("expected a UUID string"))
            #expect(error.description.contains("entities[0].properties[0].default"))
        }
    }

    /// Key-based access finds properties through the entity's name table: every name is found at its position, names
    /// of every length around the hash's eight-byte words and non-ASCII names included, and a name the entity does
    /// not have — a prefix, another case, one byte changed, a string built at run time — is not found.
    @Test func theNameTableFindsExactlyTheEntitysNames() {
        let names = ["a", "id", "name", "email", "salary", "department", "projects7", "exactly8", "sixteen-bytes-16",
                     "seventeen-bytes-7", "a-rather-long-property-name-of-forty-bytes", "nombreÑ", "名前", ""]
        let table = NameTable(Dictionary(uniqueKeysWithValues: names.enumerated().map { ($1, $0) }))
        for (position, name) in names.enumerated() {
            #expect(table.position(of: name) == position, "\(name)")
            // The same name made at run time (another string storage, the same bytes).
            #expect(table.position(of: String(decoding: Array(name.utf8), as: UTF8.self)) == position, "\(name)")
        }
        for missing in ["b", "nam", "names", "Name", "emaiL", "exactly9", "sixteen-bytes-17", "nombreN", "名", "x" + "name"] {
            #expect(table.position(of: missing) == nil, "\(missing)")
        }
        #expect(NameTable([:]).position(of: "name") == nil)
    }

    @Test func sha256MatchesTheStandardTestVectors() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
            == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }
}

@Suite struct ModelFileTests {
    @Test func aJSONFileLoadsAndAMissingOneIsNamed() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("model-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: url) }
        let model = try companyModel()
        try model.jsonData().write(to: url)
        #expect(try ManagedObjectModel(contentsOfJSON: url) == model)
        try FileManager.default.removeItem(at: url)
        do {
            _ = try ManagedObjectModel(contentsOfJSON: url)
            Issue.record("a missing file loaded")
        } catch {
            #expect(error.problems.first?.code == .unreadableFile)
            #expect(error.problems.first?.file == url.path)
        }
    }
}
