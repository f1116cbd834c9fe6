import Foundation

extension ManagedObjectContext {
    /// Saves every change to the stores.
    ///
    /// In order: delete rules are applied (cascade, nullify; deny is checked), every changed object is validated —
    /// the model's rules (required values, ranges, lengths, patterns, relationship counts, deny rules), then the
    /// subclasses' `validateFor…` hooks — and all failures are reported together; inserted objects get permanent
    /// IDs; each store receives one ``SaveChangesRequest``. Conflicts with changes saved elsewhere meanwhile are
    /// resolved by ``mergePolicy`` or reported.
    ///
    /// On any failure the context is left exactly as it was and no store has written anything of the failed request.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/validation`` (with every
    ///   failure), ``ManagedObjectContextError/Code/mergeConflict`` (with the conflicts), or a store's error.
    public func save() throws {
        guard hasChanges else { return }
        let backup = Backup(self)
        let saved: ContextChanges
        do {
            processPendingChanges()
            try validatePendingChanges()
            if let parent {
                saved = pushToParent(parent)
            } else {
                saved = try saveToStores()
            }
        } catch {
            backup.restore(into: self)
            throw error
        }
        post(.didSave(saved))
        if parent == nil { persistentStoreCoordinator.broadcast(saved, from: self) }
    }

    /// Applies delete rules to the objects marked for deletion: cascades delete the related objects (and theirs),
    /// nullify rules take the deleted objects out of the related objects' inverse relationships.
    public func processPendingChanges() {
        defer { postPendingChanges() }
        var index = 0
        while index < deletedIDs.count {
            guard let object = registered[deletedIDs[index]] else { index += 1; continue }
            index += 1
            for slot in object.handle.relationshipSlots {
                let relationship = slot.relationship!
                guard relationship.deleteRule == .cascade || relationship.deleteRule == .nullify else { continue }
                let related = slot.kind == .toMany ? object.relatedIDs(slot) : object.toOneID(slot).map { [$0] } ?? []
                switch relationship.deleteRule {
                case .cascade:
                    for id in related {
                        let target = self.object(with: id)
                        if target.lifecycle != .deleted { delete(target) }
                    }
                case .nullify:
                    guard slot.inverseIndex >= 0 else { continue }
                    for id in related {
                        let target = self.object(with: id)
                        if target.lifecycle != .deleted { target.unlink(object, fromInverseOf: slot) }
                    }
                case .deny, .noAction:
                    break
                }
            }
        }
    }

    // MARK: - Validation

    func validatePendingChanges() throws(ManagedObjectContextError) {
        var failures: [ValidationFailure] = []
        let deleted = Set(deletedIDs)
        // Inserted objects are never in `changedIDs` (they are saved whole): each object is validated once.
        for object in insertedInOrder + changedIDs.sortedByID().compactMap({ registered[$0] }) {
            guard !deleted.contains(object.objectID), object.isInserted || object.isUpdated else { continue }
            failures += modelFailures(object)
            do {
                if object.isInserted { try object.validateForInsert() } else { try object.validateForUpdate() }
            } catch {
                failures.append(Self.failure(from: error, object))
            }
        }
        for id in deletedIDs {
            guard let object = registered[id] else { continue }
            for slot in object.handle.relationshipSlots where slot.relationship!.deleteRule == .deny {
                let relationship = slot.relationship!
                let related = (slot.kind == .toMany ? object.relatedIDs(slot) : object.toOneID(slot).map { [$0] } ?? [])
                    .filter { !deleted.contains($0) }
                if !related.isEmpty {
                    failures.append(ValidationFailure(objectID: id, entityName: object.entityName, propertyName: relationship.name,
                        message: "cannot be deleted while \(relationship.name) holds \(related.count) object\(related.count == 1 ? "" : "s") (delete rule deny)"))
                }
            }
            do { try object.validateForDelete() } catch { failures.append(Self.failure(from: error, object)) }
        }
        guard failures.isEmpty else {
            throw ManagedObjectContextError(.validation, message: "\(failures.count) validation failure\(failures.count == 1 ? "" : "s") stopped the save",
                                            validationFailures: failures)
        }
    }

