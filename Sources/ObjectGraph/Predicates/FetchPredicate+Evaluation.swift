import Foundation

/// A predicate or expression that could not be evaluated: the values do not fit the operation.
public struct PredicateEvaluationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of problem.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The code's name.
        public let rawValue: String
        /// Creates a code from its name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The code's name.
        public var description: String { rawValue }

        /// Values of kinds the operation cannot combine (ordering a string against a number, adding strings).
        public static let typeMismatch = Code(rawValue: "typeMismatch")
        /// A `$VARIABLE` with no binding.
        public static let missingVariable = Code(rawValue: "missingVariable")
        /// An operation this platform cannot perform (`UTI-CONFORMS-TO`, `FUNCTION` method calls).
        public static let unsupported = Code(rawValue: "unsupported")
        /// An operand of the right kind but the wrong shape (`BETWEEN` without two bounds, a bad regular
        /// expression, an unknown collection operator).
        public static let invalidOperand = Code(rawValue: "invalidOperand")
        /// An index past the end of a collection.
        public static let indexOutOfRange = Code(rawValue: "indexOutOfRange")
        /// A predicate built in code that nests deeper than ``FetchPredicate/maximumDepth`` levels.
        public static let nestedTooDeep = Code(rawValue: "nestedTooDeep")
    }

    /// The kind of problem.
    public var code: Code
    /// What went wrong.
    public var message: String
    /// The part of the predicate being evaluated, as predicate text.
    public var fragment: String

    /// "message (in `fragment`) [code]".
    public var description: String { "\(message) (in `\(fragment)`) [\(code)]" }
}

