import Foundation

/// A value a predicate compares: a constant in a predicate, a format argument, or what a key path yields when a
/// predicate is evaluated.
///
/// Booleans are numbers, as in Core Data: `.boolean(true)` equals `.integer(1)` (and hashes the same), which is
/// why a predicate printed with `1`/`0` for `YES`/`NO` parses back to an equal predicate. Other kinds of numbers
/// stay distinct here and compare as numbers when a predicate is evaluated.
public enum PredicateValue: Sendable {
    /// No value (`NULL`, `NIL`, a missing key).
    case null
    /// A Boolean.
    case boolean(Bool)
    /// An integer.
    case integer(Int64)
    /// A binary floating-point number.
    case double(Double)
    /// A decimal number.
    case decimal(Decimal)
    /// A string.
    case string(String)
    /// A date.
    case date(Date)
    /// Bytes.
    case data(Data)
    /// A UUID.
    case uuid(UUID)
    /// A URI.
    case uri(URL)
    /// An ordered collection (a literal `{…}`, an array argument, a to-many key path's values).
    case array([PredicateValue])
    /// Key/value pairs (a dictionary argument or a nested dictionary being evaluated).
    case dictionary([String: PredicateValue])
    /// An object that answers key paths: the evaluated object, or one reached through a relationship.
    case object(PredicateObject)

    /// A short name of the value's kind, for messages.
    public var kindName: String {
        switch self {
        case .null: "null"
        case .boolean: "boolean"
        case .integer: "integer"
        case .double: "double"
        case .decimal: "decimal"
        case .string: "string"
        case .date: "date"
        case .data: "data"
        case .uuid: "UUID"
        case .uri: "URI"
        case .array: "collection"
        case .dictionary: "dictionary"
        case .object: "object"
        }
    }

    /// The kind with its article, for messages: "an integer", "a string", "null".
    public var kindPhrase: String {
        if isNull { return "null" }
        return ("aeiou".contains(kindName.first!) ? "an " : "a ") + kindName
    }

    /// Whether the value is ``null``.
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The elements of a collection value (arrays, and dictionaries' values in key order), or `nil`.
    var collectionElements: [PredicateValue]? {
        switch self {
        case .array(let elements): elements
        case .dictionary(let pairs): pairs.keys.sorted().map { pairs[$0]! }
        default: nil
        }
    }
}

extension PredicateValue: Hashable {
    /// Equality by kind and value, except that a Boolean equals the integer 1 or 0.
    public static func == (lhs: PredicateValue, rhs: PredicateValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.boolean(let a), .boolean(let b)): a == b
        case (.boolean(let a), .integer(let b)), (.integer(let b), .boolean(let a)): Int64(a ? 1 : 0) == b
        case (.integer(let a), .integer(let b)): a == b
        case (.double(let a), .double(let b)): a == b || (a.isNaN && b.isNaN)
        case (.decimal(let a), .decimal(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.date(let a), .date(let b)): a == b
        case (.data(let a), .data(let b)): a == b
        case (.uuid(let a), .uuid(let b)): a == b
        case (.uri(let a), .uri(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.dictionary(let a), .dictionary(let b)): a == b
        case (.object(let a), .object(let b)): a == b
        default: false
        }
    }

    /// Hashes consistently with `==`.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .boolean(let value): hasher.combine(2); hasher.combine(Int64(value ? 1 : 0))
        case .integer(let value): hasher.combine(2); hasher.combine(value)
        case .double(let value): hasher.combine(3); if value.isNaN { hasher.combine(UInt8.max) } else { hasher.combine(value) }
        case .decimal(let value): hasher.combine(4); hasher.combine(value)
        case .string(let value): hasher.combine(5); hasher.combine(value)
        case .date(let value): hasher.combine(6); hasher.combine(value)
        case .data(let value): hasher.combine(7); hasher.combine(value)
        case .uuid(let value): hasher.combine(8); hasher.combine(value)
        case .uri(let value): hasher.combine(9); hasher.combine(value)
        case .array(let value): hasher.combine(10); hasher.combine(value)
        case .dictionary(let value): hasher.combine(11); hasher.combine(value)
        case .object(let value): hasher.combine(12); hasher.combine(value)
        }
    }
}

