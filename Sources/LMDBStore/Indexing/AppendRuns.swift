import Foundation
import LMDB
import ObjectGraph

/// The new rows' index and link entries of a one-transaction batch insert into tables that were empty when it
/// began, held back in sorted runs (one a chunk, as ``IndexUpdates`` sorts each chunk's entries) and put once at
/// the end, merged, each after the one before it (`MDB_APPEND`) — a bulk load: no search from the root per entry,
/// and no page split at its middle, so the tables' pages come out full.
///
/// A table is held only while nothing else writes it: the first time a chunk's entries reach it, it must be a
/// dupSort table holding no entry; when anything is about to write it directly (a checked entry, a removal),
/// ``release(_:in:)`` puts its runs first and holds nothing of it again. Nothing in a batch insert reads an unchecked
/// table before ``appendAll(in:)``. Past ``memoryBudget`` bytes the runs in memory are written to a file beside the
/// store (``SpillFile``) and read back through a memory map when they are merged, so an import of any size holds a
/// bounded amount of memory.
///
/// The runs may be added to from a second thread (``BulkLoadLane``) while the transaction's thread writes: every
/// method takes one lock, and the one a second thread calls, ``addHeld(_:count:entry:)``, never touches the
/// transaction.
final class AppendRuns: @unchecked Sendable {
    /// Held by each method for its whole call: the transaction's thread and a lane's may both reach the runs.
    private let lock = NSLock()
    /// One held table's runs: those in memory, each an allocation of its own, and those written to the spill file
    /// (where they begin, and their size). An entry is its key's and its value's lengths (two bytes each, in the
    /// machine's order: keys and dupSort values are at most 511 bytes), then the key, then the value.
    private struct Held {
        let table: Database
        var runs: [UnsafeMutableRawBufferPointer] = []
        var spilled: [Range<Int>] = []
    }

    private var held: [Held] = []
    /// Held tables by handle, as their position in ``held``; `nil` for a table seen and not held.
    private var positions: [UInt32: Int?] = [:]
    /// The bytes of the runs in memory.
    private var byteCount = 0
    /// The most bytes of runs kept in memory; past it they go to the spill file.
    let memoryBudget: Int
    /// The folder the spill file is made in, and the file once made.
    private let spillFolder: URL
    private var spill: SpillFile?
    /// Set once the runs were put: nothing more is held.
    private(set) var isClosed = false
    /// The entries LMDB would not append, put in their place instead: none unless the runs were out of order.
    private(set) var putInPlace = 0
    /// The bytes of runs written to the spill file.
    var spilledBytes: Int { spill?.size ?? 0 }

    /// Runs that keep at most `memoryBudget` bytes in memory, and write the rest to a file in `spillFolder`.
    init(memoryBudget: Int, spillFolder: URL) {
        self.memoryBudget = memoryBudget
        self.spillFolder = spillFolder
    }

    deinit {
        for table in held { for run in table.runs { run.deallocate() } }
    }

