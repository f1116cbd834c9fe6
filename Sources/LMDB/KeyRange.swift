internal import CLMDB

/// A range of keys: an optional lower and an optional upper bound, each inclusive or exclusive.
///
/// Bounds compare the way the database orders its keys (bytewise by default).
public struct KeyRange: Sendable, Hashable {
    /// One end of a range.
    public enum Bound: Sendable, Hashable {
        /// The range includes this key.
        case inclusive([UInt8])
        /// The range stops just short of this key.
        case exclusive([UInt8])

        /// The bound's key.
        public var key: [UInt8] {
            switch self {
            case .inclusive(let key), .exclusive(let key): key
            }
        }

        /// Whether the bound's key is in the range.
        public var isInclusive: Bool {
            if case .inclusive = self { true } else { false }
        }
    }

    /// The lowest keys of the range, or `nil` to start at the first key.
    public var lower: Bound?
    /// The highest keys of the range, or `nil` to run to the last key.
    public var upper: Bound?

    /// Creates a range from its bounds; `nil` leaves that side open.
    public init(lower: Bound? = nil, upper: Bound? = nil) {
        self.lower = lower
        self.upper = upper
    }

    /// Every key.
    public static let all = KeyRange()

    /// Every key that starts with `prefix` (in bytewise order).
    public static func prefix<Bytes: Sequence<UInt8>>(_ prefix: Bytes) -> KeyRange {
        let start = Array(prefix)
        var end = start
        // The first key after every key with this prefix: drop trailing 0xFF bytes, then add one to the last byte.
        while let last = end.last, last == 0xFF { end.removeLast() }
        guard !end.isEmpty else { return KeyRange(lower: start.isEmpty ? nil : .inclusive(start)) }
        end[end.count - 1] += 1
        return KeyRange(lower: start.isEmpty ? nil : .inclusive(start), upper: .exclusive(end))
    }
}

/// Which way a scan walks its range.
public enum ScanDirection: Sendable, Hashable {
    /// From the lowest key to the highest.
    case forward
    /// From the highest key to the lowest.
    case reverse
}

/// Walks the entries of a key range with a cursor, one ``next()`` at a time, allocating nothing per step.
///
/// Each entry's bytes are valid until the next call to ``next()``. In a ``DatabaseOptions/dupSort`` database,
/// every value of every key in the range is visited. Do not write through the cursor during a walk: after
/// ``Cursor/deleteCurrent(allDuplicates:)`` removes a key's last value, LMDB's next step in a `dupSort` database can
/// pass over entries. Collect what to delete, then delete it.
public struct CursorRangeIterator {
    /// The cursor doing the walking.
    public let cursor: Cursor
    /// The range being walked.
    public let range: KeyRange
    /// The direction of the walk.
    public let direction: ScanDirection
    private var started = false
    private var finished = false
    /// Whether keys hold several values (``DatabaseOptions/dupSort``): the walk then steps through a key's values
    /// without comparing the key with the far bound again.
    private let stepsByValue: Bool

    init(cursor: Cursor, range: KeyRange, direction: ScanDirection) {
        self.cursor = cursor
        self.range = range
        self.direction = direction
        stepsByValue = cursor.database.options.contains(.dupSort)
    }

    /// The next entry in the range, or `nil` once the range is exhausted.
    ///
    /// - Throws: ``LMDBError`` if LMDB fails (corruption, or the transaction became unusable).
    public mutating func next() throws -> CursorEntry? {
        guard !finished else { return nil }
        let entry: CursorEntry?
        if started {
            // Another value of a key already found within the range needs no check; else the next entry, checked
            // below (also right after a deletion, where LMDB answers `MDB_NEXT_DUP` with "not found").
            if stepsByValue, let value = direction == .forward ? try cursor.get(MDB_NEXT_DUP) : try cursor.get(MDB_PREV_DUP) { return value }
            entry = direction == .forward ? try cursor.get(MDB_NEXT) : try cursor.get(MDB_PREV)
        } else {
            started = true
            entry = direction == .forward ? try positionAtLowerBound() : try positionAtUpperBound()
        }
        guard let entry, isWithinFarBound(entry.key) else {
            finished = true
            return nil
        }
        return entry
    }

    private func positionAtLowerBound() throws -> CursorEntry? {
        guard let lower = range.lower else { return try cursor.get(MDB_FIRST) }
        return try lower.key.withUnsafeBytes { (key) throws -> CursorEntry? in
            guard let entry = try cursor.get(MDB_SET_RANGE, key: key) else { return nil }
            if !lower.isInclusive && compare(entry.key, key) == 0 {
                return try cursor.get(MDB_NEXT_NODUP)
            }
            return entry
        }
    }

