internal import CLMDB

/// A handle to one named database (a B+tree of keys and values) inside an ``Environment``.
///
/// Get a handle from ``Environment/openDatabase(named:options:create:)``; it stays valid as long as the environment
/// is open and can be shared freely. Every operation takes the ``Transaction`` it runs in.
///
/// Keys are 1 to ``Environment/maxKeySize`` bytes and sort by their bytes (unless the database's options say
/// otherwise). Values are any size. Bytes that LMDB hands out point into the memory map and are lent only to a
/// closure; copy them to keep them. The corresponding LMDB type is `MDB_dbi`.
public struct Database: Sendable, Hashable {
    /// LMDB's number for the database (`MDB_dbi`); another engine under the store's key-value seam numbers its
    /// tables here.
    package let handle: UInt32

    /// The name, interned for the life of the process (`InternedName`), so that a copy of a handle — one per put
    /// in a loop that picks its table from an array — retains nothing.
    private let internedName: Unmanaged<InternedName>

    /// The database's name, or `nil` for the unnamed main database.
    public var name: String? { internedName._withUnsafeGuaranteedRef { $0.name } }

    /// The options the database was created with.
    public let options: DatabaseOptions

    /// A handle numbered `handle`: LMDB's, or another engine's under the store's key-value seam.
    package init(handle: UInt32, name: String?, options: DatabaseOptions) {
        self.handle = handle
        internedName = InternedName.interned(name)
        self.options = options
    }

    /// Equal when handle, name and options are (interned names compare by identity).
    public static func == (lhs: Database, rhs: Database) -> Bool {
        lhs.handle == rhs.handle && lhs.internedName.toOpaque() == rhs.internedName.toOpaque() && lhs.options == rhs.options
    }

    /// Hashes the handle, the name and the options.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(handle)
        hasher.combine(name)
        hasher.combine(options.rawValue)
    }
}

/// A database name kept for the life of the process: one per distinct name ever opened (a store has a few dozen),
/// never freed, so ``Database`` can hold it unretained.
final class InternedName: Sendable {
    let name: String?

    private init(_ name: String?) { self.name = name }

    private static let table = Locked<[String?: InternedName]>([:])

    /// The one interned name equal to `name`; the table keeps it, so the reference handed back needs no retain.
    static func interned(_ name: String?) -> Unmanaged<InternedName> {
        table.withLock { names in
            if let existing = names[name] { return Unmanaged.passUnretained(existing) }
            let made = InternedName(name)
            names[name] = made
            return Unmanaged.passUnretained(made)
        }
    }
}

// MARK: - Reading

extension Database {
    /// Looks up `key` and lends its value's bytes to `body`, without copying them.
    ///
    /// The bytes point into LMDB's memory map: they are valid only inside `body`. In a ``DatabaseOptions/dupSort``
    /// database this is the key's first value.
    ///
    /// - Returns: What `body` returns, or `nil` when the key is not there.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key, or what `body` throws.
    ///   The corresponding LMDB function is `mdb_get`.
    public func withValue<Result>(
        forKey key: UnsafeRawBufferPointer, in transaction: Transaction,
        _ body: (UnsafeRawBufferPointer) throws -> Result
    ) throws -> Result? {
        var keyValue = mdbValue(key)
        var found = MDB_val()
        let code = mdb_get(transaction.handle, handle, &keyValue, &found)
        if code == MDB_NOTFOUND { return nil }
        try transaction.check(code, database: self, message: keySizeMessage(key.count, transaction))
        return try body(UnsafeRawBufferPointer(found))
    }

    /// Looks up `key` in a read-only transaction and returns its value's bytes, borrowed from LMDB's memory map.
    ///
    /// A read-only transaction sees one snapshot and LMDB keeps every page of it until the transaction ends, so the
    /// bytes stay valid and unchanged until then: the caller must not use them after the transaction's closure
    /// returns. In write transactions, use `withValue(forKey:in:_:)`.
    ///
    /// - Returns: The bytes, or `nil` when the key is not there.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key. The corresponding LMDB function is `mdb_get`.
    public func borrowedValue(forKey key: UnsafeRawBufferPointer, in transaction: Transaction) throws -> UnsafeRawBufferPointer? {
        precondition(transaction.isReadOnly, "borrowed bytes outlive a lookup only in a read-only transaction")
        var keyValue = mdbValue(key)
        var found = MDB_val()
        let code = mdb_get(transaction.handle, handle, &keyValue, &found)
        if code == MDB_NOTFOUND { return nil }
        try transaction.check(code, database: self, message: keySizeMessage(key.count, transaction))
        return UnsafeRawBufferPointer(found)
    }

    /// Looks up `key` and lends its value's bytes to `body`, without copying them.
    ///
    /// - Returns: What `body` returns, or `nil` when the key is not there.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key, or what `body` throws.
    ///   The corresponding LMDB function is `mdb_get`.
    @inlinable
    public func withValue<Key: Sequence<UInt8>, Result>(
        forKey key: Key, in transaction: Transaction, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) throws -> Result? {
        try withBytes(key) { try withValue(forKey: $0, in: transaction, body) }
    }

