import Foundation
import Synchronization

/// The store's own key for an object: what a ``ManagedObjectID`` wraps (a primary key for LMDB, a string for
/// stores keyed by text).
public enum ReferenceObject: Sendable, Hashable, CustomStringConvertible {
    /// An integer key.
    case integer(Int64)
    /// A string key.
    case string(String)

    /// The key as it appears in a URI: `123` for integers, `s` and the percent-escaped string for strings.
    public var description: String {
        switch self {
        case .integer(let value): String(value)
        case .string(let value): "s" + (value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? value)
        }
    }

    init?(uriComponent: String) {
        if let value = Int64(uriComponent) {
            self = .integer(value)
        } else if uriComponent.hasPrefix("s"), let value = String(uriComponent.dropFirst()).removingPercentEncoding {
            self = .string(value)
        } else {
            return nil
        }
    }
}

/// The identity of a managed object: its store, its entity and the store's key for it.
///
/// An inserted object has a temporary ID until it is saved (or ``ManagedObjectContext/obtainPermanentIDs(for:)``
/// is called); then it has a permanent one. IDs are values: compare, hash and send them anywhere.
///
/// An ID is sixteen bytes of plain data — its namespace's address and a number — so making, copying and dropping
/// IDs by the thousand (a fetch of IDs, a registry, a relationship's members) counts no reference and runs no
/// value witness. A string key is kept once for the life of the process (``InternedKeys``) and the ID holds its
/// number there.
public struct ManagedObjectID: Sendable, Hashable, CustomStringConvertible {
    /// The address of the entity-and-store namespace shared by every ID of the entity in the store, with the low
    /// bit set when ``key`` numbers an interned string: comparing and hashing IDs touches no string. Held without a
    /// reference count: namespaces are interned for the life of the process (the table in
    /// ``ObjectIDNamespace/shared(entityName:storeIdentifier:)`` keeps every one it made).
    @usableFromInline let bits: UInt
    /// The store's integer key for the object, or the number of its interned string key.
    @usableFromInline let key: Int64

    /// The store's key for the object (for a temporary ID, a unique number or string).
    public var referenceObject: ReferenceObject {
        bits & 1 == 0 ? .integer(key) : .string(InternedKeys.text(numbered: key))
    }

    /// The integer key, without making a ``ReferenceObject``; `nil` for a string key.
    @inline(__always)
    package var integerKey: Int64? { bits & 1 == 0 ? key : nil }

