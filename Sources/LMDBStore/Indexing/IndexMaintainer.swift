import Foundation
import LMDB
import ObjectGraph

/// What putting an entry must not meet (`Docs/FORMAT.md`, "Long keys": a uniqueness key, and a constraint an index keeps).
enum EntryCheck {
    /// Nothing: the entry is one of its key's values (a fetch index, a to-one index).
    case none
    /// The key must be free: a `unique/…` table holds one row per key.
    case keyFree
    /// The key must hold no other row's value: an index that keeps a uniqueness constraint, for a row whose
    /// constrained values are not NULL.
    case noOtherRow
}

/// Keeps one secondary table true to the rows of one entity — a fetch index, a uniqueness constraint or a to-one's
/// inverse. Each kind knows how a row becomes its entry (at most one per row) and what its table refuses; what they
/// share — comparing a row's old and new entries, removing the stale one, putting the fresh one — is written once,
/// in ``IndexUpdates`` and the extension below. A new kind of index is a new conforming type and a line in
/// ``EntityMaintainers``. Maintainers are classes: a save hands each to its row loop with one retain, not one per
/// array it holds.
protocol IndexMaintainer: AnyObject {
    /// The table the entries go to.
    var table: Database { get }
    /// The fields an entry is made of: a row whose values in these fields did not change keeps its entry.
    var fields: [Int] { get }
    /// The uniqueness constraint (a position in the entity's ``StoreLayout/EntityLayout/uniques``) this table checks,
    /// or -1.
    var constraint: Int { get }
    /// Writes the entry of `row` into `scratch` (its value starts with the row's reference, already there) and says
    /// what putting it must not meet; `nil` when the row has no entry in this table.
    func makeEntry(of row: StoredRow, into scratch: inout EntryScratch) -> EntryCheck?
}

extension IndexMaintainer {
    /// Whether `old` and `new` (two states of one row) hold the same values in every field the entry is made of.
    @inline(__always)
    func keepsEntry(from old: StoredRow, to new: StoredRow) -> Bool {
        for field in fields where field >= 0 && old.fields[field] != new.fields[field] { return false }
        return true
    }

    /// Calls `body` with the entry of `row`, if it has one: the bytes live during the call. `scratch` was started
    /// for the row (``EntryScratch/startRow(reference:tag:)``).
    @inline(__always)
    func withEntry<Result>(of row: StoredRow, scratch: inout EntryScratch,
                           _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ check: EntryCheck) throws -> Result) rethrows -> Result? {
        scratch.startEntry()
        guard let check = makeEntry(of: row, into: &scratch) else { return nil }
        return try scratch.key.withUnsafeBytes { key in try scratch.value.withUnsafeBytes { try body(key, $0, check) } }
    }
}

/// Bytes kept side by side until they are put — the keys and values of the entries ``IndexUpdates`` holds, the values
/// of one key an append writes at once (`AppendRuns`) — in memory that grows by doubling (from nothing: a save that
/// keeps no entry allocates none) and is kept when emptied: each piece is copied in with one `memcpy` (an array's
/// `append(contentsOf:)` copies raw bytes one at a time). A class, so an `IndexUpdates` holds it by reference.
final class PendingBytes {
    private var memory = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    /// The bytes in use.
    private(set) var count = 0

    deinit {
        memory.deallocate()
    }

    /// Copies `bytes` in after the others; returns where they lie.
    @inline(__always)
    func append(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let start = count
        if start + bytes.count > memory.count { grow(toHold: start + bytes.count) }
        if let source = bytes.baseAddress, bytes.count > 0 { (memory.baseAddress! + start).copyMemory(from: source, byteCount: bytes.count) }
        count = start + bytes.count
        return start..<count
    }

    /// Lets `write` fill `size` new bytes after the others (no copy from elsewhere); returns where they lie.
    @inline(__always)
    func append(count size: Int, _ write: (UnsafeMutableRawBufferPointer) -> Void) -> Range<Int> {
        let start = count
        if start + size > memory.count { grow(toHold: start + size) }
        write(UnsafeMutableRawBufferPointer(rebasing: memory[start..<(start + size)]))
        count = start + size
        return start..<count
    }

    /// Makes room for `size` bytes in all, so appending up to them allocates nothing more.
    func reserve(_ size: Int) {
        if size > memory.count { grow(toHold: size) }
    }

    private func grow(toHold size: Int) {
        let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, memory.count * 2, 1024), alignment: 8)
        if let old = memory.baseAddress, count > 0 { larger.baseAddress!.copyMemory(from: old, byteCount: count) }
        memory.deallocate()
        memory = larger
    }

    /// Lends `body` the bytes in use.
    func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(rebasing: memory[..<count]))
    }

    /// Forgets every byte, keeping the memory.
    func removeAll() {
        count = 0
    }
}

