import Foundation

/// A recursive-descent parser for the predicate format language (`Docs/PREDICATES.md` in the shared design folder
/// lists the grammar). Parentheses are ambiguous between a grouped predicate and a grouped expression, so a primary
/// predicate is tried as a comparison first and, failing that, as `( predicate )`; the error reported is the one
/// that got furthest.
struct PredicateParser {
    private let text: String
    private var tokens: [PredicateToken]
    private var index = 0
    private let arguments: [PredicateValue]
    private var argumentIndex = 0
    /// How many recursive productions are open: bounded by ``FetchPredicate/maximumDepth`` so that deeply nested
    /// text is an error, not a stack overflow.
    private var nesting = 0
    /// The deepest ``nesting`` (counting the depth of nodes built by loops) the parse has reached since it was last
    /// reset: what a memoized parse needs of the levels above it.
    private var deepest = 0
    /// Whether the depth limit has stopped a reading since this was last reset: such a parse may go differently at a
    /// shallower nesting.
    private var hitDepthLimit = false
    /// What ``primaryPredicate()`` made of the text at a `(` (keyed by token and argument index): its two readings
    /// — a grouped predicate, or an expression on a comparison's left — are tried one after the other, and without
    /// this each `(` nested in a `TERNARY` or `SUBQUERY` inside another would double the work (found by fuzzing:
    /// 150 characters took minutes).
    private var parenthesised: [Int: Parenthesised] = [:]

    private struct Parenthesised {
        let result: Result<(node: PredicateNode, end: Int, endArgument: Int), PredicateSyntaxError>
        /// The nesting it was parsed at.
        let nesting: Int
        /// How many levels the parse went below that.
        let depth: Int
        /// Whether the depth limit stopped a reading inside it. Deeper, a reading stopped so is stopped again (and
        /// one that succeeded may be); shallower, it might not be, so the text is read again there.
        let limited: Bool
    }

    /// The built-in functions of `name(arguments)` calls.
    static let functions: Set<String> = [
        "sum", "count", "min", "max", "average", "median", "mode", "stddev", "sqrt", "log", "ln", "exp", "floor",
        "ceiling", "abs", "trunc", "random", "randomn", "now",
    ]

    /// Words that cannot be key path names unless escaped with `#`.
    static let reservedWords: Set<String> = [
        "AND", "OR", "IN", "NOT", "ALL", "ANY", "SOME", "NONE", "LIKE", "CASEINSENSITIVE", "CI", "MATCHES", "CONTAINS",
        "BEGINSWITH", "ENDSWITH", "BETWEEN", "NULL", "NIL", "SELF", "TRUE", "YES", "FALSE", "NO", "FIRST", "LAST", "SIZE",
        "ANYKEY", "SUBQUERY", "FETCH", "CAST", "TRUEPREDICATE", "FALSEPREDICATE", "UTI-CONFORMS-TO", "UTI-EQUALS",
    ]

    private init(text: String, tokens: [PredicateToken], arguments: [PredicateValue]) {
        self.text = text
        self.tokens = tokens
        self.arguments = arguments
    }

    /// Parses a whole predicate.
    static func parsePredicate(_ text: String, arguments: [PredicateValue]) throws(PredicateSyntaxError) -> PredicateNode {
        var parser = PredicateParser(text: text, tokens: try PredicateLexer.tokenize(text), arguments: arguments)
        let node = try parser.predicate()
        try parser.finish()
        if node.depth(upTo: FetchPredicate.maximumDepth) > FetchPredicate.maximumDepth { throw parser.tooDeep() }
        return node
    }

    /// Parses a whole expression.
    static func parseExpression(_ text: String, arguments: [PredicateValue]) throws(PredicateSyntaxError) -> ExpressionNode {
        var parser = PredicateParser(text: text, tokens: try PredicateLexer.tokenize(text), arguments: arguments)
        let node = try parser.expression()
        try parser.finish()
        if node.depth(upTo: FetchPredicate.maximumDepth) > FetchPredicate.maximumDepth { throw parser.tooDeep() }
        return node
    }

