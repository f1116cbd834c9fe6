/// A named subset of a model's entities, for putting different entities in different stores.
public struct ModelConfiguration: Sendable, Hashable {
    /// The configuration's name.
    public var name: String
    /// The names of the entities it holds.
    public var entityNames: [String]

    /// Creates a configuration.
    public init(_ name: String, entities: [String]) {
        self.name = name
        self.entityNames = entities
    }
}

/// A named fetch request stored in the model: an entity and a predicate that may contain `$VARIABLES`, filled in
/// when the template is used.
public struct FetchRequestTemplate: Sendable, Hashable {
    /// The template's name.
    public var name: String
    /// The entity the request fetches.
    public var entityName: String
    /// The predicate in the predicate format language, or `nil` for every object.
    public var predicateFormat: String?
    /// The most objects the request returns (0: no limit).
    public var fetchLimit: Int

    /// Creates a template.
    public init(_ name: String, entity: String, predicate: String? = nil, fetchLimit: Int = 0) {
        self.name = name
        self.entityName = entity
        self.predicateFormat = predicate
        self.fetchLimit = fetchLimit
    }
}

/// The schema of an object graph: its entities, configurations and fetch request templates.
///
/// A model is an immutable, `Sendable` value. Building one (in code, from JSON, or from a Core Data model file)
/// checks it and reports every problem at once as a ``ModelError``; a model that exists is consistent: every
/// relationship's destination and inverse exist and point back, names are unique, indexes and constraints name
/// real properties, defaults fit their types.
///
/// ```swift
/// let model = try ManagedObjectModel {
///     EntityDescription("Department") {
///         AttributeDescription("name", .string)
///         RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true)
///     }
///     EntityDescription("Employee") {
///         AttributeDescription("name", .string).indexed()
///         RelationshipDescription("department", destination: "Department", inverse: "employees")
///     }
/// }
/// ```
public struct ManagedObjectModel: Sendable {
    /// The entities, in declaration order.
    public var entities: [EntityDescription] { storage.entities }
    /// The named configurations.
    public var configurations: [ModelConfiguration] { storage.configurations }
    /// The fetch request templates.
    public var fetchRequestTemplates: [FetchRequestTemplate] { storage.fetchRequestTemplates }
    /// The developer's version label for the model (Xcode's "model version identifier"); not part of the hash.
    public var versionIdentifier: String? { storage.versionIdentifier }
    /// What loading the model from a file passed over. Empty for models built in code or from JSON.
    public internal(set) var warnings: [ModelWarning] {
        get { storage.warnings }
        set { storage = storage.with(warnings: newValue) }
    }

    /// A SHA-256 digest of everything the model persists: it changes exactly when a store written with the old
    /// model could not be read as-is with the new one. See ``versionHash(ofEntity:)``.
    public var versionHash: [UInt8] { storage.versionHash }

    private var entityIndex: [String: Int] { storage.entityIndex }
    private var resolved: [String: ResolvedEntity] { storage.resolved }

    /// Everything a model holds is fixed when it is built, so copies share one reference: every managed object
    /// keeps its model, and copying a model costs one retain instead of one per part.
    private final class Storage: Sendable {
        let entities: [EntityDescription]
        let configurations: [ModelConfiguration]
        let fetchRequestTemplates: [FetchRequestTemplate]
        let versionIdentifier: String?
        let versionHash: [UInt8]
        let entityIndex: [String: Int]
        let resolved: [String: ResolvedEntity]
        let handles: [String: EntityHandle]
        /// The handles again, found by name through ``handleNames`` (no SipHash per lookup).
        let handleList: [EntityHandle]
        let handleNames: NameTable
        let warnings: [ModelWarning]