/// The bytes of one entry being made, reused from entry to entry and row to row: no allocation per entry.
struct EntryScratch {
    var key: [UInt8] = []
    /// The row's reference (row key, entity tag), then — for a covering index — the attributes it stores.
    var value: [UInt8] = []
    /// Where each element of ``key`` ends, in the first ``boundCount`` positions (overwritten, not emptied).
    private var bounds: [Int] = []
    private var boundCount = 0

    init() {
        key.reserveCapacity(64)
        value.reserveCapacity(32)
        bounds = Array(repeating: 0, count: 8)
    }

    /// A scratch holding no memory, standing in for one moved out for a while: making it allocates nothing.
    private init(standIn: Void) {}

    /// A scratch holding no memory (see ``init(standIn:)``).
    static var standIn: EntryScratch { EntryScratch(standIn: ()) }

    /// Starts the entries of the row under `reference` tagged `tag`: every entry's value begins with them.
    @inline(__always)
    mutating func startRow(reference: UInt64, tag: UInt16) {
        value.removeAll(keepingCapacity: true)
        for shift in stride(from: 56, through: 0, by: -8) { value.append(UInt8(truncatingIfNeeded: reference >> UInt64(shift))) }
        value.append(UInt8(truncatingIfNeeded: tag >> 8))
        value.append(UInt8(truncatingIfNeeded: tag))
        startEntry()
    }

    /// Starts the row's next entry: an empty key, the value back to the row's reference.
    @inline(__always)
    mutating func startEntry() {
        if !key.isEmpty { key.removeAll(keepingCapacity: true) }
        if value.count > IndexEntries.referenceSize { value.removeSubrange(IndexEntries.referenceSize...) }
        boundCount = 0
    }

    /// Appends one element to the key, its bytes inverted when it sorts descending.
    @inline(__always)
    mutating func appendElement(_ element: AttributeValue?, descending: Bool = false) {
        let start = key.count
        TupleEncoding.append(element, to: &key)
        if descending {
            for byte in start..<key.count { key[byte] = ~key[byte] }
        }
        if boundCount == bounds.count { bounds.append(0) }
        bounds[boundCount] = key.count
        boundCount += 1
    }

    /// Cuts the key's elements to fit LMDB's key limit, as ``IndexEntries/fit(_:)`` does, when they are too long.
    @inline(__always)
    mutating func fitKey() {
        guard key.count > IndexEntries.maxTupleBytes else { return }
        var start = 0
        let elements = bounds[..<boundCount].map { end in
            defer { start = end }
            return Array(key[start..<end])
        }
        key = IndexEntries.fit(elements)
    }

    /// Whether this entry and `other` have the same key and value.
    @inline(__always)
    func sameEntry(as other: EntryScratch) -> Bool {
        key == other.key && value == other.value
    }
}

/// A fetch index (`index/<Entity>/<index>`): the row's elements as a tuple, each folded as the element's collation
/// says and inverted when descending, cut to fit; a covering index's value goes on with the attributes it stores,
/// each at its type's full width. An index that keeps a uniqueness constraint refuses a second row under a key.
final class FetchIndexMaintainer: IndexMaintainer {
    let table: Database
    let fields: [Int]
    let constraint: Int
    private let elementFields: [Int]
    private let elements: [(isAscending: Bool, collation: FetchIndexElementDescription.Collation)]
    private let storedFields: [Int]
    private let storedWidths: [Int]
    /// The fields of the constraint this index keeps: an entry checks it only when none of them is NULL.
    private let constrainedFields: [Int]

    init(_ entity: StoreLayout.EntityLayout, index position: Int, table: Database) {
        self.table = table
        elementFields = entity.indexFields[position]
        elements = entity.indexElements[position]
        storedFields = entity.indexStoredFields[position]
        storedWidths = entity.indexStoredWidths[position]
        constraint = entity.constraintOfIndex[position]
        constrainedFields = constraint >= 0 ? entity.uniqueFields[constraint] : []
        fields = elementFields + storedFields
    }

    func makeEntry(of row: StoredRow, into scratch: inout EntryScratch) -> EntryCheck? {
        for offset in elementFields.indices {
            scratch.appendElement(IndexEntries.folded(IndexEntries.element(elementFields[offset], of: row), elements[offset].collation),
                                  descending: !elements[offset].isAscending)
        }
        scratch.fitKey()
        for (field, width) in zip(storedFields, storedWidths) {
            let start = scratch.value.count
            TupleEncoding.append(IndexEntries.element(field, of: row), to: &scratch.value)
            while scratch.value.count < start + width { scratch.value.append(0) }
        }
        guard constraint >= 0 else { return EntryCheck.none }
        return constrainedFields.contains { row.fields[$0] == nil } ? EntryCheck.none : .noOtherRow
    }
}

