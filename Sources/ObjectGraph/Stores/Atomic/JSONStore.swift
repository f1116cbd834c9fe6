import Foundation

/// An atomic store kept as one JSON document that other programs can read and write; `Docs/ATOMIC-STORES.md`
/// describes the format. Registered with every coordinator as `"JSON"`.
///
/// ```json
/// {
///   "metadata": {"NSStoreType": "JSON", "NSStoreUUID": "…", "LMDBStoreModelVersionHash": "…"},
///   "entities": {
///     "Item": [
///       {"@id": 1, "name": "first", "rank": 3, "owner": 1, "labels": [2, 5]}
///     ]
///   }
/// }
/// ```
///
/// Each save rewrites the whole file atomically (temporary file, flush, rename), so a crash leaves the old file or
/// the new one.
public final class JSONStore: AtomicStore, @unchecked Sendable {
    /// The type string the store is registered under.
    public static let storeType = "JSON"

    private let layout: AtomicRecordLayout

    /// Creates a store at the description's file URL; used by the coordinator.
    ///
    /// - Throws: ``ManagedObjectContextError`` when the description has no file URL.
    public init(description: PersistentStoreCoordinator.StoreDescription) throws {
        layout = AtomicRecordLayout(model: description.model, configuration: description.configurationName)
        try super.init(description: description, type: Self.storeType)
    }

    /// The metadata of the JSON store file at `url`, read without loading its records.
    ///
    /// - Throws: ``StoreFileError`` when the file cannot be read or is not a JSON store.
    public static func metadata(at url: URL) throws -> [String: String] {
        try readMetadata(of: try document(at: url), url: url)
    }

