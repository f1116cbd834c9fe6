import Foundation
import LMDB
import Testing

@Suite struct EnvironmentTests {
    let directory = TemporaryDirectory()

    @Test func theMapGrowsFromATinyStartWithoutLosingData() throws {
        let environment = try directory.openStore { $0.mapSize = 64 * 1024 }
        let db = try environment.openDatabase(named: "big")
        let startSize = try environment.info().mapSize
        var bodyRuns = 0
        for batch in UInt16(0)..<40 {
            try environment.write { txn throws in
                bodyRuns += 1
                for n in 0..<25 {
                    let key = bigEndianKey(batch * 25 + UInt16(n))
                    try db.put([UInt8](repeating: UInt8(truncatingIfNeeded: n), count: 10_000), forKey: key, in: txn)
                }
            }
        }
        #expect(bodyRuns > 40, "the map never filled, so growth was not exercised")
        #expect(try environment.info().mapSize > startSize)
        try environment.read { txn throws in
            #expect(try db.statistics(in: txn).entries == 1000)
            for batch in UInt16(0)..<40 {
                for n in 0..<25 {
                    let value = try db.value(forKey: bigEndianKey(batch * 25 + UInt16(n)), in: txn)
                    #expect(value == [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: 10_000))
                }
            }
        }
    }

