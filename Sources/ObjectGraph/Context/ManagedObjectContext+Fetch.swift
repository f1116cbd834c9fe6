extension ManagedObjectContext {
    /// The objects matching `request`, in its order, as faults unless the request says otherwise.
    ///
    /// With ``FetchRequest/includesPendingChanges`` (the default) unsaved inserts that match are included, unsaved
    /// deletions are left out and unsaved updates are matched by their current values.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` for an unknown
    ///   entity or a key path naming a property the entity lacks, ``ManagedObjectContextError/Code/invalidRequest``
    ///   for a request that cannot run (``FetchRequest/validate(for:)``), ``ManagedObjectContextError/Code/noStore``
    ///   when no store holds it, the store's error when it cannot
    ///   run the request, or a ``PredicateEvaluationError`` from matching pending changes.
    public func fetch(_ request: FetchRequest) throws -> [ManagedObject] {
        let objects: [ManagedObject]
        let loadsValues = !request.returnsObjectsAsFaults && request.includesPropertyValues
        switch try matches(request, loadingValues: loadsValues, asFaults: request.returnsObjectsAsFaults && request.includesPropertyValues) {
        case .loaded(let loaded):
            // Each object holds the row the store just read for this fetch, or unsaved changes: none is stale.
            objects = loaded
        case .ids(let ids):
            objects = self.objects(with: ids)
            if parent == nil { refreshStale(objects) }
        }
        if loadsValues {
            try loadValues(of: objects)
        } else if request.includesPropertyValues {
            assignBatches(of: objects, size: request.fetchBatchSize > 0 ? request.fetchBatchSize : RelatedObjects<ManagedObject>.faultBatchSize)
        }
        if !request.relationshipKeyPathsForPrefetching.isEmpty { try prefetch(request.relationshipKeyPathsForPrefetching, for: objects) }
        return objects
    }

    /// The objects matching `request`, as `T`.
    ///
    /// - Throws: As ``fetch(_:)``; ``ManagedObjectContextError/Code/wrongValueType`` when an object is not a `T`.
    public func fetch<T: ManagedObject>(_ request: FetchRequest, as type: T.Type) throws -> [T] {
        try fetch(request).map { object in
            guard let typed = object as? T else {
                throw ManagedObjectContextError(.wrongValueType, message: "\(object.entityName) objects are \(Swift.type(of: object)), not \(T.self)")
            }
            return typed
        }
    }

    /// The IDs of the objects matching `request`, in its order.
    ///
    /// - Throws: As ``fetch(_:)``.
    public func fetchObjectIDs(_ request: FetchRequest) throws -> [ManagedObjectID] {
        try matchingObjectIDs(request)
    }

    /// How many objects match `request` (its offset and limit applied).
    ///
    /// - Throws: As ``fetch(_:)``.
    public func count(for request: FetchRequest) throws -> Int {
        let stores = try storesFor(request)
        if parent == nil && stores.count == 1 && !needsPendingChanges(request) {
            var storeRequest = request
            storeRequest.resultType = .count
            guard case .count(let count) = try stores[0].execute(.fetch(storeRequest)) else {
                throw ManagedObjectContextError(.unsupportedRequest, message: "the store answered a count request without a count")
            }
            return count
        }
        return try matchingObjectIDs(request).count
    }

    private func storesFor(_ request: FetchRequest) throws(ManagedObjectContextError) -> [any IncrementalStore] {
        try request.validate(for: model)
        let stores = persistentStoreCoordinator.stores(holding: request.entityName)
        guard !stores.isEmpty else {
            throw ManagedObjectContextError(.noStore, message: "no store of the coordinator holds the entity \(request.entityName)")
        }
        return stores
    }

    private func family(_ request: FetchRequest) -> Set<String> {
        request.includesSubentities ? Set(model.entityAndDescendants(of: request.entityName)) : [request.entityName]
    }

    private func needsPendingChanges(_ request: FetchRequest) -> Bool {
        // A context with no unsaved change (most reads) answers before it makes the set of fetched entity names.
        guard request.includesPendingChanges, !insertedInOrder.isEmpty || !deletedIDs.isEmpty || !changedIDs.isEmpty else { return false }
        let family = family(request)
        return insertedInOrder.contains { family.contains($0.entityName) } || deletedIDs.contains { family.contains($0.entityName) }
            || changedIDs.contains { family.contains($0.entityName) && registered[$0]?.isUpdated == true }
    }

    /// The IDs of the objects matching `request`, in its order. With `loadingValues`, a store that can hands over
    /// the matched rows with them (the rows it read to match), and the objects take their values from those: each
    /// row is read once.
    func matchingObjectIDs(_ request: FetchRequest, loadingValues: Bool = false) throws -> [ManagedObjectID] {
        try matches(request, loadingValues: loadingValues).ids
    }

    /// What a fetch matched: IDs, or the objects themselves when the store handed their rows over (and the objects
    /// took them).
    enum Matches {
        case ids([ManagedObjectID])
        case loaded([ManagedObject])

        var ids: [ManagedObjectID] {
            switch self {
            case .ids(let ids): ids
            case .loaded(let objects): objects.map(\.objectID)
            }
        }
    }

    /// See ``matchingObjectIDs(_:loadingValues:)``. With `asFaults`, the store is asked for faults (objects with
    /// their property values, as faults), not bare IDs: a store may then keep rows it read anyway for when they fire.
    private func matches(_ request: FetchRequest, loadingValues: Bool, asFaults: Bool = false) throws -> Matches {
        let stores = try storesFor(request)
        var storeRequest = request
        storeRequest.resultType = .managedObjectID
        let pending = needsPendingChanges(request)
        if parent == nil && stores.count == 1 && !pending {
            if loadingValues {
                storeRequest.resultType = .managedObject
                storeRequest.returnsObjectsAsFaults = false
            } else if asFaults {
                // The request already asks for faults with their property values.
                storeRequest.resultType = .managedObject
            }
            let epoch = persistentStoreCoordinator.cacheEpochNow
            let generation = persistentStoreCoordinator.rowGenerationNow
            return try matches(from: persistentStoreCoordinator.execute(storeRequest, on: stores[0]), readIn: epoch, generation: generation)
        }
        // Several stores, unsaved changes to merge, or a parent context: every match comes back, the window is
        // applied here.
        storeRequest.fetchLimit = 0
        storeRequest.fetchOffset = 0
        var result: [ManagedObjectID] = []
        if let parent {
            result = try parent.matchingObjectIDs(storeRequest.with { $0.includesPendingChanges = true })
        } else {
            for store in stores {
                let epoch = persistentStoreCoordinator.cacheEpochNow
                let generation = persistentStoreCoordinator.rowGenerationNow
                result += try matches(from: persistentStoreCoordinator.execute(storeRequest, on: store), readIn: epoch, generation: generation).ids
            }
        }
        var candidates = objects(with: result)
        if pending {
            let family = family(request)
            let deleted = Set(deletedIDs)
            candidates.removeAll { deleted.contains($0.objectID) }
            var kept: [ManagedObject] = []
            var seen = Set<ManagedObjectID>()
            for object in candidates {
                seen.insert(object.objectID)
                if object.isUpdated, let predicate = request.predicate, try !predicate.evaluate(with: object) { continue }
                kept.append(object)
            }
            candidates = kept
            let extra = (insertedInOrder + changedIDs.sortedByID().compactMap { registered[$0] })
                .filter { family.contains($0.entityName) && ($0.isInserted || $0.isUpdated) }
            for object in extra where seen.insert(object.objectID).inserted {
                if try request.predicate?.evaluate(with: object) ?? true { candidates.append(object) }
            }
        }
        if !request.sortDescriptors.isEmpty && (pending || stores.count > 1 || parent != nil) {
            candidates = FetchSortDescriptor.sorted(candidates, using: request.sortDescriptors, prefix: request.windowEnd)
        }
        return .ids(Array(request.window(candidates.map(\.objectID))))
    }

    /// Turns fetched objects that show a row the store no longer holds back into faults, so they show the row the
    /// fetch matched (Core Data's rule that a fetch refreshes what it returns): objects with values loaded, no
    /// unsaved changes, and a version other than the current row's — the coordinator's cached row, which
    /// ``PersistentStoreCoordinator`` drops when another process changes it, or for a store whose rows are not
    /// cached the row read again. Faults need nothing: they load the current row.
    ///
    /// Objects whose row was read (or last found current) in the coordinator's current row generation are skipped:
    /// no save has happened since, here or (as the fetch's catch-up found) elsewhere. The others found current take
    /// the generation read before the check.
    private func refreshStale(_ objects: [ManagedObject]) {
        let generation = persistentStoreCoordinator.rowGenerationNow
        let loaded = objects.filter { !$0.isFaultStorage && $0.showsCommittedValues && $0.readGeneration != generation }
        guard !loaded.isEmpty else { return }
        for (object, version) in zip(loaded, persistentStoreCoordinator.currentVersions(of: loaded.map(\.objectID))) {
            if version == object.version {
                object.readGeneration = generation
            } else {
                turnIntoFault(object)
            }
        }
    }

    /// What a store answered with; rows it handed over go into their objects and, for objects that now hold rows,
    /// into the coordinator's cache (read in `epoch`), so other contexts' faults find them.
    /// `generation` is the coordinator's row generation read before the store was asked.
    private func matches(from result: PersistentStoreResult, readIn epoch: UInt64, generation: UInt64) throws(ManagedObjectContextError) -> Matches {
        switch result {
        case .objectIDs(let ids):
            return .ids(ids)
        case .nodes(let nodes):
            // The objects made (or found) together, and those that take their rows registered in one call.
            let objects = objects(with: nodes.map(\.objectID))
            var takesRow = [Bool](repeating: false, count: nodes.count)
            var holders: [ManagedObject] = []
            holders.reserveCapacity(nodes.count)
            for (index, object) in objects.enumerated() {
                if object.isFaultStorage ? !object.hasChanges : object.showsCommittedValues && object.version != nodes[index].version {
                    takesRow[index] = true
                    holders.append(object)
                }
            }
            holdRows(of: holders)
            for (index, object) in objects.enumerated() where takesRow[index] {
                apply(nodes[index], to: object, readGeneration: generation)
                object.awakeFromFetch()
            }
            persistentStoreCoordinator.cache(nodes, readIn: epoch)
            return .loaded(objects)
        case .count, .versions, .empty:
            throw ManagedObjectContextError(.unsupportedRequest, message: "the store answered a fetch without objects")
        }
    }
}

extension ManagedObject: PredicateArgument {
    /// The object itself, compared by object ID.
    public var predicateValue: PredicateValue { .object(PredicateObject(self)) }
}

extension ManagedObjectID: PredicateArgument, KeyValueReadable {
    /// The ID as an object value: equal to the object it identifies in a predicate.
    public var predicateValue: PredicateValue { .object(PredicateObject(self)) }

    /// An ID has no keys: every key is NULL.
    public func predicateValue(forKey key: String) -> PredicateValue { .null }

    /// The ID itself.
    public var predicateIdentity: AnyHashable? { self }
}
