import Foundation

/// A store that a ``PersistentStoreCoordinator`` routes requests to (Core Data's `NSPersistentStore`).
///
/// Stores are created by the coordinator from a registered type (``PersistentStoreCoordinator/registerStoreType(_:factory:)``),
/// then sent ``loadMetadata()``. The metadata must hold the store's UUID (``PersistentStoreMetadataKey/uuid``) and type
/// (``PersistentStoreMetadataKey/storeType``) once it returns.
public protocol PersistentStore: AnyObject, Sendable {
    /// The store's type string, as registered with the coordinator.
    var type: String { get }
    /// The configuration whose entities the store holds, or `nil` for every entity.
    var configurationName: String? { get }
    /// Where the store lives, if anywhere.
    var url: URL? { get }
    /// The store's metadata: at least its UUID and type.
    var metadata: [String: String] { get }
    /// The store's UUID (its metadata's ``PersistentStoreMetadataKey/uuid``). The default reads the metadata; a store
    /// that keeps the UUID at hand can answer without building it.
    var identifier: String { get }
    /// Reads or creates the store's metadata. Called once, when the store is added to a coordinator.
    ///
    /// - Throws: An error naming the file when the store cannot be opened or does not fit the model.
    func loadMetadata() throws
    /// Called when the store is removed from its coordinator, so it can let go of what it holds. Default: nothing.
    func willRemoveFromPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator?)
}

extension PersistentStore {
    /// Does nothing.
    public func willRemoveFromPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator?) {}

    /// The store's UUID, from its metadata.
    public var identifier: String { metadata[PersistentStoreMetadataKey.uuid] ?? "" }
}

/// Well-known metadata keys.
public enum PersistentStoreMetadataKey {
    /// The store's UUID (Core Data's `NSStoreUUIDKey`).
    public static let uuid = "NSStoreUUID"
    /// The store's type string (Core Data's `NSStoreTypeKey`).
    public static let storeType = "NSStoreType"
    /// The version hash of the model the store was written with, as hexadecimal.
    public static let modelVersionHash = "LMDBStoreModelVersionHash"
}

/// A store that loads only what is asked for (Core Data's `NSIncrementalStore` contract). See `DESIGN.md`'s table:
/// fetches and saves arrive through ``execute(_:with:)``, a fault through ``newValuesForObject(with:)``, a
/// relationship fault through ``newValue(forRelationship:forObjectWith:)``.
public protocol IncrementalStore: PersistentStore {
    /// Runs a fetch or a save.
    ///
    /// - Fetch: return ``PersistentStoreResult/objectIDs(_:)`` (or ``PersistentStoreResult/nodes(_:)`` to hand over
    ///   the rows too) in the request's order, honouring predicate, sort, offset and limit; or
    ///   ``PersistentStoreResult/count(_:)`` for a count request.
    /// - Save: apply every change of the ``SaveChangesRequest`` or none. Check each updated or deleted object's
    ///   ``ObjectChange/expectedVersion``: a mismatch is a conflict, thrown as ``ManagedObjectContextError`` with
    ///   ``ManagedObjectContextError/Code/mergeConflict`` and the conflicts, and nothing is written (a change that
    ///   ``ObjectChange/keepsStoredValues`` without an expected version has none to check; its object must be in
    ///   the store). Return
    ///   ``PersistentStoreResult/versions(_:)`` with the version each inserted and updated object now has (a store
    ///   that leaves a row alone when only its link tables changed keeps its version), or
    ///   ``PersistentStoreResult/empty`` when inserts start at version 1 and every update adds 1.
    ///
    /// - Throws: An error that says why the request cannot be run; never a silently wrong result.
    func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult

    /// The stored values of one object: attributes, to-one relationships and the version.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/objectNotFound`` when the object
    ///   is gone.
    func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode

