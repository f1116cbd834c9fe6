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

    /// The IDs a to-many relationship holds, loading them if they are a fault (none for a name that is no to-many).
    func relatedIDs(forKey key: String) -> [ManagedObjectID] {
        guard let slot = handle.slot(named: key), slot.kind == .toMany else { return [] }
        return relatedIDs(slot)
    }

    /// The IDs the to-many in `slot` holds, loading them if they are a fault; members recorded while it was not
    /// loaded are applied to what loads.
    func relatedIDs(_ slot: ManagedObjectModel.Slot) -> [ManagedObjectID] {
        if let loaded = loadedMembers(slot) { return loaded }
        guard lifecycle != .inserted, let context = managedObjectContext else {
            setMembers([], slot)
            return []
        }
        context.fulfillRelationshipFault(of: self, slot)
        return loadedMembers(slot) ?? []
    }

    /// Takes `stored`, the members the store holds, as what the unloaded to-many in `slot` holds and as its
    /// committed state; members recorded while it was not loaded are applied on top.
    func takeStoredMembers(_ stored: [ManagedObjectID], _ slot: ManagedObjectModel.Slot) {
        if committedStorage == nil { willAccessValues() }
        committedStorage?.setMembers(stored, slot, of: handle)
        guard let pending = pendingMembers(slot) else {
            setMembers(stored, slot)
            return
        }
        extras!.pendingToMany[slot.position] = nil
        var ids = stored.filter { !pending.removed.contains($0) }
        for id in pending.added where !ids.contains(id) { ids.append(id) }
        setMembers(ids, slot)
    }

    func setToOne(_ slot: ManagedObjectModel.Slot, to destination: ManagedObject?) {
        willAccessValues()
        let old = toOneID(slot)
        guard old != destination?.objectID else { return }
        primitiveSetToOne(slot, destination?.objectID)
        guard slot.inverseIndex >= 0, let context = managedObjectContext else { return }
        if let old {
            context.object(with: old).unlink(self, fromInverseOf: slot)
        }
        destination?.link(self, toInverseOf: slot)
    }

    func replaceToMany(_ slot: ManagedObjectModel.Slot, with objects: [ManagedObject]) throws(ManagedObjectContextError) {
        let current = relatedIDs(slot)
        let wanted: [ManagedObject]
        if objects.count < 2 {
            wanted = objects
        } else if objects.count <= 16 {
            // A few members (the usual case): duplicates found by comparing IDs, with no set allocated or hashed, and
            // the array kept as it is when there are none.
            func isRepeated(_ index: Int) -> Bool {
                let id = objects[index].objectID
                for earlier in 0..<index where objects[earlier].objectID == id { return true }
                return false
            }
            if !objects.indices.dropFirst().contains(where: isRepeated) {
                wanted = objects
            } else {
                wanted = objects.indices.filter { !isRepeated($0) }.map { objects[$0] }
            }
        } else {
            var seen = Set<ManagedObjectID>(minimumCapacity: objects.count)
            wanted = objects.filter { seen.insert($0.objectID).inserted }
        }
        let wantedIDs = wanted.map(\.objectID)
        guard wantedIDs != current else { return }
        let removed = current.isEmpty ? [] : Set(current).subtracting(wantedIDs)
        let added = current.isEmpty ? wanted : wanted.filter { !current.contains($0.objectID) }
        setMembers(wantedIDs, slot)
        markChanged(slot)
        guard slot.inverseIndex >= 0, let context = managedObjectContext else { return }
        for id in removed { context.object(with: id).unlink(self, fromInverseOf: slot) }
        for object in added { object.link(self, toInverseOf: slot) }
    }

    /// Makes this object's inverse of `relationshipBack` (a relationship of `owner`) point at `owner`.
    private func link(_ owner: ManagedObject, toInverseOf relationshipBack: ManagedObjectModel.Slot) {
        guard let inverse = handle.inverse(of: relationshipBack) else { return }
        if inverse.kind == .toMany {
            if loadedMembers(inverse) == nil, lifecycle != .inserted, let context = managedObjectContext, context.recordsWithoutLoading(inverse, of: self) {
                // The store derives this relationship or takes its changes as deltas: record the change instead of
                // loading the whole relationship.
                let id = owner.objectID
                recordPending(inverse) { pending in
                    pending.added.append(id)
                    if !pending.removed.isEmpty { pending.removed.remove(id) }
                }
                markChanged(inverse)
                return
            }
            _ = relatedIDs(inverse)  // loads the relationship if it is a fault
            // A newly inserted owner cannot be in the list yet (setToOne and replaceToMany only link new pairs), so
            // the linear membership check is skipped for it, and the list grows in place (no copy of it is held
            // here): bulk inserts into one big to-many stay linear.
            guard owner.lifecycle == .inserted || loadedMembers(inverse)?.contains(owner.objectID) != true else { return }
            toMany[inverse.position]!.append(owner.objectID)
            markChanged(inverse)
        } else {
            willAccessValues()
            if let previous = toOneID(inverse), previous != owner.objectID, let context = managedObjectContext {
                // A to-one inverse moves: the previous owner loses this object.
                let previousOwner = context.object(with: previous)
                if relationshipBack.kind == .toMany {
                    previousOwner.primitiveRemove(relationshipBack, objectID)
                } else if previousOwner.toOneID(relationshipBack) == objectID {
                    previousOwner.primitiveSetToOne(relationshipBack, nil)
                }
            }
            primitiveSetToOne(inverse, owner.objectID)
        }
    }

    /// Makes this object's inverse of `relationshipBack` (a relationship of `owner`) stop pointing at `owner`.
    func unlink(_ owner: ManagedObject, fromInverseOf relationshipBack: ManagedObjectModel.Slot) {
        guard let inverse = handle.inverse(of: relationshipBack) else { return }
        if inverse.kind == .toMany {
            primitiveRemove(inverse, owner.objectID)
        } else {
            willAccessValues()
            if toOneID(inverse) == owner.objectID { primitiveSetToOne(inverse, nil) }
        }
    }

    func primitiveSetToOne(_ slot: ManagedObjectModel.Slot, _ id: ManagedObjectID?) {
        willAccessValues()
        guard toOneID(slot) != id else { return }
        setToOneID(id, slot)
        markChanged(slot)
    }

    /// Takes `id` out of the to-many in `slot` (recording it, if the relationship is not loaded and need not be).
    func primitiveRemove(_ slot: ManagedObjectModel.Slot, _ id: ManagedObjectID) {
        if loadedMembers(slot) == nil, lifecycle != .inserted, let context = managedObjectContext, context.recordsWithoutLoading(slot, of: self) {
            recordPending(slot) { pending in
                pending.removed.insert(id)
                pending.added.removeAll { $0 == id }
            }
            markChanged(slot)
            return
        }
        guard let index = relatedIDs(slot).firstIndex(of: id) else { return }
        toMany[slot.position]!.remove(at: index)
        markChanged(slot)
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
    /// How many objects' values load together when one of them fires its fault: here, and among a fetch's results
    /// when its request sets no ``FetchRequest/fetchBatchSize``.
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