    private mutating func finish() throws(PredicateSyntaxError) {
        guard current.kind == .end else {
            throw error("expected the end of the predicate (an AND or OR is missing?)")
        }
        // Arguments beyond those the text uses are ignored, as Foundation ignores them.
    }

    // MARK: - Tokens

    private var current: PredicateToken { tokens[index] }

    private func error(_ message: String, at token: PredicateToken? = nil) -> PredicateSyntaxError {
        let token = token ?? current
        return PredicateSyntaxError(text: text, offset: token.offset, found: token.display, message: message)
    }

    private mutating func advance() { if index < tokens.count - 1 { index += 1 } }

    private mutating func accept(_ symbol: String) -> Bool {
        guard current.isSymbol(symbol) else { return false }
        advance()
        return true
    }

    private mutating func acceptKeyword(_ word: String) -> Bool {
        guard current.isKeyword(word) else { return false }
        advance()
        return true
    }

    private mutating func expect(_ symbol: String, _ context: String) throws(PredicateSyntaxError) {
        guard accept(symbol) else { throw error("expected \"\(symbol)\" \(context)") }
    }

    // MARK: - Predicates

    /// Enters one level of recursion, or throws where the text nests deeper than a predicate may.
    private mutating func enter() throws(PredicateSyntaxError) {
        nesting += 1
        deepest = max(deepest, nesting)
        if nesting > FetchPredicate.maximumDepth {
            hitDepthLimit = true
            throw tooDeep()
        }
    }

    private func tooDeep(at token: PredicateToken? = nil) -> PredicateSyntaxError {
        error("the predicate nests more than \(FetchPredicate.maximumDepth) levels deep (parentheses, NOTs, operators and calls each count one); write it flatter", at: token)
    }

    /// Throws when a node built by a loop (an operator chain, an index chain) makes the tree deeper than allowed.
    private mutating func checkDepth(_ node: ExpressionNode, at token: PredicateToken) throws(PredicateSyntaxError) {
        let depth = nesting + node.depth(upTo: FetchPredicate.maximumDepth)
        deepest = max(deepest, depth)
        if depth > FetchPredicate.maximumDepth {
            hitDepthLimit = true
            throw tooDeep(at: token)
        }
    }

    private mutating func predicate() throws(PredicateSyntaxError) -> PredicateNode {
        try enter()
        defer { nesting -= 1 }
        var operands = [try conjunction()]
        while acceptKeyword("OR") || accept("||") { operands.append(try conjunction()) }
        return operands.count == 1 ? operands[0] : PredicateNode.combine(operands, and: false)
    }

    private mutating func conjunction() throws(PredicateSyntaxError) -> PredicateNode {
        var operands = [try negation()]
        while acceptKeyword("AND") || accept("&&") { operands.append(try negation()) }
        return operands.count == 1 ? operands[0] : PredicateNode.combine(operands, and: true)
    }

    private mutating func negation() throws(PredicateSyntaxError) -> PredicateNode {
        guard acceptKeyword("NOT") || accept("!") else { return try primaryPredicate() }
        try enter()
        defer { nesting -= 1 }
        return .not(try negation())
    }

