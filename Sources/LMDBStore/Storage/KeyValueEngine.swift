import LMDB

// The key-value seam: every operation the store asks of the engine under it, written down as three protocols.
// LMDB implements them (`LMDBEngine.swift`, a few lines each: the wrapper already speaks this vocabulary); a second,
// in-memory engine in the test target implements them too, and the store's test suite runs over both
// (`Docs/ARCHITECTURE.md`, "The key-value seam", states what an engine must guarantee).
//
// The seam speaks the LMDB wrapper's plain value types: a ``Database`` is a table handle (a number, a name and the
// table's options), a ``CursorEntry`` borrowed key and value bytes, a ``KeyRange`` a range of keys, ``PutOptions``
// and ``DatabaseOptions`` option sets, and ``LMDBError`` the codes the store acts on. None of them holds LMDB state.

/// An ordered key-value engine: named tables of byte keys in `memcmp` order, each key with one value or (in a
/// ``DatabaseOptions/dupSort`` table) a sorted set of non-empty values, read in snapshot transactions and written in
/// serialized, atomic ones.
protocol KeyValueEngine: AnyObject, Sendable {
    /// The longest key a table takes, in bytes; longer (and empty) keys are refused with
    /// ``LMDBError/badValueSize``.
    var maxKeySize: Int { get }

    /// The handle of the table `name` (`nil`: the main table, whose keys are the other tables' names), created
    /// with `options` if `create` and missing. A missing table that is not created is ``LMDBError/notFound``; a
    /// table that exists with other ``DatabaseOptions/dupSort`` options is ``LMDBError/incompatible``.
    func openDatabase(named name: String?, options: DatabaseOptions, create: Bool) throws -> Database

    /// Begins a read transaction: a snapshot of the last commit, unchanged by writes that commit while it is open.
    /// Bytes it lends stay valid until ``KeyValueTransaction/endRead()``, which the caller must call exactly once
    /// (``KeyValueEngine/read(_:)`` does). A begin and an end rather than a closure: a point read through the
    /// protocol then calls no closure and copies no captured values.
    func beginRead() throws -> any KeyValueTransaction

    /// Runs `body` in the one write transaction: it commits when `body` returns, and nothing of it is seen (by
    /// readers or after a crash) when `body` throws. `body` may be run again when the engine had to grow.
    func withWriteTransaction(_ body: (any KeyValueTransaction) throws -> Void) throws

    /// Runs `body` while no other process has the store open, keeping them out until it returns (a migration);
    /// ``LMDBError/busy`` when another process has it open. An engine only one process reads runs `body` as it is.
    func runExclusively(_ body: () throws -> Void) throws

    /// Checks the engine's own structures (LMDB's B-tree pages) without trusting them, and returns the problems
    /// found; an engine with nothing on disk has nothing to check.
    func checkPages() throws -> [String]
}

extension KeyValueEngine {
    func runExclusively(_ body: () throws -> Void) throws { try body() }

    /// Drops `tables`, each emptied in a write of its own first (a large table's freed pages need room, and a write
    /// that fills the map runs again — which a write that drops a table cannot), then all dropped in one write, which
    /// needs next to no room, and in which `finish` runs too.
    func drop(_ tables: [Database], finishing finish: (any KeyValueTransaction) throws -> Void = { _ in }) throws {
        for table in tables { try write { try table.clear(in: $0) } }
        try write { transaction in
            for table in tables { try table.drop(in: transaction) }
            try finish(transaction)
        }
    }

    /// The names in the engine's main table — the file's tables (and, in a file that is not a store, any other
    /// keys) — in name order, those starting with `prefix` only.
    func tableNames(startingWith prefix: String = "") throws -> [String] {
        let main = try openDatabase(named: nil, options: [], create: false)
        return try read { transaction in
            var names: [String] = []
            try main.withCursor(in: transaction) { cursor in
                try cursor.forEach(in: prefix.isEmpty ? .all : KeyRange(lower: .inclusive(Array(prefix.utf8)))) { entry in
                    guard entry.key.starts(with: prefix.utf8) else { return false }
                    names.append(String(decoding: entry.key, as: UTF8.self))
                    return true
                }
            }
            return names
        }
    }

    /// The handle of the existing table `name`, whichever of the store's table options it was made with; `nil` when
    /// there is no such table.
    func openExistingDatabase(named name: String) throws -> Database? {
        for options in [DatabaseOptions(), [.dupSort, .dupFixed], [.dupSort]] {
            do {
                return try openDatabase(named: name, options: options, create: false)
            } catch LMDBError.incompatible {
                continue
            } catch LMDBError.notFound {
                return nil
            }
        }
        return nil
    }
}

