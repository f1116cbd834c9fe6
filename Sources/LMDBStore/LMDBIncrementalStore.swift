import Foundation
import LMDB
import ObjectGraph
import Synchronization

/// The LMDB incremental store: each object one encoded row, secondary indexes kept in the same write transaction,
/// a fault answered by one `mdb_get` and one decode. Register it once with
/// ``LMDBIncrementalStore/register()``, then add it to a coordinator by its type, ``storeType``:
///
/// ```swift
/// LMDBIncrementalStore.register()
/// try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: "library.lmdb"))
/// ```
///
/// The file format is specified in `Docs/FORMAT.md`. Several processes may use one store file at once: each sees the
/// others' saves on its next read, and a save over a row another process changed is a conflict.
public final class LMDBIncrementalStore: ChangeTrackingStore, @unchecked Sendable {
    /// The type string the store is registered under.
    public static let storeType = "LMDB"
    /// The version of the file format this code writes; it reads this version and older.
    public static let formatVersion = 6
    /// The metadata key (of ``metadata`` and ``readMetadata(at:)``) whose value is the file's format version, as
    /// decimal digits.
    public static let formatVersionKey = "LMDBStoreFormatVersion"

    /// The store's type string.
    public let type = LMDBIncrementalStore.storeType
    /// The configuration whose entities the store holds.
    public let configurationName: String?
    /// The store file.
    public let url: URL?
    let model: ManagedObjectModel
    let layout: StoreLayout
    /// The options the store was opened with (read from its description's string options).
    public let storeOptions: Options
    let lock = NSLock()
    /// The open store, once ``loadMetadata()`` has opened it, as every read finds it (through ``open``): without
    /// taking `lock` (a fault took it once, for a retain). Every state the store has had is kept in ``openStates`` for
    /// the store's life, so one a reader has just loaded is never freed under it.
    private let currentState = Atomic<Unmanaged<OpenState>?>(nil)
    /// Every open state the store has had (guarded by `lock`); see ``currentState``.
    private var openStates: [OpenState] = []
    var metadataStorage: [String: String] = [:]
    /// The engine this store counts itself a user of in ``storesByEngine`` once loaded (guarded by `lock`).
    var claimedEngine: ObjectIdentifier?

    /// How many loaded stores of this process use each engine, by the engine's identity: a process shares one
    /// engine per file, so a migration (which other processes are kept out of by a lock) refuses to run while
    /// another store of this process has the file open with its old model.
    static let storesByEngine = Locked<[ObjectIdentifier: Int]>([:])

    deinit {
        if let claimedEngine { Self.release(claimedEngine) }
    }

    /// Counts one store fewer using `engine` in ``storesByEngine``.
    static func release(_ engine: ObjectIdentifier) {
        storesByEngine.withLock { counts in
            counts[engine, default: 1] -= 1
            if counts[engine] == 0 { counts[engine] = nil }
        }
    }
    /// How many entries ``plans`` and ``planShapes`` each keep: enough for a shape per object an app asks about
    /// (`department == %@` for each of a thousand departments; 512 made such a workload plan three fetches in four).
    static let planCacheCapacity = 2048

    /// The planner's analysis of each request shape seen lately (guarded by `lock`); emptied when it fills up.
    var planShapes: [PlanShape: QueryPlanner.Analysis] = [:]
    /// How many plans reused a cached analysis (for tests).
    var planShapeHits = 0

    /// What a plan's candidate paths depend on: everything in a request but the window, result type and batching.
    struct PlanShape: Hashable {
        let entityName: String
        let includesSubentities: Bool
        let predicate: FetchPredicate?
        let sort: [FetchSortDescriptor]
        /// Hashed once: a fetch looks its shape up in two tables.
        private let hash: Int

        init(entityName: String, includesSubentities: Bool, predicate: FetchPredicate?, sort: [FetchSortDescriptor]) {
            self.entityName = entityName
            self.includesSubentities = includesSubentities
            self.predicate = predicate
            self.sort = sort
            var hasher = Hasher()
            hasher.combine(entityName)
            hasher.combine(includesSubentities)
            hasher.combine(predicate)
            hasher.combine(sort)
            hash = hasher.finalize()
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(hash)
        }

