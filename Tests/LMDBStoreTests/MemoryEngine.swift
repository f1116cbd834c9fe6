import Foundation
import LMDB
@testable import LMDBStore
import Testing

// A second engine under the store's key-value seam: ordered tables in memory, snapshots for readers, one writer at a
// time. It exists to prove the seam (every suite marked `.onEveryEngine` runs over LMDB and then over this), so it
// favours plainness over speed: a table is a sorted array of keys, each with its sorted values.

/// Bytes the engine owns, at a fixed address for as long as any snapshot or transaction holds them.
final class MemoryBytes {
    let storage: UnsafeMutableRawBufferPointer

    init(count: Int) {
        // A zero-byte value still needs an address: allocate one byte and hand out none of it.
        let base = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 8)
        storage = UnsafeMutableRawBufferPointer(start: base, count: count)
    }

    convenience init(_ bytes: UnsafeRawBufferPointer) {
        self.init(count: bytes.count)
        if bytes.count > 0 { storage.copyMemory(from: bytes) }
    }

    deinit { storage.baseAddress.map { $0.deallocate() } }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(storage) }
}

/// `memcmp` order, a shorter key first when one is a prefix of the other — LMDB's default order.
func compareBytes(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
    let common = min(lhs.count, rhs.count)
    if common > 0 {
        let order = memcmp(lhs.baseAddress!, rhs.baseAddress!, common)
        if order != 0 { return Int(order) }
    }
    return lhs.count - rhs.count
}

/// One key of a table and its values (one, or a dupSort key's sorted set).
struct MemorySlot {
    var key: MemoryBytes
    var values: [MemoryBytes]
}

/// One table: its options and its keys in order.
struct MemoryTable {
    var name: String
    var options: DatabaseOptions
    var slots: [MemorySlot] = []

