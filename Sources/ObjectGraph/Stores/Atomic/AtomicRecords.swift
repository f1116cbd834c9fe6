import Foundation

/// A record as a file holds it, before its references are resolved.
struct FileRecord {
    var entityName: String
    var reference: ReferenceObject
    /// The file the record is in, when the store has several.
    var url: URL?
    /// The line the record starts on, for messages.
    var line: Int?
    var attributes: [String: AttributeValue] = [:]
    /// Written relationships by name: the referenced records' keys (a to-one: at most one).
    var relationships: [String: [ReferenceObject]] = [:]

    var label: String { "\(entityName) \(AtomicRecordLayout.text(of: reference))" }
}

/// What the JSON and CSV stores write for each entity, and how records become cache nodes.
///
/// Every persistent attribute is written. Of a relationship and its inverse only one side is written, so a file
/// cannot contradict itself; the other side is derived when the file is loaded:
/// - an ordered to-many is always written (its order lives nowhere else);
/// - otherwise a to-one is written and its inverse to-many derived;
/// - of two to-manys or two to-ones, the side whose `Entity.relationship` name sorts first is written;
/// - a relationship without an inverse is written.
struct AtomicRecordLayout {
    let model: ManagedObjectModel
    let entityNames: [String]

    /// The field that holds a record's key: `@id`, which no property can be named (property names are identifiers).
    static let keyField = "@id"

    /// The layout of a store holding the configuration's concrete entities.
    init(model: ManagedObjectModel, configuration: String?) {
        self.model = model
        entityNames = model.entityNames(inConfiguration: configuration).filter { model.entity(named: $0)?.isAbstract == false }
    }

    /// The persistent attributes of an entity, inherited ones first.
    func attributes(of entityName: String) -> [AttributeDescription] {
        model.allProperties(of: entityName).compactMap { property in
            if case .attribute(let attribute) = property, !attribute.isTransient { attribute } else { nil }
        }
    }

    /// The relationships a record of the entity holds in the file.
    func writtenRelationships(of entityName: String) -> [RelationshipDescription] {
        model.allProperties(of: entityName).compactMap { property in
            if case .relationship(let relationship) = property, !relationship.isTransient, isWritten(relationship) { relationship } else { nil }
        }
    }

    /// Whether the relationship is written (rather than derived from its inverse).
    func isWritten(_ relationship: RelationshipDescription) -> Bool {
        guard let inverse = model.inverse(of: relationship), !inverse.isTransient else { return true }
        if relationship.isToMany && relationship.isOrdered { return true }
        if inverse.isToMany && inverse.isOrdered { return false }
        if relationship.isToMany != inverse.isToMany { return !relationship.isToMany }
        // Same kind on both sides: the side named first is written. A relationship that is its own inverse is written.
        let mine = (inverse.destinationEntityName, relationship.name), theirs = (relationship.destinationEntityName, inverse.name)
        return mine <= theirs
    }

    /// The field a derived relationship comes from, for messages: `Entity.relationship`.
    func writtenSide(of relationship: RelationshipDescription) -> String {
        guard let inverse = model.inverse(of: relationship) else { return relationship.name }
        return "\(relationship.destinationEntityName).\(inverse.name)"
    }

    static func text(of reference: ReferenceObject) -> String {
        switch reference {
        case .integer(let value): String(value)
        case .string(let value): value
        }
    }

    // MARK: - Loading

    /// Cache nodes for the records: references resolved (within the destination's root entity), derived
    /// relationships filled in.
    ///
    /// - Throws: ``StoreFileError`` for a key used twice, a reference to a record the file does not hold or of the
    ///   wrong entity, or two records claiming the same to-one.
    func makeNodes(_ records: [FileRecord], store: AtomicStore, url: URL) throws(StoreFileError) -> [AtomicStoreCacheNode] {
        struct Key: Hashable { let root: String; let reference: ReferenceObject }
        var nodes: [AtomicStoreCacheNode] = []
        var index: [Key: Int] = [:]
        for (position, record) in records.enumerated() {
            let key = Key(root: model.rootEntityName(of: record.entityName) ?? record.entityName, reference: record.reference)
            if let other = index[key] {
                throw StoreFileError(.malformed, url: record.url ?? url, line: record.line, record: record.label, field: Self.keyField,
                                     reason: "the key is also used by the record \(records[other].label)\(records[other].line.map { " on line \($0)" } ?? "")")
            }
            index[key] = position
            nodes.append(AtomicStoreCacheNode(objectID: store.objectID(forEntityName: record.entityName, withReferenceObject: record.reference),
                                              attributes: record.attributes))
        }
        for (position, record) in records.enumerated() {
            let node = nodes[position]
            for (name, references) in record.relationships {
                guard let relationship = model.relationship(named: name, in: record.entityName) else { continue }
                let root = model.rootEntityName(of: relationship.destinationEntityName) ?? relationship.destinationEntityName
                var members: [ManagedObjectID] = []
                for reference in references {
                    guard let target = index[Key(root: root, reference: reference)] else {
                        throw StoreFileError(.danglingReference, url: record.url ?? url, line: record.line, record: record.label, field: name,
                                             reason: "refers to \(relationship.destinationEntityName) \(Self.text(of: reference)), which the store does not hold")
                    }
                    guard model.entity(records[target].entityName, isKindOf: relationship.destinationEntityName) else {
                        throw StoreFileError(.wrongValueType, url: record.url ?? url, line: record.line, record: record.label, field: name,
                                             reason: "refers to \(records[target].label), which is not a \(relationship.destinationEntityName)")
                    }
                    members.append(nodes[target].objectID)
                }
                if relationship.isToMany {
                    node.setToMany(members, forRelationship: name)
                } else if let member = members.first {
                    node.setDestination(member, forRelationship: name)
                }
                guard let inverse = model.inverse(of: relationship), !isWritten(inverse) else { continue }
                for member in members {
                    let target = index[Key(root: root, reference: member.referenceObject)]!
                    if inverse.isToMany {
                        nodes[target].appendDestination(node.objectID, forRelationship: inverse.name)
                    } else if let existing = nodes[target].toOne[inverse.name], existing != node.objectID {
                        throw StoreFileError(.malformed, url: record.url ?? url, line: record.line, record: record.label, field: name,
                                             reason: "refers to \(records[target].label), whose \(inverse.name) is already \(existing.entityName) \(Self.text(of: existing.referenceObject)) (a to-one holds one object)")
                    } else {
                        nodes[target].setDestination(node.objectID, forRelationship: inverse.name)
                    }
                }
            }
        }
        return nodes
    }
}
