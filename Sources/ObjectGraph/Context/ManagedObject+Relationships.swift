extension ManagedObject {
    /// The objects a to-many relationship holds, in order for ordered relationships.
    ///
    /// The relationship's IDs are read once (from the store the first time, if the relationship is a fault); each
    /// object is made, as a fault, when it is reached, so counting a department's employees or looking at the
    /// first few makes no object for the others.
    public func relatedObjects(forKey key: String) -> RelatedObjects<ManagedObject> {
        guard let context = managedObjectContext else { return RelatedObjects(objectIDs: [], context: nil) }
        return RelatedObjects(objectIDs: relatedIDs(forKey: key), context: context)
    }

    /// The IDs of the objects a to-many relationship holds (in order, for ordered relationships) or of the one a
    /// to-one holds; makes no object and fires no fault of the destination objects (Core Data's
    /// `objectIDs(forRelationshipNamed:)`).
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` when `key` is
    ///   not a relationship of the object's entity.
    public func objectIDs(forRelationshipNamed key: String) throws(ManagedObjectContextError) -> [ManagedObjectID] {
        guard let slot = handle.slot(named: key) else {
            throw ManagedObjectContextError(.unknownName, message: "\(entityName) has no relationship named \"\(key)\"")
        }
        switch slot.kind {
        case .toMany:
            return relatedIDs(forKey: key)
        case .toOne:
            willAccessValues()
            return toOneID(slot).map { [$0] } ?? []
        case .attribute, .fetched:
            throw ManagedObjectContextError(.unknownName, message: "\(entityName).\(key) is not a relationship")
        }
    }

    /// A live, mutable view of a to-many relationship; changes through it keep inverses consistent.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` when `key` is
    ///   not a to-many relationship.
    public func mutableRelationship(forKey key: String) throws(ManagedObjectContextError) -> ToManyRelationship {
        guard case .relationship(let relationship) = handle.property(named: key), relationship.isToMany else {
            throw ManagedObjectContextError(.unknownName, message: "\(entityName).\(key) is not a to-many relationship")
        }
        return ToManyRelationship(owner: self, relationship: relationship)
    }

    /// The IDs a to-many relationship holds, loading them if they are a fault.
    func relatedIDs(forKey key: String) -> [ManagedObjectID] {
        if let loaded = toMany[key] { return loaded }
        if lifecycle == .inserted || managedObjectContext == nil {
            toMany[key] = []
            return []
        }
        managedObjectContext?.fulfillRelationshipFault(of: self, key: key)
        if let pending = extras?.pendingToMany.removeValue(forKey: key) {
            var ids = (toMany[key] ?? []).filter { !pending.removed.contains($0) }
            for id in pending.added where !ids.contains(id) { ids.append(id) }
            toMany[key] = ids
        }
        return toMany[key] ?? []
    }

    func setToOne(_ slot: ManagedObjectModel.Slot, to destination: ManagedObject?) {
        willAccessValues()
        let old = toOneID(slot)
        guard old != destination?.objectID else { return }
        primitiveSetToOne(slot, destination?.objectID)
        guard let inverse = slot.inverse, let context = managedObjectContext else { return }
        if let old {
            context.object(with: old).unlink(self, fromInverse: inverse)
        }
        destination?.link(self, toInverse: inverse, relationshipBack: slot.relationship!)
    }

    func replaceToMany(_ slot: ManagedObjectModel.Slot, with objects: [ManagedObject]) throws(ManagedObjectContextError) {
        let key = slot.name
        let current = relatedIDs(forKey: key)
        let wanted: [ManagedObject]
        if objects.count < 2 {
            wanted = objects
        } else {
            var seen = Set<ManagedObjectID>(minimumCapacity: objects.count)
            wanted = objects.filter { seen.insert($0.objectID).inserted }
        }
        let wantedIDs = wanted.map(\.objectID)
        guard wantedIDs != current else { return }
        let removed = current.isEmpty ? [] : Set(current).subtracting(wantedIDs)
        let added = current.isEmpty ? wanted : wanted.filter { !current.contains($0.objectID) }
        toMany[key] = wantedIDs
        markChanged(slot)
        guard let inverse = slot.inverse, let context = managedObjectContext else { return }
        for id in removed { context.object(with: id).unlink(self, fromInverse: inverse) }
        for object in added { object.link(self, toInverse: inverse, relationshipBack: slot.relationship!) }
    }

    /// Makes this object's `inverse` point at `owner` (the other side of `relationshipBack`).
    private func link(_ owner: ManagedObject, toInverse inverse: RelationshipDescription, relationshipBack: RelationshipDescription) {
        if inverse.isToMany {
            if toMany[inverse.name] == nil, lifecycle != .inserted, let context = managedObjectContext, context.recordsWithoutLoading(inverse, of: self) {
                // The store derives this relationship or takes its changes as deltas: record the change instead of
                // loading the whole relationship.
                pendingToMany[inverse.name, default: ([], [])].added.append(owner.objectID)
                pendingToMany[inverse.name]!.removed.remove(owner.objectID)
                markChanged(named: inverse.name)
                return
            }
            _ = relatedIDs(forKey: inverse.name)  // loads the relationship if it is a fault
            // A newly inserted owner cannot be in the list yet (setToOne and replaceToMany only link new pairs), so
            // the linear membership check is skipped for it, and the list grows in place: bulk inserts into one big
            // to-many stay linear.
            guard owner.lifecycle == .inserted || toMany[inverse.name]?.contains(owner.objectID) != true else { return }
            toMany[inverse.name, default: []].append(owner.objectID)
            markChanged(named: inverse.name)
        } else {
            willAccessValues()
            if let previous = toOneID(named: inverse.name), previous != owner.objectID, let context = managedObjectContext {
                // A to-one inverse moves: the previous owner loses this object.
                let previousOwner = context.object(with: previous)
                if relationshipBack.isToMany {
                    previousOwner.primitiveRemove(relationshipBack.name, objectID)
                } else if previousOwner.toOneID(named: relationshipBack.name) == objectID {
                    previousOwner.primitiveSetToOne(named: relationshipBack.name, nil)
                }
            }
            primitiveSetToOne(named: inverse.name, owner.objectID)
        }
    }

    /// Makes this object's `inverse` stop pointing at `owner`.
    func unlink(_ owner: ManagedObject, fromInverse inverse: RelationshipDescription) {
        if inverse.isToMany {
            primitiveRemove(inverse.name, owner.objectID)
        } else {
            willAccessValues()
            if toOneID(named: inverse.name) == owner.objectID { primitiveSetToOne(named: inverse.name, nil) }
        }
    }

    func primitiveSetToOne(_ slot: ManagedObjectModel.Slot, _ id: ManagedObjectID?) {
        willAccessValues()
        guard toOneID(slot) != id else { return }
        setToOneID(id, slot)
        markChanged(slot)
    }

    func primitiveSetToOne(named key: String, _ id: ManagedObjectID?) {
        guard let slot = handle.slot(named: key), slot.kind == .toOne else { return }
        primitiveSetToOne(slot, id)
    }

    func primitiveRemove(_ key: String, _ id: ManagedObjectID) {
        if toMany[key] == nil, lifecycle != .inserted, let context = managedObjectContext,
           let relationship = handle.relationship(named: key), context.recordsWithoutLoading(relationship, of: self) {
            pendingToMany[key, default: ([], [])].removed.insert(id)
            pendingToMany[key]!.added.removeAll { $0 == id }
            markChanged(named: key)
            return
        }
        _ = relatedIDs(forKey: key)
        guard let index = toMany[key]?.firstIndex(of: id) else { return }
        toMany[key]!.remove(at: index)
        markChanged(named: key)
    }
}