/// A transaction of a ``KeyValueEngine``: the operations on one table's keys and values.
protocol KeyValueTransaction: AnyObject {
    /// Ends a read transaction begun by ``KeyValueEngine/beginRead()``.
    func endRead()

    /// The commit a read transaction sees: two reads with the same number see the same data, so a scan may read
    /// parts of one table in each of them on other threads (LMDB's `mdb_txn_id`).
    var snapshotNumber: UInt64 { get }

    /// The value of `key` (in a dupSort table its first), borrowed until the transaction ends or, in a write
    /// transaction, until its next write; `nil` when the key is not there.
    func borrowedValue(forKey key: UnsafeRawBufferPointer, in table: Database) throws -> UnsafeRawBufferPointer?

    /// Stores `value` under `key`: replaces the value, or in a dupSort table adds it to the key's set.
    /// ``PutOptions/noOverwrite`` and ``PutOptions/noDuplicateData`` refuse a present key (pair) with
    /// ``LMDBError/keyExists``; ``PutOptions/append`` is a hint that `key` sorts last (an engine may ignore it, but
    /// must then still refuse a key that does not sort after every other with ``LMDBError/keyExists``).
    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in table: Database, options: PutOptions) throws

    /// Makes room for a value of `count` bytes under `key` (not in a dupSort table) and returns it to be filled
    /// before the transaction's next operation.
    func reserve(count: Int, forKey key: UnsafeRawBufferPointer, in table: Database, options: PutOptions) throws -> UnsafeMutableRawBufferPointer

    /// Removes `key` with all its values; `false` when it was not there.
    func delete(key: UnsafeRawBufferPointer, in table: Database) throws -> Bool

    /// Removes the one pair `key`, `value`; `false` when it was not there.
    func delete(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in table: Database) throws -> Bool

    /// Removes every entry of `table`, keeping the table.
    func clear(_ table: Database) throws

    /// Removes `table` itself; its handle is not used again.
    func drop(_ table: Database) throws

    /// The number of entries (key-value pairs, each value of a dupSort key counted) in `table`.
    func entryCount(of table: Database) throws -> Int

    /// Runs `body` with a cursor on `table`, valid until `body` returns.
    func withCursor(on table: Database, _ body: (any KeyValueCursor) throws -> Void) throws
}

/// A position in one table of a transaction: the moves the store makes. Each returns the entry it lands on (bytes
/// borrowed until the cursor moves or writes) or `nil` when there is none (the position is then unspecified until a
/// seek).
protocol KeyValueCursor: AnyObject {
    /// The table the cursor walks.
    var database: Database { get }

    /// The first entry (of the first key, its first value).
    func first() throws -> CursorEntry?
    /// The last entry (of the last key, its last value).
    func last() throws -> CursorEntry?
    /// The first value of the next key.
    func nextKey() throws -> CursorEntry?
    /// The next value of the current key, or `nil` at its last (dupSort tables; elsewhere undefined — LMDB steps to
    /// the next key).
    func nextDuplicate() throws -> CursorEntry?
    /// The entry the cursor is on, or `nil` when it is on none; right after ``deleteCurrent()``, the entry that
    /// followed the deleted one.
    func current() throws -> CursorEntry?
    /// The first value of `key`, or `nil` when it is not there.
    func seek(exactly key: UnsafeRawBufferPointer) throws -> CursorEntry?
    /// The first value of the first key at or after `key`.
    func seek(atOrAfter key: UnsafeRawBufferPointer) throws -> CursorEntry?
    /// The entry of exactly `key` and `value`, or `nil` (dupSort tables; elsewhere undefined).
    func seek(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> CursorEntry?
    /// Puts `value` under `key` and stands on the new entry. A cursor near the place (after a put or a seek of a
    /// key just before it) finds it without descending from the root: sorted puts through one cursor cost less than
    /// the same puts through the table.
    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, options: PutOptions) throws
    /// Puts the values laid one after another in `values`, each `size` bytes, under `key` (a dupFixed table of
    /// `size`-byte values), as that many puts with `options` would, finding the key once; stands on the last one. An
    /// error leaves the values before the refused one put.
    func putDuplicates(_ values: UnsafeRawBufferPointer, size: Int, forKey key: UnsafeRawBufferPointer, options: PutOptions) throws
    /// How many values the current key holds (dupSort tables; elsewhere ``LMDBError/incompatible``).
    func duplicateCount() throws -> Int
    /// Deletes the current entry.
    func deleteCurrent() throws
    /// Deletes the current key with every value it holds; the cursor then stands on the next key's first entry.
    func deleteCurrentKey() throws

