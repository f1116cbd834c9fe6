import Foundation

/// LMDBStore's JSON model format, documented in `Docs/MODEL-JSON.md`. Fields at their default values are left out
/// when writing and may be left out when reading; keys are written sorted, so a model round-trips byte for byte.
extension ManagedObjectModel {
    /// The version of the JSON format this code writes and reads.
    public static let jsonFormatVersion = 1

    /// Reads a model from its JSON description, checking it.
    ///
    /// - Parameter file: The file name to use in error messages, if the data came from a file.
    /// - Throws: ``ModelError`` with ``ModelProblem/Code/malformedFile`` when the JSON does not describe a model
    ///   (naming the key path where decoding stopped), or the model's problems.
    public init(json data: Data, file: String? = nil) throws(ModelError) {
        let document: ModelDocument
        do {
            document = try JSONDecoder().decode(ModelDocument.self, from: data)
        } catch let error as DecodingError {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: file, message: Self.describe(error))])
        } catch {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: file, message: "\(error)")])
        }
        guard document.formatVersion <= Self.jsonFormatVersion else {
            throw ModelError(problems: [ModelProblem(.malformedFile, file: file,
                message: "the JSON model has format version \(document.formatVersion); this LMDBStore reads up to \(Self.jsonFormatVersion)")])
        }
        do {
            try self.init(entities: document.entities, configurations: document.configurations,
                          fetchRequestTemplates: document.fetchRequestTemplates, versionIdentifier: document.versionIdentifier)
        } catch {
            throw error.located(in: file, parsedEntities: document.entities)
        }
    }

    /// Reads a model from a JSON file, checking it.
    ///
    /// - Throws: ``ModelError`` naming the file when it cannot be read or does not describe a valid model.
    public init(contentsOfJSON url: URL) throws(ModelError) {
        try self.init(json: Self.contents(of: url), file: url.path)
    }

    /// The bytes of a model file, or a ``ModelError`` naming it.
    static func contents(of url: URL) throws(ModelError) -> Data {
        do {
            return try Data(contentsOf: url)
        } catch {
            throw ModelError(problems: [ModelProblem(.unreadableFile, file: url.path, message: "the file cannot be read: \(error.localizedDescription)")])
        }
    }

    /// The model's JSON description: pretty-printed, keys sorted, so equal models give equal bytes.
    public func jsonData() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let document = ModelDocument(formatVersion: Self.jsonFormatVersion, versionIdentifier: versionIdentifier,
                                     entities: entities, configurations: configurations,
                                     fetchRequestTemplates: fetchRequestTemplates)
        // Encoding plain values into JSON cannot fail.
        return try! encoder.encode(document)
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return keys.isEmpty ? "the top level" : keys.hasPrefix(".") ? String(keys.dropFirst()) : keys
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing key \"\(key.stringValue)\" at \(path(context))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "\(context.debugDescription) at \(path(context))"
        case .dataCorrupted(let context):
            return "\(context.underlyingError.map { "\($0)" } ?? context.debugDescription) at \(path(context))"
        @unknown default:
            return "\(error)"
        }
    }
}

struct ModelDocument: Codable {
    var formatVersion: Int
    var versionIdentifier: String?
    var entities: [EntityDescription]
    var configurations: [ModelConfiguration]
    var fetchRequestTemplates: [FetchRequestTemplate]

    enum CodingKeys: String, CodingKey { case formatVersion, versionIdentifier, entities, configurations, fetchRequestTemplates }

    init(formatVersion: Int, versionIdentifier: String?, entities: [EntityDescription], configurations: [ModelConfiguration],
         fetchRequestTemplates: [FetchRequestTemplate]) {
        self.formatVersion = formatVersion
        self.versionIdentifier = versionIdentifier
        self.entities = entities
        self.configurations = configurations
        self.fetchRequestTemplates = fetchRequestTemplates
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        formatVersion = try c.decode(Int.self, forKey: .formatVersion)
        versionIdentifier = try c.decodeIfPresent(String.self, forKey: .versionIdentifier)
        entities = try c.decode([EntityDescription].self, forKey: .entities)
        configurations = try c.decodeIfPresent([ModelConfiguration].self, forKey: .configurations) ?? []
        fetchRequestTemplates = try c.decodeIfPresent([FetchRequestTemplate].self, forKey: .fetchRequestTemplates) ?? []
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(formatVersion, forKey: .formatVersion)
        try c.encodeIfPresent(versionIdentifier, forKey: .versionIdentifier)
        try c.encode(entities, forKey: .entities)
        try c.encodeUnlessEmpty(configurations, forKey: .configurations)
        try c.encodeUnlessEmpty(fetchRequestTemplates, forKey: .fetchRequestTemplates)
    }
}

