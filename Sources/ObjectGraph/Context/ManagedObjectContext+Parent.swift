/// Where a context's faults come from: its parent context's current state, or the stores through the coordinator.
extension ManagedObjectContext {
    /// The state of an object as this context's children see it: its current values, unsaved changes included.
    func currentNode(for id: ManagedObjectID) throws -> IncrementalStoreNode {
        let object = registered[id] ?? self.object(with: id)
        object.willAccessValues()
        if let error = object.faultError { throw error }
        guard object.lifecycle != .deleted else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(id) is deleted in the parent context")
        }
        let handle = object.handle
        return IncrementalStoreNode(objectID: id, entity: handle, attributes: handle.persistentAttributes(object.attributes),
                                    toOne: handle.persistentToOne(object.toOne), version: object.version)
    }

    /// One object's values from this context's source.
    func sourceNode(for id: ManagedObjectID) throws -> IncrementalStoreNode {
        if let parent { return try parent.currentNode(for: id) }
        return try persistentStoreCoordinator.node(for: id)
    }

    /// Many objects' values from this context's source (missing ones left out).
    func sourceNodes(for ids: [ManagedObjectID]) throws -> [ManagedObjectID: IncrementalStoreNode] {
        guard let parent else { return try persistentStoreCoordinator.nodes(for: ids) }
        var nodes: [ManagedObjectID: IncrementalStoreNode] = [:]
        for id in ids { nodes[id] = try? parent.currentNode(for: id) }
        return nodes
    }

    /// A to-many relationship's members from this context's source.
    func sourceRelationship(_ relationship: RelationshipDescription, of id: ManagedObjectID) throws -> [ManagedObjectID] {
        if let parent {
            let object = parent.registered[id] ?? parent.object(with: id)
            return object.lifecycle == .deleted ? [] : object.relatedIDs(forKey: relationship.name)
        }
        return try persistentStoreCoordinator.incrementalStore(for: id).newValue(forRelationship: relationship, forObjectWith: id)
    }

    /// A child's save: its changes become the parent's unsaved changes; nothing reaches a store.
    func pushToParent(_ parent: ManagedObjectContext) -> ContextChanges {
        let deleted = Set(deletedIDs)
        let saved = ContextChanges(inserted: Set(insertedInOrder.map(\.objectID)), updated: Set(changedIDs.filter { registered[$0]?.isUpdated == true }), deleted: deleted)
        let insertedIDs = Set(insertedInOrder.map(\.objectID))
        for object in insertedInOrder {
            let copy = parent.adoptInsertedObject(object.handle, object.objectID)
            copy.attributes = object.attributes
            copy.toOne = object.toOne
            copy.toMany = object.toMany
        }
        for id in changedIDs where !deleted.contains(id) && !insertedIDs.contains(id) {
            guard let object = registered[id], object.isUpdated else { continue }
            let target = parent.object(with: id)
            target.willAccessValues()
            for index in object.changedSlots {
                let slot = object.handle.slots[index]
                switch slot.kind {
                case .attribute where slot.position >= 0: target.setAttributeValue(object.attributeValue(slot), slot)
                case .toOne: target.setToOneID(object.toOneID(slot), slot)
                case .toMany: target.setMembers(object.loadedMembers(slot), slot)
                default: continue
                }
                target.markChanged(slot)
            }
        }
        for id in deletedIDs {
            parent.delete(parent.object(with: id))
        }
        for id in deletedIDs {
            guard let object = registered[id] else { continue }
            forget(object)
            object.managedObjectContext = nil
        }
        for object in insertedInOrder + changedIDs.compactMap({ registered[$0] }) {
            guard object.lifecycle != .deleted else { continue }
            object.lifecycle = .clean
            object.changedSlots.removeAll()
            object.committed = ManagedObject.Snapshot(attributes: object.handle.persistentAttributes(object.attributes),
                                                      toOne: object.handle.persistentToOne(object.toOne), toMany: object.toMany, version: object.version)
        }
        insertedInOrder.removeAll()
        deletedIDs.removeAll()
        changedIDs.removeAll()
        return saved
    }

    /// Registers an object a child inserted, under the child's ID.
    func adoptInsertedObject(_ entity: ManagedObjectModel.EntityHandle, _ id: ManagedObjectID) -> ManagedObject {
        if let existing = registered[id] { return existing }
        let object = makeObject(entity, id)
        object.lifecycle = .inserted
        object.isFaultStorage = false
        registered[id] = object
        insertedInOrder.append(object)
        pendingNotificationStorage.inserted.insert(id)  // adds only: the report generation stays
        holdRow(of: object)
        return object
    }
}