    private static func failure(from error: any Error, _ object: ManagedObject) -> ValidationFailure {
        if let failure = error as? ValidationFailure { return failure }
        return ValidationFailure(objectID: object.objectID, entityName: object.entityName, propertyName: nil, message: "\(error)")
    }

    /// The model's rules an object breaks.
    func modelFailures(_ object: ManagedObject) -> [ValidationFailure] {
        var failures: [ValidationFailure] = []
        func fail(_ property: String, _ message: String) {
            failures.append(ValidationFailure(objectID: object.objectID, entityName: object.entityName, propertyName: property, message: message))
        }
        if object.isNeverLoaded {
            // Changed only by recorded to-many members: the values it holds were checked when they were saved, and
            // its store checks that the objects named exist, so only count rules on the changed relationships are
            // left; a bulk insert into 100 departments loads none of them.
            for slot in object.handle.relationshipSlots where slot.kind == .toMany && slot.hasRules && object.changedSlots.contains(slot.index) {
                countFailures(object, slot, fail)
            }
            return failures
        }
        object.willAccessValues()
        if let error = object.faultError {
            // Its values never loaded: its rules say nothing. The object itself is the problem.
            return [ValidationFailure(objectID: object.objectID, entityName: object.entityName, propertyName: nil,
                                      message: "is not in its store (deleted, or its ID names no object), yet a change refers to it: \(error.message)")]
        }
        for slot in object.handle.persistentSlots {
            switch slot.kind {
            case .attribute:
                guard slot.hasRules else {
                    // Only whether it is there matters: a value the object reads from its row is not decoded.
                    if !slot.isOptional && !object.holdsAttributeValue(slot) { fail(slot.name, "a value is required") }
                    continue
                }
                guard let value = object.attributeValue(slot) else {
                    if !slot.isOptional { fail(slot.name, "a value is required") }
                    continue
                }
                slot.ruleFailures(of: value) { fail(slot.name, $0) }
            case .toMany:
                guard slot.hasRules else { continue }
                countFailures(object, slot, fail)
            case .toOne:
                if let target = object.toOneID(slot) {
                    if let missing = registered[target]?.faultError, missing.code == .objectNotFound {
                        fail(slot.name, "points at \(target), which is not in its store")
                    }
                } else if !slot.isOptional {
                    fail(slot.name, "an object is required")
                }
            case .fetched:
                break
            }
        }
        return failures
    }

    /// The minimum and maximum count rules of the to-many in `slot` that `object` breaks.
    private func countFailures(_ object: ManagedObject, _ slot: ManagedObjectModel.Slot, _ fail: (String, String) -> Void) {
        let relationship = slot.relationship!
        let count = object.relatedIDs(slot).count
        if count == 0 && relationship.isOptional { return }
        if relationship.minimumCount > 0 && count < relationship.minimumCount {
            fail(relationship.name, "holds \(count) objects, fewer than the minimum \(relationship.minimumCount)")
        }
        if relationship.maximumCount > 0 && count > relationship.maximumCount {
            fail(relationship.name, "holds \(count) objects, more than the maximum \(relationship.maximumCount)")
        }
    }

    // MARK: - Writing