// MARK: - Helpers for omitting defaults

extension KeyedEncodingContainer {
    mutating func encodeUnlessEmpty<T: Encodable & Collection>(_ value: T, forKey key: Key) throws {
        if !value.isEmpty { try encode(value, forKey: key) }
    }

    mutating func encodeIfTrue(_ value: Bool, forKey key: Key) throws {
        if value { try encode(true, forKey: key) }
    }
}

extension KeyedDecodingContainer {
    func decodeFlag(_ key: Key) throws -> Bool {
        try decodeIfPresent(Bool.self, forKey: key) ?? false
    }

    func decodeUserInfo(_ key: Key) throws -> [String: String] {
        try decodeIfPresent([String: String].self, forKey: key) ?? [:]
    }
}

// MARK: - Entities and properties

extension EntityDescription: Codable {
    enum CodingKeys: String, CodingKey {
        case name, parent, abstract, className, properties, fetchIndexes, uniquenessConstraints, userInfo
        case renamingIdentifier, versionHashModifier
    }

    /// Reads an entity from its JSON description (see `Docs/MODEL-JSON.md`).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            try c.decode(String.self, forKey: .name), parent: try c.decodeIfPresent(String.self, forKey: .parent),
            isAbstract: try c.decodeFlag(.abstract), className: try c.decodeIfPresent(String.self, forKey: .className),
            properties: try c.decodeIfPresent([PropertyDescription].self, forKey: .properties) ?? [],
            fetchIndexes: try c.decodeIfPresent([FetchIndexDescription].self, forKey: .fetchIndexes) ?? [],
            uniquenessConstraints: (try c.decodeIfPresent([[String]].self, forKey: .uniquenessConstraints) ?? []).map(UniquenessConstraint.init),
            userInfo: try c.decodeUserInfo(.userInfo),
            renamingIdentifier: try c.decodeIfPresent(String.self, forKey: .renamingIdentifier),
            versionHashModifier: try c.decodeIfPresent(String.self, forKey: .versionHashModifier))
    }

    /// Writes the entity's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encodeIfPresent(parentName, forKey: .parent)
        try c.encodeIfTrue(isAbstract, forKey: .abstract)
        try c.encodeIfPresent(className, forKey: .className)
        try c.encodeUnlessEmpty(properties, forKey: .properties)
        try c.encodeUnlessEmpty(fetchIndexes, forKey: .fetchIndexes)
        try c.encodeUnlessEmpty(uniquenessConstraints.map(\.propertyNames), forKey: .uniquenessConstraints)
        try c.encodeUnlessEmpty(userInfo, forKey: .userInfo)
        try c.encodeIfPresent(renamingIdentifier, forKey: .renamingIdentifier)
        try c.encodeIfPresent(versionHashModifier, forKey: .versionHashModifier)
    }
}

extension PropertyDescription: Codable {
    private enum KindKey: String, CodingKey { case kind }

    /// Reads a property from its JSON description; `"kind"` says which sort it is.
    public init(from decoder: any Decoder) throws {
        let kind = try decoder.container(keyedBy: KindKey.self).decode(String.self, forKey: .kind)
        switch kind {
        case "attribute": self = .attribute(try AttributeDescription(from: decoder))
        case "relationship": self = .relationship(try RelationshipDescription(from: decoder))
        case "fetchedProperty": self = .fetchedProperty(try FetchedPropertyDescription(from: decoder))
        default:
            throw DecodingError.dataCorruptedError(forKey: KindKey.kind, in: try decoder.container(keyedBy: KindKey.self),
                                                   debugDescription: "unknown property kind \"\(kind)\" (expected attribute, relationship or fetchedProperty)")
        }
    }

