/// An object's attribute values in its entity's attribute positions (``ManagedObjectModel/Slot/position``); `nil`
/// is NULL. Objects, snapshots, nodes and changes share one such array until one of them writes to it.
package typealias AttributeSlots = ContiguousArray<AttributeValue?>

/// An object's to-one relationships in its entity's to-one positions; `nil` is no object.
package typealias ToOneSlots = ContiguousArray<ManagedObjectID?>

/// An object's to-many relationships in its entity's to-many positions: the members' IDs (in order, for an ordered
/// relationship), `nil` while the relationship is not loaded.
typealias ToManySlots = ContiguousArray<[ManagedObjectID]?>

extension ContiguousArray where Element == [ManagedObjectID]? {
    /// Sets the members of the to-many in `slot` of `entity` (`nil`: not loaded), making the array the entity's
    /// length first if it is empty (nothing is made to record "not loaded" in an empty one).
    mutating func setMembers(_ ids: [ManagedObjectID]?, _ slot: ManagedObjectModel.Slot, of entity: ManagedObjectModel.EntityHandle) {
        if isEmpty {
            guard ids != nil else { return }
            self = entity.newToMany()
        }
        self[slot.position] = ids
    }
}

/// Members added to and removed from a to-many relationship that is not loaded, recorded instead of loading it.
struct PendingMembers {
    var added: [ManagedObjectID] = []
    var removed: Set<ManagedObjectID> = []
}

/// Recorded members (``PendingMembers``) in an entity's to-many positions; empty until one is recorded.
typealias PendingToManySlots = ContiguousArray<PendingMembers?>

/// Stored rows a store hands over without decoding them: an object backed by one decodes a value when the value is
/// first read, so a fault or a fetched object pays for the fields it reads, not for every field of its row. A store
/// may keep several rows in one block (one allocation for a batch of faults instead of one per row): a row is its
/// block and its place in the block (``SharedRow``), and every requirement names the row by that place.
///
/// A store checks a row before handing it over (its checksum, its layout, each value's extent and encoding), so
/// reading a value cannot fail. A row must be immutable once handed over, since any thread may read it (a block is
/// not required to be `Sendable` only so that a `ManagedBuffer` can hold its header and bytes in one allocation;
/// nodes carry it as a ``SharedRow``). Objects keep what they decode, never change the row.
package protocol StoredRowValues: AnyObject {
    /// The persistent attribute value at `position` in the entity's attribute positions (``AttributeSlots``) of the
    /// row at `row`; `nil` for NULL and for positions the row does not store (transient attributes).
    func attribute(at position: Int, row: Int) -> AttributeValue?
    /// The object the persistent to-one at `position` in the entity's to-one positions of the row at `row` points
    /// at; `nil` for none.
    func toOne(at position: Int, row: Int) -> ManagedObjectID?
    /// Every value of the row at `row`, decoded into the entity's slot positions (what ``attribute(at:row:)`` and
    /// ``toOne(at:row:)`` give one at a time).
    func decodedSlots(row: Int) -> (attributes: AttributeSlots, toOne: ToOneSlots)
    /// Whether the persistent attribute at `position` of the row at `row` holds a value (is not NULL), told without
    /// decoding it where the block can.
    func holdsAttribute(at position: Int, row: Int) -> Bool
}

/// One stored row: its block (``StoredRowValues``) and its place there, as nodes carry it between threads and objects
/// keep it — rows are immutable, so sharing one is safe.
package struct SharedRow: @unchecked Sendable {
    package let block: any StoredRowValues
    /// Where the row is in ``block``, as the block numbers its rows.
    package let place: Int

    package init(_ block: any StoredRowValues, place: Int) {
        self.block = block
        self.place = place
    }

    /// See ``StoredRowValues/attribute(at:row:)``.
    @inline(__always)
    func attribute(at position: Int) -> AttributeValue? { block.attribute(at: position, row: place) }
    /// See ``StoredRowValues/toOne(at:row:)``.
    @inline(__always)
    func toOne(at position: Int) -> ManagedObjectID? { block.toOne(at: position, row: place) }
    /// See ``StoredRowValues/holdsAttribute(at:row:)``.
    @inline(__always)
    func holdsAttribute(at position: Int) -> Bool { block.holdsAttribute(at: position, row: place) }
    /// See ``StoredRowValues/decodedSlots(row:)``.
    func decodedSlots() -> (attributes: AttributeSlots, toOne: ToOneSlots) { block.decodedSlots(row: place) }
}

