import Foundation
import Synchronization

/// Routes contexts' requests to stores (Core Data's `NSPersistentStoreCoordinator`).
///
/// A coordinator holds one model and any number of stores; each store holds the entities of its configuration
/// (every entity, for no configuration). Fetches and saves for an entity go to the stores that hold it. The
/// coordinator also keeps a row cache: a row that any context has registered is kept, keyed by object ID and
/// version, so a second fault on it makes no store call.
///
/// Coordinators are `Sendable`; share one among the contexts of a process.
public final class PersistentStoreCoordinator: @unchecked Sendable {
    /// What a store factory is given.
    public struct StoreDescription: Sendable {
        /// The coordinator's model.
        public let model: ManagedObjectModel
        /// The configuration whose entities the store holds, or `nil` for all.
        public let configurationName: String?
        /// Where the store lives, if anywhere.
        public let url: URL?
        /// Store-specific options.
        public let options: [String: String]
    }

    /// Creates a store of one type.
    public typealias StoreFactory = @Sendable (StoreDescription) throws -> any PersistentStore
    /// Reads a store file's metadata without opening it for writing.
    public typealias MetadataReader = @Sendable (URL) throws -> [String: String]

    /// The model every context of this coordinator uses.
    public let managedObjectModel: ManagedObjectModel

    private let lock = NSRecursiveLock()
    private var stores: [any PersistentStore] = [] {
        didSet {
            let made = stores.map { store in
                let incremental = store as? any IncrementalStore
                return Route(identifier: store.identifier, store: store, incremental: incremental, cachesRows: incremental?.usesCoordinatorRowCache ?? false)
            }
            routes.withLock { $0 = made }
        }
    }
    /// Each store with its identifier read once (a store may compute it from its metadata on every call) and its
    /// incremental-store view cast once: what every fault and save looks a store up by. Behind a lock of its own,
    /// which is all a fault takes to find its store: a plain mutex, held for nothing but the lookup, instead of
    /// `lock` (a recursive `NSRecursiveLock`, three times the instructions). A lock-free table would have had to keep
    /// every table it ever handed out, and with them the stores removed since.
    private let routes = Locked<[Route]>([])

    private struct Route: Sendable {
        let identifier: String
        let store: any PersistentStore
        let incremental: (any IncrementalStore)?
        /// Whether the row cache keeps the store's rows (``IncrementalStore/usesCoordinatorRowCache``, read once).
        let cachesRows: Bool
    }
    private var classes: [String: ManagedObject.Type] = [:]
    /// `objectClass(for:)`'s answers (an entity without a class of its own takes its nearest ancestor's).
    @exclusivity(unchecked) private var resolvedClasses: [ObjectIdentifier: ManagedObject.Type] = [:]
    // The state below `lock` guards is read and written only inside it, in accesses that call nothing that takes it
    // again: the runtime exclusivity check (run on every fault) would guard nothing.
    @exclusivity(unchecked) private var rowCache: [ManagedObjectID: CachedRow] = [:]
    /// For each store other processes may change: the change token up to which the row cache has dropped the rows
    /// those changes touched (``catchUp(with:)``).
    @exclusivity(unchecked) private var cacheTokens: [String: UInt64] = [:]
    /// Grows each time rows are dropped for changes made elsewhere: a row read before that must not be cached after.
    @exclusivity(unchecked) private var cacheEpoch: UInt64 = 0
    /// Grows after every save through this coordinator and every catch-up that finds changes made elsewhere. A row
    /// read after the generation was `g` is current while the generation is still `g` — what lets a fetch skip
    /// checking the objects it returns for staleness. Starts at 1, so 0 stands for "read at an unknown time".
    private let rowGeneration = Atomic<UInt64>(1)

    /// The row generation now; read it before a store read whose rows an object will show.
    var rowGenerationNow: UInt64 { rowGeneration.load(ordering: .acquiring) }

