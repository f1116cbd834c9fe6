import Foundation
import Testing
@testable import ObjectGraph

@Suite struct PredicateTableTests {
    @Test func theTableHasAtLeastTwoHundredCases() {
        #expect(predicateTable.count >= 200)
    }

    @Test(arguments: predicateTable.indices)
    func parsePrintReparseAndEvaluate(_ index: Int) throws {
        let entry = predicateTable[index]
        let predicate = try FetchPredicate(format: entry.format, argumentArray: entry.arguments)
        #expect(predicate.predicateFormat == entry.printed, "format: \(entry.format)")
        let reparsed = try FetchPredicate(format: predicate.predicateFormat)
        #expect(reparsed == predicate, "printed: \(predicate.predicateFormat)")
        let outcome: Outcome
        do {
            outcome = try predicate.evaluate(with: tablePerson, variables: entry.variables) ? .yes : .no
        } catch {
            outcome = .fails(error.code)
        }
        #expect(outcome == entry.outcome, "format: \(entry.format)")
    }
}
