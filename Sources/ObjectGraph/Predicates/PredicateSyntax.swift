/// The syntax tree of predicates, shared with the query planner (`package` access): a planner pattern-matches these
/// enums directly, while users hold the opaque ``FetchPredicate`` and ``PredicateExpression``.

/// A comparison's operator, as the predicate text writes it.
public enum ComparisonOperator: String, Sendable, Hashable, CaseIterable {
    /// `<`
    case lessThan = "<"
    /// `<=`
    case lessThanOrEqual = "<="
    /// `>`
    case greaterThan = ">"
    /// `>=`
    case greaterThanOrEqual = ">="
    /// `==`
    case equal = "=="
    /// `!=`
    case notEqual = "!="
    /// `MATCHES`: a regular expression that matches the whole string.
    case matches = "MATCHES"
    /// `LIKE`: a pattern with `*` and `?` wildcards.
    case like = "LIKE"
    /// `BEGINSWITH`
    case beginsWith = "BEGINSWITH"
    /// `ENDSWITH`
    case endsWith = "ENDSWITH"
    /// `IN`: the left value is among the right collection's (or a substring of the right string).
    case `in` = "IN"
    /// `CONTAINS`: the left collection holds the right value (or the left string contains the right one).
    case contains = "CONTAINS"
    /// `BETWEEN`: the left value lies within the right `{low, high}`.
    case between = "BETWEEN"
    /// `UTI-CONFORMS-TO`
    case utiConformsTo = "UTI-CONFORMS-TO"
    /// `UTI-EQUALS`
    case utiEquals = "UTI-EQUALS"
}

/// How a comparison treats a collection on its left: `ANY`/`SOME`, `ALL`, `NONE`, or the value as it is.
public enum ComparisonModifier: String, Sendable, Hashable {
    /// The left value as it is (a to-many key path still means ANY of its values).
    case direct = ""
    /// `ANY` (or `SOME`): some element satisfies the comparison.
    case any = "ANY"
    /// `ALL`: every element does.
    case all = "ALL"
    /// `NONE`: no element does.
    case none = "NONE"
}

/// String comparison options: `[c]`, `[d]`, `[n]`.
package struct ComparisonOptions: OptionSet, Sendable, Hashable {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }
    package static let caseInsensitive = ComparisonOptions(rawValue: 1)
    package static let diacriticInsensitive = ComparisonOptions(rawValue: 2)
    package static let normalized = ComparisonOptions(rawValue: 4)

    /// The bracketed form, `[cd]`, or an empty string.
    var text: String {
        guard !isEmpty else { return "" }
        return "[" + (contains(.caseInsensitive) ? "c" : "") + (contains(.diacriticInsensitive) ? "d" : "")
            + (contains(.normalized) ? "n" : "") + "]"
    }
}

/// Arithmetic and bitwise operators.
package enum ArithmeticOperator: String, Sendable, Hashable, CaseIterable {
    case add = "+"
    case subtract = "-"
    case multiply = "*"
    case divide = "/"
    case power = "**"
    case bitwiseAnd = "&"
    case bitwiseOr = "|"
    case bitwiseXor = "^"
    case leftShift = "<<"
    case rightShift = ">>"
}

/// What goes between the brackets of an index expression.
package indirect enum IndexSelector: Sendable, Hashable {
    case first
    case last
    case size
    case expression(ExpressionNode)
    /// A key computed when the predicate is evaluated, written after a dot: `$a.$b`.
    case key(ExpressionNode)
}

/// A predicate.
package indirect enum PredicateNode: Sendable, Hashable {
    /// `TRUEPREDICATE` or `FALSEPREDICATE`.
    case constant(Bool)
    /// `lhs op rhs`, with a modifier and options.
    case comparison(ComparisonNode)
    /// All of the operands (two or more, flattened).
    case and([PredicateNode])
    /// Any of the operands (two or more, flattened).
    case or([PredicateNode])
    /// The negation.
    case not(PredicateNode)
}

/// A comparison predicate.
package struct ComparisonNode: Sendable, Hashable {
    package var modifier: ComparisonModifier
    package var lhs: ExpressionNode
    package var op: ComparisonOperator
    package var options: ComparisonOptions
    package var rhs: ExpressionNode

    package init(_ modifier: ComparisonModifier = .direct, _ lhs: ExpressionNode, _ op: ComparisonOperator,
                 _ rhs: ExpressionNode, options: ComparisonOptions = []) {
        self.modifier = modifier
        self.lhs = lhs
        self.op = op
        self.options = options
        self.rhs = rhs
    }
}

