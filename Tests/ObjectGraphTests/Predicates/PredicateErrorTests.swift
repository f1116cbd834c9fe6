import Foundation
import Testing
@testable import ObjectGraph

@Suite struct PredicateErrorTests {
    struct BadInput: Sendable, CustomStringConvertible {
        let text: String
        let offset: Int
        let found: String
        let expected: String
        var description: String { text }
    }

    static let badInputs: [BadInput] = [
        BadInput(text: "1", offset: 1, found: "the end of the text", expected: "a value on its own is not a predicate"),
        BadInput(text: "TRUE", offset: 4, found: "the end of the text", expected: "a value on its own is not a predicate"),
        BadInput(text: "0 || 1", offset: 2, found: "\"||\"", expected: "comparison operator"),
        BadInput(text: "age >", offset: 5, found: "the end of the text", expected: "expected an expression"),
        BadInput(text: "age > 3 AND", offset: 11, found: "the end of the text", expected: "expected an expression"),
        BadInput(text: "age > 3 name == 2", offset: 8, found: "\"name\"", expected: "expected the end of the predicate"),
        BadInput(text: "(age > 3", offset: 8, found: "the end of the text", expected: "expected \")\""),
        BadInput(text: "name == 'abc", offset: 8, found: "an unterminated string", expected: "the string is not closed"),
        BadInput(text: "age ? 3", offset: 4, found: "\"?\"", expected: "this character cannot start a token"),
        BadInput(text: "a == %k", offset: 5, found: "\"%k\"", expected: "not a format specifier"),
        BadInput(text: "a == %@", offset: 5, found: "\"%@\"", expected: "needs more arguments"),
        BadInput(text: "a BEGINSWITH[x] 'b'", offset: 13, found: "\"x\"", expected: "comparison options"),
        BadInput(text: "first == 1", offset: 0, found: "\"first\"", expected: "FIRST is a reserved word"),
        BadInput(text: "a == 0b102", offset: 5, found: "\"0b102\"", expected: "not a valid base-2 number"),
        BadInput(text: "a == 12abc", offset: 5, found: "\"12a\"", expected: "a number runs into letters"),
        BadInput(text: "bogus(1) == 1", offset: 0, found: "\"bogus\"", expected: "not a known function"),
        BadInput(text: "SUBQUERY(items, x, x > 1).@count == 1", offset: 16, found: "\"x\"", expected: "SUBQUERY's $variable"),
        BadInput(text: "a == CAST('x', 'NSDate')", offset: 15, found: "the string \"NSDate\"", expected: "cannot CAST a string"),
        BadInput(text: "a == 'x' == 'y'", offset: 9, found: "\"==\"", expected: "expected the end of the predicate"),
        BadInput(text: "a IN {1, 2", offset: 10, found: "the end of the text", expected: "to close the list"),
        BadInput(text: "a == $", offset: 5, found: "\"$\"", expected: "variable name"),
        BadInput(text: "'\\x4' == a", offset: 1, found: "\"\\x4\"", expected: "2 hexadecimal digits"),
        BadInput(text: "", offset: 0, found: "the end of the text", expected: "expected an expression"),
    ]

    @Test(arguments: badInputs)
    func malformedTextIsAnErrorThatNamesItsPosition(_ input: BadInput) {
        do {
            let parsed = try FetchPredicate(format: input.text)
            Issue.record("\(input.text) parsed as \(parsed.predicateFormat)")
        } catch {
            #expect(error.offset == input.offset, "\(input.text): \(error)")
            #expect(error.found == input.found, "\(input.text): \(error)")
            #expect(error.message.contains(input.expected), "\(input.text): \(error)")
            #expect(error.description.contains("at offset \(input.offset)"))
        }
    }

    @Test func multiLineTextReportsLineAndColumn() {
        do {
            _ = try FetchPredicate(format: "age > 3 AND\n  name == 'x' AND\n  tags CONTAINS ? ")
            Issue.record("parsed")
        } catch {
            #expect(error.line == 3)
            #expect(error.column == 17)
            #expect(error.description.contains("line 3, column 17"))
        }
    }

    @Test func wrongArgumentsAreNamed() {
        #expect(throws: PredicateSyntaxError.self) { try FetchPredicate(format: "a == %@ OR b == %@", 1) }
        do {
            _ = try FetchPredicate(format: "%K == 1", 5)
            Issue.record("a number was accepted as a key path")
        } catch {
            #expect(error.message == "%K needs a key path string, but its argument is an integer")
        }
        do {
            _ = try FetchPredicate(format: "a == %d", "seven")
            Issue.record("a string was accepted for %d")
        } catch {
            #expect(error.message.contains("%d needs an integer"))
        }
    }

    @Test func anEvaluationErrorNamesTheComparison() {
        do {
            _ = try FetchPredicate(format: "age > 3 AND name < 5").evaluate(with: tablePerson)
            Issue.record("ordering a string against a number evaluated")
        } catch let error as PredicateEvaluationError {
            #expect(error.code == .typeMismatch)
            #expect(error.description == "cannot order a string against an integer (in `name < 5`) [typeMismatch]")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}
