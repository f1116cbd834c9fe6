import Foundation

/// An object of the graph: an instance of an entity, living in a ``ManagedObjectContext`` (Core Data's
/// `NSManagedObject`).
///
/// Objects are created by their context — ``ManagedObjectContext/insertNewObject(forEntityName:)`` for new ones,
/// fetches and ``ManagedObjectContext/object(with:)`` for stored ones, which arrive as faults whose values load on
/// first use. Read and write values by key (``value(forKey:)``, ``setValue(_:forKey:)``, `object["name"]`) or, in
/// a subclass registered for the entity, through typed keys:
///
/// ```swift
/// final class Employee: ManagedObject {
///     static let name = AttributeKey<String>("name")
///     static let department = ToOneKey<Department>("department")
///     var name: String? { get { self[Self.name] } set { self[Self.name] = newValue } }
///     var department: Department? { get { self[Self.department] } set { self[Self.department] = newValue } }
/// }
/// ```
///
/// An object belongs to its context's isolation domain: use it only where its context may be used.
open class ManagedObject: Hashable, CustomStringConvertible {
    /// What a context passes to ``init(construction:)``; opaque to subclasses.
    public struct Construction {
        let entity: ManagedObjectModel.EntityHandle
        let model: ManagedObjectModel
        let objectID: ManagedObjectID
        let context: ManagedObjectContext
    }

    /// The object's entity, shared with every object of the entity.
    let handle: ManagedObjectModel.EntityHandle
    /// The object's entity.
    public var entity: EntityDescription { handle.description }
    /// The name of the object's entity.
    public var entityName: String { handle.name }
    /// The model the entity belongs to.
    public let model: ManagedObjectModel
    /// The object's ID: temporary until the object is saved.
    @exclusivity(unchecked) public internal(set) var objectID: ManagedObjectID
    /// The context the object lives in; `nil` once it is deleted and saved, or the context is gone.
    public internal(set) var managedObjectContext: ManagedObjectContext? {
        get { link?.context }
        set { link = newValue?.link }
    }
    /// The context's shared link (`nil` once the object left its context).
    @exclusivity(unchecked) private var link: ContextLink?

    // MARK: State (kept by the context)

    enum Lifecycle { case clean, inserted, deleted }

    // State kept by the context is `@exclusivity(unchecked)`, for the reason given on `ManagedObjectContext.registered`.

    @exclusivity(unchecked) var lifecycle: Lifecycle = .clean
    @exclusivity(unchecked) var isFaultStorage = true
    /// The stored row the object's persistent attributes and to-ones come from, while they are read from it (see
    /// ``StoredRowValues``): a value is decoded when first read, and the row's values become the object's own
    /// arrays (``materialize()``) before anything but a read of one value needs them. `nil` otherwise.
    @exclusivity(unchecked) var row: SharedRow?
    /// While ``row`` is set: the one value decoded from it that is kept (a string, data, decimal or URI, whose
    /// decoding allocates), in the object itself — no array to make and free — and its slot index
    /// (``ManagedObjectModel/Slot/index``; -1 for none).
    @exclusivity(unchecked) var rowKept: AttributeValue?
    @exclusivity(unchecked) var rowKeptIndex = -1
    /// Attribute values in the entity's attribute positions; empty (no allocation) until the object loads its
    /// values or is written to. While ``row`` is set it holds only transient values. Read one through
    /// ``attributeValue(_:)``, the whole array through ``attributes``.
    @exclusivity(unchecked) var attributeStorage: AttributeSlots = []
    /// To-one relationships in the entity's to-one positions; empty until loaded or written, and while ``row`` is
    /// set. Read one through ``toOneID(_:)``, the whole array through ``toOne``.
    @exclusivity(unchecked) var toOneStorage: ToOneSlots = []
    /// To-many relationships' members in the entity's to-many positions (`nil`: not loaded); empty until one loads
    /// or is written. Read one through ``loadedMembers(_:)`` or ``relatedIDs(_:)``.
    @exclusivity(unchecked) var toMany = ToManySlots()
    /// The committed snapshot; while ``row`` is set its attributes and to-ones are empty and stand for the row's.
    @exclusivity(unchecked) var committedStorage: Snapshot?
    /// The properties changed since the last save (by slot index).
    @exclusivity(unchecked) var changedSlots = SlotSet()
    @exclusivity(unchecked) var version: Int64 = 0
    /// The coordinator's row generation before the row the object shows was read or last found current (0:
    /// unknown). While the generation has not moved, a fetch returning the object need not check it for staleness.
    @exclusivity(unchecked) var readGeneration: UInt64 = 0
    /// The faults that load with this one, in one store call, when it fires (see ``FaultBatch``).
    @exclusivity(unchecked) var faultBatch: FaultBatch?
    /// State few objects ever have, out of line so that the thousands of faults a fetch or a relationship hands out
    /// stay small and cheap to make and free; made on the first write of one of its parts.
    @exclusivity(unchecked) var extras: Extras?
    /// Whether the context has registered the object with its coordinator, which keeps the object's stored row
    /// cached while some context uses it: done when the object first loads its values, not for faults that never
    /// fire (a to-many relationship or a fetch of IDs hands out thousands).
    @exclusivity(unchecked) var holdsRow = false
    /// The context's ``ManagedObjectContext/reportGeneration`` when the object last reported a change to it.
    @exclusivity(unchecked) var reportedGeneration: UInt64 = 0

