/// Objects whose faults load together, with one store call, when the first of them fires: a batch of a fetch with a
/// `fetchBatchSize`, or a window of a to-many relationship's objects (``RelatedObjects``).
final class FaultBatch {
    let objectIDs: ArraySlice<ManagedObjectID>
    /// Whether loading the batch makes the objects the context does not hold yet (a relationship's window, whose
    /// objects are made as they are reached) or loads only those it holds (a fetch's, which made them all).
    let makesObjects: Bool
    var isLoaded = false
    init(_ objectIDs: ArraySlice<ManagedObjectID>, makesObjects: Bool) {
        self.objectIDs = objectIDs
        self.makesObjects = makesObjects
    }
}

extension ManagedObjectContext {
    /// Loads every still-faulted object of a batch with one call per store.
    /// A fault whose batch could not be read (a store error) loads on its own afterwards and reports its error then.
    func loadBatch(_ batch: FaultBatch) {
        guard !batch.isLoaded else { return }
        batch.isLoaded = true
        var objects: [ManagedObject] = []
        objects.reserveCapacity(batch.objectIDs.count)
        for id in batch.objectIDs {
            guard let object = batch.makesObjects ? object(with: id, amongIDs: batch.objectIDs.count) : registered[id] else { continue }
            if object.faultBatch === batch { object.faultBatch = nil }
            objects.append(object)
        }
        try? loadValues(of: objects)
    }

    /// Groups fetched objects into batches of `size` whose faults load together. A batch is made only where it has
    /// two faults or more: a lone fault loads as quickly on its own.
    func assignBatches(of objects: [ManagedObject], size: Int) {
        guard size > 0, objects.count > 1 else { return }
        var ids: [ManagedObjectID]?
        for start in stride(from: 0, to: objects.count, by: size) {
            let end = min(start + size, objects.count)
            var faults = 0
            for index in start..<end where objects[index].isFaultStorage { faults += 1 }
            guard faults > 1 else { continue }
            if ids == nil { ids = objects.map(\.objectID) }
            let batch = FaultBatch(ids![start..<end], makesObjects: false)
            for index in start..<end where objects[index].isFaultStorage { objects[index].faultBatch = batch }
        }
    }

    /// The objects matching `request` as a collection that loads them a batch at a time as it is read (random access
    /// included) and lets go of the batch before, so walking a million results keeps about two batches in memory.
    /// Objects you keep a reference to, or that have changes, stay registered.
    ///
    /// - Throws: As ``fetch(_:)``.
    public func fetchBatched(_ request: FetchRequest) throws -> BatchedFetchResults {
        BatchedFetchResults(context: self, objectIDs: try matchingObjectIDs(request), batchSize: max(1, request.fetchBatchSize == 0 ? 100 : request.fetchBatchSize))
    }

    /// Loads the objects at the end of each relationship key path, one store call per step and store.
    func prefetch(_ keyPaths: [String], for objects: [ManagedObject]) throws {
        for keyPath in keyPaths {
            var current = objects
            for component in keyPath.split(separator: ".").map(String.init) {
                try loadValues(of: current)
                var next: [ManagedObject] = []
                var seen = Set<ManagedObjectID>()
                let byEntity = Dictionary(grouping: current, by: { $0.entityName })
                for (entityName, group) in byEntity {
                    guard let relationship = model.relationship(named: component, in: entityName) else { continue }
                    if relationship.isToMany {
                        // The entity's slot serves its sub-entities too (inherited properties keep their slots).
                        guard let slot = group[0].handle.slot(named: component) else { continue }
                        let unloaded = group.filter { $0.loadedMembers(slot) == nil && !$0.objectID.isTemporaryID }
                        if parent != nil {
                            for member in unloaded { _ = member.relatedIDs(slot) }
                        } else {
                        for (storeIdentifier, members) in Dictionary(grouping: unloaded, by: { $0.objectID.storeIdentifier! }) {
                            guard let store = persistentStoreCoordinator.persistentStore(withIdentifier: storeIdentifier) as? any IncrementalStore else { continue }
                            let values = try store.newValues(forRelationship: relationship, forObjectsWith: members.map(\.objectID))
                            for member in members { member.takeStoredMembers(values[member.objectID] ?? [], slot) }
                        }
                        }
                        for member in group {
                            for id in member.relatedIDs(slot) where seen.insert(id).inserted { next.append(object(with: id)) }
                        }
                    } else {
                        for member in group {
                            if let id = member.toOneID(named: component), seen.insert(id).inserted { next.append(object(with: id)) }
                        }
                    }
                }
                current = next
            }
            try loadValues(of: current)
        }
    }

