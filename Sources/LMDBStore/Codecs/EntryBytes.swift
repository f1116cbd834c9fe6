import Foundation
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

    /// Whether two byte strings are the same: `memcmp`, where `elementsEqual` on raw buffers steps a byte at a time
    /// through a generic iterator (about 400 instructions for a 20-byte index key).
    @inline(__always)
    static func same(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        guard lhs.count == rhs.count else { return false }
        guard lhs.count > 0 else { return true }
        return memcmp(lhs.baseAddress!, rhs.baseAddress!, lhs.count) == 0
    }

    /// The error for an entry whose bytes do not have the size `Docs/FORMAT.md` gives them.
    static func damaged(_ table: String, _ part: String, count: Int, expected: Int) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable,
            message: "the store file is damaged: an entry of the table \"\(table)\" has a \(count)-byte \(part) where \(expected) bytes belong (verify() lists every problem)")
    }
}

extension Database {
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
}

/// A run of one key's index values (``KeyValueCursor/forEachReferenceRun(in:valueSize:of:_:)``), read as the row
/// references they begin with: walked by the caller's loop, with no call per value.
struct ReferenceRun: Sequence {
    /// The values, side by side.
    let values: UnsafeRawBufferPointer
    /// Each value's size: at least a reference's.
    let width: Int

    struct Iterator: IteratorProtocol {
        let values: UnsafeRawBufferPointer
        let width: Int
        var start = 0

        @inline(__always)
        mutating func next() -> StoredRow.Reference? {
            guard start < values.count else { return nil }
            defer { start += width }
            return EntryBytes.reference(inRun: values, at: start)
        }
    }

    @inline(__always)
    func makeIterator() -> Iterator { Iterator(values: values, width: width) }

    /// How many values the run holds.
    var count: Int { values.count / width }
}

extension KeyValueCursor {
    /// Hands `body` the values in `range` as runs of row references (``ReferenceRun``; values of `valueSize` bytes:
    /// the reference, then a covering index's stored values) with how many values the run's key holds, forward, until
    /// it returns false — a page of one key's values at a time where the engine hands them so
    /// (``forEachValueRun(in:_:)``). For the walks that read only references: an index's matches, a to-many's
    /// members, a join's pointing rows.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table `table` when a value is not `valueSize` bytes.
    @inline(__always)
    func forEachReferenceRun(in range: KeyRange, valueSize: Int, of table: String?,
                             _ body: (_ run: ReferenceRun, _ valuesOfKey: Int) throws -> Bool) throws {
        try forEachValueRun(in: range) { _, values, width, valuesOfKey in
            guard width == valueSize else { throw EntryBytes.damaged(table ?? "?", "value", count: width, expected: valueSize) }
            return try body(ReferenceRun(values: values, width: width), valuesOfKey)
        }
    }
}