    /// Whether `table`'s new unchecked entries go to a run here: a held table, or one seen for the first time that
    /// is a dupSort table holding no entry.
    func holds(_ table: Database, in transaction: any KeyValueTransaction) throws -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !isClosed else { return false }
        if let known = positions[table.handle] { return known != nil }
        guard table.options.contains(.dupSort), try table.entryCount(in: transaction) == 0 else {
            positions[table.handle] = .some(nil)
            return false
        }
        positions[table.handle] = held.count
        held.append(Held(table: table))
        return true
    }

    /// Adds one run of `table`'s (held) entries, `count` of them, in the table's order; `entry(i)` gives the `i`th
    /// entry's key and value. Past the memory budget, the runs in memory go to the spill file. Returns `false`,
    /// having put the table's runs and holding nothing of it again, when a key or value is longer than a run keeps
    /// (65 535 bytes; LMDB's dupSort tables hold 511): the caller puts the entries, and LMDB's refusal names them.
    func add(_ table: Database, count: Int, in transaction: any KeyValueTransaction,
             entry: (Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)) throws -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if try keep(table, count: count, entry: entry) { return true }
        try put(table, in: transaction)
        return false
    }

    /// ``add(_:count:in:entry:)`` without the transaction, for a thread that does not own it: returns `false`,
    /// keeping nothing, when `table` is not held (never seen, or released) or an entry is longer than a run keeps —
    /// the caller then hands the entries to the transaction's thread, whose ``add(_:count:in:entry:)`` decides.
    func addHeld(_ table: Database, count: Int, entry: (Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)) throws -> Bool {
        lock.lock()
        defer { lock.unlock() }
        return try keep(table, count: count, entry: entry)
    }

    /// Copies the entries into a new run of `table` when it is held and each fits a run (the lock held).
    private func keep(_ table: Database, count: Int, entry: (Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)) throws -> Bool {
        guard let position = positions[table.handle] ?? nil else { return false }
        var size = 0
        for index in 0..<count {
            let (key, value) = entry(index)
            guard key.count <= UInt16.max && value.count <= UInt16.max else { return false }
            size += 4 + key.count + value.count
        }
        guard count > 0 else { return true }
        let run = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        var at = run.baseAddress!
        for index in 0..<count {
            let (key, value) = entry(index)
            at = Self.write(key, value, at: at)
        }
        held[position].runs.append(run)
        byteCount += size
        if byteCount > memoryBudget { try spillRuns() }
        return true
    }

    /// Writes one entry in the runs' layout at `at` (two-byte lengths, the key, the value; ``Head`` reads it back)
    /// and returns where the next one goes.
    @inline(__always)
    private static func write(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, at start: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        var at = start
        at.storeBytes(of: UInt16(truncatingIfNeeded: key.count), as: UInt16.self)
        (at + 2).storeBytes(of: UInt16(truncatingIfNeeded: value.count), as: UInt16.self)
        at += 4
        if key.count > 0 { at.copyMemory(from: key.baseAddress!, byteCount: key.count) }
        at += key.count
        if value.count > 0 { at.copyMemory(from: value.baseAddress!, byteCount: value.count) }
        return at + value.count
    }

    /// Writes every run in memory to the spill file (made on first use) and lets its memory go.
    private func spillRuns() throws {
        let file = try spill ?? SpillFile(in: spillFolder)
        spill = file
        for position in held.indices {
            let runs = held[position].runs
            held[position].runs = []
            defer { for run in runs { run.deallocate() } }
            for run in runs { held[position].spilled.append(try file.append(UnsafeRawBufferPointer(run))) }
        }
        byteCount = 0
    }

    /// Before `table` is written directly: puts its runs (it held nothing else) and holds nothing of it again.
    func release(_ table: Database, in transaction: any KeyValueTransaction) throws {
        lock.lock()
        defer { lock.unlock() }
        try put(table, in: transaction)
    }

    /// ``release(_:in:)`` with the lock held.
    private func put(_ table: Database, in transaction: any KeyValueTransaction) throws {
        guard let known = positions[table.handle] else {
            positions[table.handle] = .some(nil)
            return
        }
        guard let position = known else { return }
        positions[table.handle] = .some(nil)
        try put(&held[position], in: transaction)
    }

    /// Puts every held run, each table's merged in order, and holds nothing more. With `mergingAhead` (a bulk load
    /// that has a second processor), a ``BulkLoadLane`` merges the next table's runs into one while this thread
    /// appends the current table's: tables whose runs are all in memory (the lane does not read the spill file).
    func appendAll(in transaction: any KeyValueTransaction, mergingAhead: Bool = false) throws {
        lock.lock()
        defer { lock.unlock() }
        isClosed = true
        defer { spill = nil }
        let ahead = mergingAhead ? held.indices.filter { !held[$0].runs.isEmpty && held[$0].spilled.isEmpty } : []
        guard ahead.count > 1 else {
            for position in held.indices { try put(&held[position], in: transaction) }
            return
        }
        let lane = BulkLoadLane<MergedRun>()
        // However this ends, the lane's merge is over before the runs it reads can go (`deinit`).
        defer { lane.close() }
        func mergeAhead(_ index: Int) {
            let runs = held[ahead[index]].runs.map(UnsafeRawBufferPointer.init)
            lane.submit { try MergedRun(runs) }
        }
        mergeAhead(0)
        var next = 0
        for position in held.indices {
            guard next < ahead.count, ahead[next] == position, let merged = try lane.finish() else {
                try put(&held[position], in: transaction)
                continue
            }
            next += 1
            if next < ahead.count { mergeAhead(next) }
            try put(&held[position], in: transaction, merged: merged)
        }
    }

    /// A table's runs merged into one (a pair given twice once), in memory of its own freed with it.
    private final class MergedRun: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer
        private(set) var count = 0

        /// Merges `runs` (sorted, each in the runs' layout) into one run.
        init(_ runs: [UnsafeRawBufferPointer]) throws {
            bytes = .allocate(byteCount: max(runs.reduce(0) { $0 + $1.count }, 1), alignment: 8)
            var at = bytes.baseAddress!
            try AppendRuns.merge(runs) { key, value in at = AppendRuns.write(key, value, at: at) }
            count = at - bytes.baseAddress!
        }

        deinit { bytes.deallocate() }
    }

    /// Puts `held`'s entries, merged (here, or already as `merged`), into its table (empty but for them), and lets
    /// their memory go.
    private func put(_ held: inout Held, in transaction: any KeyValueTransaction, merged: MergedRun? = nil) throws {
        let runs = held.runs, spilled = held.spilled, table = held.table
        held.runs = []
        held.spilled = []
        defer {
            for run in runs {
                byteCount -= run.count
                run.deallocate()
            }
        }
        guard !runs.isEmpty || !spilled.isEmpty else { return }
        if let merged {
            // One run, already merged: each entry after the one before.
            return try table.withCursor(in: transaction) { cursor in
                let writer = AppendWriter(cursor: cursor, dupFixed: table.options.contains(.dupFixed))
                var at = UnsafeRawPointer(merged.bytes.baseAddress!)
                let end = at + merged.count
                while at < end {
                    let entry = Head(at: at, end: end)
                    try writer.put(UnsafeRawBufferPointer(start: entry.key, count: entry.keyCount), UnsafeRawBufferPointer(start: entry.value, count: entry.valueCount))
                    at = entry.value + entry.valueCount
                }
                try writer.finish()
                putInPlace += writer.putInPlace
            }
        }
        func merge(_ mapped: UnsafeRawBufferPointer?) throws {
            let all = runs.map(UnsafeRawBufferPointer.init) + spilled.map { UnsafeRawBufferPointer(rebasing: mapped![$0]) }
            try table.withCursor(in: transaction) { cursor in
                let writer = AppendWriter(cursor: cursor, dupFixed: table.options.contains(.dupFixed))
                try Self.merge(all) { key, value in try writer.put(key, value) }
                try writer.finish()
                putInPlace += writer.putInPlace
            }
        }
        guard let spill, !spilled.isEmpty else { return try merge(nil) }
        try spill.withMap { try merge($0) }
    }

    /// A run's next entry in a merge.
    private struct Head {
        /// Where the entry's key begins, and how long it is.
        var key: UnsafeRawPointer
        var keyCount: Int
        /// Where its value begins, and how long it is.
        var value: UnsafeRawPointer
        var valueCount: Int
        /// Where the run ends.
        let end: UnsafeRawPointer

        /// The head at `start` of a run ending at `end`.
        @inline(__always)
        init(at start: UnsafeRawPointer, end: UnsafeRawPointer) {
            self.end = end
            keyCount = Int(start.loadUnaligned(as: UInt16.self))
            valueCount = Int(start.loadUnaligned(fromByteOffset: 2, as: UInt16.self))
            key = start + 4
            value = key + keyCount
        }

        /// Moves to the run's next entry: `false` at its end.
        @inline(__always)
        mutating func advance() -> Bool {
            let next = value + valueCount
            guard next < end else { return false }
            self = Head(at: next, end: end)
            return true
        }

        /// The entries' order: key, then value (`memcmp`, the shorter first when one begins the other).
        @inline(__always)
        func precedes(_ other: Head) -> Bool {
            let byKey = Self.compare(key, keyCount, other.key, other.keyCount)
            if byKey != 0 { return byKey < 0 }
            return Self.compare(value, valueCount, other.value, other.valueCount) < 0
        }

        /// Whether `other` is the same pair.
        @inline(__always)
        func isSame(as other: Head) -> Bool {
            keyCount == other.keyCount && valueCount == other.valueCount
                && memcmp(key, other.key, keyCount) == 0 && memcmp(value, other.value, valueCount) == 0
        }

        /// ``EntryOrder/compare(_:_:)`` on a run's bytes, which are never empty-based: without its checks for an empty
        /// buffer, this loop of the merge runs 2.6 % fewer instructions in the whole import.
        @inline(__always)
        static func compare(_ lhs: UnsafeRawPointer, _ lhsCount: Int, _ rhs: UnsafeRawPointer, _ rhsCount: Int) -> Int {
            let byBytes = memcmp(lhs, rhs, min(lhsCount, rhsCount))
            return byBytes != 0 ? Int(byBytes) : lhsCount - rhsCount
        }
    }

    /// Calls `body` with every entry of the sorted `runs` in the table's order (key, then value; `memcmp`, the
    /// shorter first), a pair given twice once: a binary heap of the runs by their next entry, whose top stays put
    /// while its run keeps sorting first — two comparisons an entry when runs follow one another (a to-many's
    /// owners, whose keys only grow) or share few keys (an age).
    static func merge(_ runs: [UnsafeRawBufferPointer], _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws {
        var heap = runs.compactMap { run in run.isEmpty ? nil : Head(at: run.baseAddress!, end: run.baseAddress! + run.count) }
        try heap.withUnsafeMutableBufferPointer { heap in
            var count = heap.count
            func siftDown(_ start: Int) {
                var parent = start
                let item = heap[parent]
                while true {
                    let left = 2 &* parent &+ 1
                    guard left < count else { break }
                    var child = left
                    if left &+ 1 < count && heap[left &+ 1].precedes(heap[left]) { child = left &+ 1 }
                    guard heap[child].precedes(item) else { break }
                    heap[parent] = heap[child]
                    parent = child
                }
                heap[parent] = item
            }
            for position in stride(from: count / 2 - 1, through: 0, by: -1) { siftDown(position) }
            var last: Head?
            while count > 0 {
                let current = heap[0]
                // The same pair twice (a member listed twice) is held once by a dupSort table.
                if last.map({ !$0.isSame(as: current) }) ?? true {
                    try body(UnsafeRawBufferPointer(start: current.key, count: current.keyCount),
                             UnsafeRawBufferPointer(start: current.value, count: current.valueCount))
                    last = current
                }
                if !heap[0].advance() {
                    count &-= 1
                    heap[0] = heap[count]
                }
                if count > 1 { siftDown(0) }
            }
        }
    }
}