extension FetchPredicate {
    /// Whether `object` satisfies the predicate, with Core Data's semantics: NULL equals only NULL and orders
    /// against nothing; integers, floating-point numbers, decimals and Booleans compare as numbers; dates by time;
    /// `[c]` and `[d]` fold case and diacritics in every string comparison; a to-many key path on the left of a
    /// comparison means ANY of its values.
    ///
    /// - Parameter variables: Values for the predicate's `$VARIABLES`.
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation (ordering a string against a
    ///   number, a missing variable, a malformed regular expression), never a crash or a silent `false`.
    public func evaluate(with object: some KeyValueReadable, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> Bool {
        try checkDepth()
        var evaluator = PredicateEvaluator(root: PredicateValue.wrapping(object), variables: variables, memberships: memberships)
        return try evaluator.evaluate(node)
    }

    /// Whether `object` satisfies the predicate; as ``evaluate(with:variables:)-(some KeyValueReadable,_)``, for
    /// objects that are `Hashable` (managed objects, store rows), which are read without a wrapper.
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    public func evaluate(with object: some KeyValueReadable & Hashable, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> Bool {
        try checkDepth()
        var evaluator = PredicateEvaluator(root: PredicateValue.wrapping(object), variables: variables, memberships: memberships)
        return try evaluator.evaluate(node)
    }

    /// Throws when the predicate nests deeper than ``maximumDepth`` (built so in code; the parser refuses such text).
    package func checkDepth() throws(PredicateEvaluationError) {
        guard isTooDeep else { return }
        throw PredicateEvaluationError(code: .nestedTooDeep,
                                       message: "the predicate nests more than \(Self.maximumDepth) levels deep; build it flatter",
                                       fragment: "…")
    }
}

extension PredicateExpression {
    /// The expression's value for `object`.
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    public func value(for object: some KeyValueReadable, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> PredicateValue {
        var evaluator = PredicateEvaluator(root: PredicateValue.wrapping(object), variables: variables)
        return try evaluator.value(node)
    }

    /// The expression's value for `object`; as ``value(for:variables:)-(some KeyValueReadable,_)``, for objects that
    /// are `Hashable` (managed objects, store rows), which are read without a wrapper.
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    public func value(for object: some KeyValueReadable & Hashable, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> PredicateValue {
        var evaluator = PredicateEvaluator(root: PredicateValue.wrapping(object), variables: variables)
        return try evaluator.value(node)
    }
}

extension PredicateValue {
    /// The evaluated object as a value: dictionaries stay dictionaries, anything else is wrapped as an object.
    /// (Type checks by metatype first: this runs once per evaluated object, and a dynamic cast costs more than the
    /// comparison it precedes.)
    static func wrapping<Object: KeyValueReadable>(_ object: Object) -> PredicateValue {
        if Object.self == [String: PredicateValue].self { return .dictionary(object as! [String: PredicateValue]) }
        if Object.self == PredicateValue.self { return object as! PredicateValue }
        if let managed = object as? ManagedObject { return .object(PredicateObject(managed)) }
        return .object(PredicateObject(unique: object))
    }

    /// As ``wrapping(_:)``, for objects that are their own identity: no wrapper object is made.
    static func wrapping<Object: KeyValueReadable & Hashable>(_ object: Object) -> PredicateValue {
        if Object.self == [String: PredicateValue].self { return .dictionary(object as! [String: PredicateValue]) }
        if Object.self == PredicateValue.self { return object as! PredicateValue }
        return .object(PredicateObject(object))
    }
}

extension PredicateObject {
    /// Wraps an object that is not `Hashable`; the wrapper equals only itself.
    init(unique object: any KeyValueReadable) {
        self.init(UniqueReadable(base: object))
    }

    private final class UniqueReadable: KeyValueReadable, Hashable {
        let base: any KeyValueReadable
        init(base: any KeyValueReadable) { self.base = base }
        func predicateValue(forKey key: String) -> PredicateValue { base.predicateValue(forKey: key) }
        var predicateIdentity: AnyHashable? { base.predicateIdentity ?? AnyHashable(ObjectIdentifier(self)) }
        static func == (lhs: UniqueReadable, rhs: UniqueReadable) -> Bool { lhs === rhs }
        func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    }
}

/// Walks a predicate tree against one object.
struct PredicateEvaluator {
    let root: PredicateValue
    var variables: [String: PredicateValue]
    /// The predicate's indexed `IN` collections, if it has any.
    let memberships: PredicateMemberships?

    init(root: PredicateValue, variables: [String: PredicateValue], memberships: PredicateMemberships? = nil) {
        self.root = root
        self.variables = variables
        self.memberships = memberships
    }

    func failure(_ code: PredicateEvaluationError.Code, _ message: String, _ fragment: String) -> PredicateEvaluationError {
        PredicateEvaluationError(code: code, message: message, fragment: fragment)
    }

    mutating func evaluate(_ node: PredicateNode) throws(PredicateEvaluationError) -> Bool {
        switch node {
        case .constant(let value):
            return value
        case .and(let operands):
            for operand in operands where try !evaluate(operand) { return false }
            return true
        case .or(let operands):
            for operand in operands where try evaluate(operand) { return true }
            return false
        case .not(let operand):
            return try !evaluate(operand)
        case .comparison(let comparison):
            return try evaluate(comparison)
        }
    }

    private mutating func evaluate(_ comparison: ComparisonNode) throws(PredicateEvaluationError) -> Bool {
        let lhs = try value(comparison.lhs)
        let rhs = try value(comparison.rhs)
        var modifier = comparison.modifier
        if modifier == .direct, case .array = lhs, comparison.op != .contains {
            // A to-many key path on the left means ANY of its values, as Core Data's SQL store reads it.
            if case .array = rhs, comparison.op != .in && comparison.op != .between {} else { modifier = .any }
        }
        var membership: PredicateMembership?
        if comparison.op == .in, let memberships, case .constant(.array(let elements)) = comparison.rhs {
            membership = memberships.membership(of: elements, options: comparison.options)
        }
        // One value compared with another (most comparisons): no closure made, nor a copy of the evaluator.
        if modifier == .direct, membership == nil {
            return try self.compare(lhs, comparison.op, rhs, options: comparison.options, comparison)
        }
        let evaluator = self
        let compare: (PredicateValue) throws(PredicateEvaluationError) -> Bool
        if let membership {
            // `x IN {constants}` of many elements: one lookup (the same answer as comparing with each).
            compare = { element in membership.contains(element) }
        } else {
            compare = { (element: PredicateValue) throws(PredicateEvaluationError) -> Bool in
                try evaluator.compare(element, comparison.op, rhs, options: comparison.options, comparison)
            }
        }
        switch modifier {
        case .direct:
            return try compare(lhs)
        case .any, .all, .none:
            let elements: [PredicateValue] = lhs.collectionElements ?? (lhs.isNull ? [] : [lhs])
            switch modifier {
            case .any:
                for element in elements where try compare(element) { return true }
                return false
            case .all:
                for element in elements where try !compare(element) { return false }
                return true
            default:
                for element in elements where try compare(element) { return false }
                return true
            }
        }
    }

    // MARK: - Expressions

    mutating func value(_ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        switch node {
        case .constant(let value):
            return value
        case .evaluatedObject:
            return root
        case .keyPath(let path):
            return try keyPath(path, from: root, node)
        case .member(let base, let path):
            return try keyPath(path, from: try value(base), node)
        case .variable(let name):
            guard let bound = variables[name] else {
                throw failure(.missingVariable, "the variable $\(name) has no value", node.format)
            }
            return bound
        case .aggregate(let elements):
            var values: [PredicateValue] = []
            for element in elements { values.append(try value(element)) }
            return .array(values)
        case .function(let name, let arguments):
            var values: [PredicateValue] = []
            for argument in arguments { values.append(try value(argument)) }
            return try function(name, values, node)
        case .method(_, let selector, _):
            throw failure(.unsupported, "FUNCTION(…, \"\(selector)\") calls an Objective-C method, which cannot be done here", node.format)
        case .arithmetic(let op, let lhs, let rhs):
            return try arithmetic(op, try value(lhs), try value(rhs), node)
        case .negate(let operand):
            return try arithmetic(.subtract, .integer(0), try value(operand), node)
        case .index(let base, let selector):
            return try index(try value(base), selector, node)
        case .subquery(let collection, let variable, let condition):
            let source = try value(collection)
            let elements = source.collectionElements ?? (source.isNull ? [] : [source])
            let saved = variables[variable]
            defer { variables[variable] = saved }
            var matches: [PredicateValue] = []
            for element in elements {
                variables[variable] = element
                if try evaluate(condition) { matches.append(element) }
            }
            return .array(matches)
        case .assignment(let name, let expression):
            let assigned = try value(expression)
            variables[name] = assigned
            return assigned
        case .ternary(let condition, let whenTrue, let whenFalse):
            return try evaluate(condition) ? try value(whenTrue) : try value(whenFalse)
        }
    }

    /// Where `path`'s first dot is (a byte offset, -1 for none), how many dots it has, and whether it has a
    /// collection operator (an `@`), from one pass over its bytes.
    @inline(__always)
    private static func shape(of path: String) -> (firstDot: Int, dots: Int, operators: Bool) {
        func scan(_ bytes: UnsafeBufferPointer<UInt8>) -> (Int, Int, Bool) {
            var firstDot = -1, dots = 0, operators = false
            for (offset, byte) in bytes.enumerated() {
                if byte == UInt8(ascii: ".") {
                    if dots == 0 { firstDot = offset }
                    dots += 1
                } else if byte == UInt8(ascii: "@") {
                    operators = true
                }
            }
            return (firstDot, dots, operators)
        }
        return path.utf8.withContiguousStorageIfAvailable(scan) ?? Array(path.utf8).withUnsafeBufferPointer(scan)
    }

    /// Follows a dotted key path with collection operators (`@count`, `@sum`, `@avg`, `@min`, `@max`,
    /// `@distinctUnionOfObjects`, `@unionOfObjects`). Through a collection, a key yields every element's value.
    private func keyPath(_ path: String, from start: PredicateValue, _ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        // Most key paths are one plain key: read it without splitting the path. Plain keys through relationships
        // (`department.name`) are followed key by key, the path cut at its dots as bytes — a split by `Character`
        // cost about 5 K instructions a row, in a filter or a sort evaluated on every row.
        let (firstDot, dots, operators) = Self.shape(of: path)
        if !operators {
            guard dots > 0 else { return try member(start, path, node) }
            if dots == 1, firstDot > 0, firstDot < path.utf8.count - 1 {
                // Two keys (`department.name`), the most common path through a relationship.
                let dot = path.utf8.index(path.utf8.startIndex, offsetBy: firstDot)
                let through = try member(start, String(path[..<dot]), node)
                return try member(through, String(path[path.utf8.index(after: dot)...]), node)
            }
            var current = start
            var rest = Substring(path)
            // Empty keys (`a..b`) are passed over, as a split leaves them out.
            while let dot = rest.utf8.firstIndex(of: UInt8(ascii: ".")) {
                if dot != rest.startIndex { current = try member(current, String(rest[..<dot]), node) }
                rest = rest[rest.utf8.index(after: dot)...]
            }
            return rest.isEmpty ? current : try member(current, String(rest), node)
        }
        let components = path.split(separator: ".").map(String.init)
        var current = start
        var position = 0
        while position < components.count {
            let key = components[position]
            position += 1
            guard key.hasPrefix("@") else {
                current = try member(current, key, node)
                continue
            }
            let rest = components[position...].joined(separator: ".")
            position = components.count
            let elements: [PredicateValue]
            switch current {
            case .null: elements = []
            case .array, .dictionary: elements = current.collectionElements!
            default:
                throw failure(.typeMismatch, "\(key) needs a collection, but the value is \(current.kindPhrase)", node.format)
            }
            var values: [PredicateValue] = []
            for element in elements {
                let value = rest.isEmpty || key == "@count" ? element : try keyPath(rest, from: element, node)
                values.append(value)
            }
            switch key {
            case "@count":
                current = .integer(Int64(elements.count))
                if !rest.isEmpty { current = try keyPath(rest, from: current, node) }
            case "@sum": current = try function("sum", [.array(values)], node)
            case "@avg": current = try function("average", [.array(values)], node)
            case "@min": current = try function("min", [.array(values)], node)
            case "@max": current = try function("max", [.array(values)], node)
            case "@unionOfObjects": current = .array(values.filter { !$0.isNull })
            case "@distinctUnionOfObjects":
                var seen = Set<PredicateValue>()
                current = .array(values.filter { !$0.isNull && seen.insert($0).inserted })
            default:
                throw failure(.invalidOperand, "\(key) is not a collection operator (@count, @sum, @avg, @min, @max, @unionOfObjects, @distinctUnionOfObjects)", node.format)
            }
        }
        return current
    }

    private func member(_ value: PredicateValue, _ key: String, _ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        switch value {
        case .null: return .null
        case .object(let object): return object.base.predicateValue(forKey: key)
        case .dictionary(let pairs): return pairs[key] ?? .null
        case .array(let elements):
            var values: [PredicateValue] = []
            for element in elements {
                let inner = try member(element, key, node)
                if case .array(let nested) = inner { values += nested } else { values.append(inner) }
            }
            return .array(values)
        case .string(let text) where key == "length":
            return .integer(Int64(text.count))
        default:
            throw failure(.typeMismatch, "\(value.kindPhrase) has no key \"\(key)\"", node.format)
        }
    }

    private func index(_ base: PredicateValue, _ selector: IndexSelector, _ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        if base.isNull { return .null }
        // A key computed at evaluation (`$a.$b`, or `$a[$b]` with a string): the value for that key, as Foundation
        // gives `valueForKey:` / `objectForKeyedSubscript:`.
        var position: PredicateValue? = nil
        switch selector {
        case .key(let expression):
            var copy = self
            let key = try copy.value(expression)
            guard case .string(let name) = key, !name.isEmpty else {
                throw failure(.typeMismatch, "a key after \".\" must be a string, not \(key.kindPhrase)", node.format)
            }
            return try keyPath(name, from: base, node)
        case .expression(let expression):
            var copy = self
            let value = try copy.value(expression)
            if case .string(let name) = value {
                if case .array = base {
                    throw failure(.typeMismatch, "an array is indexed by an integer, not \(value.kindPhrase)", node.format)
                }
                return try member(base, name, node)
            }
            position = value
        case .first, .last, .size:
            break
        }
        guard let elements = base.collectionElements else {
            throw failure(.typeMismatch, "only collections can be indexed, not \(base.kindPhrase)", node.format)
        }
        switch selector {
        case .first: return elements.first ?? .null
        case .last: return elements.last ?? .null
        case .size: return .integer(Int64(elements.count))
        case .expression, .key:
            guard case .integer(let offset)? = position else {
                throw failure(.typeMismatch, "an index must be an integer or a key, not \((position ?? .null).kindPhrase)", node.format)
            }
            guard offset >= 0, offset < elements.count else {
                throw failure(.indexOutOfRange, "index \(offset) is outside a collection of \(elements.count)", node.format)
            }
            return elements[Int(offset)]
        }
    }
}
