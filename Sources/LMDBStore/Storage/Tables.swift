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
    func write(_ row: StoredRow, key: UInt64, modelHash: UInt64, inserting: Bool, in transaction: any KeyValueTransaction) throws -> Bool {
        let size = RowCodec.encodedSize(row)
        func put(_ options: PutOptions) throws {
            try withUnsafeBytes(of: key.bigEndian) { rowKey in
                try database.reserve(count: size.bytes, forKey: rowKey, in: transaction, options: options) {
                    RowCodec.write(row, modelHash: modelHash, size: size, into: $0)
                }
            }
        }
        guard inserting else {
            try put([])
            return true
        }
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

    /// Removes the row under `key` (nothing when there is none).
    func delete(key: UInt64, in transaction: any KeyValueTransaction) throws {
        _ = try withUnsafeBytes(of: key.bigEndian) { try database.delete(key: $0, in: transaction) }
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
        try database.references(under: owner, in: transaction)
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