    private mutating func primaryPredicate() throws(PredicateSyntaxError) -> PredicateNode {
        if acceptKeyword("TRUEPREDICATE") { return .constant(true) }
        if acceptKeyword("FALSEPREDICATE") { return .constant(false) }
        for (word, modifier) in [("ANY", ComparisonModifier.any), ("SOME", .any), ("ALL", .all), ("NONE", .none)] where acceptKeyword(word) {
            return .comparison(try comparison(modifier))
        }
        guard current.isSymbol("(") else { return .comparison(try comparison(.direct)) }
        let key = index << 32 | argumentIndex
        // A reading found at another nesting holds here unless the depth limit could change it: a failure the limit
        // caused may not fail shallower, and a success too deep here may have another reading that fits.
        if let known = parenthesised[key], !known.limited || nesting >= known.nesting {
            switch known.result {
            case .failure(let error):
                if known.limited { hitDepthLimit = true }
                throw error
            case .success(let parsed) where nesting + known.depth <= FetchPredicate.maximumDepth:
                if known.limited { hitDepthLimit = true }
                deepest = max(deepest, nesting + known.depth)
                (index, argumentIndex) = (parsed.end, parsed.endArgument)
                return parsed.node
            case .success:
                break
            }
        }
        let (outerDeepest, outerHit) = (deepest, hitDepthLimit)
        (deepest, hitDepthLimit) = (nesting, false)
        let start = nesting
        let result: Result<(node: PredicateNode, end: Int, endArgument: Int), PredicateSyntaxError>
        do {
            let node = try parenthesisedPredicate()
            result = .success((node, index, argumentIndex))
        } catch {
            result = .failure(error)
        }
        parenthesised[key] = Parenthesised(result: result, nesting: start, depth: deepest - start, limited: hitDepthLimit)
        (deepest, hitDepthLimit) = (max(outerDeepest, deepest), outerHit || hitDepthLimit)
        return try result.get().node
    }

    /// A `(` opens either a grouped predicate or an expression on a comparison's left: both are tried.
    private mutating func parenthesisedPredicate() throws(PredicateSyntaxError) -> PredicateNode {
        let start = (index, argumentIndex)
        let asComparison: PredicateSyntaxError
        do {
            return .comparison(try comparison(.direct))
        } catch {
            asComparison = error
        }
        (index, argumentIndex) = start
        do {
            advance()
            let inner = try predicate()
            try expect(")", "to close the parenthesised predicate")
            return inner
        } catch {
            throw error.offset >= asComparison.offset ? error : asComparison
        }
    }

    private static let symbolOperators: [String: ComparisonOperator] = [
        "=": .equal, "==": .equal, "!=": .notEqual, "<>": .notEqual, "<": .lessThan, ">": .greaterThan,
        "<=": .lessThanOrEqual, "=<": .lessThanOrEqual, ">=": .greaterThanOrEqual, "=>": .greaterThanOrEqual,
    ]

    private static let wordOperators: [String: ComparisonOperator] = [
        "BETWEEN": .between, "IN": .in, "CONTAINS": .contains, "BEGINSWITH": .beginsWith, "ENDSWITH": .endsWith,
        "LIKE": .like, "MATCHES": .matches, "UTI-CONFORMS-TO": .utiConformsTo, "UTI-EQUALS": .utiEquals,
    ]

    private mutating func comparison(_ modifier: ComparisonModifier) throws(PredicateSyntaxError) -> ComparisonNode {
        let lhs = try expression()
        let operatorToken = current
        var op: ComparisonOperator?
        if case .symbol(let symbol) = operatorToken.kind { op = Self.symbolOperators[symbol] }
        if case .identifier(let word) = operatorToken.kind { op = Self.wordOperators[word.uppercased()] }
        guard let op else {
            let what = operatorToken.kind == .end ? "a comparison operator: a value on its own is not a predicate"
                : "a comparison operator (==, !=, <, <=, >, >=, BETWEEN, IN, CONTAINS, BEGINSWITH, ENDSWITH, LIKE, MATCHES)"
            throw error("expected \(what)")
        }
        advance()
        var options: ComparisonOptions = []
        if current.isSymbol("[") {
            let open = current
            advance()
            guard case .identifier(let letters) = current.kind,
                  !letters.isEmpty, letters.lowercased().allSatisfy({ "cdn".contains($0) }) else {
                throw error("expected comparison options: c, d and/or n", at: current.kind == .end ? open : current)
            }
            for letter in letters.lowercased() {
                options.insert(letter == "c" ? .caseInsensitive : letter == "d" ? .diacriticInsensitive : .normalized)
            }
            advance()
            try expect("]", "to close the comparison options")
        }
        let rhs = try expression()
        return ComparisonNode(modifier, lhs, op, rhs, options: options)
    }

    // MARK: - Expressions

