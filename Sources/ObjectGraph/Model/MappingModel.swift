/// How the data of a store written with one model version becomes data of another: for each entity of the new
/// model, the entity of the old one its rows come from, and where each of its persistent properties takes its value
/// (Core Data's `NSMappingModel`, as lightweight migration infers it).
///
/// ``inferred(from:to:)`` applies Core Data's lightweight rules: entities and properties are matched by name, or by
/// the new one's ``EntityDescription/renamingIdentifier`` (``AttributeDescription/renamingIdentifier``,
/// ``RelationshipDescription/renamingIdentifier``) naming the old one; what is new starts empty (an attribute at its
/// default value); what is gone is dropped. A change it cannot carry out on the data alone is an error naming the
/// entity and property.
///
/// `description` lists the changes, one entity a line, for a dry run or an error message:
///
/// ```text
/// Employee: + level (default 1); age Integer 16 → Integer 32; fullName ← name; − nickname
/// Badge: new entity
/// Temp: removed, with its rows
/// ```
public struct MappingModel: Sendable, Hashable, CustomStringConvertible {
    /// One mapping for each entity of the destination model, in its declaration order.
    public var entityMappings: [EntityMapping]
    /// The source model's entities no destination entity takes its rows from: their rows are dropped.
    public var removedEntityNames: [String]

    /// Where one destination entity's rows come from.
    public struct EntityMapping: Sendable, Hashable {
        /// The destination entity.
        public var destinationEntityName: String
        /// The source entity whose rows become this entity's, or `nil` for an entity new in the destination model.
        public var sourceEntityName: String?
        /// Each persistent attribute of the destination entity (inherited ones included), in its order.
        public var attributes: [AttributeMapping]
        /// Each persistent relationship of the destination entity (inherited ones included), in its order.
        public var relationships: [RelationshipMapping]
        /// The source entity's persistent properties nothing in the destination takes a value from.
        public var removedPropertyNames: [String]
        /// Whether the entity's index tables are built again: its fetch indexes or uniqueness constraints differ,
        /// the entity was renamed (its tables are named after it), or a value they keep changes (an indexed
        /// attribute widened, or given its default where it was NULL).
        public var changesIndexes: Bool
        /// The uniqueness constraints the destination adds (by their property names): existing rows are checked
        /// against them.
        public var addedConstraints: [[String]]

        /// Whether the entity's rows come over unchanged: same entity, same properties, nothing to build again.
        public var isIdentity: Bool {
            sourceEntityName == destinationEntityName && removedPropertyNames.isEmpty && !changesIndexes && addedConstraints.isEmpty
                && attributes.allSatisfy { $0.source == .copied(from: $0.destinationName) && $0.nullReplacement == nil }
                && relationships.allSatisfy { $0.source == .copied(from: $0.destinationName) }
        }
    }

    /// Where one destination attribute takes its value.
    public struct AttributeMapping: Sendable, Hashable {
        /// Where the value comes from.
        public enum Source: Sendable, Hashable {
            /// The source attribute of this name, unchanged.
            case copied(from: String)
            /// The source attribute of this name, of the narrower type `type`, converted without loss to `to`
            /// (Integer 16 → 32 → 64, Float → Double).
            case widened(from: String, type: AttributeType, to: AttributeType)
            /// No source attribute: every existing row takes this value (`nil`: none).
            case defaultValue(AttributeValue?)
            /// A custom mapping's closure gives the value, row by row (``CustomEntityMapping``).
            case computed
        }

        /// The destination attribute.
        public var destinationName: String
        /// Where its value comes from.
        public var source: Source
        /// The value a row whose source value is NULL takes, for an attribute that became required (its default).
        public var nullReplacement: AttributeValue?
    }

    /// Where one destination relationship takes its destinations.
    public struct RelationshipMapping: Sendable, Hashable {
        /// Where the destinations come from.
        public enum Source: Sendable, Hashable {
            /// The source relationship of this name (to-one or to-many, ordered or not, as each side declares).
            case copied(from: String)
            /// No source relationship: it starts empty.
            case empty
        }