    /// The row of `objectID` read from `store`, stamped with the row generation read before the read.
    private func readNode(_ objectID: ManagedObjectID, from store: any IncrementalStore) throws -> IncrementalStoreNode {
        let generation = rowGenerationNow
        var node = try store.newValuesForObject(with: objectID)
        node.readGeneration = generation
        return node
    }

    /// The rows of `objectIDs` read from `store` in one call, stamped with the row generation read before the read.
    private func readNodes(_ objectIDs: [ManagedObjectID], from store: any IncrementalStore) throws -> [IncrementalStoreNode] {
        let generation = rowGenerationNow
        var nodes = try store.newValuesForObjects(with: objectIDs)
        for index in nodes.indices { nodes[index].readGeneration = generation }
        return nodes
    }
    let mergingLock = NSLock()
    var mergingContexts: [WeakContext] = []

    private struct CachedRow {
        var node: IncrementalStoreNode?
        var registrations: Int
    }

    private struct StoreType {
        let factory: StoreFactory
        let metadataReader: MetadataReader?
    }

    nonisolated(unsafe) private static var storeTypes: [String: StoreType] = [
        InMemoryStore.storeType: StoreType(factory: { try InMemoryStore(description: $0) }, metadataReader: nil),
        JSONStore.storeType: StoreType(factory: { try JSONStore(description: $0) }, metadataReader: JSONStore.metadata(at:)),
        CSVStore.storeType: StoreType(factory: { try CSVStore(description: $0) }, metadataReader: CSVStore.metadata(at:)),
    ]
    private static let storeTypesLock = NSLock()

    /// Creates a coordinator for `model`, with no stores.
    public init(managedObjectModel: ManagedObjectModel) {
        self.managedObjectModel = managedObjectModel
    }

    // MARK: - Store types

    /// Registers a store type so that ``addPersistentStore(type:configuration:at:options:)`` can create it.
    /// ``InMemoryStore`` (`"InMemory"`), ``JSONStore`` (`"JSON"`) and ``CSVStore`` (`"CSV"`) are registered from the
    /// start.
    public static func registerStoreType(_ type: String, factory: @escaping StoreFactory, metadataReader: MetadataReader? = nil) {
        storeTypesLock.withLock { storeTypes[type] = StoreType(factory: factory, metadataReader: metadataReader) }
    }

    private static func storeType(_ type: String) throws(ManagedObjectContextError) -> StoreType {
        guard let registered = storeTypesLock.withLock({ storeTypes[type] }) else {
            throw ManagedObjectContextError(.unknownName, message: "no store type \"\(type)\" is registered")
        }
        return registered
    }

    /// A store file's metadata, read without opening the store for writing.
    ///
    /// - Throws: ``ManagedObjectContextError`` for an unregistered type or one that cannot read metadata, or the
    ///   store's error naming the file.
    public static func metadataForPersistentStore(type: String, at url: URL) throws -> [String: String] {
        guard let reader = try storeType(type).metadataReader else {
            throw ManagedObjectContextError(.unsupportedRequest, message: "the store type \"\(type)\" cannot read metadata on its own")
        }
        return try reader(url)
    }

    // MARK: - Stores

    /// Creates a store of a registered type, loads its metadata and adds it.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` for an unknown
    ///   type or configuration, or what the store throws while loading.
    @discardableResult
    public func addPersistentStore(type: String, configuration: String? = nil, at url: URL? = nil,
                                   options: [String: String] = [:]) throws -> any PersistentStore {
        if let configuration, !managedObjectModel.configurations.contains(where: { $0.name == configuration }) {
            throw ManagedObjectContextError(.unknownName, message: "the model has no configuration named \"\(configuration)\"")
        }
        let store = try Self.storeType(type).factory(
            StoreDescription(model: managedObjectModel, configurationName: configuration, url: url, options: options))
        try store.loadMetadata()
        guard !store.identifier.isEmpty else {
            throw ManagedObjectContextError(.storeUnusable, message: "the \(type) store's metadata has no UUID after loading")
        }
        let token = try (store as? any ChangeTrackingStore)?.currentChangeToken()
        lock.withLock {
            stores.append(store)
            if let token { cacheTokens[store.identifier] = token }
        }
        return store
    }

