import Foundation
import Testing
@testable import ObjectGraph

/// Predicate shapes that shipping Core Data apps use, each with the outcome Apple's Foundation gives it.
@Suite struct ShippedPredicateTests {
    @Test func percentKAfterADotAppendsTheArgumentsKeyPath() throws {
        let wire = try FetchPredicate(format: "ANY %K.user.%K == %@", "participantRoles", "remoteIdentifier", "u1")
        #expect(wire.predicateFormat == "ANY participantRoles.user.remoteIdentifier == \"u1\"")
        let mastodon = try FetchPredicate(format: "ANY %K.%K == %@", "mentions", "acct", "alice")
        #expect(mastodon.predicateFormat == "ANY mentions.acct == \"alice\"")
        let user: [String: PredicateValue] = ["remoteIdentifier": "u1"]
        let conversation: [String: PredicateValue] = ["participantRoles": .array([.dictionary(["user": .dictionary(user)])])]
        #expect(try wire.evaluate(with: conversation))
        #expect(try !wire.evaluate(with: ["participantRoles": .array([])] as [String: PredicateValue]))
        // A %K after a dot still needs a key path string.
        #expect(throws: PredicateSyntaxError.self) { try FetchPredicate(format: "a.%K == 1", 3) }
    }

    @Test func variablesAsAPathStepOrASubscriptReadTheirKey() throws {
        let variables: [String: PredicateValue] = ["a": .dictionary(["x": "ABC", "y": "other"]), "b": "x"]
        let step = try FetchPredicate(format: "$a.$b == 'ABC'")
        #expect(try step.evaluate(with: [:] as [String: PredicateValue], variables: variables))
        #expect(step.predicateFormat == "$a.$b == \"ABC\"")
        #expect(try FetchPredicate(format: step.predicateFormat) == step, "prints in a form that parses back")
        let subscripted = try FetchPredicate(format: "$a[$b] == 'ABC'")
        #expect(try subscripted.evaluate(with: [:] as [String: PredicateValue], variables: variables))
        #expect(try !subscripted.evaluate(with: [:] as [String: PredicateValue], variables: ["a": variables["a"]!, "b": "y"]))
        // Substituting the variables gives the same answer without them.
        let bound = try step.withSubstitutionVariables(variables)
        #expect(try bound.evaluate(with: [:] as [String: PredicateValue]))
        #expect(step.variableNames == ["a", "b"])
        // A key that is not a string is a clear error, not a wrong answer.
        #expect(throws: PredicateEvaluationError.self) {
            try step.evaluate(with: [:] as [String: PredicateValue], variables: ["a": variables["a"]!, "b": 3])
        }
        // An integer subscript still indexes arrays; a string subscript of an array is an error.
        #expect(try FetchPredicate(format: "$list[1] == 'b'").evaluate(with: [:] as [String: PredicateValue], variables: ["list": ["a", "b"]]))
        #expect(throws: PredicateEvaluationError.self) {
            try FetchPredicate(format: "$list['x'] == 'b'").evaluate(with: [:] as [String: PredicateValue], variables: ["list": ["a", "b"]])
        }
    }

    @Test func surplusFormatArgumentsAreIgnoredAsFoundationIgnoresThem() throws {
        let predicate = try FetchPredicate(format: "name == %@", "a", "b", 3)
        #expect(predicate.predicateFormat == "name == \"a\"")
        #expect(try FetchPredicate(format: "TRUEPREDICATE", "unused") == .truePredicate)
        // Too few arguments is still an error naming the specifier.
        #expect(throws: PredicateSyntaxError.self) { try FetchPredicate(format: "a == %@ AND b == %@", 1) }
    }

    @Test func aPercentKKeyThatLooksLikeAVariablePrintsAsAppleDoesAndReadsBackAsAVariable() throws {
        let predicate = try FetchPredicate(format: "%K == 1", "$single")
        #expect(predicate.predicateFormat == "$single == 1")
        #expect(try predicate.evaluate(with: ["$single": 1] as [String: PredicateValue]))
        let reparsed = try FetchPredicate(format: predicate.predicateFormat)
        #expect(reparsed != predicate, "the printed text names a variable, not the key")
        #expect(reparsed.variableNames == ["single"])
    }

    @Test func plainValuesEvaluateWithSelfStandingForThem() throws {
        #expect(try FetchPredicate(format: "SELF BEGINSWITH 'ap'").evaluate(with: "apple"))
        #expect(try FetchPredicate(format: "SELF.@count == 3").evaluate(with: [1, 2, 3]))
        #expect(try FetchPredicate(format: "SELF == nil").evaluate(with: nil as String?))
        #expect(try FetchPredicate(format: "SELF > 2").evaluate(with: 2.5))
        #expect(try FetchPredicate(format: "SELF.length == 5").evaluate(with: "apple"))
        #expect(try PredicateExpression(format: "SELF * 2").value(for: 21) == .integer(42))
        #expect(throws: PredicateEvaluationError.self) { try FetchPredicate(format: "SELF < 'x'").evaluate(with: 3) }
        // Objects that answer keys still go through their keys.
        let row: [String: PredicateValue] = ["name": "apple"]
        #expect(try FetchPredicate(format: "name == 'apple'").evaluate(with: row))
    }

    @Test func sequencesFilterByAPredicate() throws {
        let fruit = ["apple", "pear", "apricot", "plum"]
        #expect(try fruit.filtered(using: FetchPredicate(format: "SELF BEGINSWITH[c] %@", "AP")) == ["apple", "apricot"])
        #expect(try [3, 1, 4, 1, 5].filtered(using: FetchPredicate(format: "SELF > 1")) == [3, 4, 5])
        let rows: [[String: PredicateValue]] = [["n": 1], ["n": 2], ["n": .null]]
        #expect(try rows.filtered(using: FetchPredicate(format: "n >= $low"), variables: ["low": 2]) == [["n": 2]])
    }

    @Test func aParsedPredicateCanBeReadBackPartByPart() throws {
        let predicate = try FetchPredicate(format: "ANY tags.name BEGINSWITH[cd] 'a' AND NOT (salary + 10 > $limit OR TRUEPREDICATE)")
        guard case .and(let parts) = predicate.structure, parts.count == 2 else { Issue.record("\(predicate.structure)"); return }
        guard case .comparison(let tags) = parts[0].structure else { Issue.record("\(parts[0].structure)"); return }
        #expect(tags.modifier == .any && tags.comparisonOperator == .beginsWith)
        #expect(tags.isCaseInsensitive && tags.isDiacriticInsensitive && !tags.isNormalized)
        #expect(tags.leftExpression.keyPath == "tags.name")
        #expect(tags.rightExpression.constantValue == "a")
        guard case .not(let negated) = parts[1].structure, case .or(let alternatives) = negated.structure else {
            Issue.record("\(parts[1].structure)"); return
        }
        #expect(alternatives[1].structure == .constant(true))
        guard case .comparison(let salary) = alternatives[0].structure else { Issue.record("\(alternatives[0])"); return }
        #expect(salary.comparisonOperator == .greaterThan && salary.modifier == .direct)
        #expect(salary.leftExpression.functionName == "add:to:")
        guard case .function(_, let arguments, nil) = salary.leftExpression.structure else { Issue.record("not a function"); return }
        #expect(arguments.map(\.keyPath) == ["salary", nil] && arguments[1].constantValue == 10)
        #expect(salary.rightExpression.variableName == "limit")

        let expressions: [(String, String)] = [
            ("sum(a, b)", "sum:"), ("now()", "now"), ("-x", "chs:"), ("a[FIRST]", "objectFrom:withIndex:"),
            ("CAST(a, 'NSNumber')", "castObject:toType:"), ("FUNCTION(a, 'uppercaseString')", "uppercaseString"),
            ("a ** 2", "raise:toPower:"), ("$a.$b", "valueForKeyPath:"),
        ]
        for (text, name) in expressions {
            #expect(try PredicateExpression(format: text).functionName == name, "\(text)")
        }
        guard case .keyPath("name", let base?) = try PredicateExpression(format: "$x.name").structure else { Issue.record("$x.name"); return }
        #expect(base.variableName == "x")
        guard case .subquery(let collection, "t", let condition) = try PredicateExpression(format: "SUBQUERY(tags, $t, $t.n > 1)").structure else {
            Issue.record("subquery"); return
        }
        #expect(collection.keyPath == "tags" && condition.predicateFormat == "$t.n > 1")
    }

    /// Decomposed `e` + U+0301 and precomposed `é` are one string: they compare equal, and order the same against
    /// every other string, in comparisons and sorts alike.
    @Test func canonicallyEquivalentStringsCompareAndSortAsOne() throws {
        let decomposed = "Rene\u{301}e", precomposed = "Ren\u{E9}e"
        for name in [decomposed, precomposed] {
            let row: [String: PredicateValue] = ["name": .string(name)]
            #expect(try FetchPredicate(format: "name < %@", "Renéeb").evaluate(with: row), "\(Array(name.unicodeScalars))")
            #expect(try !FetchPredicate(format: "name >= %@", "Renéeb").evaluate(with: row))
            #expect(try FetchPredicate(format: "name == %@", precomposed).evaluate(with: row))
            #expect(try FetchPredicate(format: "name BETWEEN {'Rene', 'Reo'}").evaluate(with: row))
        }
        let names = ["e\u{301}e\u{301}e\u{301}", "\u{E9}\u{E9}\u{E9}\u{E9}", "\u{E9}\u{E9}", "e", "f", "z\u{301}"]
        let rows = names.map { ["name": PredicateValue.string($0)] }
        let sorted = FetchSortDescriptor.sorted(rows, using: [FetchSortDescriptor(keyPath: "name")]).map { $0["name"]! }
        #expect(sorted == ["e", "f", "\u{E9}\u{E9}", "e\u{301}e\u{301}e\u{301}", "\u{E9}\u{E9}\u{E9}\u{E9}", "z\u{301}"].map(PredicateValue.string),
                "ź (U+017A once composed) sorts after é (U+00E9)")
        // The order is a total order: antisymmetric for every pair.
        for a in names { for b in names {
            #expect(PredicateOrdering.canonicalOrder(a, b) == -PredicateOrdering.canonicalOrder(b, a), "\(a) vs \(b)")
        } }
    }
}

