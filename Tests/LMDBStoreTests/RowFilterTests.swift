import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// The compiled row filter answers from a row's bytes only what the evaluator would answer, and leaves to it what
/// the bytes cannot settle.
@Suite(.onEveryEngine) struct RowFilterTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Item") {
            AttributeDescription("name", .string, isOptional: true)
            AttributeDescription("count", .integer64, isOptional: true)
            AttributeDescription("weight", .double, isOptional: true)
            AttributeDescription("ratio", .float, isOptional: true)
            AttributeDescription("seen", .date, isOptional: true)
            AttributeDescription("done", .boolean, isOptional: true)
        }
    }

    /// The filter's answer and the evaluator's for one row.
    func answers(_ format: String, _ values: [String: AttributeValue], _ arguments: [any PredicateArgument] = []) throws -> (filter: Bool?, evaluator: Bool) {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Item")!
        let predicate = try FetchPredicate(format: format, argumentArray: arguments)
        guard let filter = RowFilter(predicate, entity: "Item", model: model, layout: layout, storeIdentifier: "") else {
            Issue.record("\(format) did not compile")
            return (nil, false)
        }
        let blob = RowCodec.encode(StoredRow(entity: entity, version: 1, attributes: values, toOne: [:]))
        let settled = try blob.withUnsafeBytes { filter.matches(try EncodedRow($0, layout: layout)) }
        let expected = try predicate.evaluate(with: values.mapValues(PredicateValue.init))
        return (settled, expected)
    }

    @Test func asciiTextAndNumbersAreSettledFromTheBytes() throws {
        let cases: [(String, [String: AttributeValue])] = [
            ("name BEGINSWITH 'Gra'", ["name": .string("Grace")]), ("name BEGINSWITH 'Gra'", ["name": .string("Gr")]),
            ("name BEGINSWITH 'Gra'", ["name": .string("Gxa")]), ("name BEGINSWITH ''", ["name": .string("x")]),
            ("name BEGINSWITH 'a'", [:]), ("name == 'Ann'", ["name": .string("Ann")]), ("name == 'Ann'", ["name": .string("Ann\u{0}")]),
            ("name != 'Ann'", ["name": .string("Anne")]), ("name < 'B'", ["name": .string("Ann")]), ("name >= 'B'", ["name": .string("Ann")]),
            ("name > 'Ann'", ["name": .string("Ann")]), ("name <= 'Ann'", ["name": .string("An")]), ("name == nil", [:]),
            ("name != nil", [:]), ("name < nil", ["name": .string("a")]), ("name == nil", ["name": .string("")]),
            ("count == 3", ["count": .integer(3)]), ("count < -2", ["count": .integer(Int64.min)]), ("count > 2", [:]),
            ("count != 2", [:]), ("count >= 9223372036854775807", ["count": .integer(Int64.max)]),
            ("weight > 2", ["weight": .double(2.5)]), ("weight == 0.1", ["weight": .double(0.1)]), ("weight <= -1.5", ["weight": .double(-1.5)]),
            ("ratio < 0.5", ["ratio": .float(0.25)]), ("ratio == 0.1", ["ratio": .float(0.1)]),
            ("NOT (count == 3 OR name BEGINSWITH 'x')", ["count": .integer(4), "name": .string("xy")]),
            ("count > 1 AND weight < 1", ["count": .integer(2), "weight": .double(0.5)]),
            ("count IN {1, 2}", ["count": .integer(2)]), ("count IN {1, 2}", ["count": .integer(3)]), ("count IN {1, 2}", [:]),
            ("count IN {}", ["count": .integer(1)]), ("NOT count IN {1, 2}", ["count": .integer(5)]),
            ("weight IN {0.5, 2}", ["weight": .double(2)]), ("weight IN {0.5, 2}", ["weight": .double(0.25)]),
            ("ratio IN {0.25, 0.1}", ["ratio": .float(0.25)]), ("ratio IN {0.1}", ["ratio": .float(0.1)]),
            ("name IN {'Ann', 'Bo'}", ["name": .string("Bo")]), ("name IN {'Ann', 'Bo'}", ["name": .string("Bob")]),
            ("name IN {'Ann', 'Bo'}", [:]), ("name IN {'Ann', ''}", ["name": .string("")]),
            ("name IN {'Ann'} AND count IN {7}", ["name": .string("Ann"), "count": .integer(7)]),
            ("name CONTAINS 'ac'", ["name": .string("Grace")]), ("name CONTAINS 'AC'", ["name": .string("Grace")]),
            ("name CONTAINS[c] 'AC'", ["name": .string("Grace")]), ("name CONTAINS[cd] 'gR'", ["name": .string("Grace")]),
            ("name CONTAINS ''", ["name": .string("")]), ("name CONTAINS 'x'", [:]), ("name CONTAINS 'Graceful'", ["name": .string("Grace")]),
            ("name CONTAINS[n] 'race'", ["name": .string("Grace")]), ("name CONTAINS 'e'", ["name": .string("Grace")]),
            ("name ENDSWITH 'ce'", ["name": .string("Grace")]), ("name ENDSWITH 'Ce'", ["name": .string("Grace")]),
            ("name ENDSWITH[c] 'CE'", ["name": .string("Grace")]), ("name ENDSWITH ''", ["name": .string("a")]), ("name ENDSWITH 'a'", [:]),
            ("name BEGINSWITH[c] 'gRA'", ["name": .string("Grace")]), ("name BEGINSWITH[cd] 'x'", ["name": .string("Grace")]),
            ("name BEGINSWITH[c] 'grace!'", ["name": .string("Grace")]), ("NOT name CONTAINS[c] 'z'", ["name": .string("Zoe")]),
            ("name CONTAINS[c] '@'", ["name": .string("[@]")]), ("name CONTAINS[c] '['", ["name": .string("{")]),
        ]
        for (format, values) in cases {
            let (settled, expected) = try answers(format, values)
            #expect(settled == expected, "\(format) on \(values)")
        }
    }

    /// Substring tests on texts long enough for the eight-bytes-at-a-time passes (the ASCII check, the search for
    /// the first byte in either case): random texts over an alphabet with the bytes around the case bit (`@`, `[`,
    /// `` ` ``, `{`), letters of both cases, a carriage return or a non-ASCII letter now and then, random needles —
    /// the filter settles every plain-ASCII text, and always as the evaluator does.
    @Test func longTextSubstringsAreSettledAsTheEvaluatorAnswers() throws {
        var random = SplitMix64(seed: 41)
        let alphabet = Array("aAbBgGzZ@[`{ 09_-~")
        var settledCount = 0
        for round in 0..<1_500 {
            var text = String((0..<Int(random.next() % 41)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
            if round % 17 == 0 { text.insert("\r", at: text.index(text.startIndex, offsetBy: Int(random.next() % UInt64(text.count + 1)))) }
            if round % 23 == 0 { text += "é" }
            let needle: String
            if !text.isEmpty && random.next() % 2 == 0 {
                // A piece of the text itself (found), its case flipped now and then.
                let start = Int(random.next() % UInt64(text.count)), length = 1 + Int(random.next() % 5)
                let piece = String(text.dropFirst(start).prefix(length))
                needle = random.next() % 3 == 0 ? piece.uppercased() : piece
            } else {
                needle = String((0..<1 + Int(random.next() % 4)).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
            }
            let op = ["CONTAINS", "BEGINSWITH", "ENDSWITH"][Int(random.next() % 3)] + (random.next() % 2 == 0 ? "[c]" : "")
            guard needle.utf8.allSatisfy({ $0 < 0x80 }) else { continue }  // (a non-ASCII needle is the evaluator's alone)
            let (settled, expected) = try answers("name \(op) %@", ["name": .string(text)], [needle])
            if let settled {
                settledCount += 1
                #expect(settled == expected, "\(text.debugDescription) \(op) \(needle.debugDescription)")
            } else {
                #expect(text.contains("\r") || text.contains("é"), "plain ASCII is settled: \(text.debugDescription) \(op) \(needle.debugDescription)")
            }
        }
        #expect(settledCount > 1_000)
    }

    /// Dates, Booleans and BETWEEN are settled from the bytes too, with the evaluator's answer.
    @Test func datesBooleansAndRangesAreSettledFromTheBytes() throws {
        let early = Date(timeIntervalSinceReferenceDate: 100), late = Date(timeIntervalSinceReferenceDate: 200)
        let cases: [(String, [String: AttributeValue], [any PredicateArgument])] = [
            ("seen > %@", ["seen": .date(late)], [early]), ("seen > %@", ["seen": .date(early)], [early]),
            ("seen <= %@", ["seen": .date(early)], [late]), ("seen == %@", ["seen": .date(late)], [late]),
            ("seen != %@", [:], [late]), ("seen < %@", [:], [late]), ("seen BETWEEN %@", ["seen": .date(early)], [[early, late]]),
            ("done == YES", ["done": .boolean(true)], []), ("done == YES", ["done": .boolean(false)], []),
            ("done != NO", ["done": .boolean(true)], []), ("done == NO", [:], []), ("done == nil", [:], []),
            ("count BETWEEN {2, 5}", ["count": .integer(5)], []), ("count BETWEEN {2, 5}", ["count": .integer(6)], []),
            ("count BETWEEN {2, 5}", [:], []), ("weight BETWEEN {0.5, 1}", ["weight": .double(0.75)], []),
            ("name BETWEEN {'a', 'c'}", ["name": .string("b")], []), ("name BETWEEN {'a', 'c'}", ["name": .string("d")], []),
            ("NOT count BETWEEN {2, 5}", ["count": .integer(1)], []),
        ]
        for (format, values, arguments) in cases {
            let (settled, expected) = try answers(format, values, arguments)
            #expect(settled == expected, "\(format) on \(values)")
        }
    }

    @Test func textWhereUnicodeEquivalenceCouldMatterIsLeftToTheEvaluator() throws {
        let cases: [(String, [String: AttributeValue])] = [
            ("name BEGINSWITH 'e'", ["name": .string("e\u{301}t\u{E9}")]),   // a combining accent after the prefix
            ("name BEGINSWITH 'K'", ["name": .string("\u{212A}elvin")]),     // KELVIN SIGN is canonically "K"
            ("name == 'K'", ["name": .string("\u{212A}")]),
            ("name BEGINSWITH 'a\r'", ["name": .string("a\r\nb")]),          // "\r\n" is one character
            ("name < 'b'", ["name": .string("a\u{301}")]),
        ]
        for (format, values) in cases {
            let (settled, expected) = try answers(format, values)
            #expect(settled == nil || settled == expected, "\(format) on \(values): \(String(describing: settled)) vs \(expected)")
        }
        // The ones the bytes would get wrong must be undecided.
        #expect(try answers("name BEGINSWITH 'e'", ["name": .string("e\u{301}")]).filter == nil)
        #expect(try answers("name == 'K'", ["name": .string("\u{212A}")]).filter == nil)
        #expect(try answers("name BEGINSWITH 'a\r'", ["name": .string("a\r\n")]).filter == nil)
        #expect(try answers("name IN {'K', 'x'}", ["name": .string("\u{212A}")]).filter == nil)
        #expect(try answers("name CONTAINS[c] 'k'", ["name": .string("\u{212A}")]).filter == nil)
        #expect(try answers("name CONTAINS '\n'", ["name": .string("a\r\nb")]).filter == nil)
        #expect(try answers("name ENDSWITH 'e'", ["name": .string("e\u{301}")]).filter == nil)
        #expect(try answers("name CONTAINS[d] 'e'", ["name": .string("\u{E9}")]).filter == nil)
        #expect(try answers("name IN {'K', 'x'}", ["name": .string("\u{212A}")]).evaluator == true)
    }

    /// `IN` with thousands of members answers a scan with one lookup per row, and the same rows as member-by-member.
    @Test func aFetchWithALargeInCollectionFindsItsRows() throws {
        let folder = StoreFolder()
        let (coordinator, _) = try folder.coordinator(model)
        let context = ManagedObjectContext(coordinator: coordinator)
        for n in 0..<400 {
            let item = try context.insertNewObject(forEntityName: "Item")
            try item.setValue("n\(n)", forKey: "name")
            try item.setValue(Int64(n), forKey: "count")
            if n % 2 == 0 { try item.setValue(Double(n) / 2, forKey: "weight") }
        }
        try context.save()
        func names(_ format: String, _ arguments: any PredicateArgument...) throws -> Set<String> {
            let request = FetchRequest(entityName: "Item", predicate: try FetchPredicate(format: format, argumentArray: arguments))
            return Set(try context.fetch(request).compactMap { $0["name"] as? String })
        }
        let wanted = (0..<5000).filter { $0 % 3 == 0 }.map { "n\($0)" }
        #expect(try names("name IN %@", wanted) == Set((0..<400).filter { $0 % 3 == 0 }.map { "n\($0)" }))
        #expect(try names("count IN %@ AND name != 'n6'", (0..<5000).filter { $0 % 3 == 0 }) == Set((0..<400).filter { $0 % 3 == 0 && $0 != 6 }.map { "n\($0)" }))
        #expect(try names("weight IN %@", [1.0, 2.5, 7.0, 1000.0]) == ["n2", "n14"])
        #expect(try names("NOT name IN %@", wanted).count == 400 - 134)
    }

    @Test func predicatesWithNoPartTheBytesAnswerDoNotCompile() throws {
        for format in ["name BEGINSWITH[c] 'É'", "name CONTAINS[c] 'é'", "count CONTAINS '1'", "name ENDSWITH nil", "name ==[c] 'a'", "name == 'É'", "count == 2.5", "name == 3", "count IN {1, 2.5}", "done < YES", "seen > 5", "weight == 9007199254740993", "weight IN {1, 9007199254740993}", "count BETWEEN {1, nil}", "done BETWEEN {NO, YES}", "count BETWEEN {1}", "name IN {'a', nil}",
                       "name IN {'É'}", "name IN[c] {'a'}", "weight IN {1, 'a'}", "count IN 'abc'",
                       "ANY name == 'a'", "name.length > 2", "count + 1 > 2", "name MATCHES 'a' OR count + 1 > 2", "NOT name MATCHES 'a'"] {
            #expect(RowFilter(try FetchPredicate(format: format), entity: "Item", model: model, layout: StoreLayout(model: model), storeIdentifier: "") == nil, "\(format)")
        }
    }

    /// A predicate with parts the bytes cannot answer is still settled by the parts they can — an AND with a false
    /// operand, an OR with a true one — and left to the evaluator otherwise.
    @Test func partsTheBytesCannotAnswerLeaveTheRestSettled() throws {
        let cases: [(String, [String: AttributeValue], Bool?)] = [
            ("weight == nil OR name MATCHES 'a.*'", [:], true),
            ("weight == nil OR name MATCHES 'a.*'", ["weight": .double(1), "name": .string("ab")], nil),
            ("count == 3 AND name MATCHES 'x.*'", ["count": .integer(4), "name": .string("xy")], false),
            ("count == 3 AND name MATCHES 'x.*'", ["count": .integer(3), "name": .string("xy")], nil),
            ("count == 3 AND name.length > 1", ["count": .integer(2)], false),
            ("NOT (count == 3 AND name MATCHES 'x.*')", ["count": .integer(4)], true),
            ("(count > 1 OR name ==[c] 'a') AND weight < 1", ["count": .integer(0), "weight": .double(2), "name": .string("A")], false),
            ("(count > 1 OR name ==[c] 'a') AND weight < 1", ["count": .integer(0), "weight": .double(0), "name": .string("A")], nil),
            ("count IN {1, 2.5} AND done == YES", ["count": .integer(1), "done": .boolean(false)], false),
        ]
        for (format, values, settled) in cases {
            let answer = try answers(format, values)
            #expect(answer.filter == settled, "\(format) on \(values)")
            #expect(answer.filter == nil || answer.filter == answer.evaluator, "\(format) on \(values): the evaluator says \(answer.evaluator)")
        }
    }

    /// A to-one compared with objects is settled from the reference the row holds (entity tag and row key): equal
    /// only to the object it names — not to an object of another entity with the same key, another store's, or one
    /// not yet saved.
    @Test func toOnesComparedWithObjectsAreSettledFromTheReference() throws {
        let staffModel = try ManagedObjectModel {
            EntityDescription("Employee") {
                AttributeDescription("name", .string, isOptional: true)
                RelationshipDescription("unit", destination: "Unit", inverse: "members")
            }
            EntityDescription("Unit") {
                RelationshipDescription("members", destination: "Employee", inverse: "unit", toMany: true)
            }
            EntityDescription("Lab", parent: "Unit") {}
        }
        let layout = StoreLayout(model: staffModel)
        let employee = layout.entity("Employee")!, unit = layout.entity("Unit")!, lab = layout.entity("Lab")!
        func id(_ entity: String, _ key: Int64, store: String = "S") -> ManagedObjectID {
            ManagedObjectID(entityName: entity, storeIdentifier: store, referenceObject: .integer(key))
        }
        func answer(_ format: String, _ arguments: [any PredicateArgument], _ target: StoredRow.Reference?) throws -> Bool? {
            let predicate = try FetchPredicate(format: format, argumentArray: arguments)
            let filter = try #require(RowFilter(predicate, entity: "Employee", model: staffModel, layout: layout, storeIdentifier: "S"), "\(format)")
            let row = StoredRow(entity: employee, version: 1, attributes: ["name": .string("Ann")], toOne: target.map { ["unit": $0] } ?? [:])
            let blob = RowCodec.encode(row)
            return try blob.withUnsafeBytes { filter.matches(try EncodedRow($0, layout: layout)) }
        }
        let five = StoredRow.Reference(entityTag: unit.tag, key: 5), labFive = StoredRow.Reference(entityTag: lab.tag, key: 5)
        let six = StoredRow.Reference(entityTag: unit.tag, key: 6)
        #expect(try answer("unit == %@", [id("Unit", 5)], five) == true)
        #expect(try answer("unit == %@", [id("Unit", 5)], six) == false)
        #expect(try answer("unit == %@", [id("Unit", 5)], labFive) == false, "another entity's row with the same key")
        #expect(try answer("unit == %@", [id("Lab", 5)], labFive) == true)
        #expect(try answer("unit == %@", [id("Unit", 5)], nil) == false)
        #expect(try answer("unit != %@", [id("Unit", 5)], five) == false)
        #expect(try answer("unit != %@", [id("Unit", 5)], six) == true)
        #expect(try answer("unit != %@", [id("Unit", 5)], nil) == true)
        #expect(try answer("unit == nil", [], nil) == true)
        #expect(try answer("unit == nil", [], five) == false)
        #expect(try answer("unit != nil", [], five) == true)
        #expect(try answer("unit IN %@", [[id("Unit", 7), id("Unit", 5)]], five) == true)
        #expect(try answer("unit IN %@", [[id("Unit", 7), id("Lab", 6)]], six) == false)
        #expect(try answer("unit IN %@", [[id("Unit", 7)]], nil) == false)
        #expect(try answer("NOT unit IN %@", [[id("Unit", 7)]], five) == true)
        #expect(try answer("unit == %@", [id("Unit", 5, store: "T")], five) == false, "another store's object")
        #expect(try answer("unit != %@", [id("Unit", 5, store: "T")], five) == true)
        let unsaved = ManagedObjectContext(coordinator: PersistentStoreCoordinator(managedObjectModel: staffModel))
        let fresh = try unsaved.insertNewObject(forEntityName: "Unit")
        #expect(try answer("unit == %@", [fresh], five) == false, "an object not yet saved")
        #expect(try answer("unit == %@ AND name BEGINSWITH 'A'", [id("Unit", 5)], five) == true)
        // What the bytes cannot tell is left to the evaluator.
        #expect(RowFilter(try FetchPredicate(format: "unit == 'x'"), entity: "Employee", model: staffModel, layout: layout, storeIdentifier: "S") == nil)
        #expect(RowFilter(try FetchPredicate(format: "unit IN %@", PredicateValue.array([id("Unit", 5).predicateValue, .string("x")])), entity: "Employee", model: staffModel, layout: layout,
                          storeIdentifier: "S") == nil)
        #expect(RowFilter(try FetchPredicate(format: "unit.name == 'x'"), entity: "Employee", model: staffModel, layout: layout, storeIdentifier: "S") == nil)
        #expect(RowFilter(try FetchPredicate(format: "unit < %@", id("Unit", 5)), entity: "Employee", model: staffModel, layout: layout,
                          storeIdentifier: "S") == nil)
    }

    /// Through a store: to-one comparisons the rows settle give the in-memory store's answers, objects of another
    /// store included.
    @Test func toOneComparisonsOnRowsAgreeWithTheInMemoryStore() throws {
        let staffModel = try ManagedObjectModel {
            EntityDescription("Employee") {
                AttributeDescription("name", .string)
                AttributeDescription("level", .integer16, defaultValue: 0)
                RelationshipDescription("unit", destination: "Unit", inverse: "members")
                FetchIndexDescription("byLevel", properties: ["level"])
            }
            EntityDescription("Unit") {
                AttributeDescription("code", .integer32, defaultValue: 0)
                RelationshipDescription("members", destination: "Employee", inverse: "unit", toMany: true)
            }
            EntityDescription("Lab", parent: "Unit") {}
        }
        let folder = StoreFolder()
        func load(_ coordinator: PersistentStoreCoordinator) throws {
            let context = ManagedObjectContext(coordinator: coordinator)
            let units = try (0..<6).map { n in
                let unit = try context.insertNewObject(forEntityName: n % 3 == 2 ? "Lab" : "Unit")
                try unit.setValue(Int32(n), forKey: "code")
                return unit
            }
            for n in 0..<300 {
                let person = try context.insertNewObject(forEntityName: "Employee")
                try person.setValue("p\(n)", forKey: "name")
                try person.setValue(Int16(n % 9), forKey: "level")
                if n % 7 != 0 { try person.setValue(units[n % units.count], forKey: "unit") }
            }
            try context.save()
        }
        let (lmdb, store, memory) = try folder.twinStores(staffModel, load)
        func units(_ coordinator: PersistentStoreCoordinator) throws -> [ManagedObjectID] {
            try ManagedObjectContext(coordinator: coordinator)
                .fetchObjectIDs(FetchRequest(entityName: "Unit", sortDescriptors: [FetchSortDescriptor(keyPath: "code")]))
        }
        let (mine, theirs) = (try units(lmdb), try units(memory))
        let formats = ["level > 2 AND unit == %@", "unit != %@", "unit != %@ AND level < 4", "level IN {1, 2} AND (unit == %@ OR name ENDSWITH '3')",
                       "NOT unit IN %@", "unit IN %@ AND level != 0", "unit == nil OR unit == %@", "level > 6 AND NOT (unit == %@)"]
        for format in formats {
            for pick in [0, 2, 5] {
                func arguments(_ ids: [ManagedObjectID]) -> [any PredicateArgument] {
                    format.contains("IN %@") ? [[ids[pick], ids[(pick + 1) % ids.count]]] : [ids[pick]]
                }
                let request = FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: format, argumentArray: arguments(mine)))
                let found = try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(request).map(\.referenceObject)
                let expected = try ManagedObjectContext(coordinator: memory)
                    .fetchObjectIDs(request.with { $0.predicate = try! FetchPredicate(format: format, argumentArray: arguments(theirs)) }).map(\.referenceObject)
                #expect(found == expected, "\(format) with unit \(pick), plan \(store.explain(request))")
                // The in-memory store's objects are another store's: equal to no row's unit.
                let foreign = request.with { $0.predicate = try! FetchPredicate(format: format, argumentArray: arguments(theirs)) }
                let none = try ManagedObjectContext(coordinator: memory)
                    .fetchObjectIDs(request.with { $0.predicate = try! FetchPredicate(format: format, argumentArray: arguments(mine)) }).map(\.referenceObject)
                #expect(try ManagedObjectContext(coordinator: lmdb).fetchObjectIDs(foreign).map(\.referenceObject) == none, "\(format) with another store's unit")
            }
        }
    }
}