    /// The objects a relationship of one object holds (to-one: at most one; ordered to-many: in order).
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/objectNotFound`` when the object
    ///   is gone.
    func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID]

    /// The stored values of many objects at once, for batched faulting and prefetching; objects that are gone are
    /// left out. The default asks ``newValuesForObject(with:)`` for each; stores should read them in one go.
    ///
    /// - Throws: An error if the store cannot be read.
    func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode]

    /// The stored values of many objects, handed to `body` one at a time as they are read, each with its position in
    /// `objectIDs` (in any order); objects that are gone are left out. This is what a batch of faults reads: no array
    /// of nodes is made, and a store that reads rows in place hands each one over before it reads the next. `body`
    /// does not call the store. The default hands over the nodes of ``newValuesForObjects(with:)``.
    ///
    /// - Throws: An error if the store cannot be read; nodes handed over before it stand.
    func newValuesForObjects(with objectIDs: [ManagedObjectID], forEach body: (Int, IncrementalStoreNode) -> Void) throws

    /// The versions the rows of `objectIDs` have now, in the same order (`nil` for an object that is gone): what a
    /// fetch compares the objects a context has loaded with, to find the stale ones, when the store's rows are not in
    /// the coordinator's cache (``usesCoordinatorRowCache``). The default reads the rows with
    /// ``newValuesForObjects(with:)``; a store that can read a row's version without decoding the row should.
    ///
    /// - Throws: An error if the store cannot be read.
    func versionsOfObjects(with objectIDs: [ManagedObjectID]) throws -> [Int64?]

    /// The members of one relationship for many objects at once, keyed by object. The default asks
    /// ``newValue(forRelationship:forObjectWith:)`` for each; stores should read them in one go.
    ///
    /// - Throws: An error if the store cannot be read.
    func newValues(forRelationship relationship: RelationshipDescription, forObjectsWith objectIDs: [ManagedObjectID]) throws -> [ManagedObjectID: [ManagedObjectID]]

    /// Whether the store keeps this to-many relationship only through its inverse's to-ones (and ignores the
    /// membership a save gives for it). A context then neither sends it nor loads it just to keep the inverse up to
    /// date. Default: `false`.
    func derivesRelationship(_ relationship: RelationshipDescription) -> Bool

    /// Whether a save may describe this (unordered) to-many relationship by the members added and removed
    /// (``ObjectChange/toManyChanges``) instead of its whole membership. A context then records changes made to an
    /// unloaded relationship — the inverse side of a many-to-many, typically — without loading it, and sends a
    /// loaded one's change since it read or saved it. Default: `false`.
    func acceptsToManyChanges(for relationship: RelationshipDescription) -> Bool

    /// Permanent IDs for newly inserted objects, in the same order.
    ///
    /// - Throws: An error if keys cannot be allocated.
    func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID]

    /// Whether the coordinator keeps this store's rows in its row cache while some context holds their objects, so
    /// that another context's fault on one makes no store call. Keeping a row costs the coordinator a locked
    /// dictionary insert, update and removal per object a context loads (about 3 000 instructions on a fault);
    /// a store whose reads cost a few times that and whose objects are seldom loaded by several contexts at once
    /// answers `false`. Then every fault reads the store (and sees its latest saved row), and a fetch that returns
    /// objects the context loaded before the last save (through this coordinator, or found by its catch-up with
    /// another process's) asks ``versionsOfObjects(with:)`` to find the stale ones. Default: `true`.
    var usesCoordinatorRowCache: Bool { get }

    /// Objects whose values a context now holds — called when an object first loads its values (a fault fires, a
    /// fetch or a refresh hands it a row, a save gives it a permanent ID), not for faults that never fire; a store
    /// may pin cached rows.
    func managedObjectContextDidRegisterObjects(with objectIDs: [ManagedObjectID])

    /// One object whose values a context now holds: what a lone fault firing reports. The default passes it on to
    /// ``managedObjectContextDidRegisterObjects(with:)``; a store that does nothing with registrations implements
    /// this as nothing too, so that a fault does not make a one-element array to report itself.
    func managedObjectContextDidRegisterObject(with objectID: ManagedObjectID)

    /// Objects a context let go of, of those it was said to hold.
    func managedObjectContextDidUnregisterObjects(with objectIDs: [ManagedObjectID])
}

