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
