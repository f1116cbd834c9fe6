import LMDB
import Testing

@Suite struct DatabaseTests {
    let directory = TemporaryDirectory()

    @Test func putThenGetReturnsTheValueAndDeleteRemovesIt() throws {
        let environment = try directory.openStore()
        let people = try environment.openDatabase(named: "people")
        try environment.write { txn throws in
            try people.put([UInt8](utf8: "Ada Lovelace"), forKey: [UInt8](utf8: "p1"), in: txn)
            try people.put([UInt8](utf8: "Alan Turing"), forKey: [UInt8](utf8: "p2"), in: txn)
        }
        try environment.read { txn throws in
            #expect(try people.value(forKey: [UInt8](utf8: "p1"), in: txn) == [UInt8](utf8: "Ada Lovelace"))
            #expect(try people.value(forKey: [UInt8](utf8: "p2"), in: txn) == [UInt8](utf8: "Alan Turing"))
            #expect(try people.value(forKey: [UInt8](utf8: "p3"), in: txn) == nil)
        }
        let deleted = try environment.write { txn throws in
            (try people.delete(key: [UInt8](utf8: "p1"), in: txn), try people.delete(key: [UInt8](utf8: "nope"), in: txn))
        }
        #expect(deleted == (true, false))
        try environment.read { txn throws in
            #expect(try people.value(forKey: [UInt8](utf8: "p1"), in: txn) == nil)
            #expect(try people.contains(key: [UInt8](utf8: "p2"), in: txn))
        }
    }

