import Foundation
import Testing
@testable import ObjectGraph

@Suite struct PredicateEvaluationTests {
    func holds(_ format: String, _ object: [String: PredicateValue], _ arguments: any PredicateArgument...) throws -> Bool {
        try FetchPredicate(format: format, argumentArray: arguments).evaluate(with: object)
    }

    @Test(arguments: ["==", "!=", "<", "<=", ">", ">=", "BETWEEN", "IN", "CONTAINS", "BEGINSWITH", "ENDSWITH", "LIKE", "MATCHES"])
    func nullOnEitherSideFollowsCoreData(op: String) throws {
        let rhs = op == "BETWEEN" ? "{1, 2}" : op == "IN" ? "{1, nil}" : "'x'"
        let nullLeft = try holds("v \(op) \(rhs)", ["v": .null])
        switch op {
        case "!=": #expect(nullLeft, "NULL != 'x'")
        case "IN": #expect(nullLeft, "NULL IN {1, nil}: NULL equals NULL")
        default: #expect(!nullLeft, "NULL \(op) \(rhs) must be false")
        }
        if !["BETWEEN", "IN"].contains(op) {
            let nullRight = try holds("'x' \(op) v", ["v": .null])
            #expect(nullRight == (op == "!="), "'x' \(op) NULL")
        }
        #expect(try holds("v == nil", ["v": .null]))
        #expect(try holds("v != nil", ["v": 0]))
    }

    @Test func integersDoublesDecimalsAndBooleansCompareAsNumbers() throws {
        let object: [String: PredicateValue] = ["i": 2, "d": 2.0, "m": .decimal(2), "b": true, "f": 2.5]
        for (lhs, rhs) in [("i", "d"), ("i", "m"), ("d", "m")] {
            #expect(try holds("\(lhs) == \(rhs)", object), "\(lhs) == \(rhs)")
            #expect(try holds("\(lhs) < f", object))
        }
        #expect(try holds("b == 1", object))
        #expect(try holds("b < i", object))
        #expect(try holds("m < %@", object, Decimal(string: "2.0000001")!))
        #expect(try holds("i > %@", object, 1.999999))
        #expect(try !holds("i == %@", object, 2.000001))
        // Beyond Double's precision, integers still compare exactly.
        #expect(try !holds("big == %@", ["big": .integer(9_007_199_254_740_993)], Int64(9_007_199_254_740_992)))
    }

    @Test func datesCompareByTime() throws {
        let now = Date(timeIntervalSinceReferenceDate: 700_000_000)
        let object: [String: PredicateValue] = ["at": .date(now)]
        #expect(try holds("at == %@", object, now))
        #expect(try holds("at < %@", object, now.addingTimeInterval(0.001)))
        #expect(try holds("at BETWEEN %@", object, [now.addingTimeInterval(-1), now]))
        #expect(try holds("at > CAST(699999999, 'NSDate')", object))
        #expect(throws: PredicateEvaluationError.self) { try holds("at < 5", object) }
    }