    private func saveToStores() throws -> ContextChanges {
        // Permanent IDs first; they are given to the objects only once the stores have saved. Objects are sent to
        // their store in insertion order, so keys follow the order objects were inserted in.
        let inserted = insertedInOrder.filter(\.objectID.isTemporaryID)
        let assignments = try permanentIDs(for: inserted)
        var attempts = 0
        var versions: [ManagedObjectID: Int64]
        while true {
            attempts += 1
            do {
                versions = try sendRequests(assignments.byTemporaryID)
                break
            } catch var error as ManagedObjectContextError where error.code == .mergeConflict {
                // The store knows what it holds; the context adds what it had read.
                for index in error.conflicts.indices {
                    guard let object = registered[error.conflicts[index].objectID], let committed = object.committed else { continue }
                    error.conflicts[index].cachedSnapshot = IncrementalStoreNode(objectID: object.objectID, entity: object.handle, attributes: committed.attributes,
                                                                                 toOne: committed.toOne, version: committed.version)
                }
                guard mergePolicy != .error && attempts < 4 else { throw error }
                try resolve(error)
            }
        }
        reassignIDs(assignments, allRegistered: true)
        let saved = ContextChanges(inserted: Set(insertedInOrder.map(\.objectID)),
                                   updated: Set(changedIDs.filter { registered[$0]?.isUpdated == true }),
                                   deleted: Set(deletedIDs))
        finishSave(versions: versions)
        return saved
    }

    /// Sends each store its changes; returns the versions the stores reported for inserted and updated objects, by
    /// permanent ID, and the unchanged version of each object that was not sent (``finishSave(versions:)`` takes
    /// insert = 1, update = +1 for the others).
    private func sendRequests(_ assignments: [ManagedObjectID: ManagedObjectID]) throws -> [ManagedObjectID: Int64] {
        func map(_ id: ManagedObjectID) -> ManagedObjectID { id.isTemporaryID ? assignments[id] ?? id : id }
        // One request per store, found by comparing the store's identifier with the last one used (almost every save
        // goes to one store) rather than by hashing it per object.
        var requests: [(store: String, request: SaveChangesRequest)] = []
        func request(for id: ManagedObjectID) -> Int {
            let store = id.storeIdentifier!
            if let last = requests.indices.last, requests[last].store == store { return last }
            if let found = requests.firstIndex(where: { $0.store == store }) { return found }
            requests.append((store, SaveChangesRequest()))
            return requests.count - 1
        }
        var versions: [ManagedObjectID: Int64] = [:]
        let deleted = Set(deletedIDs)
        for object in insertedInOrder {
            let change = changeDescription(object, map: map, allToMany: true, expectedVersion: nil)
            requests[request(for: change.objectID)].request.insertedObjects.append(change)
        }
        for id in changedIDs.sortedByID() {
            guard let object = registered[id], object.isUpdated, !deleted.contains(id) else { continue }
            guard changesStoredState(object) else {
                // Only relationships its store derives from their inverses changed: the inverses' rows carry the
                // change, this object's row stays as it is (and so does its version).
                versions[id] = object.version
                continue
            }
            // Never loaded: its values stay as stored and its version is the store's to report.
            let change = changeDescription(object, map: map, allToMany: false, expectedVersion: object.isNeverLoaded ? nil : object.version)
            requests[request(for: id)].request.updatedObjects.append(change)
        }
        for id in deletedIDs {
            guard let object = registered[id] else { continue }
            requests[request(for: id)].request.deletedObjects.append(ObjectChange(objectID: id, expectedVersion: object.version))
        }
        for (storeIdentifier, request) in requests.sorted(by: { $0.store < $1.store }) {
            guard let store = persistentStoreCoordinator.persistentStore(withIdentifier: storeIdentifier) as? any IncrementalStore else {
                throw ManagedObjectContextError(.noStore, message: "the store \(storeIdentifier) is no longer part of the coordinator")
            }
            if case .versions(let stored) = try persistentStoreCoordinator.execute(request, on: store) {
                versions.merge(stored) { _, told in told }
            }
        }
        return versions
    }

    /// Whether a save must send `object`'s changes to its store: some changed key is not a to-many relationship the
    /// store derives from its inverse.
    private func changesStoredState(_ object: ManagedObject) -> Bool {
        for index in object.changedSlots {
            let slot = object.handle.slots[index]
            guard slot.kind == .toMany, storeDerives(slot, of: object) else { return true }
        }
        return false
    }