    /// See ``extras``.
    final class Extras {
        /// Values of transient attributes of undefined type (any Swift value).
        var transientObjects = [String: Any]()
        /// Fetched properties' results (as IDs, so that no object keeps another alive), kept until the object is
        /// refreshed or turned into a fault.
        var fetchedResults = [String: [ManagedObjectID]]()
        /// Inverse-maintenance changes to to-many relationships that are still faults (only for relationships the
        /// store derives from their inverse or takes as added and removed members), in to-many positions: applied
        /// when the relationship loads, dropped after a save.
        @exclusivity(unchecked) var pendingToMany = PendingToManySlots()
        /// See ``ManagedObject/faultError``.
        var faultError: ManagedObjectContextError?
    }

    /// ``extras``, made if the object has none yet.
    private var madeExtras: Extras {
        if let extras { return extras }
        let made = Extras()
        extras = made
        return made
    }

    /// See ``Extras/transientObjects``.
    var transientObjects: [String: Any] {
        get { extras?.transientObjects ?? [:] }
        _modify { yield &madeExtras.transientObjects }
    }
    /// See ``Extras/fetchedResults``.
    var fetchedResults: [String: [ManagedObjectID]] {
        get { extras?.fetchedResults ?? [:] }
        _modify { yield &madeExtras.fetchedResults }
    }
    /// See ``Extras/pendingToMany``.
    var pendingToMany: PendingToManySlots {
        get { extras?.pendingToMany ?? [] }
        _modify { yield &madeExtras.pendingToMany }
    }

    /// The members recorded as added to and removed from the unloaded to-many in `slot`, if any.
    func pendingMembers(_ slot: ManagedObjectModel.Slot) -> PendingMembers? {
        extras?.pendingToMany[slot: slot.position]
    }

    /// Records `change` on the recorded members of the unloaded to-many in `slot`.
    func recordPending(_ slot: ManagedObjectModel.Slot, _ change: (inout PendingMembers) -> Void) {
        let extras = madeExtras
        if extras.pendingToMany.isEmpty { extras.pendingToMany = handle.newPendingToMany() }
        if extras.pendingToMany[slot.position] == nil { extras.pendingToMany[slot.position] = PendingMembers() }
        change(&extras.pendingToMany[slot.position]!)
    }

    /// The IDs the to-many in `slot` holds, if they are loaded.
    @inline(__always)
    func loadedMembers(_ slot: ManagedObjectModel.Slot) -> [ManagedObjectID]? {
        toMany[slot: slot.position]
    }

    /// What the to-many in `slot` held when it was last read from the store or saved (`nil` when it was not read).
    func committedMembers(_ slot: ManagedObjectModel.Slot) -> [ManagedObjectID]? {
        committedStorage?.toMany[slot: slot.position]
    }

