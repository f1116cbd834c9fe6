import Foundation

extension ManagedObject {
    /// The value of a property: attributes as Swift values (`String`, `Int16`/`Int32`/`Int64`, `Double`, `Float`,
    /// `Decimal`, `Bool`, `Date`, `Data`, `UUID`, `URL`, ``ManagedObjectID``, or a transformable's value); a to-one
    /// relationship as its ``ManagedObject``; a to-many as `[ManagedObject]` (in order, for ordered ones); a fetched
    /// property as the `[ManagedObject]` its fetch finds (see ``fetchedObjects(forKey:)``).
    /// `nil` for NULL, an empty to-one, an unknown key, or a fetched property whose fetch fails.
    public func value(forKey key: String) -> Any? {
        guard let slot = handle.slot(named: key) else { return nil }
        return value(of: slot)
    }

    /// The value of the property in `slot` (see ``value(forKey:)``).
    func value(of slot: ManagedObjectModel.Slot) -> Any? {
        switch slot.kind {
        case .attribute:
            if slot.type == .undefined { return transientObjects[slot.name] }
            if !slot.isTransient { willAccessValues() }
            return attributeValue(slot).map { Self.swiftValue($0, type: slot.type, transformerName: slot.transformerName) }
        case .toOne:
            willAccessValues()
            return toOneID(slot).flatMap { managedObjectContext?.object(with: $0) }
        case .toMany:
            return Array(relatedObjects(forKey: slot.name))
        case .fetched:
            return try? fetchedObjects(forKey: slot.name)
        }
    }

    /// Sets a property after checking the value fits it: an attribute's type (integers within range, numbers
    /// converted when nothing is lost), a relationship's destination entity. Setting either side of a
    /// relationship updates its inverse.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` naming the
    ///   entity, property, expected type and the value's type, or ``ManagedObjectContextError/Code/unknownName``;
    ///   nothing is changed then.
    public func setValue(_ value: Any?, forKey key: String) throws(ManagedObjectContextError) {
        guard let slot = handle.slot(named: key) else {
            throw ManagedObjectContextError(.unknownName, message: "the entity \(entityName) has no property \"\(key)\"")
        }
        try setValue(value, in: slot)
    }

    /// Sets the property in `slot` (see ``setValue(_:forKey:)``).
    func setValue(_ value: Any?, in slot: ManagedObjectModel.Slot) throws(ManagedObjectContextError) {
        let key = slot.name
        switch slot.kind {
        case .attribute:
            if slot.type == .undefined {
                transientObjects[key] = value
                return
            }
            let converted: AttributeValue?
            if let value {
                guard let attributeValue = Self.attributeValue(value, type: slot.type, transformerName: slot.transformerName) else {
                    if let range = slot.type.integerRange, let number = value as? any BinaryInteger {
                        throw ManagedObjectContextError(.wrongValueType,
                            message: "\(entityName).\(key) is \(slot.type.coreDataName), and \(number) is outside its range \(range.lowerBound)...\(range.upperBound) (object \(objectID))")
                    }
                    throw wrongType(key, expected: slot.type.coreDataName, value: value)
                }
                converted = attributeValue
            } else {
                converted = nil
            }
            setAttribute(converted, in: slot)
        case .toMany:
            let objects: [ManagedObject]
            switch value {
            case nil: objects = []
            case let list as [ManagedObject]: objects = list
            case let set as Set<ManagedObject>: objects = Array(set)
            default: throw wrongType(key, expected: "a collection of \(slot.destinationName!)", value: value!)
            }
            for object in objects { try checkDestination(object, slot) }
            try replaceToMany(slot, with: objects)
        case .toOne:
            guard let object = value else { setToOne(slot, to: nil); return }
            guard let destination = object as? ManagedObject else {
                throw wrongType(key, expected: slot.destinationName!, value: object)
            }
            try checkDestination(destination, slot)
            setToOne(slot, to: destination)
        case .fetched:
            throw ManagedObjectContextError(.wrongValueType, message: "\(entityName).\(key) is a fetched property and cannot be set")
        }
    }

    /// Puts an attribute value that fits the attribute of `slot` in place, recording a change when it differs.
    func setAttribute(_ value: AttributeValue?, in slot: ManagedObjectModel.Slot) {
        if !slot.isTransient { willAccessValues() }
        let old = setAttributeValue(value, slot)
        guard old != value else { return }
        if !slot.isTransient { markChanged(slot) }
    }

