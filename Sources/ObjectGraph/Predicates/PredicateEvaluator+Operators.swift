import Foundation

extension PredicateEvaluator {
    /// One comparison of two values (no modifier).
    func compare(_ lhs: PredicateValue, _ op: ComparisonOperator, _ rhs: PredicateValue, options: ComparisonOptions,
                 _ node: ComparisonNode) throws(PredicateEvaluationError) -> Bool {
        switch op {
        case .equal:
            return PredicateOrdering.equal(lhs, rhs, options: options)
        case .notEqual:
            return !PredicateOrdering.equal(lhs, rhs, options: options)
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            guard let order = try order(lhs, rhs, options: options, node) else { return false }
            switch op {
            case .lessThan: return order < 0
            case .lessThanOrEqual: return order <= 0
            case .greaterThan: return order > 0
            default: return order >= 0
            }
        case .between:
            guard let bounds = rhs.collectionElements, bounds.count == 2 else {
                throw failure(.invalidOperand, "BETWEEN needs two bounds, {lower, upper}, not \(rhs.kindPhrase)", node.format)
            }
            guard let low = try order(lhs, bounds[0], options: options, node),
                  let high = try order(lhs, bounds[1], options: options, node) else { return false }
            return low >= 0 && high <= 0
        case .in:
            if case .string(let haystack) = rhs, case .string(let needle) = lhs {
                return StringMatching.contains(haystack, needle, options: options)
            }
            if rhs.isNull { return false }
            guard let elements = rhs.collectionElements else {
                throw failure(.typeMismatch, "IN needs a collection or a string on its right, not \(rhs.kindPhrase)", node.format)
            }
            return elements.contains { PredicateOrdering.equal(lhs, $0, options: options) }
        case .contains:
            if case .string(let haystack) = lhs, case .string(let needle) = rhs {
                return StringMatching.contains(haystack, needle, options: options)
            }
            if lhs.isNull { return false }
            if case .string = lhs, rhs.isNull { return false }
            guard let elements = lhs.collectionElements else {
                throw failure(.typeMismatch, "CONTAINS needs a collection or a string on its left, not \(lhs.kindPhrase)", node.format)
            }
            return elements.contains { PredicateOrdering.equal($0, rhs, options: options) }
        case .beginsWith, .endsWith, .like, .matches:
            if lhs.isNull || rhs.isNull { return false }
            guard case .string(let text) = lhs, case .string(let pattern) = rhs else {
                throw failure(.typeMismatch, "\(op.rawValue) compares strings, not \(lhs.kindPhrase) with \(rhs.kindPhrase)", node.format)
            }
            switch op {
            case .beginsWith: return StringMatching.hasPrefix(text, pattern, options: options)
            case .endsWith: return StringMatching.hasSuffix(text, pattern, options: options)
            case .like: return StringMatching.like(text, pattern, options: options)
            default:
                guard let matched = StringMatching.matches(text, pattern, options: options) else {
                    throw failure(.invalidOperand, "\"\(pattern)\" is not a valid regular expression", node.format)
                }
                return matched
            }
        case .utiEquals:
            guard case .string(let a) = lhs, case .string(let b) = rhs else { return false }
            return a.caseInsensitiveCompare(b) == .orderedSame
        case .utiConformsTo:
            if case .string(let a) = lhs, case .string(let b) = rhs, a.caseInsensitiveCompare(b) == .orderedSame { return true }
            throw failure(.unsupported, "UTI-CONFORMS-TO needs the system's type database, which this platform does not have", node.format)
        }
    }

    /// The order of two values: negative, zero or positive; `nil` when either is NULL (NULL orders against nothing).
    func order(_ lhs: PredicateValue, _ rhs: PredicateValue, options: ComparisonOptions, _ node: ComparisonNode) throws(PredicateEvaluationError) -> Int? {
        if lhs.isNull || rhs.isNull { return nil }
        guard let order = PredicateOrdering.order(lhs, rhs, options: options) else {
            throw failure(.typeMismatch, "cannot order \(lhs.kindPhrase) against \(rhs.kindPhrase)", node.format)
        }
        return order
    }

