import LMDB
import ObjectGraph

/// The fixed-width parts of table entries (`Docs/FORMAT.md`), read only when they have their size: the bytes come
/// straight from LMDB's map, so a damaged file must give an error here, never a read past their end.
enum EntryBytes {
    /// A row key, or a counter of the `seq` table: a big-endian u64.
    static func integer(_ bytes: UnsafeRawBufferPointer) -> UInt64? {
        bytes.count == 8 ? TupleEncoding.readBigEndianUInt64(bytes, at: 0) : nil
    }

    /// A reference to a row — the value of `index/…`, `toone/…` and `link/…` entries: the u64 row key, then the u16
    /// entity tag.
    static func reference(_ bytes: UnsafeRawBufferPointer) -> StoredRow.Reference? {
        guard bytes.count == 10 else { return nil }
        return StoredRow.Reference(entityTag: UInt16(bytes[8]) << 8 | UInt16(bytes[9]), key: TupleEncoding.readBigEndianUInt64(bytes, at: 0))
    }

    /// The reference at the start of the value at `start` in a run of index values (each at least 10 bytes: the
    /// caller checked their width).
    @inline(__always)
    static func reference(inRun values: UnsafeRawBufferPointer, at start: Int) -> StoredRow.Reference {
        StoredRow.Reference(entityTag: UInt16(values[start + 8]) << 8 | UInt16(values[start + 9]),
                            key: UInt64(bigEndian: values.loadUnaligned(fromByteOffset: start, as: UInt64.self)))
    }

    /// The error for an entry whose bytes do not have the size `Docs/FORMAT.md` gives them.
    static func damaged(_ table: String, _ part: String, count: Int, expected: Int) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable,
            message: "the store file is damaged: an entry of the table \"\(table)\" has a \(count)-byte \(part) where \(expected) bytes belong (verify() lists every problem)")
    }
}

extension Database {
    /// The reference an entry of this `index/…`, `toone/…` or `link/…` table holds.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when the value is not 10 bytes.
    @inline(__always)
    func reference(in entry: CursorEntry) throws(ManagedObjectContextError) -> StoredRow.Reference {
        guard let reference = EntryBytes.reference(entry.value) else {
            throw EntryBytes.damaged(name ?? "?", "value", count: entry.value.count, expected: 10)
        }
        return reference
    }

    /// The reference an entry of a covering index holds: the first 10 bytes of its value, which goes on with the
    /// attributes it stores (`size` bytes in all).
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when the value is not `size` bytes.
    func coveringReference(in entry: CursorEntry, size: Int) throws(ManagedObjectContextError) -> StoredRow.Reference {
        guard entry.value.count == size,
              let reference = EntryBytes.reference(UnsafeRawBufferPointer(rebasing: entry.value.prefix(IndexEntries.referenceSize))) else {
            throw EntryBytes.damaged(name ?? "?", "value", count: entry.value.count, expected: size)
        }
        return reference
    }

    /// The row key an entry of this rows, to-one or change-log table is stored under.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when the key is not 8 bytes.
    func rowKey(in entry: CursorEntry) throws(ManagedObjectContextError) -> UInt64 {
        guard let key = EntryBytes.integer(entry.key) else { throw EntryBytes.damaged(name ?? "?", "key", count: entry.key.count, expected: 8) }
        return key
    }

    /// The counter this `seq` table holds under `key` (0 when absent).
    ///
    /// - Throws: ``ManagedObjectContextError`` when the value is not 8 bytes, or LMDB's error.
    func counter(forKey key: [UInt8], in transaction: any KeyValueTransaction) throws -> UInt64 {
        try storedCounter(forKey: key, in: transaction) ?? 0
    }

    /// The counter this `seq` table holds under `key`, `nil` when there is none.
    ///
    /// - Throws: ``ManagedObjectContextError`` when the value is not 8 bytes, or LMDB's error.
    func storedCounter(forKey key: [UInt8], in transaction: any KeyValueTransaction) throws -> UInt64? {
        try withValue(forKey: key, in: transaction) { bytes throws(ManagedObjectContextError) -> UInt64 in
            guard let value = EntryBytes.integer(bytes) else {
                throw EntryBytes.damaged(name ?? "?", "value", count: bytes.count, expected: 8)
            }
            return value
        }
    }

    /// The references this `members/…`, `link/…` or `toone/…` table holds under the row key `owner` (an ordered
    /// `link/…` table's keys begin with it): a to-many's members, or the rows pointing at a destination, in key
    /// order, a page of values at a time.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when a value is not a reference, or LMDB's error.
    func references(under owner: UInt64, in transaction: any KeyValueTransaction) throws -> [StoredRow.Reference] {
        var references: [StoredRow.Reference] = []
        let size = IndexEntries.referenceSize
        try withCursor(in: transaction) { cursor in
            try cursor.forEachValueRun(in: .prefix(LMDBIncrementalStore.keyBytes(owner))) { _, values, width, valuesOfKey in
                guard width == size else { throw EntryBytes.damaged(name ?? "?", "value", count: width, expected: size) }
                if references.isEmpty { references.reserveCapacity(valuesOfKey) }
                for start in stride(from: 0, to: values.count, by: size) { references.append(EntryBytes.reference(inRun: values, at: start)) }
                return true
            }
        }
        return references
    }
}
