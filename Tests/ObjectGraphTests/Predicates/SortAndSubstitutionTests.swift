import Foundation
import Testing
import TestSupport
@testable import ObjectGraph

@Suite struct SortDescriptorTests {
    let rows: [[String: PredicateValue]] = [
        ["id": 1, "n": 10, "s": "banana", "d": .null],
        ["id": 2, "n": 2.5, "s": "Apple", "d": .date(Date(timeIntervalSinceReferenceDate: 5))],
        ["id": 3, "n": .null, "s": "file10", "d": .date(Date(timeIntervalSinceReferenceDate: 1))],
        ["id": 4, "n": .decimal(3), "s": "file9", "d": .null],
        ["id": 5, "n": true, "s": "apple", "d": .date(Date(timeIntervalSinceReferenceDate: 3))],
    ]

    func ids(_ descriptors: [FetchSortDescriptor]) -> [Int64] {
        FetchSortDescriptor.sorted(rows, using: descriptors).map { if case .integer(let id) = $0["id"]! { id } else { -1 } }
    }

    @Test func nullsComeFirstAscendingAndMixedNumbersSortAsNumbers() {
        #expect(ids([FetchSortDescriptor(keyPath: "n")]) == [3, 5, 2, 4, 1])
        #expect(ids([FetchSortDescriptor(keyPath: "n", ascending: false)]) == [1, 4, 2, 5, 3])
    }

    @Test func datesSortByTimeAndTiesKeepTheirOrder() {
        #expect(ids([FetchSortDescriptor(keyPath: "d")]) == [1, 4, 3, 5, 2])
        #expect(ids([FetchSortDescriptor(keyPath: "d"), FetchSortDescriptor(keyPath: "id", ascending: false)]) == [4, 1, 3, 5, 2])
    }

    @Test func stringComparisonsDefaultCaseInsensitiveAndLocalizedStandard() {
        #expect(ids([FetchSortDescriptor(keyPath: "s")]) == [2, 5, 1, 3, 4])
        #expect(ids([FetchSortDescriptor(keyPath: "s", comparison: .caseInsensitive), FetchSortDescriptor(keyPath: "id")]) == [2, 5, 1, 3, 4])
        // Finder order: lower case before upper case for otherwise equal names, and file9 before file10.
        #expect(ids([FetchSortDescriptor(keyPath: "s", comparison: .localizedStandard), FetchSortDescriptor(keyPath: "id")]) == [5, 2, 1, 4, 3])
    }

    /// The first k of a sort (a bounded heap when k is small) are exactly the full sort's first k, ties included.
    @Test func aPrefixIsTheFullSortsPrefix() {
        var random = SplitMix64(seed: 21)
        for trial in 0..<200 {
            let count = Int(random.next() % 300)
            let rows: [[String: PredicateValue]] = (0..<count).map { n in
                let value: PredicateValue = switch random.next() % 5 {
                case 0: .null
                case 1: .integer(Int64(random.next() % 20))
                case 2: .double(Double(random.next() % 40) / 2)
                case 3: .decimal(Decimal(Int(random.next() % 20)))
                default: .string(["a", "B", "c"][Int(random.next() % 3)])
                }
                return ["id": .integer(Int64(n)), "v": value, "w": .integer(Int64(random.next() % 3))]
            }
            let descriptors = [FetchSortDescriptor(keyPath: "w", ascending: trial % 2 == 0), FetchSortDescriptor(keyPath: "v", ascending: false)]
            let full = FetchSortDescriptor.sorted(rows, using: descriptors).map { $0["id"]! }
            for k in [0, 1, 3, 10, count / 9, count, count + 5] {
                let prefix = FetchSortDescriptor.sorted(rows, using: descriptors, prefix: k).map { $0["id"]! }
                #expect(prefix == Array(full.prefix(k)), "trial \(trial), \(count) rows, k = \(k)")
            }
        }
    }

    /// One key whose values are all integers, or all doubles (compared as plain numbers), sorts exactly as the
    /// general comparison does: ties by position, -0.0 equal to 0.0, either direction, any prefix.
    @Test func oneNumericKeySortsAsTheGeneralComparisonDoes() {
        var random = SplitMix64(seed: 34)
        for trial in 0..<120 {
            let count = Int(random.next() % 200)
            let doubles = trial % 2 == 0
            let values: [PredicateValue] = (0..<count).map { _ in
                doubles ? .double([-0.0, 0.0, 1.5, -2.25, .infinity, -.infinity, 7][Int(random.next() % 7)])
                        : .integer([Int64.min, -3, 0, 4, 4, Int64.max][Int(random.next() % 6)])
            }
            let rows: [[String: PredicateValue]] = values.enumerated().map { ["id": .integer(Int64($0.offset)), "v": $0.element] }
            let descriptor = FetchSortDescriptor(keyPath: "v", ascending: trial % 4 < 2)
            let reference = rows.indices.sorted { a, b in
                let order = descriptor.compare(values[a], values[b])
                return order != 0 ? order < 0 : a < b
            }.map { PredicateValue.integer(Int64($0)) }
            for k in [nil, 0, 1, 5, count / 10, count] {
                let sorted = FetchSortDescriptor.sorted(rows, using: [descriptor], prefix: k).map { $0["id"]! }
                #expect(sorted == Array(reference.prefix(k ?? count)), "trial \(trial), \(count) rows, k = \(String(describing: k))")
            }
        }
    }

