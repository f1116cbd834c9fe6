import Foundation
import ObjectGraph

extension StoreConformance {
    /// The kit's model: `Sample` (every attribute type), `Owner`/`Item` (to-one, to-many, ordered to-many, a fetched
    /// property),
    /// `Label` (many-to-many, unique `name`), `Shape` → `Circle`/`Square` (inheritance).
    public static let model: ManagedObjectModel = {
        do {
            return try ManagedObjectModel {
                EntityDescription("Sample") {
                    AttributeDescription("i16", .integer16, isOptional: true)
                    AttributeDescription("i32", .integer32, isOptional: true)
                    AttributeDescription("i64", .integer64, isOptional: true)
                    AttributeDescription("dec", .decimal, isOptional: true)
                    AttributeDescription("dbl", .double, isOptional: true)
                    AttributeDescription("flt", .float, isOptional: true)
                    AttributeDescription("str", .string, isOptional: true)
                    AttributeDescription("bool", .boolean, isOptional: true)
                    AttributeDescription("date", .date, isOptional: true)
                    AttributeDescription("data", .binaryData, isOptional: true)
                    AttributeDescription("uuid", .uuid, isOptional: true)
                    AttributeDescription("uri", .uri, isOptional: true)
                    AttributeDescription("ref", .objectID, isOptional: true)
                }
                EntityDescription("Owner") {
                    AttributeDescription("name", .string)
                    RelationshipDescription("items", destination: "Item", inverse: "owner", toMany: true, deleteRule: .cascade)
                    RelationshipDescription("queue", destination: "Item", inverse: "queuedBy", ordered: true)
                    FetchedPropertyDescription("itemsNamedLikeMe", entity: "Item",
                                               predicate: "owner == $FETCH_SOURCE AND name BEGINSWITH $FETCHED_PROPERTY.userInfo.prefix",
                                               userInfo: ["prefix": "alpha"])
                }
                EntityDescription("Item") {
                    AttributeDescription("name", .string)
                    AttributeDescription("rank", .integer32, defaultValue: 0)
                    RelationshipDescription("owner", destination: "Owner", inverse: "items")
                    RelationshipDescription("queuedBy", destination: "Owner", inverse: "queue")
                    RelationshipDescription("labels", destination: "Label", inverse: "items", toMany: true)
                }
                EntityDescription("Label") {
                    AttributeDescription("name", .string)
                    RelationshipDescription("items", destination: "Item", inverse: "labels", toMany: true)
                    UniquenessConstraint("name")
                }
                EntityDescription("Shape", isAbstract: true) {
                    AttributeDescription("area", .double, defaultValue: 0)
                }
                EntityDescription("Circle", parent: "Shape") {
                    AttributeDescription("radius", .double, defaultValue: 0)
                }
                EntityDescription("Square", parent: "Shape") {
                    AttributeDescription("side", .double, defaultValue: 0)
                }
            }
        } catch {
            preconditionFailure("the conformance model is invalid: \(error)")
        }
    }()
}