    /// The first position whose key is at or after `key` (`orAfter: false`: strictly after).
    func position(of key: UnsafeRawBufferPointer, orAfter inclusive: Bool = true) -> Int {
        var low = 0, high = slots.count
        while low < high {
            let middle = (low + high) / 2
            let order = compareBytes(slots[middle].key.bytes, key)
            if order < 0 || (!inclusive && order == 0) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The position of `key` exactly.
    func index(of key: UnsafeRawBufferPointer) -> Int? {
        let at = position(of: key)
        return at < slots.count && compareBytes(slots[at].key.bytes, key) == 0 ? at : nil
    }

    var entryCount: Int { slots.reduce(0) { $0 + $1.values.count } }
}

/// What one commit left: every table by handle, and the handles by name.
struct MemorySnapshot {
    var tables: [UInt32: MemoryTable] = [:]
    var handles: [String: UInt32] = [:]
    /// How many commits made it.
    var number: UInt64 = 0
}

/// The data of one store "file": the last commit, and the lock writers take in turn.
final class MemoryFile: @unchecked Sendable {
    let path: String
    private let state = NSLock()
    private let writer = NSLock()
    private var committed = MemorySnapshot()
    private var nextHandle: UInt32 = 2
    private var writerThread: pthread_t?

    init(path: String) { self.path = path }

    func snapshot() -> MemorySnapshot { state.withLock { committed } }

    var isWriterThread: Bool { state.withLock { writerThread.map { pthread_equal($0, pthread_self()) != 0 } ?? false } }

    /// Runs `body` holding the writer lock; its snapshot is committed when it returns one.
    func write<Result>(_ body: (inout MemorySnapshot) throws -> Result) throws -> Result {
        if isWriterThread {
            throw LMDBError(.wouldDeadlock, path: path, message: "a write transaction is already open on this thread")
        }
        writer.lock()
        defer { writer.unlock() }
        state.withLock { writerThread = pthread_self() }
        defer { state.withLock { writerThread = nil } }
        var working = snapshot()
        working.number += 1
        let result = try body(&working)
        state.withLock { committed = working }
        return result
    }

    func newHandle() -> UInt32 { state.withLock { defer { nextHandle += 1 }; return nextHandle } }
}

/// The files of one run of a test over the memory engine, by path: a store closed and opened again finds its data.
final class MemoryFiles: @unchecked Sendable {
    private let lock = NSLock()
    private var files: [String: MemoryFile] = [:]

    func open(_ path: String, options: Environment.Options) throws -> any KeyValueEngine {
        let file: MemoryFile? = lock.withLock {
            if let file = files[path] { return file }
            guard !options.isReadOnly else { return nil }
            let file = MemoryFile(path: path)
            files[path] = file
            return file
        }
        guard let file else { throw LMDBError(.noSuchFile, path: path, message: "no store at this path") }
        return MemoryEngine(file: file, isReadOnly: options.isReadOnly)
    }
}

/// The engine a store opens: a file, read-only or not.
final class MemoryEngine: KeyValueEngine {
    let file: MemoryFile
    let isReadOnly: Bool

    init(file: MemoryFile, isReadOnly: Bool) {
        self.file = file
        self.isReadOnly = isReadOnly
    }

    var path: String { file.path }
    var maxKeySize: Int { 511 }

    /// Tables in memory have no pages to damage.
    func checkPages() throws -> [String] { [] }

    func openDatabase(named name: String?, options: DatabaseOptions, create: Bool) throws -> Database {
        guard let name else { return Database(handle: 1, name: nil, options: []) }
        let snapshot = file.snapshot()
        if let handle = snapshot.handles[name] {
            let existing = snapshot.tables[handle]!.options
            guard existing.contains(.dupSort) == options.contains(.dupSort) else {
                throw LMDBError(.incompatible, path: path, database: name, message: "the table exists with other options")
            }
            return Database(handle: handle, name: name, options: existing)
        }
        guard create, !isReadOnly else { throw LMDBError(.notFound, path: path, database: name) }
        return try file.write { snapshot in
            if let handle = snapshot.handles[name] { return Database(handle: handle, name: name, options: snapshot.tables[handle]!.options) }
            let handle = file.newHandle()
            snapshot.handles[name] = handle
            snapshot.tables[handle] = MemoryTable(name: name, options: options)
            return Database(handle: handle, name: name, options: options)
        }
    }

    func beginRead() throws -> any KeyValueTransaction {
        MemoryTransaction(engine: self, snapshot: file.snapshot(), isReadOnly: true)
    }

    func withWriteTransaction(_ body: (any KeyValueTransaction) throws -> Void) throws {
        guard !isReadOnly else { throw LMDBError(.permissionDenied, path: path, message: "the store is open read-only") }
        try file.write { snapshot in
            let transaction = MemoryTransaction(engine: self, snapshot: snapshot, isReadOnly: false)
            defer { transaction.isActive = false }
            try body(transaction)
            snapshot = transaction.snapshot
        }
    }
}

final class MemoryTransaction: KeyValueTransaction {
    let engine: MemoryEngine
    var snapshot: MemorySnapshot
    let isReadOnly: Bool
    var isActive = true
    /// Bytes a write replaced or removed, and the main table's listing: kept until the transaction ends, so that
    /// nothing it lent goes away under its reader.
    private var kept: [MemoryBytes] = []

    init(engine: MemoryEngine, snapshot: MemorySnapshot, isReadOnly: Bool) {
        self.engine = engine
        self.snapshot = snapshot
        self.isReadOnly = isReadOnly
    }

    var snapshotNumber: UInt64 { snapshot.number }

    func endRead() {
        precondition(isReadOnly && isActive, "endRead() ends an open read transaction once")
        isActive = false
    }

    func keep(_ bytes: some Sequence<MemoryBytes>) { kept.append(contentsOf: bytes) }

    /// The table behind `handle`; the main table (handle 1) lists the others' names.
    func table(_ handle: Database) throws -> MemoryTable {
        precondition(isActive, "memory transaction used after it finished")
        if handle.handle == 1 {
            var main = MemoryTable(name: "", options: [])
            for name in snapshot.handles.keys.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
                let key = Array(name.utf8).withUnsafeBytes { MemoryBytes($0) }
                let value = MemoryBytes(count: 0)
                keep([key, value])
                main.slots.append(MemorySlot(key: key, values: [value]))
            }
            return main
        }
        guard let table = snapshot.tables[handle.handle] else {
            throw LMDBError(.badDatabaseHandle, path: engine.path, database: handle.name, message: "the table was dropped")
        }
        return table
    }

    func modify<Result>(_ handle: Database, _ change: (inout MemoryTable) throws -> Result) throws -> Result {
        guard !isReadOnly else { throw LMDBError(.permissionDenied, path: engine.path, database: handle.name, message: "a read transaction cannot write") }
        guard handle.handle != 1 else { throw LMDBError(.incompatible, path: engine.path, message: "the main table is written by opening tables") }
        _ = try table(handle)
        return try change(&snapshot.tables[handle.handle]!)
    }

    func checkKey(_ key: UnsafeRawBufferPointer, _ handle: Database) throws {
        guard key.count >= 1 && key.count <= engine.maxKeySize else {
            throw LMDBError(.badValueSize, path: engine.path, database: handle.name, message: "a key of \(key.count) bytes")
        }
    }

    func borrowedValue(forKey key: UnsafeRawBufferPointer, in handle: Database) throws -> UnsafeRawBufferPointer? {
        try checkKey(key, handle)
        let table = try table(handle)
        return table.index(of: key).map { table.slots[$0].values[0].bytes }
    }

    /// Puts `value` under `key`; the position (key, value) it landed at.
    @discardableResult
    func insert(_ value: MemoryBytes, forKey key: UnsafeRawBufferPointer, in handle: Database, options: PutOptions) throws -> (Int, Int) {
        try checkKey(key, handle)
        if handle.options.contains(.dupSort) && value.storage.count == 0 {
            // The seam's rule: a dupSort table's values are not empty (LMDB keeps a key's further values as keys of
            // a sub-tree, refuses an empty one there and loses an empty first value when a second comes).
            throw LMDBError(.badValueSize, path: engine.path, database: handle.name, message: "an empty value in a dupSort table")
        }
        return try modify(handle) { table in
            let at = table.position(of: key)
            let exists = at < table.slots.count && compareBytes(table.slots[at].key.bytes, key) == 0
            if options.contains(.append) && (at != table.slots.count || exists) && !(exists && table.options.contains(.dupSort)) {
                throw LMDBError(.keyExists, path: engine.path, database: handle.name, message: "an appended key must sort after every key")
            }
            guard exists else {
                table.slots.insert(MemorySlot(key: MemoryBytes(key), values: [value]), at: at)
                return (at, 0)
            }
            if options.contains(.noOverwrite) {
                throw LMDBError(.keyExists, path: engine.path, database: handle.name, message: "the key is already in the table")
            }
            guard table.options.contains(.dupSort) else {
                keep(table.slots[at].values)
                table.slots[at].values = [value]
                return (at, 0)
            }
            if table.options.contains(.dupFixed), let width = table.slots[at].values.first?.storage.count, width != value.storage.count {
                throw LMDBError(.badValueSize, path: engine.path, database: handle.name, message: "values of a fixed-size table differ in size")
            }
            var values = table.slots[at].values
            var low = 0, high = values.count
            while low < high {
                let middle = (low + high) / 2
                if compareBytes(values[middle].bytes, value.bytes) < 0 { low = middle + 1 } else { high = middle }
            }
            if low < values.count && compareBytes(values[low].bytes, value.bytes) == 0 {
                if options.contains(.noDuplicateData) {
                    throw LMDBError(.keyExists, path: engine.path, database: handle.name, message: "the pair is already in the table")
                }
                return (at, low)
            }
            values.insert(value, at: low)
            table.slots[at].values = values
            return (at, low)
        }
    }

    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in handle: Database, options: PutOptions) throws {
        try insert(MemoryBytes(value), forKey: key, in: handle, options: options)
    }

