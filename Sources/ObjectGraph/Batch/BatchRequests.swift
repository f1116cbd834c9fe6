import Foundation

/// A value given for one property of a row that a ``BatchInsertRequest`` inserts.
///
/// Literals stand for attribute values (`["name": "Ada", "age": 36, "manager": nil]`); relationships take objects by
/// ID, or by the value of the destination entity's uniqueness constraint on one attribute, so rows can point at
/// objects that were themselves imported by a key (`["department": .uniqueValue("Sales")]`).
public enum BatchValue: Sendable, Hashable {
    /// No value: NULL for an attribute, no object for a to-one, no members for a to-many.
    case null
    /// An attribute's value, converted to the attribute's type when that loses nothing (an integer for a `double`).
    case attribute(AttributeValue)
    /// A to-one relationship's object.
    case object(ManagedObjectID)
    /// A to-many relationship's objects (in order, for an ordered one).
    case objects([ManagedObjectID])
    /// A to-one relationship's object, found by the value of its entity's uniqueness constraint on one attribute —
    /// in the store, or among the rows of the same batch (a store may find a row of the batch that comes later, as
    /// the LMDB store does).
    case uniqueValue(AttributeValue)
    /// A to-many relationship's objects, each found as ``uniqueValue(_:)`` finds one.
    case uniqueValues([AttributeValue])

    /// `value` as an attribute value, or ``null`` for `nil`.
    public init(_ value: AttributeValue?) {
        self = value.map(BatchValue.attribute) ?? .null
    }
}

extension BatchValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByNilLiteral
{
    /// An integer attribute value.
    public init(integerLiteral value: Int64) { self = .attribute(.integer(value)) }
    /// A floating-point attribute value.
    public init(floatLiteral value: Double) { self = .attribute(.double(value)) }
    /// A string attribute value.
    public init(stringLiteral value: String) { self = .attribute(.string(value)) }
    /// A Boolean attribute value.
    public init(booleanLiteral value: Bool) { self = .attribute(.boolean(value)) }
    /// No value.
    public init(nilLiteral: ()) { self = .null }
}

/// The values of one row of a batch insert made by position (``BatchInsertRequest/init(entityName:properties:valuesHandler:)``):
/// position `i` holds the value of the request's `i`th property, or nothing, for a property the row leaves to its
/// default.
public struct BatchRowValues {
    /// Each position's value; `nil`: not given.
    var values: ContiguousArray<BatchValue?>
    /// The first position outside the properties that a value was set at, reported when the row is checked.
    var outsidePosition: Int?

    init(count: Int) {
        values = ContiguousArray(repeating: nil, count: count)
    }

    /// How many positions a row has: the number of properties the request lists.
    public var count: Int { values.count }

    /// The value at `position`; `nil` when none is set (or the position is outside the request's properties).
    /// Setting a value outside them makes the request stop at this row with an error naming the position.
    public subscript(position: Int) -> BatchValue? {
        get { values.indices.contains(position) ? values[position] : nil }
        set {
            guard values.indices.contains(position) else {
                if outsidePosition == nil { outsidePosition = position }
                return
            }
            values[position] = newValue
        }
    }

    /// Empties every position for the next row, keeping the storage.
    mutating func clear() {
        for index in values.indices { values[index] = nil }
        outsidePosition = nil
    }
}

/// What a batch request's result holds besides whether it ran to the end (Core Data's result types).
public enum BatchResultType: Sendable, Hashable {
    /// Only whether the request ran to the end (``BatchResult/isComplete``).
    case statusOnly
    /// How many objects the request inserted, updated or deleted (``BatchResult/count``).
    case count
    /// The IDs of the objects, in the order they were written (``BatchResult/objectIDs``): what
    /// ``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)`` needs.
    case objectIDs
}

/// What a batch request did.
public struct BatchResult: Sendable, Hashable {
    /// Whether every row was written: `false` when a progress handler stopped the request (then ``count`` rows
    /// were committed — none for a request that commits its rows together).
    public var isComplete: Bool
    /// How many objects were inserted, updated or deleted and committed (for a batch delete, those its cascade rules
    /// deleted too).
    public var count: Int
    /// The objects' IDs, for ``BatchResultType/objectIDs``; `nil` otherwise. A batch delete lists the objects it
    /// was asked to delete first, then those its cascade rules deleted with them.
    public var objectIDs: [ManagedObjectID]?

    /// Creates a result.
    public init(isComplete: Bool = true, count: Int, objectIDs: [ManagedObjectID]? = nil) {
        self.isComplete = isComplete
        self.count = count
        self.objectIDs = objectIDs
    }
}