    /// Sets what the to-many in `slot` holds (`nil`: not loaded).
    func setMembers(_ ids: [ManagedObjectID]?, _ slot: ManagedObjectModel.Slot) {
        toMany.setMembers(ids, slot, of: handle)
    }
    /// Why the last attempt to load the object's values failed (the object was deleted elsewhere).
    public internal(set) var faultError: ManagedObjectContextError? {
        get { extras?.faultError }
        set { if newValue != nil || extras != nil { madeExtras.faultError = newValue } }
    }

    /// The attribute values in the entity's attribute positions (the row's decoded first, if the object reads one).
    var attributes: AttributeSlots {
        get {
            materialize()
            return attributeStorage
        }
        _modify {
            materialize()
            yield &attributeStorage
        }
    }

    /// The to-ones in the entity's to-one positions (the row's decoded first, if the object reads one).
    var toOne: ToOneSlots {
        get {
            materialize()
            return toOneStorage
        }
        _modify {
            materialize()
            yield &toOneStorage
        }
    }

    /// Persisted values as last read or saved (the row's decoded first, if the object reads one); `nil` for a
    /// fault or a new object.
    var committed: Snapshot? {
        get {
            materialize()
            return committedStorage
        }
        _modify {
            materialize()
            yield &committedStorage
        }
    }

    /// Makes the values of the row the object reads from its own: every value decoded into ``attributeStorage`` and
    /// ``toOneStorage``, shared with the committed snapshot. Does nothing for an object that reads no row.
    @inline(__always)
    func materialize() {
        if row != nil { materializeRow() }
    }

    @inline(never)
    private func materializeRow() {
        guard let row else { return }
        take(row.decodedSlots(), version: committedStorage?.version ?? version)
    }

    /// Takes `stored` (persistent values, in slots) as the object's values and its committed snapshot, which share
    /// the arrays until one of them changes; transient values the object holds are kept, the row it read is dropped.
    func take(_ stored: (attributes: AttributeSlots, toOne: ToOneSlots), version: Int64) {
        forgetRow()
        if handle.hasTransientAttributes, !attributeStorage.isEmpty {
            var merged = stored.attributes.isEmpty ? handle.newAttributes() : stored.attributes
            for slot in handle.attributeSlots where slot.isTransient { merged[slot.position] = attributeStorage[slot.position] }
            attributeStorage = merged
        } else {
            attributeStorage = stored.attributes
        }
        toOneStorage = stored.toOne
        committedStorage = Snapshot(attributes: stored.attributes, toOne: stored.toOne, toMany: committedStorage?.toMany ?? [],
                                    version: version)
    }

    /// Stops reading values from a row (without taking its values: the caller replaces them).
    func forgetRow() {
        row = nil
        rowKept = nil
        rowKeptIndex = -1
    }

    /// Starts reading values from `row` (persistent values; transient ones the object holds are kept).
    func read(from row: SharedRow, version: Int64) {
        guard committedStorage != nil || !attributeStorage.isEmpty || !toOneStorage.isEmpty || self.row != nil else {
            // A fault that never loaded (what a batch of faults mostly is) holds nothing to replace or release.
            self.row = row
            committedStorage = Snapshot(attributes: [], toOne: [], toMany: [], version: version)
            return
        }
        attributeStorage = handle.hasTransientAttributes ? transientAttributes() : []
        toOneStorage = []
        forgetRow()
        self.row = row
        committedStorage = Snapshot(attributes: [], toOne: [], toMany: committedStorage?.toMany ?? [], version: version)
    }

    /// Persisted values as last read or saved.
    struct Snapshot {
        var attributes: AttributeSlots
        var toOne: ToOneSlots
        /// The to-manys loaded when they were (`nil`, or empty, for one not loaded).
        var toMany: ToManySlots
        var version: Int64