    private func changeDescription(_ object: ManagedObject, map: (ManagedObjectID) -> ManagedObjectID, allToMany: Bool,
                                   expectedVersion: Int64?) -> ObjectChange {
        let handle = object.handle
        // To-manys in the entity's to-many positions, each array made only when something of its kind is given.
        var members = ContiguousArray<[ManagedObjectID]?>(), changes = ContiguousArray<ToManyChange?>()
        for slot in handle.relationshipSlots where slot.kind == .toMany {
            if object.loadedMembers(slot) == nil, let pending = object.pendingMembers(slot) {
                // Recorded without loading: a derived relationship is not sent; others go as added/removed members.
                if !storeDerives(slot, of: object) {
                    if changes.isEmpty { changes = handle.newToManyChanges() }
                    changes[slot.position] = ToManyChange(added: pending.added.map(map), removed: pending.removed.sorted().map(map))
                }
                continue
            }
            if allToMany || object.changedSlots.contains(slot.index) {
                // A relationship the store derives from its inverse is carried by the inverse's rows.
                if !allToMany && storeDerives(slot, of: object) { continue }
                let ids = object.relatedIDs(slot)
                if !allToMany, let read = object.committedMembers(slot), storeTakesChanges(slot, of: object) {
                    // Loaded and changed, in a store that takes changes as deltas: the members added and removed
                    // since they were read or saved. Members another context linked meanwhile stay, and each side of
                    // a many-to-many gets the same change as its inverse (a whole list written over the stored one
                    // would drop a link from this side only); the store need not read the stored members either.
                    if changes.isEmpty { changes = handle.newToManyChanges() }
                    changes[slot.position] = ToManyChange.between(read, ids, map: map)
                    continue
                }
                if members.isEmpty { members = handle.newToMany() }
                // Shared as it is unless a member has just been given its permanent ID (a new array per to-many
                // otherwise, retaining every ID again).
                members[slot.position] = ids.contains(where: { map($0) != $0 }) ? ids.map(map) : ids
            }
        }
        let relationships = ToManyValues.slots(handle, members: members, changes: changes)
        if !allToMany, object.isNeverLoaded || (members.isEmpty && !object.changedSlots.contains(where: { handle.slots[$0].kind != .toMany })) {
            // Never loaded, or only members added and removed: the attributes and to-ones stay as stored, so they are
            // neither sent nor decoded from a row the object still reads. A loaded object's version is still checked.
            var change = ObjectChange(objectID: map(object.objectID), entity: handle, attributes: handle.emptyAttributes, toOne: handle.emptyToOne,
                                      relationships: relationships, expectedVersion: expectedVersion)
            change.keepsStoredValues = true
            return change
        }
        // The object's arrays are what the store keeps (transient values cleared, if the entity has any): shared, not
        // copied — to-ones only rebuilt when one points at an object that has just been given its permanent ID.
        var toOne = handle.persistentToOne(object.toOne)
        if toOne.contains(where: { $0.map { map($0) != $0 } ?? false }) { for position in toOne.indices { toOne[position] = toOne[position].map(map) } }
        return ObjectChange(objectID: map(object.objectID), entity: handle, attributes: handle.persistentAttributes(object.attributes),
                            toOne: toOne, relationships: relationships, expectedVersion: expectedVersion)
    }

