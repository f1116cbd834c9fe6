import Foundation
import FuzzSupport
import ObjectGraph

// The predicate language: any text either parses or is a syntax error; what parses prints in a form that parses back
// to an equal predicate (and prints the same again), survives substitution, and evaluates against plain values —
// strings, numbers, dates, collections, nested objects — without a trap.

private let arguments: [PredicateValue] = [
    "name", 7, 2.5, [1, "x", .null], .date(Date(timeIntervalSinceReferenceDate: 86_400)), .null,
    .decimal(Decimal(string: "12.50")!), true,
]

private let friend: [String: PredicateValue] = ["name": "Björn", "age": 51, "tags": ["c"], "friend": .null]

private let objects: [[String: PredicateValue]] = [
    [
        "name": "Ada Lovelace", "age": 36, "score": 9.5, "flag": true, "when": .date(Date(timeIntervalSinceReferenceDate: 0)),
        "tags": ["a", "B", "ç"], "numbers": [1, 2.5, 3], "friend": .dictionary(friend),
        "friends": .array([.dictionary(friend), .dictionary(["name": "Cy", "age": 12])]),
        "bytes": .data(Data([0, 1, 2])), "id": .uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))),
        "link": .uri(URL(string: "https://example.com/a")!), "amount": .decimal(Decimal(string: "1.25")!), "nothing": .null,
    ],
    [:],
]

private let variables: [String: PredicateValue] = ["x": 3, "list": [1, "a"], "s": "Ada", "d": .date(Date(timeIntervalSinceReferenceDate: 10))]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPredicate(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeRawBufferPointer(start: start, count: count), as: UTF8.self)
    guard let predicate = try? FetchPredicate(format: text, argumentArray: arguments.map { $0 }) else { return 0 }
    let printed = predicate.predicateFormat
    let reparsed: FetchPredicate
    do {
        reparsed = try FetchPredicate(format: printed)
    } catch {
        finding("\(text.debugDescription) printed as \(printed.debugDescription), which does not parse: \(error)")
    }
    guard reparsed == predicate else {
        finding("\(text.debugDescription) printed as \(printed.debugDescription), which parses as \(reparsed.predicateFormat.debugDescription)")
    }
    guard reparsed.predicateFormat == printed else {
        finding("\(printed.debugDescription) prints again as \(reparsed.predicateFormat.debugDescription)")
    }
    for object in objects {
        _ = try? predicate.evaluate(with: object, variables: variables)
    }
    if let substituted = try? predicate.withSubstitutionVariables(variables) {
        _ = try? substituted.evaluate(with: objects[0])
        _ = substituted.predicateFormat
    }
    _ = try? predicate.evaluate(with: "Ada")
    _ = try? predicate.evaluate(with: [1, 2, 3] as [Int])
    return 0
}
