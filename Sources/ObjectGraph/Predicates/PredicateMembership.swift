import Foundation

/// A constant collection on the right of `IN` (`name IN {…}`, `department IN %@`), indexed once — when the predicate
/// is first evaluated — so that each evaluation finds a value in one lookup instead of comparing it with every
/// element: a fetch filtering 100 000 rows by a list of 5 000 names makes 100 000 lookups, not 500 million
/// comparisons.
///
/// The answers are exactly those of comparing one by one with ``PredicateOrdering/equal(_:_:options:)`` under the
/// comparison's options:
/// - strings are kept folded as the options fold them (`[c]`, `[d]`) and compared as Swift strings (canonical
///   equivalence), as `equal` compares them;
/// - integers, Booleans and doubles are bucketed by their value as a `Double` — numbers `equal` calls equal always
///   share it — and a candidate is confirmed with `equal` (large integers may share a bucket with their neighbours);
/// - dates, UUIDs, data, URIs and objects are equal only to their own kind, by `==`: kept in a set;
/// - what is left — NULL, decimals, NaN, arrays, dictionaries — is compared one by one, as is any value of those kinds
///   looked up (a decimal, an array, a NaN is compared with every element).
final class PredicateMembership: Sendable {
    /// Every element, in order: what a value of the kinds not indexed is compared with.
    let elements: [PredicateValue]
    let options: ComparisonOptions
    private let strings: Set<String>
    private let numbers: [Double: [PredicateValue]]
    private let others: Set<PredicateValue>
    private let remaining: [PredicateValue]

    /// Collections shorter than this are searched one by one: an index would cost more than it saves.
    static let minimumCount = 8

    init(_ elements: [PredicateValue], options: ComparisonOptions) {
        self.elements = elements
        self.options = options
        var strings = Set<String>(), numbers: [Double: [PredicateValue]] = [:], others = Set<PredicateValue>()
        var remaining: [PredicateValue] = []
        for element in elements {
            switch element {
            case .string(let text): strings.insert(StringMatching.fold(text, options))
            case .integer(let value): numbers[Double(value), default: []].append(element)
            case .boolean(let value): numbers[value ? 1 : 0, default: []].append(element)
            case .double(let value) where !value.isNaN: numbers[value, default: []].append(element)
            case .date, .uuid, .data, .uri, .object: others.insert(element)
            default: remaining.append(element)
            }
        }
        self.strings = strings
        self.numbers = numbers
        self.others = others
        self.remaining = remaining
    }

    /// Whether some element equals `value` (`value IN elements`).
    func contains(_ value: PredicateValue) -> Bool {
        switch value {
        case .string(let text):
            // Only a string equals a string.
            return strings.contains(StringMatching.fold(text, options))
        case .integer(let number):
            return containsNumber(value, Double(number))
        case .boolean(let flag):
            return containsNumber(value, flag ? 1 : 0)
        case .double(let number) where !number.isNaN:
            return containsNumber(value, number)
        case .date, .uuid, .data, .uri, .object:
            // Equal only to their own kind, by `==`: nothing among the remaining kinds equals them.
            return others.contains(value)
        default:
            return elements.contains { PredicateOrdering.equal(value, $0, options: options) }
        }
    }

    private func containsNumber(_ value: PredicateValue, _ key: Double) -> Bool {
        if let candidates = numbers[key], candidates.contains(where: { PredicateOrdering.equal(value, $0, options: options) }) { return true }
        // Decimals and NaN are compared one by one.
        return remaining.contains { PredicateOrdering.equal(value, $0, options: options) }
    }
}

/// The indexed `IN` collections of one predicate, found by the storage of the constant array they were made from
/// (the predicate's tree holds that array, so its address is stable while the predicate exists). The addresses are
/// only compared, never read through: sending them to another thread is safe.
struct PredicateMemberships: @unchecked Sendable {
    /// An index made on first use: a predicate that is never evaluated (a store answering `SELF IN` of 50 000
    /// objects by key, a fetch planned on an index) never pays for one.
    final class Lazy: Sendable {
        /// The collection (held, so the storage whose address identifies it stays alive).
        let elements: [PredicateValue]
        let options: ComparisonOptions
        private let made = Locked<PredicateMembership?>(nil)

        init(_ elements: [PredicateValue], options: ComparisonOptions) {
            self.elements = elements
            self.options = options
        }

        /// Whether the index has been made (it is on the first lookup).
        var isMade: Bool { made.withLock { $0 != nil } }

        var membership: PredicateMembership {
            made.withLock { made in
                if let made { return made }
                let membership = PredicateMembership(elements, options: options)
                made = membership
                return membership
            }
        }
    }

    private var entries: [(elements: UnsafeRawPointer, options: ComparisonOptions, membership: Lazy)] = []

    /// The indexes of every `x IN {constant collection}` of at least ``PredicateMembership/minimumCount`` elements
    /// in `node`, its compound predicates and its subqueries.
    init(_ node: PredicateNode) {
        collect(node)
    }

    var isEmpty: Bool { entries.isEmpty }

    /// How many of the indexes have been made so far.
    var madeCount: Int { entries.count { $0.membership.isMade } }

    /// The index for `elements` (the same array, not an equal one) under `options`, made if it is not yet.
    func membership(of elements: [PredicateValue], options: ComparisonOptions) -> PredicateMembership? {
        guard let address = Self.address(elements) else { return nil }
        for entry in entries where entry.elements == address && entry.options == options { return entry.membership.membership }
        return nil
    }

    private static func address(_ elements: [PredicateValue]) -> UnsafeRawPointer? {
        elements.withUnsafeBufferPointer { $0.baseAddress.map(UnsafeRawPointer.init) }
    }

    private mutating func collect(_ node: PredicateNode) {
        switch node {
        case .constant:
            break
        case .and(let operands), .or(let operands):
            for operand in operands { collect(operand) }
        case .not(let operand):
            collect(operand)
        case .comparison(let comparison):
            if comparison.op == .in, case .constant(.array(let elements)) = comparison.rhs, elements.count >= PredicateMembership.minimumCount,
               let address = Self.address(elements), !entries.contains(where: { $0.elements == address && $0.options == comparison.options }) {
                entries.append((address, comparison.options, Lazy(elements, options: comparison.options)))
            }
            collect(comparison.lhs)
            collect(comparison.rhs)
        }
    }

    /// Predicates inside expressions: subqueries' and ternaries' conditions.
    private mutating func collect(_ expression: ExpressionNode) {
        switch expression {
        case .constant, .evaluatedObject, .keyPath, .variable:
            break
        case .member(let base, _), .negate(let base), .assignment(_, let base):
            collect(base)
        case .aggregate(let elements), .function(_, let elements):
            for element in elements { collect(element) }
        case .method(let target, _, let arguments):
            collect(target)
            for argument in arguments { collect(argument) }
        case .arithmetic(_, let lhs, let rhs):
            collect(lhs)
            collect(rhs)
        case .index(let base, let selector):
            collect(base)
            if case .expression(let index) = selector { collect(index) }
            if case .key(let key) = selector { collect(key) }
        case .subquery(let collection, _, let condition):
            collect(collection)
            collect(condition)
        case .ternary(let condition, let whenTrue, let whenFalse):
            collect(condition)
            collect(whenTrue)
            collect(whenFalse)
        }
    }
}
