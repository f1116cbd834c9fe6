import Foundation

/// One object of an ``AtomicStore``, held in memory (Core Data's `NSAtomicStoreCacheNode`).
///
/// A store creates nodes while it loads its file (``AtomicStore/load()``) and when objects are saved
/// (``AtomicStore/newCacheNode(for:)``); the framework answers fetches and faults from them. Relationships are set
/// with other nodes and kept as their object IDs, so nodes never keep each other alive.
///
/// A node belongs to its store: change it only inside the store's hooks (``AtomicStore/load()``,
/// ``AtomicStore/newCacheNode(for:)``, ``AtomicStore/updateCacheNode(_:from:)``), which run under the store's lock.
public final class AtomicStoreCacheNode: Hashable, CustomStringConvertible, @unchecked Sendable {
    /// The object's ID.
    public let objectID: ManagedObjectID
    /// Attribute values by name; an absent name is NULL.
    public var attributes: [String: AttributeValue]
    /// To-one relationships by name: the destination's object ID; an absent name is no object.
    public private(set) var toOne: [String: ManagedObjectID] = [:]
    /// To-many relationships by name: the destinations' object IDs (in order, for an ordered relationship).
    public private(set) var toMany: [String: [ManagedObjectID]] = [:]
    /// Grows with every saved change of the object while the store is open (optimistic locking).
    public internal(set) var version: Int64 = 1

    /// A node for `objectID` with these attribute values and no relationships.
    public init(objectID: ManagedObjectID, attributes: [String: AttributeValue] = [:]) {
        self.objectID = objectID
        self.attributes = attributes
    }

    /// An attribute's value, or `nil` for NULL.
    public func value(forKey key: String) -> AttributeValue? { attributes[key] }

    /// Sets (or, with `nil`, clears) an attribute's value.
    public func setValue(_ value: AttributeValue?, forKey key: String) { attributes[key] = value }

    /// Sets a to-one relationship to another node, or clears it with `nil`.
    public func setDestination(_ node: AtomicStoreCacheNode?, forRelationship name: String) {
        toOne[name] = node?.objectID
    }

    /// Sets a to-many relationship's members (in order, for an ordered relationship).
    public func setDestinations(_ nodes: [AtomicStoreCacheNode], forRelationship name: String) {
        toMany[name] = nodes.map(\.objectID)
    }

    /// The object IDs a relationship holds (a to-one: at most one).
    public func destinations(forRelationship name: String) -> [ManagedObjectID] {
        if let many = toMany[name] { return many }
        return toOne[name].map { [$0] } ?? []
    }

    /// Copies a saved object's values: every attribute and to-one, and the to-many relationships the change gives.
    func apply(_ change: ObjectChange) {
        attributes = change.attributes
        toOne = change.toOne
        toMany.merge(change.toMany) { _, new in new }
    }

    /// Sets a to-many relationship by IDs.
    func setToMany(_ ids: [ManagedObjectID], forRelationship name: String) {
        toMany[name] = ids
    }

    /// Adds `id` to a to-many relationship (used to derive a relationship from its inverse while loading).
    func appendDestination(_ id: ManagedObjectID, forRelationship name: String) {
        toMany[name, default: []].append(id)
    }

    /// Sets a to-one relationship by ID (used to derive a relationship from its inverse while loading).
    func setDestination(_ id: ManagedObjectID, forRelationship name: String) {
        toOne[name] = id
    }

    var state: State { State(attributes: attributes, toOne: toOne, toMany: toMany, version: version) }

    func restore(_ state: State) {
        attributes = state.attributes
        toOne = state.toOne
        toMany = state.toMany
        version = state.version
    }

    /// What a failed save puts back.
    struct State {
        var attributes: [String: AttributeValue]
        var toOne: [String: ManagedObjectID]
        var toMany: [String: [ManagedObjectID]]
        var version: Int64
    }

    /// Nodes are equal when they are the same node.
    public static func == (lhs: AtomicStoreCacheNode, rhs: AtomicStoreCacheNode) -> Bool { lhs === rhs }

    /// Hashes the node's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// The object ID and values.
    public var description: String { "AtomicStoreCacheNode(\(objectID), \(attributes.count) attributes)" }
}
