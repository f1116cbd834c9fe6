internal import CLMDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error reported by LMDB, or by this wrapper on LMDB's behalf.
///
/// The raw value is the C return code: one of LMDB's own codes (`MDB_MAP_FULL`, `MDB_KEYEXIST`, …) or an `errno`
/// value (`ENOENT`, `EACCES`, …) passed through by LMDB. Each error also carries the file and database it concerns and,
/// where the code alone is vague, a message that says what went wrong.
///
/// Match errors by code with `catch`:
///
/// ```swift
/// do {
///     try database.put(value, forKey: key, in: transaction, options: .noOverwrite)
/// } catch LMDBError.keyExists {
///     // the key was already there
/// }
/// ```
///
/// Two errors are equal when their codes are equal; the path, database and message are context, not identity.
///
/// A key that is not found is not an error: lookups return `nil`.
public struct LMDBError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The C return code.
    public let rawValue: Int32

    /// The store file or directory the error concerns, when known.
    public var path: String?

    /// The name of the database the error concerns, when known (`nil` also stands for the unnamed main database).
    public var database: String?

    /// A sentence that says what went wrong in terms of the call that failed, when the code alone is vague.
    public var message: String?

    /// Creates an error from a C return code, with no context.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// Creates an error from a C return code with the context it concerns.
    public init(_ code: LMDBError, path: String? = nil, database: String? = nil, message: String? = nil) {
        self.rawValue = code.rawValue
        self.path = path
        self.database = database
        self.message = message
    }

    /// The symbolic name of the code (`MDB_MAP_FULL`, `ENOENT`, …), or the number when it has no name here.
    public var name: String {
        Self.names[rawValue] ?? "code \(rawValue)"
    }

    /// LMDB's own explanation of the code. The corresponding LMDB function is `mdb_strerror`.
    public var reason: String {
        String(cString: mdb_strerror(rawValue))
    }

    /// A one-line description: the message (if any), the code's name and LMDB's explanation, then the database and path.
    public var description: String {
        var text = ""
        if let message { text += message + " — " }
        // LMDB's explanations of its own codes start with the code's name already ("MDB_MAP_FULL: Environment …").
        let reason = reason
        text += reason.hasPrefix(name + ":") ? reason : "\(name): \(reason)"
        if let database { text += " (database \"\(database)\")" }
        if let path { text += " [\(path)]" }
        return text
    }

    /// Whether two errors have the same code (context is not compared).
    public static func == (lhs: LMDBError, rhs: LMDBError) -> Bool {
        lhs.rawValue == rhs.rawValue
    }

    /// Hashes the code.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rawValue)
    }

    /// Matches any error whose code equals the pattern's, so that `catch LMDBError.mapFull` works.
    public static func ~= (pattern: LMDBError, value: any Error) -> Bool {
        (value as? LMDBError)?.rawValue == pattern.rawValue
    }
}

