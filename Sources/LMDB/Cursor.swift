internal import CLMDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One key/value pair a cursor is positioned on.
///
/// The bytes point into LMDB's memory map. They stay valid until the cursor moves or writes, or its transaction
/// ends, whichever comes first; copy them (``keyBytes``, ``valueBytes``) to keep them.
public struct CursorEntry {
    /// The key's bytes, borrowed from the map.
    public let key: UnsafeRawBufferPointer
    /// The value's bytes, borrowed from the map.
    public let value: UnsafeRawBufferPointer

    /// A copy of the key.
    public var keyBytes: [UInt8] { Array(key) }
    /// A copy of the value.
    public var valueBytes: [UInt8] { Array(value) }

    @inline(__always)
    init(key: MDB_val, value: MDB_val) {
        self.key = UnsafeRawBufferPointer(key)
        self.value = UnsafeRawBufferPointer(value)
    }

    /// An entry of borrowed bytes: LMDB's, or another engine's under the store's key-value seam.
    @inline(__always)
    package init(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        self.key = key
        self.value = value
    }
}

/// A position in a database, for walking its keys in order and for writing where it stands.
///
/// Get a cursor from ``Database/withCursor(in:_:)``; it lives until that closure returns. Each move returns the
/// ``CursorEntry`` it lands on, or `nil` when there is nothing there (the cursor's position is then unspecified:
/// move it with a positioning call before stepping again). For ranges, see ``entries(in:direction:)``.
/// The corresponding LMDB type is `MDB_cursor`.
public final class Cursor {
    /// The database the cursor walks.
    public let database: Database

    /// The transaction the cursor belongs to.
    public let transaction: Transaction

    private var pointer: OpaquePointer?

    init(database: Database, transaction: Transaction, pointer: OpaquePointer) {
        self.database = database
        self.transaction = transaction
        self.pointer = pointer
    }

    var handle: OpaquePointer {
        @inline(__always) get {
            guard let pointer, transaction.isActive else {
                preconditionFailure("LMDB cursor used after its closure returned or its transaction finished")
            }
            return pointer
        }
    }

    func close() {
        if let pointer { mdb_cursor_close(pointer) }
        pointer = nil
    }

    /// Runs one positioning operation; `nil` for `MDB_NOTFOUND`.
    @inline(__always)
    func get(_ operation: MDB_cursor_op) throws(LMDBError) -> CursorEntry? {
        var key = MDB_val()
        var value = MDB_val()
        var code = mdb_cursor_get(handle, &key, &value, operation)
        if code == MDB_SUCCESS && key.mv_data == nil {
            // MDB_FIRST_DUP and MDB_LAST_DUP fill in only the value.
            code = mdb_cursor_get(handle, &key, &value, MDB_GET_CURRENT)
        }
        if code == MDB_NOTFOUND { return nil }
        try transaction.check(code, database: database)
        return CursorEntry(key: key, value: value)
    }

    /// Runs one positioning operation that takes a key (and for some operations a value).
    @inline(__always)
    func get(_ operation: MDB_cursor_op, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer? = nil) throws(LMDBError) -> CursorEntry? {
        var keyValue = mdbValue(key)
        var dataValue = value.map(mdbValue) ?? MDB_val()
        let code = mdb_cursor_get(handle, &keyValue, &dataValue, operation)
        if code == MDB_NOTFOUND { return nil }
        try transaction.check(code, database: database)
        return CursorEntry(key: keyValue, value: dataValue)
    }
}

// MARK: - Moving

extension Cursor {
    /// Moves to the first entry. The corresponding LMDB operation is `MDB_FIRST`.
    /// - Throws: ``LMDBError`` if LMDB fails (corruption); an empty database gives `nil`, not an error.
    public func first() throws -> CursorEntry? { try get(MDB_FIRST) }

    /// Moves to the last entry. The corresponding LMDB operation is `MDB_LAST`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func last() throws -> CursorEntry? { try get(MDB_LAST) }

    /// Moves to the next entry (the next value of the same key first, in a dupSort database); from an unpositioned
    /// cursor, the first entry. The corresponding LMDB operation is `MDB_NEXT`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func next() throws -> CursorEntry? { try get(MDB_NEXT) }

    /// Moves to the previous entry; from an unpositioned cursor, the last entry. The corresponding LMDB operation is
    /// `MDB_PREV`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func previous() throws -> CursorEntry? { try get(MDB_PREV) }

    /// Moves to the first value of the next key, skipping the current key's other values. The corresponding LMDB
    /// operation is `MDB_NEXT_NODUP`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func nextKey() throws -> CursorEntry? { try get(MDB_NEXT_NODUP) }

    /// Moves to the last value of the previous key. The corresponding LMDB operation is `MDB_PREV_NODUP`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func previousKey() throws -> CursorEntry? { try get(MDB_PREV_NODUP) }

