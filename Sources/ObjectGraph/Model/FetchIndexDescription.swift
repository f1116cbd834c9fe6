/// An index the store keeps on one or more properties of an entity, so fetches that filter or sort on them need not
/// read every row (Core Data's `NSFetchIndexDescription`).
public struct FetchIndexDescription: Sendable, Hashable {
    /// The index's name, unique within its entity.
    public var name: String
    /// The indexed properties, most significant first.
    public var elements: [FetchIndexElementDescription]
    /// Attributes whose values each entry of the index also stores, beside the elements it is ordered by — a
    /// *covering* index (an LMDBStore extension; Core Data has none): a fetch that filters or sorts on these
    /// attributes, or asks for them in a dictionary result, can be answered from the index entries without reading
    /// the rows. Attributes of fixed size only (integers, floating point, Booleans, dates, UUIDs), at most 16, none
    /// of them an element. Stores that do not keep such values ignore them.
    public var storedAttributeNames: [String]

    /// Creates an index over `elements` whose entries also store the attributes named by `storedAttributeNames`.
    public init(_ name: String, elements: [FetchIndexElementDescription], storing storedAttributeNames: [String] = []) {
        self.name = name
        self.elements = elements
        self.storedAttributeNames = storedAttributeNames
    }

    /// Creates an ascending index over the named properties whose entries also store the attributes named by
    /// `storedAttributeNames`.
    public init(_ name: String, properties: [String], storing storedAttributeNames: [String] = []) {
        self.init(name, elements: properties.map { FetchIndexElementDescription($0) }, storing: storedAttributeNames)
    }

    /// The most attributes a covering index may store.
    public static let maximumStoredAttributes = 16
}

/// One property of a ``FetchIndexDescription``.
public struct FetchIndexElementDescription: Sendable, Hashable {
    /// How an element's values are ordered in the index.
    public enum Collation: String, Sendable, Hashable, Codable {
        /// Ordered by value (Core Data's "Binary").
        case binary
        /// A spatial index (Core Data's "R-Tree"); stored as a binary index by LMDBStore.
        case rTree
        /// Strings ordered with case folded away, so `[c]` comparisons can use the index (an LMDBStore extension).
        case caseInsensitive
        /// Strings ordered with case and diacritics folded away, for `[cd]` comparisons (an LMDBStore extension).
        case caseAndDiacriticInsensitive
    }

    /// The name of the indexed attribute or to-one relationship.
    public var propertyName: String
    /// Whether values are kept in ascending order.
    public var isAscending: Bool
    /// How values are ordered.
    public var collation: Collation

    /// Creates an index element.
    public init(_ propertyName: String, ascending: Bool = true, collation: Collation = .binary) {
        self.propertyName = propertyName
        self.isAscending = ascending
        self.collation = collation
    }

    /// An ascending element.
    public static func ascending(_ propertyName: String) -> FetchIndexElementDescription {
        FetchIndexElementDescription(propertyName)
    }

    /// A descending element.
    public static func descending(_ propertyName: String) -> FetchIndexElementDescription {
        FetchIndexElementDescription(propertyName, ascending: false)
    }
}

/// A set of properties whose values, taken together, no two objects of an entity (and its sub-entities) may share.
public struct UniquenessConstraint: Sendable, Hashable {
    /// The constrained properties.
    public var propertyNames: [String]

    /// Creates a constraint over the named properties.
    public init(_ propertyNames: String...) {
        self.propertyNames = propertyNames
    }

    /// Creates a constraint over the named properties.
    public init(_ propertyNames: [String]) {
        self.propertyNames = propertyNames
    }
}