/// Puts a dupSort table's entries, given in its order into a table holding none below them, each after the last:
/// a new key appended (`MDB_APPEND`), a key's further values after its others (`MDB_APPENDDUP`) — and, in a table of
/// fixed-size values, all of a key's values in one put (`MDB_MULTIPLE`). An entry LMDB will not append (one below an
/// entry already there) is put in its place.
private final class AppendWriter {
    let cursor: any KeyValueCursor
    let dupFixed: Bool
    /// The key whose values wait in `values` (a table of fixed-size values), `size` bytes each.
    private var waitingKey: UnsafeRawBufferPointer?
    private let values = PendingBytes()
    private var size = 0
    /// The key of the last entry put (other tables).
    private var lastKey: UnsafeRawBufferPointer?
    /// The entries LMDB would not append, put in their place.
    private(set) var putInPlace = 0

    init(cursor: any KeyValueCursor, dupFixed: Bool) {
        self.cursor = cursor
        self.dupFixed = dupFixed
    }

    func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        guard dupFixed else {
            let sameKey = lastKey.map { EntryOrder.compare($0, key) == 0 } ?? false
            try put(value, forKey: key, options: sameKey ? .appendDuplicate : .append)
            lastKey = key
            return
        }
        if let waitingKey, value.count == size, EntryOrder.compare(waitingKey, key) == 0 {
            _ = values.append(value)
            return
        }
        try finish()
        waitingKey = key
        size = value.count
        _ = values.append(value)
    }

    /// Puts the values that wait.
    func finish() throws {
        guard let key = waitingKey else { return }
        waitingKey = nil
        defer { values.removeAll() }
        try values.withUnsafeBytes { run in
            guard run.count > size else { return try put(run, forKey: key, options: .append) }
            do {
                try cursor.putDuplicates(run, size: size, forKey: key, options: [.append, .appendDuplicate])
            } catch LMDBError.keyExists {
                putInPlace += run.count / size
                for start in stride(from: 0, to: run.count, by: size) {
                    try cursor.put(UnsafeRawBufferPointer(rebasing: run[start..<start + size]), forKey: key, options: [])
                }
            }
        }
    }

    private func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, options: PutOptions) throws {
        do {
            try cursor.put(value, forKey: key, options: options)
        } catch LMDBError.keyExists {
            putInPlace += 1
            try cursor.put(value, forKey: key, options: [])
        }
    }
}

