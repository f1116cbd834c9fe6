import Foundation
import Testing
@testable import ObjectGraph

@Suite struct CoreDataModelTests {
    @Test func everyAttributeTypeLoadsWithItsDefaultsAndRules() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("AllTypes.xcdatamodel"))
        #expect(model.versionIdentifier == "all-types-1")
        #expect(model.warnings.isEmpty, "\(model.warnings)")
        let sample = try #require(model.entity(named: "Sample"))
        #expect(sample.className == "Sample")
        #expect(sample.userInfo == ["purpose": "every attribute type"])
        let types = Dictionary(uniqueKeysWithValues: sample.attributes.map { ($0.name, $0.type) })
        #expect(types == ["binary": .binaryData, "boolean": .boolean, "date": .date, "decimal": .decimal, "double": .double,
                          "float": .float, "int16": .integer16, "int32": .integer32, "int64": .integer64, "objectRef": .objectID,
                          "scratch": .undefined, "string": .string, "tags": .transformable, "uri": .uri, "uuid": .uuid])
        func attribute(_ name: String) -> AttributeDescription { model.attribute(named: name, in: "Sample")! }
        #expect(attribute("boolean").defaultValue == .boolean(true))
        #expect(attribute("date").defaultValue == .date(Date(timeIntervalSinceReferenceDate: 694_224_000)))
        #expect(attribute("date").validation.minimumValue == .date(Date(timeIntervalSinceReferenceDate: 0)))
        #expect(attribute("decimal").defaultValue == .decimal(Decimal(string: "12.50")!))
        #expect(attribute("double").validation == AttributeValidation(minimumValue: .double(-1), maximumValue: .double(1)))
        #expect(attribute("float").defaultValue == .float(1.25))
        #expect(attribute("int16").validation == AttributeValidation(minimumValue: .integer(0), maximumValue: .integer(100)))
        #expect(attribute("int64").defaultValue == .integer(9_000_000_000))
        #expect(!attribute("int64").isOptional && attribute("int32").isOptional)
        #expect(attribute("scratch").isTransient)
        #expect(attribute("string").validation == AttributeValidation(minimumLength: 1, maximumLength: 40, pattern: "[a-z ]+"))
        #expect(attribute("string").userInfo == ["note": "lower-case words"])
        #expect(attribute("tags").transformerName == "JSONTransformer" && attribute("tags").valueTypeName == "[String]")
        #expect(attribute("uri").defaultValue == .uri(URL(string: "https://example.com/a")!))
        #expect(attribute("uuid").defaultValue == .uuid(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!))
    }

    @Test func aBundleLoadsItsCurrentVersionAndListsEveryVersion() throws {
        let bundle = fixture("Library.xcdatamodeld")
        #expect(try ManagedObjectModel.coreDataModelVersions(in: bundle) == ["Library", "Library 2"])
        #expect(try ManagedObjectModel.currentCoreDataModelVersion(in: bundle) == "Library 2.xcdatamodel")
        let current = try ManagedObjectModel(contentsOfCoreDataModel: bundle)
        #expect(current.versionIdentifier == "2")
        #expect(current.entityNames == ["Author", "Book", "Tag"])
        let books = try #require(current.relationship(named: "books", in: "Author"))
        #expect(books.isToMany && books.isOrdered && books.deleteRule == .cascade)
        let tags = try #require(current.relationship(named: "tags", in: "Book"))
        #expect(tags.minimumCount == 1 && tags.maximumCount == 5 && !tags.isOrdered)
        #expect(current.relationship(named: "books", in: "Tag")?.deleteRule == .deny)
        #expect(current.relationship(named: "author", in: "Book")?.isToMany == false)

        let first = try ManagedObjectModel(contentsOfCoreDataModel: bundle, version: "Library")
        #expect(first.versionIdentifier == "1")
        #expect(first.entityNames == ["Author", "Book"])
        #expect(first.relationship(named: "books", in: "Author")?.isOrdered == false)
        #expect(first.versionHash != current.versionHash)
        #expect(first.versionHash(ofEntity: "Author") != current.versionHash(ofEntity: "Author"), "ordered changed")
    }

    @Test func threeLevelInheritanceWithAnAbstractRootLoads() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Inheritance.xcdatamodel"))
        #expect(model.entity(named: "Party")?.isAbstract == true)
        #expect(model.ancestry(of: "Employee") == ["Party", "Person", "Employee"])
        #expect(model.allProperties(of: "Employee").map(\.name) == ["createdAt", "addresses", "name", "salary", "employer"])
        #expect(model.entityAndDescendants(of: "Party") == ["Party", "Person", "Employee", "Organization"])
        #expect(model.relationship(named: "party", in: "Address")?.destinationEntityName == "Party")
        #expect(model.relationship(named: "party", in: "Address")?.isOptional == false)
        #expect(model.relationship(named: "addresses", in: "Employee")?.inverseName == "party")
    }

    @Test func compoundDescendingAndSpatialIndexesAndMultiAttributeConstraintsLoad() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Indexes.xcdatamodel"))
        let indexes = model.fetchIndexes(of: "Event")
        #expect(indexes.map(\.name) == ["byDayPriority", "byLocation"], "an index of expressions only is left out")
        #expect(indexes[0].elements == [.ascending("day"), .descending("priority")])
        #expect(indexes[1].elements.map(\.collation) == [.rTree, .rTree])
        #expect(model.uniquenessConstraints(of: "Event") == [UniquenessConstraint("room", "day", "slot"), UniquenessConstraint("title")])
        #expect(model.warnings.map(\.message) == [
            "the fetch index \"byTitleLength\" of \"Event\" has an expression element; LMDBStore indexes properties only, so the element is left out",
            "the fetch index \"byTitleLength\" of \"Event\" indexes no property; it is left out",
        ])
    }

    @Test func configurationsTemplatesAndFetchedPropertiesLoad() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Configurations.xcdatamodel"))
        #expect(model.configurations == [ModelConfiguration("Local", entities: ["Setting"]), ModelConfiguration("Synced", entities: ["Note", "Draft"])])
        #expect(model.fetchRequestTemplates == [
            FetchRequestTemplate("NotesModifiedSince", entity: "Note", predicate: "modified >= $SINCE", fetchLimit: 50),
            FetchRequestTemplate("AllSettings", entity: "Setting"),
        ])
        let fetched = try #require(model.entity(named: "Note")?.fetchedProperties.first)
        #expect(fetched.name == "recentDrafts" && fetched.entityName == "Draft")
        #expect(fetched.predicateFormat == "note == $FETCH_SOURCE AND saved > $FETCH_SOURCE.modified")
        #expect(model.relationship(named: "note", in: "Draft")?.inverseName == nil)
    }

    @Test func oldStyleIndexesAndUnknownElementsLoadWithWarnings() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("OldStyle.xcdatamodel"))
        #expect(model.attribute(named: "email", in: "Customer")?.isIndexed == true)
        #expect(model.fetchIndexes(of: "Customer").map(\.name) == ["lastName_firstName_compoundIndex", "emailIndex"])
        #expect(model.fetchIndexes(of: "Customer")[0].elements == [.ascending("lastName"), .ascending("firstName")])
        let legacy = try #require(model.attribute(named: "legacyID", in: "Customer"))
        #expect(legacy.renamingIdentifier == "oldID" && legacy.versionHashModifier == "v2")
        #expect(model.versionIdentifier == nil)
        #expect(model.warnings.map(\.message).sorted() == [
            "the element <fancyNewThing> in entity \"Customer\" is not known; ignored",
            "the element <futureBlock> is not part of the Core Data model format LMDBStore knows; ignored",
        ])
        #expect(model.warnings.allSatisfy { $0.file?.contains("OldStyle.xcdatamodel/contents:") == true })
    }

    @Test func malformedXMLNamesTheFileAndLine() {
        do {
            _ = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Broken.xcdatamodel"))
            Issue.record("malformed XML loaded")
        } catch {
            #expect(error.problems.first?.code == .malformedFile)
            #expect(error.problems.first?.file?.hasSuffix("Broken.xcdatamodel/contents") == true)
            #expect(error.description.contains("not well-formed at line"))
        }
    }

    @Test func anInvalidModelFileReportsEveryProblemWithItsFile() {
        do {
            _ = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Invalid.xcdatamodel"))
            Issue.record("an invalid model loaded")
        } catch {
            #expect(Set(error.problems.map(\.code)) == [.defaultValueType, .unknownDestination, .inverseMismatch, .unknownInverse])
            #expect(error.problems.allSatisfy { $0.file?.hasSuffix("Invalid.xcdatamodel/contents") == true })
            #expect(error.description.contains("Order.total: the default value \"lots\" (string) is not a valid Integer 16"))
            #expect(error.description.contains("Order.customer: the destination entity \"Client\" does not exist"))
        }
    }

    @Test func compiledModelsAreRefusedWithAClearError() {
        do {
            _ = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Compiled.momd"))
            Issue.record("a compiled model loaded")
        } catch {
            #expect(error.problems.first?.code == .compiledModel)
            #expect(error.description.contains("compiled Core Data model"))
        }
    }

    @Test func missingFilesAndForeignXMLAreErrors() {
        #expect(throws: ModelError.self) { try ManagedObjectModel(contentsOfCoreDataModel: fixture("Nope.xcdatamodel")) }
        do {
            _ = try ManagedObjectModel(coreDataModelXML: Data("<plist><dict/></plist>".utf8), file: "x.xml")
            Issue.record("a plist loaded as a model")
        } catch {
            #expect(error.description.contains("x.xml: the root element is <plist>, not a Core Data <model>"))
        }
    }

    @Test func everyFixtureRoundTripsThroughJSON() throws {
        for name in ["AllTypes.xcdatamodel", "Library.xcdatamodeld", "Inheritance.xcdatamodel", "Indexes.xcdatamodel",
                     "Configurations.xcdatamodel", "OldStyle.xcdatamodel"] {
            let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture(name))
            let reloaded = try ManagedObjectModel(json: model.jsonData())
            #expect(reloaded == model, "\(name)")
            #expect(reloaded.versionHash == model.versionHash, "\(name)")
        }
    }
}