        /// Records what the to-many in `slot` of `entity` holds.
        mutating func setMembers(_ ids: [ManagedObjectID]?, _ slot: ManagedObjectModel.Slot, of entity: ManagedObjectModel.EntityHandle) {
            toMany.setMembers(ids, slot, of: entity)
        }
    }

    /// Creates an object. Subclasses that add stored properties must call this initializer; only contexts create
    /// objects. It runs while the context files the object under its ID: an override must not reach the context
    /// (set the object up in ``awakeFromFetch()`` or ``awakeFromInsert()``, as Core Data asks).
    public required init(construction: Construction) {
        handle = construction.entity
        model = construction.model
        objectID = construction.objectID
        managedObjectContext = construction.context
    }

    // MARK: - Hooks for subclasses

    /// Called once when the object is inserted, after default values are set. Set initial values here.
    open func awakeFromInsert() {}

    /// Called when a fault's values have been loaded from the store.
    open func awakeFromFetch() {}

    /// Checks the object before an insert is saved; throw a ``ValidationFailure`` (or any error) to refuse.
    open func validateForInsert() throws {}

    /// Checks the object before an update is saved.
    open func validateForUpdate() throws {}

    /// Checks the object before its deletion is saved.
    open func validateForDelete() throws {}

    // MARK: - State

    /// Whether the object's values have not been loaded yet.
    public var isFault: Bool { isFaultStorage && lifecycle != .inserted }

    /// A fault whose values never loaded and did not fail to: when it has changes, they are only to-many members
    /// recorded for a store that derives the relationship or takes its changes as deltas (every other change loads
    /// the object first), so a save checks, sends and keeps nothing else of it.
    var isNeverLoaded: Bool { isFaultStorage && lifecycle != .inserted && faultError == nil }

    /// Whether the object was inserted and not yet saved.
    public var isInserted: Bool { lifecycle == .inserted }

    /// Whether the object has unsaved changes (and is neither inserted nor deleted).
    public var isUpdated: Bool { lifecycle == .clean && !changedSlots.isEmpty }

    /// Whether the object is deleted and the deletion not yet saved.
    public var isDeleted: Bool { lifecycle == .deleted }

    /// Whether the object has unsaved changes of any kind.
    public var hasChanges: Bool { lifecycle != .clean || !changedSlots.isEmpty }

    /// Whether the object's values are its last loaded or saved row, untouched: no unsaved change, no failed load.
    var showsCommittedValues: Bool { !hasChanges && faultError == nil }

    /// The values changed since the last save, by key (`nil` standing for a value set to NULL).
    public var changedValues: [String: Any?] {
        var result: [String: Any?] = [:]
        for index in changedSlots { result[handle.slots[index].name] = value(of: handle.slots[index]) }
        return result
    }

    /// The last saved values of the given keys (all persistent properties for `nil`); empty for a new object.
    public func committedValues(forKeys keys: [String]? = nil) -> [String: Any?] {
        willAccessValues()
        guard let committed else { return [:] }
        let names = keys ?? model.allProperties(of: entityName).filter(\.isPersistent).map(\.name)
        var result: [String: Any?] = [:]
        for name in names {
            switch handle.property(named: name) {
            case .attribute(let attribute):
                let slot = handle.slot(named: name)!
                result[name] = committed.attributes[slot: slot.position].map { Self.swiftValue($0, for: attribute) } ?? nil
            case .relationship(let relationship) where !relationship.isToMany:
                let slot = handle.slot(named: name)!
                result[name] = committed.toOne[slot: slot.position].map { $0 as Any }
            case .relationship:
                result[name] = handle.slot(named: name).flatMap { committed.toMany[slot: $0.position] }.map { $0 as Any }
            default:
                break
            }
        }
        return result
    }

    // MARK: - Values by slot

    /// The attribute value in `slot` (an attribute slot with a position), `nil` for NULL.
    @inline(__always)
    func attributeValue(_ slot: ManagedObjectModel.Slot) -> AttributeValue? {
        if row != nil, !slot.isTransient { return rowAttributeValue(slot) }
        return UInt(bitPattern: slot.position) < UInt(attributeStorage.count) ? attributeStorage[slot.position] : nil
    }