    func reserve(count: Int, forKey key: UnsafeRawBufferPointer, in handle: Database, options: PutOptions) throws -> UnsafeMutableRawBufferPointer {
        guard !handle.options.contains(.dupSort) else {
            throw LMDBError(.incompatible, path: engine.path, database: handle.name, message: "reserve cannot be used in a dupSort table")
        }
        let value = MemoryBytes(count: count)
        try insert(value, forKey: key, in: handle, options: options)
        return value.storage
    }

    func delete(key: UnsafeRawBufferPointer, in handle: Database) throws -> Bool {
        try modify(handle) { table in
            guard let at = table.index(of: key) else { return false }
            keep([table.slots[at].key] + table.slots[at].values)
            table.slots.remove(at: at)
            return true
        }
    }

    func delete(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, in handle: Database) throws -> Bool {
        try modify(handle) { table in
            guard let at = table.index(of: key),
                  let which = table.slots[at].values.firstIndex(where: { compareBytes($0.bytes, value) == 0 }) else { return false }
            keep([table.slots[at].values[which]])
            table.slots[at].values.remove(at: which)
            if table.slots[at].values.isEmpty {
                keep([table.slots[at].key])
                table.slots.remove(at: at)
            }
            return true
        }
    }

    func clear(_ handle: Database) throws {
        try modify(handle) { table in
            for slot in table.slots { keep([slot.key] + slot.values) }
            table.slots = []
        }
    }

    func drop(_ handle: Database) throws {
        try clear(handle)
        snapshot.tables[handle.handle] = nil
        if let name = handle.name { snapshot.handles[name] = nil }
    }

    func entryCount(of handle: Database) throws -> Int { try table(handle).entryCount }