/// A uniqueness constraint no index keeps (`unique/<Entity>/<n>`): the constrained values as a tuple, cut to fit, the
/// key's only value; a row with a NULL among them has no entry (NULLs never clash).
final class UniquenessMaintainer: IndexMaintainer {
    let table: Database
    let fields: [Int]
    let constraint: Int

    init(_ entity: StoreLayout.EntityLayout, constraint position: Int, table: Database) {
        self.table = table
        fields = entity.uniqueFields[position]
        constraint = position
    }

    func makeEntry(of row: StoredRow, into scratch: inout EntryScratch) -> EntryCheck? {
        if fields.contains(where: { $0 < 0 || row.fields[$0] == nil }) { return nil }
        for field in fields { scratch.appendElement(IndexEntries.element(field, of: row)) }
        scratch.fitKey()
        return .keyFree
    }
}

/// A to-one's inverse (`toone/<Entity>/<relationship>`): under the destination's row key, the references of the rows
/// pointing at it.
final class ToOneIndexMaintainer: IndexMaintainer {
    let table: Database
    let fields: [Int]
    var constraint: Int { -1 }
    private let field: Int

    init(_ entity: StoreLayout.EntityLayout, toOne position: Int, table: Database) {
        self.table = table
        field = entity.toOneFields[position]
        fields = [field]
    }

    func makeEntry(of row: StoredRow, into scratch: inout EntryScratch) -> EntryCheck? {
        guard field >= 0, let reference = row.reference(field) else { return nil }
        withUnsafeBytes(of: reference.key.bigEndian) { scratch.key.append(contentsOf: $0) }
        return EntryCheck.none
    }
}

/// The maintainers of one entity's secondary tables, by kind, in the layout's order (fetch indexes, the uniqueness
/// constraints no index keeps, to-ones): made once when the store opens, and shared (a class: handing it to a save
/// retains it once, not each of its arrays).
final class EntityMaintainers {
    let fetchIndexes: [FetchIndexMaintainer]
    let uniqueness: [UniquenessMaintainer]
    let toOneIndexes: [ToOneIndexMaintainer]

    /// The maintainers of `entity` whose tables `table` finds (by name); a table it does not find is left out.
    init(_ entity: StoreLayout.EntityLayout, table: (String) -> Database?) {
        fetchIndexes = entity.indexTables.indices.compactMap { position in
            table(entity.indexTables[position]).map { FetchIndexMaintainer(entity, index: position, table: $0) }
        }
        uniqueness = entity.uniqueTables.indices.compactMap { position in
            guard entity.indexOfConstraint[position] < 0 else { return nil }  // its index keeps it
            return table(entity.uniqueTables[position]).map { UniquenessMaintainer(entity, constraint: position, table: $0) }
        }
        toOneIndexes = entity.toOneTables.indices.compactMap { position in
            table(entity.toOneTables[position]).map { ToOneIndexMaintainer(entity, toOne: position, table: $0) }
        }
    }

    private init(fetchIndexes: [FetchIndexMaintainer], uniqueness: [UniquenessMaintainer], toOneIndexes: [ToOneIndexMaintainer]) {
        self.fetchIndexes = fetchIndexes
        self.uniqueness = uniqueness
        self.toOneIndexes = toOneIndexes
    }

    /// Whether the entity has no secondary table to keep.
    var isEmpty: Bool { fetchIndexes.isEmpty && uniqueness.isEmpty && toOneIndexes.isEmpty }

    /// These maintainers in two groups: those whose entries no uniqueness constraint checks and whose table
    /// `moves` picks, and the others.
    func split(moving moves: (Database) throws -> Bool) rethrows -> (staying: EntityMaintainers, moving: EntityMaintainers) {
        let fetch = try fetchIndexes.map { ($0, try $0.constraint < 0 && moves($0.table)) }
        let toOne = try toOneIndexes.map { ($0, try moves($0.table)) }
        return (EntityMaintainers(fetchIndexes: fetch.filter { !$0.1 }.map(\.0), uniqueness: uniqueness, toOneIndexes: toOne.filter { !$0.1 }.map(\.0)),
                EntityMaintainers(fetchIndexes: fetch.filter(\.1).map(\.0), uniqueness: [], toOneIndexes: toOne.filter(\.1).map(\.0)))
    }

