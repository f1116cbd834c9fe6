/// What a fetch returns.
public enum FetchRequestResultType: Sendable, Hashable {
    /// Managed objects (faults unless ``FetchRequest/returnsObjectsAsFaults`` is false).
    case managedObject
    /// Object IDs.
    case managedObjectID
    /// The number of matches.
    case count
    /// Dictionaries of the requested properties (see ``FetchRequest/propertiesToFetch``).
    case dictionary
}

/// One entry of a dictionary result: a key path's value, or an aggregate of it over the matching objects (or over
/// each group, with ``FetchRequest/propertiesToGroupBy``). Core Data's `NSExpressionDescription`, simplified.
public struct FetchedProperty: Sendable, Hashable {
    /// An aggregate function.
    public enum Function: String, Sendable, Hashable {
        /// The number of non-NULL values (every object, for the key path `"SELF"`).
        case count
        /// The sum.
        case sum
        /// The smallest value.
        case min
        /// The largest value.
        case max
        /// The mean.
        case average
    }

    /// The key of the value in each result dictionary.
    public var name: String
    /// The key path the value comes from (`"name"`, `"department"`, `"department.name"`).
    public var keyPath: String
    /// The aggregate applied, or `nil` for the plain value.
    public var function: Function?

    /// A key path's value, under the key path's name (or `name`). To-one relationships give object IDs.
    public static func keyPath(_ keyPath: String, as name: String? = nil) -> FetchedProperty {
        FetchedProperty(name: name ?? keyPath, keyPath: keyPath, function: nil)
    }

    /// An aggregate of a key path's values.
    public static func aggregate(_ function: Function, of keyPath: String, as name: String) -> FetchedProperty {
        FetchedProperty(name: name, keyPath: keyPath, function: function)
    }
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
    /// Whether the results' property values come from the store with them. Default: `true`.
    ///
    /// When `true`, a returned fault loads together with the faults around it: touching one loads its batch — its
    /// ``fetchBatchSize`` objects, or ``RelatedObjects/faultBatchSize`` when that is 0 — in one store call, as Core
    /// Data's row cache, filled by the fetch, lets its faults fire without a trip each to the store. Set it to
    /// `false` for a fetch whose objects' values you will not read (to delete them, or to test that they exist):
    /// the results the context did not hold loaded already are then faults, whatever ``returnsObjectsAsFaults``
    /// says, and each loads alone when touched.
    public var includesPropertyValues: Bool
    /// When above 0, returned objects load their values this many at a time: touching one loads its whole batch in
    /// one store call. ``ManagedObjectContext/fetchBatched(_:)`` also keeps only a batch or two in memory.
    public var fetchBatchSize: Int
    /// Relationship key paths (`"department"`, `"department.manager"`, `"projects"`) whose objects are loaded
    /// with the results, in one store call per step, instead of one fault per object.
    public var relationshipKeyPathsForPrefetching: [String]
    /// For ``FetchRequestResultType/dictionary``: what each dictionary holds (every attribute when empty).
    public var propertiesToFetch: [FetchedProperty]
    /// For ``FetchRequestResultType/dictionary``: key paths whose values group the results; other properties must
    /// then be aggregates.
    public var propertiesToGroupBy: [String]
    /// For grouped dictionary results: which groups to keep, evaluated on each result dictionary.
    public var havingPredicate: FetchPredicate?
    /// For ``FetchRequestResultType/dictionary``: whether equal dictionaries appear once.
    public var returnsDistinctResults: Bool

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
        self.includesPropertyValues = true
        self.fetchBatchSize = 0
        self.relationshipKeyPathsForPrefetching = []
        self.propertiesToFetch = []
        self.propertiesToGroupBy = []
        self.havingPredicate = nil
        self.returnsDistinctResults = false
    }

    /// The part of `results` that ``fetchOffset`` and ``fetchLimit`` select.
    @inlinable  // specialized where it is called: generic across modules, it went through witness tables
    package func window<Results: Collection>(_ results: Results) -> Results.SubSequence {
        Self.window(results, offset: fetchOffset, limit: fetchLimit)
    }

    /// How many sorted results the window needs (offset + limit, `Int.max` past it), or `nil` without a limit.
    @inlinable
    package var windowEnd: Int? {
        Self.windowEnd(offset: fetchOffset, limit: fetchLimit)
    }

    /// The part of `results` an offset (negative: none) and a limit (0 or less: none) select.
    @inlinable
    package static func window<Results: Collection>(_ results: Results, offset: Int, limit: Int) -> Results.SubSequence {
        let skipped = results.dropFirst(max(0, offset))
        return limit > 0 ? skipped.prefix(limit) : skipped
    }

    /// How many results the window of `offset` and `limit` needs (offset + limit, `Int.max` past it), or `nil`
    /// without a limit.
    @inlinable
    package static func windowEnd(offset: Int, limit: Int) -> Int? {
        guard limit > 0 else { return nil }
        let (end, overflow) = max(0, offset).addingReportingOverflow(limit)
        return overflow ? .max : end
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