    /// Removes a store; its objects can no longer be fetched or saved through this coordinator.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/noStore`` when the store is
    ///   not this coordinator's.
    public func removePersistentStore(_ store: any PersistentStore) throws {
        guard persistentStores.contains(where: { $0 === store }) else {
            throw ManagedObjectContextError(.noStore, message: "the store \(store.identifier) is not part of this coordinator")
        }
        // Read once, before the store lets go of what it holds.
        let identifier = store.identifier
        store.willRemoveFromPersistentStoreCoordinator(self)
        try lock.withLock { () throws in
            guard let index = stores.firstIndex(where: { $0 === store }) else {
                throw ManagedObjectContextError(.noStore, message: "the store \(identifier) is not part of this coordinator")
            }
            stores.remove(at: index)
            rowCache = rowCache.filter { $0.key.storeIdentifier != identifier }
            cacheTokens[identifier] = nil
        }
    }

    /// The coordinator's stores, in the order they were added.
    public var persistentStores: [any PersistentStore] { lock.withLock { stores } }

    /// The store with this identifier.
    public func persistentStore(withIdentifier identifier: String) -> (any PersistentStore)? {
        routes.withLock { $0.first { $0.identifier == identifier }?.store }
    }

    /// The incremental stores that hold `entityName`.
    func stores(holding entityName: String) -> [any IncrementalStore] {
        lock.withLock {
            stores.compactMap { $0 as? any IncrementalStore }.filter { store in
                managedObjectModel.entityNames(inConfiguration: store.configurationName).contains(entityName)
            }
        }
    }

    /// The incremental store with this identifier, by its route.
    private func incrementalStore(withIdentifier identifier: String) -> (any IncrementalStore)? {
        routes.withLock { $0.first { $0.identifier == identifier }?.incremental }
    }

    func incrementalStore(for objectID: ManagedObjectID) throws(ManagedObjectContextError) -> any IncrementalStore {
        try incrementalRoute(for: objectID).store
    }

    /// The incremental store holding `objectID`, and whether the row cache keeps its rows.
    private func incrementalRoute(for objectID: ManagedObjectID) throws(ManagedObjectContextError) -> (store: any IncrementalStore, cachesRows: Bool) {
        let found = routes.withLock { routes -> (any IncrementalStore, Bool)? in
            guard let identifier = objectID.storeIdentifier, let route = routes.first(where: { $0.identifier == identifier }),
                  let store = route.incremental else { return nil }
            return (store, route.cachesRows)
        }
        guard let found else { throw ManagedObjectContextError(.noStore, message: "no store of this coordinator holds \(objectID)") }
        return found
    }

    /// Whether the row cache keeps rows of `objectID`'s store; `lock` must be held. IDs mostly come in runs of one
    /// namespace: `last` remembers the answer for the namespace asked about last.
    @inline(__always)
    private func cachesRows(_ objectID: ManagedObjectID, last: inout (namespace: ObjectIdentifier?, caches: Bool)) -> Bool {
        let namespace = objectID.namespaceIdentity
        if last.namespace == namespace { return last.caches }
        let identifier = objectID.storeIdentifier
        let caches = identifier != nil && routes.withLock { $0.first { $0.identifier == identifier }?.cachesRows == true }
        last = (namespace, caches)
        return caches
    }

    // MARK: - Classes

    /// Makes contexts create objects of `type` for `entityName` (and its sub-entities without a class of their own).
    public func registerClass(_ type: ManagedObject.Type, forEntityName entityName: String) {
        lock.withLock {
            classes[entityName] = type
            resolvedClasses = [:]
            classRegistrations.add(1, ordering: .releasing)
        }
    }

    /// How many times ``registerClass(_:forEntityName:)`` was called: contexts keep the class they found last and
    /// ask again when this number moved.
    let classRegistrations = Atomic<Int>(0)

