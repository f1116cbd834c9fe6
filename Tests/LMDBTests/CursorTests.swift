import LMDB
import TestSupport
import Testing

@Suite struct CursorTests {
    let directory = TemporaryDirectory()

    @Test func keysComeBackInBytewiseOrder() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        var generator = SplitMix64(seed: 42)
        var keys = Set<[UInt8]>()
        while keys.count < 2000 {
            let length = Int(generator.next() % 12) + 1
            keys.insert((0..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        }
        try environment.write { txn throws in for key in keys { try db.put([], forKey: key, in: txn) } }
        let walked: [[UInt8]] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                var entry = try cursor.first()
                while let current = entry { seen.append(current.keyBytes); entry = try cursor.next() }
                return seen
            }
        }
        #expect(walked == keys.sorted { $0.lexicographicallyPrecedes($1) })
        let reversed: [[UInt8]] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                var entry = try cursor.last()
                while let current = entry { seen.append(current.keyBytes); entry = try cursor.previous() }
                return seen
            }
        }
        #expect(reversed == walked.reversed())
    }

    @Test(arguments: [false, true])
    func rangeIterationHonoursEveryBoundKindInBothDirections(duplicates: Bool) throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d", options: duplicates ? .dupSort : [])
        // Keys 10, 20, …, 100 (two values each with dupSort): probes hit keys, gaps and both ends.
        let stored = (1...10).map { UInt16($0 * 10) }
        try environment.write { txn throws in
            for key in stored {
                try db.put([1], forKey: bigEndianKey(key), in: txn)
                if duplicates { try db.put([2], forKey: bigEndianKey(key), in: txn) }
            }
        }
        var expectedEntries: [(key: UInt16, value: UInt8)] = []
        for key in stored {
            expectedEntries.append((key, 1))
            if duplicates { expectedEntries.append((key, 2)) }
        }
        let probes: [UInt16] = [0, 10, 15, 50, 55, 100, 200]
        var bounds: [KeyRange.Bound?] = [nil]
        for probe in probes { bounds += [.inclusive(bigEndianKey(probe)), .exclusive(bigEndianKey(probe))] }

        func contains(_ key: UInt16, _ lower: KeyRange.Bound?, _ upper: KeyRange.Bound?) -> Bool {
            func number(_ bound: KeyRange.Bound) -> UInt16 { UInt16(bound.key[0]) << 8 | UInt16(bound.key[1]) }
            if let lower, lower.isInclusive ? key < number(lower) : key <= number(lower) { return false }
            if let upper, upper.isInclusive ? key > number(upper) : key >= number(upper) { return false }
            return true
        }

        try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                for lower in bounds {
                    for upper in bounds {
                        for direction in [ScanDirection.forward, .reverse] {
                            var iterator = cursor.entries(in: KeyRange(lower: lower, upper: upper), direction: direction)
                            var seen: [String] = []
                            while let entry = try iterator.next() {
                                seen.append("\(UInt16(entry.key[0]) << 8 | UInt16(entry.key[1]))/\(entry.value[0])")
                            }
                            var expected = expectedEntries.filter { contains($0.0, lower, upper) }.map { "\($0.0)/\($0.1)" }
                            if direction == .reverse { expected.reverse() }
                            #expect(seen == expected, "lower \(String(describing: lower)) upper \(String(describing: upper)) \(direction)")
                        }
                        // Counting (a key at a time with dupSort) agrees with the walk, and stops at its limit.
                        let range = KeyRange(lower: lower, upper: upper)
                        let all = expectedEntries.filter { contains($0.0, lower, upper) }.count
                        #expect(try cursor.count(in: range) == all, "count, lower \(String(describing: lower)) upper \(String(describing: upper))")
                        #expect(try cursor.count(in: range, upTo: 3) == min(all, 3))
                    }
                }
            }
        }
    }

    @Test func prefixRangeCoversExactlyTheKeysWithThePrefix() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        let keys: [[UInt8]] = [[0x01], [0x01, 0xFF], [0x01, 0xFF, 0x00], [0x01, 0xFF, 0xFF], [0x02], [0x02, 0x00], [0xFF, 0xFF, 0x01]]
        try environment.write { txn throws in for key in keys { try db.put([], forKey: key, in: txn) } }
        func scan(_ prefix: [UInt8]) throws -> [[UInt8]] {
            try environment.read { txn throws in
                try db.withCursor(in: txn) { cursor throws in
                    var seen: [[UInt8]] = []
                    try cursor.forEach(in: .prefix(prefix)) { seen.append($0.keyBytes); return true }
                    return seen
                }
            }
        }
        #expect(try scan([0x01, 0xFF]) == [[0x01, 0xFF], [0x01, 0xFF, 0x00], [0x01, 0xFF, 0xFF]])
        #expect(try scan([0x01]) == [[0x01], [0x01, 0xFF], [0x01, 0xFF, 0x00], [0x01, 0xFF, 0xFF]])
        #expect(try scan([0xFF, 0xFF]) == [[0xFF, 0xFF, 0x01]])
        #expect(try scan([]) == keys)
    }

    @Test func forEachStopsWhenTheBodyReturnsFalse() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in for n in UInt16(0)..<100 { try db.put([], forKey: bigEndianKey(n), in: txn) } }
        let visited = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var count = 0
                try cursor.forEach(direction: .reverse) { _ in count += 1; return count < 7 }
                return count
            }
        }
        #expect(visited == 7)
    }

    @Test func seekFindsExactAndFollowingKeys() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in for n: UInt16 in [10, 20, 30] { try db.put([UInt8(n)], forKey: bigEndianKey(n), in: txn) } }
        try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                #expect(try cursor.seek(exactly: bigEndianKey(20))?.valueBytes == [20])
                #expect(try cursor.current()?.valueBytes == [20])
                #expect(try cursor.seek(exactly: bigEndianKey(25)) == nil)
                #expect(try cursor.seek(atOrAfter: bigEndianKey(25))?.valueBytes == [30])
                #expect(try cursor.seek(atOrAfter: bigEndianKey(31)) == nil)
                #expect(try cursor.seek(atOrAfter: bigEndianKey(0))?.valueBytes == [10])
            }
        }
    }

    @Test func putReplaceAndDeleteAtTheCursor() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                for n: UInt16 in [1, 2, 3, 4] { try cursor.put([UInt8(n)], forKey: bigEndianKey(n)) }
                _ = try cursor.seek(exactly: bigEndianKey(2))
                try cursor.deleteCurrent()
                #expect(try cursor.current()?.valueBytes == [3], "after a delete the cursor stands on the next entry")
                _ = try cursor.seek(exactly: bigEndianKey(4))
                try [UInt8]([40]).withUnsafeBytes { try cursor.replaceCurrentValue(with: $0) }
            }
        }
        let remaining: [[UInt8]] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                try cursor.forEach { seen.append($0.keyBytes + $0.valueBytes); return true }
                return seen
            }
        }
        #expect(remaining == [[0, 1, 1], [0, 3, 3], [0, 4, 40]])
    }

    /// In a table of several values a key, a delete at the cursor leaves it on the entry that followed: the key's
    /// next value, the next key's first when the deleted value was its key's last (LMDB itself reports no current
    /// entry there), and the next key's first after a whole key goes.
    @Test func deletesOfDuplicatesLeaveTheCursorOnWhatFollowed() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d", options: [.dupSort, .dupFixed])
        try environment.write { txn throws in
            for key: UInt8 in [1, 2, 3, 4] { for value: UInt8 in [10, 20, 30] { try db.put([value], forKey: [key], in: txn) } }
            try db.withCursor(in: txn) { cursor throws in
                _ = try [UInt8]([1]).withUnsafeBytes { key in try [UInt8]([20]).withUnsafeBytes { try cursor.seek(key: key, value: $0) } }
                try cursor.deleteCurrent()
                #expect(try cursor.current().map { $0.keyBytes + $0.valueBytes } == [1, 30])
                try cursor.deleteCurrent()
                #expect(try cursor.current().map { $0.keyBytes + $0.valueBytes } == [2, 10], "the next key's first value")
                try cursor.deleteCurrent(allDuplicates: true)
                #expect(try cursor.current().map { $0.keyBytes + $0.valueBytes } == [3, 10], "after a whole key, the next key's first value")
                _ = try cursor.seek(exactly: [4])
                try cursor.deleteCurrent(allDuplicates: true)
                #expect(try cursor.current() == nil, "nothing follows the last key")
            }
        }
        let remaining: [[UInt8]] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                try cursor.forEach { seen.append($0.keyBytes + $0.valueBytes); return true }
                return seen
            }
        }
        #expect(remaining == [[1, 10], [3, 10], [3, 20], [3, 30]])
    }

    /// A range walk over keys holding several values steps through a key's values without re-checking the key
    /// (`MDB_NEXT_DUP`): every value in range is still visited once, in either direction, bounds honoured.
    @Test func rangeWalksOverDuplicatesVisitEveryValueOnce() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d", options: [.dupSort, .dupFixed])
        let keys: [UInt8] = [1, 2, 3, 4, 5]
        func values(of key: UInt8) -> [UInt8] { key == 3 ? [1] : Array(0..<40) }
        try environment.write { txn throws in
            for key in keys { for value in values(of: key) { try db.put([value], forKey: [key], in: txn) } }
        }
        func walk(_ range: KeyRange, _ direction: ScanDirection) throws -> [[UInt8]] {
            try environment.read { txn throws in
                try db.withCursor(in: txn) { cursor throws in
                    var seen: [[UInt8]] = []
                    try cursor.forEach(in: range, direction: direction) { seen.append($0.keyBytes + $0.valueBytes); return true }
                    return seen
                }
            }
        }
        let everything = keys.flatMap { key in values(of: key).map { [key, $0] } }
        let inner = KeyRange(lower: .inclusive([2]), upper: .inclusive([4]))
        #expect(try walk(inner, .forward) == everything.filter { (2...4).contains($0[0]) })
        #expect(try walk(inner, .reverse) == everything.filter { (2...4).contains($0[0]) }.reversed())
        #expect(try walk(KeyRange(lower: .exclusive([1]), upper: .exclusive([3])), .forward) == everything.filter { $0[0] == 2 })
        #expect(try walk(KeyRange(lower: .exclusive([3]), upper: .exclusive([5])), .reverse) == everything.filter { $0[0] == 4 }.reversed())
        #expect(try walk(KeyRange(lower: .inclusive([2]), upper: .inclusive([2])), .reverse) == everything.filter { $0[0] == 2 }.reversed())
        // The whole table, which walks without bounds: every value of every key, both ways, and a stop honoured.
        #expect(try walk(.all, .forward) == everything)
        #expect(try walk(.all, .reverse) == everything.reversed())
        let firstFive = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                try cursor.forEach(direction: .reverse) { seen.append($0.keyBytes + $0.valueBytes); return seen.count < 5 }
                return seen
            }
        }
        #expect(firstFive == Array(everything.reversed().prefix(5)))
        let empty = try environment.openDatabase(named: "e", options: [.dupSort])
        let visited = try environment.read { txn throws in
            try empty.withCursor(in: txn) { cursor throws in
                var count = 0
                try cursor.forEach { _ in count += 1; return true }
                try cursor.forEach(direction: .reverse) { _ in count += 1; return true }
                return count
            }
        }
        #expect(visited == 0)
    }

    /// A walk a page of values at a time (`MDB_GET_MULTIPLE`) hands out exactly the entries a walk entry by entry
    /// does, in order: keys holding one value, a few, and pages' worth; bounds; stopping early.
    @Test func walksAPageOfValuesAtATimeMatchEntryByEntryWalks() throws {
        let environment = try directory.openStore()
        let fixed = try environment.openDatabase(named: "fixed", options: [.dupSort, .dupFixed])
        let plain = try environment.openDatabase(named: "plain")
        let counts: [UInt8: Int] = [1: 1, 2: 3, 3: 1500, 4: 1, 5: 700, 6: 2]
        try environment.write { txn throws in
            for (key, count) in counts {
                for value in 0..<count { try withUnsafeBytes(of: UInt64(value * 7).bigEndian) { try fixed.put($0, forKey: [key], in: txn) } }
            }
            for key: UInt8 in 1...5 { try plain.put([key, key], forKey: [key], in: txn) }
        }
        func walk(_ db: Database, _ range: KeyRange, pages: Bool, stopAfter limit: Int = .max) throws -> [[UInt8]] {
            try environment.read { txn throws in
                try db.withCursor(in: txn) { cursor throws in
                    var seen: [[UInt8]] = []
                    let take = { (entry: CursorEntry) -> Bool in seen.append(entry.keyBytes + entry.valueBytes); return seen.count < limit }
                    if pages { try cursor.forEachValue(in: range, take) } else { try cursor.forEach(in: range, take) }
                    return seen
                }
            }
        }
        let ranges = [KeyRange(), KeyRange(lower: .inclusive([3]), upper: .inclusive([3])), KeyRange(lower: .exclusive([2]), upper: .exclusive([6])),
                      KeyRange(lower: .inclusive([4]), upper: .inclusive([6])), KeyRange(lower: .inclusive([7]))]
        for range in ranges {
            let expected = try walk(fixed, range, pages: false)
            #expect(try walk(fixed, range, pages: true) == expected)
            for limit in [1, 2, 511, 1503] { #expect(try walk(fixed, range, pages: true, stopAfter: limit) == Array(expected.prefix(limit))) }
            #expect(try walk(plain, range, pages: true) == walk(plain, range, pages: false))
            let backwards: [[UInt8]] = try environment.read { txn throws in
                try fixed.withCursor(in: txn) { cursor throws in
                    var seen: [[UInt8]] = []
                    try cursor.forEachValue(in: range, direction: .reverse) { seen.append($0.keyBytes + $0.valueBytes); return true }
                    return seen
                }
            }
            #expect(backwards == expected.reversed())
        }
        #expect(try walk(fixed, KeyRange(), pages: true).count == counts.values.reduce(0, +))

        // Runs of values: split into entries, the same entries in the same order; each run's key counts its values
        // in all, each run holds one key's values only, and a key of many values comes in runs of whole values.
        func runs(_ db: Database, _ range: KeyRange, stopAfterRuns limit: Int = .max) throws -> (entries: [[UInt8]], runs: Int) {
            try environment.read { txn throws in
                try db.withCursor(in: txn) { cursor throws in
                    var seen: [[UInt8]] = [], made = 0
                    try cursor.forEachValueRun(in: range) { key, values, width, valuesOfKey in
                        #expect(width > 0 && values.count % width == 0 && values.count >= width)
                        #expect(valuesOfKey == (db == fixed ? counts[key[0]]! : 1))
                        for start in stride(from: 0, to: values.count, by: width) { seen.append(Array(key) + Array(values[start..<start + width])) }
                        made += 1
                        return made < limit
                    }
                    return (seen, made)
                }
            }
        }
        for range in ranges {
            let expected = try walk(fixed, range, pages: false)
            let found = try runs(fixed, range)
            #expect(found.entries == expected)
            #expect(try runs(plain, range).entries == walk(plain, range, pages: false))
            let first = try runs(fixed, range, stopAfterRuns: 1)
            #expect(first.runs == min(1, found.runs) && expected.starts(with: first.entries))
        }
        let whole = try runs(fixed, KeyRange())
        #expect(whole.runs > counts.count && whole.runs < counts.values.reduce(0, +), "a key of many values comes a page at a time: \(whole.runs) runs")
    }

    @Test func dupSortNavigationVisitsKeysAndDuplicates() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d", options: .dupSort)
        try environment.write { txn throws in
            for key: UInt8 in [1, 2] { for value: UInt8 in [7, 8, 9] { try db.put([value], forKey: [key], in: txn) } }
        }
        try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                #expect(try cursor.first()?.valueBytes == [7])
                #expect(try cursor.lastDuplicate()?.valueBytes == [9])
                #expect(try cursor.nextDuplicate() == nil)
                #expect(try cursor.firstDuplicate()?.valueBytes == [7])
                let next = try cursor.nextKey()
                #expect(next?.keyBytes == [2])
                #expect(next?.valueBytes == [7])
                #expect(try cursor.previousKey()?.keyBytes == [1])
                let key: [UInt8] = [1], present: [UInt8] = [8], absent: [UInt8] = [5]
                try key.withUnsafeBytes { key throws in
                    try present.withUnsafeBytes { value throws in #expect(try cursor.seek(key: key, value: value)?.valueBytes == [8]) }
                    try absent.withUnsafeBytes { value throws in #expect(try cursor.seek(key: key, value: value) == nil) }
                }
            }
        }
    }
}