        /// The destination relationship.
        public var destinationName: String
        /// Where its destinations come from.
        public var source: Source
    }

    /// Whether nothing changes: every entity maps to itself with the same properties and none is removed.
    public var isIdentity: Bool { removedEntityNames.isEmpty && entityMappings.allSatisfy(\.isIdentity) }

    public var description: String {
        var lines: [String] = []
        for mapping in entityMappings {
            guard let source = mapping.sourceEntityName else {
                lines.append("\(mapping.destinationEntityName): new entity")
                continue
            }
            guard !mapping.isIdentity else { continue }
            var changes: [String] = []
            for attribute in mapping.attributes {
                switch attribute.source {
                case .copied(let name) where name != attribute.destinationName: changes.append("\(attribute.destinationName) ← \(name)")
                case .copied: break
                case .widened(let name, let type, let wider):
                    changes.append("\(attribute.destinationName)\(name == attribute.destinationName ? "" : " ← \(name)") \(type.coreDataName) → \(wider.coreDataName)")
                case .defaultValue(let value): changes.append("+ \(attribute.destinationName)\(value.map { " (default \($0))" } ?? "")")
                case .computed: changes.append("\(attribute.destinationName) computed")
                }
                if let replacement = attribute.nullReplacement { changes.append("\(attribute.destinationName) required (NULL becomes \(replacement))") }
            }
            for relationship in mapping.relationships {
                switch relationship.source {
                case .copied(let name) where name != relationship.destinationName: changes.append("\(relationship.destinationName) ← \(name)")
                case .copied: break
                case .empty: changes.append("+ \(relationship.destinationName)")
                }
            }
            changes += mapping.removedPropertyNames.map { "− \($0)" }
            if mapping.changesIndexes { changes.append("indexes rebuilt") }
            changes += mapping.addedConstraints.map { "unique (\($0.joined(separator: ", "))) checked" }
            lines.append("\(mapping.destinationEntityName)\(source == mapping.destinationEntityName ? "" : " ← \(source)"): \(changes.joined(separator: "; "))")
        }
        lines += removedEntityNames.map { "\($0): removed, with its rows" }
        return lines.isEmpty ? "no change" : lines.joined(separator: "\n")
    }
}

extension MappingModel {
    /// The mapping lightweight migration infers from `source` to `destination` (Core Data's
    /// `inferredMappingModel(forSourceModel:destinationModel:)`).
    ///
    /// `computing` names, by destination entity, the attributes a custom mapping's closure computes
    /// (``CustomEntityMapping/computedAttributeNames``): each maps as ``AttributeMapping/Source/computed``, whatever
    /// its type or the source's, so a change the rules cannot carry out is carried out by the closure.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/migrationFailed`` naming the
    ///   entity and property of the first change the data alone cannot carry out: a new required attribute without
    ///   a default value, an attribute made required without one, a type change other than a widening, an attribute
    ///   that became a relationship or the reverse, a new required to-one, a to-many made to-one, a relationship
    ///   whose destination is no longer what its old destination became, two entities (or properties) renamed
    ///   from one, or two entity hierarchies merged under one root (their rows' keys would collide, as Core Data
    ///   refuses too).
    public static func inferred(from source: ManagedObjectModel, to destination: ManagedObjectModel,
                                computing: [String: Set<String>] = [:]) throws(ManagedObjectContextError) -> MappingModel {
        func refuse(_ message: String) -> ManagedObjectContextError {
            ManagedObjectContextError(.migrationFailed, message: "cannot infer a mapping: \(message)")
        }
        // Which source entity each destination entity takes its rows from.
        var sourceOf: [String: String] = [:]
        var taken: [String: String] = [:]
        for entity in destination.entities {
            guard let name = [entity.renamingIdentifier, entity.name].compactMap({ $0 }).first(where: { source.entity(named: $0) != nil }) else { continue }
            if let other = taken[name] {
                throw refuse("\(entity.name) and \(other) both take the rows of \(name)")
            }
            taken[name] = entity.name
            sourceOf[entity.name] = name
        }
        // Rows keep their keys, which are unique within an old hierarchy only: one new hierarchy takes rows from one.
        var rootSources: [String: (root: String, entity: String)] = [:]
        for (entity, from) in sourceOf.sorted(by: { $0.key < $1.key }) {
            let root = destination.ancestry(of: entity).first ?? entity, oldRoot = source.ancestry(of: from).first ?? from
            if let other = rootSources[root], other.root != oldRoot {
                throw refuse("\(entity) and \(other.entity) share the root \(root) but take rows of the separate hierarchies of \(from) and \(other.root)")
            }
            rootSources[root] = (oldRoot, entity)
        }
        var mappings: [EntityMapping] = []
        for entity in destination.entities {
            guard let from = sourceOf[entity.name] else {
                mappings.append(EntityMapping(destinationEntityName: entity.name, sourceEntityName: nil, attributes: [], relationships: [],
                                              removedPropertyNames: [], changesIndexes: false, addedConstraints: []))
                continue
            }
            mappings.append(try entityMapping(entity.name, from: from, source: source, destination: destination, sourceOf: sourceOf,
                                              computed: computing[entity.name] ?? [], refuse))
        }
        let removed = source.entities.map(\.name).filter { taken[$0] == nil }
        return MappingModel(entityMappings: mappings, removedEntityNames: removed)
    }