        init(entities: [EntityDescription], configurations: [ModelConfiguration], fetchRequestTemplates: [FetchRequestTemplate],
             versionIdentifier: String?, versionHash: [UInt8], entityIndex: [String: Int], resolved: [String: ResolvedEntity],
             handles: [String: EntityHandle]? = nil, warnings: [ModelWarning] = []) {
            self.entities = entities
            self.configurations = configurations
            self.fetchRequestTemplates = fetchRequestTemplates
            self.versionIdentifier = versionIdentifier
            self.versionHash = versionHash
            self.entityIndex = entityIndex
            self.resolved = resolved
            self.handles = handles ?? Dictionary(uniqueKeysWithValues: entities.map { entity in
                (entity.name, EntityHandle(entity, properties: resolved[entity.name]!.properties, propertyIndex: resolved[entity.name]!.propertyIndex,
                                           inverseIndex: { relationship in
                                               guard let name = relationship.inverseName, let destination = resolved[relationship.destinationEntityName],
                                                     let index = destination.propertyIndex[name], case .relationship = destination.properties[index] else { return -1 }
                                               return index
                                           }))
            })
            handleList = Array(self.handles.values)
            handleNames = NameTable(Dictionary(uniqueKeysWithValues: handleList.enumerated().map { ($1.name, $0) }))
            self.warnings = warnings
        }

        func with(warnings: [ModelWarning]) -> Storage {
            Storage(entities: entities, configurations: configurations, fetchRequestTemplates: fetchRequestTemplates,
                    versionIdentifier: versionIdentifier, versionHash: versionHash, entityIndex: entityIndex, resolved: resolved,
                    handles: handles, warnings: warnings)
        }
    }

