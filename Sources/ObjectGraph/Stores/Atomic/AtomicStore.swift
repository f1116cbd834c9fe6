import Foundation

/// A store that keeps every object in memory and writes its whole file on each save (Core Data's
/// `NSAtomicStore`): the base class for stores over small files that other programs also read, such as
/// ``JSONStore`` and ``CSVStore``.
///
/// Subclass it, register the subclass with ``PersistentStoreCoordinator/registerStoreType(_:factory:metadataReader:)``,
/// and override ``load()`` and ``save()``. The framework answers fetches, counts and faults from the cache nodes;
/// the subclass only translates between its file and nodes.
///
/// The lifecycle, as Core Data documents it:
/// 1. The coordinator creates the store with a URL and asks for its metadata. A missing or zero-length file is a new
///    store: it gets fresh metadata (UUID, type, model version hash) and ``prepareNewStore()`` is called. Any other
///    file is loaded: ``load()`` reads it, makes an object ID for each record with
///    ``objectID(forEntityName:withReferenceObject:)``, a node for each, sets the nodes' values (relationships as
///    other nodes) and registers them with ``addCacheNodes(_:)``.
/// 2. A save asks ``newReferenceObject(for:)`` for each inserted object when it gets its permanent ID, then
///    ``newCacheNode(for:)`` for each inserted object, ``updateCacheNode(_:from:)`` for each updated one,
///    ``willRemoveCacheNodes(_:)`` for the deleted ones, and last ``save()``, which writes every node and the
///    metadata. If anything throws, the nodes and metadata are put back as they were and the save fails.
/// 3. ``willRemoveFromPersistentStoreCoordinator(_:)`` is called when the store is removed.
///
/// Every hook runs under the store's lock, so a subclass needs no locking of its own. Reference objects must be
/// stable and unique (per root entity): they become part of object IDs and URIs. The default
/// ``newReferenceObject(for:)`` hands out integers from a counter per root entity that is kept in the metadata.
/// Row versions (for conflict detection) live only in memory; an atomic store expects one writer at a time.
open class AtomicStore: IncrementalStore, @unchecked Sendable {
    /// The store's type string.
    public let type: String
    /// The configuration whose entities the store holds.
    public let configurationName: String?
    /// The store's file (or folder), as given to the coordinator.
    public let url: URL?
    /// The coordinator's model.
    public let model: ManagedObjectModel
    /// The options the store was added with.
    public let options: [String: String]
    /// Whether the store found no file (or a zero-length one) and was created new.
    public private(set) var isNewStore = false

    private let lock = NSRecursiveLock()
    private var metadataStorage: [String: String] = [:]
    private var nodes: [ManagedObjectID: AtomicStoreCacheNode] = [:]
    /// The nodes as rows, rebuilt after each load and save: what fetches and faults read.
    private var rows: [ManagedObjectID: StoredRow] = [:]
    private var nextReference: [String: Int64] = [:]
    private var createdPlaceholder = false
    private var hasSaved = false

    /// The metadata key under which the next integer reference object of a root entity is kept.
    public static func nextReferenceMetadataKey(forRootEntity name: String) -> String { "LMDBStoreNextReference." + name }

    /// Creates a store of `type` at the description's URL; the coordinator calls this through the factory.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` when the
    ///   description has no file URL.
    public init(description: PersistentStoreCoordinator.StoreDescription, type: String) throws {
        guard let url = description.url, url.isFileURL else {
            throw ManagedObjectContextError(.storeUnusable, message: "a \(type) store needs a file URL, not \(description.url?.absoluteString ?? "none")")
        }
        self.type = type
        self.url = url
        model = description.model
        configurationName = description.configurationName
        options = description.options
    }

    /// The store's file (or folder).
    public var fileURL: URL { url! }

    /// The file that holds the metadata, for messages about it. Default: ``fileURL``.
    open var metadataFileURL: URL { fileURL }

    /// The store's metadata: its UUID, type, model version hash and whatever the subclass keeps there. A subclass
    /// sets it in ``load()`` from its file and writes it in ``save()``.
    public var metadata: [String: String] {
        get { lock.withLock { metadataStorage } }
        set { lock.withLock { metadataStorage = newValue } }
    }

    // MARK: - Hooks for subclasses