extension LMDBError {
    /// The key/data pair already exists (`MDB_KEYEXIST`), e.g. a put with ``PutOptions/noOverwrite``.
    public static let keyExists = LMDBError(rawValue: MDB_KEYEXIST)
    /// No matching key/data pair (`MDB_NOTFOUND`). Lookups return `nil` instead; this code is thrown only where a
    /// thing that must exist does not, such as a named database in a read-only store.
    public static let notFound = LMDBError(rawValue: MDB_NOTFOUND)
    /// A requested page was not found (`MDB_PAGE_NOTFOUND`): the file is corrupted.
    public static let pageNotFound = LMDBError(rawValue: MDB_PAGE_NOTFOUND)
    /// A located page was of the wrong type (`MDB_CORRUPTED`), or the file is shorter than its meta page says.
    public static let corrupted = LMDBError(rawValue: MDB_CORRUPTED)
    /// An update of meta page failed or the environment had a fatal error (`MDB_PANIC`).
    public static let panic = LMDBError(rawValue: MDB_PANIC)
    /// The file was written by an incompatible LMDB version (`MDB_VERSION_MISMATCH`).
    public static let versionMismatch = LMDBError(rawValue: MDB_VERSION_MISMATCH)
    /// The file is not an LMDB file (`MDB_INVALID`).
    public static let invalid = LMDBError(rawValue: MDB_INVALID)
    /// The memory map is full (`MDB_MAP_FULL`). ``Environment/write(_:)`` absorbs it by growing the map.
    public static let mapFull = LMDBError(rawValue: MDB_MAP_FULL)
    /// The environment has no room for another named database (`MDB_DBS_FULL`); raise
    /// ``Environment/Options/maxDatabases``.
    public static let databasesFull = LMDBError(rawValue: MDB_DBS_FULL)
    /// Every reader slot is taken (`MDB_READERS_FULL`); raise ``Environment/Options/maxReaders``.
    public static let readersFull = LMDBError(rawValue: MDB_READERS_FULL)
    /// The transaction has too many dirty pages (`MDB_TXN_FULL`).
    public static let transactionFull = LMDBError(rawValue: MDB_TXN_FULL)
    /// The cursor stack is too deep (`MDB_CURSOR_FULL`): internal error or corruption.
    public static let cursorFull = LMDBError(rawValue: MDB_CURSOR_FULL)
    /// A page has no more space (`MDB_PAGE_FULL`): internal error.
    public static let pageFull = LMDBError(rawValue: MDB_PAGE_FULL)
    /// Another process grew the map beyond this process's mapping (`MDB_MAP_RESIZED`). The wrapper absorbs it.
    public static let mapResized = LMDBError(rawValue: MDB_MAP_RESIZED)
    /// The operation does not fit the database's flags (`MDB_INCOMPATIBLE`), e.g. a duplicate operation on a
    /// database without ``DatabaseOptions/dupSort``, or opening a database with flags that differ from its creation.
    public static let incompatible = LMDBError(rawValue: MDB_INCOMPATIBLE)
    /// A reader slot was reused or is invalid (`MDB_BAD_RSLOT`).
    public static let badReaderSlot = LMDBError(rawValue: MDB_BAD_RSLOT)
    /// The transaction must abort, has a child, or is invalid (`MDB_BAD_TXN`).
    public static let badTransaction = LMDBError(rawValue: MDB_BAD_TXN)
    /// A key or value has an unsupported size (`MDB_BAD_VALSIZE`): keys must be 1 to 511 bytes.
    public static let badValueSize = LMDBError(rawValue: MDB_BAD_VALSIZE)
    /// The database handle was changed unexpectedly (`MDB_BAD_DBI`).
    public static let badDatabaseHandle = LMDBError(rawValue: MDB_BAD_DBI)

    /// No such file or directory (`ENOENT`).
    public static let noSuchFile = LMDBError(rawValue: ENOENT)
    /// Permission denied (`EACCES`), e.g. writing in a read-only environment.
    public static let permissionDenied = LMDBError(rawValue: EACCES)
    /// An argument LMDB rejected (`EINVAL`).
    public static let invalidArgument = LMDBError(rawValue: EINVAL)
    /// The file is already open in this process in a way that conflicts with the request (`EBUSY`).
    public static let busy = LMDBError(rawValue: EBUSY)
    /// Out of disk space (`ENOSPC`).
    public static let noSpace = LMDBError(rawValue: ENOSPC)
    /// The call would deadlock (`EDEADLK`): a second write transaction on a thread that already holds one.
    public static let wouldDeadlock = LMDBError(rawValue: EDEADLK)

    private static let names: [Int32: String] = [
        MDB_KEYEXIST: "MDB_KEYEXIST", MDB_NOTFOUND: "MDB_NOTFOUND", MDB_PAGE_NOTFOUND: "MDB_PAGE_NOTFOUND",
        MDB_CORRUPTED: "MDB_CORRUPTED", MDB_PANIC: "MDB_PANIC", MDB_VERSION_MISMATCH: "MDB_VERSION_MISMATCH",
        MDB_INVALID: "MDB_INVALID", MDB_MAP_FULL: "MDB_MAP_FULL", MDB_DBS_FULL: "MDB_DBS_FULL",
        MDB_READERS_FULL: "MDB_READERS_FULL", MDB_TLS_FULL: "MDB_TLS_FULL", MDB_TXN_FULL: "MDB_TXN_FULL",
        MDB_CURSOR_FULL: "MDB_CURSOR_FULL", MDB_PAGE_FULL: "MDB_PAGE_FULL", MDB_MAP_RESIZED: "MDB_MAP_RESIZED",
        MDB_INCOMPATIBLE: "MDB_INCOMPATIBLE", MDB_BAD_RSLOT: "MDB_BAD_RSLOT", MDB_BAD_TXN: "MDB_BAD_TXN",
        MDB_BAD_VALSIZE: "MDB_BAD_VALSIZE", MDB_BAD_DBI: "MDB_BAD_DBI",
        ENOENT: "ENOENT", EACCES: "EACCES", EINVAL: "EINVAL", EBUSY: "EBUSY", ENOSPC: "ENOSPC",
        EDEADLK: "EDEADLK", ENOMEM: "ENOMEM", EIO: "EIO", EAGAIN: "EAGAIN", EEXIST: "EEXIST", ENOTDIR: "ENOTDIR",
        EISDIR: "EISDIR", EROFS: "EROFS",
    ]
}