    private var namespaceReference: Unmanaged<ObjectIDNamespace> {
        Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits & ~1).unsafelyUnwrapped)
    }

    /// The entity and store part of the ID.
    package var namespace: ObjectIDNamespace { namespaceReference.takeUnretainedValue() }

    /// The namespace's identity, for tables keyed by entity and store (read without retaining it).
    package var namespaceIdentity: ObjectIdentifier { namespaceReference._withUnsafeGuaranteedRef { ObjectIdentifier($0) } }

    /// Whether two IDs share their entity and store (one pointer comparison).
    @inline(__always)
    package func hasNamespace(of other: ManagedObjectID) -> Bool {
        (bits ^ other.bits) & ~1 == 0
    }

    /// The entity of the object.
    public var entityName: String { namespaceReference._withUnsafeGuaranteedRef { $0.entityName } }
    /// The identifier (UUID) of the store holding the object; `nil` for a temporary ID.
    public var storeIdentifier: String? { namespaceReference._withUnsafeGuaranteedRef { $0.storeIdentifier } }

    /// Whether the ID is temporary: the object has not been saved yet.
    public var isTemporaryID: Bool { namespaceReference._withUnsafeGuaranteedRef { $0.isTemporary } }

    /// A permanent ID.
    public init(entityName: String, storeIdentifier: String, referenceObject: ReferenceObject) {
        self.init(namespace: .shared(entityName: entityName, storeIdentifier: storeIdentifier), referenceObject: referenceObject)
    }

    /// An ID in a namespace a store keeps at hand.
    package init(namespace: ObjectIDNamespace, referenceObject: ReferenceObject) {
        let address = UInt(bitPattern: Unmanaged.passUnretained(namespace).toOpaque())
        switch referenceObject {
        case .integer(let key):
            bits = address
            self.key = key
        case .string(let text):
            bits = address | 1
            key = InternedKeys.number(of: text)
        }
    }

    /// An ID with an integer key in a namespace held unretained (the fast way to make many IDs: nothing is
    /// retained, released or looked up; inlined into the stores' loops).
    @inlinable
    package init(namespace: Unmanaged<ObjectIDNamespace>, key: Int64) {
        bits = UInt(bitPattern: namespace.toOpaque())
        self.key = key
    }

    /// A new temporary ID in an entity's temporary namespace (which its handle keeps). Its token is an integer: a
    /// random tag of this process in the high bits and a counter in the low 40, so it is unique within the process
    /// (all a temporary ID needs), made without a system call, and hashed as one number — a save of 10 000 new
    /// objects hashes their IDs dozens of times each.
    static func temporary(in namespace: ObjectIDNamespace) -> ManagedObjectID {
        let number = temporaryCounter.add(1, ordering: .relaxed).newValue & 0xFF_FFFF_FFFF
        return ManagedObjectID(namespace: namespace, referenceObject: .integer(Int64(bitPattern: processTag << 40 | number)))
    }

    private static let temporaryCounter = Atomic<UInt64>(0)
    private static let processTag = UInt64.random(in: 0x1_0000...0x7F_FFFF)

    private init(entityName: String, storeIdentifier: String?, referenceObject: ReferenceObject) {
        self.init(namespace: .shared(entityName: entityName, storeIdentifier: storeIdentifier), referenceObject: referenceObject)
    }

    /// Equal when entity, store and key are: namespaces and string keys are interned, so this compares two
    /// pairs of words.
    public static func == (lhs: ManagedObjectID, rhs: ManagedObjectID) -> Bool {
        lhs.bits == rhs.bits && lhs.key == rhs.key
    }

    /// Hashes the namespace's precomputed hash and the key (a string key by its interned number: equal strings
    /// have one).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(namespaceHash)
        hasher.combine(key)
        hasher.combine(bits & 1)
    }

    /// The hash sets and dictionaries use (the standard library's hook for types that hash faster than `Hasher`):
    /// the namespace's hash, the key and the table's seed mixed with SplitMix64's finalizer — a handful of
    /// instructions instead of a SipHash round, for the IDs every registry, row cache and save hashes many times
    /// over. IDs come from stores, not from untrusted input, and the per-table seed still varies the layout.
    public func _rawHashValue(seed: Int) -> Int {
        var mixed = UInt64(bitPattern: key) &+ UInt64(bitPattern: Int64(namespaceHash ^ Int(bits & 1))) &* 0x9E37_79B9_7F4A_7C15
            &+ UInt64(bitPattern: Int64(seed))
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 31))
    }

    private var namespaceHash: Int { namespaceReference._withUnsafeGuaranteedRef { $0.hash } }

    /// The ID's URI: `x-coredata://<store UUID>/<Entity>/p<key>`, or `x-coredata:///<Entity>/t<token>` for a
    /// temporary ID. ``PersistentStoreCoordinator/managedObjectID(forURIRepresentation:)`` turns it back into an ID.
    public var uriRepresentation: URL {
        let entity = entityName.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? entityName
        if let storeIdentifier {
            return URL(string: "x-coredata://\(storeIdentifier)/\(entity)/p\(referenceObject)")!
        }
        let token = switch referenceObject {
        case .integer(let number): String(number, radix: 16)
        case .string(let text): text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
        }
        return URL(string: "x-coredata:///\(entity)/t\(token)")!
    }

    /// Parses a URI made by ``uriRepresentation``; `nil` when it is not one.
    static func parse(_ uri: URL) -> ManagedObjectID? {
        let text = uri.absoluteString
        guard text.hasPrefix("x-coredata://") else { return nil }
        let rest = text.dropFirst("x-coredata://".count)
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3, let entity = parts[1].removingPercentEncoding, !entity.isEmpty, parts[2].count > 1 else { return nil }
        let key = String(parts[2].dropFirst())
        switch (parts[0].isEmpty, parts[2].first) {
        case (true, "t"):
            let token = Int64(key, radix: 16).map(ReferenceObject.integer) ?? key.removingPercentEncoding.map(ReferenceObject.string)
            return token.map { ManagedObjectID(entityName: entity, storeIdentifier: nil, referenceObject: $0) }
        case (false, "p"):
            guard let reference = ReferenceObject(uriComponent: key) else { return nil }
            return ManagedObjectID(entityName: entity, storeIdentifier: parts[0], referenceObject: reference)
        default:
            return nil
        }
    }

    /// The URI as text.
    public var description: String { uriRepresentation.absoluteString }
}