extension IncrementalStore {
    /// One ``newValuesForObject(with:)`` call per object, leaving out the ones that are gone.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode] {
        var nodes: [IncrementalStoreNode] = []
        for id in objectIDs {
            do {
                nodes.append(try newValuesForObject(with: id))
            } catch let error as ManagedObjectContextError where error.code == .objectNotFound {
                continue
            }
        }
        return nodes
    }

    /// The nodes of ``newValuesForObjects(with:)``, each handed to `body` with the position of its ID.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID], forEach body: (Int, IncrementalStoreNode) -> Void) throws {
        let nodes = try newValuesForObjects(with: objectIDs)
        // Nodes come back in the order asked for, the gone left out: matched by walking both lists, or by lookup if
        // the store did otherwise.
        var next = 0
        for index in objectIDs.indices where next < nodes.count && nodes[next].objectID == objectIDs[index] { next += 1 }
        if next == nodes.count {
            next = 0
            for index in objectIDs.indices where next < nodes.count && nodes[next].objectID == objectIDs[index] {
                body(index, nodes[next])
                next += 1
            }
        } else {
            let byID = Dictionary(nodes.map { ($0.objectID, $0) }, uniquingKeysWith: { first, _ in first })
            for index in objectIDs.indices { if let node = byID[objectIDs[index]] { body(index, node) } }
        }
    }

    /// The versions of the nodes ``newValuesForObjects(with:)`` reads.
    public func versionsOfObjects(with objectIDs: [ManagedObjectID]) throws -> [Int64?] {
        var versions: [ManagedObjectID: Int64] = [:]
        for node in try newValuesForObjects(with: objectIDs) { versions[node.objectID] = node.version }
        return objectIDs.map { versions[$0] }
    }

    /// One ``newValue(forRelationship:forObjectWith:)`` call per object.
    public func newValues(forRelationship relationship: RelationshipDescription, forObjectsWith objectIDs: [ManagedObjectID]) throws -> [ManagedObjectID: [ManagedObjectID]] {
        var result: [ManagedObjectID: [ManagedObjectID]] = [:]
        for id in objectIDs { result[id] = try newValue(forRelationship: relationship, forObjectWith: id) }
        return result
    }

    /// `false`: the store keeps every relationship it is given.
    public func derivesRelationship(_ relationship: RelationshipDescription) -> Bool { false }

    /// `false`: saves give every changed to-many relationship's whole membership.
    public func acceptsToManyChanges(for relationship: RelationshipDescription) -> Bool { false }

    /// `true`: the coordinator caches the store's rows.
    public var usesCoordinatorRowCache: Bool { true }

    /// Does nothing.
    public func managedObjectContextDidRegisterObjects(with objectIDs: [ManagedObjectID]) {}
    /// Calls ``managedObjectContextDidRegisterObjects(with:)`` with the one ID.
    public func managedObjectContextDidRegisterObject(with objectID: ManagedObjectID) {
        managedObjectContextDidRegisterObjects(with: [objectID])
    }
    /// Does nothing.
    public func managedObjectContextDidUnregisterObjects(with objectIDs: [ManagedObjectID]) {}
}

/// What ``IncrementalStore/obtainPermanentIDs(for:)`` is told about each inserted object.
public struct ObjectReference: Sendable, Hashable {
    /// The object's temporary ID.
    public var objectID: ManagedObjectID
    /// The object's entity.
    public var entityName: String

    /// Describes one inserted object.
    public init(objectID: ManagedObjectID, entityName: String) {
        self.objectID = objectID
        self.entityName = entityName
    }
}

/// The stored state of one object, as a store hands it over (Core Data's `NSIncrementalStoreNode`).
///
/// Any store can build a node from values by name. A store built into this package hands over values in the
/// entity's slot order instead, which an object then shares without looking up a name, or its stored row, which an
/// object decodes a value at a time as it reads them; the by-name views below work on all three.
public struct IncrementalStoreNode: Sendable, Hashable {
    /// The object's ID.
    public var objectID: ManagedObjectID
    /// The row's version: it grows with every saved change, for optimistic locking.
    public var version: Int64
    /// The values, by name, in slots or as a row.
    package var values: StoredValues
    /// The coordinator's row generation read before the store read this row (0: unknown), which an object taking
    /// the node keeps: while the generation has not moved, no save can have made the row stale
    /// (``PersistentStoreCoordinator/rowGenerationNow``).
    package var readGeneration: UInt64 = 0

    /// Attribute values by name; an absent name is NULL.
    public var attributes: [String: AttributeValue] {
        get { values.attributeDictionary }
        set { values.attributeDictionary = newValue }
    }

    /// To-one relationships by name; an absent name is no object.
    public var toOne: [String: ManagedObjectID] {
        get { values.toOneDictionary }
        set { values.toOneDictionary = newValue }
    }

    /// Creates a node.
    public init(objectID: ManagedObjectID, attributes: [String: AttributeValue], toOne: [String: ManagedObjectID] = [:], version: Int64) {
        self.objectID = objectID
        self.values = .named(attributes: attributes, toOne: toOne)
        self.version = version
    }