    /// The class of `entity`'s objects, found by the entity's identity (no name hashed).
    func objectClass(for entity: ManagedObjectModel.EntityHandle) -> ManagedObject.Type {
        lock.withLock {
            if let type = resolvedClasses[ObjectIdentifier(entity)] { return type }
            var resolved: ManagedObject.Type = ManagedObject.self
            for name in managedObjectModel.ancestry(of: entity.name).reversed() {
                if let type = classes[name] { resolved = type; break }
            }
            resolvedClasses[ObjectIdentifier(entity)] = resolved
            return resolved
        }
    }

    // MARK: - URIs

    /// The object ID a URI stands for.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/invalidURI`` when the URI is
    ///   not an object URI, names a store this coordinator does not have, or an entity the model lacks.
    public func managedObjectID(forURIRepresentation uri: URL) throws -> ManagedObjectID {
        guard let id = ManagedObjectID.parse(uri) else {
            throw ManagedObjectContextError(.invalidURI, message: "\(uri.absoluteString) is not a managed object URI (x-coredata://<store>/<Entity>/p<key>)")
        }
        guard managedObjectModel.entity(named: id.entityName) != nil else {
            throw ManagedObjectContextError(.invalidURI, message: "\(uri.absoluteString) names the entity \"\(id.entityName)\", which the model does not have")
        }
        if let store = id.storeIdentifier, persistentStore(withIdentifier: store) == nil {
            throw ManagedObjectContextError(.invalidURI, message: "\(uri.absoluteString) belongs to the store \(store), which this coordinator does not have")
        }
        return id
    }

    // MARK: - Row cache

    /// The stored values of an object, from the row cache or its store.
    func node(for objectID: ManagedObjectID) throws -> IncrementalStoreNode {
        let (store, cachesRows) = try incrementalRoute(for: objectID)
        guard cachesRows else {
            return try readNode(objectID, from: store)
        }
        let (cached, epoch) = lock.withLock { (rowCache[objectID]?.node, cacheEpoch) }
        if let cached { return cached }
        return try read(objectID, from: store, readIn: epoch)
    }

    /// Reads a row from its store and caches it: only for a registered object (one lookup), and only if no catch-up
    /// dropped rows since `epoch`, read before the cache was asked.
    private func read(_ objectID: ManagedObjectID, from store: any IncrementalStore, readIn epoch: UInt64) throws -> IncrementalStoreNode {
        let node = try readNode(objectID, from: store)
        lock.withLock {
            guard cacheEpoch == epoch, let position = rowCache.index(forKey: objectID) else { return }
            rowCache.values[position].node = node
        }
        return node
    }

    /// ``register(_:)-(ManagedObjectID)`` then ``node(for:)`` in one visit: the registration counted and the cached
    /// row looked up with one lookup under one lock, the store found once.
    func registeringNode(for objectID: ManagedObjectID) throws -> IncrementalStoreNode {
        let (store, cachesRows) = try incrementalRoute(for: objectID)
        guard cachesRows else {
            store.managedObjectContextDidRegisterObject(with: objectID)
            return try readNode(objectID, from: store)
        }
        let (cached, epoch) = lock.withLock { () -> (IncrementalStoreNode?, UInt64) in
            guard let position = rowCache.index(forKey: objectID) else {
                rowCache[objectID] = CachedRow(node: nil, registrations: 1)
                return (nil, cacheEpoch)
            }
            rowCache.values[position].registrations += 1
            return (rowCache.values[position].node, cacheEpoch)
        }
        store.managedObjectContextDidRegisterObject(with: objectID)
        if let cached { return cached }
        return try read(objectID, from: store, readIn: epoch)
    }

