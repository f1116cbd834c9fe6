import Foundation
import ObjectGraph

/// What every kind of secondary entry shares (`Docs/FORMAT.md`): the room a key has, how long values are cut to fit
/// it, how folded strings are kept, and the size of an entry's value. Each kind's entries are made by its
/// ``IndexMaintainer``.
enum IndexEntries {
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

    /// The value an index element sees in field `field` (-1: none): an attribute, or a to-one as the integer key of
    /// its destination.
    @inline(__always)
    static func element(_ field: Int, of row: StoredRow) -> AttributeValue? {
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