    /// The shared, immutable runtime view of one entity: what every managed object of the entity points at (one
    /// reference, instead of a copy of its description per object), with its properties, inherited ones included,
    /// looked up by one hash of the name.
    package final class EntityHandle: Sendable {
        let description: EntityDescription
        package let name: String
        let properties: [PropertyDescription]
        /// Property names to positions in `properties` (and `slots`).
        let propertyNames: NameTable
        /// One slot per property, in `properties`' order: what the runtime's hot paths read instead of copying a
        /// property's description.
        let slots: [Slot]
        /// The slots of the properties a store keeps (not transient, not fetched), in order.
        let persistentSlots: [Slot]
        /// The slots of the persistent relationships, in order.
        package let relationshipSlots: [Slot]
        /// The slots of the attributes an object keeps as ``AttributeValue``s (every attribute but undefined-type
        /// transient ones), in their ``Slot/position`` order: the layout of ``AttributeSlots``.
        package let attributeSlots: [Slot]
        /// The slots of the to-one relationships (transient ones too), in their ``Slot/position`` order: the layout
        /// of ``ToOneSlots``.
        package let toOneSlots: [Slot]
        /// The temporary-ID namespace of the entity, made once.
        let temporaryNamespace: ObjectIDNamespace
        /// Whether some attribute or to-one is transient: without any, an object's values are exactly what a store
        /// keeps, and a save hands them over as they are.
        let hasTransientAttributes: Bool
        let hasTransientToOnes: Bool
        /// How many to-many relationships the entity has: the length of ``ToManySlots``.
        let toManyCount: Int
        /// The attribute values a new object starts with (defaults where the model has them).
        let defaultValues: AttributeSlots
        /// No attribute value, and no to-one: shared by every object until its first write copies them.
        package let emptyAttributes: AttributeSlots
        package let emptyToOne: ToOneSlots
        /// No to-many loaded.
        let emptyToMany: ToManySlots
        /// Every to-many loaded and empty: what a new object holds, shared until its first change.
        let noMembers: ToManySlots

        init(_ description: EntityDescription, properties: [PropertyDescription], propertyIndex: [String: Int],
             inverseIndex: (RelationshipDescription) -> Int = { _ in -1 }) {
            self.description = description
            self.name = description.name
            self.properties = properties
            self.propertyNames = NameTable(propertyIndex)
            var attributeCount = 0, toOneCount = 0, toManyCount = 0
            var slots: [Slot] = []
            slots.reserveCapacity(properties.count)
            for (index, property) in properties.enumerated() {
                let position: Int
                switch property {
                case .attribute(let attribute) where attribute.type != .undefined:
                    position = attributeCount
                    attributeCount += 1
                case .relationship(let relationship) where !relationship.isToMany:
                    position = toOneCount
                    toOneCount += 1
                case .relationship:
                    position = toManyCount
                    toManyCount += 1
                default:
                    position = -1
                }
                slots.append(Slot(index: index, position: position, property: property, inverseIndex: inverseIndex))
            }
            self.slots = slots
            persistentSlots = slots.filter(\.isPersistent)
            relationshipSlots = persistentSlots.filter { $0.kind == .toOne || $0.kind == .toMany }
            attributeSlots = slots.filter { $0.kind == .attribute && $0.position >= 0 }
            toOneSlots = slots.filter { $0.kind == .toOne }
            temporaryNamespace = .shared(entityName: description.name, storeIdentifier: nil)
            hasTransientAttributes = attributeSlots.contains(where: \.isTransient)
            hasTransientToOnes = toOneSlots.contains(where: \.isTransient)
            self.toManyCount = toManyCount
            emptyAttributes = AttributeSlots(repeating: nil, count: attributeCount)
            emptyToOne = ToOneSlots(repeating: nil, count: toOneCount)
            emptyToMany = ToManySlots(repeating: nil, count: toManyCount)
            noMembers = ToManySlots(repeating: [], count: toManyCount)
            defaultValues = AttributeSlots(attributeSlots.lazy.map { $0.attribute!.defaultValue })
        }

        /// A new array of NULL attribute values, for a caller about to fill it: unique from the start, so the first
        /// write does not copy the shared ``emptyAttributes`` (a copy moves each element through the generic value
        /// witness — about 700 instructions for five attributes, on every fault and fetched row).
        @inline(__always)
        package func newAttributes() -> AttributeSlots {
            Self.unique(emptyAttributes)
        }

        /// The default values in a new array, unique from the start (see ``newAttributes()``): what a new object
        /// holds, so that its first write does not copy the shared ``defaultValues`` element by element through
        /// the generic value witness.
        func newDefaultValues() -> AttributeSlots {
            var values = AttributeSlots()
            values.reserveCapacity(defaultValues.count)
            for value in defaultValues { values.append(value) }
            return values
        }

        /// A new array of no to-ones, unique from the start (see ``newAttributes()``).
        @inline(__always)
        package func newToOne() -> ToOneSlots {
            Self.unique(emptyToOne)
        }

        /// A new array of no loaded to-many, unique from the start (see ``newAttributes()``).
        @inline(__always)
        func newToMany() -> ToManySlots {
            Self.unique(emptyToMany)
        }

        /// No membership change in any to-many position, in an array of its own.
        func newToManyChanges() -> ContiguousArray<ToManyChange?> {
            Self.nils(toManyCount)
        }

        /// No recorded members in any to-many position, in an array of its own.
        func newPendingToMany() -> PendingToManySlots {
            Self.nils(toManyCount)
        }

        /// `count` `nil`s in a new array. Grown by `reserveCapacity` and `append`, which the compiler specializes
        /// here; `init(repeating:count:)` calls the standard library's unspecialized allocation, which looks the
        /// storage type's metadata up on every call (about 1 000 instructions).
        @inline(__always)
        private static func nils<Element>(_ count: Int) -> ContiguousArray<Element?> {
            var values = ContiguousArray<Element?>()
            values.reserveCapacity(count)
            for _ in 0..<count { values.append(nil) }
            return values
        }

        /// The slot, in this entity, of the inverse of the relationship in `slot` (a relationship whose destination
        /// is this entity or one of its ancestors); `nil` when it has none — or when this entity is not such a
        /// destination (an object a damaged store pointed at wrongly), so that no other property is touched.
        @inline(__always)
        func inverse(of slot: Slot) -> Slot? {
            guard UInt(bitPattern: slot.inverseIndex) < UInt(slots.count) else { return nil }
            let inverse = slots[slot.inverseIndex]
            guard inverse.kind == .toOne || inverse.kind == .toMany, inverse.name == slot.inverseName else { return nil }
            return inverse
        }

        /// An array of `empty.count` `nil`s that shares no storage (`empty` itself when it has none).
        @inline(__always)
        private static func unique<Element>(_ empty: ContiguousArray<Element?>) -> ContiguousArray<Element?> {
            empty.isEmpty ? empty : nils(empty.count)
        }

        /// The slot of the property with this name, inherited or its own.
        package func slot(named name: String) -> Slot? {
            propertyNames.position(of: name).map { slots[$0] }
        }

        /// The entity's property with this name, inherited or its own.
        func property(named name: String) -> PropertyDescription? {
            propertyNames.position(of: name).map { properties[$0] }
        }

        /// The entity's attribute with this name, inherited or its own.
        func attribute(named name: String) -> AttributeDescription? {
            if case .attribute(let attribute) = property(named: name) { attribute } else { nil }
        }

        /// The entity's relationship with this name, inherited or its own.
        func relationship(named name: String) -> RelationshipDescription? {
            if case .relationship(let relationship) = property(named: name) { relationship } else { nil }
        }
    }

