/// A fetch request checked against the model before anything runs it, as Core Data refuses a request naming a key
/// its entity does not have: an unknown key would otherwise read as NULL on every object, and the fetch would
/// quietly find nothing, sort nothing or group everything together.
extension FetchRequest {
    /// Checks the request against `model`: the entity exists; the window is not negative; every key path of the
    /// predicate, the sort descriptors, the prefetching key paths, the fetched properties, the group-by key paths
    /// and the having predicate names properties the entity has (through relationships, key by key); no sort runs
    /// through a to-many relationship or ends at objects (a to-one, `SELF`), which have no order; no comparison asks
    /// whether a key equals a constant of a kind its values never equal (`age == "30"`, `department == 3`); no
    /// predicate nests deeper than ``FetchPredicate/maximumDepth``.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` naming the key,
    ///   the key path and the entity for an unknown key, or ``ManagedObjectContextError/Code/invalidRequest``
    ///   saying what is wrong with the request otherwise.
    public func validate(for model: ManagedObjectModel) throws(ManagedObjectContextError) {
        guard model.existingHandle(forEntityNamed: entityName) != nil else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(entityName)\"")
        }
        if fetchOffset < 0 || fetchLimit < 0 || fetchBatchSize < 0 {
            let (name, value) = fetchOffset < 0 ? ("fetchOffset", fetchOffset) : fetchLimit < 0 ? ("fetchLimit", fetchLimit) : ("fetchBatchSize", fetchBatchSize)
            throw ManagedObjectContextError(.invalidRequest, message: "the fetch request's \(name) is \(value); it must be 0 or more")
        }
        let checker = KeyPathChecker(model: model, entityName: entityName)
        if let predicate {
            try checker.checkDepth(predicate, role: "predicate")
            try checker.check(predicate.node, role: "the predicate", variables: [:])
        }
        // A grouped dictionary request sorts its results, whose keys are its properties' names and group-by paths.
        let resultKeys = resultType == .dictionary && !sortDescriptors.isEmpty ? Set(propertiesToFetch.map(\.name) + propertiesToGroupBy) : []
        for descriptor in sortDescriptors where !resultKeys.contains(descriptor.keyPath) {
            let end = try checker.resolve(descriptor.keyPath, role: "a sort descriptor")
            if end.crossesToMany {
                throw ManagedObjectContextError(.invalidRequest,
                    message: "the sort descriptor \"\(descriptor.keyPath)\" runs through a to-many relationship of \(entityName); a sort needs one value per object")
            }
            if end.kind == .toOne || end.kind == .entity {
                // Objects have no order of their own: sorted by them, the results would come back in no order at all.
                let instead = end.kind == .toOne ? "one of its attributes (\"\(descriptor.keyPath).…\")" : "an attribute"
                throw ManagedObjectContextError(.invalidRequest,
                    message: "the sort descriptor \"\(descriptor.keyPath)\" of \(entityName) ends at \(end.phrase), and objects have no order; sort by \(instead)")
            }
        }
        for keyPath in relationshipKeyPathsForPrefetching {
            let end = try checker.resolve(keyPath, role: "a prefetching key path")
            guard end.isRelationship else {
                throw ManagedObjectContextError(.invalidRequest,
                    message: "the prefetching key path \"\(keyPath)\" of \(entityName) ends at \(end.phrase), not a relationship")
            }
        }
        guard resultType == .dictionary else { return }
        for property in propertiesToFetch where !(property.function == .count && (property.keyPath == "SELF" || property.keyPath == "*")) {
            _ = try checker.resolve(property.keyPath, role: "the fetched property \"\(property.name)\"")
        }
        for keyPath in propertiesToGroupBy {
            let end = try checker.resolve(keyPath, role: "a group-by key path")
            if end.crossesToMany {
                throw ManagedObjectContextError(.invalidRequest,
                    message: "the group-by key path \"\(keyPath)\" runs through a to-many relationship of \(entityName); a group needs one value per object")
            }
        }
        if let havingPredicate { try checker.checkDepth(havingPredicate, role: "having predicate") }
    }
}

extension ManagedObjectContextError.Code {
    /// A request that cannot be run as it stands: a negative offset or limit, a sort through a to-many relationship,
    /// a predicate nested too deep.
    public static let invalidRequest = ManagedObjectContextError.Code(rawValue: "invalidRequest")
}

/// Follows key paths through a model from one entity.
private struct KeyPathChecker {
    let model: ManagedObjectModel
    let entityName: String

