import Foundation
import Testing
import TestSupport
@testable import ObjectGraph

/// `x IN {constants}` answered from an index of the collection: the same answer as comparing with every element,
/// for every kind of value and every string option.
@Suite struct PredicateMembershipTests {
    /// Values chosen to sit on every edge of `equal`: case and diacritic variants, canonically equivalent strings,
    /// integers beyond Double's precision and at Int64's ends, Booleans against 0 and 1, -0.0 and 0.0, NaN,
    /// infinities, decimals equal to integers and doubles, dates, UUIDs, data, URIs, NULL, arrays and objects.
    static let pool: [PredicateValue] = {
        let date = Date(timeIntervalSinceReferenceDate: 1_000)
        let uuid = UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!
        return [
            "apple", "Apple", "APPLE", "äpple", "Äpple", "e\u{301}t\u{e9}", "\u{e9}t\u{e9}", "ete", "", " ", "ß", "SS", "straße",
            "1", "2", "\u{212A}elvin", "kelvin", "Kelvin",
            .integer(0), .integer(1), .integer(2), .integer(-1), .integer(9_007_199_254_740_992), .integer(9_007_199_254_740_993),
            .integer(.max), .integer(.min), .integer(.max - 1),
            .boolean(true), .boolean(false),
            .double(0), .double(-0.0), .double(1), .double(2.5), .double(9_007_199_254_740_992), .double(.nan), .double(.infinity),
            .double(-.infinity), .double(Double(Int64.max)),
            .decimal(2), .decimal(Decimal(string: "2.5")!), .decimal(Decimal(string: "9007199254740993")!), .decimal(0),
            .date(date), .date(date.addingTimeInterval(0.5)), .uuid(uuid), .uuid(UUID(uuidString: "00000000-0000-0000-0000-000000000001")!),
            .data(Data([1, 2, 3])), .data(Data()), .uri(URL(string: "https://example.com/a")!), .null,
            .array([1, 2]), .array(["apple"]), .array([]),
            .object(PredicateObject(Box(1))), .object(PredicateObject(Box(2))),
        ]
    }()

    /// A hashable stand-in object for `.object` values.
    final class Box: KeyValueReadable, Hashable, @unchecked Sendable {
        let value: Int
        init(_ value: Int) { self.value = value }
        func predicateValue(forKey key: String) -> PredicateValue { .integer(Int64(value)) }
        static func == (lhs: Box, rhs: Box) -> Bool { lhs.value == rhs.value }
        func hash(into hasher: inout Hasher) { hasher.combine(value) }
    }

    @Test(arguments: [ComparisonOptions(), [.caseInsensitive], [.diacriticInsensitive], [.caseInsensitive, .diacriticInsensitive]])
    func theIndexAnswersAsComparingWithEveryElement(options: ComparisonOptions) {
        var random = SplitMix64(seed: 0x1A_2B + UInt64(options.rawValue))
        for round in 0..<300 {
            let count = Int.random(in: PredicateMembership.minimumCount...40, using: &random)
            let elements = (0..<count).map { _ in Self.pool.randomElement(using: &random)! }
            let membership = PredicateMembership(elements, options: options)
            for value in Self.pool {
                let expected = elements.contains { PredicateOrdering.equal(value, $0, options: options) }
                #expect(membership.contains(value) == expected, "round \(round): \(value) IN \(elements) with \(options)")
            }
        }
    }

    /// Through predicates: the index is made for long constant collections (in compound predicates, NOT and
    /// subqueries too), not for short ones, and every form answers as walking the tree without it does.
    @Test func predicatesWithLongCollectionsUseTheIndexAndAnswerAlike() throws {
        let names: [PredicateValue] = (0..<500).map { .string("name \($0)") } + ["Zoë", "\u{212A}elvin"]
        let long = try FetchPredicate(format: "name IN[cd] %@", PredicateValue.array(names))
        #expect(long.memberships != nil)
        #expect(try FetchPredicate(format: "name IN %@", PredicateValue.array(Array(names.prefix(3)))).memberships == nil)
        for (name, expected) in [("NAME 7", true), ("name 500", false), ("zoe", true), ("kelvin", true), ("name  7", false)] {
            #expect(try long.evaluate(with: ["name": PredicateValue.string(name)]) == expected, "\(name)")
        }
        #expect(try !long.evaluate(with: ["name": PredicateValue.null]))
        #expect(try !long.evaluate(with: ["name": PredicateValue.integer(7)]))

        let numbers = PredicateValue.array((0..<100).map { .integer(Int64($0 * 3)) })
        for format in ["n IN %@", "NOT n IN %@", "ANY ns IN %@", "ALL ns IN %@", "NONE ns IN %@", "x == 1 AND (n IN %@ OR FALSEPREDICATE)",
                       "SUBQUERY(ns, $v, $v IN %@).@count >= 2"] {
            let predicate = try FetchPredicate(format: format, numbers)
            #expect(predicate.memberships != nil, "\(format)")
            for (n, ns): (PredicateValue, [PredicateValue]) in [(3, [3, 6]), (3.0, [4, 6]), (true, [0, 1]), (4, [4, 5]), (.decimal(6), [.decimal(9), 6.0]), (.decimal(7), [7, 9]),
                                                                 (.null, []), (0, [.null, 3])] {
                let object: [String: PredicateValue] = ["n": n, "ns": .array(ns), "x": 1]
                // The same tree walked without the index: every element compared.
                var linear = PredicateEvaluator(root: .dictionary(object), variables: [:], memberships: nil)
                #expect(try predicate.evaluate(with: object) == linear.evaluate(predicate.node), "\(format) with \(object)")
            }
        }
    }

    /// An index is made when the predicate is first evaluated, once, and only for the collection evaluated: a
    /// predicate a store answers without evaluating it (`SELF IN` by key) costs no index.
    @Test func indexesAreMadeOnFirstEvaluationOnly() throws {
        let many = PredicateValue.array((0..<1000).map { .integer(Int64($0)) })
        let predicate = try FetchPredicate(format: "n IN %@ OR s IN %@", many, PredicateValue.array((0..<10).map { .string("s\($0)") }))
        #expect(predicate.memberships?.madeCount == 0)
        #expect(try predicate.evaluate(with: ["n": PredicateValue.integer(7), "s": .null]))
        #expect(predicate.memberships?.madeCount == 1, "only the collection the evaluation reached")
        #expect(try predicate.evaluate(with: ["n": PredicateValue.integer(-1), "s": "s3"]))
        #expect(try !predicate.evaluate(with: ["n": PredicateValue.integer(-1), "s": "s10"]))
        #expect(predicate.memberships?.madeCount == 2)
    }

    /// The same tree gives the same predicate, whatever the index: equality and hashing look at the tree only.
    @Test func predicatesWithIndexesAreEqualByTheirTrees() throws {
        let values = PredicateValue.array((0..<20).map { .integer(Int64($0)) })
        let a = try FetchPredicate(format: "n IN %@", values), b = try FetchPredicate(format: "n IN %@", values)
        #expect(a == b && a.hashValue == b.hashValue)
        #expect(a != (try FetchPredicate(format: "n IN[c] %@", values)))
        #expect(Set([a, b]).count == 1)
    }
}