    /// Whether the location holds no store yet. Default: the file is missing or has zero length.
    ///
    /// - Throws: ``StoreFileError`` when the location cannot be inspected (a folder where a file should be).
    open func isEmptyLocation() throws -> Bool {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: fileURL.path, isDirectory: &isFolder) else { return true }
        if isFolder.boolValue { throw StoreFileError(.io, url: fileURL, reason: "is a folder, not a \(type) store file") }
        let size = (try? FileManager.default.attributesOfItem(atPath: fileURL.path)[.size] as? NSNumber)?.intValue ?? 0
        return size == 0
    }

    /// Makes the location ready for a new store, so an unwritable place fails when the store is added rather than
    /// on its first save. Default: creates a zero-length file when there is none (and removes it again in
    /// ``willRemoveFromPersistentStoreCoordinator(_:)`` if nothing was ever saved).
    ///
    /// - Throws: ``StoreFileError`` when the location cannot be written.
    open func prepareNewStore() throws {
        guard !FileManager.default.fileExists(atPath: fileURL.path) else { return }
        guard FileManager.default.createFile(atPath: fileURL.path, contents: nil) else {
            throw StoreFileError(.io, url: fileURL, reason: "cannot create the store file (does the folder exist, and is it writable?)")
        }
        createdPlaceholder = true
    }

    /// Reads the file: merges the file's metadata into ``metadata`` (which starts out fresh, with a new UUID, so a
    /// file written by hand needs none), calls ``checkMetadata()``, creates a node per record and registers them with ``addCacheNodes(_:)``.
    /// Called once, when the store is added, unless the location is empty. Subclasses must override it.
    ///
    /// - Throws: ``StoreFileError`` naming the file, line or record and field of what cannot be read.
    open func load() throws {
        throw ManagedObjectContextError(.unsupportedRequest, message: "\(Swift.type(of: self)) does not override AtomicStore.load()")
    }

    /// Writes every node (``cacheNodes``) and the ``metadata`` to the file, atomically: on a throw or a crash the
    /// old file must stay intact. Subclasses must override it.
    ///
    /// - Throws: ``StoreFileError`` when the file cannot be written.
    open func save() throws {
        throw ManagedObjectContextError(.unsupportedRequest, message: "\(Swift.type(of: self)) does not override AtomicStore.save()")
    }

    /// A new, unique reference object for an inserted object; it must stay the object's key across saves and
    /// reloads. Default: the next integer of the object's root entity.
    open func newReferenceObject(for object: ObjectReference) -> ReferenceObject {
        let root = model.rootEntityName(of: object.entityName) ?? object.entityName
        let next = nextReference[root, default: 1]
        nextReference[root] = next + 1
        return .integer(next)
    }

    /// A node for an inserted object, holding its values. Default: a node with the object's attributes and
    /// relationships.
    open func newCacheNode(for object: ObjectChange) -> AtomicStoreCacheNode {
        let node = AtomicStoreCacheNode(objectID: object.objectID)
        node.apply(object)
        return node
    }

    /// Brings an updated object's node up to date. Default: copies every attribute and to-one and the to-many
    /// relationships the change gives.
    open func updateCacheNode(_ node: AtomicStoreCacheNode, from object: ObjectChange) {
        node.apply(object)
    }

    /// Called with the nodes of deleted objects just before they are removed. Default: nothing.
    open func willRemoveCacheNodes(_ nodes: [AtomicStoreCacheNode]) {}

    /// Called when the store is removed from its coordinator. Default: removes the zero-length file
    /// ``prepareNewStore()`` created if nothing was ever saved to it.
    open func willRemoveFromPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator?) {
        lock.withLock {
            guard createdPlaceholder, !hasSaved,
                  let size = (try? FileManager.default.attributesOfItem(atPath: fileURL.path)[.size] as? NSNumber)?.intValue,
                  size == 0 else { return }
            try? FileManager.default.removeItem(at: fileURL)
            createdPlaceholder = false
        }
    }

    // MARK: - Services for subclasses

    /// The object ID for a record of `entityName` whose key in the file is `referenceObject`.
    public func objectID(forEntityName entityName: String, withReferenceObject referenceObject: ReferenceObject) -> ManagedObjectID {
        ManagedObjectID(entityName: entityName, storeIdentifier: identifier, referenceObject: referenceObject)
    }

    /// The key in the file of an object of this store.
    public func referenceObject(for objectID: ManagedObjectID) -> ReferenceObject { objectID.referenceObject }

    /// Registers loaded nodes; a node for an object ID that already has one replaces it.
    public func addCacheNodes(_ newNodes: some Sequence<AtomicStoreCacheNode>) {
        lock.withLock {
            for node in newNodes { nodes[node.objectID] = node }
        }
    }

    /// Every node, grouped by entity (in model order) and ordered by reference object within an entity, so files
    /// come out the same for the same contents.
    public var cacheNodes: [AtomicStoreCacheNode] {
        lock.withLock {
            let order = Dictionary(uniqueKeysWithValues: model.entityNames.enumerated().map { ($1, $0) })
            return nodes.values.sorted { a, b in
                let ea = order[a.objectID.entityName] ?? .max, eb = order[b.objectID.entityName] ?? .max
                if ea != eb { return ea < eb }
                return Self.precedes(a.objectID.referenceObject, b.objectID.referenceObject)
            }
        }
    }

    /// The node of an object, if the store holds it.
    public func cacheNode(for objectID: ManagedObjectID) -> AtomicStoreCacheNode? {
        lock.withLock { nodes[objectID] }
    }

    static func precedes(_ a: ReferenceObject, _ b: ReferenceObject) -> Bool {
        switch (a, b) {
        case (.integer(let x), .integer(let y)): x < y
        case (.integer, .string): true
        case (.string, .integer): false
        case (.string(let x), .string(let y)): x < y
        }
    }

    // MARK: - PersistentStore

    /// Creates fresh metadata for an empty location, or loads the file; see the lifecycle above.
    ///
    /// - Throws: What ``load()`` throws, or ``StoreFileError`` with ``StoreFileError/Kind/foreignFile`` when the
    ///   file's metadata names another store type or another model.
    public func loadMetadata() throws {
        try lock.withLock { () throws in
            metadataStorage = [
                PersistentStoreMetadataKey.uuid: options["uuid"] ?? UUID().uuidString,
                PersistentStoreMetadataKey.storeType: type,
                PersistentStoreMetadataKey.modelVersionHash: model.versionHashString,
            ]
            if try isEmptyLocation() {
                isNewStore = true
                try prepareNewStore()
            } else {
                try load()
                try checkMetadata()
                try checkLoadedNodes()
                for node in nodes.values {
                    guard case .integer(let key) = node.objectID.referenceObject else { continue }
                    let root = model.rootEntityName(of: node.objectID.entityName) ?? node.objectID.entityName
                    nextReference[root] = max(nextReference[root, default: 1], key &+ 1)
                }
            }
            rows = makeRows()
        }
    }

    /// Checks the metadata a subclass read from its file: it must name this store type and this model (when it names
    /// them at all). Call it from ``load()`` right after merging the file's metadata into ``metadata``, before
    /// reading records; it runs again after ``load()`` returns.
    ///
    /// - Throws: ``StoreFileError`` with ``StoreFileError/Kind/foreignFile`` naming the file.
    public func checkMetadata() throws {
        try lock.withLock { () throws in try checkMetadataLocked() }
    }

    private func checkMetadataLocked() throws {
        if let stored = metadataStorage[PersistentStoreMetadataKey.storeType], stored != type {
            throw StoreFileError(.foreignFile, url: metadataFileURL, field: PersistentStoreMetadataKey.storeType,
                                 reason: "holds a \"\(stored)\" store, not a \"\(type)\" store")
        }
        if let stored = metadataStorage[PersistentStoreMetadataKey.modelVersionHash], stored != model.versionHashString {
            throw StoreFileError(.foreignFile, url: metadataFileURL, field: PersistentStoreMetadataKey.modelVersionHash,
                                 reason: "was written for another model (version hash \(stored.prefix(16))…, this model's is \(model.versionHashString.prefix(16))…)")
        }
        if metadataStorage[PersistentStoreMetadataKey.uuid].flatMap(UUID.init(uuidString:)) == nil {
            throw StoreFileError(.foreignFile, url: metadataFileURL, field: PersistentStoreMetadataKey.uuid,
                                 reason: "the store UUID \"\(metadataStorage[PersistentStoreMetadataKey.uuid] ?? "")\" is not a UUID")
        }
        metadataStorage[PersistentStoreMetadataKey.storeType] = type
        metadataStorage[PersistentStoreMetadataKey.modelVersionHash] = model.versionHashString
        for (key, value) in metadataStorage where key.hasPrefix(Self.nextReferenceMetadataKey(forRootEntity: "")) {
            let root = String(key.dropFirst(Self.nextReferenceMetadataKey(forRootEntity: "").count))
            if let next = Int64(value) { nextReference[root] = max(nextReference[root, default: 1], next) }
        }
    }

    private func checkLoadedNodes() throws {
        for (id, node) in nodes where id.storeIdentifier != identifier || node.objectID != id {
            throw ManagedObjectContextError(.storeUnusable, message: "\(fileURL.path): load() made the node \(node.objectID) with an object ID of another store; use objectID(forEntityName:withReferenceObject:) after setting the metadata")
        }
    }

    private func makeRows() -> [ManagedObjectID: StoredRow] {
        var rows: [ManagedObjectID: StoredRow] = [:]
        rows.reserveCapacity(nodes.count)
        for (id, node) in nodes {
            rows[id] = StoredRow(entityName: id.entityName, attributes: node.attributes, toOne: node.toOne, toMany: node.toMany, version: node.version)
        }
        return rows
    }

    // MARK: - IncrementalStore

    /// Runs a fetch over the nodes, or a save; see the lifecycle above.
    public func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult {
        switch request {
        case .fetch(let fetch):
            return try StoredRows.fetch(fetch, in: lock.withLock { rows }, model: model)
        case .save(let save):
            try lock.withLock { try self.save(save) }
            return .empty
        }
    }

    private func save(_ request: SaveChangesRequest) throws {
        try StoredRows.checkVersions(request, in: rows)
        let previousNodes = nodes, previousMetadata = metadataStorage
        var previousStates: [(AtomicStoreCacheNode, AtomicStoreCacheNode.State)] = []
        do {
            for change in request.insertedObjects {
                guard nodes[change.objectID] == nil else {
                    throw ManagedObjectContextError(.constraintViolation, message: "\(change.objectID) is already in the store")
                }
                let node = newCacheNode(for: change)
                guard node.objectID == change.objectID else {
                    throw ManagedObjectContextError(.storeUnusable, message: "newCacheNode(for:) returned a node for \(node.objectID), not \(change.objectID)")
                }
                nodes[change.objectID] = node
            }
            for change in request.updatedObjects {
                let node = nodes[change.objectID]!
                previousStates.append((node, node.state))
                updateCacheNode(node, from: change)
                node.version += 1
            }
            if !request.deletedObjects.isEmpty {
                willRemoveCacheNodes(request.deletedObjects.compactMap { nodes[$0.objectID] })
                for change in request.deletedObjects { nodes[change.objectID] = nil }
            }
            let next = makeRows()
            try StoredRows.checkUniqueness(next, model: model)
            for (root, value) in nextReference { metadataStorage[Self.nextReferenceMetadataKey(forRootEntity: root)] = String(value) }
            try save()
            rows = next
            hasSaved = true
        } catch {
            nodes = previousNodes
            metadataStorage = previousMetadata
            for (node, state) in previousStates.reversed() { node.restore(state) }
            throw error
        }
    }

    /// The stored values of one object, from its node.
    public func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode {
        guard let row = lock.withLock({ rows[objectID] }) else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store")
        }
        return row.node(objectID)
    }

    /// The members of one relationship of one object, from its node.
    public func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
        guard let row = lock.withLock({ rows[objectID] }) else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store")
        }
        return row.members(of: relationship)
    }

    /// The stored values of many objects at once.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode] {
        let rows = lock.withLock { self.rows }
        return objectIDs.compactMap { id in rows[id]?.node(id) }
    }

    /// Does nothing: the store holds every node in memory whether or not a context holds its object.
    public func managedObjectContextDidRegisterObject(with objectID: ManagedObjectID) {}

    /// Permanent IDs from ``newReferenceObject(for:)``.
    public func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] {
        lock.withLock {
            objects.map { objectID(forEntityName: $0.entityName, withReferenceObject: newReferenceObject(for: $0)) }
        }
    }
}