    /// A property's value by key; setting a value that does not fit stops the program with the error's message, in
    /// release builds too (use ``setValue(_:forKey:)`` to handle that as an error).
    public subscript(key: String) -> Any? {
        get { value(forKey: key) }
        set {
            do { try setValue(newValue, forKey: key) } catch { stopForWrongValue(error) }
        }
    }

    /// A typed attribute value. The key goes straight to the attribute's slot and the value converts without
    /// being boxed as `Any` (for the types the package conforms; others, and transformable or object-ID attributes,
    /// take the way of ``value(forKey:)`` and ``setValue(_:forKey:)``, with the same results).
    public subscript<Value: AttributeValueConvertible>(key: AttributeKey<Value>) -> Value? {
        get {
            guard let slot = handle.slot(named: key.name), slot.convertsDirectly else {
                return value(forKey: key.name).flatMap { Value.fromAttributeValue(anyValue: $0) }
            }
            if !slot.isTransient { willAccessValues() }
            guard let stored = attributeValue(slot) else { return nil }
            return Value.fromAttributeValue(stored, type: slot.type)
                ?? Value.fromAttributeValue(anyValue: Self.swiftValue(stored, type: slot.type, transformerName: nil))
        }
        set {
            do {
                guard let slot = handle.slot(named: key.name), slot.convertsDirectly,
                      let converted = newValue?.attributeValue(as: slot.type) else {
                    // NULL, or a value this path does not convert (it may not fit: the general path says why).
                    try setValue(newValue.map { $0 as Any }, forKey: key.name)
                    return
                }
                setAttribute(converted, in: slot)
            } catch {
                stopForWrongValue(error)
            }
        }
    }

    /// A typed to-one relationship.
    public subscript<Destination: ManagedObject>(key: ToOneKey<Destination>) -> Destination? {
        get { value(forKey: key.name) as? Destination }
        set {
            do { try setValue(newValue, forKey: key.name) } catch { stopForWrongValue(error) }
        }
    }

    /// A typed to-many relationship's objects (in order, for ordered ones), each made when it is reached (see
    /// ``RelatedObjects``).
    public subscript<Destination: ManagedObject>(key: ToManyKey<Destination>) -> RelatedObjects<Destination> {
        guard let context = managedObjectContext else { return RelatedObjects(objectIDs: [], context: nil) }
        return RelatedObjects(objectIDs: relatedIDs(forKey: key.name), context: context)
    }

    /// Stops the program for a subscript set that did not fit, saying why: `fatalError` keeps its message in
    /// optimized builds, where a failed `precondition` is a bare trap ("Illegal instruction").
    private func stopForWrongValue(_ error: any Error) -> Never {
        fatalError("\(error)")
    }

    private func wrongType(_ key: String, expected: String, value: Any) -> ManagedObjectContextError {
        if (value as? Double)?.isNaN == true || (value as? Float)?.isNaN == true || (value as? Decimal)?.isNaN == true
            || (value as? Date)?.timeIntervalSinceReferenceDate.isNaN == true {
            return ManagedObjectContextError(.wrongValueType,
                message: "\(entityName).\(key) cannot hold NaN: it is not equal to itself, so it cannot be compared, sorted or indexed (object \(objectID))")
        }
        return ManagedObjectContextError(.wrongValueType,
            message: "\(entityName).\(key) takes \(expected), not a value of type \(type(of: value)) (object \(objectID))")
    }

    /// Checks that `object` may be a destination of the relationship in `slot`: of its destination entity (the
    /// usual case, told by the entity's name without the model's lookup) or a sub-entity, and of this context.
    private func checkDestination(_ object: ManagedObject, _ slot: ManagedObjectModel.Slot) throws(ManagedObjectContextError) {
        let destination = slot.destinationName!
        guard object.handle.name == destination || model.entity(object.entityName, isKindOf: destination) else {
            throw ManagedObjectContextError(.wrongValueType,
                message: "\(entityName).\(slot.name) takes \(destination) objects, not \(object.entityName)")
        }
        guard object.managedObjectContext === managedObjectContext else {
            throw ManagedObjectContextError(.wrongValueType,
                message: "\(entityName).\(slot.name) cannot point at an object of another context (\(object.objectID))")
        }
    }

    func markChanged(_ slot: ManagedObjectModel.Slot) {
        let hadChanges = !changedSlots.isEmpty
        changedSlots.insert(slot.index)
        // An inserted object is saved whole through the context's inserted list, so it never joins the changed
        // ones. Another object is reported unless it had changes already and reported one since the context's
        // change lists last moved (a notification posted, objects saved or refreshed): then it is in them still.
        guard lifecycle != .inserted, let context = managedObjectContext else { return }
        if hadChanges && reportedGeneration == context.reportGeneration { return }
        context.objectDidChange(self)
    }
}