        static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.hash == rhs.hash && lhs.entityName == rhs.entityName && lhs.includesSubentities == rhs.includesSubentities
                && lhs.predicate == rhs.predicate && lhs.sort == rhs.sort
        }
    }

    /// Plans made in reads, with their compiled row checks, by shape, window and result type (guarded by `lock`);
    /// each is run again only in a read of the commit it was costed in (``prepared(_:state:transaction:reusable:)``).
    /// When it fills up, the plans of older commits go; if that leaves it full, all of them.
    var plans: [PlanKey: PreparedPlan] = [:]
    /// How many fetches ran a kept plan (for tests).
    var planHits = 0
    /// See ``ReadAhead``.
    var readAhead: ReadAhead?
    /// How many batches of faults took a ``ReadAhead`` (for tests).
    var readAheadHits = 0

    /// What a whole plan depends on besides the data: the shape, and the parts of the request the planner costs
    /// (the window, the result type, whether objects come as faults).
    struct PlanKey: Hashable {
        let shape: PlanShape
        let fetchLimit: Int
        let fetchOffset: Int
        let resultType: FetchRequestResultType
        let returnsObjectsAsFaults: Bool

        init(shape: PlanShape, _ request: FetchRequest) {
            self.shape = shape
            fetchLimit = request.fetchLimit
            fetchOffset = request.fetchOffset
            resultType = request.resultType
            returnsObjectsAsFaults = request.returnsObjectsAsFaults
        }
    }

    /// Makes the object IDs of one open store's rows. A row an object reads a value at a time keeps this, not the
    /// whole ``OpenState``, so objects holding rows do not keep the store's environment open.
    final class RowIdentities: Sendable {
        let storeIdentifier: String
        /// The object ID namespace of each entity, by entity tag.
        let namespaces: [ObjectIDNamespace?]

        /// ``namespaces`` held unretained (a tag the layout does not have: an entity named "?"), so making an ID
        /// retains nothing. Namespaces live as long as the process.
        private let unretained: [Unmanaged<ObjectIDNamespace>]

        init(storeIdentifier: String, namespaces: [ObjectIDNamespace?]) {
            self.storeIdentifier = storeIdentifier
            self.namespaces = namespaces
            let unknown = ObjectIDNamespace.shared(entityName: "?", storeIdentifier: storeIdentifier)
            unretained = namespaces.map { Unmanaged.passUnretained($0 ?? unknown) }
        }

        /// The object ID namespace of the entity tagged `entityTag` (`nil` for a tag the layout does not have).
        @inline(__always)
        func namespace(tag entityTag: UInt16) -> ObjectIDNamespace? {
            Int(entityTag) < namespaces.count ? namespaces[Int(entityTag)] : nil
        }

        /// The object ID of the row under `key` of the entity tagged `entityTag`.
        @inline(__always)
        func objectID(entityTag: UInt16, key: UInt64) -> ManagedObjectID {
            let index = Int(entityTag)
            guard index < unretained.count else {
                return ManagedObjectID(namespace: .shared(entityName: "?", storeIdentifier: storeIdentifier), referenceObject: .integer(Int64(bitPattern: key)))
            }
            return ManagedObjectID(namespace: unretained[index], key: Int64(bitPattern: key))
        }
    }

    /// A class: every row view and fetch keeps it, and sharing it costs one retain.
    final class OpenState {
        let environment: any KeyValueEngine
        let databases: [String: Database]
        let storeIdentifier: String
        /// The object IDs of the store's rows: each entity's namespace, by entity tag.
        let identities: RowIdentities
        /// The row table of each entity (its root's), by entity tag: a fault finds it without building its name.
        let rowTables: [RowTable?]
        /// The maintainers of each entity's secondary tables, by entity tag: a save keeps its indexes without looking
        /// tables up by name.
        private let entityMaintainers: [EntityMaintainers?]
        /// Each entity's link tables (``StoreLayout/EntityLayout/linkTables``' order) and the tables its to-many
        /// relationships are read from, by entity tag.
        let linkTables: [[ToManyTable]]
        let toManyTables: [[String: (isLink: Bool, table: IndexTable)]]
        /// The handle of every table of row references (fetch indexes, to-one inverses, to-many members), by name,
        /// each knowing its values' size: what plan nodes read through.
        private let indexTables: [String: IndexTable]
        /// The row tables by name.
        private let rowTablesByName: [String: RowTable]
        /// The key counters, and the log of recent saves.
        let sequences: SequenceTable
        let changeLog: ChangeLog
        /// Each entity's layout by the identity of its object-ID namespace in this store: a save finds the layout
        /// of an ID without hashing its entity name.
        private let entitiesByNamespace: [ObjectIdentifier: StoreLayout.EntityLayout]
        private let layout: StoreLayout

        init(environment: any KeyValueEngine, databases: [String: Database], storeIdentifier: String, layout: StoreLayout) {
            self.environment = environment
            self.databases = databases
            self.storeIdentifier = storeIdentifier
            let count = Int(layout.entityNamesByTag.keys.max() ?? 0) + 1
            var namespaces = [ObjectIDNamespace?](repeating: nil, count: count)
            var rowTables = [RowTable?](repeating: nil, count: count)
            var entityMaintainers = [EntityMaintainers?](repeating: nil, count: count)
            var linkTables = [[ToManyTable]](repeating: [], count: count)
            var toManyTables = [[String: (isLink: Bool, table: IndexTable)]](repeating: [:], count: count)
            func table(_ name: String) -> Database {
                guard let table = databases[name] else { preconditionFailure("the layout names a database \(name) that was not opened") }
                return table
            }
            var indexTables: [String: IndexTable] = [:], rowTablesByName: [String: RowTable] = [:]
            for (name, kind) in layout.tables {
                switch kind {
                case .fetchIndex, .toOneIndex, .toMany: indexTables[name] = IndexTable(database: table(name))
                case .rows: rowTablesByName[name] = RowTable(database: table(name))
                case .metadata, .sequences, .changeLog, .uniqueness: break
                }
            }
            for entity in layout.entities.values {
                // A covering index's values go on with the attributes it stores.
                for (name, widths) in zip(entity.indexTables, entity.indexStoredWidths) where !widths.isEmpty {
                    indexTables[name] = IndexTable(database: table(name), valueSize: widths.reduce(IndexEntries.referenceSize, +))
                }
            }
            self.indexTables = indexTables
            self.rowTablesByName = rowTablesByName
            var entitiesByNamespace: [ObjectIdentifier: StoreLayout.EntityLayout] = [:]
            for (tag, name) in layout.entityNamesByTag {
                let namespace = ObjectIDNamespace.shared(entityName: name, storeIdentifier: storeIdentifier)
                namespaces[Int(tag)] = namespace
                guard let entity = layout.entity(name) else { continue }
                rowTables[Int(tag)] = rowTablesByName[StoreLayout.rowsDatabase(root: entity.root)]
                entityMaintainers[Int(tag)] = EntityMaintainers(entity) { table($0) }
                linkTables[Int(tag)] = zip(entity.linkTables, entity.linkChecks).map { ToManyTable(database: table($0), isOrdered: $1.isOrdered) }
                toManyTables[Int(tag)] = entity.toManyTables.mapValues { source in
                    // A link or members table, or the inverse's to-one table: each a table of references, opened above.
                    guard let table = indexTables[source.table] else { preconditionFailure("the layout names no table of references \(source.table)") }
                    return (source.isLink, table)
                }
                entitiesByNamespace[ObjectIdentifier(namespace)] = entity
            }
            identities = RowIdentities(storeIdentifier: storeIdentifier, namespaces: namespaces)
            self.rowTables = rowTables
            self.entityMaintainers = entityMaintainers
            self.linkTables = linkTables
            self.toManyTables = toManyTables
            self.entitiesByNamespace = entitiesByNamespace
            self.layout = layout
            sequences = SequenceTable(database: table(StoreLayout.sequenceDatabase))
            changeLog = ChangeLog(sequences: sequences, database: table(StoreLayout.changesDatabase))
        }

        /// The layout of the entity an ID names (IDs of this store by their namespace, others by entity name).
        func entity(of objectID: ManagedObjectID) -> StoreLayout.EntityLayout? {
            entitiesByNamespace[objectID.namespaceIdentity] ?? layout.entity(objectID.entityName)
        }

        /// The maintainers of `entity`'s secondary tables.
        func maintainers(of entity: StoreLayout.EntityLayout) -> EntityMaintainers {
            guard Int(entity.tag) < entityMaintainers.count, let maintainers = entityMaintainers[Int(entity.tag)] else {
                preconditionFailure("the layout's secondary tables of \(entity.name) were not opened")
            }
            return maintainers
        }

        /// The table of row references named `name` (a fetch index's, a to-one's inverse, a to-many's members).
        func indexTable(_ name: String) -> IndexTable {
            guard let table = indexTables[name] else { preconditionFailure("the layout names no table of references \(name)") }
            return table
        }

        /// The inverse of a to-one relationship, `toone/…` named `name`.
        func toOneTable(_ name: String) -> ToOneTable { ToOneTable(index: indexTable(name)) }

        /// The row table named `name` (`rows/<Root>`).
        func rowTable(_ name: String) -> RowTable {
            guard let table = rowTablesByName[name] else { preconditionFailure("the layout names no row table \(name)") }
            return table
        }

        /// The row table holding `entity`'s rows.
        func rows(of entity: StoreLayout.EntityLayout) -> RowTable {
            guard Int(entity.tag) < rowTables.count, let table = rowTables[Int(entity.tag)] else {
                preconditionFailure("the layout's row table of \(entity.name) was not opened")
            }
            return table
        }
    }

    /// Registers the store type with every coordinator (safe to call more than once).
    public static func register() {
        PersistentStoreCoordinator.registerStoreType(storeType, factory: { try LMDBIncrementalStore(description: $0) },
                                                     metadataReader: { try readMetadata(at: $0) })
    }

    /// Creates a store; used by the coordinator. The description's string options are read as ``Options``
    /// (`"mapSize"`, `"maxMapSize"`, `"durability"`, `"readAhead"`, `"createInForeignFile"`); a known option with a
    /// value it cannot take fails with ``ManagedObjectContextError/Code/wrongValueType`` naming it, before any file is
    /// touched.
    public init(description: PersistentStoreCoordinator.StoreDescription) throws {
        guard let url = description.url, url.isFileURL else {
            throw ManagedObjectContextError(.storeUnusable, message: "the LMDB store needs a file URL")
        }
        self.url = url
        self.model = description.model
        self.configurationName = description.configurationName
        self.storeOptions = try Options(description.options)
        self.layout = StoreLayout(model: description.model)
    }

    /// The store's metadata: UUID, type, format version and model version hash.
    public var metadata: [String: String] { lock.withLock { metadataStorage } }

    /// The store's UUID, kept since the store was loaded (no copy of the metadata per call: IDs are built from it).
    public var identifier: String { currentState.load(ordering: .acquiring)?.takeUnretainedValue().storeIdentifier ?? "" }

    /// Makes `state` the open store every read finds; `lock` must be held. Kept plans and rows go: they are known by
    /// the commit they were read in, and another file (a backup put back, say) may reuse the same commit numbers.
    func publish(_ state: OpenState) {
        openStates.append(state)
        currentState.store(.passUnretained(state), ordering: .releasing)
        plans.removeAll()
        readAhead = nil
    }

    var open: OpenState {
        get throws {
            guard let state = currentState.load(ordering: .acquiring)?.takeUnretainedValue() else {
                throw ManagedObjectContextError(.storeUnusable, message: "the LMDB store at \(url?.path ?? "?") has not been loaded")
            }
            return state
        }
    }

    func database(_ name: String, in state: OpenState) -> Database {
        guard let database = state.databases[name] else { preconditionFailure("the layout names a database \(name) that was not opened") }
        return database
    }

    /// The object ID of a row.
    @inline(__always)
    func objectID(entityTag: UInt16, key: UInt64, in state: OpenState) -> ManagedObjectID {
        state.identities.objectID(entityTag: entityTag, key: key)
    }

    /// The row key of an object of this store.
    func key(of objectID: ManagedObjectID) throws(ManagedObjectContextError) -> UInt64 {
        guard let value = objectID.integerKey, value > 0, !objectID.isTemporaryID else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not an object of an LMDB store")
        }
        return UInt64(value)
    }

    static func keyBytes(_ key: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(8)
        TupleEncoding.appendBigEndian(key, to: &bytes)
        return bytes
    }

    func storeError(_ error: any Error, _ what: String) -> ManagedObjectContextError {
        if let error = error as? ManagedObjectContextError { return error }
        return ManagedObjectContextError(.storeUnusable, message: "\(what) (\(url?.path ?? "?"))", underlying: error)
    }

    // MARK: - Faults

    /// `false`: a row is read in place from the memory map, so the coordinator's cache would save a read only when
    /// two contexts load the same object, and would cost each object a context loads about 3 000 instructions of
    /// locked dictionary work (a sixth of a fault). Without it every fault reads the store's latest row; a fetch that
    /// returns objects a context loaded before the last save reads their versions (``versionsOfObjects(with:)``) to
    /// refresh the stale ones.
    public var usesCoordinatorRowCache: Bool { false }

    /// Does nothing: the store keeps nothing per object a context holds (see
    /// ``IncrementalStore/managedObjectContextDidRegisterObject(with:)``).
    public func managedObjectContextDidRegisterObject(with objectID: ManagedObjectID) {}

    /// One `mdb_get` and one decode; see ``IncrementalStore/newValuesForObject(with:)``.
    public func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode {
        let state = try open
        guard let entity = state.entity(of: objectID) else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) names an entity the model does not have")
        }
        let rows = state.rows(of: entity)
        let key = try key(of: objectID)
        // No closure: the read is begun and ended here, and what it found comes back as an enum of concrete cases
        // (a generic optional result was copied through value witnesses, ≈ 700 instructions a fault; a closure
        // called through the seam copied its captures, ≈ 400).
        let transaction = try state.environment.beginRead()
        let lookup: FaultLookup?
        do {
            defer { transaction.endRead() }
            lookup = try faultLookup(key: key, rows: rows, objectID: objectID, tag: entity.tag, state: state, transaction: transaction)
        }
        switch lookup {
        case .found(let node)?:
            return node
        case nil:
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store")
        case .otherEntity(let tag)?:
            let actual = layout.entityNamesByTag[tag] ?? "another entity"
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) is not in the store: the row with its key is a \(actual)")
        }
    }

    /// What a fault's read found: a node, or a row of another entity under the key.
    enum FaultLookup { case otherEntity(UInt16), found(IncrementalStoreNode) }

    /// A fault's read, in `transaction`: the row under `key`, checked and copied into a node. (The bytes are
    /// borrowed, not lent to a closure: a generic closure's result went through value witnesses on every fault.)
    func faultLookup(key: UInt64, rows: RowTable, objectID: ManagedObjectID, tag: UInt16, state: OpenState,
                     transaction: any KeyValueTransaction) throws -> FaultLookup? {
        guard let bytes = try rows.bytes(key: key, in: transaction) else { return nil }
        do throws(RowDecodingError) {
            let row = try EncodedRow(bytes, layout: layout, checkingFields: false)
            // An ID naming a sub-entity with the key of a parent-entity row (or the other way round) is no object.
            guard row.entityTag == tag else { return .otherEntity(row.entityTag) }
            return .found(try node(objectID, row, in: state))
        } catch {
            throw unreadableRow(of: objectID, error)
        }
    }

    /// A node backed by a copy of a row whose header and checksum are checked: every value is checked first, then
    /// the bytes are copied by `writer` (into a block of rows, ``LoadedRows``), and an object taking the node decodes
    /// the values it reads.
    func node(_ objectID: ManagedObjectID, _ row: EncodedRow, copyingInto writer: inout LoadedRowWriter) throws(RowDecodingError) -> IncrementalStoreNode {
        try row.checkEveryValue()
        return IncrementalStoreNode(objectID: objectID, entity: row.entity.handle, row: writer.copy(row), version: Int64(bitPattern: row.version))
    }

    /// ``node(_:_:copyingInto:)`` for a lone fault: the row copied into a block of its own size.
    func node(_ objectID: ManagedObjectID, _ row: EncodedRow, in state: OpenState) throws(RowDecodingError) -> IncrementalStoreNode {
        try row.checkEveryValue()
        return IncrementalStoreNode(objectID: objectID, entity: row.entity.handle,
                                    row: LoadedRows.single(row, identities: state.identities, entities: layout.entitiesByTag),
                                    version: Int64(bitPattern: row.version))
    }

    /// A writer of the rows one read of `state` hands over.
    func rowWriter(_ state: OpenState) -> LoadedRowWriter {
        LoadedRowWriter(identities: state.identities, entities: layout.entitiesByTag)
    }

    /// A node from a decoded row (of the entity `entity`).
    func node(_ objectID: ManagedObjectID, _ row: StoredRow, in state: OpenState) -> IncrementalStoreNode {
        guard let entity = layout.entity(tag: row.entityTag) else {
            return IncrementalStoreNode(objectID: objectID, attributes: [:], version: Int64(bitPattern: row.version))
        }
        var attributes = entity.handle.newAttributes(), toOne = entity.handle.newToOne()
        for (id, field) in row.fields.enumerated() {
            let position = entity.slotPositions[id]
            guard position >= 0 else { continue }
            switch field {
            case nil: continue
            case .attribute(let value)?: attributes[position] = value
            case .reference(let reference)?: toOne[position] = self.objectID(entityTag: reference.entityTag, key: reference.key, in: state)
            }
        }
        return IncrementalStoreNode(objectID: objectID, entity: entity.handle, attributes: attributes, toOne: toOne, version: Int64(bitPattern: row.version))
    }

    /// A to-one from the row; a to-many as one range read of the inverse's index or the link table.
    public func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
        if !relationship.isToMany {
            return try newValuesForObject(with: objectID).toOne[relationship.name].map { [$0] } ?? []
        }
        let state = try open
        let key = try key(of: objectID)
        return try state.environment.read { transaction in
            try relatedKeys(relationship, of: objectID, key: key, state: state, transaction: transaction)
                .map { self.objectID(entityTag: $0.entityTag, key: $0.key, in: state) }
        }
    }

    /// The members of a to-many relationship, in order for ordered ones: one range read of the table the layout
    /// names for it.
    func relatedKeys(_ relationship: RelationshipDescription, of objectID: ManagedObjectID, key: UInt64, state: OpenState,
                     transaction: any KeyValueTransaction) throws -> [StoredRow.Reference] {
        guard let entity = state.entity(of: objectID), let source = state.toManyTables[Int(entity.tag)][relationship.name] else { return [] }
        // Link values are target key (8 bytes) + target entity tag (2 bytes); a to-one index keeps one value per
        // source under the destination's key, source key + entity tag: both read the same way.
        return try source.table.references(under: key, in: transaction)
    }

    /// Many rows in one read transaction; see ``IncrementalStore/newValuesForObjects(with:)``.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID]) throws -> [IncrementalStoreNode] {
        var nodes = [IncrementalStoreNode?](repeating: nil, count: objectIDs.count)
        try newValuesForObjects(with: objectIDs) { index, node in nodes[index] = node }
        // Moved out, not copied (a copy retains each node's values and releases them with the array).
        var found: [IncrementalStoreNode] = []
        found.reserveCapacity(nodes.count)
        for index in nodes.indices { if let node = nodes[index].take() { found.append(node) } }
        return found
    }

    /// Each row checked and handed over as it is read, in row-key order, in one read transaction; see
    /// ``IncrementalStore/newValuesForObjects(with:forEach:)``.
    public func newValuesForObjects(with objectIDs: [ManagedObjectID], forEach body: (Int, IncrementalStoreNode) -> Void) throws {
        let state = try open
        var writer = rowWriter(state)
        try state.environment.read { transaction in
            var unread = objectIDs
            var positions: [Int]?
            // Rows a fetch of faults read in this very commit are handed over as they were read.
            if let ahead = takeReadAhead(for: objectIDs, snapshot: transaction.snapshotNumber) {
                var rest: [Int] = []
                for index in objectIDs.indices {
                    if let node = ahead.nodes[objectIDs[index]] { body(index, node) } else { rest.append(index) }
                }
                guard !rest.isEmpty else { return }
                unread = rest.map { objectIDs[$0] }
                positions = rest
            }
            try forEachStoredRow(of: unread, state: state, transaction: transaction) { position, row in
                let index = positions?[position] ?? position
                do throws(RowDecodingError) {
                    body(index, try node(objectIDs[index], row, copyingInto: &writer))
                } catch {
                    throw ManagedObjectContextError(.storeUnusable, message: "the row of \(objectIDs[index]) cannot be read: \(error.reason); the store file is corrupted")
                }
            }
        }
    }

    /// The kept ``ReadAhead`` if it was read in `snapshot` and holds the first of `objectIDs` (then it is taken);
    /// one of an older commit is dropped, since no read will see that commit again.
    private func takeReadAhead(for objectIDs: [ManagedObjectID], snapshot: UInt64) -> ReadAhead? {
        guard let first = objectIDs.first else { return nil }
        return lock.withLock { () -> ReadAhead? in
            guard let ahead = readAhead else { return nil }
            guard ahead.snapshot == snapshot else {
                if ahead.snapshot < snapshot { readAhead = nil }
                return nil
            }
            guard ahead.nodes[first] != nil else { return nil }
            readAhead = nil
            readAheadHits += 1
            return ahead
        }
    }

    /// The rows of a fetch of faults that read them anyway (to sort or check them), as nodes, with the commit they
    /// were read in: the first batch of faults to fire in a read of the same commit takes them (whatever it needs
    /// of them) instead of reading those rows again. One at a time per store, the latest fetch's (guarded by `lock`).
    struct ReadAhead {
        /// The most rows kept: a fetch's window of faults up to one fault batch.
        static let capacity = 100
        let snapshot: UInt64
        let nodes: [ManagedObjectID: IncrementalStoreNode]
    }

    /// The versions of many rows in one read transaction, read from each row's header (its checksum checked, its
    /// fields not decoded); see ``IncrementalStore/versionsOfObjects(with:)``.
    public func versionsOfObjects(with objectIDs: [ManagedObjectID]) throws -> [Int64?] {
        let state = try open
        return try state.environment.read { transaction in
            var versions = [Int64?](repeating: nil, count: objectIDs.count)
            try forEachStoredRow(of: objectIDs, state: state, transaction: transaction) { index, row in
                versions[index] = Int64(bitPattern: row.version)
            }
            return versions
        }
    }

    /// Calls `body` with the position in `objectIDs` and the row of each of them that is an object of this store
    /// (its checksum and header checked, its fields not), in row-key order table by table: one cursor per table
    /// moves forward, so most lookups search the leaf page of the one before instead of descending from the root.
    /// IDs in key order (a fetch's result, a relationship's window) are read as they come; others are sorted first.
    /// An ID naming another entity of the table than its row's is no object.
    func forEachStoredRow(of objectIDs: [ManagedObjectID], state: OpenState, transaction: any KeyValueTransaction,
                          _ body: (Int, EncodedRow) throws -> Void) throws {
        var wanted: [(index: Int, key: UInt64, entity: StoreLayout.EntityLayout)] = []
        wanted.reserveCapacity(objectIDs.count)
        var inOrder = true
        var lookup = KeyLookup(state: state, family: nil)
        for (index, id) in objectIDs.enumerated() {
            guard let key = lookup.key(of: id), let entity = lookup.entity else { continue }
            if let last = wanted.last, last.entity.root != entity.root || last.key >= UInt64(key) { inOrder = false }
            wanted.append((index, UInt64(key), entity))
        }
        if !inOrder { wanted.sort { ($0.entity.root, $0.key) < ($1.entity.root, $1.key) } }
        var start = 0
        while start < wanted.count {
            let root = wanted[start].entity.root
            var end = start + 1
            while end < wanted.count && wanted[end].entity.root == root { end += 1 }
            let rows = state.rows(of: wanted[start].entity)
            try rows.database.withCursor(in: transaction) { cursor in
                for (index, key, entity) in wanted[start..<end] {
                    guard let row = try encodedRow(key: key, in: rows, cursor: cursor, naming: "of \(objectIDs[index])") else { continue }
                    if row.entityTag == entity.tag { try body(index, row) }
                }
            }
            start = end
        }
    }

    /// One relationship of many objects in one read transaction; see
    /// ``IncrementalStore/newValues(forRelationship:forObjectsWith:)``.
    public func newValues(forRelationship relationship: RelationshipDescription, forObjectsWith objectIDs: [ManagedObjectID]) throws -> [ManagedObjectID: [ManagedObjectID]] {
        let state = try open
        return try state.environment.read { transaction in
            var result: [ManagedObjectID: [ManagedObjectID]] = [:]
            for id in objectIDs {
                if relationship.isToMany {
                    result[id] = try relatedKeys(relationship, of: id, key: try key(of: id), state: state, transaction: transaction)
                        .map { objectID(entityTag: $0.entityTag, key: $0.key, in: state) }
                } else if let row = try readRow(id, state: state, transaction: transaction) {
                    let field = layout.entity(tag: row.entityTag)?.fieldIndex[relationship.name]
                    result[id] = field.flatMap(row.reference).map { [objectID(entityTag: $0.entityTag, key: $0.key, in: state)] } ?? []
                }
            }
            return result
        }
    }

    /// Unordered to-many relationships whose inverse is a to-one are read from the inverse's index, never stored.
    public func derivesRelationship(_ relationship: RelationshipDescription) -> Bool {
        relationship.isToMany && !StoreLayout.needsLinkTable(relationship, model)
    }

    /// `true` for unordered to-many relationships kept in link tables: an added member is one link entry written, a
    /// removed one is one deleted, and nothing is read.
    public func acceptsToManyChanges(for relationship: RelationshipDescription) -> Bool {
        relationship.isToMany && !relationship.isOrdered && StoreLayout.needsLinkTable(relationship, model)
    }

    // MARK: - Permanent IDs

    /// Keys from one sequence per root entity, allocated in one short write transaction.
    public func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] {
        let state = try open
        // Each object's key sequence (its root entity's, by position in `roots`) and ID namespace, looked up once per
        // run of one entity; counted per root without hashing a name per object.
        var last: (name: String, root: Int, namespace: ObjectIDNamespace)?
        var roots: [String] = []
        var counts: [UInt64] = []
        let targets = objects.map { object -> (root: Int, namespace: ObjectIDNamespace) in
            if last?.name != object.entityName {
                let entity = layout.entity(object.entityName)
                let namespace = entity.flatMap { state.identities.namespace(tag: $0.tag) }
                let root = entity?.root ?? object.entityName
                let position = roots.firstIndex(of: root) ?? roots.count
                if position == roots.count {
                    roots.append(root)
                    counts.append(0)
                }
                last = (object.entityName, position, namespace ?? .shared(entityName: object.entityName, storeIdentifier: state.storeIdentifier))
            }
            counts[last!.root] += 1
            return (last!.root, last!.namespace)
        }
        // The first key of each root's run: its sequence's counter, moved past the keys handed out here.
        var next = try state.environment.write { transaction -> [UInt64] in
            try roots.indices.map { position in
                let current = try state.sequences.counter(roots[position], in: transaction)
                try state.sequences.setCounter(roots[position], to: current + counts[position], in: transaction)
                return current + 1
            }
        }
        var ids: [ManagedObjectID] = []
        ids.reserveCapacity(objects.count)
        for target in targets {
            ids.append(ManagedObjectID(namespace: target.namespace, referenceObject: .integer(Int64(next[target.root]))))
            next[target.root] += 1
        }
        return ids
    }
}

