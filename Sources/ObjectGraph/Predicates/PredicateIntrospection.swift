/// Reading a parsed predicate or expression back, one level at a time — what Core Data code does with
/// `NSComparisonPredicate.leftExpression`, `NSCompoundPredicate.subpredicates` or `NSExpression.function` — without
/// handing out the syntax tree itself. Every part is again a ``FetchPredicate`` or ``PredicateExpression``, so a
/// caller walks as deep as it likes.

extension FetchPredicate {
    /// One level of a predicate's structure.
    public enum Structure: Sendable, Hashable {
        /// `TRUEPREDICATE` (`true`) or `FALSEPREDICATE` (`false`).
        case constant(Bool)
        /// A comparison of two expressions (Core Data's `NSComparisonPredicate`).
        case comparison(Comparison)
        /// Every one of the subpredicates (an `AND` compound predicate).
        case and([FetchPredicate])
        /// Any one of the subpredicates (an `OR` compound predicate).
        case or([FetchPredicate])
        /// The negation of the subpredicate (a `NOT` compound predicate).
        case not(FetchPredicate)
    }

    /// A comparison's parts: `ANY tags.name BEGINSWITH[cd] "a"` has the modifier `.any`, the left expression
    /// `tags.name`, the operator `.beginsWith`, the right expression `"a"`, and is case- and diacritic-insensitive.
    public struct Comparison: Sendable, Hashable {
        /// The expression on the left.
        public var leftExpression: PredicateExpression
        /// The expression on the right.
        public var rightExpression: PredicateExpression
        /// The operator.
        public var comparisonOperator: ComparisonOperator
        /// `ANY`, `ALL`, `NONE`, or the left value as it is.
        public var modifier: ComparisonModifier
        /// Whether string comparison ignores case (`[c]`).
        public var isCaseInsensitive: Bool
        /// Whether string comparison ignores diacritics (`[d]`).
        public var isDiacriticInsensitive: Bool
        /// Whether strings are taken as already normalized (`[n]`).
        public var isNormalized: Bool
    }

    /// The predicate's top level: a constant, a comparison, or a compound of subpredicates.
    public var structure: Structure {
        switch node {
        case .constant(let value): .constant(value)
        case .and(let operands): .and(operands.map { FetchPredicate(node: $0) })
        case .or(let operands): .or(operands.map { FetchPredicate(node: $0) })
        case .not(let operand): .not(FetchPredicate(node: operand))
        case .comparison(let comparison):
            .comparison(Comparison(
                leftExpression: PredicateExpression(node: comparison.lhs), rightExpression: PredicateExpression(node: comparison.rhs),
                comparisonOperator: comparison.op, modifier: comparison.modifier,
                isCaseInsensitive: comparison.options.contains(.caseInsensitive),
                isDiacriticInsensitive: comparison.options.contains(.diacriticInsensitive),
                isNormalized: comparison.options.contains(.normalized)))
        }
    }
}

extension PredicateExpression {
    /// One level of an expression's structure, in Core Data's terms (`NSExpression.ExpressionType`).
    public enum Structure: Sendable, Hashable {
        /// A constant value (`NSConstantValueExpressionType`).
        case constant(PredicateValue)
        /// `SELF`, the object being evaluated.
        case evaluatedObject
        /// A key path (`salary`, `department.name`, `employees.@count`), read from `base` — `nil` for the evaluated
        /// object, or an expression such as a variable in `$x.name`.
        case keyPath(String, base: PredicateExpression?)
        /// A `$VARIABLE`.
        case variable(String)
        /// A function, by Foundation's name for it: `"sum:"`, `"now"`, arithmetic as `"add:to:"`, `"from:subtract:"`,
        /// `"multiply:by:"`, `"divide:by:"`, `"raise:toPower:"`, bitwise operators as `"bitwiseAnd:with:"` and the
        /// like, `-x` as `"chs:"`, `CAST` as `"castObject:toType:"`, `a[i]` as `"objectFrom:withIndex:"` (with
        /// `FIRST`, `LAST` and `SIZE` as the strings `"FIRST"`, `"LAST"`, `"SIZE"`), `$a.$b` as `"valueForKeyPath:"`
        /// on `$a`. `target` is the object a `FUNCTION(target, "selector", …)` is sent to, or the base of a key.
        case function(String, arguments: [PredicateExpression], target: PredicateExpression?)
        /// A literal list of expressions that are not all constants: `{a, b + 1}`.
        case aggregate([PredicateExpression])
        /// `SUBQUERY(collection, $variable, predicate)`.
        case subquery(collection: PredicateExpression, variable: String, predicate: FetchPredicate)
        /// `TERNARY(predicate, whenTrue, whenFalse)` (`NSConditionalExpressionType`).
        case conditional(FetchPredicate, whenTrue: PredicateExpression, whenFalse: PredicateExpression)
        /// `$variable := value`.
        case assignment(variable: String, value: PredicateExpression)
    }