    /// The persistent attribute value in `slot` of an object reading its row: decoded from the row. Numbers, dates
    /// and Booleans are decoded at each read, which costs less than keeping them. A value whose decoding allocates
    /// (a string, data, a decimal, a URI) is kept, so reading it again costs nothing: the first such value in the
    /// object itself (``rowKept``); when a second is read, the object reads more than one field and decodes its
    /// whole row into arrays (``materialize()``), as an object not reading a row holds them.
    @inline(never)
    private func rowAttributeValue(_ slot: ManagedObjectModel.Slot) -> AttributeValue? {
        guard slot.position >= 0, let row else { return nil }
        if slot.index == rowKeptIndex { return rowKept }
        let value = row.attribute(at: slot.position)
        switch value {
        case .string?, .data?, .decimal?, .uri?:
            guard rowKeptIndex < 0 else {
                materialize()
                return attributeStorage[slot.position]
            }
            rowKept = value
            rowKeptIndex = slot.index
        default:
            break
        }
        return value
    }

    /// Whether the attribute in `slot` holds a value (is not NULL); from a row the object reads, told without
    /// decoding the value.
    func holdsAttributeValue(_ slot: ManagedObjectModel.Slot) -> Bool {
        if let row, !slot.isTransient, slot.index != rowKeptIndex { return slot.position >= 0 && row.holdsAttribute(at: slot.position) }
        return attributeValue(slot) != nil
    }

    /// The attribute value named `name`, `nil` for NULL or a name that is no attribute.
    func attributeValue(named name: String) -> AttributeValue? {
        guard let slot = handle.slot(named: name), slot.kind == .attribute, slot.position >= 0 else { return nil }
        return attributeValue(slot)
    }

    /// Puts `value` in `slot` and returns what was there.
    @discardableResult
    func setAttributeValue(_ value: AttributeValue?, _ slot: ManagedObjectModel.Slot) -> AttributeValue? {
        if !slot.isTransient { materialize() }
        if attributeStorage.isEmpty { attributeStorage = handle.newAttributes() }
        let old = attributeStorage[slot.position]
        attributeStorage[slot.position] = value
        return old
    }

    /// The object ID the to-one in `slot` points at.
    @inline(__always)
    func toOneID(_ slot: ManagedObjectModel.Slot) -> ManagedObjectID? {
        if let row { return slot.position >= 0 && !slot.isTransient ? row.toOne(at: slot.position) : nil }
        return UInt(bitPattern: slot.position) < UInt(toOneStorage.count) ? toOneStorage[slot.position] : nil
    }

    /// The object ID the to-one named `name` points at (`nil` for a name that is no to-one).
    func toOneID(named name: String) -> ManagedObjectID? {
        guard let slot = handle.slot(named: name), slot.kind == .toOne else { return nil }
        return toOneID(slot)
    }

    /// Points the to-one in `slot` at `id`.
    func setToOneID(_ id: ManagedObjectID?, _ slot: ManagedObjectModel.Slot) {
        materialize()
        if toOneStorage.isEmpty { toOneStorage = handle.newToOne() }
        toOneStorage[slot.position] = id
    }

    /// The object's attribute values with only the transient ones kept.
    func transientAttributes() -> AttributeSlots {
        guard !attributeStorage.isEmpty else { return [] }
        var kept = handle.newAttributes()
        for slot in handle.attributeSlots where slot.isTransient { kept[slot.position] = attributeStorage[slot.position] }
        return kept
    }

    /// Loads the values of a fault.
    func willAccessValues() {
        guard isFaultStorage, lifecycle != .inserted, let context = managedObjectContext else { return }
        context.fulfillFault(of: self)
    }

    // MARK: - Identity

    /// Objects are equal only to themselves.
    public static func == (lhs: ManagedObject, rhs: ManagedObject) -> Bool { lhs === rhs }

    /// Hashes the object's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// `<Entity: id> (fault)` or with the values.
    public var description: String {
        "<\(entityName): \(objectID)>" + (isFault ? " (fault)" : "")
    }
}