extension LMDBIncrementalStore {
    /// Encodes a string and an integer as one index key (the tuple encoding) and returns its length, for the key-codec
    /// microbenchmark.
    @_spi(Benchmarks)
    public static func encodeKeyForBenchmark(_ text: String, _ number: Int64) -> Int {
        var key: [UInt8] = []
        TupleEncoding.append(.string(text), to: &key)
        TupleEncoding.append(.integer(number), to: &key)
        return key.count
    }

    /// The floor a fault is measured against: one read transaction, one `mdb_get` of the first root table's row
    /// with `rawKey` from `root`'s table, one decode — no object ID, no node. Returns the number of decoded attributes.
    @_spi(Benchmarks)
    public func decodeRowForBenchmark(rawKey: UInt64, root: String) throws -> Int {
        let state = try open
        let rows = database(StoreLayout.rowsDatabase(root: root), in: state)
        return try state.environment.read { transaction in
            try Self.keyBytes(rawKey).withUnsafeBytes { key in
                try rows.withValue(forKey: key, in: transaction) { bytes in try RowCodec.decode(bytes, layout: layout).valueCount }
            }
        } ?? 0
    }
}

extension LMDBIncrementalStore {
    /// The floor a fetch of loaded objects is measured against: reads and fully decodes the rows under `rawKeys`
    /// in `root`'s table, in the caller's read transaction; returns how many rows it decoded.
    @_spi(Benchmarks)
    public func decodeRowsForBenchmark(rawKeys: [UInt64], root: String, in transaction: Transaction) throws -> Int {
        let rows = database(StoreLayout.rowsDatabase(root: root), in: try open)
        var decoded = 0
        for key in rawKeys {
            let fields = try withUnsafeBytes(of: key.bigEndian) { key in
                try rows.withValue(forKey: key, in: transaction) { bytes in try RowCodec.decode(bytes, layout: layout).valueCount }
            }
            if fields != nil { decoded += 1 }
        }
        return decoded
    }

