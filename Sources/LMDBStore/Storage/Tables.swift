import LMDB
import ObjectGraph

// Typed handles on the store's tables (`Docs/FORMAT.md`), resolved once when the store opens: each owns its keys'
// and values' bytes and its calls to the key-value engine, so the save, fault and fetch paths ask for a row, a
// member or a counter instead of building keys. Secondary tables are kept by their ``IndexMaintainer``s.

/// An entity hierarchy's rows (`rows/<Root>`): the row key as a big-endian u64 → the row blob.
struct RowTable {
    let database: Database

    /// Lends the bytes of the row under `key` to `read` (in a read or a write transaction); `nil` when there is none.
    @inline(__always)
    func withBytes<Value>(key: UInt64, in transaction: any KeyValueTransaction,
                          _ read: (UnsafeRawBufferPointer) throws -> Value) throws -> Value? {
        try withUnsafeBytes(of: key.bigEndian) { try database.withValue(forKey: $0, in: transaction, read) }
    }

    /// The bytes of the row under `key`, borrowed from the engine until the read transaction ends; `nil` when there
    /// is none.
    @inline(__always)
    func bytes(key: UInt64, in transaction: any KeyValueTransaction) throws -> UnsafeRawBufferPointer? {
        try withUnsafeBytes(of: key.bigEndian) { try database.borrowedValue(forKey: $0, in: transaction) }
    }

    /// The bytes of the row under `key`, found with `cursor` (on this table): a cursor moving forward through keys in
    /// order lets the engine search the leaf of the row before instead of descending from the root.
    @inline(__always)
    func bytes(key: UInt64, cursor: any KeyValueCursor) throws -> UnsafeRawBufferPointer? {
        try withUnsafeBytes(of: key.bigEndian) { try cursor.seek(exactly: $0) }?.value
    }

    /// Runs `body` with a cursor on the table, for walks in row-key order.
    @inline(__always)
    func withCursor<Result>(in transaction: any KeyValueTransaction, _ body: (any KeyValueCursor) throws -> Result) throws -> Result {
        try database.withCursor(in: transaction, body)
    }

    /// The row key an entry of the table is stored under.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when the key is not 8 bytes.
    @inline(__always)
    func rowKey(in entry: CursorEntry) throws(ManagedObjectContextError) -> UInt64 {
        try database.rowKey(in: entry)
    }

    /// The number of rows the table holds.
    func entryCount(in transaction: any KeyValueTransaction) throws -> Int {
        try database.entryCount(in: transaction)
    }

    /// The entity tag of the row under `key` (bytes 2–3, unchecked), `nil` when there is none (or its bytes are too
    /// few for a row).
    func entityTag(key: UInt64, in transaction: any KeyValueTransaction) throws -> UInt16? {
        try withBytes(key: key, in: transaction) { RowCodec.entityTag($0) } ?? nil
    }

    /// Writes `row` under `key`, encoded straight into the room the engine reserves for it (no buffer of its own).
    /// A new row (`inserting`) is appended when its key is above every other — keys come from a sequence — and put in
    /// place otherwise; returns `false`, writing nothing, when the key of a new row is taken.
    func write(_ row: StoredRow, key: UInt64, inserting: Bool, in transaction: any KeyValueTransaction) throws -> Bool {
        let size = RowCodec.encodedSize(row)
        func put(_ options: PutOptions) throws {
            try withUnsafeBytes(of: key.bigEndian) { rowKey in
                try database.reserve(count: size.bytes, forKey: rowKey, in: transaction, options: options) {
                    RowCodec.write(row, size: size, into: $0)
                }
            }
        }
        guard inserting else {
            try put([])
            return true
        }
        return try Self.insert(put)
    }

    /// Writes the new row `encoded` (``RowCodec``'s bytes, made elsewhere) under `key` as ``write(_:key:inserting:in:)``
    /// writes a new row: appended when its key is above every other; `false`, writing nothing, when the key is taken.
    func insert(encoded: UnsafeRawBufferPointer, key: UInt64, in transaction: any KeyValueTransaction) throws -> Bool {
        try Self.insert { options in
            try withUnsafeBytes(of: key.bigEndian) { try database.put(encoded, forKey: $0, in: transaction, options: options) }
        }
    }

