internal import CLMDB

/// The flags a database is created with. They are stored with the database and must be given again, unchanged,
/// every time it is opened.
public struct DatabaseOptions: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The raw `MDB_*` flag bits.
    public let rawValue: UInt32

    /// Creates options from raw `MDB_*` flag bits.
    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Keys compare from their last byte to their first (`MDB_REVERSEKEY`).
    public static let reverseKey = DatabaseOptions(rawValue: UInt32(MDB_REVERSEKEY))
    /// A key may hold several values, kept sorted (`MDB_DUPSORT`). Values are then limited to the key size limit.
    /// LMDB 0.9.24 has known cursor bugs with duplicates; prefer composite keys where you can.
    public static let dupSort = DatabaseOptions(rawValue: UInt32(MDB_DUPSORT))
    /// Keys are native-endian unsigned integers of one size, `UInt32` or `UInt64`, compared as numbers
    /// (`MDB_INTEGERKEY`).
    public static let integerKey = DatabaseOptions(rawValue: UInt32(MDB_INTEGERKEY))
    /// With ``dupSort``: every value has the same size (`MDB_DUPFIXED`).
    public static let dupFixed = DatabaseOptions(rawValue: UInt32(MDB_DUPFIXED))
    /// With ``dupSort``: values are native-endian unsigned integers compared as numbers (`MDB_INTEGERDUP`).
    public static let integerDup = DatabaseOptions(rawValue: UInt32(MDB_INTEGERDUP))
    /// With ``dupSort``: values compare from their last byte to their first (`MDB_REVERSEDUP`).
    public static let reverseDup = DatabaseOptions(rawValue: UInt32(MDB_REVERSEDUP))

    /// The option names, e.g. `[dupSort, dupFixed]`.
    public var description: String {
        let names: [(DatabaseOptions, String)] = [
            (.reverseKey, "reverseKey"), (.dupSort, "dupSort"), (.integerKey, "integerKey"),
            (.dupFixed, "dupFixed"), (.integerDup, "integerDup"), (.reverseDup, "reverseDup"),
        ]
        return "[" + names.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
    }
}

/// How a put treats an existing key.
public struct PutOptions: OptionSet, Sendable, Hashable {
    /// The raw `MDB_*` flag bits.
    public let rawValue: UInt32

    /// Creates options from raw `MDB_*` flag bits.
    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// Fail with ``LMDBError/keyExists`` if the key is already there (`MDB_NOOVERWRITE`).
    public static let noOverwrite = PutOptions(rawValue: UInt32(MDB_NOOVERWRITE))
    /// In a ``DatabaseOptions/dupSort`` database, fail with ``LMDBError/keyExists`` if this exact key/value pair is
    /// already there (`MDB_NODUPDATA`).
    public static let noDuplicateData = PutOptions(rawValue: UInt32(MDB_NODUPDATA))
    /// The key sorts after every key in the database: store it without a search (`MDB_APPEND`, or
    /// `MDB_APPENDDUP` for a value after every value of its key). Fast bulk loading of sorted data; a key out of
    /// order fails with ``LMDBError/keyExists``.
    public static let append = PutOptions(rawValue: UInt32(MDB_APPEND))
    /// In a ``DatabaseOptions/dupSort`` database, the value sorts after every value of its key (`MDB_APPENDDUP`).
    public static let appendDuplicate = PutOptions(rawValue: UInt32(MDB_APPENDDUP))
}