    /// Loads every fault among `objects` with one call per store.
    func loadValues(of objects: [ManagedObject]) throws {
        let faults = objects.filter { $0.isFaultStorage && (!$0.objectID.isTemporaryID || parent != nil) && $0.lifecycle != .inserted }
        guard !faults.isEmpty else { return }
        if parent == nil, !faults.contains(where: \.holdsRow) {
            // The common case (faults that never loaded): registered and read in one visit to the coordinator.
            for object in faults { object.holdsRow = true }
            // Nodes arrive while the store reads: each object takes its values then, and awakes (its override may
            // fire other faults) once the read is over.
            var loaded: [Int] = []
            loaded.reserveCapacity(faults.count)
            defer { for index in loaded { faults[index].awakeFromFetch() } }
            try persistentStoreCoordinator.registeringNodes(for: faults.map(\.objectID)) { index, node, generation in
                let object = faults[index]
                guard object.isFaultStorage else { return }
                apply(node, to: object, readGeneration: generation)
                loaded.append(index)
            }
            return
        }
        holdRows(of: faults)
        let nodes = try sourceNodes(for: faults.map(\.objectID))
        for object in faults {
            guard object.isFaultStorage, let node = nodes[object.objectID] else { continue }
            apply(node, to: object)
            object.awakeFromFetch()
        }
    }

    /// Forgets unchanged objects that nothing else refers to.
    func releaseIfUnused(_ objects: inout [ManagedObject]) {
        for index in objects.indices {
            let id = objects[index].objectID
            guard !objects[index].hasChanges, registered[id] === objects[index] else { continue }
            registered[id] = nil
            if isKnownUniquelyReferenced(&objects[index]) {
                objects[index].managedObjectContext = nil
                releaseRow(of: objects[index])
            } else {
                registered[id] = objects[index]
            }
        }
        objects.removeAll()
    }
}

/// The results of ``ManagedObjectContext/fetchBatched(_:)``: every matching ID, with objects loaded a batch at a
/// time as they are read.
public struct BatchedFetchResults: RandomAccessCollection {
    final class Window {
        var batch = -1
        var objects: [ManagedObject] = []
        var loads = 0
    }

    /// The context the objects live in.
    public let context: ManagedObjectContext
    /// Every matching object's ID, in order.
    public let objectIDs: [ManagedObjectID]
    /// How many objects load at once.
    public let batchSize: Int
    private let window = Window()

    init(context: ManagedObjectContext, objectIDs: [ManagedObjectID], batchSize: Int) {
        self.context = context
        self.objectIDs = objectIDs
        self.batchSize = batchSize
    }

    /// The first position.
    public var startIndex: Int { 0 }
    /// One past the last position.
    public var endIndex: Int { objectIDs.count }

    /// How many batches have been loaded so far.
    public var batchesLoaded: Int { window.loads }

    /// The object at `position`, loading its batch (and releasing the previous one) when needed.
    public subscript(position: Int) -> ManagedObject {
        let batch = position / batchSize
        if batch != window.batch {
            context.releaseIfUnused(&window.objects)
            let ids = objectIDs[batch * batchSize..<Swift.min((batch + 1) * batchSize, objectIDs.count)]
            window.objects = context.objects(with: Array(ids))
            try? context.loadValues(of: window.objects)
            window.batch = batch
            window.loads += 1
        }
        return window.objects[position - batch * batchSize]
    }
}
