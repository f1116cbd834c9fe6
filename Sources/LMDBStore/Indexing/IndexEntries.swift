import Foundation
import ObjectGraph

/// One entry a row contributes to a secondary table: in `index/…` and `toone/…` tables (``DatabaseOptions/dupSort``)
/// one of the key's values, in `unique/…` tables the key's only value. Entries of one entity are equal when their
/// table, key and value are (the table's position names it).
struct IndexEntry: Equatable {
    let database: String
    /// The position of ``database`` in its entity's ``StoreLayout/EntityLayout/secondaryTables``.
    let table: Int
    let key: [UInt8]
    let value: [UInt8]

    /// Whether the entry is one value among the key's duplicates (removed by key and value, not by key).
    var isDuplicate: Bool { !database.hasPrefix("unique/") }

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

    func entries(for row: StoredRow, key: UInt64, entity: StoreLayout.EntityLayout) -> (indexes: [IndexEntry], uniques: [IndexEntry]) {
        var indexes: [IndexEntry] = []
        indexes.reserveCapacity(entity.indexTables.count + entity.toOneTables.count)
        var uniques: [IndexEntry] = []
        if !entity.uniqueTables.isEmpty { uniques.reserveCapacity(entity.uniqueTables.count) }
        // Every entry's value: the row key, then the entity tag (made once per row, shared by the entries).
        var rowKey = LMDBIncrementalStore.keyBytes(key)
        rowKey.append(UInt8(row.entityTag >> 8))
        rowKey.append(UInt8(row.entityTag & 0xFF))
        let entryValue = rowKey
        for (position, (_, index)) in entity.indexes.enumerated() {
            let fields = entity.indexFields[position]
            func element(_ offset: Int) -> [UInt8] {
                let element = index.elements[offset]
                var bytes = elementBytes(fields[offset], row, folding: element.collation)
                if !element.isAscending { bytes = bytes.map { ~$0 } }
                return bytes
            }
            // A one-element key that fits is its element's bytes as they are.
            let key: [UInt8]
            if index.elements.count == 1 {
                let bytes = element(0)
                key = bytes.count > Self.maxTupleBytes ? Self.fit([bytes]) : bytes
            } else {
                key = Self.fit(index.elements.indices.map(element))
            }
            indexes.append(IndexEntry(database: entity.indexTables[position], table: position, key: key, value: entryValue))
        }
        for (position, fields) in entity.uniqueFields.enumerated() {
            if fields.contains(where: { value($0, row) == nil }) { continue }  // NULLs never clash
            let elements = fields.map { elementBytes($0, row) }
            uniques.append(IndexEntry(database: entity.uniqueTables[position], table: entity.indexTables.count + position, key: Self.fit(elements), value: entryValue))
        }
        for (position, field) in entity.toOneFields.enumerated() {
            guard field >= 0, let reference = row.reference(field) else { continue }
            indexes.append(IndexEntry(database: entity.toOneTables[position], table: entity.indexTables.count + entity.uniqueTables.count + position,
                                      key: LMDBIncrementalStore.keyBytes(reference.key), value: entryValue))
        }
        return (indexes, uniques)
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

    private func elementBytes(_ field: Int, _ row: StoredRow, folding collation: FetchIndexElementDescription.Collation = .binary) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)  // a number's or a date's element (9 bytes) without growing; strings grow once
        TupleEncoding.append(Self.folded(value(field, row), collation), to: &bytes)
        return bytes
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