    /// Writes the property's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var kind = encoder.container(keyedBy: KindKey.self)
        switch self {
        case .attribute(let attribute):
            try kind.encode("attribute", forKey: .kind)
            try attribute.encode(to: encoder)
        case .relationship(let relationship):
            try kind.encode("relationship", forKey: .kind)
            try relationship.encode(to: encoder)
        case .fetchedProperty(let property):
            try kind.encode("fetchedProperty", forKey: .kind)
            try property.encode(to: encoder)
        }
    }
}

extension AttributeDescription: Codable {
    enum CodingKeys: String, CodingKey {
        case name, type, optional, transient, `default`, validation, transformer, valueType, indexed, userInfo
        case allowsExternalStorage, preservesValueOnDeletion, renamingIdentifier, versionHashModifier
    }

    private enum ValidationKeys: String, CodingKey { case minimum, maximum, minimumLength, maximumLength, pattern }

    /// Reads an attribute from its JSON description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let type = try c.decode(AttributeType.self, forKey: .type)
        var validation = AttributeValidation()
        if c.contains(.validation) {
            let v = try c.nestedContainer(keyedBy: ValidationKeys.self, forKey: .validation)
            validation.minimumValue = try AttributeValue.decode(from: v, forKey: .minimum, as: type)
            validation.maximumValue = try AttributeValue.decode(from: v, forKey: .maximum, as: type)
            validation.minimumLength = try v.decodeIfPresent(Int.self, forKey: .minimumLength)
            validation.maximumLength = try v.decodeIfPresent(Int.self, forKey: .maximumLength)
            validation.pattern = try v.decodeIfPresent(String.self, forKey: .pattern)
        }
        self.init(
            try c.decode(String.self, forKey: .name), type, isOptional: try c.decodeFlag(.optional),
            isTransient: try c.decodeFlag(.transient), defaultValue: try AttributeValue.decode(from: c, forKey: .default, as: type),
            validation: validation, transformerName: try c.decodeIfPresent(String.self, forKey: .transformer),
            valueTypeName: try c.decodeIfPresent(String.self, forKey: .valueType), isIndexed: try c.decodeFlag(.indexed),
            allowsExternalBinaryDataStorage: try c.decodeFlag(.allowsExternalStorage),
            preservesValueInHistoryOnDeletion: try c.decodeFlag(.preservesValueOnDeletion),
            userInfo: try c.decodeUserInfo(.userInfo),
            renamingIdentifier: try c.decodeIfPresent(String.self, forKey: .renamingIdentifier),
            versionHashModifier: try c.decodeIfPresent(String.self, forKey: .versionHashModifier))
    }

    /// Writes the attribute's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(type, forKey: .type)
        try c.encodeIfTrue(isOptional, forKey: .optional)
        try c.encodeIfTrue(isTransient, forKey: .transient)
        try defaultValue?.encode(to: &c, forKey: .default)
        if !validation.isEmpty {
            var v = c.nestedContainer(keyedBy: ValidationKeys.self, forKey: .validation)
            try validation.minimumValue?.encode(to: &v, forKey: .minimum)
            try validation.maximumValue?.encode(to: &v, forKey: .maximum)
            try v.encodeIfPresent(validation.minimumLength, forKey: .minimumLength)
            try v.encodeIfPresent(validation.maximumLength, forKey: .maximumLength)
            try v.encodeIfPresent(validation.pattern, forKey: .pattern)
        }
        try c.encodeIfPresent(transformerName, forKey: .transformer)
        try c.encodeIfPresent(valueTypeName, forKey: .valueType)
        try c.encodeIfTrue(isIndexed, forKey: .indexed)
        try c.encodeIfTrue(allowsExternalBinaryDataStorage, forKey: .allowsExternalStorage)
        try c.encodeIfTrue(preservesValueInHistoryOnDeletion, forKey: .preservesValueOnDeletion)
        try c.encodeUnlessEmpty(userInfo, forKey: .userInfo)
        try c.encodeIfPresent(renamingIdentifier, forKey: .renamingIdentifier)
        try c.encodeIfPresent(versionHashModifier, forKey: .versionHashModifier)
    }
}