    @Test(arguments: ["==", "!=", "<", "<=", ">", ">=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "MATCHES", "IN"])
    func caseAndDiacriticOptionsApplyToEveryStringOperator(op: String) throws {
        // "Résumé" against "resume": equal once case and diacritics are folded.
        let object: [String: PredicateValue] = ["s": "Résumé"]
        let plain = try holds("s \(op) 'resume'", object)
        let c = try holds("s \(op)[c] 'resume'", object)
        let cd = try holds("s \(op)[cd] 'resume'", object)
        switch op {
        case "==", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE", "MATCHES", "<=", ">=", "IN":
            #expect(!plain || op == "<=" || op == ">=", "\(op) without options")
            #expect(!c || op == "<=" || op == ">=" , "\(op)[c]")
            #expect(cd, "\(op)[cd] must hold once folded")
        case "!=":
            #expect(plain && c && !cd)
        default:  // < and >: folded they are equal, so neither strictly orders
            #expect(!cd)
        }
    }

    @Test func caseFoldingAloneKeepsDiacritics() throws {
        #expect(try holds("s ==[c] 'RÉSUMÉ'", ["s": "résumé"]))
        #expect(try !holds("s ==[c] 'RESUME'", ["s": "résumé"]))
        #expect(try holds("s ==[d] 'resume'", ["s": "résumé"]))
        #expect(try !holds("s ==[d] 'Resume'", ["s": "résumé"]))
    }

    @Test func optionsAreIgnoredOnNonStrings() throws {
        #expect(try holds("n ==[cd] 3", ["n": 3]))
        #expect(try holds("n <[c] 4", ["n": 3]))
    }

    @Test func likeHonoursWildcardsAndEscapesOnly() throws {
        let object: [String: PredicateValue] = ["s": "a.b+(c)[d]|$^"]
        #expect(try holds("s LIKE 'a.b+(c)[d]|$^'", object))
        #expect(try holds("s LIKE 'a?b*'", object))
        #expect(try !holds("s LIKE 'a.b'", object))
        #expect(try holds("s LIKE '*'", ["s": ""]))
        #expect(try !holds("s LIKE '?'", ["s": ""]))
        #expect(try holds("s LIKE 'x\\\\*'", ["s": "x*"]))
        #expect(try !holds("s LIKE 'x\\\\*'", ["s": "xy"]))
        #expect(try holds("s LIKE '*a*a*a*a*b'", ["s": .string(String(repeating: "a", count: 200) + "b")]))
        #expect(try !holds("s LIKE '*a*a*a*a*b'", ["s": .string(String(repeating: "a", count: 200))]))
    }

    @Test func matchesIsAWholeStringRegularExpression() throws {
        #expect(try holds("s MATCHES 'ab+'", ["s": "abbb"]))
        #expect(try !holds("s MATCHES 'ab'", ["s": "abbb"]))
        #expect(try !holds("s MATCHES 'b+'", ["s": "abbb"]))
        #expect(try holds("s MATCHES 'a|ab'", ["s": "ab"]))
        #expect(try holds("s MATCHES '(?m)^x$\\\\n^y$'", ["s": "x\ny"]))
    }

    /// MATCHES compiles each pattern once per set of options and keeps a bounded number of them: the same pattern
    /// with and without `[c]` or `[d]` answers as each asks, an invalid pattern stays an error, and answers
    /// stay right past the number of patterns kept.
    @Test func matchesAnswersAlikeWhetherItsPatternWasCompiledBefore() throws {
        for _ in 0..<2 {
            #expect(try holds("s MATCHES 'ab+'", ["s": "abbb"]))
            #expect(try !holds("s MATCHES 'ab+'", ["s": "ABBB"]))
            #expect(try holds("s MATCHES[c] 'ab+'", ["s": "ABBB"]))
            #expect(try !holds("s MATCHES 'e+'", ["s": "éé"]))
            #expect(try holds("s MATCHES[d] 'e+'", ["s": "éé"]))
            #expect(try holds("s MATCHES[cd] 'e+'", ["s": "ÉÉ"]))
            #expect(throws: (any Error).self, "an invalid pattern is an error each time") { try holds("s MATCHES '(unclosed'", ["s": "(unclosed"]) }
        }
        for n in 0..<(CompiledExpressions.capacity + 40) {
            #expect(try holds("s MATCHES %@", ["s": .string("x\(n)")], "x\(n)"), "pattern \(n)")
            #expect(try !holds("s MATCHES %@", ["s": .string("x\(n + 1)")], "x\(n)"), "pattern \(n)")
        }
        #expect(try holds("s MATCHES 'ab+'", ["s": "abbb"]))
    }

    /// The compiled patterns are shared by every thread: fetches evaluating MATCHES at once, on patterns some of
    /// them compile and others find kept, each get their own answers (and, under the thread sanitizer, race on
    /// nothing: the table's lock must be one the sanitizer sees).
    @Test func matchesEvaluatedOnManyThreadsAtOnceAnswersEachRightly() async throws {
        let failures = await withTaskGroup(of: Int.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var failures = 0
                    for n in 0..<200 {
                        let pattern = "t\\d+-\((n + worker) % 50)"
                        let hit = (try? holds("s MATCHES %@", ["s": .string("t7-\((n + worker) % 50)")], pattern)) ?? false
                        let miss = (try? holds("s MATCHES %@", ["s": .string("t7-\((n + worker + 1) % 50)")], pattern)) ?? true
                        if !hit || miss { failures += 1 }
                    }
                    return failures
                }
            }
            return await group.reduce(0, +)
        }
        #expect(failures == 0)
    }