/// How far a batch request has got, as its progress handler is told after each chunk.
public struct BatchProgress: Sendable, Hashable {
    /// Rows written so far (committed or not).
    public var written: Int
    /// Rows committed so far: the same as ``written`` when each chunk is committed, 0 until the end otherwise.
    public var committed: Int
    /// How many rows the request has in all, when that is known before it ends (an array of rows; not a handler).
    public var total: Int?

    /// Creates a progress report.
    public init(written: Int, committed: Int, total: Int?) {
        self.written = written
        self.committed = committed
        self.total = total
    }
}

/// Inserts rows of one entity straight into its store, without managed objects (Core Data's `NSBatchInsertRequest`).
///
/// Each row is a dictionary of property names and ``BatchValue``s, given as an array or made one at a time by a
/// handler, so an import of any size holds one chunk of rows at a time. Rows are checked as a save checks objects —
/// value types, required values, the model's validation rules, uniqueness constraints, that related objects exist —
/// and a bad row stops the request with an error that names its position. Attributes a row leaves out take their
/// default values. No context sees the new objects until it fetches them; see
/// ``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)`` for contexts that show results already.
///
/// By default the whole request is one transaction: all rows or none. With ``commitsEachChunk`` each chunk of
/// ``chunkSize`` rows commits on its own; an error or a stop then leaves the chunks before it in the store. A
/// whole-request insert whose rows a handler makes cannot start again if the store runs out of room (the LMDB store's
/// map fills): a large import should commit each chunk, or give the store room for all of it. One transaction can be
/// the faster way in: the LMDB store loads the index and link tables that were empty when it began as a bulk load
/// (10 000 000 rows in half the time of chunks committed one by one, into a smaller file), sorting each chunk's index
/// entries on a second thread while the next chunk's rows are written. The handler is always called on the thread
/// that runs the request.
public struct BatchInsertRequest {
    /// Where the rows come from.
    enum Source {
        case rows([[String: BatchValue]])
        case handler((inout [String: BatchValue]) -> Bool)
        /// A handler that may fail (an importer's: a line that cannot be read); its error stops the request.
        case throwingHandler((inout [String: BatchValue]) throws -> Bool)
        /// A handler that fills a new object per row (turned into a `throwingHandler` by the context that runs it).
        case objectHandler((ManagedObject) -> Bool)
        /// A handler that fills the values of a fixed list of properties by position.
        case valuesHandler(properties: [String], (inout BatchRowValues) throws -> Bool)
    }

    /// The entity whose objects the rows become.
    public var entityName: String
    /// What the result reports. Default: ``BatchResultType/statusOnly``.
    public var resultType: BatchResultType = .statusOnly
    /// How many rows are prepared and written at a time; what bounds the request's memory. Default: 10 000.
    public var chunkSize = 10_000
    /// Whether each chunk is committed on its own (`true`) rather than the whole request at once. Default: `false`.
    public var commitsEachChunk = false
    /// Called after each chunk is written (and committed, with ``commitsEachChunk``) with the progress so far;
    /// returning `false` stops the request: with ``commitsEachChunk`` the chunks committed stay, without it nothing
    /// is written. A request run in a task also stops when the task is cancelled.
    public var progressHandler: ((BatchProgress) -> Bool)?
    /// What an error calls the row at a position ("line 12 of data.csv"); `nil`: "row 12".
    package var rowName: ((Int) -> String)?
    var source: Source

    /// Inserts `objects`, one object per dictionary.
    public init(entityName: String, objects: [[String: BatchValue]]) {
        self.entityName = entityName
        self.source = .rows(objects)
    }

    /// Inserts the rows `dictionaryHandler` makes: it is called with an empty dictionary, fills it with one row, and
    /// returns `true` when there are no more rows (Core Data's convention: the dictionary of a call that returns
    /// `true` is not inserted).
    public init(entityName: String, dictionaryHandler: @escaping (inout [String: BatchValue]) -> Bool) {
        self.entityName = entityName
        self.source = .handler(dictionaryHandler)
    }

    /// Inserts the rows `managedObjectHandler` makes (Core Data's `managedObjectHandler`): it is called with a new
    /// object of the entity, sets its values (`setValue(_:forKey:)`), and returns `true` when there are no more rows
    /// (the object of that call is not inserted). The object belongs to a context of the request's own and is never
    /// saved: its stored attributes, to-one and to-many become a row, checked as any row is. It may be given related
    /// objects of that context (`object.managedObjectContext?.object(with: id)`) that are already saved.
    public init(entityName: String, managedObjectHandler: @escaping (ManagedObject) -> Bool) {
        self.entityName = entityName
        self.source = .objectHandler(managedObjectHandler)
    }

