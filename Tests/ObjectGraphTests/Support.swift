import Foundation
@testable import ObjectGraph

/// The URL of a file or folder in the test fixtures.
func fixture(_ name: String) -> URL {
    Bundle.module.resourceURL!.appendingPathComponent("Fixtures").appendingPathComponent(name)
}

/// A small company model used across the model tests: inheritance, every relationship kind, indexes, constraints.
func companyModel() throws -> ManagedObjectModel {
    try ManagedObjectModel(
        configurations: [ModelConfiguration("Directory", entities: ["Person", "Employee"])],
        fetchRequestTemplates: [FetchRequestTemplate("RichEmployees", entity: "Employee", predicate: "salary > $MIN", fetchLimit: 10)],
        versionIdentifier: "company-1"
    ) {
        EntityDescription("Person", isAbstract: true, className: "Person", userInfo: ["owner": "hr"]) {
            AttributeDescription("name", .string, validation: AttributeValidation(minimumLength: 1, maximumLength: 80)).indexed()
            AttributeDescription("email", .string, isOptional: true, validation: AttributeValidation(pattern: "[^@]+@[^@]+"))
            AttributeDescription("born", .date, isOptional: true)
            AttributeDescription("nickname", .string, isOptional: true).transient()
            UniquenessConstraint("email")
        }
        EntityDescription("Employee", parent: "Person") {
            AttributeDescription("salary", .decimal, isOptional: true, defaultValue: 0)
            AttributeDescription("level", .integer16, defaultValue: 1, validation: AttributeValidation(minimumValue: 1, maximumValue: 9))
            AttributeDescription("ratio", .double, defaultValue: 1)
            RelationshipDescription("department", destination: "Department", inverse: "employees")
            RelationshipDescription("projects", destination: "Project", inverse: "members", toMany: true)
            FetchIndexDescription("byLevelSalary", elements: [.ascending("level"), .descending("salary")])
        }
        EntityDescription("Department") {
            AttributeDescription("name", .string)
            RelationshipDescription("employees", destination: "Employee", inverse: "department", ordered: true, deleteRule: .deny)
            UniquenessConstraint("name")
        }
        EntityDescription("Project") {
            AttributeDescription("code", .string)
            AttributeDescription("id", .uuid)
            RelationshipDescription("members", destination: "Employee", inverse: "projects", toMany: true, maximumCount: 50)
            FetchedPropertyDescription("activeMembers", entity: "Employee", predicate: "ANY projects == $FETCH_SOURCE")
        }
    }
}