extension AttributeValue {
    /// Writes the value in its attribute type's natural JSON form.
    func encode<Key: CodingKey>(to container: inout KeyedEncodingContainer<Key>, forKey key: Key) throws {
        switch self {
        case .integer(let value): try container.encode(value, forKey: key)
        case .double(let value): try container.encode(value, forKey: key)
        case .float(let value): try container.encode(value, forKey: key)
        case .decimal(let value): try container.encode("\(value)", forKey: key)
        case .string(let value): try container.encode(value, forKey: key)
        case .boolean(let value): try container.encode(value, forKey: key)
        case .date(let value): try container.encode(value.timeIntervalSinceReferenceDate, forKey: key)
        case .data(let value): try container.encode(value.base64EncodedString(), forKey: key)
        case .uuid(let value): try container.encode(value.uuidString, forKey: key)
        case .uri(let value): try container.encode(value.absoluteString, forKey: key)
        }
    }

    /// Reads a value of an attribute type from its natural JSON form; `nil` when the key is absent.
    static func decode<Key: CodingKey>(from container: KeyedDecodingContainer<Key>, forKey key: Key, as type: AttributeType) throws -> AttributeValue? {
        guard container.contains(key), try !container.decodeNil(forKey: key) else { return nil }
        func corrupt(_ what: String) -> DecodingError {
            DecodingError.dataCorruptedError(forKey: key, in: container, debugDescription: "expected \(what) for a \(type.coreDataName) value")
        }
        switch type {
        case .integer16, .integer32, .integer64: return .integer(try container.decode(Int64.self, forKey: key))
        case .double: return .double(try container.decode(Double.self, forKey: key))
        case .float: return .float(try container.decode(Float.self, forKey: key))
        case .decimal:
            guard let value = Decimal(string: try container.decode(String.self, forKey: key)) else { throw corrupt("a decimal number in a string") }
            return .decimal(value)
        case .string: return .string(try container.decode(String.self, forKey: key))
        case .boolean: return .boolean(try container.decode(Bool.self, forKey: key))
        case .date: return .date(Date(timeIntervalSinceReferenceDate: try container.decode(Double.self, forKey: key)))
        case .binaryData:
            guard let value = Data(base64Encoded: try container.decode(String.self, forKey: key)) else { throw corrupt("base64 text") }
            return .data(value)
        case .uuid:
            guard let value = UUID(uuidString: try container.decode(String.self, forKey: key)) else { throw corrupt("a UUID string") }
            return .uuid(value)
        case .uri:
            guard let value = URL(string: try container.decode(String.self, forKey: key)) else { throw corrupt("a URI string") }
            return .uri(value)
        case .transformable, .objectID, .undefined:
            throw corrupt("no value (this type has no default)")
        }
    }
}

extension RelationshipDescription: Codable {
    enum CodingKeys: String, CodingKey {
        case name, destination, inverse, toMany, ordered, optional, transient, minimumCount, maximumCount, deleteRule
        case indexed, userInfo, renamingIdentifier, versionHashModifier
    }

    /// Reads a relationship from its JSON description. `optional` defaults to `true` and `deleteRule` to `nullify`.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let toMany = try c.decodeFlag(.toMany)
        self.init(
            try c.decode(String.self, forKey: .name), destination: try c.decode(String.self, forKey: .destination),
            inverse: try c.decodeIfPresent(String.self, forKey: .inverse), toMany: toMany, ordered: try c.decodeFlag(.ordered),
            isOptional: try c.decodeIfPresent(Bool.self, forKey: .optional) ?? true, isTransient: try c.decodeFlag(.transient),
            minimumCount: try c.decodeIfPresent(Int.self, forKey: .minimumCount) ?? 0,
            maximumCount: try c.decodeIfPresent(Int.self, forKey: .maximumCount) ?? 0,
            deleteRule: try c.decodeIfPresent(DeleteRule.self, forKey: .deleteRule) ?? .nullify,
            isIndexed: try c.decodeFlag(.indexed), userInfo: try c.decodeUserInfo(.userInfo),
            renamingIdentifier: try c.decodeIfPresent(String.self, forKey: .renamingIdentifier),
            versionHashModifier: try c.decodeIfPresent(String.self, forKey: .versionHashModifier))
    }

    /// Writes the relationship's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(destinationEntityName, forKey: .destination)
        try c.encodeIfPresent(inverseName, forKey: .inverse)
        try c.encodeIfTrue(isToMany, forKey: .toMany)
        try c.encodeIfTrue(isOrdered, forKey: .ordered)
        if !isOptional { try c.encode(false, forKey: .optional) }
        try c.encodeIfTrue(isTransient, forKey: .transient)
        if minimumCount != 0 { try c.encode(minimumCount, forKey: .minimumCount) }
        if isToMany && maximumCount != 0 { try c.encode(maximumCount, forKey: .maximumCount) }
        if deleteRule != .nullify { try c.encode(deleteRule, forKey: .deleteRule) }
        try c.encodeIfTrue(isIndexed, forKey: .indexed)
        try c.encodeUnlessEmpty(userInfo, forKey: .userInfo)
        try c.encodeIfPresent(renamingIdentifier, forKey: .renamingIdentifier)
        try c.encodeIfPresent(versionHashModifier, forKey: .versionHashModifier)
    }
}

