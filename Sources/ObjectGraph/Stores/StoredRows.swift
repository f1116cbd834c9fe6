import Foundation

/// One object's stored state in a store that keeps every row in memory (``InMemoryStore``, ``AtomicStore``).
struct StoredRow {
    var entityName: String
    var attributes: [String: AttributeValue]
    var toOne: [String: ManagedObjectID]
    var toMany: [String: [ManagedObjectID]]
    var version: Int64

    func node(_ id: ManagedObjectID) -> IncrementalStoreNode {
        IncrementalStoreNode(objectID: id, attributes: attributes, toOne: toOne, version: version)
    }

    /// The members of `relationship` (to-one: at most one).
    func members(of relationship: RelationshipDescription) -> [ManagedObjectID] {
        relationship.isToMany ? toMany[relationship.name] ?? [] : toOne[relationship.name].map { [$0] } ?? []
    }
}

/// Fetches, conflict checks and uniqueness checks over a table of rows in memory: the framework's reference
/// implementation of the store contract, shared by the in-memory and atomic stores.
enum StoredRows {
    /// Runs a fetch over `rows` with the framework's evaluator and sort.
    static func fetch(_ request: FetchRequest, in rows: [ManagedObjectID: StoredRow], model: ManagedObjectModel) throws -> PersistentStoreResult {
        try request.validate(for: model)
        let family = request.includesSubentities ? Set(model.entityAndDescendants(of: request.entityName)) : [request.entityName]
        var matches: [RowReader] = []
        for (id, row) in rows where family.contains(row.entityName) {
            let reader = RowReader(id: id, rows: rows, model: model)
            if try request.predicate?.evaluate(with: reader) ?? true { matches.append(reader) }
        }
        // Without sort descriptors, rows come in key order, so results are repeatable.
        matches.sort { $0.id.referenceObject.description.localizedStandardCompare($1.id.referenceObject.description) == .orderedAscending }
        if !request.sortDescriptors.isEmpty { matches = FetchSortDescriptor.sorted(matches, using: request.sortDescriptors, prefix: request.windowEnd) }
        return try .fetched(request.window(matches), for: request, id: \.id, node: { rows[$0.id]!.node($0.id) })
    }

    /// Throws a merge conflict naming every updated or deleted object whose version is not the one the context saw.
    static func checkVersions(_ request: SaveChangesRequest, in rows: [ManagedObjectID: StoredRow]) throws(ManagedObjectContextError) {
        var conflicts: [MergeConflict] = []
        for change in request.updatedObjects + request.deletedObjects {
            let current = rows[change.objectID]
            if current?.version != change.expectedVersion {
                conflicts.append(MergeConflict(objectID: change.objectID, oldVersion: change.expectedVersion ?? 0,
                                               newVersion: current?.version ?? 0, persistedSnapshot: current.map { $0.node(change.objectID) }))
            }
        }
        guard conflicts.isEmpty else {
            throw ManagedObjectContextError(.mergeConflict, message: "\(conflicts.count) object\(conflicts.count == 1 ? "" : "s") changed in the store since they were read", conflicts: conflicts)
        }
    }

    /// Throws when two rows of an entity family share the values of a uniqueness constraint (NULLs never clash).
    static func checkUniqueness(_ rows: [ManagedObjectID: StoredRow], model: ManagedObjectModel) throws(ManagedObjectContextError) {
        for entity in model.entities {
            for constraint in entity.uniquenessConstraints {
                let family = Set(model.entityAndDescendants(of: entity.name))
                var seen: [[PredicateValue]: ManagedObjectID] = [:]
                for (id, row) in rows where family.contains(row.entityName) {
                    let values = constraint.propertyNames.map { name -> PredicateValue in
                        if let value = row.attributes[name] { return PredicateValue(value) }
                        if let target = row.toOne[name] { return .string(target.description) }
                        return .null
                    }
                    if values.contains(where: \.isNull) { continue }
                    if let other = seen[values] {
                        throw ManagedObjectContextError(.constraintViolation,
                            message: "\(entity.name) objects \(other) and \(id) share (\(constraint.propertyNames.joined(separator: ", "))) = (\(values.map(\.format).joined(separator: ", "))), which must be unique")
                    }
                    seen[values] = id
                }
            }
        }
    }
}

/// A stored row as a predicate sees it: attributes as values, relationships as the related rows.
struct RowReader: KeyValueReadable, Hashable {
    let id: ManagedObjectID
    let rows: [ManagedObjectID: StoredRow]
    let model: ManagedObjectModel

    func predicateValue(forKey key: String) -> PredicateValue {
        guard let row = rows[id] else { return .null }
        if let value = row.attributes[key] { return PredicateValue(value) }
        switch model.relationship(named: key, in: row.entityName) {
        case .some(let relationship) where relationship.isToMany:
            return .array((row.toMany[key] ?? []).map { .object(PredicateObject(RowReader(id: $0, rows: rows, model: model))) })
        case .some:
            return row.toOne[key].map { .object(PredicateObject(RowReader(id: $0, rows: rows, model: model))) } ?? .null
        case .none:
            return .null
        }
    }

    var predicateIdentity: AnyHashable? { id }

    static func == (lhs: RowReader, rhs: RowReader) -> Bool { lhs.id == rhs.id }
    func hash(into hasher: inout Hasher) { hasher.combine(id) }
}