    /// Makes every saved object clean, with its saved values as its snapshot.
    private func finishSave(versions: [ManagedObjectID: Int64]) {
        for id in deletedIDs {
            guard let object = registered[id] else { continue }
            forget(object)
            persistentStoreCoordinator.updateCache(id, node: nil)
            object.managedObjectContext = nil
        }
        for object in insertedInOrder + changedIDs.compactMap({ registered[$0] }).filter({ $0.lifecycle != .inserted }) {
            guard object.lifecycle != .deleted, object.lifecycle == .inserted || !object.changedSlots.isEmpty else { continue }
            let neverLoaded = object.isNeverLoaded
            object.version = versions[object.objectID] ?? (object.lifecycle == .inserted ? 1 : object.version + 1)
            object.lifecycle = .clean
            object.changedSlots.removeAll()
            object.extras?.pendingToMany.removeAll()
            // Never loaded (only members recorded as deltas changed): its row and any cached copy of it are as they
            // were, and it stays a fault.
            if neverLoaded { continue }
            if object.row != nil {
                // Still reading the row it loaded (no attribute or to-one was set): its values are as stored, and so is
                // any cached copy of its row; only the committed members of its to-manys move on.
                object.committedStorage = ManagedObject.Snapshot(attributes: [], toOne: [], toMany: object.toMany, version: object.version)
                continue
            }
            let handle = object.handle
            let attributes = handle.persistentAttributes(object.attributes), toOne = handle.persistentToOne(object.toOne)
            object.committed = ManagedObject.Snapshot(attributes: attributes, toOne: toOne, toMany: object.toMany, version: object.version)
            persistentStoreCoordinator.updateCache(object.objectID,
                node: IncrementalStoreNode(objectID: object.objectID, entity: handle, attributes: attributes, toOne: toOne, version: object.version))
        }
        insertedInOrder.removeAll()
        deletedIDs.removeAll()
        changedIDs.removeAll()
    }

    // MARK: - Conflicts

    private func resolve(_ error: ManagedObjectContextError) throws {
        for conflict in error.conflicts {
            guard let object = registered[conflict.objectID] else { continue }
            guard let persisted = conflict.persistedSnapshot else {
                guard mergePolicy == .rollback else { throw error }
                // Deleted in the store: the context's changes to it are dropped.
                deletedIDs.removeAll { $0 == object.objectID }
                object.lifecycle = .deleted
                forget(object)
                continue
            }
            let committed = object.committed
            let stored = persisted.values.slots(of: object.handle)
            switch mergePolicy {
            case .error:
                throw error
            case .overwrite:
                break
            case .rollback:
                deletedIDs.removeAll { $0 == object.objectID }
                changedIDs.remove(object.objectID)
                object.lifecycle = .clean
                object.changedSlots.removeAll()
                apply(persisted, to: object)
                object.toMany = []
                object.committed?.toMany = []
            case .mergeByPropertyObjectTrump, .mergeByPropertyStoreTrump:
                let storeTrumps = mergePolicy == .mergeByPropertyStoreTrump
                for slot in object.handle.persistentSlots {
                    let storeChanged: Bool
                    switch slot.kind {
                    case .attribute where slot.position >= 0:
                        storeChanged = stored.attributes[slot: slot.position] != committed?.attributes[slot: slot.position]
                    case .toOne: storeChanged = stored.toOne[slot: slot.position] != committed?.toOne[slot: slot.position]
                    default: continue
                    }
                    let locallyChanged = object.changedSlots.contains(slot.index)
                    guard !locallyChanged || (storeTrumps && storeChanged) else { continue }
                    if slot.kind == .attribute {
                        object.setAttributeValue(stored.attributes[slot: slot.position], slot)
                    } else {
                        object.setToOneID(stored.toOne[slot: slot.position], slot)
                    }
                    object.changedSlots.remove(slot.index)
                }
                // Nothing of mine is left to write: the object is now simply up to date.
                if object.changedSlots.isEmpty && object.lifecycle == .clean { changedIDs.remove(object.objectID) }
            }
            object.version = persisted.version
            object.committed = ManagedObject.Snapshot(attributes: stored.attributes, toOne: stored.toOne,
                                                      toMany: committed?.toMany ?? [], version: persisted.version)
        }
        changedIDs = changedIDs.filter { registered[$0] != nil }
    }
}