// MARK: - Typed keys

/// A typed key for an attribute, so subclass accessors name the key once.
public struct AttributeKey<Value: AttributeValueConvertible>: Sendable, Hashable {
    /// The attribute's name.
    public let name: String
    /// A key for the attribute with this name.
    public init(_ name: String) { self.name = name }
}

/// A typed key for a to-one relationship.
public struct ToOneKey<Destination: ManagedObject>: Sendable, Hashable {
    /// The relationship's name.
    public let name: String
    /// A key for the relationship with this name.
    public init(_ name: String) { self.name = name }
}

/// A typed key for a to-many relationship.
public struct ToManyKey<Destination: ManagedObject>: Sendable, Hashable {
    /// The relationship's name.
    public let name: String
    /// A key for the relationship with this name.
    public init(_ name: String) { self.name = name }
}

/// A Swift type an attribute value can be read as.
///
/// The two direct conversions let a typed key (``AttributeKey``) read and write an attribute without boxing the value
/// as `Any`; a conforming type that does not implement them (they default to `nil`) goes through
/// ``fromAttributeValue(anyValue:)`` and ``ManagedObject/setValue(_:forKey:)`` instead, with the same results.
public protocol AttributeValueConvertible {
    /// The value from what ``ManagedObject/value(forKey:)`` returns, or `nil` when it is of another type.
    static func fromAttributeValue(anyValue: Any) -> Self?
    /// The value as an attribute of `type` stores it, or `nil` when it does not fit (or the type converts only
    /// through `Any`). Must agree with ``ManagedObject/setValue(_:forKey:)`` wherever it is not `nil`.
    func attributeValue(as type: AttributeType) -> AttributeValue?
    /// The value an attribute of `type` holding `value` reads as, or `nil` when it is of another type (or the type
    /// converts only through `Any`). Must agree with ``fromAttributeValue(anyValue:)`` wherever it is not `nil`.
    static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Self?
}

extension AttributeValueConvertible {
    /// A cast, widening integers.
    public static func fromAttributeValue(anyValue: Any) -> Self? { anyValue as? Self }
    /// `nil`: converted through `Any`.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { nil }
    /// `nil`: converted through `Any`.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Self? { nil }
}

extension String: AttributeValueConvertible {
    /// A string attribute's value.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .string ? .string(self) : nil }
    /// A string attribute's string.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> String? {
        if case .string(let text) = value { text } else { nil }
    }
}

extension Bool: AttributeValueConvertible {
    /// A Boolean attribute's value.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .boolean ? .boolean(self) : nil }
    /// A Boolean attribute's Boolean.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Bool? {
        if case .boolean(let flag) = value { flag } else { nil }
    }
}

extension Double: AttributeValueConvertible {
    /// A double attribute's value, or a float attribute's when the number fits exactly; never NaN.
    public func attributeValue(as type: AttributeType) -> AttributeValue? {
        guard !isNaN else { return nil }
        switch type {
        case .double: return .double(self)
        case .float: return Float(exactly: self).map(AttributeValue.float)
        default: return nil
        }
    }
    /// A double attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Double? {
        if case .double(let number) = value { number } else { nil }
    }
}

extension Float: AttributeValueConvertible {
    /// A float or double attribute's value; never NaN.
    public func attributeValue(as type: AttributeType) -> AttributeValue? {
        guard !isNaN else { return nil }
        switch type {
        case .float: return .float(self)
        case .double: return .double(Double(self))
        default: return nil
        }
    }
    /// A float attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Float? {
        if case .float(let number) = value { number } else { nil }
    }
}

extension Decimal: AttributeValueConvertible {
    /// A decimal attribute's value; never NaN.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .decimal && !isNaN ? .decimal(self) : nil }
    /// A decimal attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Decimal? {
        if case .decimal(let number) = value { number } else { nil }
    }
}

extension Date: AttributeValueConvertible {
    /// A date attribute's value; never NaN.
    public func attributeValue(as type: AttributeType) -> AttributeValue? {
        type == .date && !timeIntervalSinceReferenceDate.isNaN ? .date(self) : nil
    }
    /// A date attribute's date.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Date? {
        if case .date(let date) = value { date } else { nil }
    }
}

extension Data: AttributeValueConvertible {
    /// A binary data attribute's value.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .binaryData ? .data(self) : nil }
    /// A binary data attribute's bytes.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Data? {
        if case .data(let bytes) = value, type == .binaryData { bytes } else { nil }
    }
}