extension PredicateValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    /// `nil`: ``null``.
    public init(nilLiteral: ()) { self = .null }
    /// A Boolean literal.
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
    /// An integer literal.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A floating-point literal.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A string literal.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An array literal.
    public init(arrayLiteral elements: PredicateValue...) { self = .array(elements) }
    /// A dictionary literal.
    public init(dictionaryLiteral elements: (String, PredicateValue)...) {
        self = .dictionary(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// Something a predicate can read values from by key: the evaluated object, and objects reached through it.
///
/// Dictionaries of ``PredicateValue`` conform, for tests and plain data; managed objects and stored rows conform
/// in the modules that define them.
public protocol KeyValueReadable {
    /// The value for `key`, or ``PredicateValue/null`` when there is none.
    func predicateValue(forKey key: String) -> PredicateValue

    /// What makes two readable things the same object in a predicate (a managed object and a store row of the
    /// same object share their ``ManagedObjectID``), or `nil` to compare by the thing's own equality.
    var predicateIdentity: AnyHashable? { get }
}

extension KeyValueReadable {
    /// No shared identity: compare by the thing's own equality.
    public var predicateIdentity: AnyHashable? { nil }
}

extension Dictionary: KeyValueReadable where Key == String, Value == PredicateValue {
    /// The value stored under `key`, or ``PredicateValue/null``.
    public func predicateValue(forKey key: String) -> PredicateValue {
        self[key] ?? .null
    }
}

/// An object inside a ``PredicateValue``: something that answers key paths, compared by its own equality.
public struct PredicateObject: @unchecked Sendable, Hashable {
    /// The object.
    public var base: any KeyValueReadable { object }
    private let object: any KeyValueReadable & Hashable
    /// The object when it is an object ID (as in dictionary results and grouping keys): compared and hashed directly.
    private let objectID: ManagedObjectID?

    /// The wrapped object ID, when the object is one — without a dynamic cast (a lookup of 50 000 objects asks
    /// each).
    package var wrappedObjectID: ManagedObjectID? { objectID }

    /// What equality and hashing use; made only when asked, since most wrapped objects are only read from.
    private var identity: AnyHashable { object.predicateIdentity ?? AnyHashable(object) }

    /// Wraps an object; two wrappers are equal when the objects are.
    ///
    /// An object in a predicate value is read only by the thread that evaluates the predicate; it is marked
    /// `Sendable` so that values can flow through the same types as constants, and must not be shared further.
    public init<Object: KeyValueReadable & Hashable>(_ object: Object) {
        self.object = object
        self.objectID = Object.self == ManagedObjectID.self ? (object as! ManagedObjectID) : nil
    }

    /// Equality of the wrapped objects.
    public static func == (lhs: PredicateObject, rhs: PredicateObject) -> Bool {
        if let left = lhs.objectID, let right = rhs.objectID { return left == right }
        return lhs.identity == rhs.identity
    }

    /// Hashes the wrapped object (an identity's hash is its base value's, so both paths agree).
    public func hash(into hasher: inout Hasher) {
        if let objectID { hasher.combine(objectID) } else { hasher.combine(identity) }
    }
}

/// A Swift value that can stand for a `%@`, `%d`, `%f`, `%s` or `%K` format argument.
public protocol PredicateArgument {
    /// The argument as a predicate value.
    var predicateValue: PredicateValue { get }
}

extension PredicateValue: PredicateArgument {
    /// The value itself.
    public var predicateValue: PredicateValue { self }
}

extension Bool: PredicateArgument { /// `.boolean`.
    public var predicateValue: PredicateValue { .boolean(self) } }
extension Int: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension Int8: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension Int16: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension Int32: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension Int64: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(self) } }
extension UInt8: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension UInt16: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension UInt32: PredicateArgument { /// `.integer`.
    public var predicateValue: PredicateValue { .integer(Int64(self)) } }
extension UInt: PredicateArgument { /// `.integer` when it fits, else `.double`.
    public var predicateValue: PredicateValue { Int64(exactly: self).map(PredicateValue.integer) ?? .double(Double(self)) } }
extension UInt64: PredicateArgument { /// `.integer` when it fits, else `.double`.
    public var predicateValue: PredicateValue { Int64(exactly: self).map(PredicateValue.integer) ?? .double(Double(self)) } }
extension Double: PredicateArgument { /// `.double`.
    public var predicateValue: PredicateValue { .double(self) } }
extension Float: PredicateArgument { /// `.double`.
    public var predicateValue: PredicateValue { .double(Double(self)) } }
extension Decimal: PredicateArgument { /// `.decimal`.
    public var predicateValue: PredicateValue { .decimal(self) } }
extension String: PredicateArgument { /// `.string`.
    public var predicateValue: PredicateValue { .string(self) } }
extension Substring: PredicateArgument { /// `.string`.
    public var predicateValue: PredicateValue { .string(String(self)) } }
extension Date: PredicateArgument { /// `.date`.
    public var predicateValue: PredicateValue { .date(self) } }
extension Data: PredicateArgument { /// `.data`.
    public var predicateValue: PredicateValue { .data(self) } }
extension UUID: PredicateArgument { /// `.uuid`.
    public var predicateValue: PredicateValue { .uuid(self) } }
extension URL: PredicateArgument { /// `.uri`.
    public var predicateValue: PredicateValue { .uri(self) } }
extension Array: PredicateArgument where Element: PredicateArgument { /// `.array` of the elements.
    public var predicateValue: PredicateValue { .array(map(\.predicateValue)) } }
extension Set: PredicateArgument where Element: PredicateArgument { /// `.array` of the elements.
    public var predicateValue: PredicateValue { .array(map(\.predicateValue)) } }
extension Dictionary: PredicateArgument where Key == String, Value: PredicateArgument { /// `.dictionary`.
    public var predicateValue: PredicateValue { .dictionary(mapValues(\.predicateValue)) } }
extension Optional: PredicateArgument where Wrapped: PredicateArgument { /// The value, or `.null`.
    public var predicateValue: PredicateValue { map(\.predicateValue) ?? .null } }
