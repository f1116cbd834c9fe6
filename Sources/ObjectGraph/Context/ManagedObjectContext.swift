import Foundation

/// A scratch pad of managed objects: it hands out objects (as faults until used), tracks every change, and saves
/// them to the stores in one go (Core Data's `NSManagedObjectContext`).
///
/// A context and its objects belong to one isolation domain — the thread or task that uses them. Work from
/// elsewhere goes through ``perform(_:)``, which runs on the context's own serial queue. The context keeps one
/// object per ID (uniquing), so the same stored object is the same Swift object everywhere in the context.
///
/// ```swift
/// let context = ManagedObjectContext(coordinator: coordinator)
/// let ada = try context.insertNewObject(forEntityName: "Employee")
/// ada["name"] = "Ada"
/// try context.save()
/// ```
public final class ManagedObjectContext: @unchecked Sendable {
    /// The coordinator the context reads from and saves to.
    public let persistentStoreCoordinator: PersistentStoreCoordinator
    /// The parent context of a child context: the child reads the parent's current (unsaved) state and saves into
    /// it; `nil` for a context that saves to the stores.
    public let parent: ManagedObjectContext?
    /// How a save resolves conflicts with changes saved elsewhere meanwhile. Default: ``MergePolicy/error``.
    public var mergePolicy: MergePolicy = .error

    // The context's and its objects' bookkeeping is marked `@exclusivity(unchecked)`: it is touched only from the
    // context's isolation domain, and no access to it is held across a call that could reach it again, so the
    // runtime's exclusivity check (a thread-local lookup, ~80 instructions per access, several per property access)
    // would guard nothing. Measured: 4–8 % of the instructions of faults, fetches and saves.
    @exclusivity(unchecked) var registered = ObjectRegistry()
    /// Objects inserted since the last save, in insertion order (the order their keys follow); a save walks them
    /// without looking each up by ID.
    @exclusivity(unchecked) var insertedInOrder: [ManagedObject] = []
    @exclusivity(unchecked) var deletedIDs: [ManagedObjectID] = []
    /// Objects (not inserted ones) with unsaved changes. Any mutation through this property moves
    /// ``reportGeneration``; ``objectDidChange(_:)`` adds to the storage directly.
    var changedIDs: Set<ManagedObjectID> {
        get { changedIDStorage }
        set { reportGeneration &+= 1; changedIDStorage = newValue }
        _modify { reportGeneration &+= 1; yield &changedIDStorage }
    }
    @exclusivity(unchecked) private var changedIDStorage: Set<ManagedObjectID> = []
    /// Moves whenever ``changedIDs`` or ``pendingNotification`` change through those properties (objects leaving
    /// them, a notification posted); code that only adds to them uses their storage. An object that reported a
    /// change at the current generation and already had changes is in both still, so reporting its next change
    /// would find nothing to do: a bulk insert changes each of 100 departments thousands of times.
    @exclusivity(unchecked) private(set) var reportGeneration: UInt64 = 1
    /// How the last ``fetchDictionaries(_:)`` was answered: by the store or in memory by the context.
    public internal(set) var lastDictionaryFetchStrategy = ""
    let observerLock = NSLock()
    var observers: [UInt64: (ContextEvent) -> Void] = [:]
    var nextObserverToken: UInt64 = 0
    /// The changes the next ``ContextEvent/objectsDidChange(_:)`` reports. Any mutation through this property moves
    /// ``reportGeneration``; code that only adds to it uses ``pendingNotificationStorage``.
    var pendingNotification: ContextChanges {
        get { pendingNotificationStorage }
        set { reportGeneration &+= 1; pendingNotificationStorage = newValue }
        _modify { reportGeneration &+= 1; yield &pendingNotificationStorage }
    }
    @exclusivity(unchecked) var pendingNotificationStorage = ContextChanges()
    @exclusivity(unchecked) private var storeRuleCache: [(key: StoreRuleKey, derives: Bool, acceptsChanges: Bool)] = []
    /// The entity and class of the IDs handed in last (IDs mostly come many of one entity at a time), with the
    /// coordinator's class registration count they were found at.
    @exclusivity(unchecked) private var lastEntity: (namespace: ObjectIDNamespace, handle: ManagedObjectModel.EntityHandle,
                                                     type: ManagedObject.Type, registrations: Int)?
    /// The entity and class of the object made last by entity (inserted or adopted objects), with the coordinator's
    /// class registration count it was found at.
    @exclusivity(unchecked) private var lastMadeEntity: (handle: ManagedObjectModel.EntityHandle, type: ManagedObject.Type, registrations: Int)?
    /// Whether this context merges the saves of other contexts on the same coordinator as they happen.
    public var automaticallyMergesChangesFromParent = false {
        didSet { persistentStoreCoordinator.setMerging(self, automaticallyMergesChangesFromParent) }
    }
    private let queue = DispatchQueue(label: "LMDBStore.ManagedObjectContext")
    /// What the context's objects reach it through: one reference for all of them (see ``ContextLink``).
    let link = ContextLink()