/// The attribute and to-one values of one object, as a store hands them over or is given them: by name (what any
/// store can build), in the positions of an entity's slots (what the runtime keeps, so no name is hashed on the
/// way between a row and an object), or as the stored row itself, decoded a value at a time.
package enum StoredValues: Sendable {
    case named(attributes: [String: AttributeValue], toOne: [String: ManagedObjectID])
    case slots(ManagedObjectModel.EntityHandle, attributes: AttributeSlots, toOne: ToOneSlots)
    case row(ManagedObjectModel.EntityHandle, SharedRow)

    /// The attribute values by name (absent = NULL); setting them keeps the values by name from then on.
    package var attributeDictionary: [String: AttributeValue] {
        get {
            switch self {
            case .named(let attributes, _): attributes
            case .slots(let entity, let attributes, _): entity.attributeDictionary(attributes)
            case .row(let entity, let row): entity.attributeDictionary(row.decodedSlots().attributes)
            }
        }
        set { self = .named(attributes: newValue, toOne: toOneDictionary) }
    }

    /// The to-ones by name (absent = none); setting them keeps the values by name from then on.
    package var toOneDictionary: [String: ManagedObjectID] {
        get {
            switch self {
            case .named(_, let toOne): toOne
            case .slots(let entity, _, let toOne): entity.toOneDictionary(toOne)
            case .row(let entity, let row): entity.toOneDictionary(row.decodedSlots().toOne)
            }
        }
        set { self = .named(attributes: attributeDictionary, toOne: newValue) }
    }

    /// The values in `entity`'s positions: shared when they are already, decoded from a row, placed by name
    /// otherwise (names the entity does not have are left out).
    package func slots(of entity: ManagedObjectModel.EntityHandle) -> (attributes: AttributeSlots, toOne: ToOneSlots) {
        switch self {
        case .slots(let own, let attributes, let toOne) where own === entity:
            return (attributes, toOne)
        case .slots(let own, let attributes, let toOne):
            return (entity.attributeSlots(own.attributeDictionary(attributes)), entity.toOneSlots(own.toOneDictionary(toOne)))
        case .row(let own, let row) where own === entity:
            return row.decodedSlots()
        case .row(let own, let row):
            let decoded = row.decodedSlots()
            return (entity.attributeSlots(own.attributeDictionary(decoded.attributes)), entity.toOneSlots(own.toOneDictionary(decoded.toOne)))
        case .named(let attributes, let toOne):
            return (entity.attributeSlots(attributes), entity.toOneSlots(toOne))
        }
    }
}

extension ManagedObjectModel.EntityHandle {
    /// `values` in this entity's attribute positions; names it has no attribute of are left out.
    package func attributeSlots(_ values: [String: AttributeValue]) -> AttributeSlots {
        var slots = newAttributes()
        for (name, value) in values {
            if let slot = slot(named: name), slot.kind == .attribute, slot.position >= 0 { slots[slot.position] = value }
        }
        return slots
    }

    /// `values` in this entity's to-one positions; names it has no to-one of are left out.
    package func toOneSlots(_ values: [String: ManagedObjectID]) -> ToOneSlots {
        var slots = newToOne()
        for (name, value) in values {
            if let slot = slot(named: name), slot.kind == .toOne { slots[slot.position] = value }
        }
        return slots
    }

    /// The attribute values held in `slots`, by name.
    func attributeDictionary(_ slots: AttributeSlots) -> [String: AttributeValue] {
        var values: [String: AttributeValue] = [:]
        for (slot, value) in zip(attributeSlots, slots) { if let value { values[slot.name] = value } }
        return values
    }

    /// The to-ones held in `slots`, by name.
    func toOneDictionary(_ slots: ToOneSlots) -> [String: ManagedObjectID] {
        var values: [String: ManagedObjectID] = [:]
        for (slot, value) in zip(toOneSlots, slots) { if let value { values[slot.name] = value } }
        return values
    }

    /// `values` with the transient attributes' positions cleared: what a store keeps. Shared, not copied, when the
    /// entity has no transient attribute.
    func persistentAttributes(_ values: AttributeSlots) -> AttributeSlots {
        guard hasTransientAttributes, !values.isEmpty else { return values }
        var persistent = values
        for slot in attributeSlots where slot.isTransient { persistent[slot.position] = nil }
        return persistent
    }

    /// `values` with the transient to-ones' positions cleared.
    func persistentToOne(_ values: ToOneSlots) -> ToOneSlots {
        guard hasTransientToOnes, !values.isEmpty else { return values }
        var persistent = values
        for slot in toOneSlots where slot.isTransient { persistent[slot.position] = nil }
        return persistent
    }
}

extension ContiguousArray {
    /// The value at `position`, or `nil` beyond the end (an object's arrays are empty until its values load) or at
    /// -1 (a property kept elsewhere).
    @inlinable
    package subscript<Wrapped>(slot position: Int) -> Wrapped? where Element == Wrapped? {
        UInt(bitPattern: position) < UInt(count) ? self[position] : nil
    }
}

