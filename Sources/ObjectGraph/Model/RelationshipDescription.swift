/// What happens to related objects when an object is deleted.
public enum DeleteRule: String, Sendable, Hashable, CaseIterable, Codable {
    /// The related objects' inverse relationship to the deleted object is cleared.
    case nullify
    /// The related objects are deleted too.
    case cascade
    /// The delete is refused while any related object remains.
    case deny
    /// Nothing is done: the related objects keep pointing at the deleted object (the app must fix them).
    case noAction

    /// The name Xcode writes in a model file's `deletionRule`.
    public var coreDataName: String {
        switch self {
        case .nullify: "Nullify"
        case .cascade: "Cascade"
        case .deny: "Deny"
        case .noAction: "No Action"
        }
    }
}

/// A relationship from one entity to another: to-one, to-many or ordered to-many.
///
/// ```swift
/// RelationshipDescription("department", destination: "Department", inverse: "employees")
/// RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true, deleteRule: .cascade)
/// ```
public struct RelationshipDescription: Sendable, Hashable {
    /// The relationship's name, unique among its entity's properties.
    public var name: String
    /// The name of the entity at the other end.
    public var destinationEntityName: String
    /// The name of the relationship on the destination that points back, if any.
    public var inverseName: String?
    /// Whether the relationship holds many objects.
    public var isToMany: Bool
    /// Whether a to-many relationship keeps its objects in order.
    public var isOrdered: Bool
    /// Whether an object may be saved with no related object (to-one) — to-many counts use ``minimumCount``.
    public var isOptional: Bool
    /// Whether the relationship lives only in memory.
    public var isTransient: Bool
    /// The fewest related objects a to-many relationship may hold (0: no rule).
    public var minimumCount: Int
    /// The most related objects a to-many relationship may hold (0: no limit).
    public var maximumCount: Int
    /// What deleting an object does to the objects it relates to.
    public var deleteRule: DeleteRule
    /// Whether the relationship is marked as indexed (Xcode's `indexed="YES"`). Kept so the model round-trips; it
    /// changes nothing stored, because a store that looks relationships up from either side keeps them indexed
    /// anyway (the LMDB store keeps a table from destination to owners for every to-one, and link tables both ways
    /// for every to-many), so it is not part of the version hash.
    public var isIndexed: Bool
    /// Free-form information for the app; not persisted and not part of the version hash.
    public var userInfo: [String: String]
    /// The relationship's name in the previous model version, when it was renamed.
    public var renamingIdentifier: String?
    /// A string mixed into the version hash to force a new version.
    public var versionHashModifier: String?

    /// Creates a relationship.
    public init(
        _ name: String, destination: String, inverse: String? = nil, toMany: Bool = false, ordered: Bool = false,
        isOptional: Bool = true, isTransient: Bool = false, minimumCount: Int = 0, maximumCount: Int = 0,
        deleteRule: DeleteRule = .nullify, isIndexed: Bool = false, userInfo: [String: String] = [:],
        renamingIdentifier: String? = nil, versionHashModifier: String? = nil
    ) {
        self.name = name
        self.destinationEntityName = destination
        self.inverseName = inverse
        self.isToMany = toMany || ordered
        self.isOrdered = ordered
        self.isOptional = isOptional
        self.isTransient = isTransient
        self.minimumCount = minimumCount
        self.maximumCount = toMany || ordered ? maximumCount : 1
        self.deleteRule = deleteRule
        self.isIndexed = isIndexed
        self.userInfo = userInfo
        self.renamingIdentifier = renamingIdentifier
        self.versionHashModifier = versionHashModifier
    }

    /// A copy changed by `change`.
    public func with(_ change: (inout RelationshipDescription) -> Void) -> RelationshipDescription {
        var copy = self
        change(&copy)
        return copy
    }
}

/// A fetched property: a weak, one-way relationship evaluated as a fetch request (Core Data's
/// `NSFetchedPropertyDescription`). It is never stored.
public struct FetchedPropertyDescription: Sendable, Hashable {
    /// The property's name.
    public var name: String
    /// The entity the fetch returns.
    public var entityName: String
    /// The fetch's predicate in the predicate format language; `$FETCH_SOURCE` names the owning object.
    public var predicateFormat: String?
    /// Free-form information for the app.
    public var userInfo: [String: String]

    /// Creates a fetched property.
    public init(_ name: String, entity: String, predicate: String? = nil, userInfo: [String: String] = [:]) {
        self.name = name
        self.entityName = entity
        self.predicateFormat = predicate
        self.userInfo = userInfo
    }
}
