/// The objects a context holds, by ID (uniquing): those with permanent IDs in one table, those with temporary IDs —
/// inserted objects not saved yet, and a child's copies of its parent's — in another.
///
/// A save gives its inserted objects permanent IDs; when they are all the temporary objects the context holds (the
/// usual case), the temporary table is dropped whole instead of each entry being found and removed — for a bulk
/// insert of 10 000 objects, 10 000 lookups and deletions in a table that size. Lookups pick the table by the ID's
/// namespace, which says whether the ID is temporary.
struct ObjectRegistry: Sequence {
    private var permanent: [ManagedObjectID: ManagedObject] = [:]
    private var temporary: [ManagedObjectID: ManagedObject] = [:]

    init() {}

    /// The object registered under `id`; setting `nil` removes it.
    subscript(id: ManagedObjectID) -> ManagedObject? {
        get { id.isTemporaryID ? temporary[id] : permanent[id] }
        set {
            if id.isTemporaryID { temporary[id] = newValue } else { permanent[id] = newValue }
        }
    }

    /// The object registered under `id`, made by `make` and registered if there is none: the ID is hashed and its
    /// bucket found once for both. (A `_modify` accessor forwarding to a dictionary's would allocate a frame for the
    /// nested coroutine on every call.)
    @inline(__always)
    mutating func object(for id: ManagedObjectID, orMake make: () -> ManagedObject) -> ManagedObject {
        @inline(__always) func entry(_ entry: inout ManagedObject?) -> ManagedObject {
            if let existing = entry { return existing }
            let object = make()
            entry = object
            return object
        }
        return id.isTemporaryID ? entry(&temporary[id]) : entry(&permanent[id])
    }

    /// How many objects are registered.
    var count: Int { permanent.count + temporary.count }

    /// Every registered object (not copied into an array).
    var values: FlattenSequence<[Dictionary<ManagedObjectID, ManagedObject>.Values]> {
        [permanent.values, temporary.values].joined()
    }

    /// Whether the table of objects with permanent IDs (the ones fetches and faults register) has no room for one
    /// more without growing.
    var isFull: Bool { permanent.count >= permanent.capacity }

    /// Makes room for `count` more objects with permanent IDs.
    mutating func reserveCapacity(forMore count: Int) {
        permanent.reserveCapacity(permanent.count + count)
    }

    /// Removes and returns the object registered under `id`.
    @discardableResult
    mutating func removeValue(forKey id: ManagedObjectID) -> ManagedObject? {
        id.isTemporaryID ? temporary.removeValue(forKey: id) : permanent.removeValue(forKey: id)
    }

    /// Removes every object.
    mutating func removeAll() {
        permanent.removeAll()
        temporary.removeAll()
    }

    /// Registers each object under the permanent ID given for it, and removes it from under its temporary ID (its
    /// `objectID` still). With `allRegistered` — each object is registered under its temporary ID, as a context's
    /// inserted objects are — and as many objects as temporary entries, the temporary table is dropped whole.
    /// Returns the objects moved (those registered).
    mutating func move(_ objects: [(object: ManagedObject, permanentID: ManagedObjectID)],
                       allRegistered: Bool) -> [(object: ManagedObject, permanentID: ManagedObjectID)] {
        permanent.reserveCapacity(permanent.count + objects.count)
        guard allRegistered && temporary.count == objects.count else {
            var moved: [(object: ManagedObject, permanentID: ManagedObjectID)] = []
            for (object, permanentID) in objects where temporary.removeValue(forKey: object.objectID) != nil {
                permanent[permanentID] = object
                moved.append((object, permanentID))
            }
            return moved
        }
        for (object, permanentID) in objects {
            assert(temporary[object.objectID] === object, "an inserted object is not registered under its temporary ID")
            permanent[permanentID] = object
        }
        temporary = [:]
        return objects
    }

    /// Iterates over every (ID, object) pair.
    func makeIterator() -> FlattenSequence<[[ManagedObjectID: ManagedObject]]>.Iterator {
        [permanent, temporary].joined().makeIterator()
    }
}
