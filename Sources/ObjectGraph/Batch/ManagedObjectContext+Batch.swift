import Foundation

/// What a context does with a batch request whose store cannot run it.
public enum BatchFallback: Sendable, Hashable {
    /// Fail with ``ManagedObjectContextError/Code/unsupportedRequest`` (Core Data's behaviour).
    case fail
    /// Run the request through managed objects in a context of its own — fetched, changed or inserted, saved — with
    /// the same checks and results, at a save's speed and, for a request that commits at once, a save's memory.
    case throughObjects
}

extension ManagedObjectContext {
    /// Inserts a batch of rows straight into the store that holds the request's entity (the first, when several
    /// do), without managed objects; this context's objects are left as they are.
    ///
    /// - Parameter fallback: What to do when the store cannot run batch inserts (``BatchInsertingStore``), or
    ///   refuses a row it cannot write without objects (a relationship it keeps in other rows): with
    ///   ``BatchFallback/throughObjects``, the rows it has not committed then go through objects — rows from an
    ///   array; a handler's, read once, cannot.
    /// - Returns: What was inserted; ``BatchResult/isComplete`` is `false` when the progress handler stopped it.
    /// - Throws: ``ManagedObjectContextError`` naming the first bad row (see ``BatchInsertRequest``), or
    ///   ``ManagedObjectContextError/Code/unsupportedRequest`` when the store cannot run it and `fallback` is
    ///   ``BatchFallback/fail``.
    public func execute(_ request: BatchInsertRequest, fallback: BatchFallback = .fail) throws -> BatchResult {
        let rows = try BatchInsertRows(rowsFromObjects(request), model: model)
        guard let store = persistentStoreCoordinator.stores(holding: request.entityName).first else {
            throw ManagedObjectContextError(.noStore, message: "no store of the coordinator holds the entity \(request.entityName)")
        }
        return try persistentStoreCoordinator.runningBatch(on: store) {
            do {
                if let batching = store as? any BatchInsertingStore {
                    do {
                        try batching.executeBatchInsert(rows)
                    } catch let refusal as ManagedObjectContextError where refusal.code == .unsupportedRequest && fallback == .throughObjects {
                        // The store cannot write what a row gives (a relationship it keeps in other rows): the rows
                        // it has not committed go through objects, when they can be read again.
                        guard rows.rewindToCommitted() else {
                            throw ManagedObjectContextError(.unsupportedRequest, message: "\(refusal.message); the rows a handler made cannot be read again to go through objects: give them as an array")
                        }
                        try insertThroughObjects(rows)
                    }
                } else {
                    try Self.check(fallback, store, "batch inserts")
                    try insertThroughObjects(rows)
                }
            } catch is BatchInsertRows.Stopped {}
            return rows.result
        }
    }

    /// Changes attributes of the objects a predicate matches, in every store that holds the request's entity,
    /// without managed objects; this context's objects keep the values they hold until they are merged or
    /// refreshed.
    ///
    /// - Parameter fallback: What to do when a store cannot run batch updates (``BatchUpdatingStore``).
    /// - Throws: ``ManagedObjectContextError`` naming an object and attribute whose new value breaks a rule (nothing
    ///   is changed then), or ``ManagedObjectContextError/Code/unsupportedRequest``.
    public func execute(_ request: BatchUpdateRequest, fallback: BatchFallback = .fail) throws -> BatchResult {
        // The entity and attributes are checked before any store is asked.
        let values = try BatchUpdateValues(request, model: model)
        var results: [BatchResult] = []
        for store in persistentStoreCoordinator.stores(holding: request.entityName) {
            results.append(try persistentStoreCoordinator.runningBatch(on: store) {
                if let batching = store as? any BatchUpdatingStore { return try batching.executeBatchUpdate(request) }
                try Self.check(fallback, store, "batch updates")
                return try updateThroughObjects(request, values, in: store)
            })
        }
        return Self.combine(results, request.resultType)
    }