    /// Hands `body` every entry in `range`, in `direction`, until it returns `false`.
    func forEach(in range: KeyRange, direction: ScanDirection, _ body: (CursorEntry) throws -> Bool) throws
    /// As ``forEach(in:direction:_:)``; an engine may hand a ``DatabaseOptions/dupFixed`` table's values a page at a
    /// time.
    func forEachValue(in range: KeyRange, direction: ScanDirection, _ body: (CursorEntry) throws -> Bool) throws
    /// Hands `body` the values of the entries in `range`, forward, as runs of one key's values side by side in one
    /// buffer with the width of each and how many values the key holds in all (an engine may hand one value per run,
    /// and count 1), until it returns `false`.
    func forEachValueRun(in range: KeyRange,
                         _ body: (_ key: UnsafeRawBufferPointer, _ values: UnsafeRawBufferPointer, _ width: Int, _ valuesOfKey: Int) throws -> Bool) throws
    /// Hands `body` each key in `range` (its first entry) with the number of values it holds, forward, until it
    /// returns `false`.
    func forEachKey(in range: KeyRange, _ body: (CursorEntry, Int) throws -> Bool) throws
    /// The number of entries in `range`, counting no further than `limit`.
    func count(in range: KeyRange, upTo limit: Int) throws -> Int
}

extension KeyValueEngine {
    /// What `body` returns, run in a read transaction.
    @inline(__always)
    func read<Result>(_ body: (any KeyValueTransaction) throws -> Result) throws -> Result {
        let transaction = try beginRead()
        defer { transaction.endRead() }
        return try body(transaction)
    }

    /// What `body` returns, run in the write transaction (``withWriteTransaction(_:)``); the last run's result when
    /// the engine ran it again.
    @inline(__always)
    func write<Result>(_ body: (any KeyValueTransaction) throws -> Result) throws -> Result {
        var result: Result?
        try withWriteTransaction { result = try body($0) }
        return result!
    }

    /// The handle of table `name`, created (without options unless told) when missing unless `create` is `false`.
    @inline(__always)
    func openDatabase(named name: String?, options: DatabaseOptions = [], create: Bool = true) throws -> Database {
        try openDatabase(named: name, options: options, create: create)
    }
}

extension KeyValueCursor {
    /// Every entry in `range` (all by default), forward unless told.
    @inline(__always)
    func forEach(in range: KeyRange = .all, direction: ScanDirection = .forward, _ body: (CursorEntry) throws -> Bool) throws {
        try forEach(in: range, direction: direction, body)
    }

    /// Every entry in `range` (all by default), values a page at a time where the engine can.
    @inline(__always)
    func forEachValue(in range: KeyRange = .all, direction: ScanDirection = .forward, _ body: (CursorEntry) throws -> Bool) throws {
        try forEachValue(in: range, direction: direction, body)
    }

    /// The number of entries in `range` (all by default).
    @inline(__always)
    func count(in range: KeyRange = .all, upTo limit: Int = .max) throws -> Int {
        try count(in: range, upTo: limit)
    }

    /// The first value of `key` given as bytes.
    @inline(__always)
    func seek<Key: Sequence<UInt8>>(exactly key: Key) throws -> CursorEntry? {
        try withBytes(key) { try seek(exactly: $0) }
    }

    /// The first value of the first key at or after `key` given as bytes.
    @inline(__always)
    func seek<Key: Sequence<UInt8>>(atOrAfter key: Key) throws -> CursorEntry? {
        try withBytes(key) { try seek(atOrAfter: $0) }
    }
}

/// The table operations, called on a table handle as the LMDB wrapper's are, run by whichever engine's transaction
/// is given.
extension Database {
    /// Lends `key`'s value to `body`; `nil` when the key is not there.
    @inline(__always)
    func withValue<Result>(forKey key: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction,
                           _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        guard let value = try transaction.borrowedValue(forKey: key, in: self) else { return nil }
        return try body(value)
    }

    /// Lends the value of `key` (given as bytes) to `body`.
    @inline(__always)
    func withValue<Key: Sequence<UInt8>, Result>(forKey key: Key, in transaction: any KeyValueTransaction,
                                                 _ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result? {
        try withBytes(key) { try withValue(forKey: $0, in: transaction, body) }
    }

    /// `key`'s value, borrowed until the transaction ends (or writes).
    @inline(__always)
    func borrowedValue(forKey key: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction) throws -> UnsafeRawBufferPointer? {
        try transaction.borrowedValue(forKey: key, in: self)
    }

    /// A copy of `key`'s value.
    func value<Key: Sequence<UInt8>>(forKey key: Key, in transaction: any KeyValueTransaction) throws -> [UInt8]? {
        try withValue(forKey: key, in: transaction) { Array($0) }
    }

    /// Stores `value` under `key`.
    @inline(__always)
    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction,
             options: PutOptions = []) throws {
        try transaction.put(value, forKey: key, in: self, options: options)
    }