extension ManagedObjectID: Comparable {
    /// A stable order for IDs (entity, store, then key; integers before strings), cheap enough for sorting
    /// thousands of IDs: no URI is built.
    public static func < (lhs: ManagedObjectID, rhs: ManagedObjectID) -> Bool {
        if !lhs.hasNamespace(of: rhs) {
            if lhs.entityName != rhs.entityName { return lhs.entityName < rhs.entityName }
            return (lhs.storeIdentifier ?? "") < (rhs.storeIdentifier ?? "")
        }
        if let a = lhs.integerKey, let b = rhs.integerKey { return a < b }
        switch (lhs.referenceObject, rhs.referenceObject) {
        case (.integer(let a), .integer(let b)): return a < b
        case (.string(let a), .string(let b)): return a < b
        case (.integer, .string): return true
        case (.string, .integer): return false
        }
    }
}

extension Sequence<ManagedObjectID> {
    /// The IDs in ID order (`<`), sorted faster than `sorted()` when they come from a few entities: the namespaces
    /// among them are ordered once, then the sort moves plain (namespace rank, integer key, position) values —
    /// no entity name compared and no reference counted per step. A save sorts its changed objects this way
    /// (thousands of IDs of a handful of entities).
    func sortedByID() -> [ManagedObjectID] {
        let ids = Array(self)
        var namespaces: [ObjectIDNamespace] = []
        var keys: [(namespace: Int32, key: Int64, position: Int32, isInteger: Bool)] = []
        keys.reserveCapacity(ids.count)
        var last = -1
        for (position, id) in ids.enumerated() {
            if last < 0 || namespaces[last] !== id.namespace {
                if let found = namespaces.firstIndex(where: { $0 === id.namespace }) {
                    last = found
                } else {
                    namespaces.append(id.namespace)
                    last = namespaces.count - 1
                }
            }
            let key = id.integerKey
            keys.append((Int32(last), key ?? 0, Int32(position), key != nil))
        }
        // Rank the namespaces as `<` orders IDs of different namespaces: by entity name, then store.
        let order = namespaces.indices.sorted {
            let a = namespaces[$0], b = namespaces[$1]
            return a.entityName != b.entityName ? a.entityName < b.entityName : (a.storeIdentifier ?? "") < (b.storeIdentifier ?? "")
        }
        var rank = [Int32](repeating: 0, count: namespaces.count)
        for (position, index) in order.enumerated() { rank[index] = Int32(position) }
        for index in keys.indices { keys[index].namespace = rank[Int(keys[index].namespace)] }
        ids.withUnsafeBufferPointer { ids in
            keys.sort { a, b in
                if a.namespace != b.namespace { return a.namespace < b.namespace }
                if a.isInteger && b.isInteger { return a.key < b.key }
                return ids[Int(a.position)] < ids[Int(b.position)]  // a string key: `<` decides
            }
        }
        return keys.map { ids[Int($0.position)] }
    }
}