    // MARK: - Arithmetic and functions

    func arithmetic(_ op: ArithmeticOperator, _ lhs: PredicateValue, _ rhs: PredicateValue, _ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        if lhs.isNull || rhs.isNull { return .null }
        guard let a = Number(lhs), let b = Number(rhs) else {
            if op == .add, case .date(let date) = lhs, let seconds = Number(rhs)?.double { return .date(date.addingTimeInterval(seconds)) }
            if op == .subtract, case .date(let date) = lhs, let seconds = Number(rhs)?.double { return .date(date.addingTimeInterval(-seconds)) }
            throw failure(.typeMismatch, "\(op.rawValue) needs numbers, not \(lhs.kindPhrase) and \(rhs.kindPhrase)", node.format)
        }
        switch op {
        case .add, .subtract, .multiply:
            if a.kind == .integer, b.kind == .integer {
                let (x, y) = (a.integer, b.integer)
                let (result, overflow) = op == .add ? x.addingReportingOverflow(y) : op == .subtract ? x.subtractingReportingOverflow(y) : x.multipliedReportingOverflow(by: y)
                if !overflow { return .integer(result) }
            }
            if a.kind == .decimal || b.kind == .decimal, let x = a.decimal, let y = b.decimal {
                return .decimal(op == .add ? x + y : op == .subtract ? x - y : x * y)
            }
            let (x, y) = (a.double, b.double)
            return .double(op == .add ? x + y : op == .subtract ? x - y : x * y)
        case .divide:
            return .double(a.double / b.double)
        case .power:
            return .double(pow(a.double, b.double))
        case .bitwiseAnd, .bitwiseOr, .bitwiseXor, .leftShift, .rightShift:
            guard a.kind == .integer, b.kind == .integer else {
                throw failure(.typeMismatch, "\(op.rawValue) needs integers", node.format)
            }
            let (x, y) = (a.integer, b.integer)
            switch op {
            case .bitwiseAnd: return .integer(x & y)
            case .bitwiseOr: return .integer(x | y)
            case .bitwiseXor: return .integer(x ^ y)
            case .leftShift: return .integer(x << y)
            default: return .integer(x >> y)
            }
        }
    }

