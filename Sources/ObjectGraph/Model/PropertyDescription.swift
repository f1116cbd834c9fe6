/// Any property of an entity: an attribute, a relationship or a fetched property.
public enum PropertyDescription: Sendable, Hashable {
    /// An attribute.
    case attribute(AttributeDescription)
    /// A relationship.
    case relationship(RelationshipDescription)
    /// A fetched property.
    case fetchedProperty(FetchedPropertyDescription)

    /// The property's name.
    public var name: String {
        switch self {
        case .attribute(let attribute): attribute.name
        case .relationship(let relationship): relationship.name
        case .fetchedProperty(let property): property.name
        }
    }

    /// Whether the property is stored (not transient, not a fetched property).
    public var isPersistent: Bool {
        switch self {
        case .attribute(let attribute): !attribute.isTransient
        case .relationship(let relationship): !relationship.isTransient
        case .fetchedProperty: false
        }
    }
}
