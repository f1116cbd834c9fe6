import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// A fetch, in one read transaction: every row of the entity's family is read from its root table and matched
    /// by the predicate evaluator, then sorted and windowed. (The query compiler replaces this scan with index range
    /// scans; the results must stay exactly these.)
    func fetch(_ request: FetchRequest) throws -> PersistentStoreResult {
        let state = try open
        guard let entity = layout.entity(request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        let family = Set((request.includesSubentities ? model.entityAndDescendants(of: request.entityName) : [request.entityName])
            .compactMap { layout.entity($0)?.tag })
        let rows = database(StoreLayout.rowsDatabase(root: entity.root), in: state)
        return try state.environment.read { transaction -> PersistentStoreResult in
            var matches: [RowView] = []
            var decodeFailure: (UInt64, RowDecodingError)?
            try rows.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    guard let tag = RowCodec.entityTag(entry.value), family.contains(tag) else { return true }
                    let key = TupleEncoding.readBigEndianUInt64(entry.key, at: 0)
                    do {
                        let row = try RowCodec.decode(entry.value, layout: layout)
                        let view = RowView(store: self, state: state, transaction: transaction,
                                           id: objectID(entityTag: tag, key: key, storeIdentifier: state.storeIdentifier), row: row)
                        if try request.predicate?.evaluate(with: view) ?? true { matches.append(view) }
                    } catch let error as RowDecodingError {
                        decodeFailure = (key, error)
                        return false
                    }
                    return true
                }
            }
            if let (key, error) = decodeFailure {
                throw ManagedObjectContextError(.storeUnusable, message: "the row with key \(key) in \(entity.root)'s table cannot be read: \(error.reason); the store file is corrupted")
            }
            if !request.sortDescriptors.isEmpty { matches = FetchSortDescriptor.sorted(matches, using: request.sortDescriptors) }
            var window = matches[...]
            if request.fetchOffset > 0 { window = window.dropFirst(request.fetchOffset) }
            if request.fetchLimit > 0 { window = window.prefix(request.fetchLimit) }
            switch request.resultType {
            case .count: return .count(window.count)
            case .managedObjectID: return .objectIDs(window.map(\.id))
            case .managedObject:
                if request.returnsObjectsAsFaults { return .objectIDs(window.map(\.id)) }
                return .nodes(window.map { node($0.id, $0.row, storeIdentifier: state.storeIdentifier) })
            case .dictionary:
                throw ManagedObjectContextError(.unsupportedRequest, message: "dictionary results are computed by the context, not the store")
            }
        }
    }
}

/// A stored row as a predicate sees it, within one read transaction: attributes as values, relationships as the
/// related rows (read when a key path reaches them).
final class RowView: KeyValueReadable, Hashable {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: Transaction
    let id: ManagedObjectID
    let row: StoredRow

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, transaction: Transaction, id: ManagedObjectID, row: StoredRow) {
        self.store = store
        self.state = state
        self.transaction = transaction
        self.id = id
        self.row = row
    }

    func predicateValue(forKey key: String) -> PredicateValue {
        if let value = row.attributes[key] { return PredicateValue(value) }
        guard let relationship = store.model.relationship(named: key, in: id.entityName) else { return .null }
        if relationship.isToMany {
            guard case .integer(let ownerKey) = id.referenceObject,
                  let references = try? store.relatedKeys(relationship, of: id.entityName, key: UInt64(ownerKey), state: state, transaction: transaction)
            else { return .array([]) }
            return .array(references.compactMap { view($0) }.map { .object(PredicateObject($0)) })
        }
        guard let reference = row.toOne[key], let target = view(reference) else { return .null }
        return .object(PredicateObject(target))
    }

    private func view(_ reference: StoredRow.Reference) -> RowView? {
        let targetID = store.objectID(entityTag: reference.entityTag, key: reference.key, storeIdentifier: state.storeIdentifier)
        guard let row = try? store.readRow(targetID, state: state, transaction: transaction) else { return nil }
        return RowView(store: store, state: state, transaction: transaction, id: targetID, row: row)
    }

    var predicateIdentity: AnyHashable? { id }

    static func == (lhs: RowView, rhs: RowView) -> Bool { lhs.id == rhs.id }
    func hash(into hasher: inout Hasher) { hasher.combine(id) }
}