/// Everything a save may change in a context, so that a failed save can put it back.
struct Backup {
    struct ObjectState {
        let object: ManagedObject
        let objectID: ManagedObjectID
        let lifecycle: ManagedObject.Lifecycle
        let isFault: Bool
        let row: SharedRow?
        let rowKept: (value: AttributeValue?, index: Int)
        let attributes: AttributeSlots
        let toOne: ToOneSlots
        let toMany: ToManySlots
        let pendingToMany: PendingToManySlots
        let committed: ManagedObject.Snapshot?
        let changedSlots: SlotSet
        let version: Int64
        let context: ManagedObjectContext?
    }

    let objects: [ObjectState]
    let inserted: [ManagedObject]
    let deleted: [ManagedObjectID]
    let changed: Set<ManagedObjectID>

    /// Records what a save may change. Without pending deletions a save changes only the objects it writes
    /// (inserted and changed ones; a conflict's resolution touches only those too), so only they are recorded — a
    /// context holding 100 000 fetched objects that saves one change copies one object's state, not 100 000.
    /// Deletions run delete rules, which may change any related object: then every registered object is recorded.
    ///
    /// An inserted object changes only once every store has saved (its permanent ID, its snapshot), after anything
    /// that can fail — unless code of the app runs first and changes it: a subclass's `validateForInsert()` or an
    /// observer of the changes the save posts. So inserted objects are recorded only when the context has observers
    /// or the object is of a subclass; the others are registered again, as they are, if the save fails. A bulk
    /// insert of plain objects records nothing of them.
    init(_ context: ManagedObjectContext) {
        let saved: [ManagedObject]
        if context.deletedIDs.isEmpty {
            let changed = context.changedIDs.compactMap { context.registered[$0] }
            if context.hasObservers {
                saved = context.insertedInOrder + changed
            } else {
                saved = context.insertedInOrder.filter { type(of: $0) != ManagedObject.self } + changed
            }
        } else {
            saved = Array(context.registered.values)
        }
        objects = saved.map {
            // The storage as it is: an object reading its row keeps reading it (recording it decodes nothing).
            ObjectState(object: $0, objectID: $0.objectID, lifecycle: $0.lifecycle, isFault: $0.isFaultStorage, row: $0.row, rowKept: ($0.rowKept, $0.rowKeptIndex),
                        attributes: $0.attributeStorage, toOne: $0.toOneStorage, toMany: $0.toMany, pendingToMany: $0.pendingToMany,
                        committed: $0.committedStorage, changedSlots: $0.changedSlots, version: $0.version, context: $0.managedObjectContext)
        }
        inserted = context.insertedInOrder
        deleted = context.deletedIDs
        changed = context.changedIDs
    }

    func restore(into context: ManagedObjectContext) {
        var registered = ObjectRegistry()
        for state in objects {
            let object = state.object
            object.objectID = state.objectID
            object.lifecycle = state.lifecycle
            object.isFaultStorage = state.isFault
            object.row = state.row
            (object.rowKept, object.rowKeptIndex) = state.rowKept
            object.attributeStorage = state.attributes
            object.toOneStorage = state.toOne
            object.toMany = state.toMany
            if !state.pendingToMany.isEmpty || object.extras != nil { object.pendingToMany = state.pendingToMany }
            object.committedStorage = state.committed
            object.changedSlots = state.changedSlots
            object.version = state.version
            object.managedObjectContext = state.context
            registered[state.objectID] = object
        }
        // Clean objects the backup did not record (it records only what the save could change), and objects first
        // faulted in during the failed save, stay registered as they are.
        for (id, object) in context.registered where registered[id] == nil && !id.isTemporaryID && object.lifecycle == .clean {
            registered[id] = object
        }
        // Inserted objects left unrecorded: the failed save changed nothing of them.
        for object in inserted where registered[object.objectID] == nil {
            registered[object.objectID] = object
        }
        context.registered = registered
        context.insertedInOrder = inserted
        context.deletedIDs = deleted
        context.changedIDs = changed
    }
}