    func function(_ name: String, _ arguments: [PredicateValue], _ node: ExpressionNode) throws(PredicateEvaluationError) -> PredicateValue {
        // Aggregate functions take one collection, or their arguments as the collection.
        let values: [PredicateValue] = arguments.count == 1 ? (arguments[0].collectionElements ?? [arguments[0]]) : arguments
        let present = values.filter { !$0.isNull }
        func numbers() throws(PredicateEvaluationError) -> [Number] {
            var result: [Number] = []
            for value in present {
                guard let number = Number(value) else {
                    throw failure(.typeMismatch, "\(name) needs numbers, not \(value.kindPhrase)", node.format)
                }
                result.append(number)
            }
            return result
        }
        func single() throws(PredicateEvaluationError) -> Double? {
            guard arguments.count == 1 else { throw failure(.invalidOperand, "\(name) takes one number", node.format) }
            if arguments[0].isNull { return nil }
            guard let number = Number(arguments[0]) else {
                throw failure(.typeMismatch, "\(name) needs a number, not \(arguments[0].kindPhrase)", node.format)
            }
            return number.double
        }
        switch name {
        case "count": return .integer(Int64(values.count))
        case "sum":
            var total: PredicateValue = .integer(0)
            for value in present { total = try arithmetic(.add, total, value, node) }
            return total
        case "average":
            let all = try numbers()
            return all.isEmpty ? .null : .double(all.reduce(0) { $0 + $1.double } / Double(all.count))
        case "min", "max":
            var best: PredicateValue?
            for value in present {
                guard let current = best else { best = value; continue }
                guard let order = PredicateOrdering.order(value, current, options: []) else {
                    throw failure(.typeMismatch, "\(name) cannot order \(value.kindPhrase) against \(current.kindPhrase)", node.format)
                }
                if (name == "min" && order < 0) || (name == "max" && order > 0) { best = value }
            }
            return best ?? .null
        case "median":
            let sorted = try numbers().map(\.double).sorted()
            guard !sorted.isEmpty else { return .null }
            let middle = sorted.count / 2
            return .double(sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2)
        case "mode":
            var counts: [PredicateValue: Int] = [:]
            for value in present { counts[value, default: 0] += 1 }
            let top = counts.values.max() ?? 0
            return .array(present.filter { counts[$0] == top }.reduce(into: [PredicateValue]()) { if !$0.contains($1) { $0.append($1) } })
        case "stddev":
            let all = try numbers().map(\.double)
            guard !all.isEmpty else { return .null }
            let mean = all.reduce(0, +) / Double(all.count)
            return .double((all.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(all.count)).squareRoot())
        case "sqrt": return try single().map { .double($0.squareRoot()) } ?? .null
        case "log": return try single().map { .double(log10($0)) } ?? .null
        case "ln": return try single().map { .double(log($0)) } ?? .null
        case "exp": return try single().map { .double(exp($0)) } ?? .null
        case "floor": return try single().map { .double($0.rounded(.down)) } ?? .null
        case "ceiling": return try single().map { .double($0.rounded(.up)) } ?? .null
        case "trunc": return try single().map { .double($0.rounded(.towardZero)) } ?? .null
        case "abs":
            guard arguments.count == 1 else { throw failure(.invalidOperand, "abs takes one number", node.format) }
            if case .integer(let value) = arguments[0], value != .min { return .integer(Swift.abs(value)) }
            return try single().map { .double(Swift.abs($0)) } ?? .null
        case "random": return .double(Double.random(in: 0..<1))
        case "randomn":
            guard case .integer(let bound) = arguments.first, bound > 0 else {
                throw failure(.invalidOperand, "randomn takes a positive integer bound", node.format)
            }
            return .integer(Int64.random(in: 0..<bound))
        case "now": return .date(Date())
        case "CAST":
            guard arguments.count == 2, case .string(let type) = arguments[1] else {
                throw failure(.invalidOperand, "CAST takes a value and a type name", node.format)
            }
            if arguments[0].isNull { return .null }
            guard let cast = PredicateValue.cast(arguments[0], to: type) else {
                throw failure(.typeMismatch, "cannot CAST \(arguments[0].kindPhrase) to \"\(type)\"", node.format)
            }
            return cast
        default:
            throw failure(.unsupported, "\(name) is not a known function", node.format)
        }
    }
}

/// A numeric view of a value: integers and Booleans, floating-point numbers, decimals (and dates, as seconds, for
/// ordering only).
struct Number {
    enum Kind { case integer, double, decimal }
    let kind: Kind
    let integer: Int64
    let double: Double
    private let storedDecimal: Decimal?

    /// The value as a decimal (`nil` for a non-finite double). Computed on use: converting a double to `Decimal` is
    /// slow, and comparisons of doubles and integers never need it.
    var decimal: Decimal? {
        switch kind {
        case .decimal: storedDecimal
        case .integer: Decimal(integer)
        case .double: double.isFinite ? Decimal(double) : nil
        }
    }

    init?(_ value: PredicateValue) {
        switch value {
        case .integer(let value): self.init(integer: value)
        case .boolean(let value): self.init(integer: value ? 1 : 0)
        case .double(let value): self.init(kind: .double, integer: 0, double: value, decimal: nil)
        case .decimal(let value): self.init(kind: .decimal, integer: 0, double: NSDecimalNumber(decimal: value).doubleValue, decimal: value)
        default: return nil
        }
    }

    private init(integer value: Int64) {
        self.init(kind: .integer, integer: value, double: Double(value), decimal: nil)
    }

    private init(kind: Kind, integer: Int64, double: Double, decimal: Decimal?) {
        self.kind = kind
        self.integer = integer
        self.double = double
        storedDecimal = decimal
    }
}

extension PredicateValue {
    init(_ number: Number) {
        switch number.kind {
        case .integer: self = .integer(number.integer)
        case .double: self = .double(number.double)
        case .decimal: self = .decimal(number.decimal!)
        }
    }
}