    /// Stores `value` under `key`, both given as bytes.
    @inline(__always)
    func put<Value: Sequence<UInt8>, Key: Sequence<UInt8>>(_ value: Value, forKey key: Key, in transaction: any KeyValueTransaction,
                                                           options: PutOptions = []) throws {
        try withBytes(key) { key in try withBytes(value) { try transaction.put($0, forKey: key, in: self, options: options) } }
    }

    /// Makes room for `count` bytes under `key` and lets `fill` write them.
    @inline(__always)
    func reserve<Result>(count: Int, forKey key: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction, options: PutOptions = [],
                         _ fill: (UnsafeMutableRawBufferPointer) throws -> Result) throws -> Result {
        try fill(try transaction.reserve(count: count, forKey: key, in: self, options: options))
    }

    /// Makes room for `count` bytes under `key` (given as bytes) and lets `fill` write them.
    @inline(__always)
    func reserve<Key: Sequence<UInt8>, Result>(count: Int, forKey key: Key, in transaction: any KeyValueTransaction, options: PutOptions = [],
                                               _ fill: (UnsafeMutableRawBufferPointer) throws -> Result) throws -> Result {
        try withBytes(key) { try reserve(count: count, forKey: $0, in: transaction, options: options, fill) }
    }

    /// Removes `key`; `false` when it was not there.
    @discardableResult @inline(__always)
    func delete(key: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction) throws -> Bool {
        try transaction.delete(key: key, in: self)
    }

    /// Removes `key` given as bytes.
    @discardableResult
    func delete<Key: Sequence<UInt8>>(key: Key, in transaction: any KeyValueTransaction) throws -> Bool {
        try withBytes(key) { try transaction.delete(key: $0, in: self) }
    }

    /// Removes the pair `key`, `value`.
    @discardableResult @inline(__always)
    func delete(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in transaction: any KeyValueTransaction) throws -> Bool {
        try transaction.delete(key: key, value: value, in: self)
    }

    /// Removes the pair `key`, `value` given as bytes.
    @discardableResult
    func delete<Key: Sequence<UInt8>, Value: Sequence<UInt8>>(key: Key, value: Value, in transaction: any KeyValueTransaction) throws -> Bool {
        try withBytes(key) { key in try withBytes(value) { try transaction.delete(key: key, value: $0, in: self) } }
    }

    /// Removes every entry.
    func clear(in transaction: any KeyValueTransaction) throws { try transaction.clear(self) }

    /// Removes the table.
    func drop(in transaction: any KeyValueTransaction) throws { try transaction.drop(self) }

    /// The number of entries.
    func entryCount(in transaction: any KeyValueTransaction) throws -> Int { try transaction.entryCount(of: self) }

    /// Runs `body` with a cursor on this table and returns what it returns.
    @inline(__always)
    func withCursor<Result>(in transaction: any KeyValueTransaction, _ body: (any KeyValueCursor) throws -> Result) throws -> Result {
        var result: Result?
        try transaction.withCursor(on: self) { result = try body($0) }
        return result!
    }
}

/// Lends `bytes` as a buffer without copying when they are contiguous.
@inline(__always)
func withBytes<Bytes: Sequence<UInt8>, Result>(_ bytes: Bytes, _ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
    if let result = try bytes.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) { return result }
    return try Array(bytes).withUnsafeBytes(body)
}

/// Where a store gets the engine for its file.
enum KeyValueEngines {
    /// Opens the engine for a path instead of LMDB, for the task it is bound in: the test suite binds an in-memory
    /// engine here to run every store test over it.
    @TaskLocal static var opener: (@Sendable (_ path: String, _ options: Environment.Options) throws -> any KeyValueEngine)?

    /// The engine for the store file at `path`: LMDB's environment, unless ``opener`` is bound.
    static func open(at path: String, options: Environment.Options) throws -> any KeyValueEngine {
        if let opener { return try opener(path, options) }
        return try Environment.open(at: path, options: options)
    }

    /// Compacts the LMDB store file at `path` in place (``Environment/compact(at:options:)``); `nil` when ``opener``
    /// is bound (an engine of another kind has no file to compact).
    static func compact(at path: String, options: Environment.Options) throws -> Environment.Compaction? {
        if opener != nil { return nil }
        return try Environment.compact(at: path, options: options)
    }
}