    private static func entityMapping(_ name: String, from sourceName: String, source: ManagedObjectModel, destination: ManagedObjectModel,
                                      sourceOf: [String: String], computed: Set<String>,
                                      _ refuse: (String) -> ManagedObjectContextError) throws(ManagedObjectContextError) -> EntityMapping {
        let old = source.allProperties(of: sourceName).filter(\.isPersistent)
        let oldByName = Dictionary(old.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var used: [String: String] = [:]
        var attributes: [AttributeMapping] = [], relationships: [RelationshipMapping] = []
        for property in destination.allProperties(of: name) where property.isPersistent {
            let renaming: String? = switch property {
            case .attribute(let attribute): attribute.renamingIdentifier
            case .relationship(let relationship): relationship.renamingIdentifier
            case .fetchedProperty: nil
            }
            let match = [renaming, property.name].compactMap { $0 }.first { oldByName[$0] != nil }.flatMap { oldByName[$0] }
            if let match {
                if let other = used[match.name] { throw refuse("\(name).\(property.name) and \(name).\(other) both take the value of \(sourceName).\(match.name)") }
                used[match.name] = property.name
            }
            if case .attribute(let attribute) = property, computed.contains(attribute.name) {
                attributes.append(AttributeMapping(destinationName: attribute.name, source: .computed))
                continue
            }
            switch (property, match) {
            case (.attribute(let attribute), nil):
                guard attribute.isOptional || attribute.defaultValue != nil else {
                    throw refuse("\(name).\(attribute.name) is new and required, with no default value for the rows already stored")
                }
                attributes.append(AttributeMapping(destinationName: attribute.name, source: .defaultValue(attribute.defaultValue)))
            case (.attribute(let attribute), .attribute(let was)?):
                let mapped: AttributeMapping.Source
                if attribute.type == was.type {
                    mapped = .copied(from: was.name)
                } else if widens(from: was.type, to: attribute.type) {
                    mapped = .widened(from: was.name, type: was.type, to: attribute.type)
                } else {
                    throw refuse("\(name).\(attribute.name) changes type from \(was.type.coreDataName) (\(sourceName).\(was.name)) to \(attribute.type.coreDataName), which lightweight migration cannot convert; give a mapping")
                }
                var replacement: AttributeValue?
                if was.isOptional && !attribute.isOptional {
                    guard let value = attribute.defaultValue else {
                        throw refuse("\(name).\(attribute.name) became required with no default value for the rows that hold none")
                    }
                    replacement = value
                }
                attributes.append(AttributeMapping(destinationName: attribute.name, source: mapped, nullReplacement: replacement))
            case (.relationship(let relationship), nil):
                guard relationship.isToMany || relationship.isOptional else {
                    throw refuse("\(name).\(relationship.name) is a new required to-one, and the rows already stored point at nothing")
                }
                relationships.append(RelationshipMapping(destinationName: relationship.name, source: .empty))
            case (.relationship(let relationship), .relationship(let was)?):
                guard sourceOf[relationship.destinationEntityName] == was.destinationEntityName else {
                    throw refuse("\(name).\(relationship.name) points at \(relationship.destinationEntityName), which does not take the rows of \(sourceName).\(was.name)'s destination \(was.destinationEntityName)")
                }
                guard relationship.isToMany || !was.isToMany else {
                    throw refuse("\(name).\(relationship.name) becomes a to-one from the to-many \(sourceName).\(was.name), which would keep one of many destinations")
                }
                relationships.append(RelationshipMapping(destinationName: relationship.name, source: .copied(from: was.name)))
            case (.fetchedProperty, _):
                continue
            case (_, let was?):
                // An attribute matched with a relationship, or the reverse.
                let kind = if case .attribute = property { "an attribute" } else { "a relationship" }
                throw refuse("\(name).\(property.name) is \(kind), but \(sourceName).\(was.name), whose value it would take, is not")
            }
        }
        let removed = old.map(\.name).filter { used[$0] == nil }
        let indexes = { (model: ManagedObjectModel, entity: String) in Set(model.fetchIndexes(of: entity)) }
        let constraints = { (model: ManagedObjectModel, entity: String) in model.uniquenessConstraints(of: entity).map(\.propertyNames) }
        let oldConstraints = Set(constraints(source, sourceName).map { names in names.map { used[$0] ?? $0 } })
        let newConstraints = constraints(destination, name)
        // The attributes the destination's index tables keep: a value of theirs that changes changes their entries.
        let kept = Set(indexes(destination, name).flatMap { $0.elements.map(\.propertyName) + $0.storedAttributeNames } + newConstraints.joined())
        let valuesChange = attributes.contains { kept.contains($0.destinationName) && ($0.nullReplacement != nil || $0.source != .copied(from: $0.destinationName)) }
        return EntityMapping(destinationEntityName: name, sourceEntityName: sourceName, attributes: attributes, relationships: relationships,
                             removedPropertyNames: removed,
                             changesIndexes: indexes(source, sourceName) != indexes(destination, name) || oldConstraints != Set(newConstraints)
                                || sourceName != name || valuesChange,
                             addedConstraints: newConstraints.filter { !oldConstraints.contains($0) })
    }

    /// Whether a value of `old` converts to `new` without loss: Integer 16 → 32 → 64, Float → Double.
    private static func widens(from old: AttributeType, to new: AttributeType) -> Bool {
        switch (old, new) {
        case (.integer16, .integer32), (.integer16, .integer64), (.integer32, .integer64), (.float, .double): true
        default: false
        }
    }
}

extension ManagedObjectModel {
    /// Whether a store whose metadata is `metadata` was written with this model, so it opens without a migration
    /// (Core Data's `isConfiguration(withName:compatibleWithStoreMetadata:)`): its
    /// ``PersistentStoreMetadataKey/modelVersionHash`` is this model's ``versionHashString``. A store keeps the hash
    /// of the whole model, so a configuration's name must name one of the model's configurations (or be `nil`) and
    /// does not narrow the comparison.
    public func isConfiguration(withName name: String?, compatibleWithStoreMetadata metadata: [String: String]) -> Bool {
        guard name == nil || configurations.contains(where: { $0.name == name }) else { return false }
        return metadata[PersistentStoreMetadataKey.modelVersionHash] == versionHashString
    }
}