    private func positionAtUpperBound() throws -> CursorEntry? {
        guard let upper = range.upper else { return try cursor.get(MDB_LAST) }
        return try upper.key.withUnsafeBytes { (key) throws -> CursorEntry? in
            guard let entry = try cursor.get(MDB_SET_RANGE, key: key) else {
                return try cursor.get(MDB_LAST)  // every key sorts before the bound
            }
            if upper.isInclusive && compare(entry.key, key) == 0 {
                return cursor.database.options.contains(.dupSort) ? try cursor.get(MDB_LAST_DUP) : entry
            }
            return try cursor.get(MDB_PREV)
        }
    }

    /// The next distinct key of a forward walk, with how many values it holds — counted by LMDB
    /// (`mdb_cursor_count`) in a ``DatabaseOptions/dupSort`` database, not visited; 1 elsewhere. The entry is the
    /// key's first value. Do not mix with ``next()`` on one walk.
    ///
    /// - Precondition: the walk is forward.
    /// - Throws: ``LMDBError`` if LMDB fails.
    public mutating func nextKey() throws -> (entry: CursorEntry, count: Int)? {
        precondition(direction == .forward, "keys are counted walking forward")
        guard !finished else { return nil }
        let entry: CursorEntry?
        if started {
            entry = try cursor.get(MDB_NEXT_NODUP)
        } else {
            started = true
            entry = try positionAtLowerBound()
        }
        guard let entry, isWithinFarBound(entry.key) else {
            finished = true
            return nil
        }
        return (entry, cursor.database.options.contains(.dupSort) ? try cursor.duplicateCount() : 1)
    }

    /// Counts the entries of a walk that has not started, up to `limit`. A forward walk of a
    /// ``DatabaseOptions/dupSort`` database moves a key at a time and takes each key's value count from LMDB
    /// (`mdb_cursor_count`, which reads it from the key's page or sub-database header), so it costs one step per
    /// distinct key, not per entry; anything else steps entry by entry.
    mutating func countAll(upTo limit: Int) throws -> Int {
        var count = 0
        guard direction == .forward, !started, cursor.database.options.contains(.dupSort) else {
            while count < limit, try next() != nil { count += 1 }
            return count
        }
        while count < limit, let key = try nextKey() { count += key.count }
        return min(count, limit)
    }

    /// Whether `key` has not yet passed the bound the walk moves toward.
    @inline(__always)
    private func isWithinFarBound(_ key: UnsafeRawBufferPointer) -> Bool {
        let bound = direction == .forward ? range.upper : range.lower
        guard let bound else { return true }
        let order = bound.key.withUnsafeBytes { compare(key, $0) }
        switch (direction, bound.isInclusive) {
        case (.forward, true): return order <= 0
        case (.forward, false): return order < 0
        case (.reverse, true): return order >= 0
        case (.reverse, false): return order > 0
        }
    }

    /// Compares two keys the way the database orders them. The corresponding LMDB function is `mdb_cmp`.
    @inline(__always)
    private func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int32 {
        var left = mdbValue(lhs)
        var right = mdbValue(rhs)
        return mdb_cmp(cursor.transaction.handle, cursor.database.handle, &left, &right)
    }
}

extension Cursor {
    /// An iterator over the entries whose keys lie in `range`, walked in `direction`.
    ///
    /// ```swift
    /// try index.withCursor(in: transaction) { cursor in
    ///     var entries = cursor.entries(in: KeyRange(lower: .inclusive(low), upper: .exclusive(high)))
    ///     while let entry = try entries.next() {
    ///         // entry.key, entry.value: valid until the next call
    ///     }
    /// }
    /// ```
    public func entries(in range: KeyRange = .all, direction: ScanDirection = .forward) -> CursorRangeIterator {
        CursorRangeIterator(cursor: self, range: range, direction: direction)
    }

    /// The number of entries whose keys lie in `range`, counting stops at `limit`. In a ``DatabaseOptions/dupSort``
    /// database this steps once per distinct key (each key's values are counted by `mdb_cursor_count`), so a
    /// range of few keys with many values each is counted without visiting the values.
    ///
    /// - Throws: ``LMDBError`` if LMDB fails.
    public func count(in range: KeyRange = .all, upTo limit: Int = .max) throws -> Int {
        var iterator = entries(in: range)
        return try iterator.countAll(upTo: limit)
    }

