import Foundation
import LMDB
@testable import LMDBStore
import Testing
import TestSupport

/// The key-value seam's contract, checked by running the same operations on LMDB and on the in-memory engine and
/// comparing every answer: the check a new engine under the seam must pass before the store's suites run on it.
@Suite struct KeyValueSeamTests {
    /// The engines side by side, each with a plain table, a dupSort table and a dupSort + dupFixed table.
    struct Pair {
        let engines: [any KeyValueEngine]
        let tables: [[Database]]

        init(folder: StoreFolder) throws {
            let lmdb = try KeyValueEngines.open(at: folder.file("seam.lmdb").path, options: .init())
            let memory = try MemoryFiles().open(folder.file("seam.memory").path, options: .init())
            engines = [lmdb, memory]
            tables = try engines.map { engine in
                [try engine.openDatabase(named: "plain", options: []), try engine.openDatabase(named: "dups", options: [.dupSort]),
                 try engine.openDatabase(named: "fixed", options: [.dupSort, .dupFixed])]
            }
        }

        /// What `body` answers on each engine; they must be equal.
        func agree<Answer: Equatable>(_ what: String, _ body: (any KeyValueEngine, [Database]) throws -> Answer) throws {
            let lmdb = try body(engines[0], tables[0])
            let memory = try body(engines[1], tables[1])
            #expect(lmdb == memory, "\(what): LMDB and the memory engine differ")
        }

        /// Answers as lists, compared answer by answer so that a difference names the first that differs.
        func agree(_ what: String, _ body: (any KeyValueEngine, [Database]) throws -> [String]) throws {
            let lmdb = try body(engines[0], tables[0])
            let memory = try body(engines[1], tables[1])
            guard let first = lmdb.indices.first(where: { $0 < memory.count && lmdb[$0] != memory[$0] }) ?? (lmdb.count == memory.count ? nil : min(lmdb.count, memory.count)) else { return }
            Issue.record("\(what), answer \(first): LMDB \(first < lmdb.count ? lmdb[first] : "none"), memory engine \(first < memory.count ? memory[first] : "none")")
        }
    }

    /// The outcome of an operation that may be refused, as text: the same refusals on both engines.
    static func outcome(_ body: () throws -> Bool) -> String {
        do { return try body() ? "done" : "absent" } catch let error as LMDBError { return error.name } catch { return "\(error)" }
    }

    /// Keys from a small alphabet, so that keys collide, prefix each other and sort on their length.
    static func key(_ random: inout SplitMix64) -> [UInt8] {
        (0..<Int(random.next() % 3 + 1)).map { _ in UInt8(random.next() % 3) + 0x61 }
    }

    /// A value for table `table`: 0–2 bytes in the plain one, 1–2 in the dupSort one (the seam leaves empty values
    /// there undefined: LMDB refuses them, or loses an empty first value when a second comes), 8 in the fixed one.
    static func value(_ random: inout SplitMix64, table: Int) -> [UInt8] {
        switch table {
        case 2: withUnsafeBytes(of: (random.next() % 6).bigEndian) { Array($0) }
        default: (0..<Int(random.next() % 3) + table).map { _ in UInt8(random.next() % 4) }
        }
    }

    static func dump(_ cursor: any KeyValueCursor, _ range: KeyRange, _ direction: ScanDirection) throws -> [[UInt8]] {
        var entries: [[UInt8]] = []
        try cursor.forEach(in: range, direction: direction) { entries.append($0.keyBytes + [0xFF] + $0.valueBytes); return true }
        return entries
    }

    static func range(_ random: inout SplitMix64) -> KeyRange {
        func bound() -> KeyRange.Bound? {
            switch random.next() % 3 {
            case 0: nil
            case 1: .inclusive(key(&random))
            default: .exclusive(key(&random))
            }
        }
        return KeyRange(lower: bound(), upper: bound())
    }