/// A set of an entity's properties by ``ManagedObjectModel/Slot/index``, as bits: what an object records as
/// changed, without hashing a property's name per change.
struct SlotSet: Sequence, Equatable {
    /// Properties 0…63, then the rest in further words (rare: entities with more than 64 properties).
    private var low: UInt64 = 0
    private var high: [UInt64] = []

    var isEmpty: Bool { low == 0 && high.allSatisfy { $0 == 0 } }

    func contains(_ index: Int) -> Bool {
        if index < 64 { return low & (1 << UInt64(index)) != 0 }
        let word = index / 64 - 1
        return word < high.count && high[word] & (1 << UInt64(index % 64)) != 0
    }

    mutating func insert(_ index: Int) {
        if index < 64 { low |= 1 << UInt64(index); return }
        let word = index / 64 - 1
        if word >= high.count { high += [UInt64](repeating: 0, count: word - high.count + 1) }
        high[word] |= 1 << UInt64(index % 64)
    }

    mutating func remove(_ index: Int) {
        if index < 64 { low &= ~(1 << UInt64(index)); return }
        let word = index / 64 - 1
        if word < high.count { high[word] &= ~(1 << UInt64(index % 64)) }
    }

    mutating func removeAll() {
        low = 0
        high = []
    }

    /// The indices in the set, in increasing order.
    func makeIterator() -> Iterator { Iterator(set: self) }

    /// Walks the set bits word by word.
    struct Iterator: IteratorProtocol {
        fileprivate let set: SlotSet
        private var word = 0
        private var bits: UInt64

        fileprivate init(set: SlotSet) {
            self.set = set
            bits = set.low
        }

        mutating func next() -> Int? {
            while bits == 0 {
                guard word < set.high.count else { return nil }
                bits = set.high[word]
                word += 1
            }
            let bit = bits.trailingZeroBitCount
            bits &= bits - 1
            return word * 64 + bit
        }
    }
}

/// The to-many relationships a change gives: the members of some (every one for an insert, the changed ones for an
/// update) and the added and removed members of others (recorded without loading them). By name (what any store
/// can build), or in the positions of an entity's to-manys (what the runtime makes: no name hashed per object on
/// either side of a save).
package enum ToManyValues: Sendable {
    case named(members: [String: [ManagedObjectID]], changes: [String: ToManyChange])
    /// `members` and `changes` in `entity`'s to-many positions (`nil`: not given); either array may be empty when
    /// nothing of its kind is given.
    case slots(ManagedObjectModel.EntityHandle, members: ContiguousArray<[ManagedObjectID]?>, changes: ContiguousArray<ToManyChange?>)

    static let none = ToManyValues.named(members: [:], changes: [:])

    /// The members given, by name; setting them keeps both parts by name from then on.
    var membersDictionary: [String: [ManagedObjectID]] {
        get {
            switch self {
            case .named(let members, _): members
            case .slots(let entity, let members, _): entity.toManyDictionary(members)
            }
        }
        set { self = .named(members: newValue, changes: changesDictionary) }
    }

    /// The membership changes given, by name; setting them keeps both parts by name from then on.
    var changesDictionary: [String: ToManyChange] {
        get {
            switch self {
            case .named(_, let changes): changes
            case .slots(let entity, _, let changes): entity.toManyDictionary(changes)
            }
        }
        set { self = .named(members: membersDictionary, changes: newValue) }
    }

    /// The members given for the to-many in `slot` of `entity`.
    package func members(_ slot: ManagedObjectModel.Slot, of entity: ManagedObjectModel.EntityHandle) -> [ManagedObjectID]? {
        switch self {
        case .slots(let own, let members, _) where own === entity:
            members.isEmpty ? nil : members[slot.position]
        case .slots, .named:
            membersDictionary[slot.name]
        }
    }

    /// The membership change given for the to-many in `slot` of `entity`.
    package func changes(_ slot: ManagedObjectModel.Slot, of entity: ManagedObjectModel.EntityHandle) -> ToManyChange? {
        switch self {
        case .slots(let own, _, let changes) where own === entity:
            changes.isEmpty ? nil : changes[slot.position]
        case .slots, .named:
            changesDictionary[slot.name]
        }
    }
}

extension ManagedObjectModel.EntityHandle {
    /// The values in to-many positions, by name (positions holding `nil` left out).
    func toManyDictionary<Value>(_ values: ContiguousArray<Value?>) -> [String: Value] {
        var named: [String: Value] = [:]
        guard !values.isEmpty else { return named }
        for slot in slots where slot.kind == .toMany {
            if let value = values[slot.position] { named[slot.name] = value }
        }
        return named
    }
}