    /// Puts a new row with `put`: appended, or — when a key above it is in the table — put where it belongs; `false`
    /// when its key is taken.
    private static func insert(_ put: (PutOptions) throws -> Void) throws -> Bool {
        do {
            try put(.append)
        } catch LMDBError.keyExists {
            do {
                try put(.noOverwrite)
            } catch LMDBError.keyExists {
                return false
            }
        }
        return true
    }

    /// Writes `row` over the row under `key` through `cursor` (on this table), encoded in `scratch`: a cursor that
    /// just read the row, or one before it, finds its place without descending from the root.
    func rewrite(_ row: StoredRow, key: UInt64, cursor: any KeyValueCursor, scratch: inout [UInt8]) throws {
        let size = RowCodec.encodedSize(row)
        if scratch.count < size.bytes { scratch = [UInt8](repeating: 0, count: max(size.bytes, 2 * scratch.count)) }
        try scratch.withUnsafeMutableBytes { buffer in
            let room = UnsafeMutableRawBufferPointer(rebasing: buffer[..<size.bytes])
            RowCodec.write(row, size: size, into: room)
            try withUnsafeBytes(of: key.bigEndian) { try cursor.put(UnsafeRawBufferPointer(room), forKey: $0, options: []) }
        }
    }

    /// Removes the row under `key` (nothing when there is none).
    func delete(key: UInt64, in transaction: any KeyValueTransaction) throws {
        _ = try withUnsafeBytes(of: key.bigEndian) { try database.delete(key: $0, in: transaction) }
    }
}

/// A table of row references under ordered keys: a fetch index (`index/…`), a to-one's inverse (`toone/…`, under the
/// destination's row key: the rows pointing at it) or a to-many's members (`members/…`, and an ordered one's `link/…`,
/// under the owner's row key). Each value is a reference — the row key, then the entity tag — that a covering index
/// follows with the attributes it stores. Every read checks a value's size before it reads a reference from it: the
/// bytes come straight from the map, and a damaged file must give an error naming the table, never a read past their
/// end.
///
/// The layout resolves one handle per table when the store opens (``LMDBIncrementalStore/OpenState/indexTable(_:)``);
/// plan nodes name the table and read through its handle.
struct IndexTable {
    let database: Database
    /// Each value's size: a reference (``IndexEntries/referenceSize``), then a covering index's stored attributes at
    /// their full widths.
    let valueSize: Int

    init(database: Database, valueSize: Int = IndexEntries.referenceSize) {
        precondition(valueSize >= IndexEntries.referenceSize, "an index value holds at least a row reference")
        self.database = database
        self.valueSize = valueSize
    }

    /// The table's name, for messages.
    var name: String { database.name ?? "?" }

    /// The reference an entry holds.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when the value is not ``valueSize`` bytes.
    @inline(__always)
    func reference(in entry: CursorEntry) throws(ManagedObjectContextError) -> StoredRow.Reference {
        // Every value size is at least a reference's, so the check of the whole value's size covers the read.
        guard entry.value.count == valueSize else { throw EntryBytes.damaged(name, "value", count: entry.value.count, expected: valueSize) }
        return EntryBytes.reference(inRun: entry.value, at: 0)
    }

    /// Runs `body` with a cursor on the table.
    @inline(__always)
    func withCursor<Result>(in transaction: any KeyValueTransaction, _ body: (any KeyValueCursor) throws -> Result) throws -> Result {
        try database.withCursor(in: transaction, body)
    }

    /// Calls `body` with the reference and entry of each entry in `ranges` (in turn, each walked `direction`;
    /// forward, a key's values come a page at a time) until it returns false.
    @inline(__always)
    func forEachEntry(in ranges: [KeyRange], direction: ScanDirection = .forward, in transaction: any KeyValueTransaction,
                      _ body: (StoredRow.Reference, CursorEntry) throws -> Bool) throws {
        try withCursor(in: transaction) { cursor in
            var going = true
            for range in direction == .forward ? ranges : ranges.reversed() where going {
                try cursor.forEachValue(in: range, direction: direction) { entry in
                    going = try body(try reference(in: entry), entry)
                    return going
                }
            }
        }
    }

    /// Calls `body` with the references in `range`, a run of one key's values at a time, and how many values the key
    /// holds — forward, a page at a time where the engine hands them so — until it returns false. The cursor is the
    /// caller's, so that many ranges (a join's destinations, one after another) share it.
    @inline(__always)
    func forEachReferenceRun(in range: KeyRange, on cursor: any KeyValueCursor,
                             _ body: (_ run: ReferenceRun, _ valuesOfKey: Int) throws -> Bool) throws {
        try cursor.forEachReferenceRun(in: range, valueSize: valueSize, of: name, body)
    }