    /// Moves to the current key's next value, or `nil` at its last. The corresponding LMDB operation is
    /// `MDB_NEXT_DUP`.
    /// - Throws: ``LMDBError/incompatible`` outside a ``DatabaseOptions/dupSort`` database.
    public func nextDuplicate() throws -> CursorEntry? { try get(MDB_NEXT_DUP) }

    /// Moves to the current key's previous value, or `nil` at its first. The corresponding LMDB operation is
    /// `MDB_PREV_DUP`.
    /// - Throws: ``LMDBError/incompatible`` outside a ``DatabaseOptions/dupSort`` database.
    public func previousDuplicate() throws -> CursorEntry? { try get(MDB_PREV_DUP) }

    /// Moves to the current key's first value. The corresponding LMDB operation is `MDB_FIRST_DUP`.
    /// - Throws: ``LMDBError/incompatible`` outside a ``DatabaseOptions/dupSort`` database.
    public func firstDuplicate() throws -> CursorEntry? { try get(MDB_FIRST_DUP) }

    /// Moves to the current key's last value. The corresponding LMDB operation is `MDB_LAST_DUP`.
    /// - Throws: ``LMDBError/incompatible`` outside a ``DatabaseOptions/dupSort`` database.
    public func lastDuplicate() throws -> CursorEntry? { try get(MDB_LAST_DUP) }

    /// The entry the cursor is on, or `nil` when it is not positioned on one; right after ``deleteCurrent(allDuplicates:)``,
    /// the entry that followed the deleted one. The corresponding LMDB operation is `MDB_GET_CURRENT`.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func current() throws -> CursorEntry? {
        var key = MDB_val()
        var value = MDB_val()
        let code = mdb_cursor_get(handle, &key, &value, MDB_GET_CURRENT)
        if code == MDB_NOTFOUND && database.options.contains(.dupSort) && mdb_cursor_get(handle, &key, nil, MDB_GET_CURRENT) == MDB_SUCCESS {
            // A delete took the last of a key's values and left others before it: LMDB keeps the cursor on the key,
            // past its values, where the entry that follows is the next key's first value.
            return try nextKey()
        }
        if code == MDB_NOTFOUND || code == EINVAL { return nil }
        try transaction.check(code, database: database)
        return CursorEntry(key: key, value: value)
    }

    /// Moves to `key` exactly (its first value), or returns `nil` when it is not there. The corresponding LMDB
    /// operation is `MDB_SET_KEY`.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key.
    public func seek(exactly key: UnsafeRawBufferPointer) throws -> CursorEntry? {
        try get(MDB_SET_KEY, key: key)
    }

    /// Moves to the first entry whose key is at or after `key`, or returns `nil` when every key sorts before it.
    /// The corresponding LMDB operation is `MDB_SET_RANGE`.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key.
    public func seek(atOrAfter key: UnsafeRawBufferPointer) throws -> CursorEntry? {
        try get(MDB_SET_RANGE, key: key)
    }

    /// In a ``DatabaseOptions/dupSort`` database, moves to the exact key/value pair. The corresponding LMDB
    /// operation is `MDB_GET_BOTH`.
    /// - Throws: ``LMDBError/incompatible`` outside a dupSort database.
    public func seek(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> CursorEntry? {
        try get(MDB_GET_BOTH, key: key, value: value)
    }

    /// Moves to `key` exactly; see ``seek(exactly:)-(UnsafeRawBufferPointer)``.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key.
    @inlinable
    public func seek<Key: Sequence<UInt8>>(exactly key: Key) throws -> CursorEntry? {
        try withBytes(key) { try seek(exactly: $0) }
    }

    /// Moves to the first key at or after `key`; see ``seek(atOrAfter:)-(UnsafeRawBufferPointer)``.
    /// - Throws: ``LMDBError/badValueSize`` for an empty key.
    @inlinable
    public func seek<Key: Sequence<UInt8>>(atOrAfter key: Key) throws -> CursorEntry? {
        try withBytes(key) { try seek(atOrAfter: $0) }
    }

    /// The number of values of the current key (1 outside a dupSort database). The corresponding LMDB function is
    /// `mdb_cursor_count`.
    /// - Throws: ``LMDBError/invalidArgument`` when the cursor is not positioned.
    public func duplicateCount() throws -> Int {
        var count = 0
        try transaction.check(mdb_cursor_count(handle, &count), database: database)
        return count
    }
}

// MARK: - Writing at the cursor