    @Test func anyAllAndNoneOverToManyCollections() throws {
        let object: [String: PredicateValue] = ["items": [["price": 5], ["price": 15], ["price": .null]]]
        #expect(try holds("ANY items.price > 10", object))
        #expect(try !holds("ALL items.price > 1", object), "NULL > 1 is false, so not all hold")
        #expect(try holds("NONE items.price > 20", object))
        #expect(try holds("items.price CONTAINS 15", object))
        #expect(try holds("items.@count == 3", object))
        #expect(try holds("items.@sum.price == 20", object), "NULLs are left out of sums")
        #expect(try holds("items.@avg.price == 10", object))
        #expect(try holds("ANY items.price == nil", object))
    }

    @Test func keyPathsThroughObjectsThatAreNotDictionaries() throws {
        final class Node: KeyValueReadable, Hashable {
            let name: String
            let children: [Node]
            init(_ name: String, _ children: [Node] = []) { self.name = name; self.children = children }
            func predicateValue(forKey key: String) -> PredicateValue {
                switch key {
                case "name": .string(name)
                case "children": .array(children.map { .object(PredicateObject($0)) })
                default: .null
                }
            }
            static func == (lhs: Node, rhs: Node) -> Bool { lhs === rhs }
            func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
        }
        let tree = Node("root", [Node("a", [Node("a1")]), Node("b")])
        #expect(try FetchPredicate(format: "ANY children.children.name == 'a1'").evaluate(with: tree))
        #expect(try FetchPredicate(format: "children.@count == 2 AND name == 'root'").evaluate(with: tree))
        #expect(try FetchPredicate(format: "SUBQUERY(children, $c, $c.children.@count > 0).@count == 1").evaluate(with: tree))
        let child = tree.children[0]
        #expect(try FetchPredicate(format: "children[FIRST] == %@", PredicateValue.object(PredicateObject(child))).evaluate(with: tree))
    }

    /// Key paths of plain keys through to-ones (`department.boss.name`) read key by key, a NULL on the way giving
    /// NULL; the same through a to-many gives each member's value; in a sort, an empty key between two dots is
    /// passed over, as before.
    @Test func dottedKeyPathsReadKeyByKey() throws {
        let object: [String: PredicateValue] = ["department": ["name": "R&D", "boss": ["name": "Ada"]], "team": .null,
                                                "projects": [["code": "x"], ["code": "y"]]]
        #expect(try holds("department.name == 'R&D' AND department.boss.name == 'Ada'", object))
        #expect(try holds("department.boss.age == nil AND team.name == nil AND missing.key.deeper == nil", object))
        #expect(try holds("projects.code == {'x', 'y'} AND ANY projects.code == 'y'", object))
        #expect(FetchSortDescriptor(keyPath: "department.boss.name").sortValue(of: object) == "Ada")
        #expect(FetchSortDescriptor(keyPath: "department..name").sortValue(of: object) == "R&D")
        #expect(FetchSortDescriptor(keyPath: "department.boss.name.").sortValue(of: object) == "Ada")
    }

    @Test func expressionsEvaluateOnTheirOwn() throws {
        let expression = try PredicateExpression(format: "salary * 12 + bonus")
        #expect(try expression.value(for: ["salary": 100, "bonus": 5]) == .integer(1205))
        #expect(expression.expressionFormat == "(salary * 12) + bonus")
        #expect(try PredicateExpression(format: "tags.@count").value(for: ["tags": ["a", "b"]]) == .integer(2))
    }
}
