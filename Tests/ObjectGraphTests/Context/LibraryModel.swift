import Foundation
@testable import ObjectGraph

/// The model the runtime tests use: every relationship kind and delete rule, inheritance, validation rules.
func libraryModel() throws -> ManagedObjectModel {
    try ManagedObjectModel(
        configurations: [ModelConfiguration("Catalog", entities: ["Author", "Book", "Chapter", "Tag"]),
                         ModelConfiguration("Periodicals", entities: ["Publication", "Magazine", "Journal"])],
        fetchRequestTemplates: [FetchRequestTemplate("LongBooks", entity: "Book", predicate: "pages >= $MIN")]
    ) {
        EntityDescription("Author") {
            AttributeDescription("name", .string, validation: AttributeValidation(minimumLength: 1, maximumLength: 40))
            AttributeDescription("email", .string, isOptional: true, validation: AttributeValidation(pattern: "[^@ ]+@[^@ ]+"))
            AttributeDescription("born", .date, isOptional: true)
            AttributeDescription("scratch", .string, isOptional: true).transient()
            RelationshipDescription("books", destination: "Book", inverse: "author", toMany: true, deleteRule: .cascade)
        }
        EntityDescription("Book") {
            AttributeDescription("title", .string)
            AttributeDescription("pages", .integer16, defaultValue: 1, validation: AttributeValidation(minimumValue: 1, maximumValue: 5000))
            AttributeDescription("price", .decimal, isOptional: true)
            AttributeDescription("rating", .double, isOptional: true)
            RelationshipDescription("author", destination: "Author", inverse: "books", deleteRule: .nullify)
            RelationshipDescription("tags", destination: "Tag", inverse: "books", toMany: true, maximumCount: 3)
            RelationshipDescription("chapters", destination: "Chapter", inverse: "book", ordered: true, deleteRule: .cascade)
        }
        EntityDescription("Chapter") {
            AttributeDescription("title", .string)
            RelationshipDescription("book", destination: "Book", inverse: "chapters", isOptional: false)
        }
        EntityDescription("Tag") {
            AttributeDescription("label", .string)
            RelationshipDescription("books", destination: "Book", inverse: "tags", toMany: true, deleteRule: .deny)
            UniquenessConstraint("label")
        }
        EntityDescription("Publication", isAbstract: true) {
            AttributeDescription("title", .string)
        }
        EntityDescription("Magazine", parent: "Publication") {
            AttributeDescription("issue", .integer32, defaultValue: 1)
        }
        EntityDescription("Journal", parent: "Publication") {
            AttributeDescription("volume", .integer32, defaultValue: 1)
        }
    }
}

/// A typed subclass, registered for Author in the tests that use it.
final class Author: ManagedObject {
    static let name = AttributeKey<String>("name")
    static let books = ToManyKey<ManagedObject>("books")
    var name: String? { get { self[Self.name] } set { self[Self.name] = newValue } }
    var books: RelatedObjects<ManagedObject> { self[Self.books] }

    /// How many times `awakeFromInsert` ran on this object (a count of its own: other tests insert authors at the
    /// same time).
    private(set) var awakenings = 0
    override func awakeFromInsert() { awakenings += 1; self["scratch"] = "fresh" }
    override func validateForUpdate() throws {
        if name == "Forbidden" {
            throw ValidationFailure(objectID: objectID, entityName: entity.name, propertyName: "name", message: "that name is forbidden")
        }
    }
}

/// A coordinator with one in-memory store (or one per configuration).
func makeStack(splitConfigurations: Bool = false) throws -> (PersistentStoreCoordinator, [InMemoryStore]) {
    let coordinator = PersistentStoreCoordinator(managedObjectModel: try libraryModel())
    coordinator.registerClass(Author.self, forEntityName: "Author")
    if splitConfigurations {
        let catalog = try coordinator.addPersistentStore(type: InMemoryStore.storeType, configuration: "Catalog") as! InMemoryStore
        let periodicals = try coordinator.addPersistentStore(type: InMemoryStore.storeType, configuration: "Periodicals") as! InMemoryStore
        return (coordinator, [catalog, periodicals])
    }
    let store = try coordinator.addPersistentStore(type: InMemoryStore.storeType) as! InMemoryStore
    return (coordinator, [store])
}

extension ManagedObjectContext {
    func make(_ entity: String, _ values: [String: Any]) throws -> ManagedObject {
        let object = try insertNewObject(forEntityName: entity)
        for (key, value) in values { try object.setValue(value, forKey: key) }
        return object
    }
}