    /// Calls `body` with every entry of `row` (the row under `key`): its table, the constraint it checks, its bytes.
    func forEachEntry(of row: StoredRow, key: UInt64, scratch: inout EntryScratch,
                      _ body: (_ table: Database, _ constraint: Int, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ check: EntryCheck) throws -> Void) rethrows {
        scratch.startRow(reference: key, tag: row.entityTag)
        func visit<M: IndexMaintainer>(_ maintainers: [M]) throws {
            for maintainer in maintainers {
                try maintainer.withEntry(of: row, scratch: &scratch) { try body(maintainer.table, maintainer.constraint, $0, $1, $2) }
            }
        }
        try visit(fetchIndexes)
        try visit(uniqueness)
        try visit(toOneIndexes)
    }
}

/// The secondary-table work of one save. A row's stale entries are removed when it is offered (``update(_:old:new:key:row:in:)``);
/// its fresh ones wait until every row's stale ones are gone (``putPending(in:violation:)``), so a value one row gives
/// up may be taken by another in the same save. Inserted rows' entries are put at once (``insert(_:row:key:position:in:violation:)``),
/// appended to their key's values: a new row's key sorts after every other.
///
/// A batch that changes many rows at once sorts its entries instead (``init(sortingEntries:)``): the stale entries
/// wait with the fresh ones, and both are applied table by table in key order through one cursor, which finds most
/// entries on the leaf page of the one before instead of descending from the root for each.
struct IndexUpdates {
    private var scratch = EntryScratch()
    private var other = EntryScratch()
    /// Entries to put: their table, check and constraint, the row they belong to (a position in the save), where
    /// their key and value lie in ``bytes``, and whether the row is new (its entry then usually goes after its key's
    /// values).
    private var pending: [Pending] = []
    private typealias Pending = (table: Database, check: EntryCheck, constraint: Int, row: Int, key: Range<Int>, value: Range<Int>, isNew: Bool)
    /// Entries to remove when they are sorted (``sortsEntries``): their table, whether the key goes with its only
    /// value, and where their key and value lie in ``bytes``.
    private var removals: [(table: Database, keyFree: Bool, key: Range<Int>, value: Range<Int>)] = []
    private var bytes = PendingBytes()
    /// Whether removals wait for ``putPending(in:violation:)`` and both are applied in key order.
    private let sortsEntries: Bool
    /// Whether new rows' unchecked entries wait for ``putPending(in:violation:)`` and go in key order
    /// (``insertSorted(_:row:key:position:in:violation:)``); always when sorting entries.
    private let sortsInserts: Bool
    /// Where new rows' unchecked entries of tables empty when the transaction began wait, sorted, to be appended at
    /// its end (a one-transaction batch insert).
    private let runs: AppendRuns?

    /// Updates that remove stale entries at once and put fresh ones in the order they came (a save); with
    /// `sortingEntries`, both wait and are applied table by table in key order (a batch). With `sortingInserts` (a
    /// save of many new rows), stale entries still go at once and changed rows' fresh ones in order, and new rows'
    /// entries no uniqueness constraint checks wait and go last, table by table in key order: nothing checks them,
    /// so when they go changes no answer. With `runs` (sorting entries), those of the tables the runs hold are kept
    /// there, sorted, instead of put.
    init(sortingEntries: Bool = false, sortingInserts: Bool = false, runs: AppendRuns? = nil) {
        sortsEntries = sortingEntries
        sortsInserts = sortingEntries || sortingInserts
        precondition(runs == nil || sortingEntries, "entries are kept in runs only when sorting entries")
        self.runs = runs
    }

    /// How many entries wait, and the bytes they hold: what the next updates of the same shape may
    /// ``reserve(entries:bytes:)``.
    var waiting: (entries: Int, bytes: Int) { (pending.count, bytes.count) }

    /// Makes room for `entries` waiting entries of `bytes` bytes in all, so keeping them allocates nothing more (a
    /// chunk of a batch, sized from the chunk before it).
    mutating func reserve(entries: Int, bytes: Int) {
        pending.reserveCapacity(entries)
        self.bytes.reserve(bytes)
    }

    /// Removes the entries of a row's old state (`old`) that its new state (`new`; `nil` for a deleted row) does
    /// not have, and keeps the new state's entries that the old one did not have for ``putPending(in:violation:)``.
    /// `row` is the row's position in the save, for the error a uniqueness violation gives.
    mutating func update(_ maintainers: EntityMaintainers, old: StoredRow, new: StoredRow?, key: UInt64, row: Int,
                         in transaction: any KeyValueTransaction) throws {
        try update(maintainers.fetchIndexes, old: old, new: new, key: key, row: row, transaction)
        try update(maintainers.uniqueness, old: old, new: new, key: key, row: row, transaction)
        try update(maintainers.toOneIndexes, old: old, new: new, key: key, row: row, transaction)
    }