    /// The floor an indexed fetch or count is measured against: the environment, the table of the fetch index
    /// `index` declared on `entity`, and the key range of its integer values `lower...upper` — to be walked or
    /// counted with the `LMDB` module alone (each value: row key, then entity tag).
    @_spi(Benchmarks)
    public func integerIndexRangeForBenchmark(entity: String, index: String, from lower: Int64, through upper: Int64) throws
        -> (environment: Environment, database: Database, range: KeyRange)
    {
        let state = try open
        guard let environment = state.environment as? Environment else {
            throw ManagedObjectContextError(.storeUnusable, message: "the store is not on LMDB: the raw-LMDB floor cannot be measured")
        }
        var low: [UInt8] = [], high: [UInt8] = []
        TupleEncoding.append(.integer(lower), to: &low)
        TupleEncoding.append(.integer(upper), to: &high)
        return (environment, database(StoreLayout.indexDatabase(entity: entity, index: index), in: state),
                KeyRange(lower: .inclusive(low), upper: .inclusive(high)))
    }
}

extension LMDBIncrementalStore {
    /// The floor a batch insert into `entity` is measured against: the environment and every table such an insert
    /// writes — the root's rows, the entity's index, uniqueness and to-one tables, its link tables and, for a
    /// many-to-many, the inverse's — by name, to be copied and put again with the `LMDB` module alone.
    @_spi(Benchmarks)
    public func batchInsertTablesForBenchmark(entity name: String) throws -> (environment: Environment, tables: [(name: String, database: Database)]) {
        let state = try open
        guard let environment = state.environment as? Environment, let entity = layout.entity(name) else {
            throw ManagedObjectContextError(.storeUnusable, message: "the store is not on LMDB or has no entity \(name): the raw-LMDB floor cannot be measured")
        }
        var names = [StoreLayout.rowsDatabase(root: entity.root)] + entity.indexTables + entity.uniqueTables + entity.toOneTables + entity.linkTables
        for relationship in entity.linkRelationships {
            guard let inverse = model.inverse(of: relationship), inverse.isToMany,
                  let table = layout.entity(relationship.destinationEntityName)?.toManyTables[inverse.name], table.isLink else { continue }
            names.append(table.table)
        }
        var seen: Set<String> = []
        names = names.filter { seen.insert($0).inserted }
        return (environment, names.map { ($0, database($0, in: state)) })
    }
}