    /// ``register(_:)-([ManagedObjectID])`` then the stored values of the objects, in one visit: each registration
    /// counted and its cached row looked up with one lookup under one lock, the rest read with one call per store,
    /// each node handed over as the store reads it (``IncrementalStore/newValuesForObjects(with:forEach:)``).
    /// `found` is called with the position in `objectIDs`, the node and the row generation it was read at, for each
    /// object that is not gone (cached rows first, then the rows read); it must not call the coordinator or a store.
    func registeringNodes(for objectIDs: [ManagedObjectID], found: (Int, IncrementalStoreNode, UInt64) -> Void) throws {
        var cached: [(Int, IncrementalStoreNode)] = []
        var missing: [Int] = []
        var anyCaches = false
        let epoch = lock.withLock {
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            for index in objectIDs.indices where !objectIDs[index].isTemporaryID {
                guard cachesRows(objectIDs[index], last: &last) else {
                    missing.append(index)
                    continue
                }
                anyCaches = true
                if let node = Self.registering(&rowCache[objectIDs[index], default: CachedRow(node: nil, registrations: 0)]) {
                    cached.append((index, node))
                } else {
                    missing.append(index)
                }
            }
            return cacheEpoch
        }
        forEachIncrementalStore(of: objectIDs) { $0.managedObjectContextDidRegisterObjects(with: $1) }
        for (index, node) in cached { found(index, node, node.readGeneration) }
        guard !missing.isEmpty else { return }
        // Usually every ID is read, from one store: the IDs are passed on as they are.
        let missingIDs = missing.count == objectIDs.count ? objectIDs : missing.map { objectIDs[$0] }
        try forEachIncrementalStore(positionsOf: missingIDs) { store, ids, positions throws in
            let generation = rowGenerationNow
            // Rows of a store the cache keeps are kept as they go by (a store whose rows it does not keep copies none).
            var read: [IncrementalStoreNode] = []
            try store.newValuesForObjects(with: ids) { index, node in
                if anyCaches { read.append(node) }
                found(missing[positions?[index] ?? index], node, generation)
            }
            if !read.isEmpty { cache(read, readIn: epoch) }
        }
    }

    /// Counts one more registration of a cached row's object and hands back its node.
    @inline(__always)
    private static func registering(_ row: inout CachedRow) -> IncrementalStoreNode? {
        row.registrations += 1
        return row.node
    }

    /// The stored values of many objects: cached rows first, the rest in one store call per store.
    func nodes(for objectIDs: [ManagedObjectID]) throws -> [ManagedObjectID: IncrementalStoreNode] {
        var result: [ManagedObjectID: IncrementalStoreNode] = [:]
        var missing: [ManagedObjectID] = []
        let epoch = lock.withLock {
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            for id in objectIDs {
                if cachesRows(id, last: &last), let node = rowCache[id]?.node { result[id] = node } else { missing.append(id) }
            }
            return cacheEpoch
        }
        for (storeIdentifier, ids) in Dictionary(grouping: missing.filter { !$0.isTemporaryID }, by: { $0.storeIdentifier! }) {
            guard let store = incrementalStore(withIdentifier: storeIdentifier) else { continue }
            let nodes = try readNodes(ids, from: store)
            for node in nodes { result[node.objectID] = node }
            cache(nodes, readIn: epoch)
        }
        return result
    }

    /// The row cache's epoch: read before a store read, it lets ``cache(_:readIn:)`` keep only rows no catch-up
    /// could have outdated meanwhile.
    var cacheEpochNow: UInt64 { lock.withLock { cacheEpoch } }

    /// Keeps rows read from a store for the registered objects among them — unless rows were dropped for changes
    /// made elsewhere since the read began (`epoch`), when they may be older than what the cache must hold.
    func cache(_ nodes: [IncrementalStoreNode], readIn epoch: UInt64) {
        lock.withLock {
            guard cacheEpoch == epoch else { return }
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            // By index: a node is copied only into the cache, not for the look at its ID.
            for index in nodes.indices where cachesRows(nodes[index].objectID, last: &last) {
                if let position = rowCache.index(forKey: nodes[index].objectID) { rowCache.values[position].node = nodes[index] }
            }
        }
    }

