/// An entity: a kind of object, with its properties, its place in an inheritance tree, its indexes and its
/// uniqueness constraints.
///
/// Build one in code with a result builder, then hand it to a ``ManagedObjectModel``, which checks it and works out
/// what it inherits:
///
/// ```swift
/// EntityDescription("Employee", parent: "Person") {
///     AttributeDescription("salary", .decimal, isOptional: true)
///     RelationshipDescription("department", destination: "Department", inverse: "employees")
///     FetchIndexDescription("bySalary", elements: [.descending("salary")])
///     UniquenessConstraint("badgeNumber")
/// }
/// ```
public struct EntityDescription: Sendable, Hashable {
    /// The entity's name, unique in its model.
    public var name: String
    /// The name of the class (or subclass) that represents the entity's objects, if not the generic one.
    public var className: String?
    /// The name of the entity this one inherits from.
    public var parentName: String?
    /// Whether the entity has no objects of its own, only objects of its sub-entities.
    public var isAbstract: Bool
    /// The entity's own properties (not the inherited ones), in declaration order.
    public var properties: [PropertyDescription]
    /// The entity's own fetch indexes.
    public var fetchIndexes: [FetchIndexDescription]
    /// The entity's own uniqueness constraints.
    public var uniquenessConstraints: [UniquenessConstraint]
    /// Free-form information for the app; not persisted and not part of the version hash.
    public var userInfo: [String: String]
    /// The entity's name in the previous model version, when it was renamed.
    public var renamingIdentifier: String?
    /// A string mixed into the version hash to force a new version.
    public var versionHashModifier: String?

    /// Creates an entity from its parts.
    public init(
        _ name: String, parent: String? = nil, isAbstract: Bool = false, className: String? = nil,
        properties: [PropertyDescription] = [], fetchIndexes: [FetchIndexDescription] = [],
        uniquenessConstraints: [UniquenessConstraint] = [], userInfo: [String: String] = [:],
        renamingIdentifier: String? = nil, versionHashModifier: String? = nil
    ) {
        self.name = name
        self.parentName = parent
        self.isAbstract = isAbstract
        self.className = className
        self.properties = properties
        self.fetchIndexes = fetchIndexes
        self.uniquenessConstraints = uniquenessConstraints
        self.userInfo = userInfo
        self.renamingIdentifier = renamingIdentifier
        self.versionHashModifier = versionHashModifier
    }

    /// Creates an entity whose properties, indexes and constraints are listed in `content`.
    public init(
        _ name: String, parent: String? = nil, isAbstract: Bool = false, className: String? = nil,
        userInfo: [String: String] = [:], @EntityContentBuilder _ content: () -> [EntityContent]
    ) {
        self.init(name, parent: parent, isAbstract: isAbstract, className: className, userInfo: userInfo)
        for part in content() {
            switch part {
            case .property(let property): properties.append(property)
            case .fetchIndex(let index): fetchIndexes.append(index)
            case .uniquenessConstraint(let constraint): uniquenessConstraints.append(constraint)
            }
        }
    }

    /// The entity's own attributes.
    public var attributes: [AttributeDescription] {
        properties.compactMap { if case .attribute(let attribute) = $0 { attribute } else { nil } }
    }

    /// The entity's own relationships.
    public var relationships: [RelationshipDescription] {
        properties.compactMap { if case .relationship(let relationship) = $0 { relationship } else { nil } }
    }

    /// The entity's own fetched properties.
    public var fetchedProperties: [FetchedPropertyDescription] {
        properties.compactMap { if case .fetchedProperty(let property) = $0 { property } else { nil } }
    }

    /// The entity's own property with this name.
    public func property(named name: String) -> PropertyDescription? {
        properties.first { $0.name == name }
    }
}

/// One part of an entity listed in an ``EntityDescription`` builder.
public enum EntityContent: Sendable, Hashable {
    /// A property.
    case property(PropertyDescription)
    /// A fetch index.
    case fetchIndex(FetchIndexDescription)
    /// A uniqueness constraint.
    case uniquenessConstraint(UniquenessConstraint)
}

/// Collects the attributes, relationships, fetched properties, indexes and constraints of an entity.
@resultBuilder
public enum EntityContentBuilder {
    /// An attribute.
    public static func buildExpression(_ attribute: AttributeDescription) -> [EntityContent] {
        [.property(.attribute(attribute))]
    }
    /// A relationship.
    public static func buildExpression(_ relationship: RelationshipDescription) -> [EntityContent] {
        [.property(.relationship(relationship))]
    }
    /// A fetched property.
    public static func buildExpression(_ property: FetchedPropertyDescription) -> [EntityContent] {
        [.property(.fetchedProperty(property))]
    }
    /// A fetch index.
    public static func buildExpression(_ index: FetchIndexDescription) -> [EntityContent] {
        [.fetchIndex(index)]
    }
    /// A uniqueness constraint.
    public static func buildExpression(_ constraint: UniquenessConstraint) -> [EntityContent] {
        [.uniquenessConstraint(constraint)]
    }
    /// Several parts.
    public static func buildBlock(_ parts: [EntityContent]...) -> [EntityContent] { parts.flatMap { $0 } }
    /// Parts listed only when a condition holds.
    public static func buildOptional(_ parts: [EntityContent]?) -> [EntityContent] { parts ?? [] }
    /// Parts of the branch taken.
    public static func buildEither(first parts: [EntityContent]) -> [EntityContent] { parts }
    /// Parts of the branch taken.
    public static func buildEither(second parts: [EntityContent]) -> [EntityContent] { parts }
    /// Parts from a loop.
    public static func buildArray(_ parts: [[EntityContent]]) -> [EntityContent] { parts.flatMap { $0 } }
}

/// Collects the entities of a model.
@resultBuilder
public enum ModelContentBuilder {
    /// An entity.
    public static func buildExpression(_ entity: EntityDescription) -> [EntityDescription] { [entity] }
    /// Several entities.
    public static func buildBlock(_ parts: [EntityDescription]...) -> [EntityDescription] { parts.flatMap { $0 } }
    /// Entities listed only when a condition holds.
    public static func buildOptional(_ parts: [EntityDescription]?) -> [EntityDescription] { parts ?? [] }
    /// Entities of the branch taken.
    public static func buildEither(first parts: [EntityDescription]) -> [EntityDescription] { parts }
    /// Entities of the branch taken.
    public static func buildEither(second parts: [EntityDescription]) -> [EntityDescription] { parts }
    /// Entities from a loop.
    public static func buildArray(_ parts: [[EntityDescription]]) -> [EntityDescription] { parts.flatMap { $0 } }
}
