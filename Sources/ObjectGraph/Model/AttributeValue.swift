import Foundation

/// A value an attribute can hold, used for default values and validation bounds.
///
/// Write literals where the type is clear: `defaultValue: 0`, `defaultValue: "untitled"`, `defaultValue: true`.
/// A literal is converted to the attribute's type when the conversion loses nothing (an integer literal for a
/// `double` attribute), so `0` serves every numeric type.
public enum AttributeValue: Sendable, Hashable {
    /// An integer, for ``AttributeType/integer16``, ``AttributeType/integer32`` and ``AttributeType/integer64``.
    case integer(Int64)
    /// A 64-bit floating-point number, for ``AttributeType/double``.
    case double(Double)
    /// A 32-bit floating-point number, for ``AttributeType/float``.
    case float(Float)
    /// A decimal number, for ``AttributeType/decimal``.
    case decimal(Decimal)
    /// A string, for ``AttributeType/string``.
    case string(String)
    /// A Boolean, for ``AttributeType/boolean``.
    case boolean(Bool)
    /// A date, for ``AttributeType/date``.
    case date(Date)
    /// Bytes, for ``AttributeType/binaryData``.
    case data(Data)
    /// A UUID, for ``AttributeType/uuid``.
    case uuid(UUID)
    /// A URI, for ``AttributeType/uri``.
    case uri(URL)

    /// A short name of the value's kind, for messages.
    public var kindName: String {
        switch self {
        case .integer: "integer"
        case .double: "double"
        case .float: "float"
        case .decimal: "decimal"
        case .string: "string"
        case .boolean: "boolean"
        case .date: "date"
        case .data: "binary data"
        case .uuid: "UUID"
        case .uri: "URI"
        }
    }

    /// Whether the value is of `type` (and, for integers, within its range).
    public func fits(_ type: AttributeType) -> Bool {
        switch (self, type) {
        case (.integer(let value), _) where type.isInteger: type.integerRange!.contains(value)
        case (.double, .double), (.float, .float), (.decimal, .decimal), (.string, .string), (.boolean, .boolean),
             (.date, .date), (.data, .binaryData), (.data, .transformable), (.uuid, .uuid), (.uri, .uri), (.uri, .objectID):
            true
        default: false
        }
    }

    /// The value converted to `type` when that loses nothing, or `nil`.
    package func converted(to type: AttributeType) -> AttributeValue? {
        if fits(type) { return self }
        switch (self, type) {
        case (.integer(let value), .double): return Double(exactly: value).map(AttributeValue.double)
        case (.integer(let value), .float): return Float(exactly: value).map(AttributeValue.float)
        case (.integer(let value), .decimal): return .decimal(Decimal(value))
        case (.double(let value), .float): return Float(exactly: value).map(AttributeValue.float)
        case (.double(let value), .decimal) where value.isFinite: return Decimal(string: String(value)).map(AttributeValue.decimal)
        case (.double(let value), _) where type.isInteger:
            return Int64(exactly: value).flatMap { AttributeValue.integer($0).converted(to: type) }
        default: return nil
        }
    }

    /// Whether the value is a NaN — a number or a date that is not equal to itself, so it cannot be compared, sorted
    /// or indexed, and no store keeps one.
    package var isNaN: Bool {
        switch self {
        case .double(let value): value.isNaN
        case .float(let value): value.isNaN
        case .decimal(let value): value.isNaN
        case .date(let value): value.timeIntervalSinceReferenceDate.isNaN
        default: false
        }
    }

    /// The value as a `Double`, for comparing numeric bounds.
    var numericValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .double(let value): value
        case .float(let value): Double(value)
        case .decimal(let value): NSDecimalNumber(decimal: value).doubleValue
        case .date(let value): value.timeIntervalSinceReferenceDate
        default: nil
        }
    }
}

extension AttributeValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByStringLiteral,
    ExpressibleByBooleanLiteral
{
    /// An integer literal: `.integer`.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A floating-point literal: `.double`.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A string literal: `.string`.
    public init(stringLiteral value: String) { self = .string(value) }
    /// A Boolean literal: `.boolean`.
    public init(booleanLiteral value: Bool) { self = .boolean(value) }
}

extension AttributeValue: CustomStringConvertible {
    /// The value as text (dates as seconds since 2001-01-01, data as base64).
    public var description: String {
        switch self {
        case .integer(let value): String(value)
        case .double(let value): String(value)
        case .float(let value): String(value)
        case .decimal(let value): "\(value)"
        case .string(let value): "\"\(value)\""
        case .boolean(let value): value ? "YES" : "NO"
        case .date(let value): "date(\(value.timeIntervalSinceReferenceDate))"
        case .data(let value): "data(\(value.base64EncodedString()))"
        case .uuid(let value): value.uuidString
        case .uri(let value): value.absoluteString
        }
    }
}