    /// Where a key path ends.
    struct End {
        enum Kind { case entity, attribute, toOne, toMany, opaque }
        var kind: Kind
        /// The entity the path is at, while it is at one (the start, or after a relationship).
        var entity: String?
        /// The attribute's type, when the path ends at an attribute.
        var attributeType: AttributeType?
        /// Whether the path went through a to-many relationship (or ends at one).
        var crossesToMany = false

        var isRelationship: Bool { kind == .toOne || kind == .toMany }

        /// Moves past one property: into a relationship's destination, or out of the model's entities (past an
        /// attribute or a fetched property, the values decide).
        mutating func step(through slot: ManagedObjectModel.Slot) {
            switch slot.kind {
            case .attribute:
                kind = .attribute
                entity = nil
                attributeType = slot.type
            case .toOne, .toMany:
                kind = slot.kind == .toMany ? .toMany : .toOne
                attributeType = nil
                entity = slot.destinationName
                if slot.kind == .toMany { crossesToMany = true }
            case .fetched:
                kind = .opaque
                entity = nil
                attributeType = nil
            }
        }

        /// The kinds of constant a value the path yields (an element of it, past a to-many) can equal: numbers
        /// equal numbers of any kind (Booleans included), objects equal objects and object IDs, NULL is asked of
        /// every path, and each other kind equals only its own. Every kind where the values decide (a transformable
        /// or object-ID attribute, a computed value).
        var acceptedKinds: ValueKinds {
            switch kind {
            case .entity, .toOne, .toMany: return [.null, .object]
            case .opaque: return .all
            case .attribute:
                switch attributeType {
                case nil, .transformable?, .objectID?, .undefined?: return .all
                case .string?: return [.null, .string]
                case .date?: return [.null, .date]
                case .binaryData?: return [.null, .data]
                case .uuid?: return [.null, .uuid]
                case .uri?: return [.null, .uri]
                case .integer16?, .integer32?, .integer64?, .decimal?, .double?, .float?, .boolean?: return [.null, .number]
                }
            }
        }

        /// `name` after "a" or "an".
        private static func article(_ name: String) -> String {
            ("AEIOU".contains(name.first ?? "x") ? "an " : "a ") + name
        }

        /// What the path ends at, for messages: "an Integer 64 attribute", "a to-one relationship to Department".
        var phrase: String {
            switch kind {
            case .entity: entity.map { Self.article($0) + " object" } ?? "an object"
            case .attribute: attributeType.map { Self.article($0.coreDataName) + " attribute" } ?? "an attribute"
            case .toOne: "a to-one relationship to \(entity ?? "?")"
            case .toMany: "a to-many relationship to \(entity ?? "?")"
            case .opaque: "a computed value"
            }
        }    }

    /// Follows `path` key by key from `start` (the fetched entity by default). Past an attribute, a fetched property
    /// or a collection operator (`@count`, `@sum`, …) the values decide, and evaluation reports what does not fit.
    /// Keys are looked up among the entities' slots (``ManagedObjectModel/Slot``): a property's description, looked
    /// up instead, was copied — every string and array in it retained — for each key of every fetch.
    ///
    /// - Throws: ``ManagedObjectContextError/Code/unknownName`` for a key the entity it is looked up in lacks.
    func resolve(_ path: String, from start: String? = nil, role: String) throws(ManagedObjectContextError) -> End {
        var end = End(kind: .entity, entity: start ?? entityName)
        // Most key paths are one key: look it up without splitting the path.
        if !path.utf8.contains(UInt8(ascii: ".")), let entity = end.entity, let slot = slot(named: path, in: entity) {
            end.step(through: slot)
            return end
        }
        for key in path.split(separator: ".", omittingEmptySubsequences: false) {
            guard let entity = end.entity else { break }
            if key == "SELF" || key == "self" { continue }
            if key.hasPrefix("@") {
                end.kind = .opaque
                end.entity = nil
                break
            }
            guard let slot = slot(named: String(key), in: entity) else {
                let whole = path == key ? "" : " (in the key path \"\(path)\")"
                throw ManagedObjectContextError(.unknownName,
                    message: "\(role) names the key \"\(key)\"\(whole), which the entity \(entity) does not have")
            }
            end.step(through: slot)
        }
        return end
    }

    private func slot(named name: String, in entity: String) -> ManagedObjectModel.Slot? {
        model.existingHandle(forEntityNamed: entity)?.slot(named: name)
    }

