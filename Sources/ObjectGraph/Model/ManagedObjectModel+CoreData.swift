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
            throw error.located(in: file, parsedEntities: parts.entities, warnings: reader.warnings)
        }
        warnings = reader.warnings
    }
}

/// Turns the elements of a Core Data model document into model parts, noting what it passes over.
struct CoreDataModelReader {
    let file: String?
    var warnings: [ModelWarning] = []
    /// The line of each fetch index element, by entity, index and property, for warnings about it later.
    private var elementLines: [String: Int] = [:]

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
        return (dropToManyIndexElements(entities), configurations, templates, identifier)
    }

    /// Core Data accepts a fetch index element naming a to-many relationship and indexes nothing for it: the element
    /// is left out with a warning, the rest of the index kept (and an index left with no element, dropped).
    private mutating func dropToManyIndexElements(_ entities: [EntityDescription]) -> [EntityDescription] {
        let byName = Dictionary(entities.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        func isToMany(_ name: String, in entity: EntityDescription) -> Bool {
            var current: EntityDescription? = entity
            for _ in 0...entities.count {
                guard let owner = current else { return false }
                if let property = owner.properties.first(where: { $0.name == name }) {
                    if case .relationship(let relationship) = property { return relationship.isToMany }
                    return false
                }
                current = owner.parentName.flatMap { byName[$0] }
            }
            return false
        }
        return entities.map { entity in
            var entity = entity
            entity.fetchIndexes = entity.fetchIndexes.compactMap { index in
                var index = index
                index.elements.removeAll { element in
                    guard isToMany(element.propertyName, in: entity) else { return false }
                    let line = elementLines["\(entity.name)/\(index.name)/\(element.propertyName)"]
                    warn(line: line, entity: entity.name, property: element.propertyName,
                         "the fetch index \"\(index.name)\" of \"\(entity.name)\" names the to-many relationship \"\(element.propertyName)\", which no index can hold (its links are indexed both ways already); the element is left out")
                    return true
                }
                guard index.elements.isEmpty else { return index }
                warn(line: elementLines["\(entity.name)/\(index.name)/"], entity: entity.name, property: nil,
                     "the fetch index \"\(index.name)\" of \"\(entity.name)\" indexes nothing else; it is left out")
                return nil
            }
            return entity
        }
    }

    private mutating func warn(_ node: XMLElementNode, entity: String? = nil, property: String? = nil, _ message: String) {
        warn(line: node.line, entity: entity, property: property, message)
    }

    private mutating func warn(line: Int?, entity: String?, property: String?, _ message: String) {
        let place = switch (file, line) {
        case let (file?, line?): "\(file):\(line)"
        case let (file?, nil): file
        case let (nil, line?): "line \(line)"
        case (nil, nil): nil as String?
        }
        warnings.append(ModelWarning(file: place, entity: entity, property: property, message: message))
    }

    private mutating func entity(_ node: XMLElementNode) -> EntityDescription {
        var entity = EntityDescription(
            node["name"] ?? "", parent: node["parentEntity"], isAbstract: node.flag("isAbstract"),
            className: node["representedClassName"], renamingIdentifier: node["elementID"],
            versionHashModifier: node["versionHashModifier"])
        for child in node.children {
            switch child.name {
            case "attribute": entity.properties.append(.attribute(attribute(child, in: entity.name)))
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
                    let name = names.joined(separator: "_") + "_compoundIndex"
                    for element in compound.children(named: "index") { elementLines["\(entity.name)/\(name)/\(element["value"] ?? "")"] = element.line }
                    elementLines["\(entity.name)/\(name)/"] = compound.line
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
            elementLines["\(entityName)/\(node["name"] ?? "")/\(property)"] = element.line
            elementLines["\(entityName)/\(node["name"] ?? "")/"] = node.line
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

    private mutating func attribute(_ node: XMLElementNode, in entityName: String) -> AttributeDescription {
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
        /// A value written as text, read as `type` the way Core Data reads it: converted when that loses nothing,
        /// otherwise left out with a warning naming the entity, the attribute and the text.
        func value(_ field: String, _ role: String) -> AttributeValue? {
            guard let text = node[field] else { return nil }
            switch Self.value(text, as: type) {
            case .exact(let value):
                return value
            case .converted(let value):
                warn(node, entity: entityName, property: name,
                     "\(entityName).\(name): the \(role) \"\(text)\" is read as \(value) for the type \(type.coreDataName), as Core Data reads it")
                return value
            case .unusable:
                warn(node, entity: entityName, property: name,
                     "\(entityName).\(name): the \(role) \"\(text)\" is not a value of type \(type.coreDataName); it is left out, as Core Data leaves it out")
                return nil
            }
        }
        var validation = AttributeValidation()
        switch type {
        case .string, .binaryData:
            validation.minimumLength = node["minValueString"].flatMap { Int($0) }
            validation.maximumLength = node["maxValueString"].flatMap { Int($0) }
        case .date:
            validation.minimumValue = dateValue(node, "minDateTimeInterval", "minimum date", entity: entityName, attribute: name)
            validation.maximumValue = dateValue(node, "maxDateTimeInterval", "maximum date", entity: entityName, attribute: name)
        default:
            validation.minimumValue = value("minValueString", "minimum value")
            validation.maximumValue = value("maxValueString", "maximum value")
        }
        validation.pattern = node["regularExpressionString"]
        let defaultValue = type == .date
            ? dateValue(node, "defaultDateTimeInterval", "default date", entity: entityName, attribute: name)
            : value("defaultValueString", "default value")
        return AttributeDescription(
            name, type, isOptional: node.flag("optional"), isTransient: node.flag("transient"), defaultValue: defaultValue,
            validation: validation, transformerName: node["valueTransformerName"], valueTypeName: node["customClassName"],
            isIndexed: node.flag("indexed"), allowsExternalBinaryDataStorage: node.flag("allowsExternalBinaryDataStorage"),
            preservesValueInHistoryOnDeletion: node.flag("preserveAfterDeletion"), userInfo: userInfo(node),
            renamingIdentifier: node["elementID"], versionHashModifier: node["versionHashModifier"])
    }

    /// A date written as seconds since the reference date, or `nil` (with a warning when the text is not a number).
    private mutating func dateValue(_ node: XMLElementNode, _ field: String, _ role: String, entity: String, attribute: String) -> AttributeValue? {
        guard let text = node[field] else { return nil }
        guard let seconds = Double(text), seconds.isFinite else {
            warn(node, entity: entity, property: attribute,
                 "\(entity).\(attribute): the \(role) \"\(text)\" is not a number of seconds; it is left out, as Core Data leaves it out")
            return nil
        }
        return .date(Date(timeIntervalSinceReferenceDate: seconds))
    }

    /// How text from a model file reads as a value of an attribute type.
    enum TextValue: Equatable {
        /// The text is written as the type writes it.
        case exact(AttributeValue)
        /// The text is another type's spelling of a value that converts without loss: `0.0` or `NO` for an integer.
        case converted(AttributeValue)
        /// The text is no value of the type, or one out of its range.
        case unusable
    }

    /// Reads text from a model file as a value of `type`, as Core Data does: exactly when it is written that way,
    /// converted when another spelling converts without loss (`"0.0"`, `"NO"`, `"YES"` for numbers; `"0"`, `"1"` for
    /// Booleans), and not at all when it cannot be (`"empy"` for a UUID, `"0.5"` or `"70000"` for an Integer 16).
    static func value(_ text: String, as type: AttributeType) -> TextValue {
        let flag: Bool? = switch text {
        case "YES", "true": true
        case "NO", "false": false
        default: nil
        }
        let number = Double(text).flatMap { $0.isFinite ? $0 : nil }
        switch type {
        case .integer16, .integer32, .integer64:
            let range = type.integerRange!
            if let exact = Int64(text) { return range.contains(exact) ? .exact(.integer(exact)) : .unusable }
            if let number, number.rounded() == number, let whole = Int64(exactly: number), range.contains(whole) {
                return .converted(.integer(whole))
            }
            return flag.map { .converted(.integer($0 ? 1 : 0)) } ?? .unusable
        case .double:
            if let number = Double(text) { return .exact(.double(number)) }
            return flag.map { .converted(.double($0 ? 1 : 0)) } ?? .unusable
        case .float:
            if let number = Float(text) { return .exact(.float(number)) }
            return flag.map { .converted(.float($0 ? 1 : 0)) } ?? .unusable
        case .decimal:
            if number != nil, let decimal = Decimal(string: text) { return .exact(.decimal(decimal)) }
            return flag.map { .converted(.decimal($0 ? 1 : 0)) } ?? .unusable
        case .boolean:
            if let flag { return text == "YES" || text == "NO" ? .exact(.boolean(flag)) : .converted(.boolean(flag)) }
            if number == 0 || number == 1 { return text == "0" || text == "1" ? .exact(.boolean(number == 1)) : .converted(.boolean(number == 1)) }
            return .unusable
        case .uuid:
            return UUID(uuidString: text).map { .exact(.uuid($0)) } ?? .unusable
        case .uri:
            return URL(string: text).map { .exact(.uri($0)) } ?? .unusable
        case .string:
            return .exact(.string(text))
        case .date, .binaryData, .transformable, .objectID, .undefined:
            return .unusable
        }
    }

    private func relationship(_ node: XMLElementNode) -> RelationshipDescription {
        let deleteRule = DeleteRule.allCases.first { $0.coreDataName == node["deletionRule"] } ?? .nullify
        let toMany = node.flag("toMany")
        return RelationshipDescription(
            node["name"] ?? "", destination: node["destinationEntity"] ?? "", inverse: node["inverseName"], toMany: toMany,
            ordered: node.flag("ordered"), isOptional: node.flag("optional"), isTransient: node.flag("transient"),
            minimumCount: Int(node["minCount"] ?? "") ?? 0, maximumCount: toMany ? Int(node["maxCount"] ?? "") ?? 0 : 1,
            deleteRule: deleteRule, isIndexed: node.flag("indexed"), userInfo: userInfo(node), renamingIdentifier: node["elementID"],
            versionHashModifier: node["versionHashModifier"])
    }
}