    private mutating func expression() throws(PredicateSyntaxError) -> ExpressionNode {
        try enter()
        defer { nesting -= 1 }
        if case .variable(let name) = current.kind, tokens[index + 1].isSymbol(":=") {
            advance()
            advance()
            return .assignment(name, try expression())
        }
        return try binary(above: 0)
    }

    /// Binary operators and their precedence, lowest 1; `**` is handled separately (right-associative).
    private static let binaryOperators: [String: (op: ArithmeticOperator, precedence: Int)] = [
        "|": (.bitwiseOr, 1), "^": (.bitwiseXor, 2), "&": (.bitwiseAnd, 3), "<<": (.leftShift, 4), ">>": (.rightShift, 4),
        "+": (.add, 5), "-": (.subtract, 5), "*": (.multiply, 6), "/": (.divide, 6),
    ]

    /// Operands joined by binary operators binding tighter than `precedence`, left-associative (precedence
    /// climbing: one frame per operator level actually used, so a parenthesis costs little stack).
    private mutating func binary(above precedence: Int) throws(PredicateSyntaxError) -> ExpressionNode {
        var lhs = try power()
        while case .symbol(let symbol) = current.kind, let (op, level) = Self.binaryOperators[symbol], level > precedence {
            let token = current
            advance()
            lhs = .arithmetic(op, lhs, try binary(above: level))
            try checkDepth(lhs, at: token)
        }
        return lhs
    }

    private mutating func power() throws(PredicateSyntaxError) -> ExpressionNode {
        let base = try unary()
        guard accept("**") else { return base }
        try enter()
        defer { nesting -= 1 }
        return .arithmetic(.power, base, try power())
    }

    private mutating func unary() throws(PredicateSyntaxError) -> ExpressionNode {
        guard accept("-") else { return try postfix() }
        try enter()
        defer { nesting -= 1 }
        let operand = try unary()
        switch operand {
        case .constant(.integer(let value)) where value != Int64.min: return .constant(.integer(-value))
        case .constant(.double(let value)): return .constant(.double(-value))
        case .constant(.decimal(let value)): return .constant(.decimal(-value))
        // A Boolean is the number 1 or 0 (and prints so), so `-YES` is the number -1, as `-1` parses.
        case .constant(.boolean(let value)): return .constant(.integer(value ? -1 : 0))
        default: return .negate(operand)
        }
    }

    private mutating func postfix() throws(PredicateSyntaxError) -> ExpressionNode {
        var node = try primary()
        while true {
            let token = current
            if accept(".") {
                if case .variable(let variable) = current.kind {
                    // `$a.$b`: the key is the variable's value, known only when the predicate is evaluated.
                    advance()
                    node = .index(node, .key(.variable(variable)))
                    try checkDepth(node, at: token)
                    continue
                }
                let name = try keyName()
                switch node {
                case .keyPath(let path): node = .keyPath(path + "." + name)
                case .evaluatedObject: node = .keyPath(name)
                case .member(let base, let path): node = .member(base, path + "." + name)
                default:
                    node = .member(node, name)
                    try checkDepth(node, at: token)
                }
            } else if accept("[") {
                let selector: IndexSelector
                if acceptKeyword("FIRST") { selector = .first }
                else if acceptKeyword("LAST") { selector = .last }
                else if acceptKeyword("SIZE") { selector = .size }
                else { selector = .expression(try expression()) }
                try expect("]", "to close the index")
                node = .index(node, selector)
                try checkDepth(node, at: token)
            } else {
                return node
            }
        }
    }

    /// A key name after a dot: an identifier (reserved words allowed here), `#name`, `@operator`, or `%K` (the
    /// argument's key path, as in `ANY %K.%K == %@`).
    private mutating func keyName() throws(PredicateSyntaxError) -> String {
        let token = current
        switch token.kind {
        case .identifier(let name), .escapedIdentifier(let name): advance(); return name
        case .atIdentifier(let name): advance(); return "@" + name
        case .formatSpecifier("K"):
            advance()
            guard case .string(let keyPath) = try nextArgument(for: token), !keyPath.isEmpty else {
                throw error("%K needs a key path string, but its argument is \(arguments[argumentIndex - 1].kindPhrase)", at: token)
            }
            return keyPath
        default: throw error("expected a key name after \".\"")
        }
    }