    /// LMDB closes a dropped database's handle at once, even when the write then aborts: a write that dropped one
    /// and filled the map is not run again with the dead handle (which LMDB would refuse with EINVAL) — it grows the
    /// map and says what happened; the database is still there, and a fresh handle reads it.
    @Test func aWriteThatDroppedADatabaseIsNotRunAgainWhenTheMapFills() throws {
        let environment = try directory.openStore { $0.mapSize = 64 * 1024 }
        let doomed = try environment.openDatabase(named: "doomed")
        let other = try environment.openDatabase(named: "other")
        try environment.write { txn throws in try doomed.put([7], forKey: [1], in: txn) }
        var runs = 0
        do {
            try environment.write { txn throws in
                runs += 1
                try doomed.drop(in: txn)
                try other.put([UInt8](repeating: 1, count: 1 << 19), forKey: [1], in: txn)
            }
            Issue.record("512 KiB fit in a 64 KiB map")
        } catch let error as LMDBError {
            #expect(error == .mapFull && error.description.contains("dropped a database"), "\(error)")
        }
        #expect(runs == 1)
        let reopened = try environment.openDatabase(named: "doomed", create: false)
        try environment.read { txn throws in #expect(try reopened.value(forKey: [1], in: txn) == [7]) }
        // Run again with fresh handles, now that the map has grown, it goes through.
        try environment.write { txn throws in
            try reopened.drop(in: txn)
            try other.put([UInt8](repeating: 1, count: 1 << 19), forKey: [1], in: txn)
        }
        #expect(throws: LMDBError.self) { try environment.openDatabase(named: "doomed", create: false) }
    }

    @Test func growthStopsAtMaxMapSizeWithAClearError() throws {
        let environment = try directory.openStore {
            $0.mapSize = 64 * 1024
            $0.maxMapSize = 256 * 1024
        }
        let db = try environment.openDatabase(named: "d")
        do {
            try environment.write { txn throws in try db.put([UInt8](repeating: 0, count: 1 << 20), forKey: [1], in: txn) }
            Issue.record("a 1 MiB value fit in a 256 KiB map")
        } catch let error as LMDBError {
            #expect(error == .mapFull)
            #expect(error.description.contains("maxMapSize"))
        }
        try environment.read { txn throws in #expect(try db.value(forKey: [1], in: txn) == nil) }
    }

    @Test func theSameFileOpensAsOneEnvironmentByAnyPath() throws {
        let path = directory.file("shared.lmdb")
        let first = try Environment.open(at: path)
        let again = try Environment.open(at: path)
        #expect(first === again)
        try FileManager.default.createSymbolicLink(atPath: directory.file("link.lmdb"), withDestinationPath: path)
        let viaLink = try Environment.open(at: directory.file("link.lmdb"))
        #expect(first === viaLink)
    }

    @Test func aClosedEnvironmentCanBeOpenedAgainWithItsData() throws {
        let path = directory.file("reopen.lmdb")
        do {
            let environment = try Environment.open(at: path)
            let db = try environment.openDatabase(named: "d")
            try environment.write { try db.put([42], forKey: [1], in: $0) }
        }
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "d", create: false)
        try environment.read { txn throws in #expect(try db.value(forKey: [1], in: txn) == [42]) }
    }

    @Test func aStoreOpenReadOnlyCannotAlsoBeOpenedForWriting() throws {
        let path = directory.file("ro.lmdb")
        do { _ = try Environment.open(at: path) }
        let readOnly = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
        #expect(throws: LMDBError.busy) { try Environment.open(at: path) }
        withExtendedLifetime(readOnly) {}
    }

    @Test func singleFileLayoutWritesOneDataFileAndALockFile() throws {
        let path = directory.file("single.lmdb")
        let environment = try Environment.open(at: path)
        try environment.write { _ in }
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue)
        #expect(FileManager.default.fileExists(atPath: path + "-lock"))
    }

    @Test func directoryLayoutCreatesTheDirectory() throws {
        let path = directory.file("dir-store")
        let environment = try Environment.open(at: path, options: .init { $0.layout = .directory })
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [1], in: $0) }
        #expect(FileManager.default.fileExists(atPath: path + "/data.mdb"))
        #expect(FileManager.default.fileExists(atPath: path + "/lock.mdb"))
    }

    @Test func statisticsAndInfoDescribeTheStore() throws {
        let environment = try directory.openStore { $0.maxReaders = 50 }
        let a = try environment.openDatabase(named: "a")
        let b = try environment.openDatabase(named: "b")
        try environment.write { txn throws in
            try a.put([1], forKey: [1], in: txn)
            try b.put([1], forKey: [1], in: txn)
        }
        #expect(try environment.statistics().entries == 2, "the main tree holds one record per named database")
        let info = try environment.info()
        #expect(info.maxReaders == 50)
        #expect(info.mapSize == 1 << 30)
        #expect(info.lastTransactionID >= 3)
        #expect(environment.maxKeySize == 511)
    }

    @Test(arguments: [Environment.Durability.full, .skipMetaSync, .noSync])
    func everyDurabilityKeepsCommitsAcrossReopen(durability: Environment.Durability) throws {
        let path = directory.file("durability.lmdb")
        do {
            let environment = try Environment.open(at: path, options: .init { $0.durability = durability })
            let db = try environment.openDatabase(named: "d")
            try environment.write { try db.put([7], forKey: [7], in: $0) }
            try environment.sync()
        }
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "d")
        try environment.read { txn throws in #expect(try db.value(forKey: [7], in: txn) == [7]) }
    }

    @Test func writeMapStoresWork() throws {
        let environment = try directory.openStore("writemap.lmdb") { $0.usesWriteMap = true; $0.mapSize = 1 << 20 }
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in for n in UInt16(0)..<2000 { try db.put([UInt8](repeating: 3, count: 1000), forKey: bigEndianKey(n), in: txn) } }
        try environment.read { txn throws in #expect(try db.statistics(in: txn).entries == 2000) }
    }

    @Test func aCompactingCopyHoldsTheSameDataInLessSpace() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in for n in UInt16(0)..<3000 { try db.put([UInt8](repeating: 1, count: 500), forKey: bigEndianKey(n), in: txn) } }
        try environment.write { txn throws in for n in UInt16(0)..<2900 { try db.delete(key: bigEndianKey(n), in: txn) } }
        let plain = directory.file("plain-copy.lmdb"), compact = directory.file("compact-copy.lmdb")
        try environment.copy(to: plain)
        try environment.copy(to: compact, compacting: true)
        let plainSize = try FileManager.default.attributesOfItem(atPath: plain)[.size] as! Int
        let compactSize = try FileManager.default.attributesOfItem(atPath: compact)[.size] as! Int
        #expect(compactSize < plainSize / 4)
        for path in [plain, compact] {
            let copy = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
            let copied = try copy.openDatabase(named: "d")
            try copy.read { txn throws in
                #expect(try copied.statistics(in: txn).entries == 100)
                #expect(try copied.value(forKey: bigEndianKey(2950), in: txn) == [UInt8](repeating: 1, count: 500))
            }
        }
        #expect(throws: LMDBError(rawValue: EEXIST)) { try environment.copy(to: plain) }
    }

    /// The free list counts the pages a delete gave back (what later writes reuse), and a compacting copy has none.
    @Test func freePagesAreThePagesADeleteGaveBack() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in for n in UInt16(0)..<3000 { try db.put([UInt8](repeating: 1, count: 500), forKey: bigEndianKey(n), in: txn) } }
        let leaves = try environment.read { txn in try db.statistics(in: txn).leafPages }
        try environment.write { txn throws in for n in UInt16(0)..<2900 { try db.delete(key: bigEndianKey(n), in: txn) } }
        // The delete freed most of the leaves; a write after it (so that no snapshot still needs them) keeps them listed.
        try environment.write { txn throws in try db.put([2], forKey: bigEndianKey(9999), in: txn) }
        let free = try environment.freePageCount(), lastPage = try environment.info().lastPageNumber
        #expect(free >= leaves * 9 / 10 && free < lastPage, "\(free) free of \(leaves) leaves")
        let compact = directory.file("free-compact.lmdb")
        try environment.copy(to: compact, compacting: true)
        #expect(try Environment.open(at: compact, options: .init { $0.isReadOnly = true }).freePageCount() == 0)
    }

    @Test func staleReaderCheckFindsNothingInAHealthyStore() throws {
        let environment = try directory.openStore()
        try environment.read { _ in }
        #expect(environment.clearStaleReaders() == 0)
    }
}
