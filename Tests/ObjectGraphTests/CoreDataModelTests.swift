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

    @Test func defaultsXcodeKeepsButThatDoNotFitTheTypeAreConvertedOrDroppedWithAWarning() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Lenient.xcdatamodel"))
        func attribute(_ name: String) -> AttributeDescription { model.attribute(named: name, in: "Reading")! }
        #expect(attribute("count16").defaultValue == .integer(0))
        #expect(attribute("count32").defaultValue == .integer(0))
        #expect(attribute("enabled").defaultValue == .integer(0))
        #expect(attribute("on").defaultValue == .integer(1))
        #expect(attribute("ratio").defaultValue == .double(0))
        #expect(attribute("flag").defaultValue == .boolean(false))
        #expect(attribute("small").defaultValue == nil, "70000 does not fit an Integer 16")
        #expect(attribute("small").validation == AttributeValidation(minimumValue: .integer(-1)), "0.5 is no Integer 16")
        #expect(attribute("identifier").defaultValue == nil)
        #expect(attribute("taken").defaultValue == nil)
        let warnings = model.warnings.filter { $0.property != nil }
        #expect(warnings.map(\.message) == [
            "Reading.count16: the default value \"0.0\" is read as 0 for the type Integer 16, as Core Data reads it",
            "Reading.count32: the default value \"0.0\" is read as 0 for the type Integer 32, as Core Data reads it",
            "Reading.enabled: the default value \"NO\" is read as 0 for the type Integer 32, as Core Data reads it",
            "Reading.on: the default value \"YES\" is read as 1 for the type Integer 64, as Core Data reads it",
            "Reading.small: the minimum value \"-1.0\" is read as -1 for the type Integer 16, as Core Data reads it",
            "Reading.small: the maximum value \"0.5\" is not a value of type Integer 16; it is left out, as Core Data leaves it out",
            "Reading.small: the default value \"70000\" is not a value of type Integer 16; it is left out, as Core Data leaves it out",
            "Reading.ratio: the default value \"NO\" is read as 0.0 for the type Double, as Core Data reads it",
            "Reading.identifier: the default value \"empy\" is not a value of type UUID; it is left out, as Core Data leaves it out",
            "Reading.taken: the default date \"soon\" is not a number of seconds; it is left out, as Core Data leaves it out",
            "the fetch index \"byDeviceAndNotes\" of \"Reading\" names the to-many relationship \"notes\", which no index can hold (its links are indexed both ways already); the element is left out",
            "the fetch index \"byNotes\" of \"Reading\" names the to-many relationship \"notes\", which no index can hold (its links are indexed both ways already); the element is left out",
        ])
        #expect(warnings.allSatisfy { $0.entity == "Reading" && $0.file?.contains("Lenient.xcdatamodel/contents:") == true })
        #expect(model.warnings.count == warnings.count + 1)
        #expect(model.warnings.last?.message == "the fetch index \"byNotes\" of \"Reading\" indexes nothing else; it is left out")
    }

    @Test func indexElementsOnToManysAreLeftOutAndEveryFlagIsKept() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Lenient.xcdatamodel"))
        #expect(model.fetchIndexes(of: "Reading") == [
            FetchIndexDescription("byDeviceAndNotes", elements: [.ascending("device"), .descending("count32")]),
        ], "the to-many element is left out and the rest of the index kept")
        #expect(model.attribute(named: "photo", in: "Reading")?.allowsExternalBinaryDataStorage == true)
        #expect(model.attribute(named: "serial", in: "Reading")?.preservesValueInHistoryOnDeletion == true)
        #expect(model.attribute(named: "serial", in: "Reading")?.allowsExternalBinaryDataStorage == false)
        #expect(model.relationship(named: "device", in: "Reading")?.isIndexed == true)
        #expect(model.relationship(named: "notes", in: "Reading")?.isIndexed == true)
        #expect(model.relationship(named: "readings", in: "Device")?.isIndexed == false)
        // The flags survive the JSON form; none of them changes what is stored, so none changes the version hash.
        let reloaded = try ManagedObjectModel(json: model.jsonData())
        #expect(reloaded == model && reloaded.versionHash == model.versionHash)
        let unflagged = try ManagedObjectModel(entities: model.entities.map { entity in
            var entity = entity
            entity.properties = entity.properties.map {
                switch $0 {
                case .relationship(let relationship): .relationship(relationship.with { $0.isIndexed = false })
                case .attribute(let attribute):
                    .attribute(attribute.with { $0.allowsExternalBinaryDataStorage = false; $0.preservesValueInHistoryOnDeletion = false })
                case .fetchedProperty: $0
                }
            }
            return entity
        })
        #expect(unflagged != model && unflagged.versionHash == model.versionHash)
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

    /// Found by fuzzing the loader (`Fuzz/run FuzzModel`): a byte that is not UTF-8 in an attribute name stopped the
    /// program inside Foundation's `XMLParser`; it is now refused first, naming where.
    @Test func whatStopsFoundationsXMLParserIsRefusedNamingWhere() {
        var contents = Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<model type=\"com.apple.IDECoreDataModeler.DataModel\" userDefinedModelVersionIdentifier=\"\">\n</model>\n".utf8)
        contents[contents.firstIndex(of: UInt8(ascii: "V"))!] = 0xC9
        let error = #expect(throws: ModelError.self) { try ManagedObjectModel(coreDataModelXML: Data(contents), file: "contents") }
        #expect(error?.problems.first?.code == .malformedFile)
        #expect(error?.description.contains("at line 2, column 70: the byte at offset 108 is not UTF-8") == true, "\(String(describing: error))")
        // The same file with the byte put back loads, with a byte order mark too.
        contents[contents.firstIndex(of: 0xC9)!] = UInt8(ascii: "V")
        #expect(throws: Never.self) { try ManagedObjectModel(coreDataModelXML: Data(contents), file: "contents") }
        #expect(throws: Never.self) { try ManagedObjectModel(coreDataModelXML: Data([0xEF, 0xBB, 0xBF] + contents), file: "contents") }
        // A processing instruction without data stopped the program inside XMLParser too; a model file has none.
        let atTheStart = #expect(throws: ModelError.self) { try ManagedObjectModel(coreDataModelXML: Data("<?rseEntd?>\n<model/>".utf8), file: "contents") }
        #expect(atTheStart?.description.contains("at line 1, column 1: a processing instruction") == true, "\(String(describing: atTheStart))")
        for instruction in ["<?rseEntirb?>", "<?xml-stylesheet href=\"a\"?>"] {
            var text = String(decoding: contents, as: UTF8.self)
            text = text.replacingOccurrences(of: "\n</model>", with: "\n" + instruction + "</model>")
            let refused = #expect(throws: ModelError.self) { try ManagedObjectModel(coreDataModelXML: Data(text.utf8), file: "contents") }
            #expect(refused?.description.contains("at line 3, column 1: a processing instruction (<?…?>), which a Core Data model file does not have") == true,
                    "\(String(describing: refused))")
        }
    }

    @Test func anInvalidModelFileReportsEveryProblemWithItsFile() throws {
        do {
            _ = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Invalid.xcdatamodel"))
            Issue.record("an invalid model loaded")
        } catch {
            #expect(Set(error.problems.map(\.code)) == [.invalidIndex, .unknownDestination, .inverseMismatch, .unknownInverse])
            #expect(error.problems.allSatisfy { $0.file?.hasSuffix("Invalid.xcdatamodel/contents") == true })
            #expect(error.description.contains("Order.customer: the destination entity \"Client\" does not exist"))
            // An index problem names the index as the index and the element's property as the property.
            let index = try #require(error.problems.first { $0.code == .invalidIndex })
            #expect(index.entity == "Order" && index.index == "byTotal" && index.property == "totl")
            #expect(index.description.contains("Order.totl: the fetch index \"byTotal\" names the unknown property \"totl\""))
            // A default Core Data would drop is dropped with a warning, not counted as a problem; and for diagnosis
            // the error carries what was read.
            #expect(error.warnings.map(\.message) == ["Order.total: the default value \"lots\" is not a value of type Integer 16; it is left out, as Core Data leaves it out"])
            #expect(error.parsedEntities.map(\.name) == ["Order", "Line"])
            #expect(error.parsedEntities.first?.properties.map(\.name) == ["total", "customer", "lines"])
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
                     "Configurations.xcdatamodel", "OldStyle.xcdatamodel", "Lenient.xcdatamodel"] {
            let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture(name))
            let reloaded = try ManagedObjectModel(json: model.jsonData())
            #expect(reloaded == model, "\(name)")
            #expect(reloaded.versionHash == model.versionHash, "\(name)")
        }
    }
}