    /// A node whose values are in `entity`'s slot positions (persistent values only).
    package init(objectID: ManagedObjectID, entity: ManagedObjectModel.EntityHandle, attributes: AttributeSlots, toOne: ToOneSlots, version: Int64) {
        self.objectID = objectID
        self.values = .slots(entity, attributes: attributes, toOne: toOne)
        self.version = version
    }

    /// A node backed by its stored row, which objects taking it decode a value at a time.
    package init(objectID: ManagedObjectID, entity: ManagedObjectModel.EntityHandle, row: SharedRow, version: Int64) {
        self.objectID = objectID
        self.values = .row(entity, row)
        self.version = version
    }

    /// Equal when ID, version and the values by name are.
    public static func == (lhs: IncrementalStoreNode, rhs: IncrementalStoreNode) -> Bool {
        lhs.objectID == rhs.objectID && lhs.version == rhs.version && lhs.attributes == rhs.attributes && lhs.toOne == rhs.toOne
    }

    /// Hashes the ID and the version.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(objectID)
        hasher.combine(version)
    }
}

/// A request a coordinator sends a store.
public enum PersistentStoreRequest: Sendable {
    /// A fetch or count.
    case fetch(FetchRequest)
    /// A save.
    case save(SaveChangesRequest)
}

/// What a store answers.
public enum PersistentStoreResult: Sendable {
    /// Matching object IDs, in order.
    case objectIDs([ManagedObjectID])
    /// Matching objects' stored values, in order.
    case nodes([IncrementalStoreNode])
    /// A count.
    case count(Int)
    /// A save: the version each inserted and updated object's row has now, by object ID. An object left out is
    /// taken to be at version 1 (inserted) or one above the version it was saved from (updated).
    case versions([ManagedObjectID: Int64])
    /// Nothing (a save whose inserts start at version 1 and whose updates add 1).
    case empty
}

extension PersistentStoreResult {
    /// The answer to a fetch whose matches are `window` (already sorted and windowed): a count, IDs, or the stored
    /// values when the request does not want faults. Dictionary requests are the context's to compute.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unsupportedRequest`` for a
    ///   dictionary request.
    @inlinable  // specialized in the store's module: generic, its 20-row map cost 700 instructions a row
    package static func fetched<Matches: Collection>(
        _ window: Matches, for request: FetchRequest, id: (Matches.Element) -> ManagedObjectID,
        node: (Matches.Element) throws -> IncrementalStoreNode
    ) throws -> PersistentStoreResult {
        switch request.resultType {
        case .count: return .count(window.count)
        case .managedObjectID: return .objectIDs(window.map(id))
        case .managedObject: return request.returnsObjectsAsFaults ? .objectIDs(window.map(id)) : .nodes(try window.map(node))
        case .dictionary:
            throw ManagedObjectContextError(.unsupportedRequest, message: "dictionary results are computed by the context, not the store")
        }
    }
}

/// One object's change in a save.
public struct ObjectChange: Sendable, Hashable {
    /// The object's (permanent) ID.
    public var objectID: ManagedObjectID
    /// The attribute and to-one values, by name or in slots.
    package var values: StoredValues
    /// To-many relationships whose membership is given: every one for an insert, the changed ones for an update.
    public var toMany: [String: [ManagedObjectID]] {
        get { relationships.membersDictionary }
        set { relationships.membersDictionary = newValue }
    }
    /// To-many relationships of an update given as the members added and removed — one the context did not load, or
    /// one it loaded, as changed since it was read or saved; only for relationships the store
    /// ``IncrementalStore/acceptsToManyChanges(for:)``.
    public var toManyChanges: [String: ToManyChange] {
        get { relationships.changesDictionary }
        set { relationships.changesDictionary = newValue }
    }
    /// ``toMany`` and ``toManyChanges``, by name or in slots.
    package var relationships: ToManyValues
    /// The version the context last saw (updates and deletions), or `nil` for an insert and for a change that
    /// ``keepsStoredValues`` of an object the context never loaded.
    public var expectedVersion: Int64?
    /// The change gives only members added to and removed from to-many relationships (``toManyChanges``); the
    /// object's attributes and to-ones are not given and stay as stored, and its version stays as it is. For an
    /// object the context never loaded, no version is checked (membership changes commute with other saves), but the
    /// object must still be in the store; for one it loaded, ``expectedVersion`` is checked as for any update. Sent
    /// only to a store that ``IncrementalStore/acceptsToManyChanges(for:)`` for each relationship named.
    public var keepsStoredValues = false