/// An expression: what a comparison compares.
package indirect enum ExpressionNode: Sendable, Hashable {
    /// A constant value (a literal or a bound format argument).
    case constant(PredicateValue)
    /// `SELF`: the evaluated object.
    case evaluatedObject
    /// A key path from the evaluated object, dot-separated, possibly with collection operators (`a.@sum.b`).
    case keyPath(String)
    /// A key path applied to another expression's value (`$x.name`, `SUBQUERY(…).@count`, `{1,2}.@count`).
    case member(ExpressionNode, String)
    /// `$NAME`.
    case variable(String)
    /// `{a, b, c}` with non-constant elements (constant-only lists fold to an array constant).
    case aggregate([ExpressionNode])
    /// `name(arguments)`: a built-in function (`sum`, `sqrt`, `now`, …).
    case function(String, [ExpressionNode])
    /// `FUNCTION(target, "selector", arguments…)`.
    case method(ExpressionNode, String, [ExpressionNode])
    /// `lhs op rhs`.
    case arithmetic(ArithmeticOperator, ExpressionNode, ExpressionNode)
    /// `-operand`.
    case negate(ExpressionNode)
    /// `collection[selector]`.
    case index(ExpressionNode, IndexSelector)
    /// `SUBQUERY(collection, $variable, predicate)`.
    case subquery(ExpressionNode, String, PredicateNode)
    /// `$variable := value`.
    case assignment(String, ExpressionNode)
    /// `TERNARY(predicate, whenTrue, whenFalse)`.
    case ternary(PredicateNode, ExpressionNode, ExpressionNode)
}

/// A predicate in the NSPredicate format language, parsed once, printable as Core Data prints it, and evaluable
/// against anything that answers key paths.
///
/// ```swift
/// let adults = try FetchPredicate(format: "age >= %@ AND name BEGINSWITH[cd] %@", 18, "a")
/// try adults.evaluate(with: ["age": 30, "name": "Ábel"])   // true
/// adults.predicateFormat                                    // age >= 18 AND name BEGINSWITH[cd] "a"
/// ```
///
/// The type is named so that it does not clash with Foundation's `Predicate`.
public struct FetchPredicate: Sendable, Hashable {
    package let node: PredicateNode
    /// The depth of `node`'s tree, counted up to one past ``maximumDepth``.
    let depth: Int
    /// Its `IN` collections of constants, indexed (see ``PredicateMembership``).
    let memberships: PredicateMemberships?

    package init(node: PredicateNode) {
        self.node = node
        self.depth = node.depth(upTo: Self.maximumDepth)
        let memberships = depth > Self.maximumDepth ? nil : PredicateMemberships(node)
        self.memberships = memberships?.isEmpty == false ? memberships : nil
    }

    /// Equal when the trees are (the indexes are made from them).
    public static func == (lhs: FetchPredicate, rhs: FetchPredicate) -> Bool { lhs.node == rhs.node }

    /// Hashes the tree.
    public func hash(into hasher: inout Hasher) { hasher.combine(node) }

    /// Whether the predicate nests deeper than ``maximumDepth`` (possible only when built in code): such a predicate
    /// is refused wherever it would be walked.
    package var isTooDeep: Bool { depth > Self.maximumDepth }

    /// The predicate that every object satisfies (`TRUEPREDICATE`).
    public static let truePredicate = FetchPredicate(node: .constant(true))

    /// The predicate that no object satisfies (`FALSEPREDICATE`).
    public static let falsePredicate = FetchPredicate(node: .constant(false))

    /// A predicate satisfied when every one of `predicates` is (`TRUEPREDICATE` for none).
    public static func and(_ predicates: [FetchPredicate]) -> FetchPredicate {
        FetchPredicate(node: PredicateNode.combine(predicates.map(\.node), and: true))
    }

    /// A predicate satisfied when any one of `predicates` is (`FALSEPREDICATE` for none).
    public static func or(_ predicates: [FetchPredicate]) -> FetchPredicate {
        FetchPredicate(node: PredicateNode.combine(predicates.map(\.node), and: false))
    }

    /// A predicate satisfied exactly when `predicate` is not.
    public static func not(_ predicate: FetchPredicate) -> FetchPredicate {
        FetchPredicate(node: .not(predicate.node))
    }
}

/// An expression of the predicate language on its own — what one side of a comparison computes — for
/// `propertiesToFetch`-style uses and for evaluating expressions directly.
public struct PredicateExpression: Sendable, Hashable {
    package let node: ExpressionNode

    package init(node: ExpressionNode) {
        self.node = node
    }

    /// An expression for a key path from the evaluated object.
    public static func keyPath(_ keyPath: String) -> PredicateExpression { PredicateExpression(node: .keyPath(keyPath)) }

    /// An expression for a constant value.
    public static func constant(_ value: PredicateValue) -> PredicateExpression { PredicateExpression(node: .constant(value)) }
}

extension PredicateNode {
    /// Joins operands with AND or OR, flattening nested ones of the same kind.
    static func combine(_ operands: [PredicateNode], and: Bool) -> PredicateNode {
        var flat: [PredicateNode] = []
        for operand in operands {
            switch (operand, and) {
            case (.and(let inner), true), (.or(let inner), false): flat += inner
            default: flat.append(operand)
            }
        }
        if flat.isEmpty { return .constant(and) }
        if flat.count == 1 { return flat[0] }
        return and ? .and(flat) : .or(flat)
    }
}
