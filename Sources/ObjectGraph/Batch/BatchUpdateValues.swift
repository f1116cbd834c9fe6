/// The new values a ``BatchUpdateRequest`` gives each object, worked out and checked the same way by every store
/// that runs the request — natively (``BatchUpdatingStore``) or through managed objects.
///
/// Made once per request: the attributes are found in the model (a name that is not a stored attribute of the
/// entity is refused), then ``values(for:objectID:)`` evaluates each expression on an object's current values —
/// every expression sees the values from before the update — converts the result to the attribute's type, and
/// checks it against the model's rules: required values, minimum and maximum, lengths and patterns. A store adds what
/// only it can check (uniqueness) when it writes.
public struct BatchUpdateValues {
    /// The entity whose objects the request updates.
    public let entityName: String
    /// The attributes the request sets, sorted by name: the order of ``values(for:objectID:)``'s results.
    public let attributeNames: [String]
    /// The attributes' slots in the entity's handle, in ``attributeNames``' order.
    package let slots: [ManagedObjectModel.Slot]
    private let expressions: [PredicateExpression]
    /// Whether an expression may read another object (a key path through a relationship, `SELF`, a subquery): a
    /// store then works out every object's values before it writes any, so each sees the values from before the
    /// update; expressions of the object's own attributes and constants let it write each object as it goes.
    package let readsOtherObjects: Bool

    /// Finds the request's attributes in `model`.
    ///
    /// - Throws: ``ManagedObjectContextError/Code/unknownName`` for an entity the model lacks, or an attribute name
    ///   that is not a stored attribute of it.
    public init(_ request: BatchUpdateRequest, model: ManagedObjectModel) throws(ManagedObjectContextError) {
        guard let entity = model.existingHandle(forEntityNamed: request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        let updates = request.propertiesToUpdate.sorted { $0.key < $1.key }
        var slots: [ManagedObjectModel.Slot] = []
        for (name, _) in updates {
            guard let slot = entity.slot(named: name), slot.kind == .attribute, slot.isPersistent else {
                throw ManagedObjectContextError(.unknownName,
                    message: "a batch update sets stored attributes, and \(request.entityName) has no stored attribute \"\(name)\"")
            }
            slots.append(slot)
        }
        entityName = request.entityName
        attributeNames = updates.map(\.key)
        expressions = updates.map(\.value)
        self.slots = slots
        readsOtherObjects = updates.contains { !Self.readsOnlyOwnAttributes($0.value, of: entity) }
    }

    /// Whether `expression` reads nothing but constants, variables and the evaluated object's own attributes.
    private static func readsOnlyOwnAttributes(_ expression: PredicateExpression, of entity: ManagedObjectModel.EntityHandle) -> Bool {
        switch expression.structure {
        case .constant, .variable:
            return true
        case .keyPath(let path, let base):
            return base == nil && entity.slot(named: path)?.kind == .attribute
        case .function(_, let arguments, let target):
            return target == nil && arguments.allSatisfy { readsOnlyOwnAttributes($0, of: entity) }
        case .aggregate(let elements):
            return elements.allSatisfy { readsOnlyOwnAttributes($0, of: entity) }
        case .assignment(_, let value):
            return readsOnlyOwnAttributes(value, of: entity)
        case .evaluatedObject, .subquery, .conditional:
            return false
        }
    }

    /// The new value of each of ``attributeNames`` for the object whose current values `object` reads (`nil`: NULL).
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the object and the attribute:
    ///   ``ManagedObjectContextError/Code/wrongValueType`` when an expression cannot be evaluated or its result is
    ///   not a value of the attribute's type (a fraction for an integer), ``ManagedObjectContextError/Code/validation``
    ///   when the result breaks one of the model's rules (NULL for a required attribute, a value over its maximum).
    public func values(for object: some KeyValueReadable & Hashable, objectID: ManagedObjectID) throws(ManagedObjectContextError) -> [AttributeValue?] {
        var values: [AttributeValue?] = []
        values.reserveCapacity(slots.count)
        for (slot, expression) in zip(slots, expressions) {
            let value: PredicateValue
            do {
                value = try expression.value(for: object)
            } catch {
                throw ManagedObjectContextError(.wrongValueType,
                    message: "the batch update of \(entityName).\(slot.name) cannot evaluate \(expression) for \(objectID): \(error)")
            }
            guard case .null = value else {
                guard let converted = AttributeValue(value, as: slot.type) else {
                    throw ManagedObjectContextError(.wrongValueType,
                        message: "the batch update sets \(entityName).\(slot.name) (\(slot.type.coreDataName)) to \(expression), which is \(value) for \(objectID)")
                }
                var failures: [String] = []
                slot.ruleFailures(of: converted) { failures.append($0) }
                guard failures.isEmpty else {
                    throw ManagedObjectContextError(.validation,
                        message: "the batch update sets \(entityName).\(slot.name) of \(objectID) to \(converted): \(failures.joined(separator: "; ")); nothing was updated")
                }
                values.append(converted)
                continue
            }
            guard slot.isOptional else {
                throw ManagedObjectContextError(.validation,
                    message: "the batch update sets \(entityName).\(slot.name) of \(objectID) to nil, but a value is required; nothing was updated")
            }
            values.append(nil)
        }
        return values
    }
}

extension AttributeValue {
    /// `value` as a value of `type`, when it is one or converts to one without loss (a number for a `float`
    /// attribute is first rounded to `Float`, as storing it there would); `nil` otherwise (and for NULL).
    package init?(_ value: PredicateValue, as type: AttributeType) {
        let candidate: AttributeValue
        switch value {
        case .integer(let number): candidate = .integer(number)
        case .double(let number): candidate = type == .float ? .float(Float(number)) : .double(number)
        case .decimal(let number): candidate = .decimal(number)
        case .string(let text): candidate = .string(text)
        case .boolean(let flag): candidate = .boolean(flag)
        case .date(let date): candidate = .date(date)
        case .data(let data): candidate = .data(data)
        case .uuid(let uuid): candidate = .uuid(uuid)
        case .uri(let url): candidate = .uri(url)
        case .null, .array, .dictionary, .object: return nil
        }
        guard let converted = candidate.converted(to: type) else { return nil }
        self = converted
    }
}