/// The folding rule `[c]`/`[d]` and folded indexes share, on the strings `Docs/FORMAT.md` lists: the table there is
/// this test's table.
@Suite struct StringFoldingTests {
    static let table: [(text: String, caseFolded: String, caseAndDiacriticFolded: String)] = [
        ("Straße", "strasse", "strasse"),
        ("ÉCOLE", "\u{E9}cole", "ecole"),
        ("Rene\u{301}e", "ren\u{E9}e", "renee"),
        ("Ångström", "\u{E5}ngstr\u{F6}m", "angstrom"),
        ("İstanbul", "i\u{307}stanbul", "istanbul"),
        ("ΟΔΟΣ", "οδοσ", "οδοσ"),
        ("ﬁle", "file", "file"),
        ("Øresund", "\u{F8}resund", "\u{F8}resund"),
        ("\u{1C5}", "\u{1C6}", "\u{1C6}"),
        ("Ⅻ", "\u{217B}", "\u{217B}"),
        ("ABC xyz 123", "abc xyz 123", "abc xyz 123"),
    ]

    @Test func foldingFollowsTheStatedRule() {
        for row in Self.table {
            let folded = StringFolding.fold(row.text, caseInsensitive: true, diacriticInsensitive: false)
            let both = StringFolding.fold(row.text, caseInsensitive: true, diacriticInsensitive: true)
            #expect(Array(folded.unicodeScalars) == Array(row.caseFolded.unicodeScalars), "\(row.text) [c]")
            #expect(Array(both.unicodeScalars) == Array(row.caseAndDiacriticFolded.unicodeScalars), "\(row.text) [cd]")
        }
        #expect(StringFolding.fold("Crème", caseInsensitive: false, diacriticInsensitive: true) == "Creme")
        #expect(StringFolding.fold("Crème", caseInsensitive: false, diacriticInsensitive: false) == "Crème")
    }

