/// An error from a context, a coordinator or a store: what failed, for which objects, and why.
public struct ManagedObjectContextError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The code's name.
        public let rawValue: String
        /// Creates a code from its name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The code's name.
        public var description: String { rawValue }

        /// One or more objects break the model's rules or their own validation; see ``validationFailures``.
        public static let validation = Code(rawValue: "validation")
        /// Objects changed in the store since the context read them; see ``conflicts``.
        public static let mergeConflict = Code(rawValue: "mergeConflict")
        /// The object no longer exists in its store.
        public static let objectNotFound = Code(rawValue: "objectNotFound")
        /// A value does not fit the property it was given for.
        public static let wrongValueType = Code(rawValue: "wrongValueType")
        /// An entity, property, template or store type that does not exist.
        public static let unknownName = Code(rawValue: "unknownName")
        /// A URI that is not an object URI of a store of this coordinator.
        public static let invalidURI = Code(rawValue: "invalidURI")
        /// No store holds the entity, or a request names a store that is not this coordinator's.
        public static let noStore = Code(rawValue: "noStore")
        /// A uniqueness constraint would be broken.
        public static let constraintViolation = Code(rawValue: "constraintViolation")
        /// A store cannot run the request.
        public static let unsupportedRequest = Code(rawValue: "unsupportedRequest")
        /// A store file cannot be used (missing, foreign, another model).
        public static let storeUnusable = Code(rawValue: "storeUnusable")
        /// A store cannot be migrated from the model it was written with to another: a change no mapping infers
        /// (see ``MappingModel/inferred(from:to:)``), or a migration that failed.
        public static let migrationFailed = Code(rawValue: "migrationFailed")
    }

    /// The kind of failure.
    public var code: Code
    /// What failed, in a sentence.
    public var message: String
    /// Each validation failure, for ``Code/validation``.
    public var validationFailures: [ValidationFailure]
    /// Each conflict, for ``Code/mergeConflict``.
    public var conflicts: [MergeConflict]
    /// The error underneath, if any, as it was thrown — a store's own error type (an `LMDBError` from the LMDB store,
    /// say) can be caught through it: `if case LMDBError.mapFull? = error.cause { … }`.
    public var cause: (any Error)?
    /// The error underneath, if any, described.
    public var underlying: String? { cause.map { "\($0)" } }

    /// Creates an error.
    public init(_ code: Code, message: String, validationFailures: [ValidationFailure] = [], conflicts: [MergeConflict] = [],
                underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.validationFailures = validationFailures
        self.conflicts = conflicts
        self.cause = underlying
    }

    /// The message, then each failure or conflict on its own line, then the cause.
    public var description: String {
        var text = "\(message) [\(code)]"
        for failure in validationFailures { text += "\n- \(failure)" }
        for conflict in conflicts { text += "\n- \(conflict)" }
        if let underlying { text += "\ncaused by: \(underlying)" }
        return text
    }
}

/// One rule an object breaks. Subclass validation hooks may throw it.
public struct ValidationFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The object's ID.
    public var objectID: ManagedObjectID
    /// The object's entity.
    public var entityName: String
    /// The property, if the rule is about one.
    public var propertyName: String?
    /// What is wrong.
    public var message: String

    /// Creates a failure.
    public init(objectID: ManagedObjectID, entityName: String, propertyName: String?, message: String) {
        self.objectID = objectID
        self.entityName = entityName
        self.propertyName = propertyName
        self.message = message
    }

    /// `Entity.property (id): message`.
    public var description: String {
        "\(entityName)\(propertyName.map { "." + $0 } ?? "") (\(objectID)): \(message)"
    }
}

/// An object that changed in its store after a context read it (Core Data's `NSMergeConflict`).
public struct MergeConflict: Sendable, Hashable, CustomStringConvertible {
    /// The object's ID.
    public var objectID: ManagedObjectID
    /// The version the context read.
    public var oldVersion: Int64
    /// The version in the store now (0 when the object was deleted there).
    public var newVersion: Int64
    /// The values the context read (its snapshot).
    public var cachedSnapshot: IncrementalStoreNode?
    /// The values in the store now, or `nil` when the object was deleted there.
    public var persistedSnapshot: IncrementalStoreNode?

    /// Creates a conflict.
    public init(objectID: ManagedObjectID, oldVersion: Int64, newVersion: Int64, cachedSnapshot: IncrementalStoreNode? = nil,
                persistedSnapshot: IncrementalStoreNode?) {
        self.objectID = objectID
        self.oldVersion = oldVersion
        self.newVersion = newVersion
        self.cachedSnapshot = cachedSnapshot
        self.persistedSnapshot = persistedSnapshot
    }

    /// `id: version old → new`.
    public var description: String {
        "\(objectID): read at version \(oldVersion), the store has \(persistedSnapshot == nil ? "deleted it" : "version \(newVersion)")"
    }
}

/// How a save resolves conflicts with changes made in the store meanwhile (Core Data's merge policies).
public enum MergePolicy: Sendable, Hashable {
    /// The save fails with the conflicts (Core Data's default, `NSErrorMergePolicy`).
    case error
    /// Per property: where the store changed a value, the store's value wins; elsewhere the context's changes stay.
    case mergeByPropertyStoreTrump
    /// Per property: the context's changes win; values the context did not change take the store's.
    case mergeByPropertyObjectTrump
    /// The context's objects are written whole, over the store's.
    case overwrite
    /// The context's changes to conflicting objects are dropped; they take the store's values.
    case rollback
}