    /// Runs a fetch on one store and keeps the row cache true to the store: rows that other processes changed since
    /// the cache last caught up are dropped, so an object a fetch returns never shows a row older than the one the
    /// fetch matched. Rows the store hands over are the caller's to cache (``cache(_:readIn:)``, with the epoch read
    /// before this call) once it has registered the objects they belong to.
    func execute(_ request: FetchRequest, on store: any IncrementalStore) throws -> PersistentStoreResult {
        let result = try store.execute(.fetch(request))
        if let tracking = store as? any ChangeTrackingStore { try catchUp(with: tracking) }
        return result
    }

    /// Runs a save on one store. When the save is the only one the store's change log gained meanwhile, the row cache
    /// stays caught up (the context puts the rows it saved into the cache), so the next fetch need not drop them.
    /// Returns the store's answer: ``PersistentStoreResult/versions(_:)`` or ``PersistentStoreResult/empty``.
    func execute(_ request: SaveChangesRequest, on store: any IncrementalStore) throws -> PersistentStoreResult {
        // Whatever the save's outcome, rows read before it may be stale now.
        defer { rowGeneration.add(1, ordering: .releasing) }
        guard let tracking = store as? any ChangeTrackingStore else {
            return try store.execute(.save(request))
        }
        let before = try tracking.currentChangeToken()
        let result = try store.execute(.save(request))
        let after = try tracking.currentChangeToken()
        lock.withLock {
            if after == before &+ 1, cacheTokens[store.identifier] == before { cacheTokens[store.identifier] = after }
        }
        return result
    }

    /// Drops the cached rows of objects that saves recorded in `store`'s change log since the cache last caught up
    /// (every cached row of the store when the log no longer reaches back that far). One read of the change token
    /// when nothing changed.
    func catchUp(with store: any ChangeTrackingStore) throws {
        let identifier = store.identifier
        guard let known = lock.withLock({ cacheTokens[identifier] }), try store.currentChangeToken() != known else { return }
        rowGeneration.add(1, ordering: .releasing)
        let changes = try store.changes(since: known)
        let current = try changes?.token ?? store.currentChangeToken()
        lock.withLock {
            cacheEpoch &+= 1
            if let changes = changes?.changes {
                for id in changes.updated.union(changes.deleted) where rowCache[id] != nil { rowCache[id]!.node = nil }
            } else {
                for index in rowCache.indices where rowCache.keys[index].storeIdentifier == identifier { rowCache.values[index].node = nil }
            }
            cacheTokens[identifier] = max(cacheTokens[identifier] ?? 0, current)
        }
    }

    /// The versions of the rows of `objectIDs` the coordinator knows to be current: the cached row's, or, for a
    /// store whose rows are not cached, the row's as the store reads it now (`nil` where neither is known: no row
    /// cached, the object gone, or the store unreadable).
    func currentVersions(of objectIDs: [ManagedObjectID]) -> [Int64?] {
        var uncached: [Int] = []
        var versions = lock.withLock {
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            return objectIDs.indices.map { index -> Int64? in
                guard cachesRows(objectIDs[index], last: &last) else {
                    uncached.append(index)
                    return nil
                }
                return rowCache[objectIDs[index]]?.node?.version
            }
        }
        guard !uncached.isEmpty else { return versions }
        var read: [ManagedObjectID: Int64] = [:]
        forEachIncrementalStore(of: uncached.map { objectIDs[$0] }) { store, ids in
            guard let found = try? store.versionsOfObjects(with: ids), found.count == ids.count else { return }
            for (id, version) in zip(ids, found) { read[id] = version }
        }
        for index in uncached { versions[index] = read[objectIDs[index]] }
        return versions
    }

    /// Forgets every cached row of `store` (its objects stay registered) and moves the row generation and the cache
    /// epoch: after a change the coordinator did not see row by row, such as a batch request, no row read before it
    /// is current — including rows a read under way now would cache.
    func dropCachedRows(of store: any PersistentStore) {
        let identifier = store.identifier
        rowGeneration.add(1, ordering: .releasing)
        lock.withLock {
            cacheEpoch &+= 1
            for index in rowCache.indices where rowCache.keys[index].storeIdentifier == identifier { rowCache.values[index].node = nil }
        }
    }