/// The file a batch insert's runs go to past their memory budget: made in the store's folder (the disk the store
/// grows on) and removed from it at once, so nothing is left behind when the process ends, however it ends. Runs are
/// appended with `pwrite`; the merge reads them through a read-only memory map.
private final class SpillFile {
    private let descriptor: Int32
    private let path: String
    /// The bytes written.
    private(set) var size = 0

    init(in folder: URL) throws {
        path = folder.appendingPathComponent(".lmdbstore-runs-\(UUID().uuidString)").path
        descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Self.failure("could not make", path) }
        unlink(path)
    }

    deinit {
        close(descriptor)
    }

    /// Appends `bytes`; returns where they lie in the file.
    func append(_ bytes: UnsafeRawBufferPointer) throws -> Range<Int> {
        let start = size
        var written = 0
        while written < bytes.count {
            let result = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(start + written))
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else { throw Self.failure("could not write", path) }
            written += result
        }
        size += bytes.count
        return start..<size
    }

    /// Lends `body` the file's bytes, mapped read-only.
    func withMap<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) throws -> Result {
        guard size > 0 else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        guard let map = mmap(nil, size, PROT_READ, MAP_SHARED, descriptor, 0), map != MAP_FAILED else {
            throw Self.failure("could not map", path)
        }
        defer { munmap(map, size) }
        return try body(UnsafeRawBufferPointer(start: map, count: size))
    }

    private static func failure(_ what: String, _ path: String) -> ManagedObjectContextError {
        let reason = String(cString: strerror(errno))
        return ManagedObjectContextError(.storeUnusable,
            message: "the batch insert \(what) the file of its sorted index entries \(path): \(reason); nothing was inserted")
    }
}
