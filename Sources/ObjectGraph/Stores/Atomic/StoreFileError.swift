import Foundation

/// A store file that cannot be read or written: which file, where in it, which record and field, and why.
///
/// Atomic stores throw it from ``AtomicStore/load()`` and ``AtomicStore/save()``; when it is thrown, the file is
/// left as it was.
public struct StoreFileError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong, broadly.
    public struct Kind: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The kind's name.
        public let rawValue: String
        /// Creates a kind from its name.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The kind's name.
        public var description: String { rawValue }

        /// The file is not well-formed (bad JSON, bad CSV quoting, a missing header).
        public static let malformed = Kind(rawValue: "malformed")
        /// A value does not fit its attribute's type, or a field the entity does not have.
        public static let wrongValueType = Kind(rawValue: "wrongValueType")
        /// A relationship names a record the store does not hold.
        public static let danglingReference = Kind(rawValue: "danglingReference")
        /// The file was written for another model, or by another store type.
        public static let foreignFile = Kind(rawValue: "foreignFile")
        /// The file could not be read or written.
        public static let io = Kind(rawValue: "io")
    }

    /// What is wrong, broadly.
    public var kind: Kind
    /// The file.
    public var url: URL
    /// The 1-based line, when known.
    public var line: Int?
    /// The record, as `Entity id`, when known.
    public var record: String?
    /// The field (attribute, relationship or column), when known.
    public var field: String?
    /// What is wrong, in a sentence.
    public var reason: String

    /// Creates an error.
    public init(_ kind: Kind, url: URL, line: Int? = nil, record: String? = nil, field: String? = nil, reason: String) {
        self.kind = kind
        self.url = url
        self.line = line
        self.record = record
        self.field = field
        self.reason = reason
    }

    /// `path, line N, record E id, field "f": reason [kind]`.
    public var description: String {
        var text = url.path
        if let line { text += ", line \(line)" }
        if let record { text += ", record \(record)" }
        if let field { text += ", field \"\(field)\"" }
        return text + ": \(reason) [\(kind)]"
    }
}