    /// Deletes objects straight from their stores, honouring delete rules, without managed objects; objects of this
    /// context that are deleted stay registered until the context merges the result.
    ///
    /// - Parameter fallback: What to do when a store cannot run batch deletes (``BatchDeletingStore``).
    /// - Throws: ``ManagedObjectContextError`` naming an object a deny rule keeps (nothing is deleted then), or
    ///   ``ManagedObjectContextError/Code/unsupportedRequest``.
    public func execute(_ request: BatchDeleteRequest, fallback: BatchFallback = .fail) throws -> BatchResult {
        var work: [(store: any IncrementalStore, request: BatchDeleteRequest)] = []
        if let fetch = request.fetchRequest {
            try fetch.validate(for: model)
            work = persistentStoreCoordinator.stores(holding: fetch.entityName).map { ($0, request) }
        } else {
            var byStore: [String: [ManagedObjectID]] = [:]
            var order: [any IncrementalStore] = []
            for id in request.objectIDs ?? [] where !id.isTemporaryID {
                let store = try persistentStoreCoordinator.incrementalStore(for: id)
                if byStore[store.identifier] == nil { order.append(store) }
                byStore[store.identifier, default: []].append(id)
            }
            work = order.map { store in
                var part = BatchDeleteRequest(objectIDs: byStore[store.identifier]!)
                part.resultType = request.resultType
                return (store, part)
            }
        }
        var results: [BatchResult] = []
        for (store, part) in work {
            results.append(try persistentStoreCoordinator.runningBatch(on: store) {
                if let batching = store as? any BatchDeletingStore { return try batching.executeBatchDelete(part) }
                try Self.check(fallback, store, "batch deletes")
                return try deleteThroughObjects(part)
            })
        }
        return Self.combine(results, request.resultType)
    }

    /// Brings contexts up to date with changes made in their stores outside them — by a batch request, say (Core
    /// Data's `mergeChanges(fromRemoteContextSave:into:)`): each context refreshes the objects it holds that were
    /// updated and lets go of those deleted, and tells its observers.
    public static func mergeChanges(fromRemoteContextSave changes: ContextChanges, into contexts: [ManagedObjectContext]) {
        for context in contexts { context.mergeChanges(fromContextDidSave: changes) }
    }

    /// `request` with an object handler turned into a row handler: each row's object is made in a context of the
    /// request's own, its stored values read into a row, and the context reset.
    private func rowsFromObjects(_ request: BatchInsertRequest) -> BatchInsertRequest {
        guard case .objectHandler(let handler) = request.source else { return request }
        let scratch = ManagedObjectContext(coordinator: persistentStoreCoordinator)
        let entityName = request.entityName
        var rows = request
        var position = 0
        rows.source = .throwingHandler { row in
            defer {
                scratch.reset()
                position += 1
            }
            let object = try scratch.insertNewObject(forEntityName: entityName)
            if handler(object) { return true }
            func savedID(_ id: ManagedObjectID, of slot: ManagedObjectModel.Slot) throws -> ManagedObjectID {
                guard !id.isTemporaryID else {
                    throw ManagedObjectContextError(.objectNotFound,
                        message: "row \(position) of the batch insert into \(entityName): \(slot.name) is given a new, unsaved object; a row can point only at saved objects")
                }
                return id
            }
            for slot in object.handle.persistentSlots {
                switch slot.kind {
                case .attribute:
                    row[slot.name] = BatchValue(object.attributeValue(slot))
                case .toOne:
                    guard let id = object.toOneID(slot) else { continue }
                    row[slot.name] = .object(try savedID(id, of: slot))
                case .toMany:
                    let ids = object.relatedIDs(slot)
                    if !ids.isEmpty { row[slot.name] = .objects(try ids.map { try savedID($0, of: slot) }) }
                case .fetched:
                    break
                }
            }
            return false
        }
        return rows
    }

    // MARK: - Through objects

    private static func check(_ fallback: BatchFallback, _ store: any IncrementalStore, _ what: String) throws {
        guard fallback == .throughObjects else {
            throw ManagedObjectContextError(.unsupportedRequest,
                message: "the \(store.type) store \(store.identifier) does not run \(what); pass `fallback: .throughObjects` to run the request through managed objects")
        }
    }

    private static func combine(_ results: [BatchResult], _ type: BatchResultType) -> BatchResult {
        BatchResult(isComplete: results.allSatisfy(\.isComplete), count: results.reduce(0) { $0 + $1.count },
                    objectIDs: type == .objectIDs ? results.flatMap { $0.objectIDs ?? [] } : nil)
    }