    @Test func bothEnginesGiveTheSameAnswersToRandomOperations() throws {
        let folder = StoreFolder()
        let pair = try Pair(folder: folder)
        var random = SplitMix64(seed: 19)
        for round in 0..<60 {
            // A write transaction of random puts and deletes, the same on both engines.
            let operations: [(kind: UInt64, table: Int, key: [UInt8], value: [UInt8])] = (0..<25).map { _ in
                let table = Int(random.next() % 3)
                return (random.next() % 10, table, Self.key(&random), Self.value(&random, table: table))
            }
            try pair.agree("round \(round)'s writes") { engine, tables in
                try engine.write { transaction in
                    operations.map { operation in
                        let table = tables[operation.table]
                        var standing = ""  // where a cursor stands after a delete at it
                        let outcome = Self.outcome {
                            switch operation.kind {
                            case 0, 1, 2:
                                try table.put(operation.value, forKey: operation.key, in: transaction); return true
                            case 3:
                                try table.put(operation.value, forKey: operation.key, in: transaction, options: .noOverwrite); return true
                            case 4:
                                try table.put(operation.value, forKey: operation.key, in: transaction, options: .noDuplicateData); return true
                            case 5:
                                return try table.delete(key: operation.key, in: transaction)
                            case 6:
                                return try table.delete(key: operation.key, value: operation.value, in: transaction)
                            case 8:
                                // A put through a cursor, which then stands on the new entry.
                                return try table.withCursor(in: transaction) { (cursor: any KeyValueCursor) -> Bool in
                                    try operation.key.withUnsafeBytes { key in
                                        try operation.value.withUnsafeBytes { try cursor.put($0, forKey: key, options: operation.value.first == 1 ? .noOverwrite : []) }
                                    }
                                    let current = try cursor.current()
                                    return current?.keyBytes == operation.key && current?.valueBytes == operation.value
                                }
                            case 9 where table.options.contains(.dupSort):
                                // A pair found exactly and deleted at the cursor (defined in dupSort tables only) — or,
                                // for an odd last value byte, its key with every value; either way the cursor then
                                // stands on the same entry on both engines.
                                return try table.withCursor(in: transaction) { (cursor: any KeyValueCursor) -> Bool in
                                    guard try operation.key.withUnsafeBytes({ key in
                                        try operation.value.withUnsafeBytes { try cursor.seek(key: key, value: $0) }
                                    }) != nil else { return false }
                                    if operation.value.last! & 1 == 1 { try cursor.deleteCurrentKey() } else { try cursor.deleteCurrent() }
                                    standing = " \(operation.value.last! & 1 == 1 ? "key" : "pair") deleted, then on \(String(describing: try cursor.current().map { $0.keyBytes + $0.valueBytes }))"
                                    return true
                                }
                            default:
                                // Every value from the key on, deleted one at a time at the cursor.
                                return try table.withCursor(in: transaction) { cursor in
                                    var entry = try cursor.seek(atOrAfter: operation.key)
                                    var deleted = false
                                    while let current = entry, current.key.starts(with: operation.key) {
                                        try cursor.deleteCurrent()
                                        deleted = true
                                        entry = try cursor.current()
                                    }
                                    return deleted
                                }
                            }
                        }
                        return outcome + standing
                    }
                }
            }
            let ranges = (0..<6).map { _ in Self.range(&random) }
            let probes = (0..<8).map { _ in Self.key(&random) }
            try pair.agree("round \(round)'s reads") { engine, tables in
                try engine.read { transaction in
                    var answers: [String] = []
                    for table in tables {
                        answers.append("entries \(try table.entryCount(in: transaction))")
                        try table.withCursor(in: transaction) { cursor in
                            answers.append("all \(try Self.dump(cursor, .all, .forward)) \(try Self.dump(cursor, .all, .reverse))")
                            for range in ranges {
                                answers.append("range \(try Self.dump(cursor, range, .forward)) \(try Self.dump(cursor, range, .reverse))")
                                var values: [[UInt8]] = []
                                try cursor.forEachValue(in: range, direction: .forward) { values.append($0.keyBytes + [0xFF] + $0.valueBytes); return true }
                                var keys: [String] = []
                                try cursor.forEachKey(in: range) { keys.append("\($0.keyBytes)×\($1)"); return true }
                                answers.append("values \(values) keys \(keys) count \(try cursor.count(in: range)) \(try cursor.count(in: range, upTo: 2))")
                            }
                            for probe in probes {
                                let exact = try cursor.seek(exactly: probe).map { $0.keyBytes + $0.valueBytes }
                                let duplicates = exact == nil ? -1 : (try? cursor.duplicateCount()) ?? -2  // refused outside dupSort tables
                                // Defined in dupSort tables only (elsewhere LMDB steps to the next key).
                                let nextDuplicate = exact == nil || !table.options.contains(.dupSort) ? nil
                                    : try cursor.nextDuplicate().map { $0.keyBytes + $0.valueBytes }
                                let after = try cursor.seek(atOrAfter: probe).map { $0.keyBytes + $0.valueBytes }
                                let nextKey = after == nil ? nil : try cursor.nextKey().map { $0.keyBytes + $0.valueBytes }
                                let current = nextKey == nil ? nil : try cursor.current().map { $0.keyBytes + $0.valueBytes }
                                answers.append("seek \(String(describing: exact)) ×\(duplicates) \(String(describing: nextDuplicate)) \(String(describing: after)) \(String(describing: nextKey)) \(String(describing: current))")
                                let value = try table.value(forKey: probe, in: transaction)
                                answers.append("get \(String(describing: value))")
                            }
                            answers.append("first \(String(describing: try cursor.first()?.keyBytes))")
                            answers.append("last \(String(describing: try cursor.last().map { $0.keyBytes + $0.valueBytes }))")
                        }
                    }
                    return answers
                }
            }
        }
    }