    @Test func incomparableKindsStillSortTotally() {
        let mixed: [PredicateValue] = ["b", 1, .null, .date(Date(timeIntervalSinceReferenceDate: 0)), "a", 0.5]
        let sorted = mixed.sorted { FetchSortDescriptor(keyPath: "x").compare($0, $1) < 0 }
        #expect(sorted == [.null, 0.5, 1, "a", "b", .date(Date(timeIntervalSinceReferenceDate: 0))])
    }

    @Test func aSortDescriptorDescribesItself() {
        #expect(FetchSortDescriptor(keyPath: "name", ascending: false, comparison: .caseInsensitive).description == "name descending (caseInsensitive)")
    }
}

@Suite struct SubstitutionTests {
    @Test func variablesAreReplacedByConstants() throws {
        let template = try FetchPredicate(format: "age > $MIN AND name BEGINSWITH $PREFIX")
        #expect(template.variableNames == ["MIN", "PREFIX"])
        let bound = try template.withSubstitutionVariables(["MIN": 18, "PREFIX": "A"])
        #expect(bound.predicateFormat == "age > 18 AND name BEGINSWITH \"A\"")
        #expect(bound.variableNames.isEmpty)
        #expect(try bound.evaluate(with: ["age": 20, "name": "Ann"]))
    }

    @Test func aMissingBindingIsNamed() throws {
        let template = try FetchPredicate(format: "age > $MIN AND age < $MAX")
        do {
            _ = try template.withSubstitutionVariables(["MIN": 1])
            Issue.record("a missing variable was substituted")
        } catch {
            #expect(error.code == .missingVariable)
            #expect(error.message == "no value was given for the variable $MAX")
        }
    }

    @Test func subqueryVariablesAndKeyPathsFromPercentKStayAlone() throws {
        let predicate = try FetchPredicate(format: "SUBQUERY(items, $x, $x.price > $LIMIT).@count > 0 AND %K == 1", "$single")
        #expect(predicate.variableNames == ["LIMIT"])
        let bound = try predicate.withSubstitutionVariables(["LIMIT": 5])
        #expect(bound.predicateFormat == "SUBQUERY(items, $x, $x.price > 5).@count > 0 AND $single == 1")
    }

    @Test func modelTemplatesParseAndTakeBindings() throws {
        let model = try ManagedObjectModel(contentsOfCoreDataModel: fixture("Configurations.xcdatamodel"))
        let template = try #require(model.fetchRequestTemplate(named: "NotesModifiedSince"))
        let since = Date(timeIntervalSinceReferenceDate: 1000)
        let predicate = try template.predicate(substitutionVariables: ["SINCE": .date(since)])
        #expect(predicate.predicateFormat == "modified >= CAST(1000.0, \"NSDate\")")
        #expect(try model.fetchRequestTemplate(named: "AllSettings")!.predicate() == .truePredicate)
        #expect(throws: PredicateEvaluationError.self) { try template.predicate() }
    }

    @Test func aTemplateWhosePredicateDoesNotParseIsAModelProblem() {
        do {
            _ = try ManagedObjectModel(entities: [EntityDescription("A")],
                                       fetchRequestTemplates: [FetchRequestTemplate("Bad", entity: "A", predicate: "age >")])
            Issue.record("a broken template predicate was accepted")
        } catch {
            #expect(error.problems.map(\.code) == [.invalidPredicate])
            #expect(error.description.contains("the fetch request template \"Bad\" has a predicate that does not parse"))
        }
    }

    @Test func compoundBuildersFlattenAndPrint() throws {
        let a = try FetchPredicate(format: "a == 1"), b = try FetchPredicate(format: "b == 2"), c = try FetchPredicate(format: "c == 3")
        #expect(FetchPredicate.and([a, FetchPredicate.and([b, c])]).predicateFormat == "a == 1 AND b == 2 AND c == 3")
        #expect(FetchPredicate.or([a, .not(b)]).predicateFormat == "a == 1 OR NOT b == 2")
        #expect(FetchPredicate.and([]) == .truePredicate)
        #expect(FetchPredicate.or([]) == .falsePredicate)
    }
}