    /// Returns a copy of the value stored under `key`, or `nil` when the key is not there.
    ///
    /// - Throws: ``LMDBError/badValueSize`` for an empty key. The corresponding LMDB function is `mdb_get`.
    @inlinable
    public func value<Key: Sequence<UInt8>>(forKey key: Key, in transaction: Transaction) throws -> [UInt8]? {
        try withValue(forKey: key, in: transaction) { Array($0) }
    }

    /// Whether `key` is in the database.
    ///
    /// - Throws: ``LMDBError/badValueSize`` for an empty key. The corresponding LMDB function is `mdb_get`.
    @inlinable
    public func contains<Key: Sequence<UInt8>>(key: Key, in transaction: Transaction) throws -> Bool {
        try withValue(forKey: key, in: transaction) { _ in () } != nil
    }

    /// The database's statistics as of `transaction`'s snapshot. The corresponding LMDB function is `mdb_stat`.
    ///
    /// - Throws: ``LMDBError`` if LMDB cannot read the database's record.
    public func statistics(in transaction: Transaction) throws -> Statistics {
        var stat = MDB_stat()
        try transaction.check(mdb_stat(transaction.handle, handle, &stat), database: self)
        return Statistics(stat)
    }
}

// MARK: - Writing

extension Database {
    /// Stores `value` under `key`, replacing the existing value unless `options` say otherwise (in a
    /// ``DatabaseOptions/dupSort`` database the value is added to the key's values).
    ///
    /// - Throws: ``LMDBError/badValueSize`` for a key that is empty or longer than ``Environment/maxKeySize``
    ///   (nothing is written); ``LMDBError/keyExists`` with ``PutOptions/noOverwrite`` or an out-of-order
    ///   ``PutOptions/append``; ``LMDBError/permissionDenied`` in a read-only transaction.
    ///   The corresponding LMDB function is `mdb_put`.
    public func put(
        _ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in transaction: Transaction,
        options: PutOptions = []
    ) throws {
        try validateKey(key.count, in: transaction)
        var keyValue = mdbValue(key)
        var dataValue = mdbValue(value)
        let code = mdb_put(transaction.handle, handle, &keyValue, &dataValue, options.rawValue)
        try transaction.check(code, database: self, message: putMessage(code, options, valueCount: value.count))
    }

    /// Stores `value` under `key`; see ``put(_:forKey:in:options:)-(UnsafeRawBufferPointer,_,_,_)``.
    ///
    /// - Throws: ``LMDBError/badValueSize`` for a bad key, ``LMDBError/keyExists`` when `options` forbid the
    ///   write. The corresponding LMDB function is `mdb_put`.
    @inlinable
    public func put<Value: Sequence<UInt8>, Key: Sequence<UInt8>>(
        _ value: Value, forKey key: Key, in transaction: Transaction, options: PutOptions = []
    ) throws {
        try withBytes(key) { key in
            try withBytes(value) { value in try put(value, forKey: key, in: transaction, options: options) }
        }
    }

    /// Reserves `count` bytes for the value of `key` and lets `fill` write them in place, directly into LMDB's
    /// buffer (`MDB_RESERVE`): no intermediate copy. `fill` must write every byte. Not available in
    /// ``DatabaseOptions/dupSort`` databases.
    ///
    /// - Returns: What `fill` returns.
    /// - Throws: ``LMDBError/badValueSize`` for a bad key, ``LMDBError/incompatible`` in a dupSort database,
    ///   ``LMDBError/keyExists`` when `options` forbid the write, or what `fill` throws (the caller's write
    ///   transaction then aborts). The corresponding LMDB function is `mdb_put` with `MDB_RESERVE`.
    public func reserve<Result>(
        count: Int, forKey key: UnsafeRawBufferPointer, in transaction: Transaction, options: PutOptions = [],
        _ fill: (UnsafeMutableRawBufferPointer) throws -> Result
    ) throws -> Result {
        if self.options.contains(.dupSort) {
            throw LMDBError(.incompatible, path: transaction.environment.path, database: name,
                            message: "reserve cannot be used in a dupSort database")
        }
        try validateKey(key.count, in: transaction)
        var keyValue = mdbValue(key)
        var dataValue = MDB_val(mv_size: count, mv_data: nil)
        let code = mdb_put(transaction.handle, handle, &keyValue, &dataValue, options.rawValue | UInt32(MDB_RESERVE))
        try transaction.check(code, database: self, message: putMessage(code, options, valueCount: count))
        return try fill(UnsafeMutableRawBufferPointer(start: dataValue.mv_data, count: count))
    }

    /// Reserves `count` bytes for the value of `key` and lets `fill` write them in place; see
    /// ``reserve(count:forKey:in:options:_:)-(_,UnsafeRawBufferPointer,_,_,_)``.
    ///
    /// - Throws: As the unsafe-pointer variant does.
    @inlinable
    public func reserve<Key: Sequence<UInt8>, Result>(
        count: Int, forKey key: Key, in transaction: Transaction, options: PutOptions = [],
        _ fill: (UnsafeMutableRawBufferPointer) throws -> Result
    ) throws -> Result {
        try withBytes(key) { try reserve(count: count, forKey: $0, in: transaction, options: options, fill) }
    }