    private mutating func update<M: IndexMaintainer>(_ maintainers: [M], old: StoredRow, new: StoredRow?, key: UInt64, row: Int,
                                                     _ transaction: any KeyValueTransaction) throws {
        for maintainer in maintainers {
            if let new, maintainer.keepsEntry(from: old, to: new) { continue }  // no value it reads changed: nothing to do
            scratch.startRow(reference: key, tag: old.entityTag)
            let oldCheck = maintainer.makeEntry(of: old, into: &scratch)
            var check: EntryCheck?
            if let new {
                other.startRow(reference: key, tag: new.entityTag)
                check = maintainer.makeEntry(of: new, into: &other)
                if oldCheck != nil, check != nil, scratch.sameEntry(as: other) { continue }
            }
            if let oldCheck, sortsEntries {
                let (keyRange, valueRange) = keep(scratch.key, scratch.value)
                removals.append((maintainer.table, oldCheck == .keyFree, keyRange, valueRange))
            } else if let oldCheck {
                if oldCheck == .keyFree {
                    // The key's only value: removed with its key.
                    _ = try scratch.key.withUnsafeBytes { try maintainer.table.delete(key: $0, in: transaction) }
                } else {
                    _ = try scratch.key.withUnsafeBytes { key in
                        try scratch.value.withUnsafeBytes { try maintainer.table.delete(key: key, value: $0, in: transaction) }
                    }
                }
            }
            if let check {
                let (keyRange, valueRange) = keep(other.key, other.value)
                pending.append((maintainer.table, check, maintainer.constraint, row, keyRange, valueRange, false))
            }
        }
    }

    /// Removes the pair `key` → `value` from the dupSort table `table` with the other stale entries, in key order
    /// (a link of a deleted object, say); only when sorting entries.
    mutating func removeSorted(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, from table: Database) {
        precondition(sortsEntries, "a removal waits for putPending only when entries are sorted")
        let (keyRange, valueRange) = keep(key, value)
        removals.append((table, false, keyRange, valueRange))
    }

