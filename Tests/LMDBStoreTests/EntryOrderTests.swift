import Foundation
@testable import LMDBStore
import Testing

/// A batch puts its entries in LMDB's order so that most are appended or found beside the one before; a wrong
/// order still writes every entry (each falls back to a put in place), so only this comparison catches it.
@Suite("The order a batch's entries are put in")
struct EntryOrderTests {
    /// LMDB's order: table, then key bytes, then value bytes, each `memcmp` and the shorter first on a tie.
    private static func reference(_ entries: [(table: UInt32, key: Range<Int>, value: Range<Int>)], _ bytes: [UInt8]) -> [Int] {
        func less(_ lhs: ArraySlice<UInt8>, _ rhs: ArraySlice<UInt8>) -> Bool? {
            lhs.elementsEqual(rhs) ? nil : lhs.lexicographicallyPrecedes(rhs)
        }
        return entries.indices.sorted { a, b in
            let lhs = entries[a], rhs = entries[b]
            if lhs.table != rhs.table { return lhs.table < rhs.table }
            if let byKey = less(bytes[lhs.key], bytes[rhs.key]) { return byKey }
            if let byValue = less(bytes[lhs.value], bytes[rhs.value]) { return byValue }
            return a < b
        }
    }

    @Test("keys and values of every length, sharing prefixes, come out in LMDB's order", arguments: [1, 2, 3, 100, 5_000])
    func matchesTheBytesOrder(count: Int) {
        var seed = UInt64(count)
        func next(_ bound: Int) -> Int {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(seed >> 33) % bound
        }
        var bytes: [UInt8] = []
        var entries: [(table: UInt32, key: Range<Int>, value: Range<Int>)] = []
        // Few byte values and shared stems, so prefixes tie often, across the 8- and 16-byte boundaries.
        let stems: [[UInt8]] = [[], [7], Array(repeating: 1, count: 8), Array(repeating: 2, count: 16), Array(repeating: 2, count: 17)]
        for _ in 0..<count {
            let table = UInt32([3, 9, 300][next(3)])
            let keyStart = bytes.count
            bytes += stems[next(stems.count)]
            for _ in 0..<next(10) { bytes.append(UInt8(next(3))) }
            let valueStart = bytes.count
            bytes += stems[next(3)]
            for _ in 0..<next(12) { bytes.append(UInt8(next(2) * 200)) }
            entries.append((table, keyStart..<valueStart, valueStart..<bytes.count))
        }
        let order = bytes.withUnsafeBytes { EntryOrder.positions(of: entries, in: $0) }
        let expected = Self.reference(entries, bytes)
        #expect(order.count == entries.count && Set(order).count == entries.count)
        // Equal entries may come in either order; compare what each position holds.
        func same(_ lhs: Int, _ rhs: Int) -> Bool {
            entries[lhs].table == entries[rhs].table && bytes[entries[lhs].key] == bytes[entries[rhs].key] && bytes[entries[lhs].value] == bytes[entries[rhs].value]
        }
        let mismatch = order.indices.first { !same(order[$0], expected[$0]) }
        #expect(mismatch == nil, "first out of order at \(mismatch ?? -1)")
    }

    @Test("row references under a handful of keys, the shape of an index, sort by key then row, whichever order the rows came in",
          arguments: [false, true])
    func indexShape(rowsAscend: Bool) {
        var bytes: [UInt8] = []
        var entries: [(table: UInt32, key: Range<Int>, value: Range<Int>)] = []
        for row in rowsAscend ? Array(0..<3_000) : (0..<3_000).reversed() {
            let keyStart = bytes.count
            withUnsafeBytes(of: UInt64(row % 7).bigEndian) { bytes += $0 }
            let valueStart = bytes.count
            withUnsafeBytes(of: (UInt64(row).bigEndian, UInt16(4).bigEndian)) { bytes += $0 }
            entries.append((2, keyStart..<valueStart, valueStart..<bytes.count))
        }
        let order = bytes.withUnsafeBytes { EntryOrder.positions(of: entries, in: $0) }
        #expect(order == Self.reference(entries, bytes))
    }
}