extension Cursor {
    /// Stores `value` under `key` and leaves the cursor on the new entry. The corresponding LMDB function is
    /// `mdb_cursor_put`.
    /// - Throws: As ``Database/put(_:forKey:in:options:)-(UnsafeRawBufferPointer,_,_,_)`` does.
    public func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, options: PutOptions = []) throws {
        try database.validateKey(key.count, in: transaction)
        var keyValue = mdbValue(key)
        var dataValue = mdbValue(value)
        let code = mdb_cursor_put(handle, &keyValue, &dataValue, options.rawValue)
        try transaction.check(code, database: database, message: database.putMessage(code, options, valueCount: value.count))
    }

    /// Stores the values laid one after another in `values`, each `size` bytes, under `key` in one call
    /// (`MDB_MULTIPLE`): the key is found once for all of them, so a run of one key's values costs one search, and with
    /// ``PutOptions/appendDuplicate`` none inside the key's values either. The database must be
    /// ``DatabaseOptions/dupFixed`` with values of `size` bytes. Leaves the cursor on the last value stored. The
    /// corresponding LMDB function is `mdb_cursor_put`.
    /// - Throws: ``LMDBError/invalidArgument`` when `size` is not positive or does not divide `values.count`;
    ///   ``LMDBError/incompatible`` in a database without ``DatabaseOptions/dupFixed``; otherwise as
    ///   ``put(_:forKey:options:)-(UnsafeRawBufferPointer,_,_)`` does — an error leaves the values before the refused one
    ///   stored, as separate puts would.
    public func putDuplicates(_ values: UnsafeRawBufferPointer, size: Int, forKey key: UnsafeRawBufferPointer, options: PutOptions = []) throws {
        guard size > 0, values.count % size == 0 else {
            throw LMDBError(.invalidArgument, path: transaction.environment.path, database: database.name,
                            message: "\(values.count) bytes of values are not a whole number of \(size)-byte values")
        }
        guard database.options.contains(.dupFixed) else {
            throw LMDBError(.incompatible, path: transaction.environment.path, database: database.name,
                            message: "several values are put at once only in a dupFixed database")
        }
        guard !values.isEmpty else { return }
        try database.validateKey(key.count, in: transaction)
        var keyValue = mdbValue(key)
        // MDB_MULTIPLE reads two values: the first value (its size and where the run starts), then the count.
        var data = (MDB_val(mv_size: size, mv_data: UnsafeMutableRawPointer(mutating: values.baseAddress)),
                    MDB_val(mv_size: values.count / size, mv_data: nil))
        let code = withUnsafeMutablePointer(to: &data) { pair in
            pair.withMemoryRebound(to: MDB_val.self, capacity: 2) { mdb_cursor_put(handle, &keyValue, $0, options.rawValue | UInt32(MDB_MULTIPLE)) }
        }
        try transaction.check(code, database: database, message: database.putMessage(code, options, valueCount: size))
    }

    /// Stores `value` under `key` and leaves the cursor on the new entry.
    /// - Throws: As ``Database/put(_:forKey:in:options:)-(UnsafeRawBufferPointer,_,_,_)`` does.
    @inlinable
    public func put<Value: Sequence<UInt8>, Key: Sequence<UInt8>>(_ value: Value, forKey key: Key, options: PutOptions = []) throws {
        try withBytes(key) { key in try withBytes(value) { try put($0, forKey: key, options: options) } }
    }

    /// Replaces the value of the entry the cursor is on (`MDB_CURRENT`). In a dupSort database the new value must
    /// sort in the same place as the old one.
    /// - Throws: ``LMDBError`` when the cursor is not positioned or LMDB refuses the value.
    public func replaceCurrentValue(with value: UnsafeRawBufferPointer) throws {
        guard let entry = try current() else {
            throw LMDBError(.notFound, path: transaction.environment.path, database: database.name,
                            message: "the cursor is not on an entry")
        }
        var keyValue = mdbValue(entry.key)
        var dataValue = mdbValue(value)
        try transaction.check(mdb_cursor_put(handle, &keyValue, &dataValue, UInt32(MDB_CURRENT)), database: database)
    }

    /// Deletes the entry the cursor is on; with `allDuplicates`, every value of its key. The cursor then stands on
    /// the entry after it. The corresponding LMDB function is `mdb_cursor_del`.
    /// - Throws: ``LMDBError`` when the cursor is not positioned or the transaction is read-only.
    public func deleteCurrent(allDuplicates: Bool = false) throws {
        let flags = allDuplicates && database.options.contains(.dupSort) ? UInt32(MDB_NODUPDATA) : 0
        try transaction.check(mdb_cursor_del(handle, flags), database: database)
    }
}

// MARK: - Opening

extension Database {
    /// Opens a cursor on this database in `transaction`, passes it to `body`, and closes it when `body` returns.
    ///
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, or ``LMDBError`` if the cursor cannot be opened.
    ///   The corresponding LMDB functions are `mdb_cursor_open` and `mdb_cursor_close`.
    public func withCursor<Result>(in transaction: Transaction, _ body: (Cursor) throws -> Result) throws -> Result {
        var pointer: OpaquePointer?
        try transaction.check(mdb_cursor_open(transaction.handle, handle, &pointer), database: self)
        let cursor = Cursor(database: self, transaction: transaction, pointer: pointer!)
        defer { cursor.close() }
        return try body(cursor)
    }
}
