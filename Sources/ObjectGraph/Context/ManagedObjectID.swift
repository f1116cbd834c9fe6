import Foundation

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
public struct ManagedObjectID: Sendable, Hashable, CustomStringConvertible {
    /// The entity of the object.
    public let entityName: String
    /// The identifier (UUID) of the store holding the object; `nil` for a temporary ID.
    public let storeIdentifier: String?
    /// The store's key for the object (for a temporary ID, a unique string).
    public let referenceObject: ReferenceObject

    /// Whether the ID is temporary: the object has not been saved yet.
    public var isTemporaryID: Bool { storeIdentifier == nil }

    /// A permanent ID.
    public init(entityName: String, storeIdentifier: String, referenceObject: ReferenceObject) {
        self.entityName = entityName
        self.storeIdentifier = storeIdentifier
        self.referenceObject = referenceObject
    }

    /// A new temporary ID.
    static func temporary(entityName: String) -> ManagedObjectID {
        ManagedObjectID(entityName: entityName, storeIdentifier: nil, referenceObject: .string(UUID().uuidString))
    }

    private init(entityName: String, storeIdentifier: String?, referenceObject: ReferenceObject) {
        self.entityName = entityName
        self.storeIdentifier = storeIdentifier
        self.referenceObject = referenceObject
    }

    /// The ID's URI: `x-coredata://<store UUID>/<Entity>/p<key>`, or `x-coredata:///<Entity>/t<UUID>` for a
    /// temporary ID. ``PersistentStoreCoordinator/managedObjectID(forURIRepresentation:)`` turns it back into an ID.
    public var uriRepresentation: URL {
        let entity = entityName.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? entityName
        if let storeIdentifier {
            return URL(string: "x-coredata://\(storeIdentifier)/\(entity)/p\(referenceObject)")!
        }
        guard case .string(let token) = referenceObject else { preconditionFailure("a temporary ID has a string token") }
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
            return ManagedObjectID(entityName: entity, storeIdentifier: nil, referenceObject: .string(key))
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
        if lhs.entityName != rhs.entityName { return lhs.entityName < rhs.entityName }
        if lhs.storeIdentifier != rhs.storeIdentifier { return (lhs.storeIdentifier ?? "") < (rhs.storeIdentifier ?? "") }
        switch (lhs.referenceObject, rhs.referenceObject) {
        case (.integer(let a), .integer(let b)): return a < b
        case (.string(let a), .string(let b)): return a < b
        case (.integer, .string): return true
        case (.string, .integer): return false
        }
    }
}