/// A live view of one object's to-many relationship (Core Data's `mutableSetValue(forKey:)` /
/// `mutableOrderedSetValue(forKey:)`). Every change updates the inverse relationship too.
public struct ToManyRelationship {
    /// The object that owns the relationship.
    public let owner: ManagedObject
    /// The relationship.
    public let relationship: RelationshipDescription

    /// The related objects, in order for an ordered relationship.
    public var objects: RelatedObjects<ManagedObject> { owner.relatedObjects(forKey: relationship.name) }

    /// How many objects the relationship holds.
    public var count: Int { owner.relatedIDs(forKey: relationship.name).count }

    /// Whether the relationship holds `object`.
    public func contains(_ object: ManagedObject) -> Bool { owner.relatedIDs(forKey: relationship.name).contains(object.objectID) }

    /// Adds `object` (at the end, for an ordered relationship); nothing happens if it is there already.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` when the
    ///   object is of the wrong entity or another context.
    public func insert(_ object: ManagedObject) throws(ManagedObjectContextError) {
        try owner.setValue(Array(objects) + [object], forKey: relationship.name)
    }

    /// Inserts `object` at `index` of an ordered relationship (moving it if it is there already).
    ///
    /// - Throws: ``ManagedObjectContextError`` as ``insert(_:)`` does.
    public func insert(_ object: ManagedObject, at index: Int) throws(ManagedObjectContextError) {
        var list = objects.filter { $0 !== object }
        list.insert(object, at: Swift.min(Swift.max(0, index), list.count))
        try owner.setValue(list, forKey: relationship.name)
    }

