/// The type of an attribute's value: every attribute type Core Data has.
public enum AttributeType: String, Sendable, Hashable, CaseIterable, Codable {
    /// A 16-bit signed integer.
    case integer16
    /// A 32-bit signed integer.
    case integer32
    /// A 64-bit signed integer.
    case integer64
    /// A base-10 decimal number.
    case decimal
    /// A 64-bit binary floating-point number.
    case double
    /// A 32-bit binary floating-point number.
    case float
    /// A Unicode string.
    case string
    /// A Boolean.
    case boolean
    /// A point in time.
    case date
    /// Bytes (Core Data's "Binary Data").
    case binaryData
    /// A UUID.
    case uuid
    /// A URI.
    case uri
    /// A value of any `Codable` type, stored as bytes through a registered transformer named by
    /// ``AttributeDescription/transformerName``.
    case transformable
    /// A managed object ID, stored in its URI form.
    case objectID
    /// No type: allowed only for transient attributes (Core Data's "Undefined").
    case undefined

    /// The name Xcode writes in a model file's `attributeType`.
    public var coreDataName: String {
        switch self {
        case .integer16: "Integer 16"
        case .integer32: "Integer 32"
        case .integer64: "Integer 64"
        case .decimal: "Decimal"
        case .double: "Double"
        case .float: "Float"
        case .string: "String"
        case .boolean: "Boolean"
        case .date: "Date"
        case .binaryData: "Binary"
        case .uuid: "UUID"
        case .uri: "URI"
        case .transformable: "Transformable"
        case .objectID: "ObjectID"
        case .undefined: "Undefined"
        }
    }

    /// The type Xcode's `attributeType` name stands for, or `nil` for a name Core Data does not use.
    public init?(coreDataName: String) {
        guard let match = Self.allCases.first(where: { $0.coreDataName == coreDataName }) else { return nil }
        self = match
    }

    /// Whether values are integers.
    public var isInteger: Bool { self == .integer16 || self == .integer32 || self == .integer64 }

    /// Whether values are numbers of any kind (integers, floating point, decimal).
    public var isNumeric: Bool { isInteger || self == .double || self == .float || self == .decimal }

    /// Whether every value has the same small size (integers, floating point, Booleans, dates, UUIDs): the types a
    /// covering index may store (``FetchIndexDescription/storedAttributeNames``).
    public var hasFixedSize: Bool {
        switch self {
        case .integer16, .integer32, .integer64, .double, .float, .boolean, .date, .uuid: true
        case .decimal, .string, .binaryData, .uri, .transformable, .objectID, .undefined: false
        }
    }

    /// The range an integer type holds.
    var integerRange: ClosedRange<Int64>? {
        switch self {
        case .integer16: Int64(Int16.min)...Int64(Int16.max)
        case .integer32: Int64(Int32.min)...Int64(Int32.max)
        case .integer64: Int64.min...Int64.max
        default: nil
        }
    }
}
