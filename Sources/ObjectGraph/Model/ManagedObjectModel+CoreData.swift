import Foundation

/// Loading the model files Xcode's model editor writes: an `.xcdatamodeld` bundle of versions, one
/// `.xcdatamodel` directory, or the XML `contents` file inside it.
extension ManagedObjectModel {
    /// Loads a Core Data model: an `.xcdatamodeld` bundle (its current version, named by `.xccurrentversion`), an
    /// `.xcdatamodel` directory, or a `contents` XML file.
    ///
    /// Every element Xcode writes is read or knowingly passed over (the `elements` layout block, code generation
    /// settings, CloudKit flags); anything else becomes a ``warnings`` entry, not a failure.
    ///
    /// - Throws: ``ModelError``: ``ModelProblem/Code/compiledModel`` for a compiled `.mom`/`.momd`,
    ///   ``ModelProblem/Code/unreadableFile`` or ``ModelProblem/Code/malformedFile`` naming the file (and line),
    ///   or the model's own problems, each naming the file.
    public init(contentsOfCoreDataModel url: URL) throws(ModelError) {
        switch url.pathExtension {
        case "mom", "momd", "omo":
            throw ModelError(problems: [ModelProblem(.compiledModel, file: url.path,
                message: "this is a compiled Core Data model, a binary format only Apple's Core Data reads; load the .xcdatamodeld (or .xcdatamodel) it was compiled from instead")])
        case "xcdatamodeld":
            let version = try Self.currentCoreDataModelVersion(in: url)
            try self.init(contentsOfCoreDataModel: url.appendingPathComponent(version))
        case "xcdatamodel":
            try self.init(contentsOfCoreDataModel: url.appendingPathComponent("contents"))
        default:
            try self.init(coreDataModelXML: Self.contents(of: url), file: url.path)
        }
    }

    /// Loads one version of an `.xcdatamodeld` bundle by its name (`"Model 2"` or `"Model 2.xcdatamodel"`).
    ///
    /// - Throws: ``ModelError`` naming the file when the version does not exist or does not load.
    public init(contentsOfCoreDataModel bundle: URL, version: String) throws(ModelError) {
        let name = version.hasSuffix(".xcdatamodel") ? version : version + ".xcdatamodel"
        try self.init(contentsOfCoreDataModel: bundle.appendingPathComponent(name))
    }

    /// The names of the versions in an `.xcdatamodeld` bundle (`"Model"`, `"Model 2"`, …), sorted.
    ///
    /// - Throws: ``ModelError`` with ``ModelProblem/Code/unreadableFile`` when the bundle cannot be listed.
    public static func coreDataModelVersions(in bundle: URL) throws(ModelError) -> [String] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: bundle.path)
        } catch {
            throw ModelError(problems: [ModelProblem(.unreadableFile, file: bundle.path, message: "the model bundle cannot be listed: \(error.localizedDescription)")])
        }
        return names.filter { $0.hasSuffix(".xcdatamodel") }.map { String($0.dropLast(".xcdatamodel".count)) }
            .sorted { $0.localizedStandardCompare($1) == .orderedAscending }
    }

    /// The current version of an `.xcdatamodeld` bundle, as its `.xcdatamodel` directory name: the one its
    /// `.xccurrentversion` names, or the only one there is.
    ///
    /// - Throws: ``ModelError`` when the bundle names no usable version.
    public static func currentCoreDataModelVersion(in bundle: URL) throws(ModelError) -> String {
        let marker = bundle.appendingPathComponent(".xccurrentversion")
        if let data = try? Data(contentsOf: marker) {
            let plist = try? PropertyListSerialization.propertyList(from: data, options: [], format: nil)
            guard let name = (plist as? [String: Any])?["_XCCurrentVersionName"] as? String else {
                throw ModelError(problems: [ModelProblem(.malformedFile, file: marker.path,
                    message: "the file does not name the current version (_XCCurrentVersionName)")])
            }
            return name
        }
        let versions = try coreDataModelVersions(in: bundle)
        guard versions.count == 1 else {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: bundle.path,
                message: versions.isEmpty ? "the bundle holds no .xcdatamodel version"
                    : "the bundle holds \(versions.count) versions and no .xccurrentversion to say which is current")])
        }
        return versions[0] + ".xcdatamodel"
    }

    /// Loads a model from the XML of an `.xcdatamodel`'s `contents` file.
    ///
    /// - Throws: ``ModelError`` naming `file` and the line for XML that is not well-formed or not a Core Data model,
    ///   or the model's problems.
    public init(coreDataModelXML data: Data, file: String? = nil) throws(ModelError) {
        let root: XMLElementNode
        do {
            root = try XMLElementNode.parse(data)
        } catch {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: file, message: "\(error)")])
        }
        guard root.name == "model" else {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: file,
                message: "the root element is <\(root.name)>, not a Core Data <model>")])
        }
        var reader = CoreDataModelReader(file: file)
        let parts = reader.read(root)
        do {
            try self.init(entities: parts.entities, configurations: parts.configurations,
                          fetchRequestTemplates: parts.templates, versionIdentifier: parts.versionIdentifier)
        } catch {
            throw ModelError(problems: error.problems.map { problem in
                var problem = problem
                problem.file = problem.file ?? file
                return problem
            })
        }
        warnings = reader.warnings
    }
}