    private static func document(at url: URL) throws -> JSONValue {
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: url))
        } catch {
            throw StoreFileError(.io, url: url, reason: "cannot be read: \(error.localizedDescription)")
        }
        do {
            return try JSONText.parse(bytes)
        } catch {
            throw StoreFileError(.malformed, url: url, line: error.line, reason: "is not JSON: \(error.reason) (column \(error.column))")
        }
    }

    private static func readMetadata(of document: JSONValue, url: URL) throws(StoreFileError) -> [String: String] {
        guard case .object(_, let line) = document else {
            throw StoreFileError(.malformed, url: url, line: 1, reason: "holds \(document.kindName), not a JSON store's object {\"metadata\": …, \"entities\": …}")
        }
        guard let metadata = document["metadata"] else { return [:] }
        guard case .object(let members, let metadataLine) = metadata else {
            throw StoreFileError(.malformed, url: url, line: line, field: "metadata", reason: "is \(metadata.kindName), not an object of strings")
        }
        var result: [String: String] = [:]
        for (key, value) in members {
            guard case .string(let text) = value else {
                throw StoreFileError(.malformed, url: url, line: metadataLine, field: "metadata." + key, reason: "is \(value.kindName), not a string")
            }
            result[key] = text
        }
        return result
    }

    // MARK: - Loading

    /// Reads the document: metadata first (checked against this store type and model), then every record.
    ///
    /// - Throws: ``StoreFileError`` naming the line, record and field of the first problem.
    public override func load() throws {
        let url = fileURL
        let document = try Self.document(at: url)
        metadata.merge(try Self.readMetadata(of: document, url: url)) { _, stored in stored }
        try checkMetadata()
        for (key, _) in document.objectMembers where key != "metadata" && key != "entities" {
            throw StoreFileError(.malformed, url: url, line: document.line, field: key, reason: "is not a member of a JSON store (only \"metadata\" and \"entities\")")
        }
        var records: [FileRecord] = []
        if let entities = document["entities"] {
            guard case .object(let groups, let line) = entities else {
                throw StoreFileError(.malformed, url: url, line: document.line, field: "entities", reason: "is \(entities.kindName), not an object of entity names")
            }
            for (entityName, group) in groups {
                guard layout.entityNames.contains(entityName) else {
                    let reason = model.entity(named: entityName)?.isAbstract == true ? "is abstract, so it has no records of its own"
                        : "is not an entity this store holds"
                    throw StoreFileError(.foreignFile, url: url, line: line, field: "entities." + entityName, reason: reason)
                }
                guard case .array(let elements) = group else {
                    throw StoreFileError(.malformed, url: url, line: line, field: "entities." + entityName, reason: "is \(group.kindName), not an array of records")
                }
                for (position, element) in elements.enumerated() {
                    records.append(try record(element, entityName: entityName, position: position, url: url))
                }
            }
        }
        addCacheNodes(try layout.makeNodes(records, store: self, url: url))
    }

    private func record(_ value: JSONValue, entityName: String, position: Int, url: URL) throws(StoreFileError) -> FileRecord {
        guard case .object(let members, let line) = value else {
            throw StoreFileError(.malformed, url: url, record: "\(entityName) #\(position + 1)", reason: "is \(value.kindName), not an object")
        }
        let reference: ReferenceObject
        switch value[AtomicRecordLayout.keyField] {
        case .number(let text)?:
            guard let key = Int64(text) else {
                throw StoreFileError(.malformed, url: url, line: line, record: "\(entityName) #\(position + 1)", field: AtomicRecordLayout.keyField, reason: "\(text) is not a 64-bit integer")
            }
            reference = .integer(key)
        case .string(let text)? where !text.isEmpty:
            reference = .string(text)
        case let other:
            throw StoreFileError(.malformed, url: url, line: line, record: "\(entityName) #\(position + 1)", field: AtomicRecordLayout.keyField,
                                 reason: other.map { "is \($0.kindName), not an integer or a non-empty string" } ?? "is missing (every record needs an \"@id\")")
        }
        var record = FileRecord(entityName: entityName, reference: reference, line: line)
        func fail(_ kind: StoreFileError.Kind, _ field: String, _ reason: String) -> StoreFileError {
            StoreFileError(kind, url: url, line: line, record: record.label, field: field, reason: reason)
        }
        for (key, member) in members where key != AtomicRecordLayout.keyField {
            if let attribute = model.attribute(named: key, in: entityName), !attribute.isTransient {
                if case .null = member { continue }
                switch Self.attributeValue(member, type: attribute.type) {
                case .success(let value): record.attributes[key] = value
                case .failure(let problem): throw fail(.wrongValueType, key, problem.reason + " (\(attribute.name) is \(attribute.type.coreDataName))")
                }
            } else if let relationship = model.relationship(named: key, in: entityName), !relationship.isTransient {
                guard layout.isWritten(relationship) else {
                    throw fail(.malformed, key, "is kept on the other side, as \(layout.writtenSide(of: relationship)); leave it out")
                }
                record.relationships[key] = try references(member, toMany: relationship.isToMany) { reason in fail(.wrongValueType, key, reason) }
            } else {
                throw fail(.wrongValueType, key, "\(entityName) has no stored attribute or relationship of this name")
            }
        }
        return record
    }

    private func references(_ value: JSONValue, toMany: Bool, _ fail: (String) -> StoreFileError) throws(StoreFileError) -> [ReferenceObject] {
        func reference(_ value: JSONValue) throws(StoreFileError) -> ReferenceObject {
            switch value {
            case .number(let text): if let key = Int64(text) { return .integer(key) }
            case .string(let text) where !text.isEmpty: return .string(text)
            default: break
            }
            throw fail("\(value.kindName) is not a record id (an integer or a non-empty string)")
        }
        switch (value, toMany) {
        case (.null, _): return []
        case (.array(let elements), true):
            var result: [ReferenceObject] = []
            for element in elements { result.append(try reference(element)) }
            return result
        case (_, true): throw fail("is \(value.kindName), not an array of record ids")
        case (.array, false): throw fail("is an array, but a to-one holds one record id")
        case (_, false): return [try reference(value)]
        }
    }

    /// The attribute value of a JSON member: numbers and Booleans as JSON's own, everything else as the text
    /// ``AttributeText`` reads.
    static func attributeValue(_ value: JSONValue, type: AttributeType) -> Result<AttributeValue, AttributeText.Problem> {
        switch (value, type) {
        case (.number(let text), .integer16), (.number(let text), .integer32), (.number(let text), .integer64),
             (.number(let text), .double), (.number(let text), .float), (.number(let text), .decimal):
            return AttributeText.parse(text, as: type)
        case (.string(let text), .double), (.string(let text), .float):
            guard text == "Infinity" || text == "-Infinity" else { break }
            return AttributeText.parse(text, as: type)
        case (.bool(let flag), .boolean):
            return .success(.boolean(flag))
        case (.string(let text), _) where !type.isInteger && type != .boolean && type != .double && type != .float:
            return AttributeText.parse(text, as: type)
        default:
            break
        }
        return .failure(AttributeText.Problem(reason: "\(value.kindName) is not a \(type.coreDataName) value"))
    }

    // MARK: - Saving

    /// Writes metadata and every record, one record per line, then renames the file into place.
    ///
    /// - Throws: ``StoreFileError`` when the file cannot be written; the old file is then intact.
    public override func save() throws {
        var output = "{\n  \"metadata\": "
        JSONText.appendStringObject(metadata, indent: "    ", to: &output)
        output += ",\n  \"entities\": {"
        let byEntity = Dictionary(grouping: cacheNodes, by: \.objectID.entityName)
        for (entityIndex, entityName) in layout.entityNames.enumerated() {
            output += entityIndex == 0 ? "\n    " : ",\n    "
            JSONText.appendString(entityName, to: &output)
            output += ": ["
            let attributes = layout.attributes(of: entityName), relationships = layout.writtenRelationships(of: entityName)
            for (recordIndex, node) in (byEntity[entityName] ?? []).enumerated() {
                output += recordIndex == 0 ? "\n      " : ",\n      "
                var members: [(key: String, value: JSONValue)] = [(AtomicRecordLayout.keyField, Self.json(node.objectID.referenceObject))]
                for attribute in attributes {
                    members.append((attribute.name, node.attributes[attribute.name].map(Self.json) ?? .null))
                }
                for relationship in relationships {
                    let targets = node.destinations(forRelationship: relationship.name).map { Self.json($0.referenceObject) }
                    members.append((relationship.name, relationship.isToMany ? .array(targets) : targets.first ?? .null))
                }
                JSONText.append(.object(members, line: 0), to: &output)
            }
            output += (byEntity[entityName]?.isEmpty ?? true) ? "]" : "\n    ]"
        }
        output += "\n  }\n}\n"
        try AtomicFile.save(Array(output.utf8), to: fileURL)
    }

    private static func json(_ reference: ReferenceObject) -> JSONValue {
        switch reference {
        case .integer(let value): .number(String(value))
        case .string(let value): .string(value)
        }
    }

    private static func json(_ value: AttributeValue) -> JSONValue {
        switch value {
        case .boolean(let flag): .bool(flag)
        default: AttributeText.isJSONScalar(value) ? .number(AttributeText.format(value)) : .string(AttributeText.format(value))
        }
    }
}

extension JSONValue {
    var objectMembers: [(key: String, value: JSONValue)] {
        if case .object(let members, _) = self { members } else { [] }
    }

    var line: Int? {
        if case .object(_, let line) = self { line } else { nil }
    }
}