    @Test func bothEnginesRefuseTheSameBadKeysAndWrites() throws {
        let folder = StoreFolder()
        let pair = try Pair(folder: folder)
        try pair.agree("bad keys") { engine, tables in
            try engine.write { transaction in
                [Self.outcome { try tables[0].put([1], forKey: [UInt8](), in: transaction); return true },
                 Self.outcome { try tables[0].put([1], forKey: [UInt8](repeating: 7, count: engine.maxKeySize + 1), in: transaction); return true },
                 Self.outcome { try tables[0].put([1], forKey: [UInt8](repeating: 7, count: engine.maxKeySize), in: transaction); return true },
                 Self.outcome { try tables[1].put([2], forKey: [9], in: transaction); try tables[1].put([1], forKey: [9], in: transaction, options: .noOverwrite); return true },
                 Self.outcome { try tables[1].put([2], forKey: [9], in: transaction, options: .noDuplicateData); return true },
                 Self.outcome { try tables[0].put([3], forKey: [1], in: transaction, options: .append); return true }]
            }
        }
        try pair.agree("a missing table") { engine, _ in
            Self.outcome { _ = try engine.openDatabase(named: "missing", options: [], create: false); return true }
        }
        try pair.agree("a table opened with other duplicate options") { engine, _ in
            Self.outcome { _ = try engine.openDatabase(named: "plain", options: [.dupSort], create: false); return true }
        }
        try pair.agree("the main table lists the tables") { engine, _ in
            let main = try engine.openDatabase(named: nil, options: [], create: false)
            return try engine.read { transaction in
                try main.withCursor(in: transaction) { try Self.dump($0, .all, .forward).map { Array($0.prefix { $0 != 0xFF }) } }
            }
        }
        try pair.agree("a write that throws leaves nothing") { engine, tables in
            struct Stop: Error {}
            _ = try? engine.write { transaction in
                try tables[0].put([5], forKey: [0x7A], in: transaction)
                throw Stop()
            }
            return try engine.read { try tables[0].value(forKey: [0x7A], in: $0) }
        }
        try pair.agree("a write inside a write") { engine, _ in
            try engine.write { _ in Self.outcome { try engine.write { _ in true } } }
        }
    }

    @Test func aReaderKeepsItsSnapshotWhileAWriterCommits() throws {
        let folder = StoreFolder()
        let pair = try Pair(folder: folder)
        try pair.agree("a snapshot") { engine, tables in
            try engine.write { try tables[0].put([1], forKey: [0x61], in: $0) }
            let reader = try engine.beginRead()
            defer { reader.endRead() }
            let borrowed = try #require(try [UInt8]([0x61]).withUnsafeBytes { try tables[0].borrowedValue(forKey: $0, in: reader) })
            try engine.write { transaction in
                try tables[0].put([2], forKey: [0x61], in: transaction)
                try tables[0].put([3], forKey: [0x62], in: transaction)
            }
            let seen = [Array(borrowed), try tables[0].value(forKey: [0x61], in: reader) ?? [], try tables[0].value(forKey: [0x62], in: reader) ?? []]
            let now = try engine.read { [try tables[0].value(forKey: [0x61], in: $0) ?? [], try tables[0].value(forKey: [0x62], in: $0) ?? []] }
            return seen + now
        }
    }
}