    func checkDepth(_ predicate: FetchPredicate, role: String) throws(ManagedObjectContextError) {
        if predicate.isTooDeep {
            throw ManagedObjectContextError(.invalidRequest,
                message: "the fetch request's \(role) nests more than \(FetchPredicate.maximumDepth) levels deep; build it flatter")
        }
    }

    /// Checks every key path of a predicate; `variables` are the SUBQUERY variables in scope, with their entities.
    func check(_ node: PredicateNode, role: String, variables: [String: String]) throws(ManagedObjectContextError) {
        switch node {
        case .constant: break
        case .comparison(let comparison):
            let lhs = try check(comparison.lhs, role: role, variables: variables)
            let rhs = try check(comparison.rhs, role: role, variables: variables)
            try checkKinds(comparison, lhs: lhs, rhs: rhs, role: role)
        case .and(let operands), .or(let operands):
            for operand in operands { try check(operand, role: role, variables: variables) }
        case .not(let operand):
            try check(operand, role: role, variables: variables)
        }
    }

    /// Checks every key path of an expression; returns where the expression's values come from when it is a key path
    /// (of the fetched entity, or of a SUBQUERY's variable) or `SELF`, `nil` for any other expression.
    @discardableResult
    func check(_ node: ExpressionNode, role: String, variables: [String: String]) throws(ManagedObjectContextError) -> End? {
        switch node {
        case .constant, .variable:
            break
        case .evaluatedObject:
            return End(kind: .entity, entity: entityName)
        case .keyPath(let path):
            return try resolve(path, role: role)
        case .member(let base, let path):
            if case .variable(let name) = base, let entity = variables[name] {
                return try resolve(path, from: entity, role: role)
            } else {
                try check(base, role: role, variables: variables)
            }
        case .aggregate(let elements), .function(_, let elements):
            for element in elements { try check(element, role: role, variables: variables) }
        case .method(let target, _, let arguments):
            try check(target, role: role, variables: variables)
            for argument in arguments { try check(argument, role: role, variables: variables) }
        case .arithmetic(_, let lhs, let rhs):
            try check(lhs, role: role, variables: variables)
            try check(rhs, role: role, variables: variables)
        case .negate(let operand), .assignment(_, let operand):
            try check(operand, role: role, variables: variables)
        case .index(let base, let selector):
            try check(base, role: role, variables: variables)
            // A computed key (`$a.$b`) is known only when the predicate is evaluated.
            if case .expression(let index) = selector { try check(index, role: role, variables: variables) }
            if case .key(let key) = selector { try check(key, role: role, variables: variables) }
        case .subquery(let collection, let variable, let condition):
            try check(collection, role: role, variables: variables)
            var inner = variables
            inner[variable] = try subqueryEntity(collection, role: role, variables: variables)
            try check(condition, role: role, variables: inner)
        case .ternary(let condition, let whenTrue, let whenFalse):
            try check(condition, role: role, variables: variables)
            try check(whenTrue, role: role, variables: variables)
            try check(whenFalse, role: role, variables: variables)
        }
        return nil
    }

