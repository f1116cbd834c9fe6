/// Everything wrong with a model, reported together when it is built or loaded.
public struct ModelError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Each problem found, in the order they were found.
    public var problems: [ModelProblem]
    /// For diagnosis, when a model file was read but its model did not check: the entities as they were read (empty
    /// when the file itself could not be read or parsed).
    public var parsedEntities: [EntityDescription]
    /// What reading the model file passed over or converted before the check failed (see
    /// ``ManagedObjectModel/warnings``).
    public var warnings: [ModelWarning]

    /// Creates an error from its problems, and what was read before they were found.
    public init(problems: [ModelProblem], parsedEntities: [EntityDescription] = [], warnings: [ModelWarning] = []) {
        self.problems = problems
        self.parsedEntities = parsedEntities
        self.warnings = warnings
    }

    /// The error with `file` on every problem that names no file, and what was read before the problems were found.
    func located(in file: String?, parsedEntities: [EntityDescription], warnings: [ModelWarning] = []) -> ModelError {
        ModelError(problems: problems.map { problem in
            var problem = problem
            problem.file = problem.file ?? file
            return problem
        }, parsedEntities: parsedEntities, warnings: warnings)
    }

    /// One line per problem.
    public var description: String {
        let noun = problems.count == 1 ? "problem" : "problems"
        return "The model has \(problems.count) \(noun):\n" + problems.map { "- \($0)" }.joined(separator: "\n")
    }
}

/// One problem in a model: what is wrong, and the entity, property or file it concerns.
public struct ModelProblem: Sendable, Hashable, CustomStringConvertible {
    /// The kind of problem, for code that reacts to specific ones.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The code's name.
        public let rawValue: String
        /// Creates a code from its name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The code's name.
        public var description: String { rawValue }

        /// Two entities share a name.
        public static let duplicateEntity = Code(rawValue: "duplicateEntity")
        /// An entity names a parent entity that does not exist.
        public static let unknownParent = Code(rawValue: "unknownParent")
        /// An entity inherits from itself, directly or through others.
        public static let inheritanceCycle = Code(rawValue: "inheritanceCycle")
        /// Two properties of an entity (inherited ones included) share a name.
        public static let duplicateProperty = Code(rawValue: "duplicateProperty")
        /// A property's name is taken by `ManagedObject`'s own API.
        public static let reservedPropertyName = Code(rawValue: "reservedPropertyName")
        /// A relationship's destination entity does not exist.
        public static let unknownDestination = Code(rawValue: "unknownDestination")
        /// A relationship's inverse does not exist on its destination.
        public static let unknownInverse = Code(rawValue: "unknownInverse")
        /// A relationship's inverse does not point back at it.
        public static let inverseMismatch = Code(rawValue: "inverseMismatch")
        /// A fetch index names an unknown or to-many property, or has no elements.
        public static let invalidIndex = Code(rawValue: "invalidIndex")
        /// A uniqueness constraint names an unknown or to-many property, or none.
        public static let invalidConstraint = Code(rawValue: "invalidConstraint")
        /// A default value is not of its attribute's type.
        public static let defaultValueType = Code(rawValue: "defaultValueType")
        /// A validation rule does not fit its attribute (a bound of the wrong type, minimum above maximum, a bad
        /// regular expression).
        public static let invalidValidationRule = Code(rawValue: "invalidValidationRule")
        /// A relationship's minimum count is above its maximum, or negative.
        public static let invalidCount = Code(rawValue: "invalidCount")
        /// A stored attribute has no type (only transient attributes may be undefined).
        public static let missingType = Code(rawValue: "missingType")
        /// A configuration or fetch request template names an entity that does not exist.
        public static let unknownEntity = Code(rawValue: "unknownEntity")
        /// A fetch request template's or fetched property's predicate does not parse.
        public static let invalidPredicate = Code(rawValue: "invalidPredicate")
        /// A name is empty.
        public static let emptyName = Code(rawValue: "emptyName")
        /// A model file cannot be read.
        public static let unreadableFile = Code(rawValue: "unreadableFile")
        /// A model file is not well-formed, or not the format it should be.
        public static let malformedFile = Code(rawValue: "malformedFile")
        /// A model file is a compiled `.mom`/`.momd`, which only Apple's Core Data reads.
        public static let compiledModel = Code(rawValue: "compiledModel")
    }

    /// The kind of problem.
    public var code: Code
    /// The entity concerned, if any.
    public var entity: String?
    /// The property (or constraint, configuration, template) concerned, if any.
    public var property: String?
    /// The fetch index concerned, for ``Code/invalidIndex``.
    public var index: String?
    /// The file concerned, if any.
    public var file: String?
    /// What is wrong, in a sentence.
    public var message: String

    /// Creates a problem.
    public init(_ code: Code, entity: String? = nil, property: String? = nil, index: String? = nil, file: String? = nil,
                message: String) {
        self.code = code
        self.entity = entity
        self.property = property
        self.index = index
        self.file = file
        self.message = message
    }

    /// `Entity.property: message [code]`, with the file when there is one.
    public var description: String {
        var place = [entity, property].compactMap { $0 }.joined(separator: ".")
        if let file { place = place.isEmpty ? file : "\(file): \(place)" }
        return (place.isEmpty ? "" : place + ": ") + message + " [\(code)]"
    }
}

/// Something in a model file that was understood but not used, converted, or not understood at all.
public struct ModelWarning: Sendable, Hashable, CustomStringConvertible {
    /// The file the warning concerns, with the line when known (`contents:42`).
    public var file: String?
    /// The entity concerned, if any.
    public var entity: String?
    /// The property concerned, if any.
    public var property: String?
    /// What was passed over or converted, in a sentence.
    public var message: String

    /// Creates a warning.
    public init(file: String? = nil, entity: String? = nil, property: String? = nil, message: String) {
        self.file = file
        self.entity = entity
        self.property = property
        self.message = message
    }

    /// `file: message`.
    public var description: String { (file.map { $0 + ": " } ?? "") + message }
}