extension CursorTests {
    /// `putDuplicates` stores a run of one key's fixed-size values in one call (`MDB_MULTIPLE`): the same entries as
    /// the values put one by one, whether the key is new, holds a few values or so many they fill pages of their own;
    /// a value out of order under `appendDuplicate` is refused with the values before it stored; a database without
    /// fixed-size values and a run of the wrong length are refused, naming what is wrong.
    @Test func aRunOfValuesIsPutInOneCallAsOneByOneWouldPutIt() throws {
        let environment = try directory.openStore()
        let runs = try environment.openDatabase(named: "runs", options: [.dupSort, .dupFixed])
        let single = try environment.openDatabase(named: "single", options: [.dupSort, .dupFixed])
        func values(_ numbers: some Sequence<UInt32>) -> [UInt8] { numbers.flatMap { bigEndianBytes($0) } }
        // Key 1: new, 3 values; key 2: 2 values then 5 more (a page of its own's worth); key 3: 3 000 values in two
        // runs (a sub-tree).
        let plan: [(key: UInt16, values: [UInt32])] = [(1, [5, 6, 9]), (2, [1, 2]), (2, [3, 4, 7, 8, 10]), (3, Array(0..<1_500)), (3, Array(1_500..<3_000))]
        try environment.write { txn in
            try runs.withCursor(in: txn) { cursor in
                for (key, numbers) in plan {
                    try values(numbers).withUnsafeBytes { run in
                        try bigEndianKey(key).withUnsafeBytes { try cursor.putDuplicates(run, size: 4, forKey: $0, options: .appendDuplicate) }
                    }
                }
            }
            for (key, numbers) in plan {
                for number in numbers { try single.put(bigEndianBytes(number), forKey: bigEndianKey(key), in: txn) }
            }
        }
        func entries(_ db: Database) throws -> [[UInt8]] {
            try environment.read { txn in
                try db.withCursor(in: txn) { cursor in
                    var seen: [[UInt8]] = []
                    var entry = try cursor.first()
                    while let current = entry { seen.append(current.keyBytes + current.valueBytes); entry = try cursor.next() }
                    return seen
                }
            }
        }
        let expected = try entries(single)
        #expect(expected.count == 3 + 7 + 3_000)
        #expect(try entries(runs) == expected)
        // Each key new and after every other (`append`): one call per key, as a bulk load puts a sorted table.
        let appended = try environment.openDatabase(named: "appended", options: [.dupSort, .dupFixed])
        try environment.write { txn in
            try appended.withCursor(in: txn) { cursor in
                for key in [UInt16(1), 2, 3] {
                    try values(plan.filter { $0.key == key }.flatMap(\.values)).withUnsafeBytes { run in
                        try bigEndianKey(key).withUnsafeBytes { try cursor.putDuplicates(run, size: 4, forKey: $0, options: [.append, .appendDuplicate]) }
                    }
                }
            }
        }
        #expect(try entries(appended) == expected)

        // Out of order: 11 and 12 go after key 2's values, 4 is below them and stops the run there.
        let refused = #expect(throws: LMDBError.self) {
            try environment.write { txn in
                try runs.withCursor(in: txn) { cursor in
                    try values([11, 12, 4, 13]).withUnsafeBytes { run in
                        try bigEndianKey(2).withUnsafeBytes { try cursor.putDuplicates(run, size: 4, forKey: $0, options: .appendDuplicate) }
                    }
                }
                let kept = try runs.withCursor(in: txn) { cursor in
                    _ = try bigEndianKey(2).withUnsafeBytes { try cursor.seek(exactly: $0) }
                    return try cursor.duplicateCount()
                }
                #expect(kept == 9, "the values before the refused one are stored")
                throw LMDBError.keyExists
            }
        }
        #expect(refused == .keyExists)