    /// The expression's top level.
    public var structure: Structure {
        func wrap(_ nodes: [ExpressionNode]) -> [PredicateExpression] { nodes.map { PredicateExpression(node: $0) } }
        switch node {
        case .constant(let value): return .constant(value)
        case .evaluatedObject: return .evaluatedObject
        case .keyPath(let path): return .keyPath(path, base: nil)
        case .member(let base, let path): return .keyPath(path, base: PredicateExpression(node: base))
        case .variable(let name): return .variable(name)
        case .aggregate(let elements): return .aggregate(wrap(elements))
        case .function("CAST", let arguments): return .function("castObject:toType:", arguments: wrap(arguments), target: nil)
        case .function(let name, let arguments):
            let foundationName = arguments.isEmpty ? name : name == "randomn" ? "random:" : name + ":"
            return .function(foundationName, arguments: wrap(arguments), target: nil)
        case .method(let target, let selector, let arguments):
            return .function(selector, arguments: wrap(arguments), target: PredicateExpression(node: target))
        case .arithmetic(let op, let lhs, let rhs):
            return .function(op.foundationFunctionName, arguments: wrap([lhs, rhs]), target: nil)
        case .negate(let operand):
            return .function("chs:", arguments: wrap([operand]), target: nil)
        case .index(let base, let selector):
            let index: ExpressionNode
            switch selector {
            case .first: index = .constant(.string("FIRST"))
            case .last: index = .constant(.string("LAST"))
            case .size: index = .constant(.string("SIZE"))
            case .expression(let expression): index = expression
            case .key(let key): return .function("valueForKeyPath:", arguments: wrap([key]), target: PredicateExpression(node: base))
            }
            return .function("objectFrom:withIndex:", arguments: wrap([base, index]), target: nil)
        case .subquery(let collection, let variable, let condition):
            return .subquery(collection: PredicateExpression(node: collection), variable: variable, predicate: FetchPredicate(node: condition))
        case .assignment(let name, let value):
            return .assignment(variable: name, value: PredicateExpression(node: value))
        case .ternary(let condition, let whenTrue, let whenFalse):
            return .conditional(FetchPredicate(node: condition), whenTrue: PredicateExpression(node: whenTrue),
                                whenFalse: PredicateExpression(node: whenFalse))
        }
    }

    /// The key path, when the expression is one read from the evaluated object (`department.name`).
    public var keyPath: String? {
        if case .keyPath(let path) = node { path } else { nil }
    }

    /// The value, when the expression is a constant.
    public var constantValue: PredicateValue? {
        if case .constant(let value) = node { value } else { nil }
    }

    /// The variable's name (without `$`), when the expression is a variable.
    public var variableName: String? {
        if case .variable(let name) = node { name } else { nil }
    }

    /// Foundation's name for the function, when the expression is one (see ``Structure/function(_:arguments:target:)``).
    public var functionName: String? {
        if case .function(let name, _, _) = structure { name } else { nil }
    }
}

extension ArithmeticOperator {
    /// The name Foundation gives the function an operator stands for.
    var foundationFunctionName: String {
        switch self {
        case .add: "add:to:"
        case .subtract: "from:subtract:"
        case .multiply: "multiply:by:"
        case .divide: "divide:by:"
        case .power: "raise:toPower:"
        case .bitwiseAnd: "bitwiseAnd:with:"
        case .bitwiseOr: "bitwiseOr:with:"
        case .bitwiseXor: "bitwiseXor:with:"
        case .leftShift: "leftshift:by:"
        case .rightShift: "rightshift:by:"
        }
    }
}

// MARK: - Evaluating against plain values

extension FetchPredicate {
    /// Whether a plain value — a string, a number, a date, an array, a dictionary, an optional that is `nil` —
    /// satisfies the predicate, with `SELF` standing for it: `SELF BEGINSWITH "a"` with `"apple"`, `SELF.@count > 2`
    /// with `[1, 2, 3]`, `SELF == nil` with `nil as String?` (Foundation's `evaluate(with:)` on any object).
    ///
    /// Objects that answer keys (managed objects, `[String: PredicateValue]`) go to
    /// ``evaluate(with:variables:)-(some KeyValueReadable,_)``, which this overload yields to.
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    @_disfavoredOverload
    public func evaluate(with value: some PredicateArgument, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> Bool {
        try checkDepth()
        var evaluator = PredicateEvaluator(root: value.predicateValue, variables: variables, memberships: memberships)
        return try evaluator.evaluate(node)
    }
}

extension PredicateExpression {
    /// The expression's value with `SELF` standing for a plain value (`SELF.length` with `"abc"` is 3).
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    @_disfavoredOverload
    public func value(for value: some PredicateArgument, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> PredicateValue {
        var evaluator = PredicateEvaluator(root: value.predicateValue, variables: variables)
        return try evaluator.value(node)
    }
}

extension Sequence where Element: KeyValueReadable {
    /// The elements that satisfy `predicate`, in order (Foundation's `filtered(using:)`).
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    public func filtered(using predicate: FetchPredicate, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> [Element] {
        var kept: [Element] = []
        for element in self where try predicate.evaluate(with: element, variables: variables) { kept.append(element) }
        return kept
    }
}

extension Sequence where Element: PredicateArgument {
    /// The elements that satisfy `predicate`, with `SELF` standing for each (`["apple", "pear"]` filtered by
    /// `SELF BEGINSWITH "a"` is `["apple"]`), in order (Foundation's `filtered(using:)`).
    ///
    /// - Throws: ``PredicateEvaluationError`` when values do not fit an operation.
    @_disfavoredOverload
    public func filtered(using predicate: FetchPredicate, variables: [String: PredicateValue] = [:]) throws(PredicateEvaluationError) -> [Element] {
        try predicate.checkDepth()
        var kept: [Element] = []
        for element in self {
            var evaluator = PredicateEvaluator(root: element.predicateValue, variables: variables, memberships: predicate.memberships)
            if try evaluator.evaluate(predicate.node) { kept.append(element) }
        }
        return kept
    }
}