    /// All persistent attribute values (absent = NULL). Empty for a deletion.
    public var attributes: [String: AttributeValue] {
        get { values.attributeDictionary }
        set { values.attributeDictionary = newValue }
    }

    /// All to-one relationships (absent = none). Empty for a deletion.
    public var toOne: [String: ManagedObjectID] {
        get { values.toOneDictionary }
        set { values.toOneDictionary = newValue }
    }

    /// Creates a change.
    public init(objectID: ManagedObjectID, attributes: [String: AttributeValue] = [:], toOne: [String: ManagedObjectID] = [:],
                toMany: [String: [ManagedObjectID]] = [:], expectedVersion: Int64? = nil) {
        self.objectID = objectID
        self.values = .named(attributes: attributes, toOne: toOne)
        self.relationships = .named(members: toMany, changes: [:])
        self.expectedVersion = expectedVersion
    }

    /// A change whose values are in `entity`'s slot positions (persistent values only).
    package init(objectID: ManagedObjectID, entity: ManagedObjectModel.EntityHandle, attributes: AttributeSlots, toOne: ToOneSlots,
                 relationships: ToManyValues = .none, expectedVersion: Int64? = nil) {
        self.objectID = objectID
        self.values = .slots(entity, attributes: attributes, toOne: toOne)
        self.relationships = relationships
        self.expectedVersion = expectedVersion
    }

    /// Equal when every part is, values compared by name.
    public static func == (lhs: ObjectChange, rhs: ObjectChange) -> Bool {
        lhs.objectID == rhs.objectID && lhs.expectedVersion == rhs.expectedVersion && lhs.toMany == rhs.toMany
            && lhs.toManyChanges == rhs.toManyChanges && lhs.keepsStoredValues == rhs.keepsStoredValues
            && lhs.attributes == rhs.attributes && lhs.toOne == rhs.toOne
    }

    /// Hashes the ID and the expected version.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(objectID)
        hasher.combine(expectedVersion)
    }
}

/// Members added to and removed from a to-many relationship that was not loaded.
public struct ToManyChange: Sendable, Hashable {
    /// Objects that joined the relationship.
    public var added: [ManagedObjectID]
    /// Objects that left it.
    public var removed: [ManagedObjectID]

    /// Describes a change of membership.
    public init(added: [ManagedObjectID] = [], removed: [ManagedObjectID] = []) {
        self.added = added
        self.removed = removed
    }

    /// The change from members `old` to members `new`, each ID passed through `map` (which gives new objects their
    /// permanent IDs). A few members are compared pairwise, with no set built or hashed.
    package static func between(_ old: [ManagedObjectID], _ new: [ManagedObjectID],
                                map: (ManagedObjectID) -> ManagedObjectID) -> ToManyChange {
        if old.count * new.count <= 256 {
            return ToManyChange(added: new.filter { !old.contains($0) }.map(map), removed: old.filter { !new.contains($0) }.map(map))
        }
        let before = Set(old), after = Set(new)
        return ToManyChange(added: new.filter { !before.contains($0) }.map(map), removed: old.filter { !after.contains($0) }.map(map))
    }
}

/// The changes one save sends one store (Core Data's `NSSaveChangesRequest`).
public struct SaveChangesRequest: Sendable, Hashable {
    /// New objects.
    public var insertedObjects: [ObjectChange]
    /// Changed objects.
    public var updatedObjects: [ObjectChange]
    /// Deleted objects.
    public var deletedObjects: [ObjectChange]

    /// Creates a save request.
    public init(insertedObjects: [ObjectChange] = [], updatedObjects: [ObjectChange] = [], deletedObjects: [ObjectChange] = []) {
        self.insertedObjects = insertedObjects
        self.updatedObjects = updatedObjects
        self.deletedObjects = deletedObjects
    }
}

/// A store whose file other processes may change, that can say what changed since a point (the LMDB store).
public protocol ChangeTrackingStore: IncrementalStore {
    /// A number that grows with every save to the store, by any process; cheap to read.
    ///
    /// - Throws: An error if the store cannot be read.
    func currentChangeToken() throws -> UInt64

    /// What saves after `token` changed, and the token they bring the reader to; `nil` when the store no longer
    /// remembers that far back (refresh everything then).
    ///
    /// - Throws: An error if the store cannot be read.
    func changes(since token: UInt64) throws -> (changes: ContextChanges, token: UInt64)?
}
