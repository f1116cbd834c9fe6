import Foundation

/// A complete incremental store over dictionaries in memory: the reference every other store's results are
/// compared with, and a fast store for tests and caches. Registered with every coordinator as `"InMemory"`.
///
/// Rows live as long as the store. Fetches evaluate predicates and sort descriptors with the framework's own
/// evaluator; saves are all-or-nothing, check row versions (optimistic locking) and uniqueness constraints.
public final class InMemoryStore: IncrementalStore, @unchecked Sendable {
    /// The type string the store is registered under.
    public static let storeType = "InMemory"

    /// The store's type string.
    public let type = InMemoryStore.storeType
    /// The configuration whose entities the store holds.
    public let configurationName: String?
    /// Always `nil`: the store has no file.
    public let url: URL?
    private let model: ManagedObjectModel
    private let options: [String: String]
    private let lock = NSLock()
    private var metadataStorage: [String: String] = [:]
    private var rows: [ManagedObjectID: StoredRow] = [:]
    private var sequences: [String: Int64] = [:]
    private var counters = CallCounts()

    /// How many times each store call was made, for tests that count I/O.
    public struct CallCounts: Sendable, Hashable {
        /// Fetch and count requests.
        public var fetches = 0
        /// Save requests.
        public var saves = 0
        /// ``newValuesForObject(with:)`` calls (faults).
        public var objectFaults = 0
        /// ``newValue(forRelationship:forObjectWith:)`` calls.
        public var relationshipFaults = 0
        /// ``newValuesForObjects(with:)`` calls (batched faults and prefetches).
        public var batchedObjectFaults = 0
        /// ``newValues(forRelationship:forObjectsWith:)`` calls.
        public var batchedRelationshipFaults = 0
    }

    /// Creates a store; used by the coordinator. The option `"uuid"` fixes the store's UUID;
    /// `"usesCoordinatorRowCache": "false"` makes the store answer ``usesCoordinatorRowCache`` with `false`.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` for a value
    ///   of `"usesCoordinatorRowCache"` other than `"true"` or `"false"`.
    public init(description: PersistentStoreCoordinator.StoreDescription) throws {
        model = description.model
        configurationName = description.configurationName
        url = description.url
        options = description.options
        switch options["usesCoordinatorRowCache"] {
        case nil, "true": usesCoordinatorRowCache = true
        case "false": usesCoordinatorRowCache = false
        case let other?:
            throw ManagedObjectContextError(.wrongValueType, message: "the store option \"usesCoordinatorRowCache\" is \"\(other)\"; it must be true or false")
        }
    }

    /// Whether the coordinator caches the store's rows (the option `"usesCoordinatorRowCache"`; `true` unless it
    /// says otherwise); see ``IncrementalStore/usesCoordinatorRowCache``.
    public let usesCoordinatorRowCache: Bool

    /// Does nothing: the store keeps nothing per object a context holds.
    public func managedObjectContextDidRegisterObject(with objectID: ManagedObjectID) {}

    /// The store's metadata: its UUID and type.
    public var metadata: [String: String] { lock.withLock { metadataStorage } }

    /// The calls made so far.
    public var callCounts: CallCounts { lock.withLock { counters } }

    /// Gives the store a UUID.
    public func loadMetadata() throws {
        lock.withLock {
            metadataStorage[PersistentStoreMetadataKey.uuid] = options["uuid"] ?? UUID().uuidString
            metadataStorage[PersistentStoreMetadataKey.storeType] = type
            metadataStorage[PersistentStoreMetadataKey.modelVersionHash] = model.versionHashString
        }
    }

    // MARK: - Requests

    /// Runs a fetch or a save; see ``IncrementalStore/execute(_:)``.
    public func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult {
        switch request {
        case .fetch(let fetch): return try self.fetch(fetch)
        case .save(let save): try self.save(save); return .empty
        }
    }

    private func fetch(_ request: FetchRequest) throws -> PersistentStoreResult {
        let snapshot = lock.withLock { () -> [ManagedObjectID: StoredRow] in counters.fetches += 1; return rows }
        return try StoredRows.fetch(request, in: snapshot, model: model)
    }

    private func save(_ request: SaveChangesRequest) throws {
        try lock.withLock { () throws in
            counters.saves += 1
            var next = rows
            try StoredRows.checkVersions(request, in: next)
            for change in request.insertedObjects {
                guard next[change.objectID] == nil else {
                    throw ManagedObjectContextError(.constraintViolation, message: "\(change.objectID) is already in the store")
                }
                next[change.objectID] = StoredRow(entityName: change.objectID.entityName, attributes: change.attributes, toOne: change.toOne,
                                            toMany: change.toMany, version: 1)
            }
            for change in request.updatedObjects {
                var row = next[change.objectID]!
                row.attributes = change.attributes
                row.toOne = change.toOne
                row.toMany.merge(change.toMany) { _, new in new }
                row.version += 1
                next[change.objectID] = row
            }
            for change in request.deletedObjects { next[change.objectID] = nil }
            try StoredRows.checkUniqueness(next, model: model)
            rows = next
        }
    }

    // MARK: - Faults

    /// The stored values of one object; see ``IncrementalStore/newValuesForObject(with:)``.
    public func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode {
        try lock.withLock { () throws -> IncrementalStoreNode in
            counters.objectFaults += 1
            guard let row = rows[objectID] else {
                throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store")
            }
            return row.node(objectID)
        }
    }

    /// The members of one relationship; see ``IncrementalStore/newValue(forRelationship:forObjectWith:)``.
    public func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
        try lock.withLock { () throws -> [ManagedObjectID] in
            counters.relationshipFaults += 1
            guard let row = rows[objectID] else {
                throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store")
            }
            return row.members(of: relationship)
        }
    }

    /// Many rows under one lock; see ``IncrementalStore/newValuesForObjects(with:)``.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode] {
        lock.withLock {
            counters.batchedObjectFaults += 1
            return objectIDs.compactMap { id in rows[id]?.node(id) }
        }
    }

    /// One relationship of many rows under one lock; see ``IncrementalStore/newValues(forRelationship:forObjectsWith:)``.
    public func newValues(forRelationship relationship: RelationshipDescription, forObjectsWith objectIDs: [ManagedObjectID]) throws -> [ManagedObjectID: [ManagedObjectID]] {
        lock.withLock {
            counters.batchedRelationshipFaults += 1
            var result: [ManagedObjectID: [ManagedObjectID]] = [:]
            for id in objectIDs {
                guard let row = rows[id] else { continue }
                result[id] = row.members(of: relationship)
            }
            return result
        }
    }

    /// Integer keys from one sequence per root entity; see ``IncrementalStore/obtainPermanentIDs(for:)``.
    public func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] {
        lock.withLock {
            objects.map { object in
                let root = model.rootEntityName(of: object.entityName) ?? object.entityName
                sequences[root, default: 0] += 1
                return ManagedObjectID(entityName: object.entityName, storeIdentifier: metadataStorage[PersistentStoreMetadataKey.uuid] ?? "",
                                       referenceObject: .integer(sequences[root]!))
            }
        }
    }
}