extension UUID: AttributeValueConvertible {
    /// A UUID attribute's value.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .uuid ? .uuid(self) : nil }
    /// A UUID attribute's UUID.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> UUID? {
        if case .uuid(let uuid) = value { uuid } else { nil }
    }
}

extension URL: AttributeValueConvertible {
    /// A URI attribute's value.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { type == .uri ? .uri(self) : nil }
    /// A URI attribute's URL.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> URL? {
        if case .uri(let url) = value, type == .uri { url } else { nil }
    }
}

extension ManagedObjectID: AttributeValueConvertible {}

/// The attribute value of an integer for an attribute of `type`, as ``ManagedObject/setValue(_:forKey:)`` converts
/// it: integer attributes within their range, and doubles, floats and decimals that hold it exactly.
private func integerAttributeValue(_ number: Int64, as type: AttributeType) -> AttributeValue? {
    switch type {
    case .integer16, .integer32, .integer64: type.integerRange!.contains(number) ? .integer(number) : nil
    case .double: Double(exactly: number).map(AttributeValue.double)
    case .float: Float(exactly: number).map(AttributeValue.float)
    case .decimal: .decimal(Decimal(number))
    default: nil
    }
}

extension Int16: AttributeValueConvertible {
    /// An integer, double, float or decimal attribute's value, when it fits.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { integerAttributeValue(Int64(self), as: type) }
    /// An Integer 16 attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Int16? {
        if case .integer(let number) = value, type == .integer16 { Int16(truncatingIfNeeded: number) } else { nil }
    }
}

extension Int32: AttributeValueConvertible {
    /// An integer, double, float or decimal attribute's value, when it fits.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { integerAttributeValue(Int64(self), as: type) }
    /// An Integer 32 attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Int32? {
        if case .integer(let number) = value, type == .integer32 { Int32(truncatingIfNeeded: number) } else { nil }
    }
}

extension Int64: AttributeValueConvertible {
    /// An integer, double, float or decimal attribute's value, when it fits.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { integerAttributeValue(self, as: type) }
    /// An Integer 64 attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Int64? {
        if case .integer(let number) = value, type != .integer16, type != .integer32 { number } else { nil }
    }
}

extension Int: AttributeValueConvertible {
    /// An integer, double, float or decimal attribute's value, when it fits.
    public func attributeValue(as type: AttributeType) -> AttributeValue? { integerAttributeValue(Int64(self), as: type) }
    /// Any integer attribute's number.
    public static func fromAttributeValue(_ value: AttributeValue, type: AttributeType) -> Int? {
        guard case .integer(let number) = value else { return nil }
        switch type {
        case .integer16: return Int(Int16(truncatingIfNeeded: number))
        case .integer32: return Int(Int32(truncatingIfNeeded: number))
        default: return Int(number)
        }
    }

    /// Any integer attribute, as `Int`.
    public static func fromAttributeValue(anyValue: Any) -> Int? {
        switch anyValue {
        case let value as Int16: Int(value)
        case let value as Int32: Int(value)
        case let value as Int64: Int(value)
        case let value as Int: value
        default: nil
        }
    }
}

// MARK: - Conversions

extension ManagedObject {
    /// A Swift value as an attribute value of `attribute`'s type, or `nil` when it does not fit.
    static func attributeValue(_ value: Any, for attribute: AttributeDescription) -> AttributeValue? {
        attributeValue(value, type: attribute.type, transformerName: attribute.transformerName)
    }