/// Turns the elements of a Core Data model document into model parts, noting what it passes over.
struct CoreDataModelReader {
    let file: String?
    var warnings: [ModelWarning] = []

    init(file: String?) {
        self.file = file
    }

    mutating func read(_ root: XMLElementNode) -> (entities: [EntityDescription], configurations: [ModelConfiguration],
                                                   templates: [FetchRequestTemplate], versionIdentifier: String?) {
        var entities: [EntityDescription] = []
        var configurations: [ModelConfiguration] = []
        var templates: [FetchRequestTemplate] = []
        for child in root.children {
            switch child.name {
            case "entity": entities.append(entity(child))
            case "configuration":
                configurations.append(ModelConfiguration(child["name"] ?? "", entities: child.children(named: "memberEntity").compactMap { $0["name"] }))
            case "fetchRequest":
                templates.append(FetchRequestTemplate(child["name"] ?? "", entity: child["entity"] ?? "",
                                                      predicate: child["predicateString"], fetchLimit: Int(child["fetchLimit"] ?? "") ?? 0))
            case "elements":
                break  // the diagram layout: positions of entity boxes, nothing to do with the schema
            default:
                warn(child, "the element <\(child.name)> is not part of the Core Data model format LMDBStore knows; ignored")
            }
        }
        let identifier = root["userDefinedModelVersionIdentifier"].flatMap { $0.isEmpty ? nil : $0 }
        return (entities, configurations, templates, identifier)
    }

    private mutating func warn(_ node: XMLElementNode, _ message: String) {
        warnings.append(ModelWarning(file: file.map { "\($0):\(node.line)" } ?? "line \(node.line)", message: message))
    }

    private mutating func entity(_ node: XMLElementNode) -> EntityDescription {
        var entity = EntityDescription(
            node["name"] ?? "", parent: node["parentEntity"], isAbstract: node.flag("isAbstract"),
            className: node["representedClassName"], renamingIdentifier: node["elementID"],
            versionHashModifier: node["versionHashModifier"])
        for child in node.children {
            switch child.name {
            case "attribute": entity.properties.append(.attribute(attribute(child)))
            case "relationship": entity.properties.append(.relationship(relationship(child)))
            case "fetchedProperty":
                let request = child.children(named: "fetchRequest").first
                entity.properties.append(.fetchedProperty(FetchedPropertyDescription(
                    child["name"] ?? "", entity: request?["entity"] ?? "", predicate: request?["predicateString"],
                    userInfo: userInfo(child))))
            case "fetchIndex":
                let index = fetchIndex(child, in: entity.name)
                if index.elements.isEmpty {
                    warn(child, "the fetch index \"\(index.name)\" of \"\(entity.name)\" indexes no property; it is left out")
                } else {
                    entity.fetchIndexes.append(index)
                }
            case "uniquenessConstraints":
                for constraint in child.children(named: "uniquenessConstraint") {
                    entity.uniquenessConstraints.append(UniquenessConstraint(constraint.children(named: "constraint").compactMap { $0["value"] }))
                }
            case "compoundIndexes":
                for compound in child.children(named: "compoundIndex") {
                    let names = compound.children(named: "index").compactMap { $0["value"] }
                    entity.fetchIndexes.append(FetchIndexDescription(names.joined(separator: "_") + "_compoundIndex", properties: names))
                }
            case "userInfo":
                entity.userInfo = userInfo(node)
            default:
                warn(child, "the element <\(child.name)> in entity \"\(entity.name)\" is not known; ignored")
            }
        }
        return entity
    }