    private mutating func nextArgument(for token: PredicateToken) throws(PredicateSyntaxError) -> PredicateValue {
        guard argumentIndex < arguments.count else {
            throw error("the format needs more arguments than the \(arguments.count) given", at: token)
        }
        defer { argumentIndex += 1 }
        return arguments[argumentIndex]
    }

    private mutating func primary() throws(PredicateSyntaxError) -> ExpressionNode {
        let token = current
        switch token.kind {
        case .string(let value): advance(); return .constant(.string(value))
        case .integer(let value): advance(); return .constant(.integer(value))
        case .double(let value): advance(); return .constant(.double(value))
        case .variable(let name): advance(); return .variable(name)
        case .escapedIdentifier(let name): advance(); return .keyPath(name)
        case .atIdentifier(let name): advance(); return .keyPath("@" + name)
        case .formatSpecifier(let spec):
            advance()
            return try formatArgument(spec, token: token)
        case .symbol("("):
            advance()
            let inner = try expression()
            try expect(")", "to close the parenthesised expression")
            return inner
        case .symbol("{"):
            advance()
            var elements: [ExpressionNode] = []
            if !accept("}") {
                repeat { elements.append(try expression()) } while accept(",")
                try expect("}", "to close the list")
            }
            let constants = elements.compactMap { if case .constant(let value) = $0 { value } else { nil } }
            return constants.count == elements.count ? .constant(.array(constants)) : .aggregate(elements)
        case .identifier(let name):
            return try word(name, token: token)
        case .end:
            throw error("expected an expression")
        default:
            throw error("expected an expression")
        }
    }

    private mutating func word(_ name: String, token: PredicateToken) throws(PredicateSyntaxError) -> ExpressionNode {
        let upper = name.uppercased()
        switch upper {
        case "NULL", "NIL": advance(); return .constant(.null)
        case "TRUE", "YES": advance(); return .constant(.boolean(true))
        case "FALSE", "NO": advance(); return .constant(.boolean(false))
        case "SELF": advance(); return .evaluatedObject
        case "SUBQUERY":
            advance()
            try expect("(", "after SUBQUERY")
            let collection = try expression()
            try expect(",", "after the SUBQUERY's collection")
            guard case .variable(let variable) = current.kind else { throw error("expected the SUBQUERY's $variable") }
            advance()
            try expect(",", "after the SUBQUERY's variable")
            let condition = try predicate()
            try expect(")", "to close the SUBQUERY")
            return .subquery(collection, variable, condition)
        case "FUNCTION" where tokens[index + 1].isSymbol("("):
            advance()
            try expect("(", "after FUNCTION")
            let target = try expression()
            try expect(",", "after FUNCTION's target")
            guard case .string(let selector) = current.kind else { throw error("expected FUNCTION's selector as a string") }
            advance()
            var arguments: [ExpressionNode] = []
            while accept(",") { arguments.append(try expression()) }
            try expect(")", "to close FUNCTION")
            return .method(target, selector, arguments)
        case "TERNARY" where tokens[index + 1].isSymbol("("):
            advance()
            try expect("(", "after TERNARY")
            let condition = try predicate()
            try expect(",", "after TERNARY's condition")
            let whenTrue = try expression()
            try expect(",", "after TERNARY's first value")
            let whenFalse = try expression()
            try expect(")", "to close TERNARY")
            return .ternary(condition, whenTrue, whenFalse)
        case "CAST":
            advance()
            try expect("(", "after CAST")
            let value = try expression()
            try expect(",", "after the value to CAST")
            let typeToken = current
            guard case .string(let type) = typeToken.kind else { throw error("expected the type to CAST to, as a string") }
            advance()
            try expect(")", "to close CAST")
            return try cast(value, to: type, token: typeToken)
        default:
            break
        }
        if Self.reservedWords.contains(upper) {
            throw error("expected an expression; \(upper) is a reserved word (write #\(name) for a key named so)")
        }
        advance()
        if current.isSymbol("(") {
            guard Self.functions.contains(name) else {
                throw error("\"\(name)\" is not a known function (\(Self.functions.sorted().joined(separator: ", ")))", at: token)
            }
            advance()
            var arguments: [ExpressionNode] = []
            if !accept(")") {
                repeat { arguments.append(try expression()) } while accept(",")
                try expect(")", "to close the call to \(name)")
            }
            return .function(name, arguments)
        }
        return .keyPath(name)
    }

