import LMDB

// LMDB under the key-value seam. The wrapper's types already speak the seam's vocabulary, so each requirement is a
// forward to the wrapper call of the same meaning; the closures are typed so that the wrapper's overloads (which
// take its concrete `Transaction` and `Cursor`) are the ones called.

extension Environment: KeyValueEngine {
    func beginRead() throws -> any KeyValueTransaction {
        try beginRead() as Transaction
    }

    func withWriteTransaction(_ body: (any KeyValueTransaction) throws -> Void) throws {
        try write { (transaction: Transaction) in try body(transaction) }
    }

    func runExclusively(_ body: () throws -> Void) throws {
        try withExclusiveUse(body)
    }
}

extension Transaction: KeyValueTransaction {
    var snapshotNumber: UInt64 { UInt64(id) }

    @inline(__always)
    func borrowedValue(forKey key: UnsafeRawBufferPointer, in table: Database) throws -> UnsafeRawBufferPointer? {
        // `mdb_get`'s bytes stay valid until the transaction ends or (in a write transaction) writes: the seam's
        // rule, which the wrapper's `borrowedValue` narrows to read-only transactions.
        try table.withValue(forKey: key, in: self) { $0 }
    }

    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in table: Database, options: PutOptions) throws {
        try table.put(value, forKey: key, in: self, options: options)
    }

    func reserve(count: Int, forKey key: UnsafeRawBufferPointer, in table: Database, options: PutOptions) throws -> UnsafeMutableRawBufferPointer {
        // LMDB's reserved bytes stay valid until the transaction's next write: the pointer may leave the closure.
        try table.reserve(count: count, forKey: key, in: self, options: options) { $0 }
    }

    func delete(key: UnsafeRawBufferPointer, in table: Database) throws -> Bool {
        try table.delete(key: key, in: self)
    }

    func delete(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in table: Database) throws -> Bool {
        try table.delete(key: key, value: value, in: self)
    }

    func clear(_ table: Database) throws { try table.clear(in: self) }

    func drop(_ table: Database) throws { try table.drop(in: self) }

    func entryCount(of table: Database) throws -> Int { try table.statistics(in: self).entries }

    func withCursor(on table: Database, _ body: (any KeyValueCursor) throws -> Void) throws {
        try table.withCursor(in: self) { (cursor: Cursor) in try body(cursor) }
    }
}

extension Cursor: KeyValueCursor {
    func deleteCurrent() throws { try deleteCurrent(allDuplicates: false) }

    func deleteCurrentKey() throws { try deleteCurrent(allDuplicates: true) }

    func forEachKey(in range: KeyRange, _ body: (CursorEntry, Int) throws -> Bool) throws {
        var keys = entries(in: range)
        while let (entry, count) = try keys.nextKey() {
            guard try body(entry, count) else { return }
        }
    }
}