    /// The model of the context's coordinator.
    public var model: ManagedObjectModel { persistentStoreCoordinator.managedObjectModel }

    /// Creates an empty context over `coordinator`.
    public init(coordinator: PersistentStoreCoordinator) {
        self.persistentStoreCoordinator = coordinator
        self.parent = nil
        link.context = self
    }

    /// Creates a child of `parent`: fetches and faults see the parent's unsaved state, ``save()`` pushes changes into
    /// the parent only (the parent's own save writes them to the stores), and dropping the child discards its edits.
    /// The child shares the parent's isolation domain.
    public init(parent: ManagedObjectContext) {
        self.persistentStoreCoordinator = parent.persistentStoreCoordinator
        self.parent = parent
        link.context = self
    }

    deinit {
        link.context = nil
        var held: [ManagedObjectID] = []
        held.reserveCapacity(registered.count)
        for object in registered.values where object.holdsRow { held.append(object.objectID) }
        persistentStoreCoordinator.unregister(held)
    }

    /// Runs `body` on the context's serial queue and returns its result, so that code elsewhere can use the context
    /// and its objects safely.
    public func perform<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result_(catching: body)) }
        }
    }

    /// Runs `body` on the context's serial queue and waits for it.
    public func performAndWait<Result>(_ body: () throws -> Result) rethrows -> Result {
        try queue.sync(execute: body)
    }

    // MARK: - Object sets

    /// Objects inserted since the last save.
    public var insertedObjects: Set<ManagedObject> { Set(insertedInOrder) }
    /// Objects changed since the last save (neither inserted nor deleted).
    public var updatedObjects: Set<ManagedObject> {
        Set(changedIDs.compactMap { registered[$0] }.filter(\.isUpdated))
    }
    /// Objects deleted since the last save.
    public var deletedObjects: Set<ManagedObject> { Set(deletedIDs.compactMap { registered[$0] }) }
    /// Every object the context holds.
    public var registeredObjects: Set<ManagedObject> { Set(registered.values) }
    /// Whether anything is unsaved.
    public var hasChanges: Bool { !insertedInOrder.isEmpty || !deletedIDs.isEmpty || changedIDs.contains { registered[$0]?.isUpdated == true } }

    // MARK: - Getting objects

    /// A new object of `entityName`, inserted in the context: default values set, then `awakeFromInsert` called.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` for an unknown
    ///   entity, or an abstract one.
    public func insertNewObject(forEntityName entityName: String) throws(ManagedObjectContextError) -> ManagedObject {
        guard let handle = model.existingHandle(forEntityNamed: entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(entityName)\"")
        }
        guard !handle.description.isAbstract else {
            throw ManagedObjectContextError(.unknownName, message: "the entity \"\(entityName)\" is abstract; insert one of its sub-entities")
        }
        let object = makeObject(handle, .temporary(in: handle.temporaryNamespace))
        object.lifecycle = .inserted
        object.isFaultStorage = false
        // The defaults, in an array of the object's own (it is about to be written to).
        object.attributeStorage = handle.newDefaultValues()
        object.toMany = handle.noMembers
        registered[object.objectID] = object
        insertedInOrder.append(object)
        pendingNotificationStorage.inserted.insert(object.objectID)  // adds only: the report generation stays
        object.awakeFromInsert()
        return object
    }

    /// Inserts a new object and returns it as `T` (the class registered for the entity).
    ///
    /// - Throws: As ``insertNewObject(forEntityName:)``; ``ManagedObjectContextError/Code/wrongValueType`` when the
    ///   entity's class is not `T`.
    public func insert<T: ManagedObject>(_ type: T.Type, entityName: String) throws(ManagedObjectContextError) -> T {
        let object = try insertNewObject(forEntityName: entityName)
        guard let typed = object as? T else {
            throw ManagedObjectContextError(.wrongValueType, message: "objects of \(entityName) are \(Swift.type(of: object)), not \(T.self); register the class with the coordinator")
        }
        return typed
    }

    /// The object with `objectID`: the registered one, or a new fault. Does no I/O.
    public func object(with objectID: ManagedObjectID) -> ManagedObject {
        registered.object(for: objectID) { makeObject(objectID) }
    }

    /// As ``object(with:)``, for the object at one position of a collection of `count` IDs: when the registry is
    /// full it grows once for the rest of them, instead of doubling as they are reached.
    @usableFromInline func object(with objectID: ManagedObjectID, amongIDs count: Int) -> ManagedObject {
        if registered.isFull { registered.reserveCapacity(forMore: count) }
        return object(with: objectID)
    }

    /// A new object for an ID of the store: its entity and class are the ones found last when the ID is in the same
    /// namespace and no class was registered since, else they are looked up.
    private func makeObject(_ objectID: ManagedObjectID) -> ManagedObject {
        let registrations = persistentStoreCoordinator.classRegistrations.load(ordering: .acquiring)
        if lastEntity?.namespace !== objectID.namespace || lastEntity?.registrations != registrations {
            let handle = model.handle(forEntityNamed: objectID.entityName)
            lastEntity = (objectID.namespace, handle, persistentStoreCoordinator.objectClass(for: handle), registrations)
        }
        let entity = lastEntity.unsafelyUnwrapped
        return entity.type.init(construction: ManagedObject.Construction(entity: entity.handle, model: model, objectID: objectID, context: self))
    }

    /// The objects with these IDs, in their order: the registered ones as they are, faults for the others.
    func objects(with objectIDs: [ManagedObjectID]) -> [ManagedObject] {
        var objects: [ManagedObject] = []
        objects.reserveCapacity(objectIDs.count)
        // A registry smaller than what it is handed is sized once, instead of growing ten times for 1 000 faults; a
        // larger one (a context fetching what it mostly holds already) is left as it is.
        if registered.count < objectIDs.count { registered.reserveCapacity(forMore: objectIDs.count) }
        for id in objectIDs {
            objects.append(registered.object(for: id) { makeObject(id) })
        }
        return objects
    }

    /// The object with `objectID`, with its values loaded.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/objectNotFound`` when the
    ///   object does not exist (any more) in its store.
    public func existingObject(with objectID: ManagedObjectID) throws(ManagedObjectContextError) -> ManagedObject {
        if let existing = registered[objectID], !existing.isFault { return existing }
        if objectID.isTemporaryID && parent?.registeredObject(for: objectID) == nil {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is a temporary ID this context does not hold")
        }
        let object = self.object(with: objectID)
        object.willAccessValues()
        if let error = object.faultError { throw error }
        return object
    }

    /// The object with `objectID` if the context holds it, else `nil`. Does no I/O.
    public func registeredObject(for objectID: ManagedObjectID) -> ManagedObject? {
        registered[objectID]
    }

    func makeObject(_ entity: ManagedObjectModel.EntityHandle, _ objectID: ManagedObjectID) -> ManagedObject {
        // Objects are mostly made many of one entity at a time (an import inserting thousands): the class is looked
        // up under the coordinator's lock only when the entity changes or a class was registered since.
        let registrations = persistentStoreCoordinator.classRegistrations.load(ordering: .acquiring)
        if lastMadeEntity?.handle !== entity || lastMadeEntity?.registrations != registrations {
            lastMadeEntity = (entity, persistentStoreCoordinator.objectClass(for: entity), registrations)
        }
        return lastMadeEntity.unsafelyUnwrapped.type.init(
            construction: ManagedObject.Construction(entity: entity, model: model, objectID: objectID, context: self))
    }

    // MARK: - Changes

    /// Marks `object` for deletion; delete rules are applied when the context saves.
    public func delete(_ object: ManagedObject) {
        guard object.managedObjectContext === self, object.lifecycle != .deleted else { return }
        if object.lifecycle == .inserted {
            // Never saved: it simply goes away, after its relationships are cleared.
            insertedInOrder.removeAll { $0 === object }
            clearRelationships(of: object)
            object.lifecycle = .deleted
            forget(object)
            return
        }
        object.willAccessValues()
        object.lifecycle = .deleted
        deletedIDs.append(object.objectID)
        pendingNotificationStorage.deleted.insert(object.objectID)  // adds only: the report generation stays
    }

    /// Records a change of an object that is not inserted (inserted ones are saved whole, from `insertedInOrder`).
    func objectDidChange(_ object: ManagedObject) {
        changedIDStorage.insert(object.objectID)
        if object.lifecycle == .clean { pendingNotificationStorage.updated.insert(object.objectID) }
        object.reportedGeneration = reportGeneration
    }

    func forget(_ object: ManagedObject) {
        registered[object.objectID] = nil
        changedIDs.remove(object.objectID)
        releaseRow(of: object)
    }

    /// Clears every relationship of `object`, updating the other sides.
    func clearRelationships(of object: ManagedObject) {
        for slot in object.handle.relationshipSlots {
            if slot.kind == .toMany {
                try? object.replaceToMany(slot, with: [])
            } else {
                object.setToOne(slot, to: nil)
            }
        }
    }

    /// Discards every unsaved change: inserted objects leave the context, changed and deleted ones take their last
    /// saved values again.
    public func rollback() {
        for object in insertedInOrder { object.lifecycle = .deleted; forget(object) }
        for id in changedIDs.union(deletedIDs) {
            guard let object = registered[id] else { continue }
            restoreCommitted(object)
        }
        insertedInOrder.removeAll()
        deletedIDs.removeAll()
        changedIDs.removeAll()
        pendingNotification = ContextChanges()
    }

    private func restoreCommitted(_ object: ManagedObject) {
        object.lifecycle = .clean
        object.changedSlots.removeAll()
        object.extras?.pendingToMany.removeAll()
        if let committed = object.committed {
            object.attributes = committed.attributes
            object.toOne = committed.toOne
            object.toMany = committed.toMany
            object.version = committed.version
        } else {
            turnIntoFault(object)
        }
    }

    /// Forgets every object; objects handed out before must not be used afterwards.
    public func reset() {
        for object in registered.values { object.managedObjectContext = nil }
        persistentStoreCoordinator.unregister(registered.values.filter(\.holdsRow).map(\.objectID))
        registered.removeAll()
        insertedInOrder.removeAll()
        deletedIDs.removeAll()
        changedIDs.removeAll()
        pendingNotification = ContextChanges()
    }

    /// Reloads an object's values: with `mergeChanges` false it turns back into a fault (unsaved changes are lost);
    /// with `mergeChanges` true it takes the store's current values but keeps its own unsaved changes on top.
    public func refresh(_ object: ManagedObject, mergeChanges: Bool) {
        guard object.managedObjectContext === self, object.lifecycle != .inserted else { return }
        guard mergeChanges, object.hasChanges else {
            if object.lifecycle == .deleted { deletedIDs.removeAll { $0 == object.objectID } }
            changedIDs.remove(object.objectID)
            object.lifecycle = .clean
            object.changedSlots.removeAll()
            turnIntoFault(object)
            persistentStoreCoordinator.updateCache(object.objectID, node: nil)
            return
        }
        let fresh = parent == nil
            ? try? persistentStoreCoordinator.incrementalStore(for: object.objectID).newValuesForObject(with: object.objectID)
            : try? sourceNode(for: object.objectID)
        guard let node = fresh else { return }
        object.extras?.fetchedResults.removeAll()
        persistentStoreCoordinator.updateCache(object.objectID, node: node)
        let local = (attributes: object.attributes, toOne: object.toOne, toMany: object.toMany)
        apply(node, to: object)
        object.toMany = []
        for index in object.changedSlots {
            let slot = object.handle.slots[index]
            switch slot.kind {
            case .attribute where slot.position >= 0: object.setAttributeValue(local.attributes[slot: slot.position], slot)
            case .toOne: object.setToOneID(local.toOne[slot: slot.position], slot)
            case .toMany: object.setMembers(local.toMany[slot: slot.position], slot)
            default: break
            }
        }
    }

    func turnIntoFault(_ object: ManagedObject) {
        object.isFaultStorage = true
        object.extras?.fetchedResults.removeAll()
        object.extras?.pendingToMany.removeAll()
        object.attributeStorage = object.handle.hasTransientAttributes ? object.transientAttributes() : []
        object.forgetRow()
        object.toOneStorage = []
        object.toMany = []
        object.committedStorage = nil
    }

    // MARK: - Faults

    /// Loads a fault's values through the coordinator's row cache (its whole batch, when it was fetched in one).
    func fulfillFault(of object: ManagedObject) {
        if let batch = object.faultBatch {
            object.faultBatch = nil
            loadBatch(batch)
            if !object.isFaultStorage { return }
        }
        do {
            let node: IncrementalStoreNode
            if parent == nil, !object.holdsRow, !object.objectID.isTemporaryID {
                // Registered and read in one visit to the coordinator.
                object.holdsRow = true
                node = try persistentStoreCoordinator.registeringNode(for: object.objectID)
            } else {
                holdRow(of: object)
                node = try sourceNode(for: object.objectID)
            }
            apply(node, to: object)
            object.faultError = nil
            object.awakeFromFetch()
        } catch let error as ManagedObjectContextError {
            object.faultError = error
            object.isFaultStorage = false
        } catch {
            object.faultError = ManagedObjectContextError(.objectNotFound, message: "the values of \(object.objectID) could not be loaded", underlying: error)
            object.isFaultStorage = false
        }
    }

    /// Registers `object` with the coordinator (once), so the coordinator keeps its stored row cached while this
    /// context uses it.
    func holdRow(of object: ManagedObject) {
        guard !object.holdsRow, !object.objectID.isTemporaryID else { return }
        object.holdsRow = true
        persistentStoreCoordinator.register(object.objectID)
    }

    /// ``holdRow(of:)`` for many objects about to load their values together, in one call to the coordinator (before
    /// the read, so the rows read are cached).
    func holdRows(of objects: [ManagedObject]) {
        var ids: [ManagedObjectID] = []
        for object in objects where !object.holdsRow && !object.objectID.isTemporaryID {
            object.holdsRow = true
            ids.append(object.objectID)
        }
        if !ids.isEmpty { persistentStoreCoordinator.register(ids) }
    }

    /// Gives back what ``holdRow(of:)`` took.
    func releaseRow(of object: ManagedObject) {
        guard object.holdsRow else { return }
        object.holdsRow = false
        persistentStoreCoordinator.unregister([object.objectID])
    }

    /// Puts a node's values into an object and makes them its committed snapshot; the object is current as of
    /// `readGeneration` (the node's own, if not given).
    func apply(_ node: IncrementalStoreNode, to object: ManagedObject, readGeneration: UInt64? = nil) {
        holdRow(of: object)
        if case .row(let entity, let row) = node.values, entity === object.handle {
            // The object reads its values from the row as they are asked for.
            object.read(from: row, version: node.version)
        } else {
            // The node's arrays are shared by the object and its snapshot until one of them changes.
            object.take(node.values.slots(of: object.handle), version: node.version)
        }
        object.version = node.version
        object.readGeneration = readGeneration ?? node.readGeneration
        object.isFaultStorage = false
    }

    /// Whether the object's store derives this to-many relationship from its inverse (so changes to it need not be
    /// sent, and an unloaded one need not be loaded to record them).
    func storeDerives(_ slot: ManagedObjectModel.Slot, of object: ManagedObject) -> Bool {
        storeRules(slot, of: object)?.derives ?? false
    }

    /// Whether the store of `object` takes changes of the to-many in `slot` as added and removed members (and does
    /// not derive it from its inverse).
    func storeTakesChanges(_ slot: ManagedObjectModel.Slot, of object: ManagedObject) -> Bool {
        guard let rules = storeRules(slot, of: object) else { return false }
        return rules.acceptsChanges && !rules.derives
    }

    /// Whether a change to this unloaded to-many relationship can be recorded without loading it: the store derives
    /// the relationship, or takes its changes as added and removed members.
    func recordsWithoutLoading(_ slot: ManagedObjectModel.Slot, of object: ManagedObject) -> Bool {
        guard let rules = storeRules(slot, of: object) else { return false }
        return rules.derives || rules.acceptsChanges
    }

    /// What the store of `object` does with the to-many in `slot` (`nil` when no store is asked: a child context, a
    /// new object). Asked once per relationship and store namespace (an entity's, in one store), then remembered:
    /// a bulk insert asks for every new member of every relationship.
    private func storeRules(_ slot: ManagedObjectModel.Slot, of object: ManagedObject) -> (derives: Bool, acceptsChanges: Bool)? {
        guard parent == nil, !object.objectID.isTemporaryID, let relationship = slot.relationship else { return nil }
        let key = StoreRuleKey(namespace: object.objectID.namespaceIdentity, slot: slot.index)
        // A few entries (relationships a context changes without loading), searched in order: no hashing.
        if let known = storeRuleCache.first(where: { $0.key == key }) { return (known.derives, known.acceptsChanges) }
        guard let store = try? persistentStoreCoordinator.incrementalStore(for: object.objectID) else { return nil }
        let rules = (derives: store.derivesRelationship(relationship),
                     acceptsChanges: !relationship.isOrdered && store.acceptsToManyChanges(for: relationship))
        storeRuleCache.append((key, rules.derives, rules.acceptsChanges))
        return rules
    }

    /// A relationship of the entity a namespace belongs to, by its slot index.
    struct StoreRuleKey: Equatable {
        let namespace: ObjectIdentifier
        let slot: Int
    }

    /// Loads a to-many relationship's members.
    func fulfillRelationshipFault(of object: ManagedObject, _ slot: ManagedObjectModel.Slot) {
        object.takeStoredMembers(slot.relationship.flatMap { try? sourceRelationship($0, of: object.objectID) } ?? [], slot)
    }

    // MARK: - Permanent IDs

    /// Gives inserted objects their permanent IDs now, before they are saved.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/noStore`` when no store holds
    ///   an object's entity, or the store's error.
    public func obtainPermanentIDs(for objects: [ManagedObject]) throws {
        // A child's objects get their IDs from the stores too, so the IDs stay valid up the chain.
        let temporary = objects.filter { $0.objectID.isTemporaryID && $0.managedObjectContext === self }
        guard !temporary.isEmpty else { return }
        reassignIDs(try permanentIDs(for: temporary), allRegistered: false)
    }

    /// Asks each store for the permanent IDs of its new objects, in insertion order (one call per store).
    func permanentIDs(for objects: [ManagedObject]) throws -> PermanentIDs {
        // The objects grouped by store, in the order the stores are first met; each entity's group found once (a
        // save of 10 000 employees looks its store up once), each object's by its entity's identity, not by a name.
        var groups: [(store: any IncrementalStore, objects: [ManagedObject])] = []
        var groupOfStore: [String: Int] = [:]
        var groupOfEntity: [ObjectIdentifier: Int] = [:]
        var last: (entity: ObjectIdentifier, group: Int)?
        for object in objects {
            let entity = ObjectIdentifier(object.handle)
            let group: Int
            if let last, last.entity == entity {
                group = last.group
            } else if let known = groupOfEntity[entity] {
                group = known
            } else {
                guard let store = persistentStoreCoordinator.stores(holding: object.entityName).first else {
                    throw ManagedObjectContextError(.noStore, message: "no store of the coordinator holds the entity \(object.entityName)")
                }
                if let existing = groupOfStore[store.identifier] {
                    group = existing
                } else {
                    group = groups.count
                    groups.append((store, []))
                    groupOfStore[store.identifier] = group
                }
                groupOfEntity[entity] = group
            }
            last = (entity, group)
            groups[group].objects.append(object)
        }
        var assignments = PermanentIDs()
        assignments.byTemporaryID.reserveCapacity(objects.count)
        assignments.objects.reserveCapacity(objects.count)
        for (store, group) in groups {
            let ids = try store.obtainPermanentIDs(for: group.map { ObjectReference(objectID: $0.objectID, entityName: $0.entityName) })
            guard ids.count == group.count else {
                throw ManagedObjectContextError(.unsupportedRequest, message: "the store returned \(ids.count) permanent IDs for \(group.count) objects")
            }
            for (object, id) in zip(group, ids) {
                assignments.byTemporaryID[object.objectID] = id
                assignments.objects.append((object, id))
            }
        }
        return assignments
    }

    /// Permanent IDs given to objects with temporary ones.
    struct PermanentIDs {
        /// Each temporary ID and the permanent ID given for it.
        var byTemporaryID: [ManagedObjectID: ManagedObjectID] = [:]
        /// The objects, each with the permanent ID given for it.
        var objects: [(object: ManagedObject, permanentID: ManagedObjectID)] = []
    }

    /// Replaces object IDs everywhere in the context: registrations, change lists and relationship values.
    /// `allRegistered`: every object is registered under its temporary ID (a save's inserted objects).
    func reassignIDs(_ given: PermanentIDs, allRegistered: Bool) {
        guard !given.objects.isEmpty else { return }
        let assignments = given.byTemporaryID
        let registeredAnew = registered.move(given.objects, allRegistered: allRegistered)
        var moved: [ManagedObject] = []
        moved.reserveCapacity(registeredAnew.count)
        for (object, new) in registeredAnew {
            let old = object.objectID
            object.objectID = new
            moved.append(object)
            // Inserted objects are never among the changed ones; others given IDs (a child's, adopted) may be.
            if object.lifecycle != .inserted, changedIDs.remove(old) != nil { changedIDs.insert(new) }
        }
        if !deletedIDs.isEmpty { deletedIDs = deletedIDs.map { assignments[$0] ?? $0 } }
        // Only an inserted or changed object can point at a newly saved one (pointing at it changed it): the clean
        // objects a context holds, however many, are not looked at. The two lists are disjoint.
        // Only a temporary ID can have been reassigned: a permanent one is not looked up.
        func moves(_ id: ManagedObjectID) -> Bool { id.isTemporaryID && assignments[id] != nil }
        func map(_ id: ManagedObjectID) -> ManagedObjectID { id.isTemporaryID ? assignments[id] ?? id : id }
        func remap(_ object: ManagedObject) {
            // An object still reading its row points only at stored objects: its to-ones stay as they are.
            if object.row == nil {
                for position in object.toOneStorage.indices {
                    if let id = object.toOneStorage[position], moves(id) { object.toOneStorage[position] = map(id) }
                }
            }
            for (position, ids) in object.toMany.enumerated() {
                guard let ids, ids.contains(where: moves) else { continue }
                object.toMany[position] = ids.map(map)
            }
            // Changes recorded on an unloaded relationship name the new objects too.
            guard let extras = object.extras else { return }
            for (position, pending) in extras.pendingToMany.enumerated() {
                guard let pending, pending.added.contains(where: moves) || pending.removed.contains(where: moves) else { continue }
                extras.pendingToMany[position] = PendingMembers(added: pending.added.map(map), removed: Set(pending.removed.map(map)))
            }
        }
        for object in insertedInOrder { remap(object) }
        for id in changedIDs { if let object = registered[id] { remap(object) } }
        holdRows(of: moved)
    }
}

/// `Result` under another name inside the context, whose generic parameter is called `Result`.
typealias Result_<Success, Failure: Error> = Swift.Result<Success, Failure>

/// A context as its objects reach it, shared by all of a context's objects: set when the context is made and cleared
/// first thing in its `deinit`, so objects never keep their context alive and see `nil` once it is gone.
///
/// Not `weak`: a weak reference gives the context a side table, and every retain and release of the context — several
/// per fault — then takes the runtime's slow path through it. The reference is unowned and unsafe instead (Core Data's
/// `managedObjectContext` is an `assign` property for the same reason), which is sound because the context clears it
/// before it starts to go away, and an object is only used in its context's isolation domain, so no read of the link
/// races the context's `deinit`.
final class ContextLink {
    unowned(unsafe) var context: ManagedObjectContext?
}
