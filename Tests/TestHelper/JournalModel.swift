import ObjectGraph

/// The model the multi-process and crash tests share with this helper: entries written in numbered batches, and
/// one counter per writer holding the last batch it saved (both change in the same save).
public func journalModel() -> ManagedObjectModel {
    try! ManagedObjectModel {
        EntityDescription("Entry") {
            AttributeDescription("writer", .string)
            AttributeDescription("batch", .integer64)
            AttributeDescription("payload", .string)
            FetchIndexDescription("byBatch", elements: [.ascending("writer"), .ascending("batch")])
        }
        EntityDescription("Counter") {
            AttributeDescription("writer", .string)
            AttributeDescription("batch", .integer64, defaultValue: -1)
            AttributeDescription("touches", .integer64, defaultValue: 0)
            UniquenessConstraint("writer")
        }
    }
}

/// The two versions of the model the migration crash test migrates between (in the helper, killed at random
/// moments): version 2 widens `number`, renames `label` to `title` and `Item` to `Entry`, adds an indexed `status`
/// with a default, indexes `title`, and makes the groups' names unique.
public func migrationModel(version: Int) -> ManagedObjectModel {
    let first = version == 1
    return try! ManagedObjectModel(entities: [
        EntityDescription(first ? "Item" : "Entry", properties: [
            .attribute(AttributeDescription("number", first ? .integer32 : .integer64)),
            .attribute(AttributeDescription(first ? "label" : "title", .string, renamingIdentifier: first ? nil : "label")),
            .relationship(RelationshipDescription("group", destination: "Group", inverse: "items")),
        ] + (first ? [] : [.attribute(AttributeDescription("status", .integer16, defaultValue: .integer(3)))]),
        fetchIndexes: first ? [FetchIndexDescription("byNumber", properties: ["number"])]
            : [FetchIndexDescription("byNumber", properties: ["number"]), FetchIndexDescription("byTitle", properties: ["title"]),
               FetchIndexDescription("byStatus", properties: ["status"])],
        renamingIdentifier: first ? nil : "Item"),
        EntityDescription("Group", properties: [
            .attribute(AttributeDescription("name", .string)),
            .relationship(RelationshipDescription("items", destination: first ? "Item" : "Entry", inverse: "group", toMany: true)),
        ], uniquenessConstraints: first ? [] : [UniquenessConstraint("name")]),
    ])
}
