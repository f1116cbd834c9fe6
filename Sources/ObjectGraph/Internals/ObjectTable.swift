/// A hash table keyed by object ID, for the maps the runtime touches once per object: a context's registry and the
/// coordinator's row cache.
///
/// `Dictionary` hashes an ID with `Hasher` (SipHash over the namespace's hash and the key, about 150 instructions,
/// then a bucket walk comparing whole IDs). Here an integer key is mixed with its namespace's precomputed hash by one
/// multiplication, the table is probed linearly, and IDs compare their namespaces by identity. Removal shifts the
/// following entries back, so no tombstones build up in a registry that objects enter and leave all day.
struct ObjectTable<Value>: Sequence {
    typealias Element = (key: ManagedObjectID, value: Value)

    private var slots: [Element?] = []
    /// `slots.count - 1` (a power of two less one), or -1 while there are no slots.
    private var mask = -1
    /// How many entries the table holds.
    private(set) var count = 0

    /// An empty table.
    init() {}

    var isEmpty: Bool { count == 0 }

    /// The slot an ID's probe starts at: its key (for string keys, their hash) mixed with the namespace's hash.
    @inline(__always)
    private func home(of id: ManagedObjectID) -> Int {
        let key: UInt64
        switch id.referenceObject {
        case .integer(let value): key = UInt64(bitPattern: value)
        case .string(let value): key = UInt64(bitPattern: Int64(value.hashValue))
        }
        let mixed = (key ^ UInt64(bitPattern: Int64(id.namespace.hash))) &* 0x9E37_79B9_7F4A_7C15
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 32)) & mask
    }

    /// The slot holding `id`, if it is in the table.
    @inline(__always)
    private func position(of id: ManagedObjectID) -> Int? {
        guard count > 0 else { return nil }
        var index = home(of: id)
        while let entry = slots[index] {
            if entry.key == id { return index }
            index = (index + 1) & mask
        }
        return nil
    }

    /// The value stored for `id`; setting `nil` removes it.
    subscript(id: ManagedObjectID) -> Value? {
        get { position(of: id).map { slots[$0]!.value } }
        set {
            if let newValue {
                insert(newValue, for: id)
            } else {
                removeValue(forKey: id)
            }
        }
    }

    private mutating func insert(_ value: Value, for id: ManagedObjectID) {
        if let index = position(of: id) {
            slots[index]!.value = value
            return
        }
        if (count + 1) * 4 > slots.count * 3 { grow(toHold: count + 1) }
        var index = home(of: id)
        while slots[index] != nil { index = (index + 1) & mask }
        slots[index] = (id, value)
        count += 1
    }

    /// Removes `id`'s entry and returns its value.
    @discardableResult
    mutating func removeValue(forKey id: ManagedObjectID) -> Value? {
        guard var hole = position(of: id) else { return nil }
        let removed = slots[hole]!.value
        slots[hole] = nil
        count -= 1
        // Backward shift: every following entry of the run that could sit in the hole moves into it.
        var index = hole
        while true {
            index = (index + 1) & mask
            guard let entry = slots[index] else { break }
            let start = home(of: entry.key)
            // The entry may move to the hole unless its home lies cyclically in (hole, index].
            let staysPut = hole <= index ? (start > hole && start <= index) : (start > hole || start <= index)
            if !staysPut {
                slots[hole] = entry
                slots[index] = nil
                hole = index
            }
        }
        return removed
    }

    /// Runs `body` on the value stored for `id`, in place, after storing `defaultValue` if there was none.
    mutating func modify<Result>(_ id: ManagedObjectID, default defaultValue: @autoclosure () -> Value,
                                 _ body: (inout Value) -> Result) -> Result {
        if position(of: id) == nil { insert(defaultValue(), for: id) }
        return body(&slots[position(of: id)!]!.value)
    }

    /// Runs `body` on the value stored for `id`, in place; `nil` (and `body` not run) when there is none.
    mutating func modifyIfPresent<Result>(_ id: ManagedObjectID, _ body: (inout Value) -> Result) -> Result? {
        guard let index = position(of: id) else { return nil }
        return body(&slots[index]!.value)
    }

    /// Runs `body` on every entry's value, in place.
    mutating func modifyAll(_ body: (ManagedObjectID, inout Value) -> Void) {
        for index in slots.indices where slots[index] != nil {
            body(slots[index]!.key, &slots[index]!.value)
        }
    }

    /// Removes the entries `shouldRemove` picks.
    mutating func removeAll(where shouldRemove: (Element) -> Bool) {
        for entry in Array(self) where shouldRemove(entry) { removeValue(forKey: entry.key) }
    }

    /// Makes room for at least `capacity` entries without growing again.
    mutating func reserveCapacity(_ capacity: Int) {
        if capacity * 4 > slots.count * 3 { grow(toHold: capacity) }
    }

    /// Removes every entry (and lets the slots go).
    mutating func removeAll() {
        slots = []
        mask = -1
        count = 0
    }

    private mutating func grow(toHold capacity: Int) {
        var size = Swift.max(16, slots.count)
        while capacity * 4 > size * 3 { size *= 2 }
        let old = slots
        slots = Array(repeating: nil, count: size)
        mask = size - 1
        count = 0
        for case let entry? in old {
            var index = home(of: entry.key)
            while slots[index] != nil { index = (index + 1) & mask }
            slots[index] = entry
            count += 1
        }
    }

    /// The values, in no particular order.
    var values: [Value] {
        var result: [Value] = []
        result.reserveCapacity(count)
        for case let entry? in slots { result.append(entry.value) }
        return result
    }

    /// The entries, in no particular order.
    func makeIterator() -> some IteratorProtocol<Element> {
        slots.lazy.compactMap { $0 }.makeIterator()
    }
}