    /// Calls `body` with each entry whose key lies in `range`, walked in `direction`; `body` returns `false` to stop.
    ///
    /// - Throws: What `body` throws, or ``LMDBError`` if LMDB fails.
    public func forEach(
        in range: KeyRange = .all, direction: ScanDirection = .forward, _ body: (CursorEntry) throws -> Bool
    ) throws {
        if range.lower == nil, range.upper == nil {
            // The whole table: no bound to seek to or to compare each key with, one LMDB step an entry (a key's
            // values in turn, in a dupSort database) — the loop a scan of every row runs.
            let (start, step) = direction == .forward ? (MDB_FIRST, MDB_NEXT) : (MDB_LAST, MDB_PREV)
            var entry = try get(start)
            while let current = entry {
                guard try body(current) else { return }
                entry = try get(step)
            }
            return
        }
        if direction == .forward, !database.options.contains(.dupSort) {
            // One key an entry: after the seek to the lower bound, each step compares its key with the upper bound's
            // bytes borrowed once, not through the bound's enum each time (a part of a scan read on another thread
            // walks its rows this way).
            var start = entries(in: KeyRange(lower: range.lower), direction: .forward)
            guard var entry = try start.next() else { return }
            let upper = range.upper, inclusive = upper?.isInclusive ?? true
            try (upper?.key ?? []).withUnsafeBytes { upperKey in
                while true {
                    if upper != nil {
                        var key = mdbValue(entry.key), bound = mdbValue(upperKey)
                        let order = mdb_cmp(transaction.handle, database.handle, &key, &bound)
                        if inclusive ? order > 0 : order >= 0 { return }
                    }
                    guard try body(entry), let next = try get(MDB_NEXT) else { return }
                    entry = next
                }
            }
            return
        }
        var iterator = entries(in: range, direction: direction)
        while let entry = try iterator.next() {
            guard try body(entry) else { return }
        }
    }

    /// ``forEach(in:direction:_:)``, faster walking forward in a ``DatabaseOptions/dupFixed`` database: a key's
    /// values come a page at a time (`MDB_GET_MULTIPLE`, then `MDB_NEXT_MULTIPLE`) and are handed to `body` one by
    /// one without a call into LMDB each. `body` must not move the cursor or write through it: during the call the
    /// cursor stands on the last value of the page, not on the entry.
    ///
    /// - Throws: What `body` throws, or ``LMDBError`` if LMDB fails.
    public func forEachValue(in range: KeyRange = .all, direction: ScanDirection = .forward, _ body: (CursorEntry) throws -> Bool) throws {
        guard direction == .forward, database.options.contains(.dupFixed) else { return try forEach(in: range, direction: direction, body) }
        try forEachValueRun(in: range) { key, values, width, _ in
            for start in stride(from: 0, to: values.count, by: width) {
                guard try body(CursorEntry(key: key, value: UnsafeRawBufferPointer(rebasing: values[start..<start + width]))) else { return false }
            }
            return true
        }
    }

    /// Hands `body` the values of the entries in `range`, forward, as runs of one key's values side by side in one
    /// buffer, with the width of each and how many values the key holds in all (to size what is gathered), until it
    /// returns `false`. In a ``DatabaseOptions/dupFixed`` table a run is a
    /// page of values, as LMDB keeps them (`MDB_GET_MULTIPLE`, then `MDB_NEXT_MULTIPLE`): a caller reading many
    /// values walks the buffer itself, with no call per value. Elsewhere each run is one entry's value. `body` must
    /// not move the cursor or write through it.
    ///
    /// - Throws: What `body` throws, or ``LMDBError`` if LMDB fails or a key's pages hold another number of values
    ///   than the key counts.
    public func forEachValueRun(in range: KeyRange = .all,
                                _ body: (_ key: UnsafeRawBufferPointer, _ values: UnsafeRawBufferPointer, _ width: Int, _ valuesOfKey: Int) throws -> Bool) throws {
        guard database.options.contains(.dupFixed) else {
            return try forEach(in: range) { entry in try body(entry.key, entry.value, entry.value.count, 1) }
        }
        var keys = entries(in: range)
        while let (first, count) = try keys.nextKey() {
            guard count > 1 else {
                guard try body(first.key, first.value, first.value.count, 1) else { return }
                continue
            }
            let width = first.value.count
            guard width > 0 else { throw LMDBError(.corrupted, database: database.name, message: "a key's values are of no bytes in a table of fixed-size values") }
            var page = try values(MDB_GET_MULTIPLE)
            var handed = 0
            while let values = page {
                let whole = values.count / width
                guard try body(first.key, UnsafeRawBufferPointer(rebasing: values[..<(whole * width)]), width, count) else { return }
                handed += whole
                page = handed < count ? try self.values(MDB_NEXT_MULTIPLE) : nil
            }
            guard handed == count else {
                throw LMDBError(.corrupted, database: database.name, message: "a key holds \(count) values, but its pages hold \(handed)")
            }
        }
    }

    /// The page of values `operation` (`MDB_GET_MULTIPLE` or `MDB_NEXT_MULTIPLE`) returns, or `nil` when there are
    /// no more.
    private func values(_ operation: MDB_cursor_op) throws(LMDBError) -> UnsafeRawBufferPointer? {
        var key = MDB_val()
        var value = MDB_val()
        let code = mdb_cursor_get(handle, &key, &value, operation)
        if code == MDB_NOTFOUND { return nil }
        try transaction.check(code, database: database)
        return value.mv_data == nil || value.mv_size == 0 ? nil : UnsafeRawBufferPointer(value)
    }
}