    /// The references under the row key `owner` (an ordered `link/…` table's keys begin with it): a to-many's
    /// members, or the rows pointing at a destination, in key order, a page of values at a time.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when a value is not a reference, or the engine's error.
    func references(under owner: UInt64, in transaction: any KeyValueTransaction) throws -> [StoredRow.Reference] {
        try withCursor(in: transaction) { try references(under: owner, cursor: $0) }
    }

    /// The references under the row key `owner`, read with `cursor` (on this table): a cursor visiting owners in key
    /// order finds most of them on the leaf page of the one before.
    func references(under owner: UInt64, cursor: any KeyValueCursor) throws -> [StoredRow.Reference] {
        var references: [StoredRow.Reference] = []
        try forEachReferenceRun(in: .prefix(LMDBIncrementalStore.keyBytes(owner)), on: cursor) { run, valuesOfKey in
            if references.isEmpty { references.reserveCapacity(valuesOfKey) }
            references.append(contentsOf: run)
            return true
        }
        return references
    }

    /// The number of entries in `ranges`, counted up to `limit`: a step per key, the engine counting its values.
    func count(in ranges: [KeyRange], upTo limit: Int = .max, in transaction: any KeyValueTransaction) throws -> Int {
        var count = 0
        try withCursor(in: transaction) { cursor in
            for range in ranges where count < limit { count += try cursor.count(in: range, upTo: limit - count) }
        }
        return count
    }

    /// Calls `body` with each key in `ranges` (its first entry) and the number of values it holds, until it returns
    /// false: a group-by over the index, one step per distinct value.
    func forEachKey(in ranges: [KeyRange], in transaction: any KeyValueTransaction, _ body: (CursorEntry, Int) throws -> Bool) throws {
        try withCursor(in: transaction) { cursor in
            var going = true
            for range in ranges where going {
                try cursor.forEachKey(in: range) { entry, count in
                    going = try body(entry, count)
                    return going
                }
            }
        }
    }
}

/// A to-one relationship's inverse, `toone/<Entity>/<relationship>`: under each destination's row key, the references
/// of the rows pointing at it. What joins through a to-one and counts per destination read.
struct ToOneTable {
    let index: IndexTable

    /// Runs `body` with a cursor on the table, for ``forEachPointer(to:on:_:)``.
    @inline(__always)
    func withCursor<Result>(in transaction: any KeyValueTransaction, _ body: (any KeyValueCursor) throws -> Result) throws -> Result {
        try index.withCursor(in: transaction, body)
    }

    /// Calls `body` with the reference of each row pointing at the row `destination`, in key order, until it returns
    /// false; returns whether it did not.
    @inline(__always)
    func forEachPointer(to destination: UInt64, on cursor: any KeyValueCursor, _ body: (StoredRow.Reference) throws -> Bool) throws -> Bool {
        var going = true
        let key = LMDBIncrementalStore.keyBytes(destination)
        try index.forEachReferenceRun(in: KeyRange(lower: .inclusive(key), upper: .inclusive(key)), on: cursor) { pointers, _ in
            for pointer in pointers where going { going = try body(pointer) }
            return going
        }
        return going
    }

    /// Each destination some row points at, in key order, with how many rows point at it: one step per destination.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when a key is not a row key, or the engine's error.
    func destinations(in transaction: any KeyValueTransaction) throws -> [(key: UInt64, count: Int)] {
        var destinations: [(key: UInt64, count: Int)] = []
        try index.forEachKey(in: [.all], in: transaction) { entry, count in
            guard let key = EntryBytes.integer(entry.key) else { throw EntryBytes.damaged(index.name, "key", count: entry.key.count, expected: 8) }
            destinations.append((key, count))
            return true
        }
        return destinations
    }
}

/// A to-many relationship's own table: an unordered one's `members/…` (the owner's key → each member's reference, as
/// sorted duplicate values) or an ordered one's `link/…` (the owner's key and the member's position → its reference).
struct ToManyTable {
    let database: Database
    let isOrdered: Bool