    /// Refuses a comparison that asks whether a key path's values equal a constant of a kind they never equal —
    /// `age == "30"`, `department == 3`, `ANY tags == "swift"`, `name IN {1, 2}` — which would otherwise find nothing
    /// (or, with `!=`, everything) without a word. Orderings (`<`, `BETWEEN`) and string operators of unlike kinds
    /// are refused when they are evaluated.
    ///
    /// - Throws: ``ManagedObjectContextError/Code/invalidRequest`` naming the key path, what it holds and the
    ///   constant's kind.
    private func checkKinds(_ comparison: ComparisonNode, lhs: End?, rhs: End?, role: String) throws(ManagedObjectContextError) {
        // The key path, and the constant its values are compared with (each of its elements, for `IN` a list).
        let end: End, constant: PredicateValue, path: ExpressionNode
        var eachElement = false
        switch (comparison.op, comparison.lhs, comparison.rhs) {
        case (.equal, _, .constant(let value)), (.notEqual, _, .constant(let value)):
            guard let lhs else { return }
            (end, constant, path) = (lhs, value, comparison.lhs)
        case (.equal, .constant(let value), _), (.notEqual, .constant(let value), _):
            guard let rhs else { return }
            (end, constant, path) = (rhs, value, comparison.rhs)
        case (.in, _, .constant(let value)):
            guard let lhs else { return }
            (end, constant, path, eachElement) = (lhs, value, comparison.lhs, true)
        case (.in, .constant(let value), _):
            // `%@ IN toMany`: the constant against each member (`"a" IN name` is a substring test, left to evaluation).
            guard let rhs, rhs.crossesToMany else { return }
            (end, constant, path) = (rhs, value, comparison.rhs)
        case (.contains, _, .constant(let value)):
            // `toMany CONTAINS %@`: the constant against each member (`name CONTAINS "a"` is a substring test).
            guard let lhs, lhs.crossesToMany else { return }
            (end, constant, path) = (lhs, value, comparison.lhs)
        default:
            return
        }
        let accepted = end.acceptedKinds
        guard accepted != .all else { return }
        let mismatch: PredicateValue
        switch constant {
        case .array(let elements) where eachElement:
            // Each element's kind read where it lies, not from a copy handed to a getter (a `SELF IN %@` may hold
            // 50 000 objects).
            let index = elements.withUnsafeBufferPointer { elements -> Int? in
                guard let base = elements.baseAddress else { return nil }
                return elements.indices.first { !accepted.contains(PredicateValue.kind(at: base + $0)) }
            }
            guard let index else { return }
            mismatch = elements[index]
        case .array, .dictionary:
            return  // compared whole (a to-many against a list), or as `IN` decides: the elements decide
        default:
            // One value, compared whole; an `IN` whose right side is not a list (`"a" IN name`: a substring test) is
            // left to evaluation.
            guard !eachElement, !accepted.contains(constant.valueKind) else { return }
            mismatch = constant
        }
        let name = switch path {
        case .keyPath(let keyPath), .member(_, let keyPath): "\"\(keyPath)\""
        default: "SELF"
        }
        let held = end.crossesToMany && end.kind != .toMany ? "\(end.phrase), reached through a to-many relationship" : end.phrase
        throw ManagedObjectContextError(.invalidRequest,
            message: "\(role) compares \(name) (\(held)) with \(mismatch.kindPhrase), which it never equals (in `\(comparison.format)`); "
                + "compare it with a value of its own kind")
    }

    /// The entity a SUBQUERY's variable stands for: the destination of the relationship its collection ends at.
    private func subqueryEntity(_ collection: ExpressionNode, role: String, variables: [String: String]) throws(ManagedObjectContextError) -> String? {
        switch collection {
        case .keyPath(let path):
            let end = try resolve(path, role: role)
            return end.isRelationship ? end.entity : nil
        case .member(.variable(let name), let path):
            guard let entity = variables[name] else { return nil }
            let end = try resolve(path, from: entity, role: role)
            return end.isRelationship ? end.entity : nil
        default:
            return nil
        }
    }
}

/// Kinds of predicate values, for telling whether a constant can equal a key's values without copying it.
private struct ValueKinds: OptionSet {
    let rawValue: UInt16

    static let null = ValueKinds(rawValue: 1 << 0)
    /// Booleans, integers, floating-point and decimal numbers: they compare as numbers.
    static let number = ValueKinds(rawValue: 1 << 1)
    static let string = ValueKinds(rawValue: 1 << 2)
    static let date = ValueKinds(rawValue: 1 << 3)
    static let data = ValueKinds(rawValue: 1 << 4)
    static let uuid = ValueKinds(rawValue: 1 << 5)
    static let uri = ValueKinds(rawValue: 1 << 6)
    static let collection = ValueKinds(rawValue: 1 << 7)
    static let object = ValueKinds(rawValue: 1 << 8)
    static let all = ValueKinds(rawValue: .max)
}

extension PredicateValue {
    /// The value's kind.
    fileprivate var valueKind: ValueKinds {
        withUnsafePointer(to: self) { PredicateValue.kind(at: $0) }
    }

    /// The kind of the value at `pointer`, read where it is (no copy handed to a getter). About 60 instructions an
    /// element of a `SELF IN` list of objects remain, most of them the copy a switch makes of what it matches.
    @inline(__always)
    fileprivate static func kind(at pointer: UnsafePointer<PredicateValue>) -> ValueKinds {
        switch pointer.pointee {
        case .null: .null
        case .boolean, .integer, .double, .decimal: .number
        case .string: .string
        case .date: .date
        case .data: .data
        case .uuid: .uuid
        case .uri: .uri
        case .array, .dictionary: .collection
        case .object: .object
        }
    }
}