    func withCursor(on handle: Database, _ body: (any KeyValueCursor) throws -> Void) throws {
        _ = try table(handle)
        try body(MemoryCursor(transaction: self, database: handle))
    }
}

/// A cursor: a key position and a value position within it, read against the transaction's current tables.
final class MemoryCursor: KeyValueCursor {
    let transaction: MemoryTransaction
    let database: Database
    private var slot = 0
    private var value = 0
    private var positioned = false
    /// Set by a delete: the position already holds the entry after the deleted one.
    private var afterDelete = false

    init(transaction: MemoryTransaction, database: Database) {
        self.transaction = transaction
        self.database = database
    }

    private var table: MemoryTable { get throws { try transaction.table(database) } }

    /// Stands at (`slot`, `value`) when there is an entry there.
    private func land(_ table: MemoryTable, _ slot: Int, _ value: Int) -> CursorEntry? {
        afterDelete = false
        guard slot >= 0, slot < table.slots.count, value >= 0, value < table.slots[slot].values.count else {
            positioned = false
            return nil
        }
        self.slot = slot
        self.value = value
        positioned = true
        return CursorEntry(key: table.slots[slot].key.bytes, value: table.slots[slot].values[value].bytes)
    }

    func first() throws -> CursorEntry? { try land(table, 0, 0) }

    func last() throws -> CursorEntry? {
        let table = try table
        guard let slot = table.slots.indices.last else { return land(table, -1, 0) }
        return land(table, slot, table.slots[slot].values.count - 1)
    }

    func nextKey() throws -> CursorEntry? {
        let table = try table
        guard positioned else { return land(table, 0, 0) }
        if afterDelete, slot < table.slots.count, value == 0 { return land(table, slot, 0) }
        return land(table, slot + 1, 0)
    }

    func nextDuplicate() throws -> CursorEntry? {
        let table = try table
        guard positioned, slot < table.slots.count else { return nil }
        if afterDelete { return value < table.slots[slot].values.count ? land(table, slot, value) : nil }
        return value + 1 < table.slots[slot].values.count ? land(table, slot, value + 1) : nil
    }

    func current() throws -> CursorEntry? {
        let table = try table
        guard positioned else { return nil }
        return land(table, slot, value) ?? (afterDelete ? land(table, slot + 1, 0) : nil)
    }

    func seek(exactly key: UnsafeRawBufferPointer) throws -> CursorEntry? {
        let table = try table
        guard let at = table.index(of: key) else { positioned = false; return nil }
        return land(table, at, 0)
    }

    func seek(atOrAfter key: UnsafeRawBufferPointer) throws -> CursorEntry? {
        let table = try table
        return land(table, table.position(of: key), 0)
    }

