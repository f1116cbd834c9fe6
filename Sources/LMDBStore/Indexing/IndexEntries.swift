import Foundation
import ObjectGraph

/// One entry a row contributes to a secondary table: in `index/…` and `toone/…` tables (``DatabaseOptions/dupSort``)
/// one of the key's values, in `unique/…` tables the key's only value. Entries of one entity are equal when their
/// table, key and value are (the table's position names it).
struct IndexEntry: Equatable {
    /// How an entry is put, and what it must not meet.
    enum Kind {
        /// One of the key's values (`index/…`, `toone/…`).
        case value
        /// The key's only value, in a `unique/…` table: the key must be free.
        case uniqueKey
        /// One of the key's values in an index that keeps a uniqueness constraint
        /// (``StoreLayout/EntityLayout/constraintOfIndex``), for a row whose constrained values are not NULL: the key
        /// must hold no other row's value.
        case uniqueValue
    }

    let database: String
    /// The position of ``database`` in its entity's ``StoreLayout/EntityLayout/secondaryTables``.
    let table: Int
    let kind: Kind
    let key: [UInt8]
    let value: [UInt8]

    /// Whether the entry is one value among the key's duplicates (removed by key and value, not by key).
    var isDuplicate: Bool { kind != .uniqueKey }

    static func == (lhs: IndexEntry, rhs: IndexEntry) -> Bool {
        lhs.table == rhs.table && lhs.key == rhs.key && lhs.value == rhs.value
    }
}

/// Computes the secondary entries of a row (fetch indexes, uniqueness constraints, to-one indexes). Saving a row
/// puts the entries of its new state and deletes those of its old state that changed; `verify` recomputes them
/// from every row.
struct IndexEntries {
    /// The longest index tuple kept whole: LMDB's 511-byte key limit less 8 (format 1 ended each index key with
    /// the row key; format 2 keeps the same cut so that long values are cut where they always were).
    static let maxTupleBytes = 511 - 8
    /// The size of an entry's value that is only the row's reference: the row key (8 bytes), the entity tag (2).
    static let referenceSize = 10

    /// The bytes a covering index's value gives a stored attribute of `type` (one of fixed size): its key element's
    /// tag and body, NULL (the tag 0x00) padded with zeros to the same width — so every value of the index has one
    /// size, and each stored value one offset.
    static func storedWidth(_ type: AttributeType) -> Int {
        switch type {
        case .boolean: 2
        case .uuid: 17
        default: 9
        }
    }

    /// The entries of `row` (the row of `key`): `uniques` holds those a uniqueness constraint checks.
    func entries(for row: StoredRow, key: UInt64, entity: StoreLayout.EntityLayout) -> (indexes: [IndexEntry], uniques: [IndexEntry]) {
        var indexes: [IndexEntry] = []
        indexes.reserveCapacity(entity.indexTables.count + entity.toOneTables.count)
        var uniques: [IndexEntry] = []
        if !entity.uniqueTables.isEmpty { uniques.reserveCapacity(entity.uniqueTables.count) }
        var entryValue: [UInt8] = []
        var scratch = Scratch()
        forEachEntry(of: row, key: key, entity: entity, scratch: &scratch) { table, kind, key, value in
            // Every entry's value is the row's reference, made once — but a covering index's, which also holds values.
            let covering = value.count != Self.referenceSize
            if entryValue.isEmpty && !covering { entryValue = Array(value) }
            let entry = IndexEntry(database: entity.secondaryTables[table], table: table, kind: kind, key: Array(key),
                                   value: covering ? Array(value) : entryValue)
            if kind == .value { indexes.append(entry) } else { uniques.append(entry) }
        }
        return (indexes, uniques)
    }

    /// Bytes reused from one entry to the next (and from row to row, when the caller keeps them): the entries of a
    /// row are made in it one at a time, without an allocation per entry.
    struct Scratch {
        fileprivate var key: [UInt8] = []
        /// A covering index entry's value: the reference, then the stored attributes.
        fileprivate var value: [UInt8] = []
        /// Where each element of ``key`` ends, in the first ``boundCount`` positions (overwritten, not emptied).
        fileprivate var bounds: [Int] = Array(repeating: 0, count: 8)
        fileprivate var boundCount = 0

        init() {
            key.reserveCapacity(64)
        }

        /// Starts a new key.
        @inline(__always)
        fileprivate mutating func reset() {
            key.removeAll(keepingCapacity: true)
            boundCount = 0
        }

        /// Records that an element of the key ends here.
        @inline(__always)
        fileprivate mutating func endElement() {
            if boundCount == bounds.count { bounds.append(0) }
            bounds[boundCount] = key.count
            boundCount += 1
        }
    }