    /// Inserts the rows `valuesHandler` makes, each given as the values of `properties` by position — what a
    /// prepared `INSERT` is to SQL: the names are looked up once for the whole request, not once per row, so a
    /// handler that makes millions of rows spends nothing on dictionaries. It is called with every position empty,
    /// sets those it has values for (`row[2] = .attribute(.integer(36))`), and returns `true` when there are no more
    /// rows (the values of that call are not inserted). A position left empty takes the property's default value, as
    /// a key left out of a dictionary does; ``BatchValue/null`` sets NULL.
    ///
    /// A name that is not a stored property of the entity, or that is listed twice, stops the request before any row
    /// is made; a value set at a position outside `properties` stops it at that row.
    public init(entityName: String, properties: [String], valuesHandler: @escaping (inout BatchRowValues) -> Bool) {
        self.entityName = entityName
        self.source = .valuesHandler(properties: properties, valuesHandler)
    }

    /// Inserts the rows a values handler that may fail makes (as ``init(entityName:properties:valuesHandler:)``); its
    /// error stops the request as a bad row does.
    package init(entityName: String, properties: [String], throwingValuesHandler: @escaping (inout BatchRowValues) throws -> Bool) {
        self.entityName = entityName
        self.source = .valuesHandler(properties: properties, throwingValuesHandler)
    }

    /// Inserts the rows a handler that may fail makes (as ``init(entityName:dictionaryHandler:)``); its error stops
    /// the request as a bad row does.
    package init(entityName: String, throwingHandler: @escaping (inout [String: BatchValue]) throws -> Bool) {
        self.entityName = entityName
        self.source = .throwingHandler(throwingHandler)
    }
}

/// Changes attributes of every object of an entity that a predicate matches, in the store, without managed objects
/// (Core Data's `NSBatchUpdateRequest`).
///
/// Each new value is an expression evaluated on the object's stored values (`PredicateExpression(format: "salary *
/// 1.1")`, or `.constant(…)`); results are checked as a save checks them (type, required, validation rules,
/// uniqueness). The request is one transaction. Contexts holding the objects keep the values they loaded until they
/// merge the result (``ManagedObjectContext/mergeChanges(fromRemoteContextSave:into:)``) or refresh.
public struct BatchUpdateRequest: Sendable {
    /// The entity whose objects change.
    public var entityName: String
    /// Which objects change; `nil` for all.
    public var predicate: FetchPredicate?
    /// The new value of each attribute, by name, as an expression of the object's current values.
    public var propertiesToUpdate: [String: PredicateExpression]
    /// Whether objects of sub-entities change too. Default: `true`.
    public var includesSubentities = true
    /// What the result reports. Default: ``BatchResultType/statusOnly``.
    public var resultType: BatchResultType = .statusOnly

    /// Creates an update of the objects of `entityName` that `predicate` matches.
    public init(entityName: String, predicate: FetchPredicate? = nil, propertiesToUpdate: [String: PredicateExpression] = [:]) {
        self.entityName = entityName
        self.predicate = predicate
        self.propertiesToUpdate = propertiesToUpdate
    }
}

/// Deletes the objects a fetch request matches, or the objects with given IDs, in the store, without managed
/// objects (Core Data's `NSBatchDeleteRequest`). Delete rules are honoured: a cascade deletes the related objects
/// too, a nullify takes the deleted objects out of their inverses, and a deny stops the request when a deleted object
/// still has related objects. The request is one transaction.
public struct BatchDeleteRequest: Sendable {
    /// The objects to delete as a fetch (entity, predicate, sort, offset and limit are honoured), or `nil`.
    public var fetchRequest: FetchRequest?
    /// The objects to delete by ID, or `nil`.
    public var objectIDs: [ManagedObjectID]?
    /// What the result reports. Default: ``BatchResultType/statusOnly``.
    public var resultType: BatchResultType = .statusOnly

    /// Deletes the objects `fetchRequest` matches.
    public init(fetchRequest: FetchRequest) {
        self.fetchRequest = fetchRequest
    }

    /// Deletes the objects with these IDs (IDs of objects that are gone already are passed over).
    public init(objectIDs: [ManagedObjectID]) {
        self.objectIDs = objectIDs
    }
}