    func seek(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> CursorEntry? {
        let table = try table
        guard table.options.contains(.dupSort) else {
            throw LMDBError(.incompatible, database: database.name, message: "a key and value are sought in dupSort tables only")
        }
        guard let at = table.index(of: key), let which = table.slots[at].values.firstIndex(where: { compareBytes($0.bytes, value) == 0 }) else {
            positioned = false
            return nil
        }
        return land(table, at, which)
    }

    func put(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, options: PutOptions) throws {
        let (slot, value) = try transaction.insert(MemoryBytes(value), forKey: key, in: database, options: options)
        _ = land(try table, slot, value)
    }

    func putDuplicates(_ values: UnsafeRawBufferPointer, size: Int, forKey key: UnsafeRawBufferPointer, options: PutOptions) throws {
        guard size > 0, values.count % size == 0 else {
            throw LMDBError(.invalidArgument, database: database.name, message: "\(values.count) bytes of values are not a whole number of \(size)-byte values")
        }
        guard try table.options.contains(.dupFixed) else {
            throw LMDBError(.incompatible, database: database.name, message: "several values are put at once only in a dupFixed table")
        }
        for start in stride(from: 0, to: values.count, by: size) {
            try put(UnsafeRawBufferPointer(rebasing: values[start..<start + size]), forKey: key, options: options)
        }
    }

    func duplicateCount() throws -> Int {
        let table = try table
        guard table.options.contains(.dupSort) else {
            throw LMDBError(.incompatible, database: database.name, message: "values are counted in dupSort tables only")
        }
        guard positioned, slot < table.slots.count else {
            throw LMDBError(.invalidArgument, database: database.name, message: "the cursor is not on an entry")
        }
        return table.slots[slot].values.count
    }

    func deleteCurrent() throws {
        guard positioned else { throw LMDBError(.invalidArgument, database: database.name, message: "the cursor is not on an entry") }
        let (slot, value) = (self.slot, self.value)
        try transaction.modify(database) { table in
            if table.slots[slot].values.count == 1 {
                transaction.keep([table.slots[slot].key] + table.slots[slot].values)
                table.slots.remove(at: slot)
                self.value = 0
            } else {
                transaction.keep([table.slots[slot].values[value]])
                table.slots[slot].values.remove(at: value)
                if value == table.slots[slot].values.count {
                    // The key's last value went: the next entry is the next key's first.
                    self.slot = slot + 1
                    self.value = 0
                }
            }
        }
        afterDelete = true
    }

    func deleteCurrentKey() throws {
        guard positioned else { throw LMDBError(.invalidArgument, database: database.name, message: "the cursor is not on an entry") }
        let slot = self.slot
        try transaction.modify(database) { table in
            transaction.keep([table.slots[slot].key] + table.slots[slot].values)
            table.slots.remove(at: slot)
        }
        value = 0
        afterDelete = true
    }

    /// The positions of the keys within `range`.
    private func keys(in range: KeyRange, of table: MemoryTable) -> Range<Int> {
        let start: Int
        switch range.lower {
        case nil: start = 0
        case .inclusive(let key)?: start = key.withUnsafeBytes { table.position(of: $0) }
        case .exclusive(let key)?: start = key.withUnsafeBytes { table.position(of: $0, orAfter: false) }
        }
        let end: Int
        switch range.upper {
        case nil: end = table.slots.count
        case .inclusive(let key)?: end = key.withUnsafeBytes { table.position(of: $0, orAfter: false) }
        case .exclusive(let key)?: end = key.withUnsafeBytes { table.position(of: $0) }
        }
        return start..<max(start, end)
    }

    func forEach(in range: KeyRange, direction: ScanDirection, _ body: (CursorEntry) throws -> Bool) throws {
        let table = try table
        let keys = keys(in: range, of: table)
        switch direction {
        case .forward:
            for at in keys {
                for which in table.slots[at].values.indices {
                    guard let entry = land(table, at, which), try body(entry) else { return }
                }
            }
        case .reverse:
            for at in keys.reversed() {
                for which in table.slots[at].values.indices.reversed() {
                    guard let entry = land(table, at, which), try body(entry) else { return }
                }
            }
        }
    }

    func forEachValue(in range: KeyRange, direction: ScanDirection, _ body: (CursorEntry) throws -> Bool) throws {
        try forEach(in: range, direction: direction, body)
    }

    /// One value per run: what the seam allows, and the shape a caller's walk of a page must also take.
    func forEachValueRun(in range: KeyRange, _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, Int, Int) throws -> Bool) throws {
        try forEach(in: range, direction: .forward) { entry in try body(entry.key, entry.value, entry.value.count, 1) }
    }

    func forEachKey(in range: KeyRange, _ body: (CursorEntry, Int) throws -> Bool) throws {
        let table = try table
        for at in keys(in: range, of: table) {
            guard let entry = land(table, at, 0), try body(entry, table.slots[at].values.count) else { return }
        }
    }

    func count(in range: KeyRange, upTo limit: Int) throws -> Int {
        let table = try table
        var count = 0
        for at in keys(in: range, of: table) where count < limit { count += table.slots[at].values.count }
        return min(count, limit)
    }
}

/// Runs each test of a suite twice: over LMDB, then over the in-memory engine (stores opened in the test find their
/// files in a fresh set of memory files). A failure in the second run is reported with the engine named.
struct EveryEngine: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil, !test.traits.contains(where: { $0 is LMDBOnly }) else { return try await function() }
        try await function()
        let files = MemoryFiles()
        try await KeyValueEngines.$opener.withValue({ path, options in try files.open(path, options: options) }) {
            do {
                try await function()
            } catch {
                throw MemoryEngineFailure(underlying: error)
            }
        }
    }
}

/// An error thrown by a test while it ran over the in-memory engine.
struct MemoryEngineFailure: Error, CustomStringConvertible {
    let underlying: any Error
    var description: String { "over the in-memory engine: \(underlying)" }
}

/// Marks a test of a suite run ``onEveryEngine`` that checks what only LMDB has (its file's bytes, its map, files
/// of other programs, other processes): it runs over LMDB alone.
struct LMDBOnly: TestTrait {}

extension Trait where Self == LMDBOnly {
    /// Runs the test over LMDB only.
    static var lmdbOnly: Self { LMDBOnly() }
}

extension Trait where Self == EveryEngine {
    /// Runs every test over LMDB and over the in-memory engine.
    static var onEveryEngine: Self { EveryEngine() }
}