    /// One property of an entity as the runtime uses it: its description and the facts hot paths ask for, read
    /// through one reference.
    package final class Slot: Sendable {
        package enum Kind: Sendable { case attribute, toOne, toMany, fetched }

        /// The property's position among its entity's properties (inherited first).
        let index: Int
        /// The property's position among the properties of its kind that an object keeps in an array: attributes
        /// but undefined-type ones (``AttributeSlots``), to-ones (``ToOneSlots``), to-manys; -1 for the others.
        package let position: Int
        package let name: String
        package let kind: Kind
        /// The attribute's description (attributes only).
        let attribute: AttributeDescription?
        /// The relationship's description (relationships only).
        package let relationship: RelationshipDescription?
        /// The ``index`` of the relationship's inverse among the destination entity's properties, resolved once
        /// (-1 without an inverse). Sub-entities list inherited properties first, in their parent's order, so the
        /// index holds for every object the relationship may point at.
        let inverseIndex: Int
        /// The name of the relationship's inverse (`nil` without one).
        let inverseName: String?
        /// The relationship's destination entity (`nil` for other properties).
        let destinationName: String?
        /// The attribute's type (`.undefined` for other properties).
        package let type: AttributeType
        let transformerName: String?
        package let isTransient: Bool
        package let isPersistent: Bool
        let isOptional: Bool
        /// Whether a typed key reads and writes the attribute without `Any`: a stored attribute whose values are
        /// not transformed (not transformable, not an object ID).
        let convertsDirectly: Bool
        /// Whether validation has more to check than presence: an attribute's value or length rules, a to-many's
        /// counts.
        let hasRules: Bool

        init(index: Int, position: Int, property: PropertyDescription, inverseIndex: (RelationshipDescription) -> Int) {
            self.index = index
            self.position = position
            name = property.name
            isPersistent = property.isPersistent
            switch property {
            case .attribute(let attribute):
                kind = .attribute
                self.attribute = attribute
                relationship = nil
                self.inverseIndex = -1
                inverseName = nil
                destinationName = nil
                type = attribute.type
                transformerName = attribute.transformerName
                isTransient = attribute.isTransient
                isOptional = attribute.isOptional
                hasRules = !attribute.validation.isEmpty
            case .relationship(let relationship):
                kind = relationship.isToMany ? .toMany : .toOne
                attribute = nil
                self.relationship = relationship
                self.inverseIndex = inverseIndex(relationship)
                inverseName = relationship.inverseName
                destinationName = relationship.destinationEntityName
                type = .undefined
                transformerName = nil
                isTransient = relationship.isTransient
                isOptional = relationship.isOptional
                hasRules = relationship.isToMany && (relationship.minimumCount > 0 || relationship.maximumCount > 0 || !relationship.isOptional)
            case .fetchedProperty:
                kind = .fetched
                attribute = nil
                relationship = nil
                self.inverseIndex = -1
                inverseName = nil
                destinationName = nil
                type = .undefined
                transformerName = nil
                isTransient = true
                isOptional = true
                hasRules = false
            }
            convertsDirectly = kind == .attribute && position >= 0 && transformerName == nil && type != .transformable && type != .objectID
        }
    }

    /// The runtime view of the entity with this name; for a name the model lacks, a view of an empty entity.
    package func handle(forEntityNamed name: String) -> EntityHandle {
        existingHandle(forEntityNamed: name) ?? EntityHandle(EntityDescription(name), properties: [], propertyIndex: [:])
    }