/// The string keys of object IDs, each kept once for the life of the process and numbered, so that an ID is plain
/// data (``ManagedObjectID``). Stores keyed by integers (the LMDB store, temporary IDs) never come here; a store keyed
/// by text (an atomic store whose files name objects by strings) keeps each distinct key it hands out.
package enum InternedKeys {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var numbers: [String: Int64] = [:]
    nonisolated(unsafe) private static var texts: [String] = []

    /// The number of `text`, given it the first time.
    static func number(of text: String) -> Int64 {
        lock.withLock {
            if let number = numbers[text] { return number }
            let number = Int64(texts.count)
            texts.append(text)
            numbers[text] = number
            return number
        }
    }

    /// The text numbered `number`.
    static func text(numbered number: Int64) -> String {
        lock.withLock { texts[Int(number)] }
    }
}

/// The entity and store part of object IDs. There is one per (entity, store) pair in the process, so IDs compare
/// their namespaces by identity and hash a number computed once.
@usableFromInline
package final class ObjectIDNamespace: Sendable {
    /// The entity's name.
    package let entityName: String
    /// The store's UUID, or `nil` for temporary IDs.
    package let storeIdentifier: String?
    /// The hash of the two names.
    let hash: Int
    /// Whether IDs in the namespace are temporary (it names no store).
    let isTemporary: Bool

    private struct Key: Hashable {
        let entityName: String
        let storeIdentifier: String?
    }

    private static let lock = NSLock()
    /// Every namespace made, for the life of the process: IDs hold theirs unretained (`ManagedObjectID`), so an
    /// entry must never be removed.
    nonisolated(unsafe) private static var table: [Key: ObjectIDNamespace] = [:]
    /// The namespaces handed out most recently: IDs are mostly made many at a time for a few entities (an employee,
    /// its department, its projects), and comparing names with a handful of them is cheaper than hashing them — the
    /// store's UUID alone is 36 bytes of SipHash.
    nonisolated(unsafe) private static var recent: [ObjectIDNamespace] = []
    /// The one of them handed out last, tried first.
    nonisolated(unsafe) private static var last: ObjectIDNamespace?
    nonisolated(unsafe) private static var nextRecent = 0
    private static let recentCapacity = 8

    private init(entityName: String, storeIdentifier: String?) {
        self.entityName = entityName
        self.storeIdentifier = storeIdentifier
        hash = Key(entityName: entityName, storeIdentifier: storeIdentifier).hashValue
        isTemporary = storeIdentifier == nil
    }

    /// The namespace of an entity in a store (`nil`: temporary IDs).
    package static func shared(entityName: String, storeIdentifier: String?) -> ObjectIDNamespace {
        lock.withLock {
            if let last, last.entityName == entityName, last.storeIdentifier == storeIdentifier { return last }
            for namespace in recent where namespace.entityName == entityName && namespace.storeIdentifier == storeIdentifier {
                last = namespace
                return namespace
            }
            let key = Key(entityName: entityName, storeIdentifier: storeIdentifier)
            let namespace: ObjectIDNamespace
            if let existing = table[key] {
                namespace = existing
            } else {
                namespace = ObjectIDNamespace(entityName: entityName, storeIdentifier: storeIdentifier)
                table[key] = namespace
            }
            remember(namespace)
            last = namespace
            return namespace
        }
    }

    /// Puts `namespace` among the recent ones, in place of the oldest once there are `recentCapacity`.
    private static func remember(_ namespace: ObjectIDNamespace) {
        if recent.count < recentCapacity {
            recent.append(namespace)
        } else {
            recent[nextRecent] = namespace
            nextRecent = (nextRecent + 1) % recentCapacity
        }
    }
}