    /// Puts one member of `owner` — at `position` in an ordered relationship — without allocating.
    func add(_ member: StoredRow.Reference, to owner: UInt64, at position: Int, options: PutOptions = [],
             in transaction: any KeyValueTransaction) throws {
        try withNewEntry(member, of: owner, at: position) { key, value in try database.put(value, forKey: key, in: transaction, options: options) }
    }

    /// Lends `body` the key and value that put `member` among `owner`'s members — at `position` in an ordered
    /// relationship — as ``add(_:to:at:options:in:)`` puts them.
    func withNewEntry<Result>(_ member: StoredRow.Reference, of owner: UInt64, at position: Int,
                              _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        guard isOrdered else { return try withEntry(member, of: owner, body) }
        return try withUnsafeBytes(of: (member.key.bigEndian, member.entityTag.bigEndian)) { value in
            try withUnsafeBytes(of: (owner.bigEndian, UInt32(position).bigEndian)) { try body($0, value) }
        }
    }

    /// Lends `body` the key of `member`'s entry under `owner` in an unordered relationship (in an ordered one, the
    /// prefix of its key) and the entry's value.
    func withEntry<Result>(_ member: StoredRow.Reference, of owner: UInt64, _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try withUnsafeBytes(of: (member.key.bigEndian, member.entityTag.bigEndian)) { value in
            try withUnsafeBytes(of: owner.bigEndian) { try body($0, value) }
        }
    }

    /// Removes one member of `owner` in an unordered relationship (nothing when it is not there).
    func remove(_ member: StoredRow.Reference, from owner: UInt64, in transaction: any KeyValueTransaction) throws {
        _ = try withEntry(member, of: owner) { key, value in try database.delete(key: key, value: value, in: transaction) }
    }

    /// Removes `member` from `owner`'s members wherever it stands: one delete in an unordered relationship; in an
    /// ordered one, `owner`'s entries read until it is found (the others keep their positions: members are read in
    /// position order, gaps and all).
    func removeMember(_ member: StoredRow.Reference, from owner: UInt64, in transaction: any KeyValueTransaction) throws {
        guard isOrdered else { return try remove(member, from: owner, in: transaction) }
        // An ordered relationship's keys begin with the owner's: its entries are the ones under that prefix.
        try withEntry(member, of: owner) { owner, value in
            try database.withCursor(in: transaction) { cursor in
                var entry = try cursor.seek(atOrAfter: owner)
                while let current = entry, current.key.starts(with: owner) {
                    if current.value.elementsEqual(value) {
                        try cursor.deleteCurrent()
                        return
                    }
                    entry = try cursor.nextKey()
                }
            }
        }
    }

    /// Removes every member of `owner` in an unordered relationship with `cursor` (on this table), which then
    /// stands where the owner's key was.
    func removeAll(of owner: UInt64, cursor: any KeyValueCursor) throws {
        precondition(!isOrdered, "an ordered relationship's members are keyed by position")
        try withUnsafeBytes(of: owner.bigEndian) { owner in
            if try cursor.seek(exactly: owner) != nil { try cursor.deleteCurrentKey() }
        }
    }

    /// Removes every member of `owner`.
    func removeAll(of owner: UInt64, in transaction: any KeyValueTransaction) throws {
        try withUnsafeBytes(of: owner.bigEndian) { owner in
            guard isOrdered else {
                _ = try database.delete(key: owner, in: transaction)  // every value of the key
                return
            }
            try database.withCursor(in: transaction) { cursor in
                var entry = try cursor.seek(atOrAfter: owner)
                while let current = entry, current.key.starts(with: owner) {
                    try cursor.deleteCurrent()
                    entry = try cursor.current()
                }
            }
        }
    }

    /// The members of `owner`: an unordered relationship's in key order, an ordered one's in position order.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the table when a value is not a reference.
    func members(of owner: UInt64, in transaction: any KeyValueTransaction) throws -> [StoredRow.Reference] {
        try IndexTable(database: database).references(under: owner, in: transaction)
    }
}

/// The `seq` table: each root entity's key counter (under the root's name) and the change log's (``ChangeLog``).
struct SequenceTable {
    let database: Database

    /// The counter under `name` (0 when there is none).
    ///
    /// - Throws: ``ManagedObjectContextError`` when the value is not 8 bytes, or the engine's error.
    func counter(_ name: String, in transaction: any KeyValueTransaction) throws -> UInt64 {
        try database.counter(forKey: Array(name.utf8), in: transaction)
    }

