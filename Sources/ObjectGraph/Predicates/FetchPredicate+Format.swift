import Foundation

extension FetchPredicate {
    /// Parses `format`, replacing `%@`, `%K`, `%d`, `%f`, `%s` and the other specifiers with `arguments` in order.
    ///
    /// `%@` takes any value (a string becomes a string constant), `%K` a key path string, `%d`/`%i`/`%ld`/`%lld`/`%u`
    /// an integer, `%f`/`%lf` a number, `%s` a string. Quoted specifiers (`'%@'`) and quoted `$VARIABLES` are text.
    ///
    /// Arguments beyond those the text uses are ignored, as Foundation ignores them.
    ///
    /// - Throws: ``PredicateSyntaxError`` naming the offset (and line and column), the token found there, and what
    ///   was expected; also when there are fewer arguments than specifiers.
    public init(format: String, _ arguments: any PredicateArgument...) throws(PredicateSyntaxError) {
        try self.init(format: format, argumentArray: arguments)
    }

    /// Parses `format` with its arguments given as an array; see ``init(format:_:)``.
    ///
    /// - Throws: ``PredicateSyntaxError``.
    public init(format: String, argumentArray: [any PredicateArgument]) throws(PredicateSyntaxError) {
        self.init(node: try PredicateParser.parsePredicate(format, arguments: argumentArray.map(\.predicateValue)))
    }

    /// The predicate as Core Data prints it: upper-case operators, double-quoted strings, `1`/`0` for Booleans,
    /// nested arithmetic in parentheses. Parsing it gives an equal predicate.
    public var predicateFormat: String { node.format }
}

extension FetchPredicate: CustomStringConvertible {
    /// The ``predicateFormat``.
    public var description: String { predicateFormat }
}

extension PredicateExpression {
    /// Parses an expression of the predicate language (`salary * 12`, `employees.@count`, `$DATE`).
    ///
    /// - Throws: ``PredicateSyntaxError``.
    public init(format: String, _ arguments: any PredicateArgument...) throws(PredicateSyntaxError) {
        self.init(node: try PredicateParser.parseExpression(format, arguments: arguments.map(\.predicateValue)))
    }

    /// The expression as Core Data prints it.
    public var expressionFormat: String { node.format }
}

extension PredicateExpression: CustomStringConvertible {
    /// The ``expressionFormat``.
    public var description: String { expressionFormat }
}

// MARK: - Printing

extension PredicateNode {
    var format: String {
        switch self {
        case .constant(let value): value ? "TRUEPREDICATE" : "FALSEPREDICATE"
        case .comparison(let comparison): comparison.format
        case .and(let operands): operands.map(\.operandFormat).joined(separator: " AND ")
        case .or(let operands): operands.map(\.operandFormat).joined(separator: " OR ")
        case .not(let operand): "NOT " + operand.operandFormat
        }
    }

    /// AND and OR operands of a compound predicate are parenthesised; NOT binds tighter and needs none.
    private var operandFormat: String {
        switch self {
        case .and, .or: "(" + format + ")"
        default: format
        }
    }
}

extension ComparisonNode {
    var format: String {
        let modifierText = modifier == .direct ? "" : modifier.rawValue + " "
        return modifierText + lhs.format + " " + op.rawValue + options.text + " " + rhs.format
    }
}

extension ExpressionNode {
    var format: String {
        switch self {
        case .constant(let value): value.format
        case .evaluatedObject: "SELF"
        case .keyPath(let path): Self.formatKeyPath(path)
        case .member(let base, let path): base.postfixOperandFormat + "." + Self.formatKeyPath(path)
        case .variable(let name): "$" + name
        case .aggregate(let elements): "{" + elements.map(\.format).joined(separator: ", ") + "}"
        case .function("CAST", let arguments) where arguments.count == 2:
            "CAST(" + arguments[0].format + ", " + arguments[1].format + ")"
        case .function(let name, let arguments): name + "(" + arguments.map(\.format).joined(separator: ", ") + ")"
        case .method(let target, let selector, let arguments):
            "FUNCTION(" + ([target.format, PredicateValue.string(selector).format] + arguments.map(\.format)).joined(separator: ", ") + ")"
        case .arithmetic(let op, let lhs, let rhs): lhs.arithmeticOperandFormat + " " + op.rawValue + " " + rhs.arithmeticOperandFormat
        case .negate(let operand): "-" + operand.arithmeticOperandFormat
        case .index(let base, .key(let key)): base.postfixOperandFormat + "." + key.format
        case .index(let base, let selector): base.postfixOperandFormat + "[" + selector.format + "]"
        case .subquery(let collection, let variable, let predicate):
            "SUBQUERY(" + collection.format + ", $" + variable + ", " + predicate.format + ")"
        case .assignment(let variable, let value): "$" + variable + " := " + value.format
        case .ternary(let condition, let whenTrue, let whenFalse):
            "TERNARY(" + condition.format + ", " + whenTrue.format + ", " + whenFalse.format + ")"
        }
    }

