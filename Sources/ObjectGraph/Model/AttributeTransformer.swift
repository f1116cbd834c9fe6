import Foundation

/// Turns the values of a ``AttributeType/transformable`` attribute into bytes to store and back, by way of
/// `Codable` (JSON), under a name that attributes refer to with ``AttributeDescription/transformerName``.
///
/// ```swift
/// AttributeTransformer.register(AttributeTransformer(name: "Tags", valueType: [String].self))
/// let bytes = try AttributeTransformer.named("Tags")!.data(from: ["a", "b"])
/// ```
public struct AttributeTransformer: Sendable {
    /// The name attributes use to refer to the transformer.
    public let name: String
    /// The name of the value type, for messages.
    public let valueTypeName: String
    private let encode: @Sendable (Any) throws -> Data
    private let decode: @Sendable (Data) throws -> any Sendable

    /// Creates a transformer that stores values of `valueType` as JSON.
    public init<Value: Codable & Sendable>(name: String, valueType: Value.Type) {
        self.name = name
        self.valueTypeName = String(describing: valueType)
        let typeName = valueTypeName
        self.encode = { value in
            guard let typed = value as? Value else {
                throw AttributeTransformerError(transformer: name, message: "expected a \(typeName), got a \(type(of: value))")
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return try encoder.encode(typed)
        }
        self.decode = { data in
            do {
                return try JSONDecoder().decode(Value.self, from: data)
            } catch {
                throw AttributeTransformerError(transformer: name, message: "the stored bytes are not a \(typeName): \(error)")
            }
        }
    }

    /// The bytes to store for `value`.
    ///
    /// - Throws: ``AttributeTransformerError`` when `value` is not of the transformer's type or cannot be encoded.
    public func data(from value: Any) throws -> Data {
        try encode(value)
    }

    /// The value stored as `data`.
    ///
    /// - Throws: ``AttributeTransformerError`` when the bytes do not decode as the transformer's type.
    public func value(from data: Data) throws -> any Sendable {
        try decode(data)
    }

    private static let registry = LockedRegistry()

    /// Registers `transformer` under its name, replacing any transformer registered under that name before.
    public static func register(_ transformer: AttributeTransformer) {
        registry.set(transformer)
    }

    /// The transformer registered under `name`, if any.
    public static func named(_ name: String) -> AttributeTransformer? {
        registry.get(name)
    }

    private final class LockedRegistry: @unchecked Sendable {
        private let lock = NSLock()
        private var transformers: [String: AttributeTransformer] = [:]

        func set(_ transformer: AttributeTransformer) {
            lock.withLock { transformers[transformer.name] = transformer }
        }

        func get(_ name: String) -> AttributeTransformer? {
            lock.withLock { transformers[name] }
        }
    }
}

/// A value that a transformer could not turn into bytes, or bytes it could not turn back into a value.
public struct AttributeTransformerError: Error, Sendable, CustomStringConvertible {
    /// The transformer's name.
    public var transformer: String
    /// What went wrong.
    public var message: String

    /// "transformer "name": message".
    public var description: String { "transformer \"\(transformer)\": \(message)" }
}
