import Foundation

/// The order a batch's entries are put in: LMDB's own — by table, then key bytes, then value bytes (`memcmp`, the
/// shorter first when one is a prefix of the other), which lets most entries be appended or found on the leaf page
/// of the one before.
///
/// A radix sort finds it: each entry becomes a 32-byte place holding its table, the first sixteen bytes of its key,
/// the first eight of its value and both lengths (capped), and the places are scattered by one byte at a time from
/// the least significant, skipping the bytes all places share (a batch's row keys differ in two or three bytes,
/// its tables in one). Keys longer than sixteen bytes or values longer than eight that tie on those prefixes are
/// then put in order by comparing their bytes — rare: an index key is its values' encoding, a value a row
/// reference whose first eight bytes are the row's key.
enum EntryOrder {
    /// The positions of `entries` in table order, then key order, then value order; their keys and values lie in
    /// `bytes`. Tables are told apart by their handle's low sixteen bits; only grouping them matters.
    static func positions(of entries: [(table: UInt32, key: Range<Int>, value: Range<Int>)], in bytes: UnsafeRawBufferPointer) -> [Int] {
        var places: [Place] = []
        places.reserveCapacity(entries.count)
        for (index, entry) in entries.enumerated() {
            places.append(Place(table: entry.table, index: index, key: entry.key, value: entry.value, bytes: bytes))
        }
        if places.count < 2 { return places.map(\.index) }
        radixSort(&places)
        fixTies(&places, entries, bytes)
        return places.map(\.index)
    }

    /// One entry's sort key: the table in the top sixteen bits of `packed`, then the key's length (up to 17: more
    /// than the sixteen bytes held), the value's (up to 9), and the entry's position in the low 32 bits.
    private struct Place {
        var packed: UInt64
        var key0: UInt64
        var key1: UInt64
        var value: UInt64

        init(table: UInt32, index: Int, key: Range<Int>, value: Range<Int>, bytes: UnsafeRawBufferPointer) {
            packed = UInt64(table & 0xFFFF) << 48 | UInt64(min(key.count, 17)) << 40 | UInt64(min(value.count, 9)) << 32 | UInt64(UInt32(index))
            key0 = Self.prefix(bytes, key, from: 0)
            key1 = Self.prefix(bytes, key, from: 8)
            self.value = Self.prefix(bytes, value, from: 0)
        }

        var index: Int { Int(packed & 0xFFFF_FFFF) }
        var keyIsLong: Bool { packed >> 40 & 0xFF == 17 }
        var valueIsLong: Bool { packed >> 32 & 0xFF == 9 }

        /// One of the place's words, as ``EntryOrder/digits`` numbers them: 0 the value's first eight bytes,
        /// 1 `packed`, 2 the key's second eight bytes, 3 its first eight.
        @inline(__always)
        func word(_ word: Int) -> UInt64 {
            switch word {
            case 0: value
            case 1: packed
            case 2: key1
            default: key0
            }
        }

        /// Eight bytes of `range` from `start`, big-endian, zeros past its end.
        private static func prefix(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, from start: Int) -> UInt64 {
            if range.count >= start + 8 {
                return UnsafeRawBufferPointer(rebasing: bytes[range.lowerBound + start..<range.lowerBound + start + 8]).loadUnaligned(as: UInt64.self).bigEndian
            }
            var prefix: UInt64 = 0
            for offset in start..<start + 8 {
                prefix <<= 8
                if offset < range.count { prefix |= UInt64(bytes[range.lowerBound + offset]) }
            }
            return prefix
        }
    }

    /// The sort key's bytes within one table, least significant first, as (word, shift): the value's length,
    /// the value's eight bytes, the key's length, the key's sixteen bytes (second eight first). The first nine are
    /// the value's.
    private static let digits: [(word: Int, shift: UInt64)] =
        [(1, 32)] + [(0, 0), (0, 8), (0, 16), (0, 24), (0, 32), (0, 40), (0, 48), (0, 56)]
        + [(1, 40)] + [(2, 0), (2, 8), (2, 16), (2, 24), (2, 32), (2, 40), (2, 48), (2, 56)]
        + [(3, 0), (3, 8), (3, 16), (3, 24), (3, 32), (3, 40), (3, 48), (3, 56)]
    private static let valueDigits = 9

    /// Sorts `places` by table (a stable pass on the table's bits, so each table's places keep the order they
    /// came in), then each table's run by key and value, one byte at a time from the least significant; a byte the
    /// whole run shares is skipped, and so are the value's bytes when the run's values came in ascending order (a
    /// new row's index entries: its reference is the batch's next key).
    private static func radixSort(_ places: inout [Place]) {
        var other = places
        places.withUnsafeMutableBufferPointer { first in
            other.withUnsafeMutableBufferPointer { second in
                var counts = [Int](repeating: 0, count: 65_536 > first.count * 4 ? 256 : 65_536)
                counts.withUnsafeMutableBufferPointer { counts in
                    // By table: two bytes, or one pass over sixteen bits for a large batch.
                    var sortedIsSecond = false
                    if counts.count == 65_536 {
                        sortedIsSecond = scatter(first, into: second, counts: counts, key: { Int(truncatingIfNeeded: $0.packed >> 48) })
                    } else {
                        for shift in [UInt64(48), 56] {
                            let (source, target) = sortedIsSecond ? (second, first) : (first, second)
                            if scatter(source, into: target, counts: counts,
                                       key: { Int(truncatingIfNeeded: $0.packed >> shift & 0xFF) }) {
                                sortedIsSecond.toggle()
                            }
                        }
                    }
                    if sortedIsSecond { _ = first.update(fromContentsOf: second) }
                }
                var start = 0
                while start < first.count {
                    let table = first[start].packed >> 48
                    var end = start + 1
                    while end < first.count && first[end].packed >> 48 == table { end += 1 }
                    sortRun(UnsafeMutableBufferPointer(rebasing: first[start..<end]), spare: UnsafeMutableBufferPointer(rebasing: second[start..<end]))
                    start = end
                }
            }
        }
    }