    @Test func putReplacesAnExistingValue() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1, 2, 3], forKey: [9], in: $0) }
        try environment.write { try db.put([4], forKey: [9], in: $0) }
        try environment.read { txn throws in #expect(try db.value(forKey: [9], in: txn) == [4]) }
    }

    @Test func valuesOfEverySizeRoundTrip() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "blobs")
        let sizes = [0, 1, 100, 4096, 100_000, 3_000_000]
        try environment.write { txn throws in
            for size in sizes {
                try db.put((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }, forKey: Array(String(size).utf8), in: txn)
            }
        }
        try environment.read { txn throws in
            for size in sizes {
                let stored = try db.value(forKey: Array(String(size).utf8), in: txn)
                #expect(stored == (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }, "size \(size)")
            }
        }
    }

    @Test func withValueLendsBytesWithoutCopying() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([7, 8, 9], forKey: [1], in: $0) }
        let sum = try environment.read { txn throws in
            try db.withValue(forKey: [1], in: txn) { bytes throws in bytes.reduce(0) { $0 + Int($1) } }
        }
        #expect(sum == 24)
        let missing = try environment.read { txn throws in try db.withValue(forKey: [2], in: txn) { _ in 1 } }
        #expect(missing == nil)
    }

    @Test func noOverwriteRefusesAnExistingKeyAndKeepsTheOldValue() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [UInt8](utf8: "k"), in: $0) }
        #expect(throws: LMDBError.keyExists) {
            try environment.write { try db.put([2], forKey: [UInt8](utf8: "k"), in: $0, options: .noOverwrite) }
        }
        try environment.read { txn throws in #expect(try db.value(forKey: [UInt8](utf8: "k"), in: txn) == [1]) }
    }

    @Test func appendAcceptsSortedKeysAndRejectsAnOutOfOrderOne() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "log")
        try environment.write { txn throws in
            for n in UInt16(0)..<1000 { try db.put([UInt8(n & 0xFF)], forKey: bigEndianKey(n), in: txn, options: .append) }
        }
        do {
            try environment.write { try db.put([0], forKey: bigEndianKey(5), in: $0, options: .append) }
            Issue.record("an out-of-order append was accepted")
        } catch let error as LMDBError {
            #expect(error == .keyExists)
            #expect(error.description.contains("appended key must sort after"))
            #expect(error.database == "log")
        }
        try environment.read { txn throws in #expect(try db.statistics(in: txn).entries == 1000) }
    }

    @Test func reserveWritesTheValueInPlace() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        let returned = try environment.write { txn throws in
            try db.reserve(count: 5, forKey: [UInt8](utf8: "r"), in: txn) { buffer throws in
                for i in 0..<buffer.count { buffer[i] = UInt8(10 + i) }
                return buffer.count
            }
        }
        #expect(returned == 5)
        try environment.read { txn throws in #expect(try db.value(forKey: [UInt8](utf8: "r"), in: txn) == [10, 11, 12, 13, 14]) }
    }

    @Test func reserveIsRefusedInADupSortDatabase() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "dups", options: .dupSort)
        #expect(throws: LMDBError.incompatible) {
            try environment.write { txn throws in try db.reserve(count: 1, forKey: [1], in: txn) { $0[0] = 1 } }
        }
    }

    /// The store appends a new row's index entries with `appendDuplicate` and, when LMDB refuses one (its value
    /// sorts before the key's last), puts it in place in the same transaction: the refusal must change nothing and
    /// leave the transaction usable — for a key holding one value, a few (a sub-page) and many (a sub-database).
    @Test func aRefusedDuplicateAppendLeavesTheTransactionUsable() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "index", options: [.dupSort, .dupFixed])
        let counts = [("one", 1), ("few", 5), ("many", 2_000)]
        try environment.write { txn throws in
            for (key, count) in counts {
                for n in 0..<count { try db.put(bigEndianKey(UInt16(10 + 2 * n)), forKey: [UInt8](utf8: key), in: txn, options: .appendDuplicate) }
            }
        }
        try environment.write { txn throws in
            for (key, _) in counts {
                #expect(throws: LMDBError.keyExists) {
                    try db.put(bigEndianKey(3), forKey: [UInt8](utf8: key), in: txn, options: .appendDuplicate)
                }
                try db.put(bigEndianKey(3), forKey: [UInt8](utf8: key), in: txn)
                try db.put(bigEndianKey(60_000), forKey: [UInt8](utf8: key), in: txn, options: .appendDuplicate)
            }
        }
        try environment.read { txn throws in
            for (key, count) in counts {
                let values = try db.withCursor(in: txn) { cursor throws -> [[UInt8]] in
                    var found: [[UInt8]] = []
                    var entry = try cursor.seek(exactly: [UInt8](utf8: key))
                    while let current = entry {
                        found.append(current.valueBytes)
                        entry = try cursor.nextDuplicate()
                    }
                    return found
                }
                let appended: [[UInt8]] = (0..<count).map { bigEndianKey(UInt16(10 + 2 * $0)) }
                let expected: [[UInt8]] = [bigEndianKey(3)] + appended + [bigEndianKey(60_000)]
                #expect(values == expected, "\(key)")
            }
        }
    }

    /// Handles of one database compare equal and hash alike however they were obtained; other databases' do not.
    @Test func handlesOfOneDatabaseAreEqual() throws {
        let environment = try directory.openStore()
        let people = try environment.openDatabase(named: "people"), again = try environment.openDatabase(named: "people")
        let places = try environment.openDatabase(named: "places")
        #expect(people == again && people.hashValue == again.hashValue)
        #expect(people != places && Set([people, again, places]).count == 2)
        #expect(people.name == "people" && places.name == "places")
    }

    @Test func dupSortKeepsSortedValuesPerKeyAndDeletesOnePair() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "tags", options: [.dupSort])
        try environment.write { txn throws in
            for value: UInt8 in [30, 10, 20] { try db.put([value], forKey: [UInt8](utf8: "a"), in: txn) }
            try db.put([5], forKey: [UInt8](utf8: "b"), in: txn)
        }
        #expect(throws: LMDBError.keyExists) {
            try environment.write { try db.put([10], forKey: [UInt8](utf8: "a"), in: $0, options: .noDuplicateData) }
        }
        var values: [[UInt8]] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                var entry = try cursor.seek(exactly: [UInt8](utf8: "a"))
                #expect(try cursor.duplicateCount() == 3)
                while let current = entry {
                    seen.append(current.valueBytes)
                    entry = try cursor.nextDuplicate()
                }
                return seen
            }
        }
        #expect(values == [[10], [20], [30]])
        let removed = try environment.write { try db.delete(key: [UInt8](utf8: "a"), value: [20], in: $0) }
        #expect(removed)
        values = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [[UInt8]] = []
                try cursor.forEach { entry throws in seen.append(entry.keyBytes + entry.valueBytes); return true }
                return seen
            }
        }
        #expect(values == [[UInt8](utf8: "a") + [10], [UInt8](utf8: "a") + [30], [UInt8](utf8: "b") + [5]])
    }

    @Test func deleteWithAValueOutsideDupSortDeletesOnlyOnAMatch() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [7], in: $0) }
        #expect(try environment.write { try db.delete(key: [7], value: [2], in: $0) } == false)
        try environment.read { txn throws in #expect(try db.value(forKey: [7], in: txn) == [1]) }
        #expect(try environment.write { try db.delete(key: [7], value: [1], in: $0) } == true)
        try environment.read { txn throws in #expect(try db.value(forKey: [7], in: txn) == nil) }
    }

    @Test func integerKeysSortNumerically() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "ints", options: .integerKey)
        let numbers: [UInt64] = [300, 2, 70_000, 1, 256]
        try environment.write { txn throws in
            for n in numbers {
                try withUnsafeBytes(of: n) { try db.put([UInt8(n & 0xFF)], forKey: $0, in: txn) }
            }
        }
        let order: [UInt64] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [UInt64] = []
                try cursor.forEach { seen.append($0.key.loadUnaligned(as: UInt64.self)); return true }
                return seen
            }
        }
        #expect(order == numbers.sorted())
    }

    @Test func reverseKeysCompareFromTheLastByte() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "rev", options: .reverseKey)
        try environment.write { txn throws in
            for key in ["ba", "ab", "ca", "ac"] { try db.put([], forKey: [UInt8](utf8: key), in: txn) }
        }
        let order: [String] = try environment.read { txn throws in
            try db.withCursor(in: txn) { cursor throws in
                var seen: [String] = []
                try cursor.forEach { seen.append(String(decoding: $0.key, as: UTF8.self)); return true }
                return seen
            }
        }
        #expect(order == ["ba", "ca", "ab", "ac"])
    }

    @Test func clearEmptiesTheDatabaseAndDropRemovesIt() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "scratch")
        try environment.write { txn throws in for n: UInt8 in 1...10 { try db.put([n], forKey: [n], in: txn) } }
        try environment.write { try db.clear(in: $0) }
        try environment.read { txn throws in #expect(try db.statistics(in: txn).entries == 0) }
        try environment.write { try db.put([1], forKey: [1], in: $0) }
        try environment.write { try db.drop(in: $0) }
        #expect(throws: LMDBError.notFound) { try environment.openDatabase(named: "scratch", create: false) }
        let recreated = try environment.openDatabase(named: "scratch")
        try environment.read { txn throws in #expect(try recreated.statistics(in: txn).entries == 0) }
    }

    @Test func statisticsCountEntriesAndPages() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in
            for n in UInt16(0)..<5000 { try db.put([UInt8](repeating: 1, count: 100), forKey: bigEndianKey(n), in: txn) }
        }
        let stats = try environment.read { try db.statistics(in: $0) }
        #expect(stats.entries == 5000)
        #expect(stats.depth >= 2)
        #expect(stats.leafPages > 1)
        #expect(stats.pageSize == 4096 || stats.pageSize > 0)
    }

    @Test func reopeningWithOtherOptionsIsRefused() throws {
        let environment = try directory.openStore()
        _ = try environment.openDatabase(named: "d", options: .dupSort)
        #expect(throws: LMDBError.incompatible) { try environment.openDatabase(named: "d") }
    }
}
