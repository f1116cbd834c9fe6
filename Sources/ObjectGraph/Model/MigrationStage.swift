import Foundation

/// A change between model versions that lightweight migration cannot infer, carried out by a closure run on each
/// row of one entity (Core Data's custom entity migration policy, simplified to what a row needs): the closure reads
/// the row as the old model wrote it and gives the values of the attributes it computes. Every other property of the
/// entity maps as ``MappingModel/inferred(from:to:computing:)`` infers.
///
/// ```swift
/// // Version 2 splits "name" into "givenName" and "familyName".
/// let split = CustomEntityMapping(entityName: "Person", computing: ["givenName", "familyName"]) { row in
///     let parts = row.string("name")?.split(separator: " ", maxSplits: 1) ?? []
///     return ["givenName": parts.first.map { .string(String($0)) }, "familyName": parts.dropFirst().first.map { .string(String($0)) }]
/// }
/// ```
public struct CustomEntityMapping: Sendable {
    /// The destination entity whose rows the closure is run on (rows of its subentities included).
    public let entityName: String
    /// The attributes of the destination entity the closure gives values for.
    public let computedAttributeNames: Set<String>
    /// Gives the computed attributes' values for one row: a name it leaves out, or maps to `nil`, is NULL. A thrown
    /// error stops the migration, and the store is left as it was.
    public let transform: @Sendable (MigrationSourceRow) throws -> [String: AttributeValue?]

    /// A mapping whose `transform` computes `attributes` of `entityName`'s rows.
    public init(entityName: String, computing attributes: Set<String>,
                transform: @escaping @Sendable (MigrationSourceRow) throws -> [String: AttributeValue?]) {
        self.entityName = entityName
        self.computedAttributeNames = attributes
        self.transform = transform
    }
}

/// One stored row as the old model wrote it, handed to a ``CustomEntityMapping``.
public struct MigrationSourceRow: Sendable {
    /// The entity of the row in the old model.
    public let entityName: String
    /// The row's attribute values by the old model's attribute names; NULL attributes are absent.
    public let values: [String: AttributeValue]

    /// Makes a row (the store migrating it does this).
    public init(entityName: String, values: [String: AttributeValue]) {
        self.entityName = entityName
        self.values = values
    }

    /// The value of the old attribute `name`, `nil` when it is NULL.
    public subscript(name: String) -> AttributeValue? { values[name] }

    /// The old attribute `name` as a string, `nil` when it is NULL or not a string.
    public func string(_ name: String) -> String? {
        if case .string(let value)? = values[name] { value } else { nil }
    }

    /// The old attribute `name` as an integer, `nil` when it is NULL or not an integer.
    public func integer(_ name: String) -> Int64? {
        if case .integer(let value)? = values[name] { value } else { nil }
    }
}

/// One step of a staged migration (Core Data's `NSLightweightMigrationStage` and `NSCustomMigrationStage`): the model
/// version a store is brought to, and the custom mappings the step from the version before needs.
///
/// A store is migrated through the stages after the one whose model it was written with, in order, each step a
/// migration of its own (``MappingModel/inferred(from:to:computing:)`` plus the step's closures).
public struct MigrationStage: Sendable {
    /// The model version this stage brings a store to.
    public let model: ManagedObjectModel
    /// The closures of the step from the stage before (none for a lightweight stage).
    public let customMappings: [CustomEntityMapping]

    /// A stage lightweight migration reaches from the stage before.
    public static func lightweight(_ model: ManagedObjectModel) -> MigrationStage {
        MigrationStage(model: model, customMappings: [])
    }

    /// A stage reached from the stage before with `mappings` for what cannot be inferred.
    public static func custom(_ model: ManagedObjectModel, _ mappings: [CustomEntityMapping]) -> MigrationStage {
        MigrationStage(model: model, customMappings: mappings)
    }

    /// Every version of an `.xcdatamodeld` bundle as a lightweight stage, in version order (`"Model"`, `"Model 2"`,
    /// …, by ``ManagedObjectModel/coreDataModelVersions(in:)``).
    ///
    /// - Throws: ``ModelError`` naming the file of a version that does not load.
    public static func stages(ofCoreDataModel bundle: URL) throws(ModelError) -> [MigrationStage] {
        var stages: [MigrationStage] = []
        for version in try ManagedObjectModel.coreDataModelVersions(in: bundle) {
            stages.append(.lightweight(try ManagedObjectModel(contentsOfCoreDataModel: bundle, version: version)))
        }
        return stages
    }

    /// The mapping of the step from `source` to this stage's model.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/migrationFailed`` naming what
    ///   cannot be inferred, or a custom mapping's entity or attribute the model does not have.
    public func mapping(from source: ManagedObjectModel) throws(ManagedObjectContextError) -> MappingModel {
        var computing: [String: Set<String>] = [:]
        for custom in customMappings {
            guard model.entity(named: custom.entityName) != nil else {
                throw ManagedObjectContextError(.migrationFailed, message: "a custom mapping names the entity \(custom.entityName), which the model does not have")
            }
            let attributes = Set(model.allProperties(of: custom.entityName).filter(\.isPersistent).compactMap { if case .attribute(let a) = $0 { a.name } else { nil } })
            if let unknown = custom.computedAttributeNames.subtracting(attributes).sorted().first {
                throw ManagedObjectContextError(.migrationFailed, message: "a custom mapping computes \(custom.entityName).\(unknown), which is not a stored attribute of the model")
            }
            // Subentities' rows are the entity's rows too.
            for entity in model.entityNames where model.ancestry(of: entity).contains(custom.entityName) {
                computing[entity, default: []].formUnion(custom.computedAttributeNames)
            }
        }
        return try MappingModel.inferred(from: source, to: model, computing: computing)
    }
}