    /// Deletes `key` (in a ``DatabaseOptions/dupSort`` database, with all its values).
    ///
    /// - Returns: `false` when the key was not there.
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction. The corresponding LMDB function is
    ///   `mdb_del`.
    @discardableResult
    public func delete(key: UnsafeRawBufferPointer, in transaction: Transaction) throws -> Bool {
        var keyValue = mdbValue(key)
        let code = mdb_del(transaction.handle, handle, &keyValue, nil)
        if code == MDB_NOTFOUND { return false }
        try transaction.check(code, database: self, message: keySizeMessage(key.count, transaction))
        return true
    }

    /// Deletes `key`; see ``delete(key:in:)-(UnsafeRawBufferPointer,_)``.
    ///
    /// - Returns: `false` when the key was not there.
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction.
    @inlinable @discardableResult
    public func delete<Key: Sequence<UInt8>>(key: Key, in transaction: Transaction) throws -> Bool {
        try withBytes(key) { try delete(key: $0, in: transaction) }
    }

    /// Deletes one key/value pair: in a ``DatabaseOptions/dupSort`` database the key keeps its other values;
    /// elsewhere the key is deleted only if its value equals `value`.
    ///
    /// - Returns: `false` when the pair was not there.
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction. The corresponding LMDB function is
    ///   `mdb_del`.
    @discardableResult
    public func delete(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in transaction: Transaction) throws -> Bool {
        if !options.contains(.dupSort) {
            // LMDB ignores the value outside dupSort databases; honour the documented contract instead.
            let matches = try withValue(forKey: key, in: transaction) { $0.elementsEqual(value) } ?? false
            guard matches else { return false }
            return try delete(key: key, in: transaction)
        }
        var keyValue = mdbValue(key)
        var dataValue = mdbValue(value)
        let code = mdb_del(transaction.handle, handle, &keyValue, &dataValue)
        if code == MDB_NOTFOUND { return false }
        try transaction.check(code, database: self)
        return true
    }

    /// Deletes one key/value pair; see ``delete(key:value:in:)-(UnsafeRawBufferPointer,_,_)``.
    ///
    /// - Returns: `false` when the pair was not there.
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction.
    @inlinable @discardableResult
    public func delete<Key: Sequence<UInt8>, Value: Sequence<UInt8>>(key: Key, value: Value, in transaction: Transaction) throws -> Bool {
        try withBytes(key) { key in try withBytes(value) { try delete(key: key, value: $0, in: transaction) } }
    }

    /// Deletes every entry and keeps the (now empty) database. The corresponding LMDB function is `mdb_drop`.
    ///
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction.
    public func clear(in transaction: Transaction) throws {
        try transaction.check(mdb_drop(transaction.handle, handle, 0), database: self)
    }

    /// Deletes the database itself from the environment when `transaction` commits. The handle (and every copy of
    /// it) must not be used afterwards, even if the transaction aborts; open the name again to create a new, empty
    /// database. A write that drops a database is not run again when it fills the map (``Environment/write(_:)``
    /// throws ``LMDBError/mapFull`` instead): empty a large database with ``clear(in:)`` first, in a write of its
    /// own, so that dropping it needs no room.
    /// The corresponding LMDB function is `mdb_drop` with `del = 1`.
    ///
    /// - Throws: ``LMDBError/permissionDenied`` in a read-only transaction.
    public func drop(in transaction: Transaction) throws {
        transaction.droppedDatabase = true
        try transaction.check(mdb_drop(transaction.handle, handle, 1), database: self)
        transaction.environment.forgetDatabase(named: name)
    }
}

// MARK: - Messages

extension Database {
    func validateKey(_ count: Int, in transaction: Transaction) throws(LMDBError) {
        guard count < 1 || count > transaction.environment.maxKeySize else { return }
        throw LMDBError(.badValueSize, path: transaction.environment.path, database: name,
                        message: keySizeMessage(count, transaction))
    }

    func keySizeMessage(_ count: Int, _ transaction: Transaction) -> String? {
        if count == 0 { return "a key must not be empty" }
        if count > transaction.environment.maxKeySize {
            return "a key of \(count) bytes is longer than the \(transaction.environment.maxKeySize)-byte limit"
        }
        return nil
    }

    func putMessage(_ code: Int32, _ options: PutOptions, valueCount: Int) -> String? {
        switch code {
        case MDB_KEYEXIST where options.contains(.append) || options.contains(.appendDuplicate):
            return "an appended key must sort after every key already in the database"
        case MDB_KEYEXIST:
            return "the key is already in the database"
        case MDB_BAD_VALSIZE where self.options.contains(.dupSort):
            return "a value of \(valueCount) bytes is too large for a dupSort database"
        default:
            return nil
        }
    }
}