    /// Sorts one table's places (in `run`, with `spare` as room of the same size) by key, then value.
    private static func sortRun(_ run: UnsafeMutableBufferPointer<Place>, spare: UnsafeMutableBufferPointer<Place>) {
        guard run.count > 1 else { return }
        // Every byte's histogram in one pass, and whether the values came in ascending order.
        var counts = [Int](repeating: 0, count: digits.count * 256)
        var valuesAscend = true
        counts.withUnsafeMutableBufferPointer { counts in
            let base = counts.baseAddress!
            for (index, place) in run.enumerated() {
                if index > 0 && place.value <= run[index - 1].value { valuesAscend = false }
                base[Int(truncatingIfNeeded: place.packed >> 32 & 0xFF)] &+= 1
                base[9 &* 256 &+ Int(truncatingIfNeeded: place.packed >> 40 & 0xFF)] &+= 1
                for byte in 0..<8 {
                    base[(1 &+ byte) &* 256 &+ Int(truncatingIfNeeded: place.value >> UInt64(8 &* byte) & 0xFF)] &+= 1
                    base[(10 &+ byte) &* 256 &+ Int(truncatingIfNeeded: place.key1 >> UInt64(8 &* byte) & 0xFF)] &+= 1
                    base[(18 &+ byte) &* 256 &+ Int(truncatingIfNeeded: place.key0 >> UInt64(8 &* byte) & 0xFF)] &+= 1
                }
            }
        }
        var sortedIsSpare = false
        counts.withUnsafeMutableBufferPointer { counts in
            for (digit, (word, shift)) in digits.enumerated() where !(valuesAscend && digit < valueDigits) {
                let (source, target) = sortedIsSpare ? (spare, run) : (run, spare)
                if scatter(source, into: target, counts: UnsafeMutableBufferPointer(rebasing: counts[digit * 256..<(digit + 1) * 256]), counted: true,
                           key: { Int(truncatingIfNeeded: $0.word(word) >> shift & 0xFF) }) {
                    sortedIsSpare.toggle()
                }
            }
        }
        if sortedIsSpare { _ = run.update(fromContentsOf: spare) }
    }

    /// One stable counting pass: `source` scattered into `target` by `key` (below `counts.count`), with `counts`
    /// its histogram when `counted`. Returns false, moving nothing, when every place has the same key.
    @inline(__always)
    private static func scatter(_ source: UnsafeMutableBufferPointer<Place>, into target: UnsafeMutableBufferPointer<Place>,
                                counts: UnsafeMutableBufferPointer<Int>, counted: Bool = false, key: (Place) -> Int) -> Bool {
        if !counted {
            counts.update(repeating: 0)
            for place in source { counts[key(place)] &+= 1 }
        }
        if counts.contains(source.count) { return false }
        var offset = 0
        for bucket in counts.indices {
            let size = counts[bucket]
            counts[bucket] = offset
            offset &+= size
        }
        let slots = counts.baseAddress!, into = target.baseAddress!
        for place in source {
            let bucket = key(place)
            into[slots[bucket]] = place
            slots[bucket] &+= 1
        }
        return true
    }

    /// Puts in byte order the runs of places whose prefixes tie where the whole key or value is longer.
    private static func fixTies(_ places: inout [Place], _ entries: [(table: UInt32, key: Range<Int>, value: Range<Int>)], _ bytes: UnsafeRawBufferPointer) {
        func precedes(_ lhs: Place, _ rhs: Place) -> Bool {
            let left = entries[lhs.index], right = entries[rhs.index]
            let byKey = compare(UnsafeRawBufferPointer(rebasing: bytes[left.key]), UnsafeRawBufferPointer(rebasing: bytes[right.key]))
            if byKey != 0 { return byKey < 0 }
            return compare(UnsafeRawBufferPointer(rebasing: bytes[left.value]), UnsafeRawBufferPointer(rebasing: bytes[right.value])) < 0
        }
        var start = 0
        while start < places.count {
            let first = places[start]
            var end = start + 1
            var long = first.keyIsLong || first.valueIsLong
            // A run of places equal in every sorted byte but the value's: only their whole bytes can order them.
            while end < places.count, places[end].packed >> 40 == first.packed >> 40, places[end].key0 == first.key0, places[end].key1 == first.key1,
                  first.keyIsLong || (places[end].packed >> 32 == first.packed >> 32 && places[end].value == first.value) {
                long = long || places[end].keyIsLong || places[end].valueIsLong
                end += 1
            }
            if end - start > 1 && long { places[start..<end].sort(by: precedes) }
            start = end
        }
    }

    /// The bytes' order (`memcmp`, then length): LMDB's default key order, and its order of a dupSort key's values.
    static func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
        let common = min(lhs.count, rhs.count)
        if common > 0 {
            let byBytes = memcmp(lhs.baseAddress!, rhs.baseAddress!, common)
            if byBytes != 0 { return Int(byBytes) }
        }
        return lhs.count - rhs.count
    }
}
