import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// Dictionary fetches the LMDB store computes itself must give exactly what the context computes from objects of
/// an in-memory store holding the same data.
@Suite(.onEveryEngine) struct DictionaryFetchTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Department") {
            AttributeDescription("name", .string)
            RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true)
        }
        EntityDescription("Employee") {
            AttributeDescription("name", .string)
            AttributeDescription("age", .integer32, isOptional: true)
            AttributeDescription("salary", .double, isOptional: true)
            RelationshipDescription("department", destination: "Department", inverse: "employees")
            FetchIndexDescription("byAge", properties: ["age"])
            FetchIndexDescription("byName", properties: ["name"])
        }
        EntityDescription("Manager", parent: "Employee") {
            AttributeDescription("level", .integer16, defaultValue: 1)
        }
    }

    /// Both stores with the same departments and 400 employees (NULL ages and salaries, some without a department,
    /// a quarter managers).
    func stores() throws -> (lmdb: ManagedObjectContext, memory: ManagedObjectContext, folder: StoreFolder) {
        let folder = StoreFolder()
        let (lmdbCoordinator, _) = try folder.coordinator(model)
        let memoryCoordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try memoryCoordinator.addPersistentStore(type: InMemoryStore.storeType)
        for coordinator in [lmdbCoordinator, memoryCoordinator] {
            var random = SplitMix64(seed: 42)
            let context = ManagedObjectContext(coordinator: coordinator)
            let departments = try ["R&D", "Sales", "Ops", "Legal"].map { name in
                let department = try context.insertNewObject(forEntityName: "Department")
                try department.setValue(name, forKey: "name")
                return department
            }
            for n in 0..<400 {
                let employee = try context.insertNewObject(forEntityName: random.next() % 4 == 0 ? "Manager" : "Employee")
                try employee.setValue(["Ann", "Bob", "Cy", "Dee", "Eve"][Int(random.next() % 5)] + " \(n % 9)", forKey: "name")
                if random.next() % 7 != 0 { try employee.setValue(Int32(20 + random.next() % 40), forKey: "age") }
                if random.next() % 5 != 0 { try employee.setValue(Double(random.next() % 9000) / 4, forKey: "salary") }
                if random.next() % 10 != 0 { try employee.setValue(departments[Int(random.next() % 4)], forKey: "department") }
            }
            try context.save()
        }
        return (ManagedObjectContext(coordinator: lmdbCoordinator), ManagedObjectContext(coordinator: memoryCoordinator), folder)
    }

    /// Results with departments named instead of identified, so the two stores' results can be compared.
    func comparable(_ results: [[String: PredicateValue]], _ context: ManagedObjectContext) throws -> [[String: PredicateValue]] {
        var names: [ManagedObjectID: PredicateValue] = [:]
        for department in try context.fetch(FetchRequest(entityName: "Department")) {
            names[department.objectID] = .string(department.value(forKey: "name") as! String)
        }
        return results.map { row in
            row.mapValues { value in
                if case .object(let object) = value, let id = object.base as? ManagedObjectID { return names[id] ?? .null }
                return value
            }
        }
    }

    func request(_ configure: (inout FetchRequest) throws -> Void) rethrows -> FetchRequest {
        var request = FetchRequest(entityName: "Employee")
        request.resultType = .dictionary
        try configure(&request)
        return request
    }

    @Test func theStoreComputesWhatTheContextComputes() throws {
        let (lmdb, memory, folder) = try stores()
        let ordered: [FetchRequest] = try [
            request {
                $0.propertiesToGroupBy = ["age"]
                $0.propertiesToFetch = [.keyPath("age"), .aggregate(.count, of: "SELF", as: "n"), .aggregate(.sum, of: "salary", as: "total")]
                $0.havingPredicate = try FetchPredicate(format: "n > 3")
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age", ascending: false)]
                $0.fetchOffset = 1
                $0.fetchLimit = 5
            },
            request {
                $0.predicate = try FetchPredicate(format: "age >= 30 AND age < 45")
                $0.propertiesToFetch = [.keyPath("name"), .keyPath("age"), .keyPath("department", as: "team")]
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "name"), FetchSortDescriptor(keyPath: "age"), FetchSortDescriptor(keyPath: "salary")]
                $0.fetchOffset = 7
                $0.fetchLimit = 30
            },
            request {
                $0.propertiesToFetch = [.keyPath("age")]
                $0.returnsDistinctResults = true
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age")]
                $0.fetchOffset = 2
                $0.fetchLimit = 5
            },
            request {
                $0.predicate = try FetchPredicate(format: "age >= 30 AND age < 45")
                $0.propertiesToFetch = [.keyPath("age")]
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age", ascending: false)]
                $0.fetchOffset = 3
                $0.fetchLimit = 12
            },
            request {
                $0.predicate = try FetchPredicate(format: "salary > 1000")
                $0.propertiesToFetch = [.aggregate(.count, of: "SELF", as: "n"), .aggregate(.average, of: "salary", as: "mean"),
                                        .aggregate(.min, of: "age", as: "youngest"), .aggregate(.max, of: "name", as: "last"),
                                        .aggregate(.count, of: "age", as: "withAge")]
            },
            request {
                $0.entityName = "Employee"
                $0.includesSubentities = false
                $0.predicate = try FetchPredicate(format: "name BEGINSWITH 'A'")
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "name"), FetchSortDescriptor(keyPath: "salary", ascending: false),
                                      FetchSortDescriptor(keyPath: "age")]
            },
            request {
                $0.entityName = "Manager"
                $0.propertiesToGroupBy = ["level", "department"]
                $0.propertiesToFetch = [.keyPath("level"), .keyPath("department"), .aggregate(.max, of: "salary", as: "top")]
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "top")]
            },
        ]
        // One result a row: the rows' plan carries the window and stops there; distinct or grouped results are
        // windowed after they are made.
        let (_, store) = try folder.coordinator(model)
        #expect(store.explain(ordered[1]).hasSuffix("→ Offset(7) → Limit(30) → Aggregate"), "\(store.explain(ordered[1]))")
        #expect(store.explain(ordered[3]).hasSuffix("reverse) → Offset(3) → Limit(12) → Aggregate(on index entries; else from the rows)"),
                "\(store.explain(ordered[3]))")
        #expect(!store.explain(ordered[2]).contains("Limit"), "\(store.explain(ordered[2]))")
        // The window counted once: the names of the objects the same fetch returns, offset 7, limit 30.
        var objects = ordered[1]
        objects.resultType = .managedObject
        let names = try memory.fetch(objects).map { PredicateValue.string($0.value(forKey: "name") as! String) }
        let windowed = try lmdb.fetchDictionaries(ordered[1]).map { $0["name"] ?? .null }
        #expect(names.count == 30 && windowed == names)
        for request in ordered {
            let mine = try comparable(lmdb.fetchDictionaries(request), lmdb)
            #expect(lmdb.lastDictionaryFetchStrategy == "computed by the LMDB store", "\(request)")
            let theirs = try comparable(memory.fetchDictionaries(request), memory)
            #expect(!mine.isEmpty && mine == theirs, "\(request)")
        }
        // Groups without a sort come in the order of their first rows, which is each store's own: compare as sets.
        let grouped = request {
            $0.propertiesToGroupBy = ["department"]
            $0.propertiesToFetch = [.keyPath("department"), .aggregate(.count, of: "SELF", as: "n"), .aggregate(.sum, of: "age", as: "years")]
        }
        let mine = try comparable(lmdb.fetchDictionaries(grouped), lmdb)
        #expect(lmdb.lastDictionaryFetchStrategy == "computed by the LMDB store")
        let theirs = try comparable(memory.fetchDictionaries(grouped), memory)
        #expect(mine.count == 5 && Set(mine) == Set(theirs), "four departments and the employees without one")
    }

    /// Whether the store's plan for `request` counts its groups from index keys alone (and every key gave its value).
    func countedFromKeys(_ request: FetchRequest, _ store: LMDBIncrementalStore) throws -> Bool {
        try store.withRun(of: DictionaryResults.rowRequest(for: request)) { try QueryPlan.Aggregate(request, properties: request.propertiesToFetch, run: $0).countsFromKeys(in: $0) } != nil
    }

    @Test func countsPerToOneComeFromItsIndexAlone() throws {
        let (lmdb, memory, folder) = try stores()
        let counts = request {
            $0.propertiesToGroupBy = ["department"]
            $0.propertiesToFetch = [.keyPath("department", as: "team"), .aggregate(.count, of: "SELF", as: "n")]
        }
        let (_, store) = try folder.coordinator(model)
        #expect(try countedFromKeys(counts, store))
        #expect(store.explain(counts) == "Aggregate(count by department, from toone/Employee/department's keys)")
        let mine = try comparable(lmdb.fetchDictionaries(counts), lmdb)
        let theirs = try comparable(memory.fetchDictionaries(counts), memory)
        #expect(mine.count == 5 && Set(mine) == Set(theirs), "four departments and the employees without one")
        // Having, a sort on the count and a window apply to the counted groups as to any others.
        let filtered = counts.with {
            $0.havingPredicate = try! FetchPredicate(format: "n > 30")
            $0.sortDescriptors = [FetchSortDescriptor(keyPath: "n", ascending: false)]
            $0.fetchLimit = 3
        }
        let top = try comparable(lmdb.fetchDictionaries(filtered), lmdb)
        #expect(top == (try comparable(memory.fetchDictionaries(filtered), memory)) && top.count == 3)
        // Shapes the index cannot answer alone: a predicate, a sub-entity, another aggregate.
        for other in [counts.with { $0.predicate = try! FetchPredicate(format: "age > 30") }, counts.with { $0.entityName = "Manager" },
                      counts.with { $0.includesSubentities = false },
                      counts.with { $0.propertiesToFetch.append(.aggregate(.sum, of: "age", as: "years")) }] {
            #expect(try !countedFromKeys(other, store), "\(other)")
            let mine = try comparable(lmdb.fetchDictionaries(other), lmdb)
            #expect(Set(mine) == Set(try comparable(memory.fetchDictionaries(other), memory)), "\(other)")
        }
    }

    @Test func countsPerIndexedAttributeComeFromItsIndexAlone() throws {
        let (lmdb, memory, folder) = try stores()
        let (_, store) = try folder.coordinator(model)
        func counted(_ request: FetchRequest) throws -> Bool { try countedFromKeys(request, store) }
        let byAge = request {
            $0.propertiesToGroupBy = ["age"]
            $0.propertiesToFetch = [.keyPath("age"), .aggregate(.count, of: "SELF", as: "n")]
        }
        let shapes = [
            byAge,
            byAge.with { $0.predicate = try! FetchPredicate(format: "age >= 30 AND age < 45") },
            byAge.with { $0.predicate = try! FetchPredicate(format: "age IN {22, 31, 58}"); $0.sortDescriptors = [FetchSortDescriptor(keyPath: "n")] },
            byAge.with { $0.havingPredicate = try! FetchPredicate(format: "n > 8"); $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age", ascending: false)]; $0.fetchLimit = 4 },
            request { $0.propertiesToGroupBy = ["name"]; $0.propertiesToFetch = [.keyPath("name"), .aggregate(.count, of: "*", as: "n")] },
            // The grouped key fetched under another name: each group still holds it under its own, as the context's.
            byAge.with { $0.propertiesToFetch = [.keyPath("age", as: "years"), .aggregate(.count, of: "SELF", as: "n")]; $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age", ascending: false)] },
        ]
        // The plan prints what runs: the index's keys alone, and the rows should a key not give its value back.
        #expect(store.explain(byAge) == "Aggregate(count by age, from Employee.byAge's keys; else from the rows)")
        #expect(store.explain(shapes[1]) == "Aggregate(count by age, from Employee.byAge's keys [30, 45); else from the rows)")
        for shape in shapes {
            #expect(try counted(shape), "\(shape)")
            let mine = try lmdb.fetchDictionaries(shape), theirs = try memory.fetchDictionaries(shape)
            #expect(!mine.isEmpty && (shape.sortDescriptors.isEmpty ? Set(mine) == Set(theirs) : mine == theirs), "\(shape)")
        }
        // Shapes the index cannot answer alone: a predicate it does not answer, an attribute without an index of its
        // own, another aggregate, a sub-entity or a family the index does not match.
        for other in [byAge.with { $0.predicate = try! FetchPredicate(format: "salary > 1000") },
                      byAge.with { $0.predicate = try! FetchPredicate(format: "age > 30 AND name BEGINSWITH 'A'") },
                      request { $0.propertiesToGroupBy = ["salary"]; $0.propertiesToFetch = [.keyPath("salary"), .aggregate(.count, of: "SELF", as: "n")] },
                      byAge.with { $0.propertiesToFetch.append(.aggregate(.sum, of: "salary", as: "total")) },
                      byAge.with { $0.entityName = "Manager" }, byAge.with { $0.includesSubentities = false }] {
            #expect(try !counted(other), "\(other)")
            #expect(store.explain(other).hasSuffix(" → Aggregate"), "\(store.explain(other))")
            #expect(Set(try lmdb.fetchDictionaries(other)) == Set(try memory.fetchDictionaries(other)), "\(other)")
        }
        // A name too long for the key is cut in the index: the counts come from the rows instead, and agree.
        for context in [lmdb, memory] {
            try context.insertNewObject(forEntityName: "Employee").setValue(String(repeating: "N", count: 600), forKey: "name")
            try context.save()
        }
        #expect(try !counted(shapes[4]))
        #expect(Set(try lmdb.fetchDictionaries(shapes[4])) == Set(try memory.fetchDictionaries(shapes[4])))
    }

    /// When one index range decides the predicate and its keys hold every value named, dictionary results come
    /// from the entries: with every row's checksum broken they still answer, as the in-memory store does.
    @Test func dictionariesFromIndexEntriesReadNoRow() throws {
        let (lmdb, memory, folder) = try stores()
        let shapes = try [
            request {
                $0.predicate = try FetchPredicate(format: "age >= 30 AND age < 45")
                $0.propertiesToFetch = [.keyPath("age")]
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age", ascending: false)]
                $0.fetchLimit = 25
            },
            request {
                $0.predicate = try FetchPredicate(format: "age > 25 AND age != 40")
                $0.propertiesToGroupBy = ["age"]
                $0.propertiesToFetch = [.keyPath("age"), .aggregate(.count, of: "SELF", as: "n"), .aggregate(.sum, of: "age", as: "years")]
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "age")]
            },
            request {
                $0.predicate = try FetchPredicate(format: "name BEGINSWITH 'A'")
                $0.propertiesToFetch = [.keyPath("name")]
                $0.returnsDistinctResults = true
                $0.sortDescriptors = [FetchSortDescriptor(keyPath: "name")]
            },
            request {
                $0.predicate = try FetchPredicate(format: "age < 30")
                $0.propertiesToFetch = [.aggregate(.min, of: "age", as: "youngest"), .aggregate(.average, of: "age", as: "mean")]
            },
        ]
        let expected = try shapes.map { try memory.fetchDictionaries($0) }
        let (_, store) = try folder.coordinator(model)
        #expect(store.explain(shapes[1]) == "IndexRange(Employee.byAge (25, +inf)) → Filter(age > 25 AND age != 40) on index entries → Aggregate(on index entries; else from the rows)")
        for shape in shapes { #expect(store.explain(shape).hasSuffix(" → Aggregate(on index entries; else from the rows)"), "\(store.explain(shape))") }
        try breakEveryRow(of: "Employee", in: store)
        for (shape, theirs) in zip(shapes, expected) {
            let mine = try lmdb.fetchDictionaries(shape)
            #expect(lmdb.lastDictionaryFetchStrategy == "computed by the LMDB store", "\(shape)")
            #expect(!mine.isEmpty && mine == theirs, "\(shape)")
        }
        // A value the entries do not hold (salary) needs the rows, which are damaged now.
        let needsRows = shapes[0].with { $0.propertiesToFetch = [.keyPath("age"), .keyPath("salary")] }
        #expect(throws: ManagedObjectContextError.self) { try lmdb.fetchDictionaries(needsRows) }
    }

    @Test func keyPathsThroughRelationshipsAreLeftToTheContext() throws {
        let (lmdb, memory, folder) = try stores()
        let byName = request {
            $0.propertiesToGroupBy = ["department.name"]
            $0.propertiesToFetch = [.keyPath("department.name"), .aggregate(.count, of: "SELF", as: "n")]
            $0.sortDescriptors = [FetchSortDescriptor(keyPath: "department.name")]
        }
        let mine = try lmdb.fetchDictionaries(byName)
        #expect(lmdb.lastDictionaryFetchStrategy.contains("in memory"))
        #expect(try folder.coordinator(model).1.explain(byName) == "Scan(Employee) → Aggregate(from objects, in the context)")
        #expect(mine == (try memory.fetchDictionaries(byName)) && mine.count == 5)
        #expect(mine.map { $0["n"] ?? .null }.reduce(0) { total, n in if case .integer(let count) = n { total + count } else { total } } == 400)
    }
}