    /// Calls `body` with each secondary entry of `row` (the row of `key`): its table (the position in the entity's
    /// ``StoreLayout/EntityLayout/secondaryTables``), its kind, its key and its value (the row key and entity tag,
    /// then — for a covering index — the attributes it stores, each encoded as a key element).
    /// The bytes live only during the call; fetch indexes come first, then the uniqueness constraints no index
    /// keeps, then to-one indexes. No entry checks a constraint when a constrained value is NULL: NULLs never clash.
    func forEachEntry(of row: StoredRow, key: UInt64, entity: StoreLayout.EntityLayout, scratch: inout Scratch,
                      _ body: (_ table: Int, _ kind: IndexEntry.Kind, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Void) rethrows {
        // Every entry's value: the row key, then the entity tag.
        try withUnsafeBytes(of: (key.bigEndian, row.entityTag.bigEndian)) { entryValue in
            // By position in the layout's precomputed arrays: no index description is copied per row.
            for position in entity.indexFields.indices {
                let fields = entity.indexFields[position], elements = entity.indexElements[position]
                scratch.reset()
                for offset in fields.indices {
                    let start = scratch.key.count
                    TupleEncoding.append(Self.folded(value(fields[offset], row), elements[offset].collation), to: &scratch.key)
                    if !elements[offset].isAscending {
                        for byte in start..<scratch.key.count { scratch.key[byte] = ~scratch.key[byte] }
                    }
                    scratch.endElement()
                }
                if scratch.key.count > Self.maxTupleBytes { Self.cut(&scratch) }
                let constraint = entity.constraintOfIndex[position]
                let kind: IndexEntry.Kind = constraint >= 0 && !entity.uniqueFields[constraint].contains { row.fields[$0] == nil } ? .uniqueValue : .value
                let stored = entity.indexStoredFields[position]
                if stored.isEmpty {
                    try scratch.key.withUnsafeBytes { try body(position, kind, $0, entryValue) }
                } else {
                    // A covering index: the reference, then each stored attribute as a key element encodes it.
                    scratch.value.removeAll(keepingCapacity: true)
                    scratch.value.append(contentsOf: entryValue)
                    for (field, width) in zip(stored, entity.indexStoredWidths[position]) {
                        let start = scratch.value.count
                        TupleEncoding.append(value(field, row), to: &scratch.value)
                        while scratch.value.count < start + width { scratch.value.append(0) }
                    }
                    try scratch.key.withUnsafeBytes { key in try scratch.value.withUnsafeBytes { try body(position, kind, key, $0) } }
                }
            }
            for (position, fields) in entity.uniqueFields.enumerated() where entity.indexOfConstraint[position] < 0 {
                if fields.contains(where: { $0 < 0 || row.fields[$0] == nil }) { continue }  // NULLs never clash
                scratch.reset()
                for field in fields {
                    TupleEncoding.append(value(field, row), to: &scratch.key)
                    scratch.endElement()
                }
                if scratch.key.count > Self.maxTupleBytes { Self.cut(&scratch) }
                try scratch.key.withUnsafeBytes { try body(entity.indexTables.count + position, .uniqueKey, $0, entryValue) }
            }
            for (position, field) in entity.toOneFields.enumerated() {
                guard field >= 0, let reference = row.reference(field) else { continue }
                try withUnsafeBytes(of: reference.key.bigEndian) {
                    try body(entity.indexTables.count + entity.uniqueTables.count + position, .value, $0, entryValue)
                }
            }
        }
    }

    /// Cuts the elements in `scratch.key` (ending at `scratch.bounds`) to fit, as ``fit(_:)`` does.
    private static func cut(_ scratch: inout Scratch) {
        var start = 0
        let elements = scratch.bounds[..<scratch.boundCount].map { end in
            defer { start = end }
            return Array(scratch.key[start..<end])
        }
        scratch.key = fit(elements)
    }

    /// The value an index element sees in field `field` (-1: none): an attribute, or a to-one as the integer key of
    /// its destination.
    private func value(_ field: Int, _ row: StoredRow) -> AttributeValue? {
        guard field >= 0 else { return nil }
        switch row.fields[field] {
        case nil: return nil
        case .attribute(let value)?: return value
        case .reference(let reference)?: return .integer(Int64(bitPattern: reference.key))
        }
    }

    /// A string as a folded index holds it (case and/or diacritics folded as `[c]`/`[d]` comparisons fold them,
    /// ``StringFolding``); other values as they are.
    static func folded(_ value: AttributeValue?, _ collation: FetchIndexElementDescription.Collation) -> AttributeValue? {
        guard case .string(let text)? = value else { return value }
        switch collation {
        case .caseInsensitive: return .string(StringFolding.fold(text, caseInsensitive: true, diacriticInsensitive: false))
        case .caseAndDiacriticInsensitive: return .string(StringFolding.fold(text, caseInsensitive: true, diacriticInsensitive: true))
        case .binary, .rTree: return value
        }
    }

    /// How many leading bytes a one-element key keeps of a value too long for it (``fit(_:)``): keys that long or
    /// longer may sort among each other by digest, not by value.
    static let cutElementPrefix = maxTupleBytes - 10

    /// Joins elements into a key of at most ``maxTupleBytes`` bytes: when they are too long, each element
    /// longer than its share is cut to that share and ended with 0x00 0x02 and an 8-byte FNV-1a digest of the whole
    /// element, so equal values still give equal keys and the order of the cut prefixes is kept.
    static func fit(_ elements: [[UInt8]]) -> [UInt8] {
        let total = elements.reduce(0) { $0 + $1.count }
        guard total > maxTupleBytes else { return elements.flatMap { $0 } }
        let share = maxTupleBytes / elements.count
        var key: [UInt8] = []
        for element in elements {
            guard element.count > share else { key += element; continue }
            let kept = max(1, share - 10)
            key += element.prefix(kept)
            key += [0x00, 0x02]
            key += ElementDigest.digest(element).prefix(8)
        }
        return Array(key.prefix(maxTupleBytes))
    }
}

/// A short digest for cut index elements (FNV-1a 64 over the whole element, big-endian).
enum ElementDigest {
    static func digest(_ bytes: [UInt8]) -> [UInt8] {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return LMDBIncrementalStore.keyBytes(hash)
    }
}
