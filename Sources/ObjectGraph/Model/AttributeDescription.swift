/// An attribute of an entity: a named, typed value stored with each object.
///
/// ```swift
/// AttributeDescription("name", .string, validation: .init(minLength: 1, maxLength: 100))
/// AttributeDescription("age", .integer16, isOptional: true, defaultValue: 0)
/// ```
public struct AttributeDescription: Sendable, Hashable {
    /// The attribute's name, unique among its entity's properties (inherited ones included).
    public var name: String
    /// The type of the attribute's value.
    public var type: AttributeType
    /// Whether an object may be saved without a value for it.
    public var isOptional: Bool
    /// Whether the value lives only in memory and is never stored.
    public var isTransient: Bool
    /// The value a newly inserted object starts with.
    public var defaultValue: AttributeValue?
    /// Rules a value must meet for its object to be saved.
    public var validation: AttributeValidation
    /// For ``AttributeType/transformable``: the name of the registered transformer that turns values into bytes.
    public var transformerName: String?
    /// For ``AttributeType/transformable``: the name of the value's type, for code generation and messages.
    public var valueTypeName: String?
    /// Whether the attribute is indexed on its own (the older `indexed="YES"` form of a fetch index).
    public var isIndexed: Bool
    /// Whether Core Data may keep a large binary value in a file beside the store (Xcode's "Allows External
    /// Storage"). Kept so the model round-trips; the LMDB store keeps every value in its row, where LMDB puts a
    /// large one on overflow pages of its own.
    public var allowsExternalBinaryDataStorage: Bool
    /// Whether the value is kept in persistent history when its object is deleted (Xcode's "Preserve After
    /// Deletion", Core Data's tombstone). Kept so the model round-trips; the LMDB store's change log records which
    /// objects a save deleted, not their values.
    public var preservesValueInHistoryOnDeletion: Bool
    /// Free-form information for the app; not persisted and not part of the version hash.
    public var userInfo: [String: String]
    /// The attribute's name in the previous model version, when it was renamed (Core Data's renaming identifier).
    public var renamingIdentifier: String?
    /// A string mixed into the version hash to force a new version when nothing else changed.
    public var versionHashModifier: String?

    /// Creates an attribute. A `defaultValue` literal is converted to `type` when that loses nothing.
    public init(
        _ name: String, _ type: AttributeType, isOptional: Bool = false, isTransient: Bool = false,
        defaultValue: AttributeValue? = nil, validation: AttributeValidation = AttributeValidation(),
        transformerName: String? = nil, valueTypeName: String? = nil, isIndexed: Bool = false,
        allowsExternalBinaryDataStorage: Bool = false, preservesValueInHistoryOnDeletion: Bool = false,
        userInfo: [String: String] = [:], renamingIdentifier: String? = nil, versionHashModifier: String? = nil
    ) {
        self.name = name
        self.type = type
        self.isOptional = isOptional
        self.isTransient = isTransient
        self.defaultValue = defaultValue.map { $0.converted(to: type) ?? $0 }
        self.validation = validation
        self.transformerName = transformerName
        self.valueTypeName = valueTypeName
        self.isIndexed = isIndexed
        self.allowsExternalBinaryDataStorage = allowsExternalBinaryDataStorage
        self.preservesValueInHistoryOnDeletion = preservesValueInHistoryOnDeletion
        self.userInfo = userInfo
        self.renamingIdentifier = renamingIdentifier
        self.versionHashModifier = versionHashModifier
    }

    /// A copy that is optional.
    public func optional() -> AttributeDescription { with { $0.isOptional = true } }
    /// A copy that is transient.
    public func transient() -> AttributeDescription { with { $0.isTransient = true } }
    /// A copy that is indexed on its own.
    public func indexed() -> AttributeDescription { with { $0.isIndexed = true } }
    /// A copy with `value` as its default.
    public func defaultValue(_ value: AttributeValue) -> AttributeDescription {
        with { $0.defaultValue = value.converted(to: type) ?? value }
    }
    /// A copy with `validation` as its rules.
    public func validation(_ validation: AttributeValidation) -> AttributeDescription { with { $0.validation = validation } }

    /// A copy changed by `change`.
    public func with(_ change: (inout AttributeDescription) -> Void) -> AttributeDescription {
        var copy = self
        change(&copy)
        return copy
    }
}

/// The rules an attribute's value must meet for its object to be saved.
public struct AttributeValidation: Sendable, Hashable {
    /// The smallest value allowed (numbers and dates).
    public var minimumValue: AttributeValue?
    /// The largest value allowed (numbers and dates).
    public var maximumValue: AttributeValue?
    /// The fewest characters (strings) or bytes (binary data) allowed.
    public var minimumLength: Int?
    /// The most characters (strings) or bytes (binary data) allowed.
    public var maximumLength: Int?
    /// A regular expression that the whole string must match.
    public var pattern: String?

    /// Creates validation rules; every rule is off unless given.
    public init(
        minimumValue: AttributeValue? = nil, maximumValue: AttributeValue? = nil, minimumLength: Int? = nil,
        maximumLength: Int? = nil, pattern: String? = nil
    ) {
        self.minimumValue = minimumValue
        self.maximumValue = maximumValue
        self.minimumLength = minimumLength
        self.maximumLength = maximumLength
        self.pattern = pattern
    }

    /// Whether no rule is set.
    public var isEmpty: Bool { self == AttributeValidation() }
}