    /// Removes `object`; nothing happens if it is not there.
    public func remove(_ object: ManagedObject) {
        try? owner.setValue(objects.filter { $0 !== object }, forKey: relationship.name)
    }

    /// Removes every object.
    public func removeAll() {
        try? owner.setValue([ManagedObject](), forKey: relationship.name)
    }
}

/// The objects of a to-many relationship, in order for ordered relationships: a collection of the relationship's
/// IDs that makes each object, as a fault registered with the context, when it is reached.
///
/// Counting the collection, or reading ``objectIDs``, makes no object; reaching the same position twice hands out
/// the same object (the context's). The objects are reached in windows of ``faultBatchSize``: when the first fault
/// of a window fires, the values of the whole window load with one store call (Core Data's batch faulting), so
/// walking a department's employees and reading each one's name reads the rows a window at a time instead of one
/// transaction per employee. The collection is a snapshot of the relationship when it was asked for: changes made
/// afterwards show in the next one.
public struct RelatedObjects<Object: ManagedObject>: RandomAccessCollection {
    /// How many objects' values load together when one of them fires its fault.
    public static var faultBatchSize: Int { 100 }

    /// The IDs of the related objects, in the collection's order.
    public let objectIDs: [ManagedObjectID]
    /// The context the objects are made in (`nil` only when there are none).
    @usableFromInline let context: ManagedObjectContext?
    /// The windows made so far (`nil` when there are no objects).
    @usableFromInline let windows: Windows?

    /// The fault batch of each window, made when an object of the window is first reached as a fault.
    @usableFromInline final class Windows {
        var batches: [FaultBatch?]
        init(count: Int) { batches = Array(repeating: nil, count: count) }
    }

    init(objectIDs: [ManagedObjectID], context: ManagedObjectContext?) {
        self.objectIDs = objectIDs
        self.context = objectIDs.isEmpty ? nil : context
        windows = objectIDs.isEmpty ? nil : Windows(count: (objectIDs.count + Self.faultBatchSize - 1) / Self.faultBatchSize)
    }

    /// The position of the first object.
    @inlinable public var startIndex: Int { 0 }
    /// The position after the last object.
    @inlinable public var endIndex: Int { objectIDs.count }

    /// The object at `position`: the context's, made as a fault if the context holds none.
    ///
    /// Stops the program, naming both classes, when the context's object is not an `Object` — a typed key
    /// (``ToManyKey``) declared with a class the coordinator does not make for the destination entity.
    @inlinable public subscript(position: Int) -> Object {
        let object = context.unsafelyUnwrapped.object(with: objectIDs[position], amongIDs: objectIDs.count)
        if object.isFault { joinWindow(object, at: position) }
        guard let typed = object as? Object else { Self.stopForWrongClass(object) }
        return typed
    }

    /// Puts a fault into the batch of its window, unless it is in one already.
    @usableFromInline func joinWindow(_ object: ManagedObject, at position: Int) {
        guard object.faultBatch == nil, let windows else { return }
        let window = position / Self.faultBatchSize
        if windows.batches[window]?.isLoaded != false {
            let start = window * Self.faultBatchSize
            windows.batches[window] = FaultBatch(objectIDs[start..<Swift.min(start + Self.faultBatchSize, objectIDs.count)], makesObjects: true)
        }
        object.faultBatch = windows.batches[window]
    }

    @usableFromInline static func stopForWrongClass(_ object: ManagedObject) -> Never {
        fatalError("\(object.objectID) is a \(type(of: object)), not the \(Object.self) its to-many key promises")
    }
}
