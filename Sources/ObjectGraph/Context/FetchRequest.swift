/// What a fetch returns.
public enum FetchRequestResultType: Sendable, Hashable {
    /// Managed objects (faults unless ``FetchRequest/returnsObjectsAsFaults`` is false).
    case managedObject
    /// Object IDs.
    case managedObjectID
    /// The number of matches.
    case count
}

/// A description of objects to fetch: an entity, a predicate, an order and a window (Core Data's `NSFetchRequest`).
///
/// ```swift
/// var request = FetchRequest(entityName: "Employee")
/// request.predicate = try FetchPredicate(format: "salary > %@", 50_000)
/// request.sortDescriptors = [FetchSortDescriptor(keyPath: "name")]
/// request.fetchLimit = 20
/// ```
public struct FetchRequest: Sendable, Hashable {
    /// The entity to fetch.
    public var entityName: String
    /// Which objects match; `nil` for all.
    public var predicate: FetchPredicate?
    /// The order of the results; empty for the store's order.
    public var sortDescriptors: [FetchSortDescriptor]
    /// The most results (0: no limit).
    public var fetchLimit: Int
    /// How many matches to skip first.
    public var fetchOffset: Int
    /// What to return.
    public var resultType: FetchRequestResultType
    /// Whether objects of sub-entities match too. Default: `true`.
    public var includesSubentities: Bool
    /// Whether the context's unsaved inserts, updates and deletions are reflected. Default: `true`.
    public var includesPendingChanges: Bool
    /// Whether returned objects are faults (their values loaded on first use). Default: `true`.
    public var returnsObjectsAsFaults: Bool

    /// Creates a request for every object of an entity.
    public init(entityName: String, predicate: FetchPredicate? = nil, sortDescriptors: [FetchSortDescriptor] = []) {
        self.entityName = entityName
        self.predicate = predicate
        self.sortDescriptors = sortDescriptors
        self.fetchLimit = 0
        self.fetchOffset = 0
        self.resultType = .managedObject
        self.includesSubentities = true
        self.includesPendingChanges = true
        self.returnsObjectsAsFaults = true
    }

    /// A copy changed by `change`.
    public func with(_ change: (inout FetchRequest) -> Void) -> FetchRequest {
        var copy = self
        change(&copy)
        return copy
    }
}

extension ManagedObjectModel {
    /// A fetch request from the named template, its `$VARIABLES` filled in.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` for an unknown
    ///   template, or the template's predicate errors.
    public func fetchRequest(fromTemplateNamed name: String, substitutionVariables: [String: PredicateValue] = [:]) throws -> FetchRequest {
        guard let template = fetchRequestTemplate(named: name) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no fetch request template named \"\(name)\"")
        }
        var request = FetchRequest(entityName: template.entityName, predicate: try template.predicate(substitutionVariables: substitutionVariables))
        request.fetchLimit = template.fetchLimit
        return request
    }
}