    /// Copies `key` and `value` into ``bytes`` for an entry that waits, and returns where they lie.
    @inline(__always)
    private func keep(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> (key: Range<Int>, value: Range<Int>) {
        (bytes.append(key), bytes.append(value))
    }

    /// ``keep(_:_:)`` for an entry made in a scratch's arrays.
    @inline(__always)
    private func keep(_ key: [UInt8], _ value: [UInt8]) -> (key: Range<Int>, value: Range<Int>) {
        key.withUnsafeBytes { key in value.withUnsafeBytes { keep(key, $0) } }
    }

    /// Puts the pair `key` → `value` into `table` with the other fresh entries, in key order (a new row's link);
    /// only when sorting entries. The pair usually sorts after every other of its key (a duplicate value) or of its
    /// table (a key): it is appended when it does, put in place when it does not.
    mutating func putSorted(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, into table: Database, row: Int) {
        precondition(sortsInserts, "an entry waits for putPending only when entries are sorted")
        let (keyRange, valueRange) = keep(key, value)
        pending.append((table, .none, -1, row, keyRange, valueRange, true))
    }

    /// The entries of a new row, sorting entries or inserts (a batch insert, a save of many new rows): those a
    /// uniqueness constraint checks are put at once, so the rows after it see them; the others wait for
    /// ``putPending(in:violation:)``, which puts each table's in key order.
    mutating func insertSorted(_ maintainers: EntityMaintainers, row: StoredRow, key: UInt64, position: Int, in transaction: any KeyValueTransaction,
                               violation: (_ row: Int, _ constraint: Int) -> ManagedObjectContextError) throws {
        precondition(sortsInserts, "an entry waits for putPending only when entries are sorted")
        // The scratch is moved out for the walk, so the entries can be kept in `bytes` as they come; what stands in
        // for it meanwhile holds no memory (a new scratch would take three allocations a row).
        var entries = EntryScratch.standIn
        swap(&entries, &scratch)
        defer { swap(&entries, &scratch) }
        try maintainers.forEachEntry(of: row, key: key, scratch: &entries) { table, constraint, key, value, check in
            guard check == .none else {
                try runs?.release(table, in: transaction)
                return try Self.putChecked(value, forKey: key, check: check, in: table, transaction) { violation(position, constraint) }
            }
            putSorted(value, forKey: key, into: table, row: position)
        }
    }

    /// Keeps the entries of a new row for ``keepHeldInRuns()``, without the transaction: `maintainers` are ones whose
    /// entries no uniqueness constraint checks (a precondition), so none is put at once.
    mutating func keepEntries(_ maintainers: EntityMaintainers, row: StoredRow, key: UInt64, position: Int) {
        precondition(sortsInserts, "an entry waits for putPending only when entries are sorted")
        var entries = EntryScratch.standIn
        swap(&entries, &scratch)
        defer { swap(&entries, &scratch) }
        maintainers.forEachEntry(of: row, key: key, scratch: &entries) { table, _, key, value, check in
            precondition(check == .none, "an entry a uniqueness constraint checks is put at once, by the transaction's thread")
            putSorted(value, forKey: key, into: table, row: position)
        }
    }

    /// Without the transaction (a ``BulkLoadLane``'s part): sorts the waiting entries and moves those of each table
    /// the runs hold into them, leaving the rest — entries of tables not held, or that a run cannot keep — for
    /// ``putPending(in:violation:)`` on the transaction's thread. Only new rows' unchecked entries wait here.
    mutating func keepHeldInRuns() throws {
        guard let runs, !pending.isEmpty else { return }
        precondition(removals.isEmpty, "removals are applied on the transaction's thread")
        var left: [Pending] = []
        try bytes.withUnsafeBytes { bytes in
            let order = EntryOrder.positions(of: pending.map { ($0.table.handle, $0.key, $0.value) }, in: bytes)
            var start = 0
            while start < order.count {
                let table = pending[order[start]].table
                var end = start + 1
                while end < order.count && pending[order[end]].table.handle == table.handle { end += 1 }
                let run = order[start..<end]
                let kept = try runs.addHeld(table, count: run.count) { index in
                    let entry = pending[run[run.startIndex + index]]
                    return (UnsafeRawBufferPointer(rebasing: bytes[entry.key]), UnsafeRawBufferPointer(rebasing: bytes[entry.value]))
                }
                if !kept { left += run.map { pending[$0] } }
                start = end
            }
        }
        // What is left keeps its bytes where they lie; the rest are no longer read.
        pending = left
    }

    /// Puts the entries of a new row (the row under `key`, at `position` in the save) — sorting inserts, as
    /// ``insertSorted(_:row:key:position:in:violation:)`` does.
    mutating func insert(_ maintainers: EntityMaintainers, row: StoredRow, key: UInt64, position: Int, in transaction: any KeyValueTransaction,
                         violation: (_ row: Int, _ constraint: Int) -> ManagedObjectContextError) throws {
        if sortsInserts { return try insertSorted(maintainers, row: row, key: key, position: position, in: transaction, violation: violation) }
        try maintainers.forEachEntry(of: row, key: key, scratch: &scratch) { table, constraint, key, value, check in
            guard check == .none else {
                return try Self.putChecked(value, forKey: key, check: check, in: table, transaction) { violation(position, constraint) }
            }
            // A new row's key comes from the sequence, so its entry (row key first) sorts after every other row's
            // under the same index key: appended to that key's values without searching them. Out of order (a key
            // below one already stored), LMDB refuses and it is put in place.
            do {
                try table.put(value, forKey: key, in: transaction, options: .appendDuplicate)
            } catch LMDBError.keyExists {
                try table.put(value, forKey: key, in: transaction)
            }
        }
    }

    /// Puts the entries ``update(_:old:new:key:row:in:)`` kept, in the order they came (then, sorting inserts, new
    /// rows' entries in key order) — or, sorting entries, removes the stale ones and then puts these, each table's in
    /// key order.
    mutating func putPending(in transaction: any KeyValueTransaction, violation: (_ row: Int, _ constraint: Int) -> ManagedObjectContextError) throws {
        if sortsEntries {
            try applySorted(in: transaction, violation: violation)
        } else {
            try bytes.withUnsafeBytes { bytes in
                for entry in pending where !entry.isNew {
                    let key = UnsafeRawBufferPointer(rebasing: bytes[entry.key]), value = UnsafeRawBufferPointer(rebasing: bytes[entry.value])
                    if entry.check == .none {
                        try entry.table.put(value, forKey: key, in: transaction)
                    } else {
                        try Self.putChecked(value, forKey: key, check: entry.check, in: entry.table, transaction) { violation(entry.row, entry.constraint) }
                    }
                }
            }
            if sortsInserts {
                // New rows' unchecked entries; nothing waits to be removed (stale entries went at once).
                pending.removeAll { !$0.isNew }
                try applySorted(in: transaction, violation: violation)
            }
        }
        pending.removeAll(keepingCapacity: true)
        removals.removeAll(keepingCapacity: true)
        bytes.removeAll()
    }

    /// Every stale entry removed, then every fresh one put, table by table in key order (then value order) through
    /// one cursor per table. A checked entry (uniqueness) is put as ``putChecked(_:forKey:check:in:_:violation:)``
    /// puts it.
    private func applySorted(in transaction: any KeyValueTransaction, violation: (_ row: Int, _ constraint: Int) -> ManagedObjectContextError) throws {
        if let runs {
            for removal in removals { try runs.release(removal.table, in: transaction) }
        }
        try bytes.withUnsafeBytes { bytes in
            try Self.forEachTable(EntryOrder.positions(of: removals.map { ($0.table.handle, $0.key, $0.value) }, in: bytes), of: { removals[$0].table }, in: transaction) { table, cursor, order in
                let dupSort = table.options.contains(.dupSort)
                var at = order.startIndex
                while at < order.endIndex {
                    let removal = removals[order[at]]
                    let key = UnsafeRawBufferPointer(rebasing: bytes[removal.key])
                    guard dupSort && !removal.keyFree else {
                        if try cursor.seek(exactly: key) != nil { try cursor.deleteCurrent() }
                        at += 1
                        continue
                    }
                    // The run of removals under this key: when they are every value it holds (a range of an index
                    // deleted, a department's employees), the key goes with all of them in one delete.
                    var end = at + 1
                    while end < order.endIndex, !removals[order[end]].keyFree, Self.sameBytes(removals[order[end]].key, key, in: bytes) { end += 1 }
                    if end - at >= Self.wholeKeyRun,
                       try Self.removeWholeKey(key, values: order[at..<end].lazy.map { UnsafeRawBufferPointer(rebasing: bytes[removals[$0].value]) }, cursor) {
                        at = end
                        continue
                    }
                    for index in order[at..<end] {
                        let value = UnsafeRawBufferPointer(rebasing: bytes[removals[index].value])
                        if try cursor.seek(key: key, value: value) != nil { try cursor.deleteCurrent() }
                    }
                    at = end
                }
            }
            var run: [UInt8] = []
            try Self.forEachTable(EntryOrder.positions(of: pending.map { ($0.table.handle, $0.key, $0.value) }, in: bytes), of: { pending[$0].table }, in: transaction,
                                  unlessKept: { table, order in try keep(order, of: table, in: bytes, transaction) }) { table, cursor, order in
                let dupSort = table.options.contains(.dupSort), dupFixed = table.options.contains(.dupFixed)
                var at = order.startIndex
                while at < order.endIndex {
                    let entry = pending[order[at]]
                    let key = UnsafeRawBufferPointer(rebasing: bytes[entry.key]), value = UnsafeRawBufferPointer(rebasing: bytes[entry.value])
                    at += 1
                    if entry.check == .none && entry.isNew {
                        // New rows' values under one key of a table of fixed-size values (an index key many rows
                        // share, a to-one's destination, a to-many's owner): put as one run, the key found once.
                        var end = at
                        if dupFixed {
                            while end < order.endIndex, Self.continuesRun(pending[order[end]], key: key, in: bytes) { end += 1 }
                        }
                        if end > at {
                            // The values side by side (each as long as the table's values: DUPFIXED).
                            let size = value.count, count = end - at + 1
                            if run.count < count * size { run = [UInt8](repeating: 0, count: count * size) }
                            run.withUnsafeMutableBytes { run in
                                for (place, index) in order[(at - 1)..<end].enumerated() {
                                    run.baseAddress!.advanced(by: place * size).copyMemory(from: bytes.baseAddress! + pending[index].value.lowerBound, byteCount: size)
                                }
                            }
                            try run.withUnsafeBytes { try Self.putRun(UnsafeRawBufferPointer(rebasing: $0[..<(count * size)]), size: size, forKey: key, cursor) }
                            at = end
                            continue
                        }
                        // A new row's entry usually goes after its key's values (row keys come from a sequence), and
                        // a new row's link after every key of a table without duplicates: appended without
                        // searching, else put in place.
                        do {
                            try cursor.put(value, forKey: key, options: dupSort ? .appendDuplicate : .append)
                        } catch LMDBError.keyExists {
                            try cursor.put(value, forKey: key, options: [])
                        }
                    } else if entry.check == .none {
                        try cursor.put(value, forKey: key, options: [])
                    } else {
                        try Self.putChecked(value, forKey: key, check: entry.check, in: table, transaction) { violation(entry.row, entry.constraint) }
                    }
                }
            }
        }
    }

    /// Keeps the fresh entries of `table` at `order` (its run of the sorted entries) in ``runs`` when it holds the
    /// table, they are all new rows' unchecked ones and the runs can keep them; otherwise lets the runs go of the
    /// table (it is written directly from now on) and returns `false`.
    private func keep(_ order: ArraySlice<Int>, of table: Database, in bytes: UnsafeRawBufferPointer, _ transaction: any KeyValueTransaction) throws -> Bool {
        guard let runs else { return false }
        guard try runs.holds(table, in: transaction), order.allSatisfy({ pending[$0].check == .none && pending[$0].isNew }) else {
            try runs.release(table, in: transaction)
            return false
        }
        return try runs.add(table, count: order.count, in: transaction) { index in
            let entry = pending[order[order.startIndex + index]]
            return (UnsafeRawBufferPointer(rebasing: bytes[entry.key]), UnsafeRawBufferPointer(rebasing: bytes[entry.value]))
        }
    }

    /// The fewest removals under one key of a dupSort table for which ``removeWholeKey(_:values:_:)`` is tried
    /// first: below it, checking costs about what it could save.
    static let wholeKeyRun = 8

    /// Deletes `key` with its values in one call when `values` (ascending, in the table's order of values) are
    /// exactly the values it holds — checked by counting them and reading them side by side, a page at a time —
    /// and returns whether it did; otherwise deletes nothing.
    private static func removeWholeKey(_ key: UnsafeRawBufferPointer, values: some Collection<UnsafeRawBufferPointer>, _ cursor: any KeyValueCursor) throws -> Bool {
        guard try cursor.seek(exactly: key) != nil, try cursor.duplicateCount() == values.count else { return false }
        var expected = values.makeIterator()
        var matches = true
        let only = KeyRange.Bound.inclusive(Array(key))
        try cursor.forEachValueRun(in: KeyRange(lower: only, upper: only)) { _, held, width, _ in
            for start in stride(from: 0, to: held.count, by: width) {
                guard let value = expected.next(), value.count == width,
                      memcmp(value.baseAddress!, held.baseAddress! + start, width) == 0 else {
                    matches = false
                    return false
                }
            }
            return true
        }
        guard matches, expected.next() == nil, try cursor.seek(exactly: key) != nil else { return false }
        try cursor.deleteCurrentKey()
        return true
    }

    /// Whether the bytes at `range` of `bytes` are `key`'s.
    @inline(__always)
    private static func sameBytes(_ range: Range<Int>, _ key: UnsafeRawBufferPointer, in bytes: UnsafeRawBufferPointer) -> Bool {
        range.count == key.count && memcmp(bytes.baseAddress! + range.lowerBound, key.baseAddress!, key.count) == 0
    }

    /// Puts a run of new rows' values (`size` bytes each, ascending) under `key` in one call, after the key's other
    /// values; when one of them sorts below a value already there, LMDB refuses the run there and the rest go in place
    /// value by value (those already put are put again as they are, which changes nothing).
    private static func putRun(_ values: UnsafeRawBufferPointer, size: Int, forKey key: UnsafeRawBufferPointer, _ cursor: any KeyValueCursor) throws {
        do {
            try cursor.putDuplicates(values, size: size, forKey: key, options: .appendDuplicate)
        } catch LMDBError.keyExists {
            for start in stride(from: 0, to: values.count, by: size) {
                try cursor.put(UnsafeRawBufferPointer(rebasing: values[start..<start + size]), forKey: key, options: [])
            }
        }
    }

    /// Whether `entry` joins a run of new rows' values under `key` (``applySorted(in:violation:)``): unchecked, of a
    /// new row, under the same key bytes.
    @inline(__always)
    private static func continuesRun(_ entry: Pending, key: UnsafeRawBufferPointer, in bytes: UnsafeRawBufferPointer) -> Bool {
        entry.check == .none && entry.isNew && sameBytes(entry.key, key, in: bytes)
    }

    /// Calls `body` once per table with a cursor on it and the run of `order` (positions, sorted by table) whose
    /// entries are that table's — unless `unlessKept`, given the table and its run first, returns `true` (it kept
    /// them for later).
    private static func forEachTable(_ order: [Int], of table: (Int) -> Database, in transaction: any KeyValueTransaction,
                                     unlessKept: (Database, ArraySlice<Int>) throws -> Bool = { _, _ in false },
                                     _ body: (Database, any KeyValueCursor, ArraySlice<Int>) throws -> Void) throws {
        var start = 0
        while start < order.count {
            let current = table(order[start])
            var end = start + 1
            while end < order.count && table(order[end]).handle == current.handle { end += 1 }
            if try !unlessKept(current, order[start..<end]) {
                try current.withCursor(in: transaction) { try body(current, $0, order[start..<end]) }
            }
            start = end
        }
    }

    /// Puts an entry a uniqueness constraint checks: a `unique/…` key that must be free, or a value of an index key
    /// that must hold no other row's (the row's own entry under that key was removed before, or is the same and not
    /// put again). Throws `violation()` when it is taken.
    private static func putChecked(_ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, check: EntryCheck, in table: Database,
                                   _ transaction: any KeyValueTransaction, violation: () -> ManagedObjectContextError) throws {
        if check == .noOtherRow {
            guard try table.withValue(forKey: key, in: transaction, { _ in true }) == nil else { throw violation() }
            return try table.put(value, forKey: key, in: transaction)
        }
        do {
            try table.put(value, forKey: key, in: transaction, options: .noOverwrite)
        } catch LMDBError.keyExists {
            throw violation()
        }
    }
}
