import Foundation
import LMDB
import Testing

@Suite struct BadInputTests {
    let directory = TemporaryDirectory()

    @Test(arguments: [0, 512, 600, 10_000])
    func aKeyOutsideTheSizeLimitsIsRefusedAndNothingIsWritten(length: Int) throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        do {
            try environment.write { txn throws in
                try db.put([1], forKey: [UInt8](utf8: "fine"), in: txn)
                try db.put([1], forKey: [UInt8](repeating: 0x61, count: length), in: txn)
            }
            Issue.record("a \(length)-byte key was accepted")
        } catch let error as LMDBError {
            #expect(error == .badValueSize)
            #expect(error.database == "d")
            #expect(error.description.contains(length == 0 ? "must not be empty" : "\(length) bytes is longer than the 511-byte limit"))
        }
        try environment.read { txn throws in
            #expect(try db.statistics(in: txn).entries == 0, "the transaction with the bad key must commit nothing")
        }
    }

    @Test func aKeyOfExactlyTheMaximumSizeIsAccepted() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        let key = [UInt8](repeating: 0x62, count: 511)
        try environment.write { try db.put([1], forKey: key, in: $0) }
        try environment.read { txn throws in #expect(try db.value(forKey: key, in: txn) == [1]) }
    }

    @Test func aFileThatIsNotAStoreIsRejectedAndLeftAlone() throws {
        let path = directory.file("notes.txt")
        let text = Array(String(repeating: "These are not LMDB pages. ", count: 400).utf8)
        #expect(FileManager.default.createFile(atPath: path, contents: Data(text)))
        do {
            _ = try Environment.open(at: path)
            Issue.record("a text file opened as a store")
        } catch let error as LMDBError {
            #expect(error == .invalid)
            #expect(error.path == path)
            #expect(error.description.contains("not an LMDB store"))
        }
        #expect(FileManager.default.contents(atPath: path) == Data(text))
    }

    @Test func aTinyForeignFileIsRejected() throws {
        let path = directory.file("tiny")
        #expect(FileManager.default.createFile(atPath: path, contents: Data([1, 2, 3])))
        #expect(throws: LMDBError.invalid) { try Environment.open(at: path) }
    }

    @Test func aTruncatedStoreIsAnErrorNotACrash() throws {
        let path = directory.file("truncated.lmdb")
        do {
            let environment = try Environment.open(at: path)
            let db = try environment.openDatabase(named: "d")
            try environment.write { txn throws in for n in UInt16(0)..<2000 { try db.put([UInt8](repeating: 9, count: 200), forKey: bigEndianKey(n), in: txn) } }
        }
        let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int
        #expect(truncate(path, off_t(size / 2)) == 0)
        do {
            _ = try Environment.open(at: path)
            Issue.record("a truncated store opened")
        } catch let error as LMDBError {
            #expect(error == .corrupted)
            #expect(error.description.contains("truncated"))
            #expect(error.path == path)
        }
    }

    /// LMDB writes transaction n's meta page to page n % 2 and opens the file at the page with the larger id, so a
    /// damaged id in the older page would silently roll the file back to an old tree (issue 23). The pair is checked.
    @Test func metaPagesWithTransactionIdsLMDBNeverWritesAreRefused() throws {
        let path = directory.file("meta.lmdb")
        do {
            let environment = try Environment.open(at: path)
            let db = try environment.openDatabase(named: "d")
            for n in UInt16(0)..<5 { try environment.write { try db.put([1], forKey: bigEndianKey(n), in: $0) } }
        }
        let healthy = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        func load(_ offset: Int) -> UInt64 { healthy.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self) } }
        let pageSize = Int(healthy.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 40, as: UInt32.self) })
        let ids = [load(144), load(pageSize + 144)]
        #expect(ids[0] % 2 == 0 && ids[1] % 2 == 1 && max(ids[0], ids[1]) - min(ids[0], ids[1]) == 1, "LMDB writes what the check expects: \(ids)")
        let older = ids[0] < ids[1] ? 0 : pageSize
        let newer = older == 0 ? pageSize : 0
        func damaged(_ change: (inout [UInt8]) -> Void) throws -> String {
            var bytes = healthy
            change(&bytes)
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let error = #expect(throws: LMDBError.self) { _ = try Environment.open(at: path) }
            #expect(error == .corrupted)
            #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: path))) == bytes, "the refused file is left as it was")
            return error?.description ?? ""
        }
        func setID(_ bytes: inout [UInt8], _ page: Int, _ id: UInt64) {
            bytes.withUnsafeMutableBytes { $0.storeBytes(of: id, toByteOffset: page + 144, as: UInt64.self) }
        }
        // The older page raised past the newer: LMDB would open the old tree as the newest state.
        let rolledBack = try damaged { setID(&$0, older, min(ids[0], ids[1]) + 4) }
        #expect(rolledBack.contains("meta pages are damaged: page 0 names transaction"), "\(rolledBack)")
        // One bit of the newer id: the wrong page for its parity.
        _ = try damaged { setID(&$0, newer, max(ids[0], ids[1]) ^ 1) }
        // The newer raised far ahead.
        _ = try damaged { setID(&$0, newer, max(ids[0], ids[1]) + 1 << 20) }
        // Put back, the file opens with every entry.
        try Data(healthy).write(to: URL(fileURLWithPath: path))
        let environment = try Environment.open(at: path)
        let db = try environment.openDatabase(named: "d", create: false)
        #expect(try environment.read { try db.statistics(in: $0).entries } == 5)
        // A new file (both pages 0) and a compacted copy (0 and 1) open too.
        let copy = directory.file("copy.lmdb")
        try environment.copy(to: copy, compacting: true)
        #expect(throws: Never.self) { _ = try Environment.open(at: copy) }
        let new = directory.file("new.lmdb")
        #expect(throws: Never.self) {
            _ = try Environment.open(at: new)
            _ = try Environment.open(at: new)  // now checked: both pages hold 0
        }
    }

    @Test func openingAMissingStoreReadOnlyFailsAndCreatesNothing() throws {
        let path = directory.file("missing.lmdb")
        do {
            _ = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
            Issue.record("a missing store opened read-only")
        } catch let error as LMDBError {
            #expect(error == .noSuchFile)
            #expect(error.path == path)
            #expect(error.description.contains("no store here"))
        }
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(!FileManager.default.fileExists(atPath: path + "-lock"))
    }

    @Test func aMissingDatabaseInAReadOnlyStoreIsNamedInTheError() throws {
        let path = directory.file("ro.lmdb")
        do {
            let environment = try Environment.open(at: path)
            _ = try environment.openDatabase(named: "present")
        }
        let readOnly = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
        _ = try readOnly.openDatabase(named: "present")
        do {
            _ = try readOnly.openDatabase(named: "absent")
            Issue.record("a missing database opened in a read-only store")
        } catch let error as LMDBError {
            #expect(error == .notFound)
            #expect(error.database == "absent")
            #expect(error.description.contains("\"absent\" does not exist"))
        }
    }

    @Test func anErrorsDescriptionNamesTheCodeAndLMDBsReason() {
        let error = LMDBError(.mapFull, path: "/tmp/x.lmdb", database: "rows", message: "while saving")
        #expect(error.description == "while saving — MDB_MAP_FULL: Environment mapsize limit reached (database \"rows\") [/tmp/x.lmdb]")
        // A system error's explanation is the system's, after the code's name.
        #expect(LMDBError(rawValue: EISDIR).description == "EISDIR: Is a directory")
        #expect(!(LMDBError.notFound ~= error))
        #expect(LMDBError.mapFull ~= error)
    }
}