    private mutating func fetchIndex(_ node: XMLElementNode, in entityName: String) -> FetchIndexDescription {
        var elements: [FetchIndexElementDescription] = []
        for element in node.children(named: "fetchIndexElement") {
            guard let property = element["property"] else {
                warn(element, "the fetch index \"\(node["name"] ?? "")\" of \"\(entityName)\" has an expression element; LMDBStore indexes properties only, so the element is left out")
                continue
            }
            let collation: FetchIndexElementDescription.Collation = element["type"] == "R-Tree" ? .rTree : .binary
            elements.append(FetchIndexElementDescription(property, ascending: element["order"] != "descending", collation: collation))
        }
        return FetchIndexDescription(node["name"] ?? "", elements: elements)
    }

    private func userInfo(_ node: XMLElementNode) -> [String: String] {
        var info: [String: String] = [:]
        for block in node.children(named: "userInfo") {
            for entry in block.children(named: "entry") { if let key = entry["key"] { info[key] = entry["value"] ?? "" } }
        }
        return info
    }

    private mutating func attribute(_ node: XMLElementNode) -> AttributeDescription {
        let name = node["name"] ?? ""
        let typeName = node["attributeType"]
        var type = AttributeType.undefined
        if let typeName {
            if let known = AttributeType(coreDataName: typeName) {
                type = known
            } else {
                warn(node, "the attribute \"\(name)\" has the type \"\(typeName)\", which LMDBStore does not support; it is read as Undefined")
            }
        }
        var validation = AttributeValidation()
        let minimum = node["minValueString"], maximum = node["maxValueString"]
        switch type {
        case .string, .binaryData:
            validation.minimumLength = minimum.flatMap { Int($0) }
            validation.maximumLength = maximum.flatMap { Int($0) }
        case .date:
            validation.minimumValue = node["minDateTimeInterval"].flatMap(Double.init).map { .date(Date(timeIntervalSinceReferenceDate: $0)) }
            validation.maximumValue = node["maxDateTimeInterval"].flatMap(Double.init).map { .date(Date(timeIntervalSinceReferenceDate: $0)) }
        default:
            validation.minimumValue = minimum.map { Self.value($0, as: type) }
            validation.maximumValue = maximum.map { Self.value($0, as: type) }
        }
        validation.pattern = node["regularExpressionString"]
        let defaultValue: AttributeValue? = type == .date
            ? node["defaultDateTimeInterval"].flatMap(Double.init).map { .date(Date(timeIntervalSinceReferenceDate: $0)) }
            : node["defaultValueString"].map { Self.value($0, as: type) }
        return AttributeDescription(
            name, type, isOptional: node.flag("optional"), isTransient: node.flag("transient"), defaultValue: defaultValue,
            validation: validation, transformerName: node["valueTransformerName"], valueTypeName: node["customClassName"],
            isIndexed: node.flag("indexed"), userInfo: userInfo(node), renamingIdentifier: node["elementID"],
            versionHashModifier: node["versionHashModifier"])
    }

    /// A value written as text in a model file; text that does not parse as `type` stays a string, so the model
    /// check reports it as a value of the wrong type.
    static func value(_ text: String, as type: AttributeType) -> AttributeValue {
        let parsed: AttributeValue? = switch type {
        case .integer16, .integer32, .integer64: Int64(text).map(AttributeValue.integer)
        case .double: Double(text).map(AttributeValue.double)
        case .float: Float(text).map(AttributeValue.float)
        case .decimal: Decimal(string: text).map(AttributeValue.decimal)
        case .boolean: text == "YES" || text == "1" ? .boolean(true) : text == "NO" || text == "0" ? .boolean(false) : nil
        case .uuid: UUID(uuidString: text).map(AttributeValue.uuid)
        case .uri: URL(string: text).map(AttributeValue.uri)
        case .string: .string(text)
        default: nil
        }
        return parsed ?? .string(text)
    }

    private func relationship(_ node: XMLElementNode) -> RelationshipDescription {
        let deleteRule = DeleteRule.allCases.first { $0.coreDataName == node["deletionRule"] } ?? .nullify
        let toMany = node.flag("toMany")
        return RelationshipDescription(
            node["name"] ?? "", destination: node["destinationEntity"] ?? "", inverse: node["inverseName"], toMany: toMany,
            ordered: node.flag("ordered"), isOptional: node.flag("optional"), isTransient: node.flag("transient"),
            minimumCount: Int(node["minCount"] ?? "") ?? 0, maximumCount: toMany ? Int(node["maxCount"] ?? "") ?? 0 : 1,
            deleteRule: deleteRule, userInfo: userInfo(node), renamingIdentifier: node["elementID"],
            versionHashModifier: node["versionHashModifier"])
    }
}