        let plain = try environment.openDatabase(named: "plain", options: [.dupSort])
        try environment.write { txn in
            let wrongTable = #expect(throws: LMDBError.self) {
                try plain.withCursor(in: txn) { cursor in
                    try values([1, 2]).withUnsafeBytes { run in try bigEndianKey(1).withUnsafeBytes { try cursor.putDuplicates(run, size: 4, forKey: $0) } }
                }
            }
            #expect(wrongTable == .incompatible && wrongTable?.description.contains("dupFixed") == true, "\(String(describing: wrongTable))")
            // An empty run is refused by the table it cannot go in, and puts nothing in one it can.
            #expect(throws: LMDBError.incompatible) {
                try plain.withCursor(in: txn) { cursor in try bigEndianKey(1).withUnsafeBytes { try cursor.putDuplicates(UnsafeRawBufferPointer(start: nil, count: 0), size: 4, forKey: $0) } }
            }
            try runs.withCursor(in: txn) { cursor in try bigEndianKey(9).withUnsafeBytes { try cursor.putDuplicates(UnsafeRawBufferPointer(start: nil, count: 0), size: 4, forKey: $0) } }
            #expect(try runs.withCursor(in: txn) { cursor in try bigEndianKey(9).withUnsafeBytes { try cursor.seek(exactly: $0) } } == nil)
            let wrongLength = #expect(throws: LMDBError.self) {
                try runs.withCursor(in: txn) { cursor in
                    try [UInt8](repeating: 1, count: 7).withUnsafeBytes { run in try bigEndianKey(1).withUnsafeBytes { try cursor.putDuplicates(run, size: 4, forKey: $0) } }
                }
            }
            #expect(wrongLength == .invalidArgument && wrongLength?.description.contains("7 bytes") == true, "\(String(describing: wrongLength))")
        }
    }
}