    /// A batch insert as inserted objects, saved a chunk at a time or all at the end.
    private func insertThroughObjects(_ rows: BatchInsertRows) throws {
        var context = ManagedObjectContext(coordinator: persistentStoreCoordinator)
        var inserted: [ManagedObject] = []
        var found: [String: [AttributeValue: ManagedObjectID]] = [:]
        func resolve(_ target: BatchTarget, _ slot: ManagedObjectModel.Slot, row: Int) throws -> ManagedObject {
            switch target {
            case .object(let id):
                return context.object(with: id)
            case .uniqueValue(let value):
                if let id = found[slot.name]?[value] { return context.object(with: id) }
                let (destination, key) = try rows.uniqueKey(of: slot)
                guard let converted = value.converted(to: key.type) else {
                    throw rows.rowError(.wrongValueType, row, "\(rows.entityName).\(slot.name) is matched on \(destination.name).\(key.name), which is \(key.type.coreDataName), not \(value.kindName) \(value)")
                }
                var fetch = FetchRequest(entityName: destination.name, predicate: try FetchPredicate(format: "%K == %@", key.name, PredicateValue(converted)))
                fetch.resultType = .managedObjectID
                guard let id = try context.fetchObjectIDs(fetch).first else {
                    throw rows.rowError(.objectNotFound, row, "\(rows.entityName).\(slot.name) points at the \(destination.name) whose \(key.name) is \(converted), and there is none")
                }
                found[slot.name, default: [:]][value] = id
                return context.object(with: id)
            }
        }
        func save(_ chunk: ArraySlice<ManagedObject>, first: Int) throws {
            do {
                try context.save()
            } catch let error as ManagedObjectContextError {
                var wrapped = error
                wrapped.message = "rows \(first)..<\(first + chunk.count) of the batch insert into \(rows.entityName) could not be saved: \(error.message)"
                throw wrapped
            }
        }
        while let chunk = try rows.nextChunk() {
            let firstOfChunk = chunk[0].position
            let start = inserted.count
            for row in chunk {
                let object = try context.insertNewObject(forEntityName: rows.entityName)
                for slot in rows.entity.attributeSlots where slot.isPersistent { object.setAttribute(row.attribute(slot.position), in: slot) }
                for slot in rows.entity.toOneSlots where slot.isPersistent {
                    if let target = row.toOne(slot.position) { try object.setValue(try resolve(target, slot, row: row.position), in: slot) }
                }
                for slot in rows.entity.relationshipSlots where slot.kind == .toMany && slot.isPersistent {
                    if let members = row.toMany(slot.position) {
                        try object.setValue(try members.map { try resolve($0, slot, row: row.position) }, in: slot)
                    }
                }
                inserted.append(object)
            }
            if rows.commitsEachChunk {
                try save(inserted[start...], first: firstOfChunk)
                rows.didWrite(chunk.count, committed: true, objectIDs: inserted[start...].map(\.objectID))
                inserted.removeAll()
                context = ManagedObjectContext(coordinator: persistentStoreCoordinator)
            } else {
                rows.didWrite(chunk.count, committed: false)
            }
        }
        if !rows.commitsEachChunk {
            try save(inserted[...], first: 0)
            rows.didCommit(objectIDs: inserted.map(\.objectID))
        }
    }

    /// A batch update as fetched objects changed and saved together.
    private func updateThroughObjects(_ request: BatchUpdateRequest, _ values: BatchUpdateValues, in store: any IncrementalStore) throws -> BatchResult {
        let context = ManagedObjectContext(coordinator: persistentStoreCoordinator)
        var fetch = FetchRequest(entityName: request.entityName, predicate: request.predicate)
        fetch.includesSubentities = request.includesSubentities
        // The fetch asks every store holding the entity; this store's objects are kept.
        let objects = try context.fetch(fetch).filter { $0.objectID.storeIdentifier == store.identifier }
        // Every object's new values are worked out before any is set: each expression sees the values from before.
        let updates = try objects.map { try values.values(for: $0, objectID: $0.objectID) }
        for (object, new) in zip(objects, updates) {
            for (slot, value) in zip(values.slots, new) { object.setAttribute(value, in: object.handle.slot(named: slot.name)!) }
        }
        try context.save()
        return BatchResult(count: objects.count, objectIDs: request.resultType == .objectIDs ? objects.map(\.objectID) : nil)
    }

    /// A batch delete as objects fetched or looked up, deleted and saved together (the context applies delete rules).
    private func deleteThroughObjects(_ request: BatchDeleteRequest) throws -> BatchResult {
        let context = ManagedObjectContext(coordinator: persistentStoreCoordinator)
        var objects: [ManagedObject]
        if let fetch = request.fetchRequest {
            objects = try context.fetch(fetch)
        } else {
            objects = []
            for id in request.objectIDs ?? [] {
                guard let object = try? context.existingObject(with: id) else { continue }
                objects.append(object)
            }
        }
        for object in objects { context.delete(object) }
        // The objects named, then those their cascade rules delete with them.
        context.processPendingChanges()
        let ids = context.deletedIDs
        try context.save()
        return BatchResult(count: ids.count, objectIDs: request.resultType == .objectIDs ? ids : nil)
    }
}

extension PersistentStoreCoordinator {
    /// Runs a batch request on `store`: whatever it wrote — all, part or nothing — the rows this coordinator
    /// caches for the store are dropped afterwards and the row generation moves, so no context shows a row the
    /// batch changed as current.
    func runningBatch<Result>(on store: any IncrementalStore, _ body: () throws -> Result) rethrows -> Result {
        defer { dropCachedRows(of: store) }
        return try body()
    }
}