    /// `composed` returns text below U+0300 untouched, without Foundation's normalizer: that text must be its own NFC,
    /// alone and next to every other such scalar; anything at or above U+0300 still goes through the normalizer.
    @Test func textBelowTheCombiningMarksIsItsOwnComposition() {
        let scalars = (1..<0x300).compactMap(Unicode.Scalar.init)
        let all = String(String.UnicodeScalarView(scalars))
        #expect(Array(StringFolding.composed(all).unicodeScalars) == Array(all.precomposedStringWithCanonicalMapping.unicodeScalars))
        #expect(Array(all.precomposedStringWithCanonicalMapping.unicodeScalars) == scalars, "every scalar below U+0300 is its own NFC")
        for scalar in scalars where scalar.value >= 0x80 {
            let pair = String(String.UnicodeScalarView([scalar, scalar, "a"]))
            #expect(Array(StringFolding.composed(pair).unicodeScalars) == Array(pair.precomposedStringWithCanonicalMapping.unicodeScalars))
        }
        // At and above U+0300: composed as the normalizer composes.
        #expect(Array(StringFolding.composed("Rene\u{301}e").unicodeScalars) == Array("Ren\u{E9}e".unicodeScalars))
        #expect(Array(StringFolding.composed("\u{1100}\u{1161}").unicodeScalars) == ["\u{AC00}"])
        #expect(Array(StringFolding.composed("\u{212B}").unicodeScalars) == ["\u{C5}"], "a singleton decomposition (Angstrom sign)")
    }

    @Test func comparisonsFoldByTheSameRule() throws {
        #expect(try FetchPredicate(format: "SELF ==[c] 'STRASSE'").evaluate(with: "straße"))
        #expect(try FetchPredicate(format: "SELF ==[cd] 'istanbul'").evaluate(with: "İstanbul"))
        #expect(try !FetchPredicate(format: "SELF ==[c] 'istanbul'").evaluate(with: "İstanbul"), "the dot above stays without [d]")
        #expect(try FetchPredicate(format: "SELF BEGINSWITH[cd] 'eco'").evaluate(with: "E\u{301}COLE"))
    }
}