    /// Replaces (or drops, for `nil`) a cached row after a save or a refresh.
    func updateCache(_ objectID: ManagedObjectID, node: IncrementalStoreNode?) {
        lock.withLock { if let position = rowCache.index(forKey: objectID) { rowCache.values[position].node = node } }
    }

    /// Registers one object: as ``register(_:)-([ManagedObjectID])`` without building groups of IDs.
    func register(_ objectID: ManagedObjectID) {
        guard !objectID.isTemporaryID, let (store, cachesRows) = try? incrementalRoute(for: objectID) else { return }
        if cachesRows { lock.withLock { rowCache[objectID, default: CachedRow(node: nil, registrations: 0)].registrations += 1 } }
        store.managedObjectContextDidRegisterObject(with: objectID)
    }

    func register(_ objectIDs: [ManagedObjectID]) {
        lock.withLock {
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            for id in objectIDs where !id.isTemporaryID && cachesRows(id, last: &last) {
                rowCache[id, default: CachedRow(node: nil, registrations: 0)].registrations += 1
            }
        }
        forEachIncrementalStore(of: objectIDs) { $0.managedObjectContextDidRegisterObjects(with: $1) }
    }

    func unregister(_ objectIDs: [ManagedObjectID]) {
        lock.withLock {
            var last: (namespace: ObjectIdentifier?, caches: Bool) = (nil, false)
            for id in objectIDs where !id.isTemporaryID && cachesRows(id, last: &last) {
                guard let position = rowCache.index(forKey: id) else { continue }
                rowCache.values[position].registrations -= 1
                if rowCache.values[position].registrations <= 0 { rowCache.remove(at: position) }
            }
        }
        forEachIncrementalStore(of: objectIDs) { $0.managedObjectContextDidUnregisterObjects(with: $1) }
    }

    /// Calls `body` once per incremental store holding some of `objectIDs` (temporary IDs left out), with its IDs.
    private func forEachIncrementalStore<Failure: Error>(of objectIDs: [ManagedObjectID],
                                                         _ body: (any IncrementalStore, [ManagedObjectID]) throws(Failure) -> Void) throws(Failure) {
        try forEachIncrementalStore(positionsOf: objectIDs) { (store, ids, _) throws(Failure) in try body(store, ids) }
    }

    /// ``forEachIncrementalStore(of:_:)`` that also gives the positions in `objectIDs` of the store's IDs: `nil` when
    /// they are all of `objectIDs`, in order.
    private func forEachIncrementalStore<Failure: Error>(positionsOf objectIDs: [ManagedObjectID],
                                                         _ body: (any IncrementalStore, [ManagedObjectID], [Int]?) throws(Failure) -> Void) throws(Failure) {
        // IDs of one namespace (a batch, a relationship's window) need no grouping.
        if let first = objectIDs.first, objectIDs.allSatisfy({ $0.hasNamespace(of: first) }) {
            if let identifier = first.storeIdentifier, let store = incrementalStore(withIdentifier: identifier) { try body(store, objectIDs, nil) }
            return
        }
        var groups: [(store: String, positions: [Int])] = []
        for index in objectIDs.indices {
            guard let store = objectIDs[index].storeIdentifier else { continue }
            // IDs mostly come in runs from one store: look at the last group first.
            if let last = groups.indices.last, groups[last].store == store {
                groups[last].positions.append(index)
            } else if let position = groups.firstIndex(where: { $0.store == store }) {
                groups[position].positions.append(index)
            } else {
                groups.append((store, [index]))
            }
        }
        for group in groups {
            if let store = incrementalStore(withIdentifier: group.store) { try body(store, group.positions.map { objectIDs[$0] }, group.positions) }
        }
    }
}