extension FetchedPropertyDescription: Codable {
    enum CodingKeys: String, CodingKey { case name, entity, predicate, userInfo }

    /// Reads a fetched property from its JSON description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(String.self, forKey: .name), entity: try c.decode(String.self, forKey: .entity),
                  predicate: try c.decodeIfPresent(String.self, forKey: .predicate), userInfo: try c.decodeUserInfo(.userInfo))
    }

    /// Writes the fetched property's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(entityName, forKey: .entity)
        try c.encodeIfPresent(predicateFormat, forKey: .predicate)
        try c.encodeUnlessEmpty(userInfo, forKey: .userInfo)
    }
}

extension FetchIndexDescription: Codable {
    enum CodingKeys: String, CodingKey { case name, elements, storedAttributes }
    private enum ElementKeys: String, CodingKey { case property, ascending, collation }

    /// Reads a fetch index from its JSON description; elements are ascending and binary unless they say otherwise.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        var list = try c.nestedUnkeyedContainer(forKey: .elements)
        var elements: [FetchIndexElementDescription] = []
        while !list.isAtEnd {
            let e = try list.nestedContainer(keyedBy: ElementKeys.self)
            elements.append(FetchIndexElementDescription(
                try e.decode(String.self, forKey: .property), ascending: try e.decodeIfPresent(Bool.self, forKey: .ascending) ?? true,
                collation: try e.decodeIfPresent(FetchIndexElementDescription.Collation.self, forKey: .collation) ?? .binary))
        }
        self.init(try c.decode(String.self, forKey: .name), elements: elements,
                  storing: try c.decodeIfPresent([String].self, forKey: .storedAttributes) ?? [])
    }

    /// Writes the fetch index's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        var list = c.nestedUnkeyedContainer(forKey: .elements)
        for element in elements {
            var e = list.nestedContainer(keyedBy: ElementKeys.self)
            try e.encode(element.propertyName, forKey: .property)
            if !element.isAscending { try e.encode(false, forKey: .ascending) }
            if element.collation != .binary { try e.encode(element.collation, forKey: .collation) }
        }
        try c.encodeUnlessEmpty(storedAttributeNames, forKey: .storedAttributes)
    }
}

extension ModelConfiguration: Codable {
    enum CodingKeys: String, CodingKey { case name, entities }

    /// Reads a configuration from its JSON description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(String.self, forKey: .name), entities: try c.decode([String].self, forKey: .entities))
    }

    /// Writes the configuration's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(entityNames, forKey: .entities)
    }
}

extension FetchRequestTemplate: Codable {
    enum CodingKeys: String, CodingKey { case name, entity, predicate, fetchLimit }

    /// Reads a fetch request template from its JSON description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(String.self, forKey: .name), entity: try c.decode(String.self, forKey: .entity),
                  predicate: try c.decodeIfPresent(String.self, forKey: .predicate),
                  fetchLimit: try c.decodeIfPresent(Int.self, forKey: .fetchLimit) ?? 0)
    }

    /// Writes the template's JSON description.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(entityName, forKey: .entity)
        try c.encodeIfPresent(predicateFormat, forKey: .predicate)
        if fetchLimit != 0 { try c.encode(fetchLimit, forKey: .fetchLimit) }
    }
}
