import Foundation
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

/// Key paths through relationships that the rows' bytes cannot settle (`department.name` in an OR, a sort by it) are
/// evaluated on views of the related rows, each read once a fetch; a related row that cannot be read stops the fetch
/// with an error naming it, never a NULL that quietly drops or misplaces the row that reached it.
@Suite(.onEveryEngine) struct RelatedRowsTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Department") {
            AttributeDescription("name", .string)
            RelationshipDescription("employees", destination: "Employee", inverse: "department", toMany: true)
        }
        EntityDescription("Employee") {
            AttributeDescription("name", .string)
            AttributeDescription("age", .integer32)
            RelationshipDescription("department", destination: "Department", inverse: "employees")
            RelationshipDescription("tags", destination: "Tag", inverse: "employees", toMany: true)
        }
        EntityDescription("Tag") {
            AttributeDescription("label", .string)
            RelationshipDescription("employees", destination: "Employee", inverse: "tags", toMany: true)
        }
    }

    /// 60 employees over three departments (d0, d1, d2) and two tags; the departments' and tags' IDs.
    func loaded(_ coordinator: PersistentStoreCoordinator) throws -> (departments: [ManagedObjectID], tags: [ManagedObjectID]) {
        let context = ManagedObjectContext(coordinator: coordinator)
        let departments = try (0..<3).map { n in
            let department = try context.insertNewObject(forEntityName: "Department")
            try department.setValue("d\(n)", forKey: "name")
            return department
        }
        let tags = try (0..<2).map { n in
            let tag = try context.insertNewObject(forEntityName: "Tag")
            try tag.setValue("t\(n)", forKey: "label")
            return tag
        }
        for n in 0..<60 {
            let employee = try context.insertNewObject(forEntityName: "Employee")
            try employee.setValue("e\(n)", forKey: "name")
            try employee.setValue(Int32(n), forKey: "age")
            try employee.setValue(departments[n % 3], forKey: "department")
            if n % 4 == 0 { try employee.setValue([tags[n % 8 == 0 ? 0 : 1]], forKey: "tags") }
        }
        try context.save()
        return (departments.map(\.objectID), tags.map(\.objectID))
    }

    func request(_ format: String, sort: [FetchSortDescriptor] = [], limit: Int = 0) throws -> FetchRequest {
        var request = FetchRequest(entityName: "Employee", predicate: try FetchPredicate(format: format), sortDescriptors: sort)
        request.fetchLimit = limit
        return request
    }

    @Test func keyPathsThroughRelationshipsAnswerAsTheInMemoryStore() throws {
        let folder = StoreFolder()
        let (lmdb, store, memory) = try folder.twinStores(model) { _ = try loaded($0) }
        let cases = try [
            request("department.name == 'd1' OR name == 'nobody'"),
            request("age >= 10 AND (department.name BEGINSWITH 'd2' OR ANY tags.label == 't0')"),
            request("age < 30", sort: [FetchSortDescriptor(keyPath: "department.name", ascending: false), FetchSortDescriptor(keyPath: "name")], limit: 7),
        ]
        #expect(store.explain(cases[0]).hasPrefix("Scan(Employee) → Filter("), "the rows are checked by the evaluator: \(store.explain(cases[0]))")
        for request in cases {
            func names(_ coordinator: PersistentStoreCoordinator) throws -> [String] {
                let context = ManagedObjectContext(coordinator: coordinator)
                return try context.fetch(request).map { $0.value(forKey: "name") as! String }
            }
            let theirs = try names(memory), mine = try names(lmdb)
            #expect(!theirs.isEmpty, "\(request) finds something")
            #expect(request.sortDescriptors.isEmpty ? Set(mine) == Set(theirs) : mine == theirs, "\(request)")
        }
    }

    /// A department row whose name is damaged (a type the attribute is never written as, the checksum made to match),
    /// then one whose checksum fails: a filter or a sort reaching it through `department` stops with an error naming
    /// the department's row — before, the first read as NULL (its employees silently left out) and the second as no
    /// department at all.
    @Test func aRelatedRowThatCannotBeReadStopsTheFetchNamingIt() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(model)
        let (departments, tags) = try loaded(coordinator)
        try damageFieldType(of: departments[1], in: "Department", field: store.layout.entity("Department")!.fieldIndex["name"]!,
                            to: RowCodec.ValueType.date, of: store)
        let filtered = try request("department.name == 'd1' OR name == 'nobody'")
        let sorted = try request("age < 30", sort: [FetchSortDescriptor(keyPath: "department.name")], limit: 5)
        for request in [filtered, sorted] {
            do {
                let found = try ManagedObjectContext(coordinator: coordinator).fetch(request)
                Issue.record("a damaged department was read as NULL: \(found.count) objects, \(store.explain(request))")
            } catch let error as ManagedObjectContextError {
                #expect(error.code == .storeUnusable && error.message.contains("\(departments[1])") && error.message.contains("name holds a date"),
                        "\(error)")
            }
        }
        // A checksum that fails: the row cannot be read at all (asked only of d2's employees, n % 3 == 2).
        try damageRow(of: departments[2], in: "Department", of: store) { $0[$0.count - 1] ^= 0xFF }
        do {
            _ = try ManagedObjectContext(coordinator: coordinator).fetch(try request("age IN {2, 5, 8} AND (department.name == 'd2' OR name == 'nobody')"))
            Issue.record("a department whose checksum fails was read as no department")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable && error.message.contains("\(departments[2])") && error.message.contains("checksum"), "\(error)")
        }
        // Through a to-many, a damaged member is named the same way.
        try damageFieldType(of: tags[0], in: "Tag", field: store.layout.entity("Tag")!.fieldIndex["label"]!, to: RowCodec.ValueType.date, of: store)
        do {
            _ = try ManagedObjectContext(coordinator: coordinator).fetch(try request("age IN {0, 8, 16} AND (ANY tags.label == 't0' OR name == 'nobody')"))
            Issue.record("a damaged tag was read as NULL")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .storeUnusable && error.message.contains("\(tags[0])"), "\(error)")
        }
    }
}