    /// Sets the counter under `name` to `value`.
    func setCounter(_ name: String, to value: UInt64, in transaction: any KeyValueTransaction) throws {
        try withUnsafeBytes(of: value.bigEndian) { value in try database.put(value, forKey: Array(name.utf8), in: transaction) }
    }
}

/// The change log (`changes`, its counters in `seq`): under each save's number, one 11-byte record per object the save
/// touched — kind (1 inserted, 2 updated, 3 deleted), entity tag, row key.
struct ChangeLog {
    let sequences: SequenceTable
    let database: Database

    /// The number of the last save recorded.
    func lastNumber(in transaction: any KeyValueTransaction) throws -> UInt64 {
        try sequences.counter(StoreLayout.changeSequenceKey, in: transaction)
    }

    /// Records a save of `count` objects under the next number: `write` fills the records in the room reserved for
    /// them. Then forgets the oldest saves the log no longer keeps: the save ``StoreLayout/changeLogLength`` numbers
    /// back, and as many of the oldest as it takes to hold at most ``StoreLayout/changeLogRecords`` records (the save
    /// just recorded is always kept). A process that falls behind what the log keeps refreshes everything instead.
    func append(count: Int, in transaction: any KeyValueTransaction, _ write: (inout RawWriter) throws -> Void) throws {
        let number = try lastNumber(in: transaction) + 1
        var held = try recordsHeld(in: transaction) + UInt64(count)
        try sequences.setCounter(StoreLayout.changeSequenceKey, to: number, in: transaction)
        try withUnsafeBytes(of: number.bigEndian) { key in
            try database.reserve(count: 11 * count, forKey: key, in: transaction) { payload in
                guard let base = payload.baseAddress, count > 0 else { return }
                var writer = RawWriter(base)
                try write(&writer)
            }
        }
        if number > StoreLayout.changeLogLength {
            let forgotten = try withUnsafeBytes(of: (number - StoreLayout.changeLogLength).bigEndian) { key in
                try database.withValue(forKey: key, in: transaction) { UInt64($0.count / 11) }
            }
            if let forgotten {
                _ = try withUnsafeBytes(of: (number - StoreLayout.changeLogLength).bigEndian) { try database.delete(key: $0, in: transaction) }
                held -= min(held, forgotten)
            }
        }
        if held > StoreLayout.changeLogRecords {
            try database.withCursor(in: transaction) { cursor in
                var entry = try cursor.first()
                while let oldest = entry, held > StoreLayout.changeLogRecords, try database.rowKey(in: oldest) != number {
                    held -= min(held, UInt64(oldest.value.count / 11))
                    try cursor.deleteCurrent()
                    entry = try cursor.current()
                }
            }
        }
        try sequences.setCounter(StoreLayout.changeRecordsKey, to: held, in: transaction)
    }

    /// Takes the next number for a save too large to record (more objects than the log keeps): no records go under
    /// it, so a process catching up across it finds the number missing and refreshes everything, as it does when
    /// it falls behind what the log keeps.
    func skipNumber(in transaction: any KeyValueTransaction) throws {
        try sequences.setCounter(StoreLayout.changeSequenceKey, to: try lastNumber(in: transaction) + 1, in: transaction)
    }

    /// How many records the log holds: `seq/~changeRecords`, or — in a file written before that counter was kept —
    /// counted once from the log.
    private func recordsHeld(in transaction: any KeyValueTransaction) throws -> UInt64 {
        if let held = try sequences.database.storedCounter(forKey: Array(StoreLayout.changeRecordsKey.utf8), in: transaction) { return held }
        var held: UInt64 = 0
        try database.withCursor(in: transaction) { cursor in
            try cursor.forEach { entry in
                held += UInt64(entry.value.count / 11)
                return true
            }
        }
        return held
    }

    /// Calls `body` with each save recorded after `token` up to `last`, in order, with its number and its records;
    /// stops when `body` returns `false`.
    func forEachSave(after token: UInt64, through last: UInt64, in transaction: any KeyValueTransaction,
                     _ body: (_ number: UInt64, _ records: UnsafeRawBufferPointer) throws -> Bool) throws {
        try database.withCursor(in: transaction) { cursor in
            try cursor.forEach(in: KeyRange(lower: .exclusive(LMDBIncrementalStore.keyBytes(token)), upper: .inclusive(LMDBIncrementalStore.keyBytes(last)))) { entry in
                try body(try database.rowKey(in: entry), entry.value)
            }
        }
    }
}