    private mutating func formatArgument(_ spec: String, token: PredicateToken) throws(PredicateSyntaxError) -> ExpressionNode {
        let argument = try nextArgument(for: token)
        switch spec {
        case "@":
            return .constant(argument)
        case "K":
            guard case .string(let keyPath) = argument, !keyPath.isEmpty else {
                throw error("%K needs a key path string, but its argument is \(argument.kindPhrase)", at: token)
            }
            return .keyPath(keyPath)
        case "s", "c":
            guard case .string = argument else { throw error("%\(spec) needs a string, but its argument is \(argument.kindPhrase)", at: token) }
            return .constant(argument)
        case "f", "lf", "Lf", "e", "g":
            switch argument {
            case .integer(let value): return .constant(.double(Double(value)))
            case .double, .decimal: return .constant(argument)
            default: throw error("%\(spec) needs a number, but its argument is \(argument.kindPhrase)", at: token)
            }
        default:
            switch argument {
            case .integer, .boolean: return .constant(argument)
            case .double(let value) where value.rounded() == value && abs(value) < 9.2e18: return .constant(.integer(Int64(value)))
            default: throw error("%\(spec) needs an integer, but its argument is \(argument.kindPhrase)", at: token)
            }
        }
    }

    /// `CAST(value, "type")`: folded to a constant when the value is one.
    private func cast(_ value: ExpressionNode, to type: String, token: PredicateToken) throws(PredicateSyntaxError) -> ExpressionNode {
        guard case .constant(let constant) = value else {
            return .function("CAST", [value, .constant(.string(type))])
        }
        if let folded = PredicateValue.cast(constant, to: type) { return .constant(folded) }
        throw error("cannot CAST \(constant.kindPhrase) to \"\(type)\"", at: token)
    }
}

extension PredicateValue {
    /// A value converted by `CAST(value, "type")`, or `nil` when it cannot be.
    static func cast(_ value: PredicateValue, to type: String) -> PredicateValue? {
        switch (type, value) {
        case ("NSDate", .integer(let seconds)): .date(Date(timeIntervalSinceReferenceDate: Double(seconds)))
        case ("NSDate", .double(let seconds)): .date(Date(timeIntervalSinceReferenceDate: seconds))
        case ("NSDate", .date): value
        case ("NSNumber", .string(let text)): Int64(text).map(PredicateValue.integer) ?? Double(text).map(PredicateValue.double)
        case ("NSNumber", .integer), ("NSNumber", .double), ("NSNumber", .decimal), ("NSNumber", .boolean): value
        case ("NSNumber", .date(let date)): .double(date.timeIntervalSinceReferenceDate)
        case ("NSString", .string): value
        case ("NSString", .integer(let number)): .string(String(number))
        case ("NSString", .double(let number)): .string(String(number))
        case ("NSDecimalNumber", .string(let text)): Decimal(string: text).map(PredicateValue.decimal)
        case ("NSDecimalNumber", .integer(let number)): .decimal(Decimal(number))
        case ("NSData", .string(let text)): Data(base64Encoded: text).map(PredicateValue.data)
        case ("NSUUID", .string(let text)), ("UUID", .string(let text)): UUID(uuidString: text).map(PredicateValue.uuid)
        case ("NSURL", .string(let text)): URL(string: text).map(PredicateValue.uri)
        default: nil
        }
    }
}
