extension FetchPredicate {
    /// The names of the predicate's `$VARIABLES` that need a value (variables bound by `SUBQUERY` or `:=` inside it
    /// do not count).
    public var variableNames: Set<String> {
        var names = Set<String>()
        node.collectVariables(into: &names, bound: [])
        return names
    }

    /// A copy with each `$VARIABLE` replaced by its value from `variables`.
    ///
    /// A key path that merely looks like a variable (one given through `%K`) is left alone.
    ///
    /// - Throws: ``PredicateEvaluationError`` with ``PredicateEvaluationError/Code/missingVariable`` naming the
    ///   first variable that has no value.
    public func withSubstitutionVariables(_ variables: [String: PredicateValue]) throws(PredicateEvaluationError) -> FetchPredicate {
        FetchPredicate(node: try node.substituting(variables, bound: []))
    }
}

extension PredicateNode {
    func substituting(_ values: [String: PredicateValue], bound: Set<String>) throws(PredicateEvaluationError) -> PredicateNode {
        switch self {
        case .constant: return self
        case .comparison(var comparison):
            comparison.lhs = try comparison.lhs.substituting(values, bound: bound)
            comparison.rhs = try comparison.rhs.substituting(values, bound: bound)
            return .comparison(comparison)
        case .and(let operands):
            var result: [PredicateNode] = []
            for operand in operands { result.append(try operand.substituting(values, bound: bound)) }
            return .and(result)
        case .or(let operands):
            var result: [PredicateNode] = []
            for operand in operands { result.append(try operand.substituting(values, bound: bound)) }
            return .or(result)
        case .not(let operand):
            return .not(try operand.substituting(values, bound: bound))
        }
    }

    func collectVariables(into names: inout Set<String>, bound: Set<String>) {
        switch self {
        case .constant: break
        case .comparison(let comparison):
            comparison.lhs.collectVariables(into: &names, bound: bound)
            comparison.rhs.collectVariables(into: &names, bound: bound)
        case .and(let operands), .or(let operands):
            for operand in operands { operand.collectVariables(into: &names, bound: bound) }
        case .not(let operand):
            operand.collectVariables(into: &names, bound: bound)
        }
    }
}

extension ExpressionNode {
    func substituting(_ values: [String: PredicateValue], bound: Set<String>) throws(PredicateEvaluationError) -> ExpressionNode {
        func each(_ nodes: [ExpressionNode]) throws(PredicateEvaluationError) -> [ExpressionNode] {
            var result: [ExpressionNode] = []
            for node in nodes { result.append(try node.substituting(values, bound: bound)) }
            return result
        }
        switch self {
        case .constant, .evaluatedObject, .keyPath:
            return self
        case .variable(let name):
            if bound.contains(name) { return self }
            guard let value = values[name] else {
                throw PredicateEvaluationError(code: .missingVariable, message: "no value was given for the variable $\(name)", fragment: format)
            }
            return .constant(value)
        case .member(let base, let path): return .member(try base.substituting(values, bound: bound), path)
        case .aggregate(let elements): return .aggregate(try each(elements))
        case .function(let name, let arguments): return .function(name, try each(arguments))
        case .method(let target, let selector, let arguments):
            return .method(try target.substituting(values, bound: bound), selector, try each(arguments))
        case .arithmetic(let op, let lhs, let rhs):
            return .arithmetic(op, try lhs.substituting(values, bound: bound), try rhs.substituting(values, bound: bound))
        case .negate(let operand): return .negate(try operand.substituting(values, bound: bound))
        case .index(let base, let selector):
            let newBase = try base.substituting(values, bound: bound)
            switch selector {
            case .expression(let inner):
                return .index(newBase, .expression(try inner.substituting(values, bound: bound)))
            case .key(let inner):
                return .index(newBase, .key(try inner.substituting(values, bound: bound)))
            case .first, .last, .size:
                return .index(newBase, selector)
            }
        case .subquery(let collection, let variable, let condition):
            return .subquery(try collection.substituting(values, bound: bound), variable,
                             try condition.substituting(values, bound: bound.union([variable])))
        case .assignment(let name, let value):
            return .assignment(name, try value.substituting(values, bound: bound.union([name])))
        case .ternary(let condition, let whenTrue, let whenFalse):
            return .ternary(try condition.substituting(values, bound: bound), try whenTrue.substituting(values, bound: bound),
                            try whenFalse.substituting(values, bound: bound))
        }
    }

    func collectVariables(into names: inout Set<String>, bound: Set<String>) {
        switch self {
        case .constant, .evaluatedObject, .keyPath: break
        case .variable(let name): if !bound.contains(name) { names.insert(name) }
        case .member(let base, _), .negate(let base): base.collectVariables(into: &names, bound: bound)
        case .aggregate(let elements), .function(_, let elements):
            for element in elements { element.collectVariables(into: &names, bound: bound) }
        case .method(let target, _, let arguments):
            target.collectVariables(into: &names, bound: bound)
            for argument in arguments { argument.collectVariables(into: &names, bound: bound) }
        case .arithmetic(_, let lhs, let rhs):
            lhs.collectVariables(into: &names, bound: bound)
            rhs.collectVariables(into: &names, bound: bound)
        case .index(let base, let selector):
            base.collectVariables(into: &names, bound: bound)
            if case .expression(let inner) = selector { inner.collectVariables(into: &names, bound: bound) }
            if case .key(let inner) = selector { inner.collectVariables(into: &names, bound: bound) }
        case .subquery(let collection, let variable, let condition):
            collection.collectVariables(into: &names, bound: bound)
            condition.collectVariables(into: &names, bound: bound.union([variable]))
        case .assignment(let name, let value):
            value.collectVariables(into: &names, bound: bound.union([name]))
        case .ternary(let condition, let whenTrue, let whenFalse):
            condition.collectVariables(into: &names, bound: bound)
            whenTrue.collectVariables(into: &names, bound: bound)
            whenFalse.collectVariables(into: &names, bound: bound)
        }
    }
}

extension FetchRequestTemplate {
    /// The template's predicate with its `$VARIABLES` filled in from `variables` (every object, when the template
    /// has no predicate).
    ///
    /// - Throws: ``PredicateSyntaxError`` if the template's text does not parse, ``PredicateEvaluationError`` if a
    ///   variable has no value.
    public func predicate(substitutionVariables variables: [String: PredicateValue] = [:]) throws -> FetchPredicate {
        guard let predicateFormat else { return .truePredicate }
        return try FetchPredicate(format: predicateFormat).withSubstitutionVariables(variables)
    }
}