    /// The runtime view of the entity with this name, if the model has it.
    package func existingHandle(forEntityNamed name: String) -> EntityHandle? {
        storage.handleNames.position(of: name).map { storage.handleList[$0] }
    }

    private var storage: Storage

    struct ResolvedEntity: Sendable {
        var ancestry: [String]                     // root first, the entity itself last
        var properties: [PropertyDescription]      // inherited first
        var propertyIndex: [String: Int]
        var directSubentities: [String]
        var indexes: [FetchIndexDescription]       // inherited first, implied ones after each entity's own
        var constraints: [UniquenessConstraint]    // inherited first
        var versionHash: [UInt8]
    }

    /// Builds a model from its parts, checking it.
    ///
    /// - Throws: ``ModelError`` listing every problem found.
    public init(
        entities: [EntityDescription], configurations: [ModelConfiguration] = [],
        fetchRequestTemplates: [FetchRequestTemplate] = [], versionIdentifier: String? = nil
    ) throws(ModelError) {
        let problems = Self.problems(entities: entities, configurations: configurations, templates: fetchRequestTemplates)
        guard problems.isEmpty else { throw ModelError(problems: problems) }
        var index: [String: Int] = [:]
        for (position, entity) in entities.enumerated() { index[entity.name] = position }
        let resolved = Self.resolve(entities, index: index)
        storage = Storage(entities: entities, configurations: configurations, fetchRequestTemplates: fetchRequestTemplates,
                          versionIdentifier: versionIdentifier,
                          versionHash: Self.modelHash(entities.map { ($0.name, resolved[$0.name]!.versionHash) }),
                          entityIndex: index, resolved: resolved)
    }

    /// Builds a model from the entities listed in `content`, checking it.
    ///
    /// - Throws: ``ModelError`` listing every problem found.
    public init(
        configurations: [ModelConfiguration] = [], fetchRequestTemplates: [FetchRequestTemplate] = [],
        versionIdentifier: String? = nil, @ModelContentBuilder _ content: () -> [EntityDescription]
    ) throws(ModelError) {
        try self.init(entities: content(), configurations: configurations, fetchRequestTemplates: fetchRequestTemplates,
                      versionIdentifier: versionIdentifier)
    }

    private static func resolve(_ entities: [EntityDescription], index: [String: Int]) -> [String: ResolvedEntity] {
        var resolved: [String: ResolvedEntity] = [:]
        var children: [String: [String]] = [:]
        for entity in entities { if let parent = entity.parentName { children[parent, default: []].append(entity.name) } }
        for entity in entities {
            var ancestry = [entity.name]
            var current = entity
            while let parent = current.parentName, let position = index[parent] {
                current = entities[position]
                ancestry.insert(current.name, at: 0)
            }
            let properties = ancestry.flatMap { entities[index[$0]!].properties }
            var propertyIndex: [String: Int] = [:]
            for (position, property) in properties.enumerated() { propertyIndex[property.name] = position }
            let lineage = ancestry.map { entities[index[$0]!] }
            let indexes = lineage.flatMap { owner -> [FetchIndexDescription] in
                let declared = Set(owner.fetchIndexes.map(\.name))
                let implied = owner.attributes.filter { $0.isIndexed && !declared.contains("\($0.name)Index") }
                    .map { FetchIndexDescription("\($0.name)Index", properties: [$0.name]) }
                return owner.fetchIndexes + implied
            }
            resolved[entity.name] = ResolvedEntity(
                ancestry: ancestry, properties: properties, propertyIndex: propertyIndex,
                directSubentities: children[entity.name] ?? [], indexes: indexes,
                constraints: lineage.flatMap(\.uniquenessConstraints), versionHash: [])
        }
        for entity in entities {
            resolved[entity.name]!.versionHash = entityHash(entity, resolved: resolved[entity.name]!)
        }
        return resolved
    }
}

// MARK: - Looking things up

extension ManagedObjectModel {
    /// The entity with this name.
    public func entity(named name: String) -> EntityDescription? {
        entityIndex[name].map { entities[$0] }
    }

    /// The entities' names, in declaration order.
    public var entityNames: [String] { entities.map(\.name) }

