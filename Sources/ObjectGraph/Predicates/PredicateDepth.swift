/// How deep a predicate's tree may nest, and how deep one is.
///
/// Parsing, printing, hashing, evaluating and planning a predicate each recurse once per level of its tree, so a
/// predicate nested thousands of levels deep — `((((…))))` from an untrusted source, or a long `a + 1 + 1 + …`
/// chain — would overflow the stack and kill the process. As SQLite bounds an expression's depth
/// (`SQLITE_MAX_EXPR_DEPTH`), predicates are bounded to ``FetchPredicate/maximumDepth`` levels: the parser refuses
/// deeper text with a ``PredicateSyntaxError`` at the place it crossed the limit, and a deeper predicate built in
/// code is refused when it is evaluated or fetched with.
extension FetchPredicate {
    /// The most levels a predicate's tree may nest: each parenthesis, `NOT`, operator, comparison, function call and
    /// key path step of a collection counts one. Real predicates rarely pass 10.
    public static let maximumDepth = 100
}

extension PredicateNode {
    /// The number of levels of the tree, counted only up to `limit + 1` (so the count never recurses deeper).
    func depth(upTo limit: Int) -> Int {
        guard limit >= 0 else { return 1 }
        switch self {
        case .constant: return 1
        case .comparison(let comparison):
            return 1 + max(comparison.lhs.depth(upTo: limit - 1), comparison.rhs.depth(upTo: limit - 1))
        case .and(let operands), .or(let operands):
            var deepest = 0
            for operand in operands where deepest <= limit - 1 { deepest = max(deepest, operand.depth(upTo: limit - 1)) }
            return 1 + deepest
        case .not(let operand):
            return 1 + operand.depth(upTo: limit - 1)
        }
    }
}

extension ExpressionNode {
    /// The number of levels of the tree, counted only up to `limit + 1` (so the count never recurses deeper).
    func depth(upTo limit: Int) -> Int {
        guard limit >= 0 else { return 1 }
        let below = limit - 1
        func deepest(_ nodes: [ExpressionNode]) -> Int {
            var deepest = 0
            for node in nodes where deepest <= below { deepest = max(deepest, node.depth(upTo: below)) }
            return deepest
        }
        switch self {
        case .constant, .evaluatedObject, .keyPath, .variable:
            return 1
        case .member(let base, _), .negate(let base), .assignment(_, let base):
            return 1 + base.depth(upTo: below)
        case .aggregate(let elements), .function(_, let elements):
            return 1 + deepest(elements)
        case .method(let target, _, let arguments):
            return 1 + deepest([target] + arguments)
        case .arithmetic(_, let lhs, let rhs):
            return 1 + deepest([lhs, rhs])
        case .index(let base, let selector):
            if case .expression(let index) = selector { return 1 + deepest([base, index]) }
            if case .key(let key) = selector { return 1 + deepest([base, key]) }
            return 1 + base.depth(upTo: below)
        case .subquery(let collection, _, let condition):
            return 1 + max(collection.depth(upTo: below), condition.depth(upTo: below))
        case .ternary(let condition, let whenTrue, let whenFalse):
            return 1 + max(condition.depth(upTo: below), deepest([whenTrue, whenFalse]))
        }
    }
}