    /// Nested arithmetic (and assignments) print in parentheses, so `a + b * 2` prints `a + (b * 2)`.
    private var arithmeticOperandFormat: String {
        switch self {
        case .arithmetic, .assignment: "(" + format + ")"
        case .constant(.integer(let value)) where value < 0: "(" + format + ")"
        case .constant(.double(let value)) where value < 0 || (value == 0 && value.sign == .minus): "(" + format + ")"
        case .constant(.decimal(let value)) where value < 0: "(" + format + ")"
        default: format
        }
    }

    /// The base of `.key` or `[index]` needs parentheses unless it is a simple term.
    private var postfixOperandFormat: String {
        switch self {
        case .arithmetic, .negate, .assignment: "(" + format + ")"
        case .constant(.integer(let value)) where value < 0: "(" + format + ")"
        case .constant(.double(let value)) where value < 0: "(" + format + ")"
        default: format
        }
    }

    /// Escapes key path components that are reserved words (`#IN`).
    static func formatKeyPath(_ path: String) -> String {
        path.split(separator: ".", omittingEmptySubsequences: false).map { component in
            let name = String(component)
            if name.hasPrefix("@") { return name }
            let isPlain = name.first.map { $0 == "_" || $0.isLetter } == true && name.allSatisfy { $0 == "_" || $0.isLetter || $0.isNumber }
            return isPlain && PredicateParser.reservedWords.contains(name.uppercased()) ? "#" + name : name
        }.joined(separator: ".")
    }
}

extension IndexSelector {
    var format: String {
        switch self {
        case .first: "FIRST"
        case .last: "LAST"
        case .size: "SIZE"
        case .expression(let expression), .key(let expression): expression.format
        }
    }
}

extension PredicateValue {
    /// The value as predicate text. Values with no literal syntax print as `CAST(…)`, which parses back.
    package var format: String {
        switch self {
        case .null: "nil"
        case .boolean(let value): value ? "1" : "0"
        case .integer(let value): String(value)
        case .double(let value):
            if value.isNaN { "CAST(\"nan\", \"NSNumber\")" }
            else if value.isInfinite { value > 0 ? "CAST(\"inf\", \"NSNumber\")" : "CAST(\"-inf\", \"NSNumber\")" }
            else { "\(value)" }
        case .decimal(let value): "CAST(\"\(value)\", \"NSDecimalNumber\")"
        case .string(let value): Self.quote(value)
        case .date(let value): "CAST(\(value.timeIntervalSinceReferenceDate), \"NSDate\")"
        case .data(let value): "CAST(\"\(value.base64EncodedString())\", \"NSData\")"
        case .uuid(let value): "CAST(\"\(value.uuidString)\", \"NSUUID\")"
        case .uri(let value): "CAST(" + Self.quote(value.absoluteString) + ", \"NSURL\")"
        case .array(let elements): "{" + elements.map(\.format).joined(separator: ", ") + "}"
        case .dictionary(let pairs): "{" + pairs.keys.sorted().map { pairs[$0]!.format }.joined(separator: ", ") + "}"
        case .object(let object): "<object \(object.base)>"
        }
    }

    /// A double-quoted string with `"`, `\` and control characters escaped.
    static func quote(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            case _ where scalar.value < 0x20: result += String(format: "\\u%04x", scalar.value)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