    /// Every property of the entity, inherited ones first, in declaration order.
    public func allProperties(of entityName: String) -> [PropertyDescription] {
        resolved[entityName]?.properties ?? []
    }

    /// The entity's property with this name, inherited or its own.
    public func property(named name: String, in entityName: String) -> PropertyDescription? {
        guard let entity = resolved[entityName], let position = entity.propertyIndex[name] else { return nil }
        return entity.properties[position]
    }

    /// The entity's attribute with this name, inherited or its own.
    public func attribute(named name: String, in entityName: String) -> AttributeDescription? {
        if case .attribute(let attribute) = property(named: name, in: entityName) { attribute } else { nil }
    }

    /// The entity's relationship with this name, inherited or its own.
    public func relationship(named name: String, in entityName: String) -> RelationshipDescription? {
        if case .relationship(let relationship) = property(named: name, in: entityName) { relationship } else { nil }
    }

    /// The inverse of a relationship, if it has one.
    public func inverse(of relationship: RelationshipDescription) -> RelationshipDescription? {
        relationship.inverseName.flatMap { self.relationship(named: $0, in: relationship.destinationEntityName) }
    }

    /// The entity's ancestors and itself, root first.
    public func ancestry(of entityName: String) -> [String] {
        resolved[entityName]?.ancestry ?? []
    }

    /// The entity at the top of the entity's inheritance tree (the entity itself when it has no parent).
    public func rootEntityName(of entityName: String) -> String? {
        resolved[entityName]?.ancestry.first
    }

    /// The entities that name this one as their parent.
    public func directSubentities(of entityName: String) -> [String] {
        resolved[entityName]?.directSubentities ?? []
    }

    /// The entity and every entity below it, depth first.
    public func entityAndDescendants(of entityName: String) -> [String] {
        guard resolved[entityName] != nil else { return [] }
        return [entityName] + directSubentities(of: entityName).flatMap { entityAndDescendants(of: $0) }
    }

    /// Whether `entityName` is `ancestorName` or inherits from it.
    public func entity(_ entityName: String, isKindOf ancestorName: String) -> Bool {
        resolved[entityName]?.ancestry.contains(ancestorName) ?? false
    }

    /// The fetch indexes that apply to the entity: its ancestors' and its own, plus a one-element index named
    /// `"<attribute>Index"` for every attribute marked ``AttributeDescription/isIndexed``.
    public func fetchIndexes(of entityName: String) -> [FetchIndexDescription] {
        resolved[entityName]?.indexes ?? []
    }

    /// The uniqueness constraints that apply to the entity: its ancestors' and its own.
    public func uniquenessConstraints(of entityName: String) -> [UniquenessConstraint] {
        resolved[entityName]?.constraints ?? []
    }

    /// The names of the entities in a configuration; every entity for `nil` or an unknown name.
    public func entityNames(inConfiguration name: String?) -> [String] {
        guard let name, let configuration = configurations.first(where: { $0.name == name }) else { return entityNames }
        return configuration.entityNames
    }

    /// The fetch request template with this name.
    public func fetchRequestTemplate(named name: String) -> FetchRequestTemplate? {
        fetchRequestTemplates.first { $0.name == name }
    }

    /// A SHA-256 digest of what the entity persists. See `Docs/MODEL-JSON.md` ("Version hashes") for what goes in.
    public func versionHash(ofEntity entityName: String) -> [UInt8]? {
        resolved[entityName]?.versionHash
    }
}

extension ManagedObjectModel: Hashable {
    /// Two models are equal when their entities, configurations, templates and version identifier are; loading
    /// warnings do not count.
    public static func == (lhs: ManagedObjectModel, rhs: ManagedObjectModel) -> Bool {
        lhs.entities == rhs.entities && lhs.configurations == rhs.configurations
            && lhs.fetchRequestTemplates == rhs.fetchRequestTemplates && lhs.versionIdentifier == rhs.versionIdentifier
    }

    /// Hashes what equality compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(entities)
        hasher.combine(configurations)
        hasher.combine(fetchRequestTemplates)
        hasher.combine(versionIdentifier)
    }
}