    /// A Swift value as an attribute value of `type`, or `nil` when it does not fit.
    static func attributeValue(_ value: Any, type: AttributeType, transformerName: String?) -> AttributeValue? {
        func integer(_ value: Any) -> Int64? {
            switch value {
            case let v as Int: Int64(v)
            case let v as Int8: Int64(v)
            case let v as Int16: Int64(v)
            case let v as Int32: Int64(v)
            case let v as Int64: v
            case let v as UInt8: Int64(v)
            case let v as UInt16: Int64(v)
            case let v as UInt32: Int64(v)
            case let v as UInt: Int64(exactly: v)
            case let v as UInt64: Int64(exactly: v)
            default: nil
            }
        }
        switch type {
        case .integer16, .integer32, .integer64:
            // The attribute's own Swift type first: a failed cast costs as much as a successful one.
            let number: Int64?
            switch type {
            case .integer16: number = (value as? Int16).map(Int64.init) ?? integer(value)
            case .integer32: number = (value as? Int32).map(Int64.init) ?? integer(value)
            default: number = (value as? Int64) ?? integer(value)
            }
            guard let number, type.integerRange!.contains(number) else { return nil }
            return .integer(number)
        case .double:
            if let v = value as? Double { return v.isNaN ? nil : .double(v) }
            if let v = value as? Float { return v.isNaN ? nil : .double(Double(v)) }
            return integer(value).flatMap { Double(exactly: $0) }.map(AttributeValue.double)
        case .float:
            if let v = value as? Float { return v.isNaN ? nil : .float(v) }
            if let v = value as? Double, !v.isNaN, let exact = Float(exactly: v) { return .float(exact) }
            return integer(value).flatMap { Float(exactly: $0) }.map(AttributeValue.float)
        case .decimal:
            if let v = value as? Decimal { return v.isNaN ? nil : .decimal(v) }
            return integer(value).map { .decimal(Decimal($0)) }
        case .string:
            if let v = value as? String { return .string(v) }
            return (value as? Substring).map { .string(String($0)) }
        case .boolean: return (value as? Bool).map(AttributeValue.boolean)
        case .date:
            guard let v = value as? Date, !v.timeIntervalSinceReferenceDate.isNaN else { return nil }
            return .date(v)
        case .binaryData:
            if let v = value as? Data { return .data(v) }
            return (value as? [UInt8]).map { .data(Data($0)) }
        case .uuid: return (value as? UUID).map(AttributeValue.uuid)
        case .uri: return (value as? URL).map(AttributeValue.uri)
        case .objectID: return (value as? ManagedObjectID).map { .uri($0.uriRepresentation) }
        case .transformable:
            if let name = transformerName, let transformer = AttributeTransformer.named(name) {
                return (try? transformer.data(from: value)).map(AttributeValue.data)
            }
            return (value as? Data).map(AttributeValue.data)
        case .undefined:
            return nil
        }
    }

    /// An attribute value as the Swift type of `attribute`.
    static func swiftValue(_ value: AttributeValue, for attribute: AttributeDescription) -> Any {
        swiftValue(value, type: attribute.type, transformerName: attribute.transformerName)
    }

    /// An attribute value as the Swift type of an attribute of `type`.
    static func swiftValue(_ value: AttributeValue, type: AttributeType, transformerName: String?) -> Any {
        switch (value, type) {
        case (.integer(let v), .integer16): return Int16(truncatingIfNeeded: v)
        case (.integer(let v), .integer32): return Int32(truncatingIfNeeded: v)
        case (.integer(let v), _): return v
        case (.double(let v), _): return v
        case (.float(let v), _): return v
        case (.decimal(let v), _): return v
        case (.string(let v), _): return v
        case (.boolean(let v), _): return v
        case (.date(let v), _): return v
        case (.data(let v), .transformable):
            if let name = transformerName, let transformer = AttributeTransformer.named(name),
               let decoded = try? transformer.value(from: v) { return decoded }
            return v
        case (.data(let v), _): return v
        case (.uuid(let v), _): return v
        case (.uri(let v), .objectID): return ManagedObjectID.parse(v).map { $0 as Any } ?? v
        case (.uri(let v), _): return v
        }
    }
}

// MARK: - Predicates

extension ManagedObject: KeyValueReadable {
    /// The object's ID: a managed object equals its store row, and its ID, in a predicate.
    public var predicateIdentity: AnyHashable? { objectID }

    /// The value a predicate sees for `key`: attributes as values, relationships as objects.
    public func predicateValue(forKey key: String) -> PredicateValue {
        guard let slot = handle.slot(named: key) else { return .null }
        switch slot.kind {
        case .attribute:
            if !slot.isTransient { willAccessValues() }
            return attributeValue(slot).map(PredicateValue.init) ?? .null
        case .toMany:
            return .array(relatedObjects(forKey: key).map { .object(PredicateObject($0)) })
        case .toOne:
            willAccessValues()
            guard let id = toOneID(slot), let object = managedObjectContext?.object(with: id) else { return .null }
            return .object(PredicateObject(object))
        case .fetched:
            guard let objects = try? fetchedObjects(forKey: key) else { return .null }
            return .array(objects.map { .object(PredicateObject($0)) })
        }
    }
}

extension PredicateValue {
    /// The predicate value of an attribute value.
    public init(_ value: AttributeValue) {
        switch value {
        case .integer(let v): self = .integer(v)
        case .double(let v): self = .double(v)
        case .float(let v): self = .double(Double(v))
        case .decimal(let v): self = .decimal(v)
        case .string(let v): self = .string(v)
        case .boolean(let v): self = .boolean(v)
        case .date(let v): self = .date(v)
        case .data(let v): self = .data(v)
        case .uuid(let v): self = .uuid(v)
        case .uri(let v): self = .uri(v)
        }
    }
}