// MARK: - Changes from other processes

extension LMDBIncrementalStore {
    /// The number of the last save recorded in the change log (by any process). One read of the `seq` table.
    public func currentChangeToken() throws -> UInt64 {
        let state = try open
        return try state.environment.read { try state.changeLog.lastNumber(in: $0) }
    }

    /// The objects saves after `token` inserted, updated and deleted (an object deleted later counts only as
    /// deleted), from the change log; `nil` when the log no longer reaches back to `token`.
    public func changes(since token: UInt64) throws -> (changes: ContextChanges, token: UInt64)? {
        let state = try open
        let current = try currentChangeToken()
        guard token < current else { return (ContextChanges(), current) }
        return try state.environment.read { transaction -> (changes: ContextChanges, token: UInt64)? in
            var changes = ContextChanges()
            var expected = token + 1
            var complete = true
            try state.changeLog.forEachSave(after: token, through: current, in: transaction) { number, records in
                if number != expected { complete = false; return false }
                expected += 1
                var offset = 0
                while offset + 11 <= records.count {
                    let kind = records[offset]
                    let tag = UInt16(records[offset + 1]) << 8 | UInt16(records[offset + 2])
                    let id = objectID(entityTag: tag, key: TupleEncoding.readBigEndianUInt64(records, at: offset + 3), in: state)
                    switch kind {
                    case 1: changes.inserted.insert(id)
                    case 2: if !changes.inserted.contains(id) { changes.updated.insert(id) }
                    default:
                        changes.inserted.remove(id)
                        changes.updated.remove(id)
                        changes.deleted.insert(id)
                    }
                    offset += 11
                }
                return true
            }
            guard complete, expected == current + 1 else { return nil }
            return (changes, current)
        }
    }
}
